//! Binary elementwise ops on COO arrays (masked algebra, sparse in → sparse out): with a
//! scalar, with a dense operand read at the valid entries only, with another COO array
//! of the same pattern (values only) or of another (one merge pass over the flat
//! positions). Work is O(nnz + output); nothing is densified.

use crate::lanes::CooLanes;
use crate::pattern::size_of;
use crate::MaskedCoo;
use layout_dense::MaskedArray;
use masked_core::binary::{failed_at, mask_mismatch, merge, MergeStop, Side, Src};
use masked_core::{
    Element, MaskRule, MaskedError, Result, SparseArray, Splat, Value, ZipKernels, ZipMap,
};
use masked_kernels::par;
use masked_kernels::{fresh_vec, Bits};
use masked_sparse::{DenseOperand, Entries};
use ndarray::{Data, Dimension};

/// Entries per parallel task (a multiple of 64: tasks start on validity words).
const CHUNK: usize = 1 << 14;

/// What the entries are zipped with.
pub(crate) use masked_sparse::EntryOther as Other;

/// Fills `out` (one slot per entry) in parallel chunks of [`CHUNK`] entries by
/// `f(first entry, its validity bits, chunk)`, which returns the first entry where it
/// fails; the first such entry over all chunks.
pub(crate) fn fill_chunks<O: Send>(
    out: &mut [O], bits: Option<&[u64]>,
    f: impl Fn(usize, Option<Bits<'_>>, &mut [O]) -> Option<usize> + Sync,
) -> Option<usize> {
    par::chunks_mut(out, CHUNK, |c, o| {
        f(c * CHUNK, bits.map(|w| Bits::new(w, c * CHUNK)), o)
    })
    .into_iter()
    .flatten()
    .min()
}

impl<T: Element> CooLanes<'_, T> {
    pub(crate) fn coords_of(&self, k: usize) -> Vec<usize> {
        (0..self.pattern.ndim())
            .map(|d| self.pattern.coords(d)[k])
            .collect()
    }

    /// `z(x, other)` at every entry valid under `rule`.
    fn zip_entries<Z: ZipMap<T>>(
        &self, other: Other<'_, T>, z: &Z, rule: MaskRule,
    ) -> Result<SparseArray<Z::Output>> {
        let n = self.values.len();
        let bits = self.validity(&other, z.name(), rule)?;
        let mut out = fresh_vec::<Z::Output>(n);
        self.zip_all(&other, z, bits.as_deref(), &mut out)?;
        let (flat, out) = match bits {
            None => (self.pattern.flat(), out),
            Some(w) => {
                let flat = self.pattern.flat_slice();
                let b = Bits::new(&w, 0);
                let f = (0..n).filter(|&k| b.get(k)).map(|k| flat[k]).collect();
                let v = (0..n).filter(|&k| b.get(k)).map(|k| out[k]).collect();
                (f, v)
            }
        };
        SparseArray::new(self.shape().to_vec(), flat, out)
    }

    /// `z(x, other)` at every entry valid by `bits` (`None`: all), written into `out`
    /// (one value per entry), in parallel chunks.
    pub(crate) fn zip_all<Z: ZipMap<T>>(
        &self, other: &Other<'_, T>, z: &Z, bits: Option<&[u64]>, out: &mut [Z::Output],
    ) -> Result<()> {
        let bad = fill_chunks(out, bits, |lo, b, o| self.zip_range(other, z, lo, b, o));
        match bad {
            Some(k) => Err(failed_at(z, self.coords_of(k))),
            None => Ok(()),
        }
    }

    /// `z(x, other)` over the entries `lo .. lo + out.len()`, written into `out`, where
    /// `bits` (counted from entry `lo`) are set, or at every entry. At the first entry
    /// where `z` fails: `Some(entry)`.
    pub(crate) fn zip_range<Z: ZipMap<T>>(
        &self, other: &Other<'_, T>, z: &Z, lo: usize, bits: Option<Bits<'_>>,
        out: &mut [Z::Output],
    ) -> Option<usize> {
        let hi = lo + out.len();
        let ys: Vec<T>;
        let y = match other {
            Other::Scalar(s) => Src::Splat(*s),
            Other::Same(v, _) => Src::Slice(&v[lo..hi]),
            Other::Dense(d) => {
                ys = (lo..hi).map(|k| d.value(self.offset(d, k))).collect();
                Src::Slice(&ys[..])
            }
        };
        z.run(Src::Slice(&self.values[lo..hi]), y, bits, out)
            .map(|k| lo + k)
    }

    /// The row-major flat position of entry `k`.
    #[inline]
    fn flat_at(&self, k: usize) -> usize {
        let shape = self.shape();
        (0..shape.len()).fold(0, |f, d| f * shape[d] + self.pattern.coords(d)[k])
    }

    /// The dense operand's offset of entry `k`.
    #[inline]
    fn offset(&self, d: &DenseOperand<'_, T>, k: usize) -> usize {
        (0..self.pattern.ndim())
            .map(|dim| self.pattern.coords(dim)[k] * d.strides()[dim])
            .sum()
    }

    /// `z(self, other)` for two patterns of one shape: one merge over the flat positions.
    pub(crate) fn zip_merge<Z: ZipMap<T>>(
        &self, other: &CooLanes<'_, T>, z: &Z, rule: MaskRule,
    ) -> Result<SparseArray<Z::Output>> {
        if self.fill && other.fill && !z.keeps_zero(T::ZERO, T::ZERO) {
            return Err(MaskedError::densifying(z.name()));
        }
        let shape = self.shape().to_vec();
        let (fa, fb) = (self.pattern.flat_slice(), other.pattern.flat_slice());
        let a = Side::new(fa, self.values, self.valid.as_deref(), 0, self.fill);
        let b = Side::new(fb, other.values, other.valid.as_deref(), 0, other.fill);
        let (mut pos, mut val) = (Vec::new(), Vec::new());
        let size = size_of(&shape)?;
        let unravel = |p: usize| {
            let mut c = vec![0; shape.len()];
            let mut p = p;
            for d in (0..shape.len()).rev() {
                c[d] = p % shape[d].max(1);
                p /= shape[d].max(1);
            }
            c
        };
        merge(a, b, z, rule, size, |p| p, &mut pos, &mut val).map_err(|s| match s {
            MergeStop::Mismatch { pos, left_valid } => {
                mask_mismatch(z.name(), unravel(pos), left_valid)
            }
            MergeStop::Fails { pos } => failed_at(z, unravel(pos)),
        })?;
        SparseArray::new(shape, pos, val)
    }
}

