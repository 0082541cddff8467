//! The dense masked array type.

use crate::compiled;
use masked_core::{
    not_nan_words, wrap_dim, BitMask, BoolArray, Dims, Element, Fold, LaneMap, LaneStat,
    MaskedError, MaskedReduce, ReducePlan, Result,
};
use masked_core::{try_vec, Bits, LaneGrad, Upstream};
// named by the docs' links
#[allow(unused_imports)]
use masked_core::MaskedOps;
use ndarray::{ArrayBase, ArrayD, Data, Dimension, IxDyn, OwnedRepr, RawData, ViewRepr};

/// Checks that `grad` takes the upstream kind `want` and that `g` has the shape `shape`
/// (the forward output's).
pub(crate) fn check_upstream<G: LaneGrad>(
    grad: &G, want: Upstream, g: &[usize], shape: &[usize],
) -> Result<()> {
    if grad.upstream() != want {
        return Err(MaskedError::InvalidArgument {
            name: "gradient",
            value: grad.name().to_string(),
            reason: match want {
                Upstream::PerLane => "takes one upstream value per element: a map's VJP",
                Upstream::PerElement => "takes one upstream value per lane: a reduction's VJP",
            },
        });
    }
    if g != shape {
        return Err(MaskedError::ShapeMismatch {
            what: format!(
                "the upstream gradient of {} and the op's output",
                grad.name()
            ),
            left: g.to_vec(),
            right: shape.to_vec(),
        });
    }
    Ok(())
}

/// The saved forward output's values in row-major order when the op reads them (empty
/// otherwise), after checking its shape against the output's.
pub(crate) fn saved_values<'a, G: LaneGrad, R: Element, S: Data<Elem = R>, E: Dimension>(
    grad: &G, saved: Option<&'a MaskedArray<S, E>>, want: &[usize],
) -> Result<std::borrow::Cow<'a, [R]>> {
    match saved {
        Some(y) if grad.uses_output() => {
            if y.shape() != want {
                return Err(MaskedError::ShapeMismatch {
                    what: format!("the saved output of {} and the op's output", grad.name()),
                    left: y.shape().to_vec(),
                    right: want.to_vec(),
                });
            }
            Ok(y.row_major())
        }
        _ => Ok(std::borrow::Cow::Borrowed(&[])),
    }
}

/// A dense array with an optional validity mask (`true` = valid).
///
/// The mask is bit-packed in the array's logical row-major order and always has the
/// array's shape: a smaller mask is broadcast (NumPy rules) when attached. No mask means
/// every element is valid.
pub struct MaskedArray<S: RawData, D: Dimension> {
    data: ArrayBase<S, D>,
    mask: Option<BitMask>,
}

impl<S: Data, D: Dimension> std::fmt::Debug for MaskedArray<S, D>
where
    S::Elem: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaskedArray")
            .field("data", &self.data)
            .field("mask", &self.mask)
            .finish()
    }
}

impl<S: ndarray::RawDataClone, D: Dimension> Clone for MaskedArray<S, D> {
    fn clone(&self) -> Self {
        MaskedArray {
            data: self.data.clone(),
            mask: self.mask.clone(),
        }
    }
}

/// An owned masked array of any rank: what reductions return.
pub type MaskedArrayD<T> = MaskedArray<OwnedRepr<T>, IxDyn>;
/// A masked array over a borrowed `ndarray` view (zero-copy).
pub type MaskedView<'a, T, D> = MaskedArray<ViewRepr<&'a T>, D>;

impl<S: RawData, D: Dimension> MaskedArray<S, D> {
    /// An array with no mask: every element is valid.
    pub fn unmasked(data: ArrayBase<S, D>) -> Self {
        MaskedArray { data, mask: None }
    }

    /// An array with a bit mask, broadcast to the data's shape.
    ///
    /// # Errors
    /// [`MaskedError::MaskRank`] or [`MaskedError::MaskNotBroadcastable`].
    pub fn new(data: ArrayBase<S, D>, mask: BitMask) -> Result<Self> {
        let mask = if mask.shape() == data.shape() {
            mask
        } else {
            mask.broadcast_to(data.shape())?
        };
        Ok(MaskedArray {
            data,
            mask: Some(mask),
        })
    }

    /// An array with a mask given as a bool array (owned, a view or a reference) of any
    /// shape that broadcasts to the data's.
    ///
    /// # Errors
    /// As [`MaskedArray::new`].
    pub fn from_bool_mask(data: ArrayBase<S, D>, mask: impl BoolArray) -> Result<Self> {
        Self::new(data, BitMask::from_array(mask)?)
    }

