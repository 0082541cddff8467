//! Column indices with their width erased: the lane kernels read a CSR structure's
//! column indices through [`Cols`], so each kernel is compiled once for `u32` and
//! `usize` indices alike; a typed matrix (`MaskedCsr<T, I>`) converts at the edge,
//! without copying ([`CsrIndex`]).

use masked_core::scattered::LaneIds;
use masked_core::{MaskedError, Result};
use masked_kernels::pack::compress_into;
use masked_kernels::{par, Bits};
use sprs::{CsMatBase, SpIndex};
use std::borrow::Cow;

/// Borrowed column indices of a CSR structure, in either width the engine reads.
#[derive(Debug, Clone, Copy)]
pub enum Cols<'a> {
    /// 32-bit indices (scipy's int32, compact patterns).
    U32(&'a [u32]),
    /// `usize` indices (sprs's default).
    Usize(&'a [usize]),
}

/// Runs `$body` with `$ix` bound to the typed index slice of `$cols` (compiled once per
/// width: use it around loops whose speed depends on reading indices, not around
/// kernels generic over an op).
macro_rules! with_cols {
    ($cols:expr, $ix:ident => $body:expr) => {
        match $cols {
            $crate::cols::Cols::U32($ix) => $body,
            $crate::cols::Cols::Usize($ix) => $body,
        }
    };
}
pub(crate) use with_cols;

impl<'a> Cols<'a> {
    /// Number of indices.
    pub fn len(&self) -> usize {
        with_cols!(self, ix => ix.len())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The indices as the lane of each entry (a column's entries as one lane).
    pub fn lane_ids(&self) -> LaneIds<'a> {
        match *self {
            Cols::U32(ix) => LaneIds::U32(ix),
            Cols::Usize(ix) => LaneIds::Usize(ix),
        }
    }

    /// Index `k`, widened.
    #[inline]
    pub fn get(&self, k: usize) -> usize {
        match self {
            Cols::U32(ix) => ix[k] as usize,
            Cols::Usize(ix) => ix[k],
        }
    }

    /// Indices `r`.
    pub fn slice(&self, r: std::ops::Range<usize>) -> Cols<'a> {
        match *self {
            Cols::U32(ix) => Cols::U32(&ix[r]),
            Cols::Usize(ix) => Cols::Usize(&ix[r]),
        }
    }

    /// Whether both are the same memory, or equal (compared in parallel chunks).
    pub fn same_as(&self, other: &Cols<'_>) -> bool {
        match (self, other) {
            (Cols::U32(a), Cols::U32(b)) => par_eq(a, b),
            (Cols::Usize(a), Cols::Usize(b)) => par_eq(a, b),
            _ => self.len() == other.len() && (0..self.len()).all(|k| self.get(k) == other.get(k)),
        }
    }

    /// The indices whose bit in `valid` is set (`None`: all of them, borrowed).
    pub fn kept(&self, valid: Option<&[u64]>) -> ColsBuf<'a> {
        let Some(w) = valid else {
            return ColsBuf::Borrowed(*self);
        };
        match *self {
            Cols::U32(ix) => ColsBuf::U32(compress_par(ix, w)),
            Cols::Usize(ix) => ColsBuf::Usize(compress_par(ix, w)),
        }
    }

    /// The same indices, owned.
    pub fn to_owned_buf(&self) -> ColsBuf<'static> {
        match *self {
            Cols::U32(ix) => ColsBuf::U32(ix.to_vec()),
            Cols::Usize(ix) => ColsBuf::Usize(ix.to_vec()),
        }
    }
}

/// The elements of `xs` whose bit in `words` is set, in order (chunks in parallel).
pub(crate) fn compress_par<X: Copy + Send + Sync>(xs: &[X], words: &[u64]) -> Vec<X> {
    const CHUNK: usize = 1 << 16;
    let parts = par::map(xs.len().div_ceil(CHUNK), |c| {
        let r = c * CHUNK..((c + 1) * CHUNK).min(xs.len());
        let mut v = Vec::new();
        compress_into(&xs[r.clone()], Some(Bits::new(words, r.start)), &mut v);
        v
    });
    par::concat(parts)
}

