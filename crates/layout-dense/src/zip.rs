//! Binary elementwise ops on the dense layout: NumPy broadcasting, the mask rules, a
//! scalar on either side, and output into a caller's buffer.

use crate::array::{MaskedArray, MaskedArrayD};
use masked_core::binary::{broadcast_shapes, failed_at, mask_mismatch, Src};
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

/// The row-major coordinates of flat index `i` in `shape`.
pub(crate) fn unravel(shape: &[usize], mut i: usize) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        let s = shape[d].max(1);
        c[d] = i % s;
        i /= s;
    }
    c
}

/// A dense operand in standard layout: its values (borrowed when already row-major),
/// shape and mask.
pub(crate) struct Operand<'a, T: Clone> {
    pub(crate) values: Cow<'a, [T]>,
    pub(crate) shape: &'a [usize],
    pub(crate) mask: Option<&'a BitMask>,
}

pub(crate) fn operand<T: Element, S: Data<Elem = T>, D: Dimension>(
    a: &MaskedArray<S, D>,
) -> Operand<'_, T> {
    let data = a.values();
    let values = match data.as_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(data.iter().copied().collect()),
    };
    Operand {
        values,
        shape: data.shape(),
        mask: a.mask(),
    }
}

/// The output mask of a binary op on two dense masks (`None`: all valid).
pub(crate) fn out_mask<'m>(
    op: &'static str,
    shape: &[usize],
    a: Option<&'m BitMask>,
    b: Option<&'m BitMask>,
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

/// Row-major strides of `src` (a shape broadcast to `shape`, aligned from the right),
/// 0 along the dims it stretches.
fn broadcast_strides(src: &[usize], shape: &[usize]) -> Vec<usize> {
    let n = shape.len();
    let mut st = vec![0usize; n];
    let mut stride = 1usize;
    for k in 0..src.len() {
        let (sd, td) = (src.len() - 1 - k, n - 1 - k);
        st[td] = if src[sd] == 1 && shape[td] != 1 {
            0
        } else {
            stride
        };
        stride *= src[sd];
    }
    st
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
    z: &Z,
    shape: &[usize],
    a: &Side<'_, T>,
    b: &Side<'_, T>,
    bits: Option<Bits<'_>>,
    out: &mut [Z::Output],
    start: usize,
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
        &self,
        rhs: &MaskedArray<S2, D2>,
        z: &Z,
        rule: MaskRule,
        out: &mut [Z::Output],
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
        &self,
        s: T,
        z: &Z,
        out: &mut [Z::Output],
    ) -> Result<(Vec<usize>, Option<BitMask>)> {
        let a = operand(self);
        let shape = a.shape.to_vec();
        let mask = a.mask.cloned();
        finish_into(z, &shape, &Side::Array(&a), &Side::Scalar(s), mask, out)
    }
}

pub(crate) fn finish_into<T: Element, Z: ZipMap<T>>(
    z: &Z,
    shape: &[usize],
    a: &Side<'_, T>,
    b: &Side<'_, T>,
    mask: Option<BitMask>,
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
        &self,
        rhs: &MaskedArray<S2, D2>,
        z: &Z,
        rule: MaskRule,
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
        &self,
        s: &Splat<T>,
        z: &Z,
        _rule: MaskRule,
    ) -> Result<MaskedArrayD<Z::Output>> {
        let mut out = fresh_vec(self.values().len());
        let (shape, mask) = self.zip_scalar_into(s.0, z, &mut out)?;
        build(shape, out, mask)
    }
}

/// What a sparse layout zips its entries with (sparse ⊙ x), borrowed for one pass.
pub enum EntryOther<'x, T: Element> {
    /// One value for every entry.
    Scalar(T),
    /// The values of another operand on the very same entries, with its validity bits.
    Same(&'x [T], Option<&'x [u64]>),
    /// A dense operand, read at each entry's position.
    Dense(&'x DenseOperand<'x, T>),
}

/// [`EntryOther`] owned by a lazy view that keeps it between passes.
pub enum EntryRhs<'a, T: Element> {
    /// One value for every entry.
    Scalar(T),
    /// The values of another operand on the very same entries, with its validity bits.
    Same(&'a [T], Option<Cow<'a, [u64]>>),
    /// A dense operand, read at each entry's position.
    Dense(DenseOperand<'a, T>),
}