    /// The values (including those at masked-out positions).
    pub fn values(&self) -> &ArrayBase<S, D> {
        &self.data
    }
    /// The mask, if any (always of the data's shape).
    pub fn mask(&self) -> Option<&BitMask> {
        self.mask.as_ref()
    }
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        self.data.shape()
    }
    /// The mask as bools in row-major order (all true when there is no mask).
    pub fn mask_vec(&self) -> Vec<bool> {
        match &self.mask {
            Some(m) => m.to_vec(),
            None => vec![true; self.data.len()],
        }
    }
    /// The mask as a bool array of the data's shape (all true when there is no mask).
    pub fn mask_array(&self) -> ndarray::Array<bool, D> {
        ndarray::Array::from_shape_vec(self.data.raw_dim(), self.mask_vec())
            .expect("mask length equals the data's element count")
    }
    /// The same array with a static dimension type (`Ix1`, `Ix2`, ...): a reduction
    /// returns [`MaskedArrayD`] since its rank depends on `dims` and `keepdim`; where the
    /// caller knows it, one call gives the typed array.
    ///
    /// # Errors
    /// [`MaskedError::InvalidArgument`] when the rank is not `D2`'s.
    ///
    /// ```
    /// use masked::prelude::*;
    /// use ndarray::{Array3, Ix2};
    /// let x = MaskedArray::unmasked(Array3::<f32>::ones((2, 3, 4)));
    /// let s = x.sum(1, false)?.into_dimensionality::<Ix2>()?;
    /// assert_eq!(s.values().dim(), (2, 4));
    /// # Ok::<(), MaskedError>(())
    /// ```
    pub fn into_dimensionality<D2: Dimension>(self) -> Result<MaskedArray<S, D2>> {
        let ndim = self.data.ndim();
        let data =
            self.data
                .into_dimensionality::<D2>()
                .map_err(|_| MaskedError::InvalidArgument {
                    name: "dimension",
                    value: format!("a {ndim}-d array"),
                    reason: "the array's rank is not the requested dimension type's",
                })?;
        Ok(MaskedArray {
            data,
            mask: self.mask,
        })
    }

    /// The values and the mask.
    pub fn into_parts(self) -> (ArrayBase<S, D>, Option<BitMask>) {
        (self.data, self.mask)
    }
}

impl<T: Element, S: Data<Elem = T>, D: Dimension> MaskedArray<S, D> {
    /// A zero-copy masked view of this array.
    pub fn view(&self) -> MaskedView<'_, T, D> {
        MaskedArray {
            data: self.data.view(),
            mask: self.mask.clone(),
        }
    }

    /// This array with the extra mask `!is_nan(x)` ANDed into its mask (the nan-family;
    /// users call [`MaskedReduce::without_nans`]).
    pub(crate) fn and_not_nan(&self) -> MaskedView<'_, T, D> {
        let words = not_nan_words(&self.row_major(), self.mask.as_ref().map(BitMask::words));
        MaskedArray {
            data: self.data.view(),
            mask: Some(
                BitMask::from_words(self.data.shape(), words).expect("a word per 64 elements"),
            ),
        }
    }
}

impl<T: Element, S: Data<Elem = T>, D: Dimension> MaskedArray<S, D> {
    /// The values in row-major order: borrowed when the array is in standard layout,
    /// copied otherwise.
    pub(crate) fn row_major(&self) -> std::borrow::Cow<'_, [T]> {
        masked_core::gather::row_major_values(&self.data)
    }

    /// An owned result with an output mask, of this array's dimension type (a map keeps
    /// the shape).
    fn build_like<O: Element>(
        &self, values: Vec<O>, mask: BitMask,
    ) -> Result<MaskedArray<OwnedRepr<O>, D>> {
        let data = ndarray::Array::from_shape_vec(self.data.raw_dim(), values)
            .map_err(|e| MaskedError::InvalidData(e.to_string()))?;
        Ok(MaskedArray {
            data,
            mask: Some(mask),
        })
    }

    /// A gradient: `kernel` fills a zeroed output of this array's size from the values in
    /// row-major order and the mask bits; the result has this array's mask.
    fn grad_with(
        &self, kernel: impl FnOnce(&[T], Option<Bits<'_>>, &mut [T::Real]),
    ) -> Result<MaskedArray<OwnedRepr<T::Real>, D>> {
        let n = self.data.len();
        // the size checked fallibly, then a lazily zeroed buffer on huge pages (the
        // kernels write only valid positions; a zeroing pass would fault every page)
        drop(try_vec::<T::Real>(n, || {
            format!("a gradient of {n} values")
        })?);
        let mut out = masked_kernels::fresh_vec::<T::Real>(n);
        let xs = self.row_major();
        kernel(&xs, self.mask.as_ref().map(BitMask::bits), &mut out);
        let mask = self
            .mask
            .clone()
            .map_or_else(|| BitMask::filled(self.data.shape(), true), Ok)?;
        self.build_like(out, mask)
    }

    /// An owned result with an output mask.
    fn build<O: Element>(
        shape: &[usize], values: Vec<O>, mask: BitMask,
    ) -> Result<MaskedArrayD<O>> {
        let data = ArrayD::from_shape_vec(IxDyn(shape), values)
            .map_err(|e| MaskedError::InvalidData(e.to_string()))?;
        Ok(MaskedArray {
            data,
            mask: Some(mask),
        })
    }
}