/// Whether two slices are equal: the same memory at once, else compared in parallel
/// chunks (two separately built index arrays of one pattern are common and large).
pub(crate) fn par_eq<X: PartialEq + Sync>(a: &[X], b: &[X]) -> bool {
    const CHUNK: usize = 1 << 16;
    a.len() == b.len()
        && (std::ptr::eq(a.as_ptr(), b.as_ptr())
            || par::map(a.len().div_ceil(CHUNK), |c| {
                let r = c * CHUNK..((c + 1) * CHUNK).min(a.len());
                a[r.clone()] == b[r]
            })
            .into_iter()
            .all(|same| same))
}

/// A kernel's output column indices: borrowed from its input, or owned, in either width.
#[derive(Debug, Clone)]
pub enum ColsBuf<'a> {
    /// The input's own indices (every entry kept).
    Borrowed(Cols<'a>),
    /// Owned 32-bit indices.
    U32(Vec<u32>),
    /// Owned `usize` indices.
    Usize(Vec<usize>),
}

impl<'a> ColsBuf<'a> {
    /// The indices, borrowed.
    pub fn cols(&self) -> Cols<'_> {
        match self {
            ColsBuf::Borrowed(c) => *c,
            ColsBuf::U32(v) => Cols::U32(v),
            ColsBuf::Usize(v) => Cols::Usize(v),
        }
    }

    /// Whether they are borrowed from the input.
    pub fn is_borrowed(&self) -> bool {
        matches!(self, ColsBuf::Borrowed(_))
    }

    /// The same indices with no borrow.
    pub fn into_owned(self) -> ColsBuf<'static> {
        match self {
            ColsBuf::Borrowed(c) => c.to_owned_buf(),
            ColsBuf::U32(v) => ColsBuf::U32(v),
            ColsBuf::Usize(v) => ColsBuf::Usize(v),
        }
    }
}

/// A column index type of a typed CSR matrix: `u32` or `usize`. The lane kernels see
/// either as [`Cols`]; results come back as the caller's type, borrowed where they were.
pub trait CsrIndex: SpIndex + Send + Sync + 'static {
    /// The indices, width erased.
    fn cols(ix: &[Self]) -> Cols<'_>;
    /// Owned indices, width erased.
    fn buf(ix: Vec<Self>) -> ColsBuf<'static>;
    /// The typed slice, when `c` holds indices of this width.
    fn of(c: Cols<'_>) -> Option<&[Self]>;
    /// A kernel's output indices in this type: borrowed when they are borrowed indices of
    /// this width (always so for a kernel that ran on indices of this type), else owned.
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] for an index this type cannot hold (owned indices of
    /// the other width: a mask-free map's dense-sized structure).
    fn typed(b: ColsBuf<'_>) -> Result<Cow<'_, [Self]>>;
}

macro_rules! csr_index {
    ($t:ty, $v:ident) => {
        impl CsrIndex for $t {
            fn cols(ix: &[Self]) -> Cols<'_> {
                Cols::$v(ix)
            }
            fn buf(ix: Vec<Self>) -> ColsBuf<'static> {
                ColsBuf::$v(ix)
            }
            fn of(c: Cols<'_>) -> Option<&[Self]> {
                match c {
                    Cols::$v(ix) => Some(ix),
                    _ => None,
                }
            }
            fn typed(b: ColsBuf<'_>) -> Result<Cow<'_, [Self]>> {
                Ok(match b {
                    ColsBuf::Borrowed(Cols::$v(ix)) => Cow::Borrowed(ix),
                    ColsBuf::$v(v) => Cow::Owned(v),
                    other => {
                        let c = other.cols();
                        let v = (0..c.len())
                            .map(|k| {
                                <$t>::try_from_usize(c.get(k)).ok_or_else(|| {
                                    MaskedError::InvalidData(format!(
                                        "column index {} does not fit {}",
                                        c.get(k),
                                        stringify!($t)
                                    ))
                                })
                            })
                            .collect::<Result<Vec<$t>>>()?;
                        Cow::Owned(v)
                    }
                })
            }
        }
    };
}
csr_index!(u32, U32);
csr_index!(usize, Usize);

