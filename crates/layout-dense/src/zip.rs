//! Binary elementwise ops on the dense layout: NumPy broadcasting, the mask rules, a
//! scalar on either side, and output into a caller's buffer.

use crate::array::{MaskedArray, MaskedArrayD};
use masked_core::binary::{
    broadcast_shapes, broadcast_strides, failed_at, flat_grads, flat_grads_into, mask_mismatch,
    unravel, DenseParts as Operand, Src,
};
use masked_core::{
    BitMask, Bits, Element, MaskRule, MaskedError, Result, Splat, ZipKernels, ZipMap,
};
use masked_kernels::buffer::fresh_vec;
// named by the docs' links
#[allow(unused_imports)]
use masked_core::{binary::BinOp, MaskedBinaryOps};
use masked_kernels::par;
use ndarray::{ArrayD, Data, Dimension, IxDyn};
use std::borrow::Cow;

/// Elements per parallel task of a flat zip (a multiple of 64: tasks start on mask words).
const CHUNK: usize = 1 << 16;

impl<T: Element, S: Data<Elem = T>, D: Dimension> MaskedArray<S, D> {
    /// The array as an operand in standard layout: its values in row-major order
    /// (borrowed when already so, else copied), shape and mask. What a sparse layout
    /// reads at its entries' positions in a sparse ⊙ dense op.
    pub fn dense_parts(&self) -> Operand<'_, T> {
        operand(self)
    }
}

/// The parts of a dense operand in standard layout (values borrowed when already
/// row-major).
pub(crate) fn operand<T: Element, S: Data<Elem = T>, D: Dimension>(
    a: &MaskedArray<S, D>,
) -> Operand<'_, T> {
    let data = a.values();
    let values = masked_core::gather::row_major_values(data);
    Operand {
        values,
        shape: data.shape(),
        mask: a.mask(),
    }
}

/// The output mask of a binary op on two dense masks (`None`: all valid).
pub(crate) fn out_mask<'m>(
    op: &'static str, shape: &[usize], a: Option<&'m BitMask>, b: Option<&'m BitMask>,
    rule: MaskRule,
) -> Result<Option<Cow<'m, BitMask>>> {
    // an operand's mask of the output shape is borrowed, not copied
    let widen = |m: &'m BitMask| -> Result<Cow<'m, BitMask>> {
        Ok(if m.shape() == shape {
            Cow::Borrowed(m)
        } else {
            Cow::Owned(m.broadcast_to(shape)?)
        })
    };
    match (a, b) {
        (None, None) => Ok(None),
        (Some(m), None) | (None, Some(m)) => Ok(Some(widen(m)?)),
        (Some(x), Some(y)) => {
            let (x, y) = (widen(x)?, widen(y)?);
            match rule {
                MaskRule::And => Ok(Some(Cow::Owned(x.and(&y)?))),
                MaskRule::Strict => {
                    let n = x.len();
                    let diff =
                        x.words()
                            .iter()
                            .zip(y.words())
                            .enumerate()
                            .find_map(|(w, (p, q))| {
                                let d = p ^ q;
                                (d != 0).then(|| w * 64 + d.trailing_zeros() as usize)
                            });
                    if let Some(i) = diff.filter(|&i| i < n) {
                        return Err(mask_mismatch(op, unravel(shape, i), x.get(i)));
                    }
                    Ok(Some(x))
                }
            }
        }
    }
}

/// The operand's run for output row `r` (rows of length `len` along the last dim).
struct Rows<'a, T> {
    values: &'a [T],
    strides: Vec<usize>,
    shape: &'a [usize],
    len: usize,
}

impl<'a, T: Copy> Rows<'a, T> {
    fn new(values: &'a [T], src: &[usize], shape: &'a [usize]) -> Self {
        let len = shape.last().copied().unwrap_or(1);
        Rows {
            values,
            strides: broadcast_strides(src, shape),
            shape,
            len,
        }
    }
    #[inline]
    fn row(&self, mut r: usize) -> Src<'a, T> {
        let n = self.shape.len();
        let mut off = 0;
        for d in (0..n.saturating_sub(1)).rev() {
            let s = self.shape[d];
            off += (r % s) * self.strides[d];
            r /= s;
        }
        match self.strides.last() {
            Some(&st) if st != 0 => Src::Slice(&self.values[off..off + self.len]),
            _ => Src::Splat(self.values[off]),
        }
    }
}