impl<T: Element> EntryRhs<'_, T> {
    /// The operand, borrowed for one pass.
    pub fn other(&self) -> EntryOther<'_, T> {
        match self {
            EntryRhs::Scalar(s) => EntryOther::Scalar(*s),
            EntryRhs::Same(v, b) => EntryOther::Same(v, b.as_deref()),
            EntryRhs::Dense(d) => EntryOther::Dense(d),
        }
    }
}

/// A dense operand read at the positions of a sparse one (sparse ⊙ dense): its values in
/// row-major order and its mask, broadcast (NumPy rules) to the sparse shape, never
/// beyond it. The sparse layouts read it only at their valid positions.
pub struct DenseOperand<'a, T: Clone> {
    values: Cow<'a, [T]>,
    /// The operand's own shape.
    shape: &'a [usize],
    mask: Option<&'a BitMask>,
    /// Stride of each dim of the sparse shape in the operand (0 where it broadcasts).
    strides: Vec<usize>,
    /// How many times broadcasting repeats each operand element.
    repeat: usize,
}

impl<'a, T: Element> DenseOperand<'a, T> {
    /// The operand `a` broadcast to `shape`.
    ///
    /// # Errors
    /// [`MaskedError::ShapeMismatch`] when `a` does not broadcast to `shape` (or only
    /// beyond it).
    pub fn new<S: Data<Elem = T>, D: Dimension>(
        op: &'static str,
        a: &'a MaskedArray<S, D>,
        shape: &[usize],
    ) -> Result<Self> {
        let o = operand(a);
        let b = broadcast_shapes(op, o.shape, shape)?;
        if b != shape {
            return Err(MaskedError::ShapeMismatch {
                what: format!("{op}: a dense operand broadcasts beyond the sparse shape"),
                left: shape.to_vec(),
                right: o.shape.to_vec(),
            });
        }
        let own: usize = o.shape.iter().product();
        let total: usize = shape.iter().product();
        Ok(DenseOperand {
            strides: broadcast_strides(o.shape, shape),
            repeat: total.checked_div(own).unwrap_or(0),
            values: o.values,
            shape: o.shape,
            mask: o.mask,
        })
    }

    /// The operand offset of the position with these coordinates (in the sparse shape).
    #[inline]
    pub fn offset(&self, coords: impl IntoIterator<Item = usize>) -> usize {
        coords
            .into_iter()
            .zip(&self.strides)
            .map(|(c, s)| c * s)
            .sum()
    }

    /// The value at an operand offset.
    #[inline]
    pub fn value(&self, off: usize) -> T {
        self.values[off]
    }

    /// Whether the operand is valid at an offset.
    #[inline]
    pub fn valid(&self, off: usize) -> bool {
        self.mask.is_none_or(|m| m.get(off))
    }

    /// Whether the operand has a mask.
    pub fn has_mask(&self) -> bool {
        self.mask.is_some()
    }

    /// Number of valid positions of the operand broadcast to the sparse shape.
    pub fn valid_count(&self) -> usize {
        self.mask.map_or(self.values.len(), BitMask::count_ones) * self.repeat
    }

    /// Strides of the sparse shape's dims in the operand (0 where it broadcasts).
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// The operand offset of flat position `p` (row-major) of the sparse shape `shape`.
    #[inline]
    pub fn offset_at(&self, shape: &[usize], mut p: usize) -> usize {
        let mut off = 0;
        for (&n, &st) in shape.iter().zip(&self.strides).rev() {
            let n = n.max(1);
            off += (p % n) * st;
            p /= n;
        }
        off
    }

