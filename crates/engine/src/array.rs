//! [`Array`]: a masked array of any layout and any dtype, and [`ArrayRef`], its borrowed
//! form on which every op runs by name. The one place where a run-time dtype and layout
//! meet the typed engine: each match over them is written here once, compiled once in
//! this crate, and every consumer (the CLI, `masked bench`, the sweep, the test crates, a
//! Python extension) calls these non-generic functions.
//!
//! ```
//! use masked::engine::{Array, OpRequest, Output};
//! use masked::{BitMask, DynVec};
//!
//! let mask = BitMask::from_bools([2, 3], [true, true, false, true, false, true])?;
//! let x = Array::dense(&[2, 3], DynVec::F32(vec![1.0, 2.0, 9.0, 4.0, 9.0, 6.0]), Some(mask))?;
//! let Output::Dense(out) = x.view()?.apply(&OpRequest::new("sum")?.dims(1))? else {
//!     unreachable!("a dense input gives a dense output")
//! };
//! assert_eq!(out.values, DynVec::F32(vec![3.0, 10.0]));
//! # Ok::<(), masked::MaskedError>(())
//! ```

pub use crate::by_name::Output;
pub use crate::by_name::ZipOutput;
use crate::by_name::{self, BinOp, ByNameSparse, Convert, Kind, OpRequest, Outcome, SparseOutcome};
use layout_coo::{CooMask, MaskedCoo};
use layout_csr::{CsrIndex, CsrMask, MaskedCsr};
use layout_dense::{MaskedArray, MaskedArrayD, MaskedView, OutMask, WriteInto};
use masked_core::registry::apply_to;
use masked_core::{
    with_by_dtype, BitMask, ByDType, DType, DynVec, Element, EntriesInto, Family, FamilyMap,
    MaskRule, MaskedError, MaskedOps, ReducePlan, Ref, Result, Scalar, SliceMutOf, SliceOf,
    SlotMask, SparseArray, Splat, VecOf,
};
use ndarray::{ArrayD, IxDyn};
use sprs::{CsMat, SpIndex};
use std::marker::PhantomData;

/// The dense family: an owned [`MaskedArrayD`].
pub struct DenseOf;
impl Family for DenseOf {
    type Of<T: Element> = MaskedArrayD<T>;
}

/// An owned CSR matrix and its mask: what a [`MaskedCsr`] borrows.
#[derive(Debug, Clone)]
pub struct CsrParts<T> {
    /// The matrix (`usize` indices: the engine's one CSR index type).
    pub mat: CsMat<T>,
    /// Its mask.
    pub mask: CsrMask,
}

/// The CSR family: [`CsrParts`].
pub struct CsrOf;
impl Family for CsrOf {
    type Of<T: Element> = CsrParts<T>;
}

/// The COO family: an owned [`MaskedCoo`].
pub struct CooOf;
impl Family for CooOf {
    type Of<T: Element> = MaskedCoo<T>;
}

/// The dense view family: a [`MaskedView`] of any rank.
pub struct DenseViewOf<'a>(PhantomData<&'a ()>);
impl<'a> Family for DenseViewOf<'a> {
    type Of<T: Element> = MaskedView<'a, T, IxDyn>;
}

/// The CSR view family: a [`MaskedCsr`] with column indices of type `I` (`usize`, or
/// `u32` where the caller holds 32-bit indices: scipy's int32, the bench's matrices).
pub struct CsrViewOf<'a, I = usize>(PhantomData<&'a I>);
impl<'a, I: CsrIndex> Family for CsrViewOf<'a, I> {
    type Of<T: Element> = MaskedCsr<'a, T, I, usize>;
}

/// A masked array of any layout and any dtype, owning its values, mask and (sparse)
/// positions: the dtype-erased value of the engine (as candle's `Storage` or polars'
/// `Series`). Build one with [`Array::dense`], [`Array::csr`] or [`Array::coo`] (each
/// validates), then run ops on [`Array::view`].
pub enum Array {
    /// Dense values with an optional bit mask.
    Dense(ByDType<DenseOf>),
    /// A CSR matrix with its mask.
    Csr(ByDType<CsrOf>),
    /// An n-D COO array with its mask.
    Coo(ByDType<CooOf>),
}

/// An [`Array`] borrowed as the typed engine's inputs: what every op runs on. Making
/// one resolves a CSR input's separate mask pattern onto its values (once, not per op).
pub enum ArrayRef<'a> {
    /// A dense view.
    Dense(ByDType<DenseViewOf<'a>>),
    /// A masked CSR matrix.
    Csr(ByDType<CsrViewOf<'a>>),
    /// A masked CSR matrix with `u32` column indices (held by the caller: no copy).
    Csr32(ByDType<CsrViewOf<'a, u32>>),
    /// A masked COO array.
    Coo(ByDType<Ref<'a, CooOf>>),
}

struct ToDense<'s>(&'s [usize], Option<BitMask>);
impl FamilyMap<VecOf, DenseOf> for ToDense<'_> {
    fn map<T: Element>(&self, v: Vec<T>) -> Result<MaskedArrayD<T>> {
        let data = ArrayD::from_shape_vec(IxDyn(self.0), v)
            .map_err(|e| MaskedError::InvalidData(format!("values for shape {:?}: {e}", self.0)))?;
        match &self.1 {
            Some(m) => MaskedArray::new(data, m.clone()),
            None => Ok(MaskedArray::unmasked(data)),
        }
    }
}

struct ToCsr {
    shape: (usize, usize),
    indptr: Vec<usize>,
    indices: Vec<usize>,
    mask: CsrMask,
}
impl FamilyMap<VecOf, CsrOf> for ToCsr {
    fn map<T: Element>(&self, v: Vec<T>) -> Result<CsrParts<T>> {
        let mat = CsMat::try_new(self.shape, self.indptr.clone(), self.indices.clone(), v)
            .map_err(|(_, _, _, e)| MaskedError::InvalidData(format!("CSR matrix: {e}")))?;
        Ok(CsrParts {
            mat,
            mask: self.mask.clone(),
        })
    }
}

struct ToCoo<'s> {
    shape: &'s [usize],
    coords: &'s [Vec<usize>],
    mask: CooMask,
}
impl FamilyMap<VecOf, CooOf> for ToCoo<'_> {
    fn map<T: Element>(&self, v: Vec<T>) -> Result<MaskedCoo<T>> {
        MaskedCoo::try_new(self.shape, self.coords, v, self.mask.clone())
    }
}

struct ViewDense;
impl<'a> FamilyMap<Ref<'a, DenseOf>, DenseViewOf<'a>> for ViewDense {
    fn map<T: Element>(&self, a: &'a MaskedArrayD<T>) -> Result<MaskedView<'a, T, IxDyn>> {
        Ok(a.view())
    }
}

struct ViewCsr;
impl<'a> FamilyMap<Ref<'a, CsrOf>, CsrViewOf<'a>> for ViewCsr {
    fn map<T: Element>(&self, p: &'a CsrParts<T>) -> Result<MaskedCsr<'a, T>> {
        MaskedCsr::new(&p.mat, p.mask.clone())
    }
}

