//! What a sparse layout zips its entries with (sparse ⊙ x): a scalar, another operand on
//! the same entries, or a dense operand broadcast to the sparse shape and read only at the
//! entries' positions.

use masked_core::binary::{
    broadcast_shapes, broadcast_strides, mask_mismatch, rule_bits, unravel, DenseParts,
};
use masked_core::mask::first_difference;
use masked_core::{BitMask, Element, MaskRule, MaskedError, Result, ZipMap};
use masked_kernels::{par, Bits};
use std::borrow::Cow;

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
    /// Refuses `z(x, self)` where the sparse operand has no mask (`fill`: its unstored
    /// positions are valid zeros) unless `z` keeps them 0: with a scalar `s`, where
    /// `z(0, s) != 0`; with another operand on the same entries (then also without a
    /// mask), where `z(0, 0) != 0`; with a dense operand, always (every position would
    /// be valid and stored).
    ///
    /// # Errors
    /// [`MaskedError::Unsupported`] naming the op.
    pub fn keeps_unstored<Z: ZipMap<T>>(&self, fill: bool, z: &Z) -> Result<()> {
        let unstored = match self {
            EntryRhs::Scalar(s) => Some(*s),
            EntryRhs::Same(..) => Some(T::ZERO),
            EntryRhs::Dense(_) => None,
        };
        if fill && !unstored.is_some_and(|y| z.keeps_zero(T::ZERO, y)) {
            return Err(MaskedError::densifying(z.name()));
        }
        Ok(())
    }

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
    /// The operand `o` (a dense array's parts: `MaskedArray::dense_parts`) broadcast to
    /// `shape`.
    ///
    /// # Errors
    /// [`MaskedError::ShapeMismatch`] when `o` does not broadcast to `shape` (or only
    /// beyond it).
    pub fn new(op: &'static str, o: DenseParts<'a, T>, shape: &[usize]) -> Result<Self> {
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
        &self, op: &'static str, shape: &[usize], count: usize, parts: usize,
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

    /// The gradient values with respect to this operand, in `R`: the `contributions`
    /// (`(operand offset, value)`: what a sparse layout's binary VJP finds at each of
    /// its stored outputs, [`DenseOperand::offset`]) summed per operand element in `f64`.
    /// With [`DenseOperand::own_shape`] and [`DenseOperand::mask`] they make the gradient
    /// array (the dense layout's `grad_array`).
    pub fn gradient_sums<R: Element + masked_core::Float>(
        &self, contributions: impl Iterator<Item = (usize, f64)>,
    ) -> Vec<R> {
        let mut acc = vec![0.0f64; self.values.len()];
        for (off, v) in contributions {
            acc[off] += v;
        }
        acc.into_iter().map(R::from_f64).collect()
    }

    /// The operand's own shape (before broadcasting).
    pub fn own_shape(&self) -> &'a [usize] {
        self.shape
    }

    /// The operand's mask (`None`: every element valid).
    pub fn mask(&self) -> Option<&'a BitMask> {
        self.mask
    }
}

/// A sparse layout's entries as the binary ops' mask rules see them (CSR's and COO's
/// lanes implement it): how many there are, their own validity, each one's position,
/// and where each sits in a dense operand. The rules themselves ([`Entries::validity`])
/// are written once, here.
pub trait Entries<T: Element>: Sync {
    /// How many entries.
    fn entry_count(&self) -> usize;
    /// The entries' own validity bits (`None`: all valid).
    fn entry_bits(&self) -> Option<&[u64]>;
    /// The sparse shape.
    fn entry_shape(&self) -> Vec<usize>;
    /// The coordinates of entry `k`.
    fn entry_coords(&self, k: usize) -> Vec<usize>;
    /// How many parts the strict check against a dense operand walks in parallel.
    fn strict_parts(&self) -> usize;
    /// Part `i`'s entries in row-major order: `[entry, flat position, offset in d]`.
    fn strict_part<'s>(
        &'s self, i: usize, d: &'s DenseOperand<'_, T>,
    ) -> impl Iterator<Item = [usize; 3]> + 's;
    /// The offsets in `d` of the entries in `range`, in entry order.
    fn dense_offsets<'s>(
        &'s self, d: &'s DenseOperand<'_, T>, range: std::ops::Range<usize>,
    ) -> impl Iterator<Item = usize> + 's;
    /// `z(x, other)` at the entries `entries` (those of the rows `rows`, for a layout
    /// that walks its entries by rows), one slot of `out` per entry, where `bits`
    /// (counted from the first of them) are set or at every entry; elsewhere `out` keeps
    /// what it held. `Some(k)`: the op fails at entry `k` (the first such).
    fn zip_part<Z: ZipMap<T>>(
        &self, other: &EntryOther<'_, T>, z: &Z, rows: std::ops::Range<usize>,
        entries: std::ops::Range<usize>, bits: Option<Bits<'_>>, out: &mut [Z::Output],
    ) -> Option<usize>;

    /// The entries' validity under `rule` after its checks: `None` when every entry is
    /// valid (the result keeps this structure), else a bit per entry (under `and`, a
    /// dense operand's mask included).
    ///
    /// # Errors
    /// Under the strict rule, [`MaskedError::MaskMismatch`] naming the first position
    /// valid on one side only.
    fn validity(
        &self, other: &EntryOther<'_, T>, op: &'static str, rule: MaskRule,
    ) -> Result<Option<Vec<u64>>> {
        let own = self.entry_bits();
        // the other side's validity per entry: bits (same entries) or a dense mask
        let (obits, dense) = match other {
            EntryOther::Same(_, b) => (*b, None),
            EntryOther::Dense(d) => (None, Some(*d)),
            EntryOther::Scalar(_) => (None, None),
        };
        if rule == MaskRule::Strict {
            self.check_strict(op, obits, dense)?;
        }
        // combined validity of the entries (strict: the own bits, checked equal)
        let bits = rule_bits(rule, own, obits);
        Ok(match dense.filter(|_| rule == MaskRule::And) {
            Some(d) => d.and_bits(self.entry_count(), bits, |e| self.dense_offsets(d, e)),
            None => bits,
        })
    }

    /// The strict rule: the other side's validity (`obits` on the same entries, or a
    /// dense operand's mask) must equal this one's.
    ///
    /// # Errors
    /// As [`Entries::validity`].
    fn check_strict(
        &self, op: &'static str, obits: Option<&[u64]>, dense: Option<&DenseOperand<'_, T>>,
    ) -> Result<()> {
        let (n, own) = (self.entry_count(), self.entry_bits());
        let valid = |k: usize| own.is_none_or(|w| (w[k / 64] >> (k % 64)) & 1 == 1);
        if let Some(k) = first_difference(own, obits, n) {
            return Err(mask_mismatch(op, self.entry_coords(k), valid(k)));
        }
        let Some(d) = dense else {
            return Ok(());
        };
        let count = own.map_or(n, |w| Bits::new(w, 0).count_ones(n));
        d.check_strict(op, &self.entry_shape(), count, self.strict_parts(), |i| {
            self.strict_part(i, d)
                .filter(move |&[k, ..]| valid(k))
                .map(|[_, flat, off]| (flat, off))
        })
    }
}