    /// The strict rule between a sparse operand of shape `shape` and this operand: this
    /// operand must be valid at exactly the sparse operand's valid entries. `entries()`
    /// yields those entries as `(flat position, operand offset)` pairs (row-major flat
    /// positions, increasing), `count` of them, in `parts` parts: `entries(i)` yields part
    /// `i` (checked in parallel), the parts in order. Without a mask this operand takes
    /// the sparse operand's mask and nothing is checked. Work O(valid entries); the shape
    /// is walked (up to the first difference) only to name the position of an error.
    ///
    /// # Errors
    /// [`MaskedError::MaskMismatch`] naming the first position (row-major) that is
    /// valid on one side only.
    pub fn check_strict<It: Iterator<Item = (usize, usize)>>(
        &self,
        op: &'static str,
        shape: &[usize],
        count: usize,
        parts: usize,
        entries: impl Fn(usize) -> It + Sync,
    ) -> Result<()> {
        if !self.has_mask() {
            return Ok(());
        }
        // the first valid entry where this operand is invalid ...
        let missing = par::map(parts, |i| {
            entries(i)
                .find(|&(_, off)| !self.valid(off))
                .map(|(p, _)| p)
        })
        .into_iter()
        .flatten()
        .next();
        if missing.is_none() && self.valid_count() == count {
            return Ok(());
        }
        // ... unless a position valid in this operand only comes before it
        let end = missing.unwrap_or_else(|| shape.iter().product());
        let mine: Vec<usize> = (0..parts)
            .flat_map(&entries)
            .map(|(p, _)| p)
            .filter(|&p| p < end)
            .collect();
        let mut next = mine.iter().copied().peekable();
        // an odometer over the shape: coordinates and this operand's offset
        let mut c = vec![0usize; shape.len()];
        let mut off = 0;
        for p in 0..end {
            if next.peek() == Some(&p) {
                next.next();
            } else if self.valid(off) {
                return Err(mask_mismatch(op, c, false));
            }
            for d in (0..shape.len()).rev() {
                c[d] += 1;
                off += self.strides[d];
                if c[d] < shape[d] {
                    break;
                }
                off -= c[d] * self.strides[d];
                c[d] = 0;
            }
        }
        match missing {
            Some(p) => Err(mask_mismatch(op, unravel(shape, p), true)),
            None => Ok(()),
        }
    }

    /// The `and` rule's validity of a sparse operand's `n` entries against this
    /// operand: `bits` (a bit per entry; `None`: every entry valid) with the entries
    /// where this operand is invalid cleared, in parallel over runs of entries.
    /// `offsets(range)` yields this operand's offsets of the entries in `range`, in
    /// entry order. Without a mask, `bits` unchanged.
    pub fn and_bits<F, It>(&self, n: usize, bits: Option<Vec<u64>>, offsets: F) -> Option<Vec<u64>>
    where
        F: Fn(std::ops::Range<usize>) -> It + Sync,
        It: Iterator<Item = usize>,
    {
        if !self.has_mask() {
            return bits;
        }
        const WORDS: usize = 256;
        let mut w = bits.unwrap_or_else(|| vec![u64::MAX; n.div_ceil(64)]);
        par::chunks_mut(&mut w, WORDS, |c, ws| {
            let lo = c * WORDS * 64;
            let hi = (lo + ws.len() * 64).min(n);
            for (q, off) in offsets(lo..hi).enumerate() {
                if !self.valid(off) {
                    ws[q / 64] &= !(1u64 << (q % 64));
                }
            }
        });
        Some(w)
    }

    /// One zero per operand element: the sums [`DenseOperand::gradient`] takes.
    pub fn zero_sums(&self) -> Vec<f64> {
        vec![0.0; self.values.len()]
    }

    /// The gradient with respect to this operand from its sums `acc` (one per operand
    /// element, in row-major order; what the sparse layouts' binary VJPs add up at
    /// [`DenseOperand::offset`]): a masked array of the operand's own shape and mask.
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] for `acc` of another length.
    pub fn gradient<R: Element + masked_core::Float>(
        &self,
        acc: Vec<f64>,
    ) -> Result<MaskedArrayD<R>> {
        if acc.len() != self.values.len() {
            return Err(MaskedError::InvalidData(format!(
                "{} gradient sums for a dense operand of {} elements",
                acc.len(),
                self.values.len()
            )));
        }
        gradient_array(self.shape, acc, self.mask)
    }
}