/// One side of a zip: a dense operand, or a scalar.
pub(crate) enum Side<'a, T: Clone> {
    Array(&'a Operand<'a, T>),
    Scalar(T),
}

/// The whole operand as one run, where it needs no broadcasting.
fn flat<'s, T: Element>(s: &'s Side<'_, T>, shape: &[usize]) -> Option<Src<'s, T>> {
    match s {
        Side::Array(o) if o.shape == shape => Some(Src::Slice(&o.values[..])),
        Side::Array(o) if o.values.len() == 1 => Some(Src::Splat(o.values[0])),
        Side::Array(_) => None,
        Side::Scalar(v) => Some(Src::Splat(*v)),
    }
}

/// Elements `lo..hi` of a run.
fn part<T: Copy>(s: Src<'_, T>, lo: usize, hi: usize) -> Src<'_, T> {
    match s {
        Src::Slice(v) => Src::Slice(&v[lo..hi]),
        Src::Splat(v) => Src::Splat(v),
    }
}

/// The rows of an array operand broadcast to `shape`.
fn rows<'s, T: Element>(s: &'s Side<'_, T>, shape: &'s [usize]) -> Option<Rows<'s, T>> {
    match s {
        Side::Array(o) => Some(Rows::new(&o.values[..], o.shape, shape)),
        Side::Scalar(_) => None,
    }
}

/// Row `row` of a side.
fn src<'s, T: Element>(r: &Option<Rows<'s, T>>, s: &Side<'_, T>, row: usize) -> Src<'s, T> {
    match (r, s) {
        (Some(r), _) => r.row(row),
        (None, Side::Scalar(v)) => Src::Splat(*v),
        (None, Side::Array(_)) => unreachable!("arrays have rows"),
    }
}

/// Computes elements `start .. start + out.len()` of `z(a, b)` (an output of `shape`,
/// valid where `bits`, over the whole output, are set) into `out`, from any start (a
/// lazy view asks for block-sized pieces of rows); the flat position of the first
/// failure, if any.
pub(crate) fn zip_values<T: Element, Z: ZipMap<T>>(
    z: &Z, shape: &[usize], a: &Side<'_, T>, b: &Side<'_, T>, bits: Option<Bits<'_>>,
    out: &mut [Z::Output], start: usize,
) -> Option<usize> {
    let n = out.len();
    if n == 0 {
        return None;
    }
    if let (Some(x), Some(y)) = (flat(a, shape), flat(b, shape)) {
        let run = |lo: usize, o: &mut [Z::Output]| {
            let hi = lo + o.len();
            z.run(
                part(x, lo, hi),
                part(y, lo, hi),
                bits.map(|b| b.offset(lo)),
                o,
            )
            .map(|k| lo + k)
        };
        if n <= CHUNK {
            // one task (a lazy view's piece): no round trip through the thread pool
            return run(start, out);
        }
        return par::chunks_mut(out, CHUNK, |c, o| run(start + c * CHUNK, o))
            .into_iter()
            .flatten()
            .min();
    }
    let (ra, rb) = (rows(a, shape), rows(b, shape));
    let len = shape.last().copied().unwrap_or(1).max(1);
    // elements `lo .. lo + o.len()`, row by row (a span may start or end inside a row)
    let span = |lo: usize, o: &mut [Z::Output]| -> Option<usize> {
        let mut pos = lo;
        let mut rest = o;
        while !rest.is_empty() {
            let (row, c0) = (pos / len, pos % len);
            let m = (len - c0).min(rest.len());
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(m);
            let f = z.run(
                part(src(&ra, a, row), c0, c0 + m),
                part(src(&rb, b, row), c0, c0 + m),
                bits.map(|b| b.offset(pos)),
                head,
            );
            if let Some(k) = f {
                return Some(pos + k);
            }
            pos += m;
            rest = tail;
        }
        None
    };
    if n <= CHUNK {
        return span(start, out);
    }
    let per = (CHUNK / len).max(1) * len;
    par::chunks_mut(out, per, |c, o| span(start + c * per, o))
        .into_iter()
        .flatten()
        .min()
}