impl Array {
    /// A dense array of `shape` over row-major `values`, with a mask that broadcasts to
    /// the shape (`None`: every element valid).
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] for a value count other than the shape's; a mask
    /// that does not broadcast.
    pub fn dense(shape: &[usize], values: DynVec, mask: Option<BitMask>) -> Result<Array> {
        Ok(Array::Dense(
            ByDType::from(values).try_map(&ToDense(shape, mask))?,
        ))
    }

    /// A CSR matrix from its parts (sorted, distinct column indices per row) and a mask:
    /// its own stored pattern, a separate pattern, or none.
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] naming what is wrong with the parts; a mask pattern of
    /// another shape.
    pub fn csr(
        shape: (usize, usize), indptr: Vec<usize>, indices: Vec<usize>, values: DynVec,
        mask: CsrMask,
    ) -> Result<Array> {
        let a = Array::Csr(ByDType::from(values).try_map(&ToCsr {
            shape,
            indptr,
            indices,
            mask,
        })?);
        // a mask pattern of another shape fails here, not at the first op
        a.view()?;
        Ok(a)
    }

    /// An n-D COO array from coordinates (one vector per dim, entries in any order, no
    /// repeated position) and values, with a mask.
    ///
    /// # Errors
    /// As [`MaskedCoo::try_new`].
    pub fn coo(
        shape: &[usize], coords: &[Vec<usize>], values: DynVec, mask: CooMask,
    ) -> Result<Array> {
        Ok(Array::Coo(ByDType::from(values).try_map(&ToCoo {
            shape,
            coords,
            mask,
        })?))
    }

    /// A typed dense array, erased (no copy).
    pub fn from_dense<T: Element>(a: MaskedArrayD<T>) -> Array {
        Array::Dense(T::erase::<DenseOf>(a))
    }

    /// A typed CSR matrix and mask, erased (no copy).
    pub fn from_csr<T: Element>(a: CsrParts<T>) -> Array {
        Array::Csr(T::erase::<CsrOf>(a))
    }

    /// A typed COO array, erased (no copy).
    pub fn from_coo<T: Element>(a: MaskedCoo<T>) -> Array {
        Array::Coo(T::erase::<CooOf>(a))
    }

    /// The value type.
    pub fn dtype(&self) -> DType {
        match self {
            Array::Dense(a) => a.dtype(),
            Array::Csr(a) => a.dtype(),
            Array::Coo(a) => a.dtype(),
        }
    }

    /// The layout's name: `dense`, `csr` or `coo`.
    pub fn layout(&self) -> &'static str {
        match self {
            Array::Dense(_) => "dense",
            Array::Csr(_) => "csr",
            Array::Coo(_) => "coo",
        }
    }

    /// The shape.
    pub fn shape(&self) -> Vec<usize> {
        match self {
            Array::Dense(a) => with_by_dtype!(a, T, x => x.shape().to_vec()),
            Array::Csr(a) => with_by_dtype!(a, T, x => vec![x.mat.rows(), x.mat.cols()]),
            Array::Coo(a) => with_by_dtype!(a, T, x => x.shape().to_vec()),
        }
    }

    /// Stored entries (dense: every element).
    pub fn nnz(&self) -> usize {
        match self {
            Array::Dense(a) => with_by_dtype!(a, T, x => x.values().len()),
            Array::Csr(a) => with_by_dtype!(a, T, x => x.mat.nnz()),
            Array::Coo(a) => with_by_dtype!(a, T, x => x.values().len()),
        }
    }

    /// The array borrowed as the engine's typed inputs (a CSR input's separate mask is
    /// resolved onto its values here, once).
    ///
    /// # Errors
    /// A CSR mask pattern of another shape.
    pub fn view(&self) -> Result<ArrayRef<'_>> {
        Ok(match self {
            Array::Dense(a) => ArrayRef::Dense(a.as_ref().try_map(&ViewDense)?),
            Array::Csr(a) => ArrayRef::Csr(a.as_ref().try_map(&ViewCsr)?),
            Array::Coo(a) => ArrayRef::Coo(a.as_ref()),
        })
    }
}

/// Runs `req` on the typed input `x` (of whichever layout the match gave) and wraps the
/// result; written once for every layout.
macro_rules! on_layout {
    ($self:expr, $T:ident, $x:ident => $body:expr) => {
        match $self {
            ArrayRef::Dense(a) => with_by_dtype!(a, $T, $x => $body),
            ArrayRef::Csr(a) => with_by_dtype!(a, $T, $x => $body),
            ArrayRef::Csr32(a) => with_by_dtype!(a, $T, $x => $body),
            ArrayRef::Coo(a) => with_by_dtype!(a, $T, y => { let $x = *y; $body }),
        }
    };
}