/// The gradients of both operands of a binary op with partials `op` on the broadcast
/// `shape`: `g · ∂f/∂x` at each valid output position (per `valid`; `None`: all),
/// summed into each operand's own (broadcast) position, in `f64`.
fn binary_grads<T: Element>(
    op: masked_core::binary::BinOp,
    shape: &[usize],
    a: &Operand<'_, T>,
    b: &Operand<'_, T>,
    valid: Option<&BitMask>,
    g: &[T::Real],
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

/// [`binary_grads`] without broadcasting (`x` of the output's shape, `y` too or a
/// scalar), the common case: one parallel pass writing `g · ∂f` in `R` straight into
/// each operand's gradient; a scalar's gradient is the sum (in `f64`), returned third.
fn flat_grads<T: Element>(
    op: masked_core::binary::BinOp,
    xs: &[T],
    ys: Src<'_, T>,
    valid: Option<&BitMask>,
    g: &[T::Real],
) -> (Vec<T::Real>, Vec<T::Real>, f64) {
    let n = xs.len();
    let dy_len = if matches!(ys, Src::Slice(_)) { n } else { 0 };
    let (mut dx, mut dy) = (fresh_vec::<T::Real>(n), fresh_vec::<T::Real>(dy_len));
    let sum = flat_grads_into(op, xs, ys, valid, g, &mut dx, &mut dy);
    (dx, dy, sum)
}

/// [`flat_grads`] into the caller's `dx` (`xs.len()` values) and `dy` (as many for a
/// `y` slice, ignored for a scalar); returns the scalar's gradient (0 for a slice).
fn flat_grads_into<T: Element>(
    op: masked_core::binary::BinOp,
    xs: &[T],
    ys: Src<'_, T>,
    valid: Option<&BitMask>,
    g: &[T::Real],
    dx: &mut [T::Real],
    dy: &mut [T::Real],
) -> f64 {
    use masked_core::binary::grad_run;
    let bits = valid.map(BitMask::bits);
    match ys {
        Src::Slice(y) => {
            par::chunks_mut2(dx, CHUNK, dy, CHUNK, |c, dx, dy| {
                let r = c * CHUNK..c * CHUNK + dx.len();
                let b = bits.map(|b| b.offset(r.start));
                grad_run(
                    op,
                    &xs[r.clone()],
                    Src::Slice(&y[r.clone()]),
                    &g[r],
                    b,
                    dx,
                    dy,
                );
            });
            0.0
        }
        // the scalar's gradient: the sum of its terms, kept in f64 per chunk
        // (one scratch per chunk of CHUNK elements)
        Src::Splat(_) => par::chunks_mut(dx, CHUNK, |c, dx| {
            let r = c * CHUNK..c * CHUNK + dx.len();
            let b = bits.map(|b| b.offset(r.start));
            let mut terms = vec![0.0f64; dx.len()];
            grad_run(op, &xs[r.clone()], ys, &g[r], b, dx, &mut terms[..]);
            terms.iter().sum::<f64>()
        })
        .into_iter()
        .sum::<f64>(),
    }
}

/// A gradient in `R` as a masked array of `shape` with `mask` (all valid for `None`).
fn grad_array<R: Element>(
    shape: &[usize],
    values: Vec<R>,
    mask: Option<&BitMask>,
) -> Result<MaskedArrayD<R>> {
    let data = ArrayD::from_shape_vec(IxDyn(shape), values)
        .map_err(|e| MaskedError::InvalidData(e.to_string()))?;
    let mask = match mask {
        Some(m) => m.clone(),
        None => BitMask::filled(shape, true)?,
    };
    MaskedArray::new(data, mask)
}

/// `values` (f64) as a masked array of `shape` in the float type `R`, with `mask`.
fn gradient_array<R: Element + masked_core::Float>(
    shape: &[usize],
    values: Vec<f64>,
    mask: Option<&BitMask>,
) -> Result<MaskedArrayD<R>> {
    grad_array(shape, values.into_iter().map(R::from_f64).collect(), mask)
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
        &self,
        req: &masked_core::OpRequest,
        rhs: &MaskedArray<S2, D2>,
        rule: MaskRule,
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
        &self,
        req: &masked_core::OpRequest,
        rhs: &MaskedArray<S2, D2>,
        rule: MaskRule,
        g: &MaskedArrayD<T::Real>,
        dx: &mut [T::Real],
        dy: &mut [T::Real],
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
        &self,
        req: &masked_core::OpRequest,
        s: T,
        g: &MaskedArrayD<T::Real>,
    ) -> Result<(MaskedArrayD<T::Real>, T::Real)> {
        let op = masked_core::binary_grad_op::<T>(req)?;
        let a = operand(self);
        check_grad_shape(op.name(), g.shape(), a.shape)?;
        let gv = g.row_major();
        let (da, _, ds) = flat_grads(op, &a.values, Src::Splat(s), a.mask, &gv);
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
    op: BinOp,
    a: &Operand<'_, T>,
    b: &Operand<'_, T>,
    rule: MaskRule,
    g: &MaskedArrayD<T::Real>,
    dx: &mut [T::Real],
    dy: &mut [T::Real],
) -> Result<()> {
    let shape = broadcast_shapes(op.name(), a.shape, b.shape)?;
    let valid = out_mask(op.name(), &shape, a.mask, b.mask, rule)?;
    check_grad_shape(op.name(), g.shape(), &shape)?;
    let gv = g.row_major();
    if a.shape == b.shape {
        let ys = Src::Slice(&b.values[..]);
        flat_grads_into(op, &a.values, ys, valid.as_deref(), &gv, dx, dy);
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