impl<T: Element, S: Data<Elem = T>, D: Dimension> MaskedArray<S, D> {
    /// The VJP of `req` (a reduction, normalization or unary op, as
    /// [`MaskedOps::vjp_reduce`] and
    /// [`MaskedOps::vjp_map`] take them) written into
    /// `out`, a caller's buffer of this array's element count, row-major: every position
    /// is written (0 at invalid ones), and a training loop that reuses the buffer takes
    /// no fresh-page faults. The gradient's mask is this array's; `g` is shaped like the
    /// forward output. What the VJP needs of the forward pass is recomputed; see
    /// [`MaskedArray::vjp_saved_into`] to pass the forward output instead.
    ///
    /// ```
    /// use masked::by_name::OpRequest;
    /// use masked::prelude::*;
    /// use ndarray::array;
    /// let x = MaskedArray::from_bool_mask(
    ///     array![[1.0f64, 5.0, 5.0], [2.0, 9.0, 4.0]],
    ///     array![[true, true, true], [true, false, false]],
    /// )?;
    /// let g = MaskedArray::unmasked(array![1.0f64, 1.0].into_dyn());
    /// let mut dx = vec![f64::NAN; 6]; // overwritten everywhere
    /// x.vjp_into(&OpRequest::new("amax")?.dims(1), &g, &mut dx)?;
    /// assert_eq!(dx, [0.0, 0.5, 0.5, 1.0, 0.0, 0.0]);
    /// # Ok::<(), masked::MaskedError>(())
    /// ```
    ///
    /// # Errors
    /// As the convenience forms; [`MaskedError::InvalidData`] for a buffer of another
    /// length.
    pub fn vjp_into<S2: Data<Elem = T::Real>, E2: Dimension>(
        &self, req: &masked_core::OpRequest, g: &MaskedArray<S2, E2>, out: &mut [T::Real],
    ) -> Result<()> {
        self.vjp_saved_into::<S2, E2, OwnedRepr<T::Real>, IxDyn>(req, None, g, out)
    }