impl<'a> ArrayRef<'a> {
    /// A typed dense view, erased (no copy).
    pub fn from_dense<T: Element>(a: MaskedView<'a, T, IxDyn>) -> Self {
        ArrayRef::Dense(T::erase::<DenseViewOf<'a>>(a))
    }

    /// A typed masked CSR matrix, erased (no copy).
    pub fn from_csr<T: Element>(a: MaskedCsr<'a, T>) -> Self {
        ArrayRef::Csr(T::erase::<CsrViewOf<'a>>(a))
    }

    /// A typed masked CSR matrix with `u32` column indices, erased (no copy).
    pub fn from_csr32<T: Element>(a: MaskedCsr<'a, T, u32, usize>) -> Self {
        ArrayRef::Csr32(T::erase::<CsrViewOf<'a, u32>>(a))
    }

    /// A typed COO array, erased (no copy).
    pub fn from_coo<T: Element>(a: &'a MaskedCoo<T>) -> Self {
        ArrayRef::Coo(T::erase::<Ref<'a, CooOf>>(a))
    }

    /// The value type.
    pub fn dtype(&self) -> DType {
        match self {
            ArrayRef::Dense(a) => a.dtype(),
            ArrayRef::Csr(a) => a.dtype(),
            ArrayRef::Csr32(a) => a.dtype(),
            ArrayRef::Coo(a) => a.dtype(),
        }
    }

    /// Runs the op of `req` (any op of the registry but the binary ones, with its dims,
    /// keepdim, options and `dtype=`).
    ///
    /// # Errors
    /// The op's own errors (bad dims, bad option values, a cast the target cannot hold).
    pub fn apply(&self, req: &OpRequest) -> Result<Output> {
        let out = self.apply_rows(req)?;
        self.flat(out)
    }

    /// [`ArrayRef::apply`], a sparse map's result kept in its layout's form: CSR rows
    /// ([`Output::Csr`]; no column indices at all where the result stores exactly the
    /// input's entries, [`CsrCols::Input`](crate::CsrCols::Input)), a COO pattern
    /// ([`Output::Coo`]; a map's shares its input's coordinates). No flat positions are
    /// computed.
    ///
    /// # Errors
    /// As [`ArrayRef::apply`].
    pub fn apply_rows(&self, req: &OpRequest) -> Result<Output> {
        Ok(match self {
            ArrayRef::Dense(a) => Output::Dense(with_by_dtype!(a, T, x => by_name::apply(x, req))?),
            ArrayRef::Csr(a) => with_by_dtype!(a, T, x => by_name::apply(x, req))?,
            ArrayRef::Csr32(a) => with_by_dtype!(a, T, x => by_name::apply(x, req))?,
            ArrayRef::Coo(a) => with_by_dtype!(a, T, x => by_name::apply(*x, req))?,
        })
    }

    /// `out` (a result of this array) with CSR rows and a COO pattern as flat positions.
    fn flat(&self, out: Output) -> Result<Output> {
        match out {
            Output::Csr(_) => {}
            Output::Coo(c) => return Ok(Output::Sparse(c.flat())),
            other => return Ok(other),
        }
        Ok(Output::Sparse(match self {
            ArrayRef::Csr(a) => with_by_dtype!(a, T, x => x.to_sparse(out))?,
            ArrayRef::Csr32(a) => with_by_dtype!(a, T, x => x.to_sparse(out))?,
            _ => {
                return Err(MaskedError::InvalidData(
                    "CSR rows from an array of another layout".into(),
                ))
            }
        }))
    }

    /// Runs the op of `req` and drops its typed result unconverted: what a benchmark
    /// times (no copy into an [`Output`]). A request with a `dtype=` other than the
    /// input's times the cast too.
    ///
    /// # Errors
    /// As [`ArrayRef::apply`].
    pub fn run(&self, req: &OpRequest) -> Result<()> {
        if req.dtype.is_some_and(|d| d != self.dtype()) {
            return self.apply(req).map(drop);
        }
        on_layout!(self, T, x => apply_to(x, req, &Convert::DROP).map(drop))
    }

    /// The values cast to `dtype` (mask and positions kept).
    ///
    /// # Errors
    /// [`MaskedError::CastOutOfRange`] where a valid value has no `dtype` value.
    pub fn cast(&self, dtype: DType) -> Result<Output> {
        let out = self.cast_rows(dtype)?;
        self.flat(out)
    }

    /// [`ArrayRef::cast`], a sparse result kept in its layout's form, as
    /// [`ArrayRef::apply_rows`] keeps it.
    ///
    /// # Errors
    /// As [`ArrayRef::cast`].
    pub fn cast_rows(&self, dtype: DType) -> Result<Output> {
        Ok(match self {
            ArrayRef::Dense(a) => {
                Output::Dense(with_by_dtype!(a, T, x => by_name::cast(x, dtype))?)
            }
            ArrayRef::Csr(a) => with_by_dtype!(a, T, x => by_name::cast(x, dtype))?,
            ArrayRef::Csr32(a) => with_by_dtype!(a, T, x => by_name::cast(x, dtype))?,
            ArrayRef::Coo(a) => with_by_dtype!(a, T, x => by_name::cast(*x, dtype))?,
        })
    }

    /// The vector-Jacobian product of the op of `req` with respect to the input's values,
    /// given the upstream gradient `g` in the form of the forward output:
    ///
    /// - dense input: `g` is an [`Output::Dense`] of the forward output's shape (its mask
    ///   is not read); the result is dense, of the input's shape;
    /// - sparse input: `g` is an [`Output::Sparse`] stored at exactly the forward
    ///   output's valid positions (as [`ArrayRef::apply`] of the same request returns
    ///   them); the result is stored at the input's valid positions.
    ///
    /// `g`'s values have the input's dtype (a float's gradient type is its own).
    /// Compiled for the float dtypes only.
    ///
    /// # Errors
    /// [`MaskedError::NotDifferentiable`] for an op without a gradient or integer input;
    /// [`MaskedError::ShapeMismatch`], [`MaskedError::ValueCount`] or
    /// [`MaskedError::InvalidArgument`] for a `g` that does not fit the forward output.
    pub fn vjp(&self, req: &OpRequest, g: &Output) -> Result<Output> {
        self.vjp_saved(req, None, g)
    }

    /// [`ArrayRef::vjp`] given `saved`, the forward output of `req` on this array as
    /// [`ArrayRef::apply`] returned it (or `None`: recomputed), which the ops whose
    /// gradient reads their output (softmax and its family, logsumexp, norm, ...) use
    /// instead of running the forward pass again; an autograd function keeps it from
    /// its forward. A saved output that is not the forward result gives a wrong
    /// gradient (its shape and count are checked, not its values).
    ///
    /// # Errors
    /// As [`ArrayRef::vjp`]; a `saved` of another layout kind, shape, count or dtype.
    pub fn vjp_saved(&self, req: &OpRequest, saved: Option<&Output>, g: &Output) -> Result<Output> {
        let out = self.vjp_saved_rows(req, saved, g)?;
        self.flat(out)
    }

    /// [`ArrayRef::vjp_saved`], a sparse input's gradient kept in its layout's form, as
    /// [`ArrayRef::apply_rows`] keeps a result (CSR rows on this matrix's own structure
    /// where every stored entry is valid; a COO pattern).
    ///
    /// # Errors
    /// As [`ArrayRef::vjp_saved`].
    pub fn vjp_saved_rows(
        &self, req: &OpRequest, saved: Option<&Output>, g: &Output,
    ) -> Result<Output> {
        if saved.is_none() && self.forward_first(req) {
            let y = self.apply(req)?;
            return self.vjp_saved_rows(req, Some(&y), g);
        }
        let op = req.op;
        let integer = || MaskedError::NotDifferentiable {
            op: op.name(),
            reason: "integer and bool input have no gradient",
        };
        let map = matches!(op.kind(), Kind::Normalize | Kind::Unary);
        fn other_kind() -> MaskedError {
            MaskedError::InvalidArgument {
                name: "g",
                value: "an upstream gradient or saved output of the other layout kind".into(),
                reason: "dense input takes a dense upstream, sparse input a sparse one",
            }
        }
        fn dense(o: Option<&Output>) -> Result<Option<&Outcome>> {
            match o {
                None => Ok(None),
                Some(Output::Dense(d)) => Ok(Some(d)),
                Some(_) => Err(other_kind()),
            }
        }
        fn sparse(o: Option<&Output>) -> Result<Option<&SparseOutcome>> {
            match o {
                None => Ok(None),
                Some(Output::Sparse(s)) => Ok(Some(s)),
                Some(_) => Err(other_kind()),
            }
        }
        match self {
            ArrayRef::Dense(a) => {
                let (g, y) = (dense(Some(g))?.ok_or_else(other_kind)?, dense(saved)?);
                Ok(Output::Dense(with_by_dtype!(a, T, x => {
                dense_vjp(x, req, map, y, g)?
            }; floats_only else return Err(integer()))))
            }
            ArrayRef::Csr(a) => {
                let (g, y) = (sparse(Some(g))?.ok_or_else(other_kind)?, sparse(saved)?);
                Ok(with_by_dtype!(a, T, x => {
                csr_vjp(x, req, map, y, g)?
            }; floats_only else return Err(integer())))
            }
            ArrayRef::Csr32(a) => {
                let (g, y) = (sparse(Some(g))?.ok_or_else(other_kind)?, sparse(saved)?);
                Ok(with_by_dtype!(a, T, x => {
                csr_vjp(x, req, map, y, g)?
            }; floats_only else return Err(integer())))
            }
            ArrayRef::Coo(a) => {
                let (g, y) = (sparse(Some(g))?.ok_or_else(other_kind)?, sparse(saved)?);
                Ok(with_by_dtype!(a, T, x => {
                let sp = |o: &SparseOutcome| -> Result<SparseArray<<T as Element>::Real>> {
                    let v = grad_values::<<T as Element>::Real>(&o.values)?;
                    SparseArray::new(o.shape.clone(), o.indices.clone(), v)
                };
                let up = sp(g)?;
                let y = y.map(sp).transpose()?;
                let dx = match (map, y) {
                    (true, Some(y)) => x.vjp_map_saved(req, &y.into(), &up.into())?,
                    (true, None) => x.vjp_map(req, &up.into())?,
                    (false, Some(y)) => x.vjp_reduce_saved(req, &y, &up)?,
                    (false, None) => x.vjp_reduce(req, &up)?,
                };
                <MaskedCoo<T> as by_name::ByName<T>>::mapped(dx)
            }; floats_only else return Err(integer())))
            }
        }
    }
}

impl ArrayRef<'_> {
    /// Whether the VJP of `req` on this array, given no saved output, runs the forward
    /// op first and reads its output: the op's gradient reads it (softmax and its
    /// family, logsumexp, norm, median, ...), and the forward's vectorised kernels cost
    /// less than the gradient's recomputation in `f64` (dense 1024² softmax: 1.69 ms
    /// recomputed, 0.29 + 0.28 with the forward first). `f32` and `f64` only: a half's
    /// output rounded to its type would cost the gradient accuracy.
    fn forward_first(&self, req: &OpRequest) -> bool {
        struct ReadsOutput;
        impl masked_core::GradVisitor for ReadsOutput {
            type Out = bool;
            fn visit<G: masked_core::LaneGrad>(self, grad: &G) -> Result<bool> {
                Ok(grad.uses_output())
            }
        }
        req.dtype.is_none()
            && matches!(self.dtype(), DType::F32 | DType::F64)
            && by_name::visit_grad(req, ReadsOutput).unwrap_or(false)
    }

    /// The VJP of a map (a normalization or an elementwise op) of a CSR matrix given the
    /// upstream `g`, and the saved forward output when kept, as values alone: one per
    /// valid entry, in the order the forward map stores them (this matrix's valid
    /// entries, row by row), borrowed from the caller (not copied). No positions are
    /// read or made: the gradient comes as CSR
    /// rows ([`Output::Csr`]), on this matrix's own structure where every stored entry
    /// is valid ([`CsrCols::Input`](crate::CsrCols::Input)). What the Python package's
    /// CSR gradients call; [`ArrayRef::vjp_saved`] takes positioned upstreams.
    ///
    /// # Errors
    /// A reduction or binary op, a layout other than CSR, integer values
    /// ([`MaskedError::InvalidArgument`], [`MaskedError::NotDifferentiable`]); a count
    /// or dtype of `g` or `saved` that does not match; the op's own errors.
    pub fn vjp_map_values(
        &self, req: &OpRequest, saved: Option<ByDType<SliceOf<'_>>>, g: ByDType<SliceOf<'_>>,
    ) -> Result<Output> {
        // the op's kind is checked by the layout (`check_map_grad`)
        let integer = || MaskedError::NotDifferentiable {
            op: req.op.name(),
            reason: "integer and bool input have no gradient",
        };
        Ok(match self {
            ArrayRef::Csr(a) => with_by_dtype!(a, T, x => {
                csr_map_vjp_rows(x, req, saved, g)?
            }; floats_only else return Err(integer())),
            ArrayRef::Csr32(a) => with_by_dtype!(a, T, x => {
                csr_map_vjp_rows(x, req, saved, g)?
            }; floats_only else return Err(integer())),
            _ => {
                return Err(MaskedError::InvalidArgument {
                    name: "input",
                    value: "a dense or COO array".into(),
                    reason: "a VJP by values is the CSR layout's",
                })
            }
        })
    }

    /// [`ArrayRef::apply`] with the result's values written into `out`, a caller's
    /// buffer of the result's dtype: no fresh pages, no copy (a training step, a Python
    /// `out=`). Returns the validity of each of the buffer's slots.
    ///
    /// - Dense input: one slot per position of the result (row-major). A normalization
    ///   or elementwise op writes it in its kernel; a reduction's small result is copied
    ///   in. The mask has the result's shape.
    /// - Sparse input: a normalization or elementwise op only (a reduction's result has
    ///   positions of its own), one slot per stored entry in storage order: the input's
    ///   entries, or its mask pattern's where the mask is a separate pattern (the lanes
    ///   the op runs on). Masked-out entries' slots hold the op's values for
    ///   masked-out elements (semantics.md), as a dense result's do. The mask has shape
    ///   `[slots]`. [`ArrayRef::apply`] of the same request stores exactly the valid
    ///   slots' values at their entries' positions.
    ///
    /// ```
    /// use masked::engine::{Array, CsrMask, OpRequest};
    /// use masked::{DynVec, element::ByDType};
    /// // rows [1, _, 1] and [_, 5, _], the mask its stored pattern
    /// let vals = DynVec::F64(vec![1.0, 1.0, 5.0]);
    /// let x = Array::csr((2, 3), vec![0, 2, 3], vec![0, 2, 1], vals, CsrMask::Stored)?;
    /// let mut buf = [f64::NAN; 3]; // one slot per stored entry, reused by every call
    /// let req = OpRequest::new("softmax")?.dims(1);
    /// let valid = x.view()?.apply_into(&req, ByDType::F64(&mut buf[..]))?;
    /// assert_eq!(buf, [0.5, 0.5, 1.0]);
    /// assert_eq!(valid.count_ones(), 3);
    /// # Ok::<(), masked::MaskedError>(())
    /// ```
    ///
    /// # Errors
    /// As [`ArrayRef::apply`]; [`MaskedError::InvalidArgument`] for a buffer of another
    /// dtype, [`MaskedError::InvalidData`] of another size; [`MaskedError::Unsupported`]
    /// for a `dtype=` request, a reduction of sparse input, and a sparse input without a
    /// mask whose result would store every position.
    pub fn apply_into(&self, req: &OpRequest, out: ByDType<SliceMutOf<'_>>) -> Result<BitMask> {
        if req.dtype.is_some() {
            return Err(MaskedError::Unsupported {
                op: req.op.name(),
                context: "into a caller's buffer with dtype= (cast the input first)".into(),
            });
        }
        let out = std::cell::RefCell::new(out);
        match self {
            ArrayRef::Dense(a) => {
                with_by_dtype!(a, T, x => apply_to(&WriteInto::new(x, &out), req, &OutMask))
            }
            ArrayRef::Csr(a) => with_by_dtype!(a, T, x => {
                apply_to(&EntriesInto::new(x.lanes(), &out), req, &SlotMask)
            }),
            ArrayRef::Csr32(a) => with_by_dtype!(a, T, x => {
                apply_to(&EntriesInto::new(x.lanes(), &out), req, &SlotMask)
            }),
            ArrayRef::Coo(a) => with_by_dtype!(a, T, x => {
                apply_to(&EntriesInto::new(x.lanes(), &out), req, &SlotMask)
            }),
        }
    }
}

/// Each lane's count, mean and sum of squared deviations from the mean: the mergeable
/// state of `var`, `std` and `mean` (Chan et al.'s pairwise merge), unfinished. What a
/// distributed reduction (`mk.dask`) computes per chunk in one pass and merges across
/// chunks.
#[derive(Debug, Clone, PartialEq)]
pub struct LaneMoments {
    /// The reduced shape (`keepdim`: the reduced dims kept as 1).
    pub shape: Vec<usize>,
    /// Valid elements per lane.
    pub n: Vec<i64>,
    /// Their mean (0 for an empty lane).
    pub mean: Vec<f64>,
    /// Their sum of squared deviations from the mean (0 for an empty lane).
    pub m2: Vec<f64>,
}

impl ArrayRef<'_> {
    /// The [`LaneMoments`] of each lane of `dims`, in one pass over the values (the
    /// `var` fold's states, before `var` divides them).
    ///
    /// # Errors
    /// [`MaskedError::DimOutOfRange`] or [`MaskedError::DuplicateDim`] for a bad dim;
    /// [`MaskedError::Unsupported`] for sparse input.
    pub fn moments(&self, dims: &masked_core::Dims, keepdim: bool) -> Result<LaneMoments> {
        let ArrayRef::Dense(a) = self else {
            return Err(MaskedError::Unsupported {
                op: "moments",
                context: "on sparse input (a dense chunk's partial state)".into(),
            });
        };
        let op = masked_core::stats::Var::default();
        let (shape, states) = with_by_dtype!(a, T, x => x.fold_states(&op, dims, keepdim))?;
        Ok(LaneMoments {
            shape,
            n: states.iter().map(|s| s.n).collect(),
            mean: states.iter().map(|s| s.mean).collect(),
            m2: states.iter().map(|s| s.m2).collect(),
        })
    }
}

impl ArrayRef<'_> {
    /// [`ArrayRef::vjp_saved`] on dense input with the upstream gradient `g` and the
    /// saved forward output as dense views of the caller's buffers (an autograd
    /// function's tensors), read in place: no copy of either, and one fresh buffer for
    /// the gradient. `g` and `saved` have the input's dtype and the forward output's
    /// shape; their masks are not read.
    ///
    /// # Errors
    /// As [`ArrayRef::vjp_saved`]; [`MaskedError::Unsupported`] for sparse input (its
    /// upstream is an [`Output`]: use [`ArrayRef::vjp_saved`]).
    pub fn vjp_dense(
        &self, req: &OpRequest, saved: Option<&ArrayRef<'_>>, g: &ArrayRef<'_>,
    ) -> Result<Output> {
        let integer = || MaskedError::NotDifferentiable {
            op: req.op.name(),
            reason: "integer and bool input have no gradient",
        };
        fn dense<'r, 'v>(a: &'r ArrayRef<'v>) -> Result<&'r ByDType<DenseViewOf<'v>>> {
            match a {
                ArrayRef::Dense(d) => Ok(d),
                _ => Err(MaskedError::InvalidArgument {
                    name: "g",
                    value: "a sparse upstream gradient or saved output".into(),
                    reason: "a dense input's VJP takes dense ones",
                }),
            }
        }
        let ArrayRef::Dense(a) = self else {
            return Err(MaskedError::Unsupported {
                op: req.op.name(),
                context: "a VJP with a view as its upstream on sparse input (use vjp_saved)".into(),
            });
        };
        if saved.is_none() && self.forward_first(req) {
            let Output::Dense(y) = self.apply(req)? else {
                return Err(MaskedError::InvalidData(
                    "a dense array's forward output is dense".into(),
                ));
            };
            let y = Array::dense(&y.shape, y.values, None)?;
            return self.vjp_dense(req, Some(&y.view()?), g);
        }
        let g = dense(g)?;
        let y = saved.map(dense).transpose()?;
        Ok(Output::Dense(with_by_dtype!(a, T, x => {
            dense_vjp_views(x, req, y, g)?
        }; floats_only else return Err(integer()))))
    }
}

/// The dense VJP of `req` at `x` reading the upstream `g` and the saved output `y` in
/// place (views of `T::Real`, the input's gradient type).
fn dense_vjp_views<T: Element>(
    x: &MaskedView<'_, T, IxDyn>, req: &OpRequest, y: Option<&ByDType<DenseViewOf<'_>>>,
    g: &ByDType<DenseViewOf<'_>>,
) -> Result<Outcome> {
    fn typed<'r, 'v, R: Element>(
        b: &'r ByDType<DenseViewOf<'v>>, what: &'static str,
    ) -> Result<&'r MaskedView<'v, R, IxDyn>> {
        R::unerase(b).ok_or_else(|| MaskedError::InvalidArgument {
            name: what,
            value: format!("{} values", b.dtype()),
            reason: "a VJP's upstream gradient and saved output have the input's dtype",
        })
    }
    let gv = typed::<T::Real>(g, "g")?;
    let yv = y.map(|y| typed::<T::Real>(y, "saved")).transpose()?;
    dense_vjp_fresh(x, req, yv, gv)
}

/// The dense VJP of `req` at `x` into one fresh buffer, reading the upstream `g` and the
/// saved output `y` (any storage: views of a caller's buffers or of an `Outcome`'s
/// values) in place: the one dense VJP path of the boundary.
fn dense_vjp_fresh<T: Element, S2, S3>(
    x: &MaskedView<'_, T, IxDyn>, req: &OpRequest, y: Option<&MaskedArray<S3, IxDyn>>,
    g: &MaskedArray<S2, IxDyn>,
) -> Result<Outcome>
where
    S2: ndarray::Data<Elem = T::Real>,
    S3: ndarray::Data<Elem = T::Real>,
{
    let n = x.values().len();
    drop(masked_core::try_vec::<T::Real>(n, || {
        format!("a gradient of {n} values")
    })?);
    let mut out = masked_kernels::fresh_vec::<T::Real>(n);
    x.vjp_saved_into(req, y, g, &mut out)?;
    let mask = match x.mask() {
        Some(m) => m.clone(),
        None => BitMask::filled(x.shape(), true)?,
    };
    Ok(Outcome {
        shape: x.shape().to_vec(),
        values: <T::Real as Element>::into_dyn(out),
        mask,
    })
}

impl ArrayRef<'_> {
    /// The vector-Jacobian products of the binary op of `req` (`mul`, `div`, `atan2`,
    /// ...) with respect to both operands' values: `(d self, d other)`, each of its
    /// operand's shape (broadcast dims summed back), given the upstream gradient `g` of
    /// the forward output's shape (its mask is not read: the operands' masks and `rule`
    /// decide which positions take part). Dense operands of one dtype; compiled for the
    /// float dtypes only.
    ///
    /// # Errors
    /// [`MaskedError::NotDifferentiable`] for an op without a gradient or integer input;
    /// [`MaskedError::Unsupported`] for sparse operands (the typed API's `vjp_binary`
    /// has them); shapes that do not broadcast or a `g` of another shape.
    pub fn vjp_binary(
        &self, other: &ArrayRef<'_>, req: &OpRequest, rule: MaskRule, g: &Output,
    ) -> Result<(Output, Output)> {
        let integer = || MaskedError::NotDifferentiable {
            op: req.op.name(),
            reason: "integer and bool input have no gradient",
        };
        let (ArrayRef::Dense(a), ArrayRef::Dense(b), Output::Dense(g)) = (self, other, g) else {
            return Err(MaskedError::Unsupported {
                op: req.op.name(),
                context: "a binary VJP by name of sparse operands (dense ones here; \
                          sparse ones through the typed API's vjp_binary)"
                    .into(),
            });
        };
        with_by_dtype!(a, T, x => {
            let y = same::<T, _>(b)?;
            let gv = grad_values::<<T as Element>::Real>(&g.values)?;
            check_count(g.shape.iter().product(), gv.len())?;
            let up = ArrayD::from_shape_vec(IxDyn(&g.shape), gv)
                .map_err(|e| MaskedError::InvalidData(format!("upstream gradient: {e}")))?;
            let (dx, dy) = x.vjp_binary(req, y, rule, &MaskedArray::unmasked(up))?;
            let wrap = |d| Output::Dense(<MaskedView<'_, T, IxDyn> as by_name::ByName<T>>::mapped(d));
            Ok((wrap(dx), wrap(dy)))
        }; floats_only else Err(integer()))
    }
}

/// Checks that the flat positions `flat` of a sparse map's upstream (or saved output),
/// `what`, are exactly `x`'s valid positions, in order (their count first).
fn at_valid_positions<T: Element, I: CsrIndex>(
    x: &MaskedCsr<'_, T, I, usize>, what: &'static str, flat: &[usize],
) -> Result<()> {
    let (ptr, idx) = x.lanes().valid_structure()?;
    let (cols, ncols) = (idx.cols(), x.matrix().cols());
    check_count(cols.len(), flat.len())?;
    let same = ptr
        .windows(2)
        .enumerate()
        .all(|(r, w)| (w[0]..w[1]).all(|k| flat[k] == r * ncols + cols.get(k)));
    if same {
        return Ok(());
    }
    Err(MaskedError::InvalidArgument {
        name: what,
        value: format!("{} stored positions", flat.len()),
        reason: "a sparse map's upstream and saved output are stored at exactly the forward \
                 output's valid positions",
    })
}

/// [`csr_map_vjp`] from erased values, the gradient as CSR rows.
fn csr_map_vjp_rows<T: Element, I: CsrIndex>(
    x: &MaskedCsr<'_, T, I, usize>, req: &OpRequest, saved: Option<ByDType<SliceOf<'_>>>,
    g: ByDType<SliceOf<'_>>,
) -> Result<Output> {
    let gv = borrowed_grad_values::<T::Real>(&g, "g")?;
    let yv = saved
        .as_ref()
        .map(|y| borrowed_grad_values::<T::Real>(y, "saved"))
        .transpose()?;
    let dx = x.vjp_map_values(req, yv, gv)?;
    Ok(<MaskedCsr<'_, T, I, usize> as by_name::ByName<T>>::mapped(
        dx,
    ))
}