impl<T: Element, S: Data<Elem = T>, D: Dimension> MaskedArray<S, D> {
    /// The binary op `z(self, rhs)` written into `out` (a caller's buffer of the output
    /// shape's element count, row-major: no fresh pages for a large result); returns
    /// the output mask (`None`: every position valid).
    ///
    /// # Errors
    /// As [`ZipKernels::zip_elements`]; [`MaskedError::InvalidData`] for a buffer of
    /// another length.
    pub fn zip_into<S2: Data<Elem = T>, D2: Dimension, Z: ZipMap<T>>(
        &self, rhs: &MaskedArray<S2, D2>, z: &Z, rule: MaskRule, out: &mut [Z::Output],
    ) -> Result<(Vec<usize>, Option<BitMask>)> {
        let (a, b) = (operand(self), operand(rhs));
        let shape = broadcast_shapes(z.name(), a.shape, b.shape)?;
        let mask = out_mask(z.name(), &shape, a.mask, b.mask, rule)?.map(Cow::into_owned);
        finish_into(z, &shape, &Side::Array(&a), &Side::Array(&b), mask, out)
    }

    /// The binary op `z(self, s)` with a scalar, written into `out` as
    /// [`MaskedArray::zip_into`]; a scalar on the left is the
    /// `Swapped` op (`masked::binary::Swapped`).
    ///
    /// # Errors
    /// As [`MaskedArray::zip_into`].
    pub fn zip_scalar_into<Z: ZipMap<T>>(
        &self, s: T, z: &Z, out: &mut [Z::Output],
    ) -> Result<(Vec<usize>, Option<BitMask>)> {
        let a = operand(self);
        let shape = a.shape.to_vec();
        let mask = a.mask.cloned();
        finish_into(z, &shape, &Side::Array(&a), &Side::Scalar(s), mask, out)
    }
}

pub(crate) fn finish_into<T: Element, Z: ZipMap<T>>(
    z: &Z, shape: &[usize], a: &Side<'_, T>, b: &Side<'_, T>, mask: Option<BitMask>,
    out: &mut [Z::Output],
) -> Result<(Vec<usize>, Option<BitMask>)> {
    let n: usize = shape.iter().product();
    if out.len() != n {
        return Err(MaskedError::InvalidData(format!(
            "{}: an output buffer of {} elements for shape {shape:?} ({n} elements)",
            z.name(),
            out.len()
        )));
    }
    if let Some(i) = zip_values(z, shape, a, b, mask.as_ref().map(BitMask::bits), out, 0) {
        return Err(failed_at(z, unravel(shape, i)));
    }
    Ok((shape.to_vec(), mask))
}

fn build<O>(shape: Vec<usize>, values: Vec<O>, mask: Option<BitMask>) -> Result<MaskedArrayD<O>> {
    let data = ArrayD::from_shape_vec(IxDyn(&shape), values)
        .map_err(|e| MaskedError::InvalidData(e.to_string()))?;
    let mask = mask.map_or_else(|| BitMask::filled(&shape, true), Ok)?;
    MaskedArray::new(data, mask)
}

impl<T, S, D, S2, D2> ZipKernels<T, MaskedArray<S2, D2>> for MaskedArray<S, D>
where
    T: Element,
    S: Data<Elem = T>,
    D: Dimension,
    S2: Data<Elem = T>,
    D2: Dimension,
{
    type Zipped<O: masked_core::Value> = MaskedArrayD<O>;

    fn zip_elements<Z: ZipMap<T>>(
        &self, rhs: &MaskedArray<S2, D2>, z: &Z, rule: MaskRule,
    ) -> Result<MaskedArrayD<Z::Output>> {
        let shape = broadcast_shapes(z.name(), self.shape(), rhs.shape())?;
        let mut out = fresh_vec(shape.iter().product());
        let (shape, mask) = self.zip_into(rhs, z, rule, &mut out)?;
        build(shape, out, mask)
    }
}