    /// [`MaskedArray::vjp_into`] given `saved`, the forward output of `req` on this
    /// array (or `None`: recompute), read as
    /// [`MaskedOps::vjp_reduce_saved`] and
    /// [`MaskedOps::vjp_map_saved`] read it.
    ///
    /// ```
    /// use masked::by_name::OpRequest;
    /// use masked::prelude::*;
    /// use ndarray::array;
    /// let x = MaskedArray::from_bool_mask(array![[0.0f64, 0.0, 7.0]], array![[true, true, false]])?;
    /// let y = x.softmax(1)?; // kept from the forward pass
    /// let g = MaskedArray::unmasked(array![[1.0f64, 0.0, 5.0]]);
    /// let mut dx = [f64::NAN; 3];
    /// x.vjp_saved_into(&OpRequest::new("softmax")?.dims(1), Some(&y), &g, &mut dx)?;
    /// assert_eq!(dx, [0.25, -0.25, 0.0]);
    /// # Ok::<(), masked::MaskedError>(())
    /// ```
    ///
    /// # Errors
    /// As [`MaskedArray::vjp_into`]; `saved` of another shape than the forward output.
    pub fn vjp_saved_into<S2, E2, S3, E3>(
        &self, req: &masked_core::OpRequest, saved: Option<&MaskedArray<S3, E3>>,
        g: &MaskedArray<S2, E2>, out: &mut [T::Real],
    ) -> Result<()>
    where
        S2: Data<Elem = T::Real>,
        E2: Dimension,
        S3: Data<Elem = T::Real>,
        E3: Dimension,
    {
        use masked_core::{check_grad, visit_grad, GradVisitor, Kind};
        check_grad::<T>(
            req,
            &[Kind::Reduce, Kind::ReduceOne, Kind::Normalize, Kind::Unary],
        )?;
        let n = self.data.len();
        if out.len() != n {
            return Err(MaskedError::InvalidData(format!(
                "{}: a gradient buffer of {} elements for an input of {n}",
                req.op.name(),
                out.len()
            )));
        }
        struct V<'a, T: Element, S3: Data<Elem = T::Real>, E3: Dimension> {
            req: &'a masked_core::OpRequest,
            shape: &'a [usize],
            xs: &'a [T],
            bits: Option<Bits<'a>>,
            g: &'a crate::grad::Periodic<'a, T::Real>,
            g_shape: &'a [usize],
            saved: Option<&'a MaskedArray<S3, E3>>,
            out: &'a mut [T::Real],
        }
        impl<T: Element, S3: Data<Elem = T::Real>, E3: Dimension> GradVisitor for V<'_, T, S3, E3> {
            type Out = ();
            fn visit<G: LaneGrad>(self, grad: &G) -> Result<()> {
                let V {
                    req,
                    shape,
                    xs,
                    bits,
                    g,
                    g_shape,
                    saved,
                    out,
                } = self;
                if grad.upstream() == Upstream::PerLane {
                    let plan = ReducePlan::new(shape, &req.dims, req.keepdim)?;
                    check_upstream(grad, Upstream::PerLane, g_shape, &plan.out_shape)?;
                    let yv = saved_values(grad, saved, &plan.out_shape)?;
                    let g = g.whole();
                    crate::grad::grad_reduce(grad, xs, bits, &plan, &g, &yv, out, false);
                } else {
                    let d = if req.op.kind() == masked_core::Kind::Unary {
                        shape.len().saturating_sub(1)
                    } else {
                        wrap_dim(req.one_dim()?, shape.len())?
                    };
                    check_upstream(grad, Upstream::PerElement, g_shape, shape)?;
                    let yv = saved_values(grad, saved, shape)?;
                    if shape.is_empty() {
                        // 0-d: one lane of one element
                        crate::grad::grad_map(grad, xs, bits, &[1], 0, g, &yv, out);
                    } else {
                        crate::grad::grad_map(grad, xs, bits, shape, d, g, &yv, out);
                    }
                }
                Ok(())
            }
        }
        let xs = self.row_major();
        let gv = crate::grad::Periodic::of(&g.data);
        visit_grad(
            req,
            V {
                req,
                shape: self.data.shape(),
                xs: &xs,
                bits: self.mask.as_ref().map(BitMask::bits),
                g: &gv,
                g_shape: g.shape(),
                saved,
                out,
            },
        )
    }
}

impl<T: Element, S: Data<Elem = T>, D: Dimension> MaskedReduce<T> for MaskedArray<S, D> {
    masked_core::reduce_types!(
        <O> MaskedArrayD<O>, MaskedArray<OwnedRepr<O>, D>, <'a> MaskedView<'a, T, D>
    );