fn csr_vjp<T: Element, I: CsrIndex>(
    x: &MaskedCsr<'_, T, I, usize>, req: &OpRequest, map: bool, saved: Option<&SparseOutcome>,
    g: &SparseOutcome,
) -> Result<Output> {
    let dx = if map {
        // stored at exactly the forward output's positions: this matrix's valid ones
        at_valid_positions(x, "g", &g.indices)?;
        if let Some(y) = saved {
            at_valid_positions(x, "saved", &y.indices)?;
        }
        let gv = borrowed_grad_values::<T::Real>(&g.values.as_slices(), "g")?;
        let yv = saved
            .map(|y| borrowed_grad_values::<T::Real>(&y.values.as_slices(), "saved"))
            .transpose()?;
        x.vjp_map_values(req, yv, gv)?
    } else {
        let gv = grad_values::<T::Real>(&g.values)?;
        let yv = saved
            .map(|y| grad_values::<T::Real>(&y.values))
            .transpose()?;
        let reduced = |v| SparseArray::new(g.shape.clone(), g.indices.clone(), v);
        let up = reduced(gv)?;
        match (yv, saved) {
            (Some(yv), Some(y)) => x.vjp_reduce_saved(
                req,
                &SparseArray::new(y.shape.clone(), y.indices.clone(), yv)?,
                &up,
            )?,
            _ => x.vjp_reduce(req, &up)?,
        }
    };
    Ok(<MaskedCsr<'_, T, I, usize> as by_name::ByName<T>>::mapped(
        dx,
    ))
}