impl<T: Element, S: Data<Elem = T>, D: Dimension> ZipKernels<T, Splat<T>> for MaskedArray<S, D> {
    type Zipped<O: masked_core::Value> = MaskedArrayD<O>;

    /// A scalar operand takes this array's mask (either rule).
    fn zip_elements<Z: ZipMap<T>>(
        &self, s: &Splat<T>, z: &Z, _rule: MaskRule,
    ) -> Result<MaskedArrayD<Z::Output>> {
        let mut out = fresh_vec(self.values().len());
        let (shape, mask) = self.zip_scalar_into(s.0, z, &mut out)?;
        build(shape, out, mask)
    }
}

/// The gradients of both operands of a binary op with partials `op` on the broadcast
/// `shape`: `g · ∂f/∂x` at each valid output position (per `valid`; `None`: all),
/// summed into each operand's own (broadcast) position, in `f64`.
fn binary_grads<T: Element>(
    op: masked_core::binary::BinOp, shape: &[usize], a: &Operand<'_, T>, b: &Operand<'_, T>,
    valid: Option<&BitMask>, g: &[T::Real],
) -> (Vec<f64>, Vec<f64>) {
    let (sa, sb) = (
        broadcast_strides(a.shape, shape),
        broadcast_strides(b.shape, shape),
    );
    let (mut da, mut db) = (vec![0.0f64; a.values.len()], vec![0.0f64; b.values.len()]);
    let n: usize = shape.iter().product();
    let bits = valid.map(BitMask::bits);
    let (mut idx, mut ia, mut ib) = (vec![0usize; shape.len()], 0usize, 0usize);
    for (p, gp) in g.iter().enumerate().take(n) {
        if bits.is_none_or(|b| b.get(p)) {
            let (x, y) = (a.values[ia].to_f64(), b.values[ib].to_f64());
            if let Some((px, py)) = op.partials(x, y) {
                let gv = gp.to_f64();
                da[ia] += gv * px;
                db[ib] += gv * py;
            }
        }
        // odometer step over the output shape
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            ia += sa[d];
            ib += sb[d];
            if idx[d] < shape[d] {
                break;
            }
            ia -= sa[d] * idx[d];
            ib -= sb[d] * idx[d];
            idx[d] = 0;
        }
    }
    (da, db)
}

/// A gradient in `R` as a masked array of `shape` with `mask` (all valid for `None`):
/// what a sparse layout's binary VJP returns for a dense operand
/// (`DenseOperand::gradient_sums` gives the values).
///
/// # Errors
/// [`MaskedError::InvalidData`] when the values do not fill the shape.
pub fn grad_array<R: Element>(
    shape: &[usize], values: Vec<R>, mask: Option<&BitMask>,
) -> Result<MaskedArrayD<R>> {
    let data = ArrayD::from_shape_vec(IxDyn(shape), values)
        .map_err(|e| MaskedError::InvalidData(e.to_string()))?;
    let mask = match mask {
        Some(m) => m.clone(),
        None => BitMask::filled(shape, true)?,
    };
    MaskedArray::new(data, mask)
}