    fn without_nans(&self) -> Result<MaskedView<'_, T, D>> {
        Ok(self.and_not_nan())
    }

    fn stat_lanes<St: LaneStat<T>>(
        &self, stat: &St, dims: &Dims, keepdim: bool,
    ) -> Result<MaskedArrayD<St::Output>> {
        let plan = ReducePlan::new(self.data.shape(), dims, keepdim)?;
        let (values, any) = match self.as_laid(&plan, keepdim)? {
            Some((xs, words, laid)) => {
                let bits = words.as_deref().map(|w| Bits::new(w, 0));
                compiled::stat_all(stat, xs, bits, &laid)
            }
            None => {
                let xs = self.row_major();
                let bits = self.mask.as_ref().map(BitMask::bits);
                compiled::stat_all(stat, &xs, bits, &plan)
            }
        };
        let mask = BitMask::from_bools(&plan.out_shape, any)?;
        Self::build(&plan.out_shape, values, mask)
    }

    fn map_lanes<M: LaneMap<T>>(
        &self, map: &M, dim: isize,
    ) -> Result<MaskedArray<OwnedRepr<M::Output>, D>> {
        let shape = self.data.shape().to_vec();
        let d = wrap_dim(dim, shape.len())?;
        let xs = self.row_major();
        let bits = self.mask.as_ref().map(BitMask::bits);
        let values = compiled::map_all(map, &xs, bits, &shape, d);
        let mask = self
            .mask
            .clone()
            .map_or_else(|| BitMask::filled(&shape, true), Ok)?;
        self.build_like(values, mask)
    }

    fn grad_reduced<G: LaneGrad>(
        &self, grad: &G, dims: &Dims, keepdim: bool, g: &MaskedArrayD<T::Real>,
        saved: Option<&MaskedArrayD<T::Real>>,
    ) -> Result<MaskedArray<OwnedRepr<T::Real>, D>> {
        let plan = ReducePlan::new(self.data.shape(), dims, keepdim)?;
        check_upstream(grad, Upstream::PerLane, g.shape(), &plan.out_shape)?;
        let gv = g.row_major();
        let yv = saved_values(grad, saved, &plan.out_shape)?;
        self.grad_with(|xs, bits, out| {
            crate::grad::grad_reduce(grad, xs, bits, &plan, &gv, &yv, out, true)
        })
    }

    fn grad_mapped<G: LaneGrad>(
        &self, grad: &G, dim: isize, g: &MaskedArray<OwnedRepr<T::Real>, D>,
        saved: Option<&MaskedArray<OwnedRepr<T::Real>, D>>,
    ) -> Result<MaskedArray<OwnedRepr<T::Real>, D>> {
        let shape = self.data.shape();
        check_upstream(grad, Upstream::PerElement, g.shape(), shape)?;
        let gv = g.row_major();
        let yv = saved_values(grad, saved, shape)?;
        // a 0-d input (a unary op's) is one lane of one element
        let (shape, d) = if shape.is_empty() && (dim == 0 || dim == -1) {
            (&[1][..], 0)
        } else {
            (shape, wrap_dim(dim, shape.len())?)
        };
        let gv = crate::grad::Periodic::once(gv);
        self.grad_with(|xs, bits, out| {
            crate::grad::grad_map(grad, xs, bits, shape, d, &gv, &yv, out)
        })
    }

    fn fold_lanes<F: Fold<T>>(
        &self, op: &F, dims: &Dims, keepdim: bool,
    ) -> Result<MaskedArrayD<F::Output>> {
        let (plan, states, any) = self.fold_plan_states(op, dims, keepdim)?;
        finish_fold(op, &plan, &states, any)
    }
}

impl<T: Element, S: Data<Elem = T>, D: Dimension> MaskedArray<S, D> {
    /// The unfinished, mergeable state of `op` on each lane of `dims` (a Dask chunk's
    /// partial state: [`Fold::merge`] states of the same lane from other chunks, then
    /// [`Fold::finish`]), in the reduced shape's row-major order, with that shape
    /// (`keepdim`: the reduced dims kept as 1). A lane with no valid element holds
    /// [`Fold::identity`].
    ///
    /// # Errors
    /// [`MaskedError::DimOutOfRange`] or [`MaskedError::DuplicateDim`] for a bad dim.
    pub fn fold_states<F: Fold<T>>(
        &self, op: &F, dims: &Dims, keepdim: bool,
    ) -> Result<(Vec<usize>, Vec<F::State>)> {
        let (plan, states, _) = self.fold_plan_states(op, dims, keepdim)?;
        Ok((plan.out_shape, states))
    }

    /// The plan of a fold over `dims`, each lane's state and whether it had a valid
    /// element.
    fn fold_plan_states<F: Fold<T>>(
        &self, op: &F, dims: &Dims, keepdim: bool,
    ) -> Result<(ReducePlan, Vec<F::State>, Vec<bool>)> {
        let plan = ReducePlan::new(self.data.shape(), dims, keepdim)?;
        // not over an F-ordered array's memory as it lies ([`Self::as_laid`]): a lane
        // folded as a row and as a column adds in different orders, and a view's sum
        // would differ in its last bits from its row-major copy's
        let xs = self.row_major();
        let bits = self.mask.as_ref().map(BitMask::bits);
        let (states, any) = compiled::fold_all(op, &xs, bits, &plan, 0);
        Ok((plan, states, any))
    }