fn check_count(expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(MaskedError::ValueCount { expected, got })
    }
}

/// `g`'s values (`what`: the upstream or the saved output) as the gradient type `R`,
/// which they must have: borrowed, no copy.
fn borrowed_grad_values<'g, R: Element>(
    g: &ByDType<SliceOf<'g>>, what: &'static str,
) -> Result<&'g [R]> {
    R::unerase(g)
        .copied()
        .ok_or_else(|| MaskedError::InvalidArgument {
            name: what,
            value: format!("{} values", g.dtype()),
            reason: "a VJP's upstream gradient and saved output have the input's dtype",
        })
}

/// `g`'s values as the gradient type `R`, which they must have (one copy, no
/// conversion).
fn grad_values<R: Element>(g: &DynVec) -> Result<Vec<R>> {
    match R::unerase(&g.as_by_dtype()) {
        Some(v) => Ok(v.to_vec()),
        None => Err(MaskedError::InvalidArgument {
            name: "g",
            value: format!("{} values", g.dtype()),
            reason: "the upstream gradient must have the input's dtype",
        }),
    }
}

fn dense_vjp<T: Element>(
    x: &MaskedView<'_, T, IxDyn>, req: &OpRequest, map: bool, saved: Option<&Outcome>, g: &Outcome,
) -> Result<Outcome> {
    // g (and the saved output) have the forward output's shape; their values are read
    // in place, as views
    let want = if map {
        x.shape().to_vec()
    } else {
        ReducePlan::new(x.shape(), &req.dims, req.keepdim)?.out_shape
    };
    let view = |o: &'_ Outcome, what: &str| -> Result<()> {
        if o.shape != want {
            return Err(MaskedError::ShapeMismatch {
                what: format!("the {what} vs the output of {}", req.op),
                left: o.shape.clone(),
                right: want.clone(),
            });
        }
        check_count(want.iter().product(), o.values.len())
    };
    view(g, "upstream gradient")?;
    if let Some(y) = saved {
        view(y, "saved output")?;
    }
    let gb = g.values.as_by_dtype();
    let yb = saved.map(|y| y.values.as_by_dtype());
    fn arr<'v, R: Element>(
        b: &ByDType<Ref<'v, VecOf>>, want: &[usize],
    ) -> Result<ndarray::ArrayViewD<'v, R>> {
        let v: &'v Vec<R> = *R::unerase(b).ok_or_else(|| MaskedError::InvalidArgument {
            name: "g",
            value: format!("{} values", b.dtype()),
            reason: "the upstream gradient must have the input's dtype",
        })?;
        ndarray::ArrayViewD::from_shape(IxDyn(want), &v[..])
            .map_err(|e| MaskedError::InvalidData(format!("upstream gradient: {e}")))
    }
    let gv = MaskedArray::unmasked(arr::<T::Real>(&gb, &want)?);
    let yv = yb
        .as_ref()
        .map(|b| arr::<T::Real>(b, &want).map(MaskedArray::unmasked))
        .transpose()?;
    dense_vjp_fresh(x, req, yv.as_ref(), &gv)
}