/// With a scalar: the result stores the valid positions. Without a mask, the stored
/// entries are kept when `z(0, s) == 0`, and any other op is an error.
impl<T: Element> ZipKernels<T, Splat<T>> for MaskedCoo<T> {
    type Zipped<O: Value> = SparseArray<O>;
    fn zip_elements<Z: ZipMap<T>>(
        &self, s: &Splat<T>, z: &Z, rule: MaskRule,
    ) -> Result<SparseArray<Z::Output>> {
        let l = self.lanes();
        if l.fill && !z.keeps_zero(T::ZERO, s.0) {
            return Err(MaskedError::densifying(z.name()));
        }
        CooLanes { fill: false, ..l }.zip_entries(Other::Scalar(s.0), z, rule)
    }
}

/// With another COO array of the same shape: values only on one pattern, else one merge.
impl<T: Element> ZipKernels<T, MaskedCoo<T>> for MaskedCoo<T> {
    type Zipped<O: Value> = SparseArray<O>;
    fn zip_elements<Z: ZipMap<T>>(
        &self, rhs: &MaskedCoo<T>, z: &Z, rule: MaskRule,
    ) -> Result<SparseArray<Z::Output>> {
        let (a, b, same) = pair(z.name(), self, rhs)?;
        if same && !a.fill && !b.fill {
            a.zip_entries(Other::Same(b.values, b.valid.as_deref()), z, rule)
        } else {
            a.zip_merge(&b, z, rule)
        }
    }
}

/// With a dense array broadcastable to this array's shape: read only at the valid
/// entries. A mask-free COO array is an error: every position would be valid and stored.
impl<T: Element, S: Data<Elem = T>, D: Dimension> ZipKernels<T, MaskedArray<S, D>>
    for MaskedCoo<T>
{
    type Zipped<O: Value> = SparseArray<O>;
    fn zip_elements<Z: ZipMap<T>>(
        &self, rhs: &MaskedArray<S, D>, z: &Z, rule: MaskRule,
    ) -> Result<SparseArray<Z::Output>> {
        let l = self.lanes();
        if l.fill {
            return Err(MaskedError::densifying(z.name()));
        }
        let d = DenseOperand::new(z.name(), rhs.dense_parts(), self.shape())?;
        l.zip_entries(Other::Dense(&d), z, rule)
    }
}

/// The lanes of two COO arrays of one shape, and whether they have one pattern.
///
/// # Errors
/// [`MaskedError::ShapeMismatch`] for arrays of different shapes.
pub(crate) fn pair<'x, T: Element>(
    op: &str, a: &'x MaskedCoo<T>, b: &'x MaskedCoo<T>,
) -> Result<(CooLanes<'x, T>, CooLanes<'x, T>, bool)> {
    if a.shape() != b.shape() {
        return Err(MaskedError::ShapeMismatch {
            what: format!("{op}: sparse operands must have one shape"),
            left: a.shape().to_vec(),
            right: b.shape().to_vec(),
        });
    }
    let (a, b) = (a.lanes(), b.lanes());
    let same = std::ptr::eq(a.pattern, b.pattern) || a.pattern.same_as(b.pattern);
    Ok((a, b, same))
}

/// Part of the strict check: runs of 2^14 entries.
const STRICT_PART: usize = 1 << 14;

impl<T: Element> Entries<T> for CooLanes<'_, T> {
    /// In storage order, by entries.
    fn zip_part<Z: ZipMap<T>>(
        &self, other: &Other<'_, T>, z: &Z, _: std::ops::Range<usize>,
        entries: std::ops::Range<usize>, bits: Option<Bits<'_>>, out: &mut [Z::Output],
    ) -> Option<usize> {
        self.zip_range(other, z, entries.start, bits, out)
    }
    fn entry_count(&self) -> usize {
        self.values.len()
    }
    fn entry_bits(&self) -> Option<&[u64]> {
        self.valid.as_deref()
    }
    fn entry_shape(&self) -> Vec<usize> {
        self.shape().to_vec()
    }
    fn entry_coords(&self, k: usize) -> Vec<usize> {
        self.coords_of(k)
    }
    fn strict_parts(&self) -> usize {
        self.values.len().div_ceil(STRICT_PART)
    }
    fn strict_part<'s>(
        &'s self, i: usize, d: &'s DenseOperand<'_, T>,
    ) -> impl Iterator<Item = [usize; 3]> + 's {
        let part = i * STRICT_PART..((i + 1) * STRICT_PART).min(self.values.len());
        part.map(move |k| [k, self.flat_at(k), self.offset(d, k)])
    }
    fn dense_offsets<'s>(
        &'s self, d: &'s DenseOperand<'_, T>, e: std::ops::Range<usize>,
    ) -> impl Iterator<Item = usize> + 's {
        e.map(move |k| self.offset(d, k))
    }
}
