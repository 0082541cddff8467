//! The validated n-D coordinate pattern: canonical (row-major sorted), duplicate-free.

use crate::group::GroupPlan;
use masked_core::{check_lengths, BitMask, BoolArray, MaskedError, Result, ShapeLike};
use masked_kernels::par;
use rayon::prelude::*;
use std::borrow::{Borrow, Cow};
use std::sync::{Arc, OnceLock};

/// An n-D COO index pattern: a shape and the stored positions, sorted in row-major order
/// without duplicates. It is the stored structure of a [`crate::MaskedCoo`] and, on its
/// own, a COO mask ("mask from indices").
///
/// Coordinates are kept per dim (`coords(d)[k]` is entry `k`'s index along dim `d`), as
/// in torch's and pydata sparse's `[ndim, nnz]` index arrays.
///
/// ```
/// use masked::CooPattern;
/// // given unsorted; stored sorted
/// let p = CooPattern::from_coords(&[2, 3], &[vec![1, 0, 1], vec![0, 2, 2]]).unwrap();
/// assert_eq!(p.coords(0), &[0, 1, 1]);
/// assert_eq!(p.coords(1), &[2, 0, 2]);
/// assert_eq!(p.flat(), vec![2, 3, 5]);
/// // a repeated position or an index outside the shape is an error naming it
/// assert!(CooPattern::from_coords(&[2, 3], &[vec![1, 1], vec![2, 2]]).is_err());
/// assert!(CooPattern::from_coords(&[2, 3], &[vec![2], vec![0]]).is_err());
/// ```
///
/// Serialised (serde) as `{"shape": [...], "coords": [[...], ...]}` (one coordinate
/// array per dim, a COO file's `coords`). Deserialising re-validates through
/// [`CooPattern::from_coords`] (in range, no duplicate; sorted on the way in): a
/// corrupted or hostile pattern is an error, never undefined behaviour.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "CooRepr", into = "CooRepr")]
pub struct CooPattern {
    shape: Vec<usize>,
    nnz: usize,
    /// Dim-major: entry `k`'s index along dim `d` at `d * nnz + k`. Shared: a
    /// normalization's result stores its input's positions, and a clone of the pattern
    /// costs a reference count, not a copy of every coordinate.
    coords: Arc<Vec<usize>>,
    /// What the pattern computes from its coordinates on first use and keeps, shared by
    /// its clones (which have the same coordinates): grouping plans, flat positions.
    pub(crate) memo: Memo,
}

/// What a pattern keeps beside its value, each part built on first use, for as long as
/// the pattern (or a result sharing it) lives. Not part of the value: equal patterns
/// compare equal whatever they hold, and serialising skips it.
#[derive(Clone)]
pub(crate) struct Memo {
    /// The grouping plans: one slot per dim, for the maps and reductions along that dim
    /// alone whose grouping moves entries (not the last dim). Three index arrays of the
    /// entry count per dim used (order, columns, rows); none for a pattern never grouped
    /// so.
    plans: Arc<[OnceLock<GroupPlan>]>,
    /// The row-major flat positions ([`CooPattern::flat_slice`]): what a binary op, a
    /// merge or a gradient compares and stores, computed from the coordinates once (one
    /// pass over every dim's array: at 1M entries of three dims, 1.1 ms of a 1.9 ms
    /// `mul`) rather than on every call; 8 bytes an entry once an op has asked.
    flat: Arc<OnceLock<Vec<usize>>>,
    /// The lanes along the last dim ([`CooPattern::last_lanes`]): where each run of
    /// entries sharing their other coordinates starts, and its position over those; built
    /// by the first gradient along that dim (a scan of every other dim's coordinates:
    /// a fifth of a 1M-entry softmax VJP) and kept, 16 bytes a lane.
    last: Arc<OnceLock<(Vec<usize>, Vec<usize>)>>,
    /// Each entry's lane along a dim ([`CooPattern::lanes_across`]) where the other dims
    /// are two or more (the linear index over them, computed; with one other dim its
    /// coordinates are the ids, borrowed): one slot per dim, 8 bytes an entry for each
    /// dim a scattered map or gradient has run along.
    across: Arc<[OnceLock<Vec<usize>>]>,
}