/// The second operand of a binary op: an array of the same dtype, or a scalar (converted
/// to the array's dtype).
pub enum Operand<'r, 'a> {
    /// A masked array (dense, or of the first operand's sparse layout).
    Array(&'r ArrayRef<'a>),
    /// A scalar, broadcast everywhere and valid everywhere.
    Scalar(Scalar),
}

/// `rhs` as the typed container of `T` (the dtype of the left operand), or the error
/// naming the two dtypes.
fn same<T: Element, F: Family>(rhs: &ByDType<F>) -> Result<&F::Of<T>> {
    T::unerase(rhs).ok_or_else(|| MaskedError::InvalidArgument {
        name: "rhs",
        value: format!("{} values", rhs.dtype()),
        reason: "a binary op's operands share one dtype: promote them first (promote, then \
                 convert)",
    })
}

fn scalar_as<T: Element>(s: Scalar) -> Result<T> {
    T::from_scalar(s).ok_or_else(|| MaskedError::InvalidArgument {
        name: "scalar",
        value: format!("{s:?}"),
        reason: "the scalar does not fit in the operands' dtype",
    })
}

/// Values converted to `to` (promotion before a binary op), moved when they have that
/// dtype already.
///
/// # Errors
/// As [`by_name::cast_values`].
pub fn convert(v: DynVec, to: DType) -> Result<DynVec> {
    if v.dtype() == to {
        Ok(v)
    } else {
        by_name::cast_values(&v, to)
    }
}