impl<T: Element, S: Data<Elem = T>, D: Dimension> MaskedArray<S, D> {
    /// The vector-Jacobian product of the binary elementwise op `req` (`add`, `mul`,
    /// `atan2`, `pow`, ...: the op [`MaskedBinaryOps`]
    /// runs as `self.op(rhs, rule)`): the gradients with respect to both operands given
    /// `g`, the upstream gradient shaped like the broadcast output (read only at valid
    /// output positions). Each operand's gradient has its own shape and mask: the
    /// contributions of the positions it was broadcast to are summed, and it is 0 at
    /// positions whose output is invalid (under `and`, a position valid in this operand
    /// but not in the other gets 0). The partial derivatives and their kinks are
    /// [`BinOp::partials`]'s.
    ///
    /// ```
    /// use masked::by_name::OpRequest;
    /// use masked::prelude::*;
    /// use masked::MaskRule;
    /// use ndarray::array;
    /// let x = MaskedArray::from_bool_mask(
    ///     array![[1.0f64, 2.0, 3.0], [4.0, 5.0, 6.0]],
    ///     array![[true, true, false], [true, true, true]],
    /// )?;
    /// let w = MaskedArray::unmasked(array![10.0f64, 20.0, 30.0]); // broadcast over rows
    /// let g = MaskedArray::unmasked(array![[1.0f64, 1.0, 1.0], [1.0, 1.0, 1.0]].into_dyn());
    /// let (dx, dw) = x.vjp_binary(&OpRequest::new("mul")?, &w, MaskRule::Strict, &g)?;
    /// assert_eq!(dx.values(), &array![[10.0, 20.0, 0.0], [10.0, 20.0, 30.0]].into_dyn());
    /// // summed over the broadcast rows, valid outputs only: 1 + 4, 2 + 5, 6
    /// assert_eq!(dw.values(), &array![5.0, 7.0, 6.0].into_dyn());
    /// # Ok::<(), masked::MaskedError>(())
    /// ```
    ///
    /// # Errors
    /// [`MaskedError::NotDifferentiable`] for a comparison or integer input; an op that
    /// is not binary ([`MaskedError::InvalidArgument`]); the forward op's errors
    /// (shapes that do not broadcast, masks that differ under `strict`); `g` not of the
    /// output's shape ([`MaskedError::ShapeMismatch`]).
    pub fn vjp_binary<S2: Data<Elem = T>, D2: Dimension>(
        &self, req: &masked_core::OpRequest, rhs: &MaskedArray<S2, D2>, rule: MaskRule,
        g: &MaskedArrayD<T::Real>,
    ) -> Result<Gradients<T::Real>> {
        let op = masked_core::binary_grad_op::<T>(req)?;
        let (a, b) = (operand(self), operand(rhs));
        let mut da = fresh_vec::<T::Real>(a.values.len());
        let mut db = fresh_vec::<T::Real>(b.values.len());
        grads_into(op, &a, &b, rule, g, &mut da, &mut db)?;
        Ok((
            grad_array(a.shape, da, a.mask)?,
            grad_array(b.shape, db, b.mask)?,
        ))
    }

    /// [`MaskedArray::vjp_binary`] written into the caller's buffers: `dx` (this array's
    /// element count) and `dy` (`rhs`'s), in row-major order, overwritten everywhere (0
    /// at each operand's invalid positions and where no valid output reads it). The
    /// gradients' masks are the operands' own. A training loop that reuses the buffers
    /// takes no fresh-page faults.
    ///
    /// ```
    /// use masked::by_name::OpRequest;
    /// use masked::prelude::*;
    /// use masked::MaskRule;
    /// use ndarray::array;
    /// let x = MaskedArray::from_bool_mask(array![2.0f64, 3.0, 4.0], array![true, true, false])?;
    /// let y = MaskedArray::from_bool_mask(array![5.0f64, 6.0, 7.0], array![true, true, false])?;
    /// let g = MaskedArray::unmasked(array![1.0f64, 10.0, 100.0].into_dyn());
    /// let (mut dx, mut dy) = ([f64::NAN; 3], [f64::NAN; 3]);
    /// x.vjp_binary_into(&OpRequest::new("mul")?, &y, MaskRule::Strict, &g, &mut dx, &mut dy)?;
    /// assert_eq!((dx, dy), ([5.0, 60.0, 0.0], [2.0, 30.0, 0.0]));
    /// # Ok::<(), masked::MaskedError>(())
    /// ```
    ///
    /// # Errors
    /// As [`MaskedArray::vjp_binary`]; [`MaskedError::InvalidData`] for a buffer of
    /// another length.
    pub fn vjp_binary_into<S2: Data<Elem = T>, D2: Dimension>(
        &self, req: &masked_core::OpRequest, rhs: &MaskedArray<S2, D2>, rule: MaskRule,
        g: &MaskedArrayD<T::Real>, dx: &mut [T::Real], dy: &mut [T::Real],
    ) -> Result<()> {
        let op = masked_core::binary_grad_op::<T>(req)?;
        let (a, b) = (operand(self), operand(rhs));
        for (buf, o) in [(dx.len(), &a), (dy.len(), &b)] {
            if buf != o.values.len() {
                return Err(MaskedError::InvalidData(format!(
                    "{}: a gradient buffer of {buf} elements for an operand of {}",
                    op.name(),
                    o.values.len()
                )));
            }
        }
        grads_into(op, &a, &b, rule, g, dx, dy)
    }