impl Memo {
    fn new(ndim: usize) -> Memo {
        Memo {
            plans: (0..ndim).map(|_| OnceLock::new()).collect(),
            flat: Arc::default(),
            last: Arc::default(),
            across: (0..ndim).map(|_| OnceLock::new()).collect(),
        }
    }
}

impl PartialEq for Memo {
    fn eq(&self, _: &Memo) -> bool {
        true
    }
}

impl Eq for Memo {}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let built: Vec<usize> = (0..self.plans.len())
            .filter(|&d| self.plans[d].get().is_some())
            .collect();
        let across: Vec<usize> = (0..self.across.len())
            .filter(|&d| self.across[d].get().is_some())
            .collect();
        let (flat, last) = (self.flat.get().is_some(), self.last.get().is_some());
        write!(
            f,
            "plans built along dims {built:?}, flat positions built: {flat}, last-dim lanes \
             built: {last}, lane ids built along dims {across:?}"
        )
    }
}

/// Number of elements of `shape`, checked against overflow.
///
/// # Errors
/// [`MaskedError::InvalidData`] when the count does not fit in `usize`.
///
/// As numpy does, the product of the non-zero sizes must fit as well: `[0, 2^63, 4]`
/// holds no element, but its strides would overflow.
pub(crate) fn size_of(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .filter(|&&s| s != 0)
        .try_fold(1usize, |a, &s| a.checked_mul(s))
        .map(|n| if shape.contains(&0) { 0 } else { n })
        .ok_or_else(|| {
            MaskedError::InvalidData(format!("shape {shape:?} has more than 2^64 elements"))
        })
}

/// Row-major strides of `shape`.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1] * shape[d + 1];
    }
    st
}

/// Row-major flat positions `flat` as coordinates (`outs[d][k]`, dim `d` of entry `k`)
/// given the shape's `strides` (the last one 1): one dim at a time over the block, each
/// a loop without a carried dependence. The quotient by a stride comes from an `f64`
/// reciprocal and one correction step where every position is below 2^52 (exact there:
/// the estimate is off by at most one), from an integer division otherwise.
fn unravel(flat: &[usize], strides: &[usize], outs: &mut [&mut [usize]]) {
    let mut rest = flat.to_vec();
    let fast = flat.last().is_some_and(|&f| f < 1 << 52);
    let last = strides.len() - 1;
    for (d, &st) in strides[..last].iter().enumerate() {
        let out = &mut outs[d][..rest.len()];
        if fast {
            let inv = 1.0 / st as f64;
            for (o, r) in out.iter_mut().zip(rest.iter_mut()) {
                let mut q = (*r as f64 * inv) as usize;
                // one step either way: the estimate is within one of the quotient
                q -= usize::from(q * st > *r);
                q += usize::from((q + 1) * st <= *r);
                *o = q;
                *r -= q * st;
            }
        } else {
            for (o, r) in out.iter_mut().zip(rest.iter_mut()) {
                *o = *r / st;
                *r %= st;
            }
        }
    }
    outs[last][..rest.len()].copy_from_slice(&rest);
}