impl ArrayRef<'_> {
    /// The binary op `op` on `self` and `rhs` (`op(rhs, self)` when `swapped`: a scalar
    /// or dense operand on the left of a sparse one) under `rule`. Dense with dense or a
    /// scalar gives a dense result; a sparse array with a scalar, a dense array or a
    /// sparse array of its own layout gives a sparse one. Both arrays share one dtype
    /// ([`by_name::promote`], then [`convert`]).
    ///
    /// # Errors
    /// Operands of two dtypes or of two sparse layouts, a scalar the dtype cannot hold;
    /// the op's own errors (shapes, masks under the strict rule).
    pub fn binary(
        &self, rhs: Operand<'_, '_>, op: BinOp, rule: MaskRule, swapped: bool,
    ) -> Result<ZipOutput> {
        let out = self.binary_rows(rhs, op, rule, swapped)?;
        if !matches!(out, ZipOutput::Csr(_)) {
            return Ok(out);
        }
        Ok(ZipOutput::Sparse(match self {
            ArrayRef::Csr(a) => with_by_dtype!(a, T, x => {
                by_name::csr_zip_flat(x, out)
            })?,
            ArrayRef::Csr32(a) => with_by_dtype!(a, T, x => {
                by_name::csr_zip_flat(x, out)
            })?,
            _ => {
                return Err(MaskedError::InvalidData(
                    "CSR rows from an array of another layout".into(),
                ))
            }
        }))
    }

    /// [`ArrayRef::binary`], a CSR result with numbers kept as CSR rows
    /// ([`ZipOutput::Csr`]; bools as flat positions): no flat positions computed, and no
    /// column indices at all where the result stores exactly this array's entries
    /// ([`CsrCols::Input`](crate::CsrCols::Input)).
    ///
    /// # Errors
    /// As [`ArrayRef::binary`].
    pub fn binary_rows(
        &self, rhs: Operand<'_, '_>, op: BinOp, rule: MaskRule, swapped: bool,
    ) -> Result<ZipOutput> {
        use by_name::apply_binary as bin;
        let layouts = || MaskedError::InvalidArgument {
            name: "rhs",
            value: "a sparse array of another layout".into(),
            reason: "a sparse operand zips with a scalar, a dense array or its own layout",
        };
        // a CSR left operand of either index width (`$w`: its `ArrayRef` variant)
        macro_rules! csr {
            ($a:expr, $rhs:expr, $w:ident) => {
                with_by_dtype!($a, T, x => {
                    let out = match $rhs {
                        Operand::Scalar(s) => bin(x, &Splat(scalar_as::<T>(s)?), op, rule, swapped)?,
                        Operand::Array(ArrayRef::Dense(b)) => bin(x, same::<T, _>(b)?, op, rule, swapped)?,
                        Operand::Array(ArrayRef::$w(b)) => bin(x, same::<T, _>(b)?, op, rule, swapped)?,
                        Operand::Array(_) => return Err(layouts()),
                    };
                    bools_flat(x, out)?
                })
            };
        }
        Ok(match (self, rhs) {
            (ArrayRef::Dense(a), rhs) => ZipOutput::Dense(with_by_dtype!(a, T, x => match rhs {
                Operand::Scalar(s) => bin(x, &Splat(scalar_as::<T>(s)?), op, rule, swapped)?,
                Operand::Array(ArrayRef::Dense(b)) => bin(x, same::<T, _>(b)?, op, rule, swapped)?,
                // sparse wins: the sparse operand runs on the left with the op swapped
                // (as flat positions: its CSR rows would stand for the other operand's)
                Operand::Array(b) => return b.binary(Operand::Array(self), op, rule, !swapped),
            })),
            (ArrayRef::Csr(a), rhs) => csr!(a, rhs, Csr),
            (ArrayRef::Csr32(a), rhs) => csr!(a, rhs, Csr32),
            (ArrayRef::Coo(a), rhs) => ZipOutput::Sparse(with_by_dtype!(a, T, x => match rhs {
                Operand::Scalar(s) => bin(*x, &Splat(scalar_as::<T>(s)?), op, rule, swapped)?,
                Operand::Array(ArrayRef::Dense(b)) => bin(*x, same::<T, _>(b)?, op, rule, swapped)?,
                Operand::Array(ArrayRef::Coo(b)) => bin(*x, *same::<T, _>(b)?, op, rule, swapped)?,
                Operand::Array(_) => return Err(layouts()),
            })),
        })
    }
}