/// A lane kernel's CSR result with its index width erased: the shape, row pointer,
/// column indices (borrowed from the input where every entry is kept) and values. A
/// typed matrix turns it into its [`CsrMapped`](crate::CsrMapped) with
/// [`LanesMapped::typed`].
#[derive(Debug, Clone)]
pub struct LanesMapped<'a, O> {
    /// `(nrows, ncols)`.
    pub shape: (usize, usize),
    /// Row pointer.
    pub indptr: Vec<usize>,
    /// Column indices.
    pub indices: ColsBuf<'a>,
    /// One value per entry.
    pub values: Vec<O>,
}

impl<'a, O> LanesMapped<'a, O> {
    /// The result as a sprs matrix with column indices of type `I`.
    ///
    /// # Errors
    /// As [`CsrIndex::typed`].
    pub fn typed<I: CsrIndex>(self) -> Result<crate::CsrMapped<'a, O, I>> {
        // SAFETY: a kernel's output structure: the valid entries, in order, of a
        // validated structure, with prefix-sum row pointers; converting the index width
        // keeps every value (they were read from indices of width `I` or below `ncols`).
        let indices = I::typed(self.indices)?;
        Ok(unsafe {
            CsMatBase::new_unchecked(
                sprs::CompressedStorage::CSR,
                self.shape,
                self.indptr,
                indices,
                self.values,
            )
        })
    }

    /// Number of stored entries.
    pub fn nnz(&self) -> usize {
        self.values.len()
    }

    /// The values.
    pub fn data(&self) -> &[O] {
        &self.values
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_packs_the_valid_indices_of_either_width_and_typed_borrows_where_it_can() {
        // over three parallel chunks; every third index valid
        let n = 140_000;
        let ix: Vec<usize> = (0..n).map(|k| 2 * k + 1).collect();
        let ix32: Vec<u32> = ix.iter().map(|&c| c as u32).collect();
        let mut w = vec![0u64; n.div_ceil(64)];
        for k in (0..n).step_by(3) {
            w[k / 64] |= 1 << (k % 64);
        }
        let want: Vec<usize> = (0..n).step_by(3).map(|k| 2 * k + 1).collect();
        for c in [Cols::Usize(&ix), Cols::U32(&ix32)] {
            let b = c.kept(Some(&w));
            assert!(!b.is_borrowed());
            let got = b.cols();
            assert_eq!((0..got.len()).map(|k| got.get(k)).collect::<Vec<_>>(), want);
            assert!(c.kept(None).is_borrowed());
            assert_eq!(c.slice(3..5).get(1), 9);
        }
        // the caller's width: the very slice when it matches, converted otherwise
        let t = usize::typed(ColsBuf::Borrowed(Cols::Usize(&ix))).unwrap();
        assert!(matches!(t, Cow::Borrowed(s) if s.as_ptr() == ix.as_ptr()));
        let t = u32::typed(ColsBuf::Borrowed(Cols::Usize(&ix))).unwrap();
        assert_eq!(&t[..], &ix32[..]);
        let t = u32::typed(ColsBuf::U32(vec![4, 7])).unwrap();
        assert!(u32::typed(ColsBuf::Usize(vec![1 << 40])).is_err());
        assert!(matches!(t, Cow::Owned(ref v) if v == &[4, 7]));
        assert!(u32::of(Cols::Usize(&ix)).is_none());
        // equal across widths, unequal when shifted
        assert!(Cols::U32(&ix32).same_as(&Cols::Usize(&ix)));
        assert!(!Cols::U32(&ix32[1..]).same_as(&Cols::Usize(&ix[..n - 1])));
        assert!(Cols::U32(&ix32).same_as(&Cols::U32(&ix32)));
    }
}