impl CooPattern {
    /// A pattern from one coordinate array per dim (all of one length), in any order.
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] for a wrong number of arrays or unequal lengths,
    /// [`MaskedError::IndexOutOfRange`] and [`MaskedError::DuplicateIndex`] naming the
    /// entry (in the order given).
    pub fn from_coords<C: AsRef<[usize]>>(shape: impl ShapeLike, coords: &[C]) -> Result<Self> {
        let nnz = coords.first().map_or(0, |c| c.as_ref().len());
        Ok(Self::canonical(&shape.to_shape(), coords, nnz)?.0)
    }

    /// Sorts `coords` (one array per dim, `nnz` entries) into a pattern and returns the
    /// permutation applied (`None` when they were already sorted): stored entry `k` is
    /// given entry `perm[k]`.
    pub(crate) fn canonical<C: AsRef<[usize]>>(
        shape: &[usize], coords: &[C], nnz: usize,
    ) -> Result<(Self, Option<Vec<usize>>)> {
        if coords.len() != shape.len() {
            return Err(MaskedError::InvalidData(format!(
                "{} coordinate arrays for a {}-d shape",
                coords.len(),
                shape.len()
            )));
        }
        if shape.is_empty() && nnz > 1 {
            return Err(MaskedError::DuplicateIndex {
                coords: vec![],
                first: 0,
                second: 1,
            });
        }
        size_of(shape)?;
        for (d, c) in coords.iter().enumerate() {
            let c = c.as_ref();
            if c.len() != nnz {
                return Err(MaskedError::InvalidData(format!(
                    "coordinate array {d} has {} entries, expected {nnz} (as array 0)",
                    c.len()
                )));
            }
            if let Some(k) = c.iter().position(|&i| i >= shape[d]) {
                return Err(MaskedError::IndexOutOfRange {
                    entry: k,
                    dim: d,
                    index: i64::try_from(c[k]).unwrap_or(i64::MAX),
                    size: shape[d],
                });
            }
        }
        let st = strides(shape);
        let flat = flat_of(coords.iter().map(AsRef::as_ref), &st, nnz);
        let dup = |first: usize, second: usize| MaskedError::DuplicateIndex {
            coords: coords.iter().map(|c| c.as_ref()[first]).collect(),
            first: first.min(second),
            second: first.max(second),
        };
        if flat.windows(2).any(|w| w[0] >= w[1]) {
            // unsorted (or a duplicate): sort entry numbers by position
            let mut order: Vec<(usize, usize)> = flat.iter().copied().zip(0..).collect();
            par::on_free_pool(|| order.par_sort_unstable());
            if let Some(w) = order.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(dup(w[0].1, w[1].1));
            }
            let perm: Vec<usize> = order.iter().map(|p| p.1).collect();
            let mut out = vec![0usize; shape.len() * nnz];
            for (d, c) in coords.iter().enumerate() {
                let c = c.as_ref();
                for (o, &p) in out[d * nnz..(d + 1) * nnz].iter_mut().zip(&perm) {
                    *o = c[p];
                }
            }
            let me = CooPattern {
                shape: shape.to_vec(),
                nnz,
                coords: Arc::new(out),
                memo: Memo::new(shape.len()),
            };
            return Ok((me, Some(perm)));
        }
        let mut out = Vec::with_capacity(shape.len() * nnz);
        for c in coords {
            out.extend_from_slice(c.as_ref());
        }
        Ok((
            CooPattern {
                shape: shape.to_vec(),
                nnz,
                coords: Arc::new(out),
                memo: Memo::new(shape.len()),
            },
            None,
        ))
    }

    /// A pattern from flat positions already known to be strictly increasing and inside
    /// `shape` (a `SparseArray`'s, validated when built). Their copy is not kept: a
    /// pattern holds its flat positions only once an op has asked for them (kept for
    /// every result, they held 8 bytes an entry that the allocator no longer reused, and
    /// a COO softmax's fresh output then faulted its pages: 1.09x).
    ///
    /// Unravelled in parallel blocks of entries, a dim at a time ([`unravel`]): the
    /// serial loop of divisions took half of a 1M-entry COO `x * 2` from Python.
    pub(crate) fn from_sorted_flat(shape: &[usize], flat: &[usize]) -> Self {
        const BLOCK: usize = 1 << 14;
        let nnz = flat.len();
        let mut coords = vec![0usize; shape.len() * nnz];
        if nnz > 0 && !shape.is_empty() {
            let st = strides(shape);
            // block `b` of every dim's column, for one task
            let mut cols: Vec<_> = coords
                .chunks_mut(nnz)
                .map(|c| c.chunks_mut(BLOCK))
                .collect();
            let tasks: Vec<(usize, Vec<&mut [usize]>)> = (0..nnz.div_ceil(BLOCK))
                .map(|b| {
                    let outs = cols.iter_mut().map(|c| c.next().unwrap_or_default());
                    (b, outs.collect())
                })
                .collect();
            masked_kernels::par::map_vec(tasks, |(b, mut outs)| {
                let lo = b * BLOCK;
                unravel(&flat[lo..(lo + BLOCK).min(nnz)], &st, &mut outs);
            });
        }
        CooPattern {
            shape: shape.to_vec(),
            nnz,
            coords: Arc::new(coords),
            memo: Memo::new(shape.len()),
        }
    }

    /// A pattern from strictly increasing row-major flat positions.
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] when they are not strictly increasing or not inside
    /// the shape.
    pub fn from_flat(shape: impl ShapeLike, flat: &[usize]) -> Result<Self> {
        let shape = &shape.to_shape()[..];
        let size = size_of(shape)?;
        if flat.windows(2).any(|w| w[0] >= w[1]) || flat.last().is_some_and(|&f| f >= size) {
            return Err(MaskedError::InvalidData(format!(
                "flat positions must be strictly increasing and below {size}"
            )));
        }
        Ok(Self::from_sorted_flat(shape, flat))
    }

    /// The positions where `mask` (row-major bools of `shape`: any iterable of `bool` or
    /// `&bool`) is true: a dense bool mask as a COO pattern.
    ///
    /// # Errors
    /// [`MaskedError::MaskLength`] when there is not exactly one value per element.
    ///
    /// ```
    /// use masked::CooPattern;
    /// let p = CooPattern::from_bools([2, 2], [true, false, false, true]).unwrap();
    /// assert_eq!(p.flat(), vec![0, 3]);
    /// ```
    pub fn from_bools<B: Borrow<bool>>(
        shape: impl ShapeLike, mask: impl IntoIterator<Item = B>,
    ) -> Result<Self> {
        // the bit mask checks the count (an endless iterator is a length error)
        let m = BitMask::from_bools(shape, mask)?;
        let flat: Vec<usize> = m.as_bitvec().iter_ones().collect();
        Ok(Self::from_sorted_flat(m.shape(), &flat))
    }

    /// The `true` positions of an `ndarray` bool array (owned, a view or a reference).
    ///
    /// # Errors
    /// A size that overflows.
    pub fn from_array(mask: impl BoolArray) -> Result<Self> {
        let v = mask.bool_view();
        Self::from_bools(v.shape(), v.iter())
    }

    /// Padding masks: for a `[batch, len, ...]` shape, the positions whose index along
    /// dim 1 is below its batch row's length (every position of the trailing dims).
    ///
    /// # Errors
    /// As [`check_lengths`]: a shape of rank < 2 or a
    /// lengths array not of the batch size, a length above `len`
    /// ([`MaskedError::LengthOutOfRange`]).
    ///
    /// ```
    /// use masked::CooPattern;
    /// let p = CooPattern::from_lengths([2, 3, 2], &[1, 2]).unwrap();
    /// assert_eq!(p.flat(), vec![0, 1, 6, 7, 8, 9]);
    /// ```
    pub fn from_lengths(shape: impl ShapeLike, lengths: &[usize]) -> Result<Self> {
        let shape = shape.to_shape();
        check_lengths(&shape, lengths)?;
        let inner = size_of(&shape[2..])?;
        let row = size_of(&shape[1..])?;
        size_of(&shape)?;
        let total = lengths.iter().map(|&l| l * inner).sum::<usize>();
        let mut flat = masked_core::try_vec(total, || format!("a pattern of shape {shape:?}"))?;
        for (b, &l) in lengths.iter().enumerate() {
            flat.extend(b * row..b * row + l * inner);
        }
        Self::from_flat(shape, &flat)
    }

    /// A banded mask of a 2-D `shape`: row `i` is valid at columns
    /// `i - lower ..= i + upper` (clipped). `banded([n, n], w, 0)` is a causal sliding
    /// window of `w + 1` positions.
    ///
    /// # Errors
    /// [`MaskedError::InvalidArgument`] for a shape that is not 2-D; a size that overflows.
    pub fn banded(shape: impl ShapeLike, lower: usize, upper: usize) -> Result<Self> {
        let (r, c) = shape.to_shape2()?;
        let size = size_of(&[r, c])?;
        // rows from c + lower on are empty, and every row of a 0-column shape: no work for
        // them (a [2^61, 0] shape holds nothing)
        let rows = if c == 0 {
            0
        } else {
            r.min(c.saturating_add(lower))
        };
        let band = lower.saturating_add(upper).saturating_add(1).min(c);
        let mut flat = masked_core::try_vec(rows.saturating_mul(band).min(size), || {
            format!("a banded pattern of shape [{r}, {c}]")
        })?;
        for i in 0..rows {
            let lo = i.saturating_sub(lower).min(c);
            let hi = i.saturating_add(upper).saturating_add(1).min(c);
            flat.extend(i * c + lo..i * c + hi.max(lo));
        }
        Self::from_flat([r, c], &flat)
    }

    /// A causal (lower-triangular, diagonal included) attention mask of `n` x `n`.
    ///
    /// # Errors
    /// A size that overflows.
    pub fn causal(n: usize) -> Result<Self> {
        Self::banded([n, n], n, 0)
    }

    /// Every position of `shape` (dense-sized).
    ///
    /// # Errors
    /// As [`CooPattern::from_flat`]; [`MaskedError::TooLarge`] when memory cannot hold
    /// the positions.
    pub fn full(shape: impl ShapeLike) -> Result<Self> {
        let shape = shape.to_shape();
        let n = size_of(&shape)?;
        let mut flat = masked_core::try_vec(n, || format!("a full pattern of shape {shape:?}"))?;
        flat.extend(0..n);
        Self::from_flat(shape, &flat)
    }

    /// Logical shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// Rank.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }
    /// Number of stored positions.
    pub fn nnz(&self) -> usize {
        self.nnz
    }
    /// The stored indices along dim `d`, one per entry.
    ///
    /// # Panics
    /// When `d >= ndim`.
    pub fn coords(&self, d: usize) -> &[usize] {
        &self.coords[d * self.nnz..(d + 1) * self.nnz]
    }
    /// The grouping plan of a map or reduction along dim `d` alone, built on first use
    /// (see [`GroupPlan`]); `None` where a grouping along `d` moves nothing (the last
    /// dim) or there is at most one entry (nothing to keep).
    pub(crate) fn plan(&self, d: usize) -> Result<Option<&GroupPlan>> {
        if d + 1 >= self.ndim() || self.nnz <= 1 {
            return Ok(None);
        }
        let slot = &self.memo.plans[d];
        if let Some(p) = slot.get() {
            return Ok(Some(p));
        }
        let coords: Vec<&[usize]> = (0..self.ndim()).map(|k| self.coords(k)).collect();
        let built = GroupPlan::build(&self.shape, &coords, &[d], self.nnz)?;
        // a racing caller's plan, if it got there first, is the same plan
        Ok(Some(slot.get_or_init(|| built)))
    }

    /// The lane of each entry along `d`: the linear index of its position over the
    /// other dims (row-major), the other dim's coordinates themselves where there is one,
    /// else computed on the first call and kept (shared by the pattern's clones).
    ///
    /// # Panics
    /// When `d >= ndim`.
    pub(crate) fn lanes_across(&self, d: usize) -> &[usize] {
        let others: Vec<usize> = (0..self.ndim()).filter(|&k| k != d).collect();
        if let [o] = others[..] {
            return self.coords(o);
        }
        self.memo.across[d].get_or_init(|| {
            let coords: Vec<&[usize]> = (0..self.ndim()).map(|k| self.coords(k)).collect();
            crate::group::index_over(&self.shape, &coords, &others, self.nnz).into_owned()
        })
    }

    /// The lanes along the last dim, the entries being in lane order: each lane's start
    /// (ending with the entry count) and its row-major position over the other dims.
    /// Scanned from the coordinates on the first call and kept (shared by the pattern's
    /// clones: a forward map's result and its gradient).
    ///
    /// # Errors
    /// A size that overflows (the pattern's shape was checked when it was made).
    pub(crate) fn last_lanes(&self) -> Result<(&[usize], &[usize])> {
        let (starts, keys) = match self.memo.last.get() {
            Some(l) => l,
            None => {
                let d = self.ndim().saturating_sub(1);
                let coords: Vec<&[usize]> = (0..=d).map(|k| self.coords(k)).collect();
                let rows = crate::group::rows_in_order(&self.shape, &coords, self.nnz, d, false)?;
                let built = (
                    rows.indptr.into_owned(),
                    rows.ids.map(Cow::into_owned).unwrap_or_default(),
                );
                // a racing caller's lanes, if it got there first, are the same lanes
                self.memo.last.get_or_init(|| built)
            }
        };
        Ok((starts, keys))
    }

    /// The stored positions as row-major flat indices (increasing), owned: a copy of
    /// [`CooPattern::flat_slice`].
    pub fn flat(&self) -> Vec<usize> {
        self.flat_slice().to_vec()
    }

    /// The stored positions as row-major flat indices (increasing), computed from the
    /// coordinates on the first call and kept (shared by the pattern's clones).
    pub fn flat_slice(&self) -> &[usize] {
        self.memo.flat.get_or_init(|| {
            flat_of(
                (0..self.ndim()).map(|d| self.coords(d)),
                &strides(&self.shape),
                self.nnz,
            )
        })
    }
    /// Whether both patterns store the same positions of the same shape.
    pub fn same_as(&self, other: &CooPattern) -> bool {
        self == other
    }
}