    /// A lane statistic of a 2-D array in F order (its transpose in standard layout:
    /// numpy's `x.T`, a pandas frame's values) over its memory as it lies: the values
    /// borrowed, the mask's bits transposed to match (an eighth of the values' bytes for
    /// `f32`, moved 64 x 64 bits at a time) and the reduction planned over the
    /// transpose's dims. With one of the two dims reduced its lanes hold the same
    /// values in the same order (a lane over both would hold them in column order:
    /// another median index), which a statistic (a selection) reads whole, so the
    /// results are the same bits, in the same order. `None` for any other array (read
    /// in row-major order) or reduction.
    #[allow(clippy::type_complexity)]
    fn as_laid(
        &self, plan: &ReducePlan, keepdim: bool,
    ) -> Result<Option<(&[T], Option<Vec<u64>>, ReducePlan)>> {
        let shape = self.data.shape();
        if shape.len() != 2
            || self.data.as_slice().is_some()
            || plan.reduced.iter().filter(|&&r| r).count() != 1
            || self.mask.as_ref().is_some_and(|m| m.shape() != shape)
        {
            return Ok(None);
        }
        let Some(xs) = self.data.view().into_dyn().reversed_axes().to_slice() else {
            return Ok(None);
        };
        let dims: Vec<usize> = (0..2).filter(|&k| plan.reduced[1 - k]).collect();
        let laid = ReducePlan::new(&[shape[1], shape[0]], &Dims::from(dims), keepdim)?;
        let words = self
            .mask
            .as_ref()
            .map(|m| masked_kernels::bits::transpose_bits(m.words(), shape[0], shape[1]));
        Ok(Some((xs, words, laid)))
    }
}

/// The reduced array of a fold from its lanes' states and whether each lane had a
/// valid element (the output mask, unless the op is valid everywhere).
pub(crate) fn finish_fold<O: Element, F: Fold<O>>(
    op: &F, plan: &ReducePlan, states: &[F::State], any: Vec<bool>,
) -> Result<MaskedArrayD<F::Output>> {
    let values: Vec<F::Output> = states.iter().map(|s| op.finish(s)).collect();
    let mask = if op.valid_everywhere() {
        BitMask::filled(&plan.out_shape, true)?
    } else {
        BitMask::from_bools(&plan.out_shape, any)?
    };
    let data = ArrayD::from_shape_vec(IxDyn(&plan.out_shape), values)
        .map_err(|e| MaskedError::InvalidData(e.to_string()))?;
    Ok(MaskedArray {
        data,
        mask: Some(mask),
    })
}

/// Serialised (serde) as `{"values": <ndarray's form>, "mask": <BitMask> | null}`; any
/// storage serialises, an owned array deserialises. Each value goes through
/// `masked::Num` (in JSON and other text formats a valid NaN is `"NaN"`, an
/// infinity `"inf"` or `"-inf"`), and a value under a false mask bit, which carries no
/// meaning, is written as 0: whatever is written reads back.
impl<S: Data, D: Dimension + serde::Serialize> serde::Serialize for MaskedArray<S, D>
where
    S::Elem: Element,
{
    fn serialize<Se: serde::Serializer>(&self, s: Se) -> std::result::Result<Se::Ok, Se::Error> {
        use serde::ser::SerializeStruct;
        let values = self
            .filled(<S::Elem as Element>::ZERO)
            .mapv(masked_core::Num);
        let mut st = s.serialize_struct("MaskedArray", 2)?;
        st.serialize_field("values", &values)?;
        st.serialize_field("mask", &self.mask)?;
        st.end()
    }
}

/// Deserialising re-validates: the mask must broadcast to the values' shape
/// ([`MaskedArray::new`]), and the mask itself is checked as [`BitMask`]'s form is.
impl<'de, T, D> serde::Deserialize<'de> for MaskedArray<ndarray::OwnedRepr<T>, D>
where
    T: Element,
    D: Dimension + serde::Deserialize<'de>,
{
    fn deserialize<De: serde::Deserializer<'de>>(d: De) -> std::result::Result<Self, De::Error> {
        use serde::de::Error;
        #[derive(serde::Deserialize)]
        #[serde(bound(deserialize = "T: Element, D: Dimension + serde::Deserialize<'de>"))]
        struct Repr<T, D: Dimension> {
            values: ndarray::Array<masked_core::Num<T>, D>,
            mask: Option<BitMask>,
        }
        let r = Repr::<T, D>::deserialize(d)?;
        let values = r.values.mapv(|n| n.0);
        match r.mask {
            Some(m) => MaskedArray::new(values, m).map_err(De::Error::custom),
            None => Ok(MaskedArray::unmasked(values)),
        }
    }
}