    /// [`MaskedArray::vjp_binary`] with a scalar right operand (`self.op(s)`, as
    /// [`ZipKernels`] runs it with a `Splat`): the gradient with respect to this
    /// array, and the one with respect to the scalar (the sum over the valid outputs).
    /// For a scalar on the left (`s - x`), use the mirrored op or differentiate
    /// `x` as the right operand of a 0-d array.
    ///
    /// # Errors
    /// As [`MaskedArray::vjp_binary`].
    pub fn vjp_binary_scalar(
        &self, req: &masked_core::OpRequest, s: T, g: &MaskedArrayD<T::Real>,
    ) -> Result<(MaskedArrayD<T::Real>, T::Real)> {
        let op = masked_core::binary_grad_op::<T>(req)?;
        let a = operand(self);
        check_grad_shape(op.name(), g.shape(), a.shape)?;
        let gv = g.row_major();
        let bits = a.mask.map(BitMask::bits);
        let (da, _, ds) = flat_grads(op, &a.values, Src::Splat(s), bits, &gv);
        Ok((
            grad_array(a.shape, da, a.mask)?,
            <T::Real as masked_core::Float>::from_f64(ds),
        ))
    }
}

/// Both operands' gradients of `op` given the upstream `g`, written into `dx` and `dy`
/// (one value per operand element, row-major): the body of
/// [`MaskedArray::vjp_binary`] and [`MaskedArray::vjp_binary_into`].
fn grads_into<T: Element>(
    op: BinOp, a: &Operand<'_, T>, b: &Operand<'_, T>, rule: MaskRule, g: &MaskedArrayD<T::Real>,
    dx: &mut [T::Real], dy: &mut [T::Real],
) -> Result<()> {
    let shape = broadcast_shapes(op.name(), a.shape, b.shape)?;
    let valid = out_mask(op.name(), &shape, a.mask, b.mask, rule)?;
    check_grad_shape(op.name(), g.shape(), &shape)?;
    let gv = g.row_major();
    if a.shape == b.shape {
        let ys = Src::Slice(&b.values[..]);
        let bits = valid.as_deref().map(BitMask::bits);
        flat_grads_into(op, &a.values, ys, bits, &gv, dx, dy);
    } else {
        let (da, db) = binary_grads(op, &shape, a, b, valid.as_deref(), &gv);
        for (out, acc) in [(dx, da), (dy, db)] {
            for (o, v) in out.iter_mut().zip(acc) {
                *o = <T::Real as masked_core::Float>::from_f64(v);
            }
        }
    }
    Ok(())
}

/// The gradients of a binary op's two operands, each with its operand's shape and mask.
pub type Gradients<R> = (MaskedArrayD<R>, MaskedArrayD<R>);

/// `g` must have the forward output's shape.
fn check_grad_shape(op: &str, g: &[usize], shape: &[usize]) -> Result<()> {
    if g != shape {
        return Err(MaskedError::ShapeMismatch {
            what: format!("the upstream gradient of {op} and the op's output"),
            left: g.to_vec(),
            right: shape.to_vec(),
        });
    }
    Ok(())
}