/// Linear indices `sum_d coords[d][k] * st[d]` of `nnz` entries (a row-major flat
/// position for full strides, a group key for the strides of a subset of dims).
pub(crate) fn flat_of<'c>(
    coords: impl Iterator<Item = &'c [usize]>, st: &[usize], nnz: usize,
) -> Vec<usize> {
    let dims: Vec<(&[usize], usize)> = coords
        .zip(st.iter().copied())
        .filter(|p| p.1 != 0)
        .collect();
    // the first dim writes and only the others add: a large buffer comes from the
    // allocator as untouched pages, and reading one before writing it maps the shared
    // zero page first, so every page would fault twice, the second time with a TLB
    // shootdown across the threads (at 2^22 entries, 7x the time of the whole op)
    let mut out = vec![0usize; nnz];
    const CHUNK: usize = 1 << 15;
    par::chunks_mut(&mut out, CHUNK, |c, o| {
        let Some(((first, s0), rest)) = dims.split_first() else {
            o.fill(0);
            return;
        };
        for (x, &i) in o.iter_mut().zip(&first[c * CHUNK..]) {
            *x = i * s0;
        }
        for (cd, s) in rest {
            for (x, &i) in o.iter_mut().zip(&cd[c * CHUNK..]) {
                *x += i * s;
            }
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flat positions are computed once and shared by the clones (a pointer, not a
    /// timing, proves it); equal patterns compare equal whether or not they hold them.
    /// Flat positions to coordinates, against the division written out, over blocks
    /// (more entries than one task's block), strides that are and are not powers of
    /// two, positions right below and above a stride's multiples, and a shape whose
    /// positions pass 2^52 (the integer path).
    #[test]
    fn from_sorted_flat_unravels_as_division_does() {
        let cases: [(&[usize], Vec<usize>); 6] = [
            // every position: every multiple of every stride
            (&[333, 3, 7, 11], (0..333 * 3 * 7 * 11).collect()),
            (&[5, 1_000_003, 3], (0..60_000).map(|k| k * 249).collect()),
            (
                &[1000, 1000, 100],
                (0..40_000).map(|k| k * 2_477 + k % 7).collect(),
            ),
            (&[7, 1 << 20, 3], (0..20_000).map(|k| k * 1_097).collect()),
            (&[4, 5], (0..20).collect()),
            (
                &[1 << 20, 1 << 20, 1 << 22],
                (0..4_000usize)
                    .map(|k| k * (1 << 50) + k * 3_333 + (k % 2))
                    .collect(),
            ),
        ];
        for (shape, flat) in cases {
            let p = CooPattern::from_flat(shape, &flat).unwrap();
            let st = strides(shape);
            for (k, &f) in flat.iter().enumerate() {
                let mut rest = f;
                for (d, &s) in st.iter().enumerate() {
                    assert_eq!(p.coords(d)[k], rest / s, "{shape:?} entry {k} dim {d}");
                    rest %= s;
                }
            }
            assert_eq!(p.flat(), flat);
        }
    }

    /// The reciprocal quotient at its edge: exact multiples of odd strides (and their
    /// neighbours) up to 2^52, where the `f64` estimate falls one short and the
    /// correction step counts.
    #[test]
    fn unravel_is_exact_up_to_two_to_the_52() {
        for st in [3usize, 7, 49, 1_000_003, 3_000_017, (1 << 26) + 1] {
            let mut flat = Vec::new();
            let top = ((1usize << 52) - 1) / st;
            for j in 0..2_000usize {
                let m = top - j * (top / 2_100);
                flat.extend([m * st - 1, m * st, m * st + 1]);
            }
            flat.sort_unstable();
            flat.dedup();
            let (mut q, mut r) = (vec![0; flat.len()], vec![0; flat.len()]);
            unravel(&flat, &[st, 1], &mut [&mut q, &mut r]);
            for (k, &f) in flat.iter().enumerate() {
                assert_eq!((q[k], r[k]), (f / st, f % st), "{f} by {st}");
            }
        }
    }

    /// The last dim's lanes are scanned once and shared by the pattern's clones (a
    /// pointer proves it): runs of entries with equal leading coordinates.
    #[test]
    fn last_dim_lanes_are_kept_and_shared() {
        let p = CooPattern::from_flat([3, 4, 5], &[0, 3, 7, 21, 22, 23, 59]).unwrap();
        let q = p.clone();
        let (starts, keys) = p.last_lanes().unwrap();
        // lanes (0,0) (0,1) (1,0) (2,3) at flat / 5 = 0, 1, 4, 11
        assert_eq!((starts, keys), (&[0, 2, 3, 6, 7][..], &[0, 1, 4, 11][..]));
        let (s2, k2) = q.last_lanes().unwrap();
        assert!(std::ptr::eq(starts, s2) && std::ptr::eq(keys, k2));
    }

    #[test]
    fn flat_positions_are_kept_and_shared() {
        let p = CooPattern::from_coords([4, 5, 6], &[vec![3, 0, 1], vec![4, 2, 0], vec![5, 1, 0]])
            .unwrap();
        let q = p.clone();
        let fresh = CooPattern::from_flat([4, 5, 6], &[13, 30, 119]).unwrap();
        assert_eq!(p.flat_slice(), &[13, 30, 119]);
        assert!(std::ptr::eq(
            p.flat_slice().as_ptr(),
            q.flat_slice().as_ptr()
        ));
        assert_eq!(p.flat(), vec![13, 30, 119]);
        assert!(!std::ptr::eq(p.flat().as_ptr(), p.flat_slice().as_ptr()));
        assert_eq!(fresh, p);
        assert_eq!(fresh.flat_slice(), p.flat_slice());
    }

    #[test]
    fn canonical_order_and_errors() {
        let (p, perm) = CooPattern::canonical(&[3, 2], &[vec![2, 0, 1], vec![1, 1, 0]], 3).unwrap();
        assert_eq!(p.flat(), vec![1, 2, 5]);
        assert_eq!(perm, Some(vec![1, 2, 0]));
        let (q, none) = CooPattern::canonical(&[3, 2], &[vec![0, 2], vec![1, 0]], 2).unwrap();
        assert_eq!(q.flat(), vec![1, 4]);
        assert!(none.is_none());
        match CooPattern::from_coords([3, 2], &[vec![2, 0, 2], vec![1, 1, 1]]) {
            Err(MaskedError::DuplicateIndex {
                coords,
                first,
                second,
            }) => {
                assert_eq!(coords, vec![2, 1]);
                assert_eq!((first, second), (0, 2));
            }
            other => panic!("expected a duplicate, got {other:?}"),
        }
        assert!(matches!(
            CooPattern::from_coords([3, 2], &[vec![0, 1], vec![1, 2]]),
            Err(MaskedError::IndexOutOfRange {
                entry: 1,
                dim: 1,
                index: 2,
                size: 2
            })
        ));
        assert!(CooPattern::from_coords([3, 2], &[vec![0, 1], vec![1]]).is_err());
        assert!(CooPattern::from_coords([3], &[vec![0], vec![1]]).is_err());
        assert!(CooPattern::from_coords([usize::MAX, 3], &[vec![0], vec![1]]).is_err());
        // rank 0: one position at most
        let (z, _) = CooPattern::canonical::<Vec<usize>>(&[], &[], 1).unwrap();
        assert_eq!(z.flat(), vec![0]);
        assert!(CooPattern::canonical::<Vec<usize>>(&[], &[], 2).is_err());
    }

    #[test]
    fn constructors() {
        let p = CooPattern::from_flat([2, 3, 4], &[0, 5, 23]).unwrap();
        assert_eq!(p.coords(0), &[0, 0, 1]);
        assert_eq!(p.coords(1), &[0, 1, 2]);
        assert_eq!(p.coords(2), &[0, 1, 3]);
        assert!(CooPattern::from_flat([2, 3], &[3, 3]).is_err());
        assert!(CooPattern::from_flat([2, 3], &[6]).is_err());
        assert_eq!(CooPattern::full([2, 2]).unwrap().nnz(), 4);
        assert!(CooPattern::from_lengths([2, 3], &[4, 0]).is_err());
        assert!(CooPattern::from_lengths([2, 3], &[1]).is_err());
        assert_eq!(
            CooPattern::from_lengths([2, 3], &[3, 1]).unwrap().flat(),
            vec![0, 1, 2, 3]
        );
        assert!(CooPattern::from_bools([2, 2], [true]).is_err());
    }
}

/// The portable serialised form of a [`CooPattern`].
#[derive(serde::Serialize, serde::Deserialize)]
struct CooRepr {
    shape: Vec<usize>,
    coords: Vec<Vec<usize>>,
}

impl TryFrom<CooRepr> for CooPattern {
    type Error = MaskedError;
    fn try_from(r: CooRepr) -> Result<Self> {
        CooPattern::from_coords(&r.shape, &r.coords)
    }
}

impl From<CooPattern> for CooRepr {
    fn from(p: CooPattern) -> Self {
        let coords = (0..p.ndim()).map(|d| p.coords(d).to_vec()).collect();
        CooRepr {
            shape: p.shape,
            coords,
        }
    }
}