/// `out`, a binary result of the CSR matrix `x`, with bools as flat positions (a front
/// keeps sparse bools as coordinates) and numbers as they came.
fn bools_flat<T: Element, I: CsrIndex>(
    x: &MaskedCsr<'_, T, I, usize>, out: ZipOutput,
) -> Result<ZipOutput> {
    Ok(match out {
        ZipOutput::Csr(r) if matches!(r.values, masked_core::Values::Bool(_)) => {
            ZipOutput::Sparse(by_name::csr_zip_flat(x, ZipOutput::Csr(r))?)
        }
        other => other,
    })
}

/// A dense outcome of an array every position of which is valid.
fn all_valid<T: Element, D: ndarray::Dimension>(a: ndarray::Array<T, D>) -> Result<Outcome> {
    let shape = a.shape().to_vec();
    let mask = BitMask::filled(&shape, true)?;
    Ok(Outcome {
        values: T::into_dyn(a.into_raw_vec_and_offset().0),
        shape,
        mask,
    })
}

/// The outcome of a CSR matrix whose stored entries are the valid ones.
fn csr_outcome<T: Element, I: SpIndex>(m: sprs::CsMatI<T, I, usize>) -> SparseOutcome {
    let ncols = m.cols();
    let indices = m
        .iter()
        .map(|(_, (i, j))| i.index() * ncols + j.index())
        .collect();
    SparseOutcome {
        shape: vec![m.rows(), ncols],
        indices,
        values: T::into_dyn(m.data().to_vec()),
    }
}

impl ArrayRef<'_> {
    /// `where(cond, self, other)`: `self`'s value and validity where `cond` is true,
    /// `other`'s elsewhere (`cond` broadcasts; both operands share one layout and dtype).
    ///
    /// # Errors
    /// Operands of two dtypes or layouts; shapes that differ or do not broadcast.
    pub fn select(&self, cond: &BitMask, other: &ArrayRef<'_>) -> Result<Output> {
        let layouts = || MaskedError::InvalidArgument {
            name: "other",
            value: "an array of another layout".into(),
            reason: "where takes two operands of one layout",
        };
        Ok(match (self, other) {
            (ArrayRef::Dense(a), ArrayRef::Dense(b)) => Output::Dense(with_by_dtype!(a, T, x => {
                let r = layout_dense::select(cond, None, x, same::<T, _>(b)?)?;
                <MaskedView<'_, T, IxDyn> as by_name::ByName<T>>::reduced(r)
            })),
            (ArrayRef::Csr(a), ArrayRef::Csr(b)) => Output::Sparse(with_by_dtype!(a, T, x => {
                csr_outcome(layout_csr::select(cond, x, same::<T, _>(b)?)?)
            })),
            (ArrayRef::Csr32(a), ArrayRef::Csr32(b)) => Output::Sparse(with_by_dtype!(a, T, x => {
                csr_outcome(layout_csr::select(cond, x, same::<T, _>(b)?)?)
            })),
            (ArrayRef::Coo(a), ArrayRef::Coo(b)) => with_by_dtype!(a, T, x => {
                let r = layout_coo::select(cond, x, same::<T, _>(b)?)?;
                <MaskedCoo<T> as by_name::ByName<T>>::reduced(r)
            }),
            _ => return Err(layouts()),
        })
    }

    /// The valid values in row-major order, 1-D (numpy.ma's `compressed`, torch's
    /// `masked_select`): one value per valid element, no positions.
    ///
    /// ```
    /// use masked::engine::Array;
    /// use masked::{BitMask, DynVec};
    /// let mask = BitMask::from_bools([2, 2], [true, false, false, true])?;
    /// let x = Array::dense(&[2, 2], DynVec::F32(vec![1.0, 2.0, 3.0, 4.0]), Some(mask))?;
    /// assert_eq!(x.view()?.compressed()?, DynVec::F32(vec![1.0, 4.0]));
    /// # Ok::<(), masked::MaskedError>(())
    /// ```
    ///
    /// # Errors
    /// A sparse input without a mask (every position valid: its values would densify).
    pub fn compressed(&self) -> Result<DynVec> {
        Ok(match self {
            ArrayRef::Dense(a) => with_by_dtype!(a, T, x => T::into_dyn(x.compress())),
            ArrayRef::Csr(a) => with_by_dtype!(a, T, x => T::into_dyn(x.compress()?)),
            ArrayRef::Csr32(a) => with_by_dtype!(a, T, x => T::into_dyn(x.compress()?)),
            ArrayRef::Coo(a) => with_by_dtype!(a, T, x => T::into_dyn(x.compress()?)),
        })
    }

    /// An explicit densification: the valid values and `value` at every other position,
    /// as a dense output whose every position is valid.
    ///
    /// # Errors
    /// A `value` the dtype cannot hold.
    pub fn filled(&self, value: Scalar) -> Result<Output> {
        Ok(Output::Dense(match self {
            ArrayRef::Dense(a) => {
                with_by_dtype!(a, T, x => all_valid(x.filled(scalar_as::<T>(value)?))?)
            }
            ArrayRef::Csr(a) => {
                with_by_dtype!(a, T, x => all_valid(x.filled(scalar_as::<T>(value)?)?)?)
            }
            ArrayRef::Csr32(a) => {
                with_by_dtype!(a, T, x => all_valid(x.filled(scalar_as::<T>(value)?)?)?)
            }
            ArrayRef::Coo(a) => {
                with_by_dtype!(a, T, x => all_valid(x.filled(scalar_as::<T>(value)?)?)?)
            }
        }))
    }

    /// A sparse array with its invalid positions filled with 0: the valid entries, stored
    /// exactly (a dense input gives [`ArrayRef::filled`] with 0).
    ///
    /// # Errors
    /// As the layouts' `fill_zero`.
    pub fn fill_zero(&self) -> Result<Output> {
        Ok(match self {
            ArrayRef::Dense(_) => return self.filled(Scalar::Int(0)),
            ArrayRef::Csr(a) => Output::Sparse(with_by_dtype!(a, T, x => {
                x.to_sparse(<MaskedCsr<'_, T> as by_name::ByName<T>>::mapped(x.fill_zero()?))
            })?),
            ArrayRef::Csr32(a) => Output::Sparse(with_by_dtype!(a, T, x => {
                let m = x.fill_zero()?;
                x.to_sparse(<MaskedCsr<'_, T, u32, usize> as by_name::ByName<T>>::mapped(m))
            })?),
            ArrayRef::Coo(a) => with_by_dtype!(a, T, x => {
                x.to_sparse(<MaskedCoo<T> as by_name::ByName<T>>::mapped(x.fill_zero()?))
            })
            .map(Output::Sparse)?,
        })
    }
}
