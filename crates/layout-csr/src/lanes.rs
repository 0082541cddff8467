//! The kernels of the CSR layout: fold, gather and map each lane of a resolved masked
//! CSR matrix, along dim 1 (rows), dim 0 (columns) or all dims.

use crate::partition::{groups, row_tasks};
use masked_core::{
    not_nan_words, wrap_dim, Dims, Element, Fold, LaneKernels, LaneMap, LaneStat, MaskedError,
    Result, SparseArray,
};
use masked_kernels::pack::compress_into;
use masked_kernels::{fresh_vec, Bits};
use rayon::prelude::*;
use sprs::{CsMatBase, SpIndex};
use std::borrow::Cow;
use std::ops::Range;

/// The output of a CSR normalization (softmax, cumsum, ...): a sprs CSR matrix whose
/// stored entries are exactly the mask's valid positions. When every stored entry is
/// valid (mask = the input's pattern, no NaN dropped) its column indices are the input's
/// own, borrowed rather than copied, as torch's sparse softmax shares its input's
/// indices; otherwise they are owned. `to_owned()` gives a plain [`sprs::CsMatI`].
pub type CsrMapped<'a, O, I> = CsMatBase<O, I, Vec<usize>, Cow<'a, [I]>, Vec<O>, usize>;

/// The lanes of a masked CSR matrix as the kernels see them: a row structure whose
/// entries carry values, an optional validity bit per entry, and whether the unstored
/// positions are valid zeros.
///
/// - mask = the input's pattern: the input's entries, every one valid;
/// - a separate mask pattern: the mask's entries, with the input's value or 0;
/// - no mask: the input's entries plus every unstored position as a valid 0;
/// - the nan-family adds validity bits `!is_nan` to any of these.
///
/// Get one from [`crate::MaskedCsr::lanes`]; every op of [`MaskedOps`](masked_core::MaskedOps) runs on it.
///
/// Invariant (kept by [`CsrLanes::try_new`], by sprs's safe constructors and by
/// [`crate::Pattern`]): every column index is below `shape.1`; the column fold indexes
/// its per-column arrays without bounds checks on it.
#[derive(Debug, Clone)]
pub struct CsrLanes<'a, T, I: SpIndex = usize> {
    pub(crate) shape: (usize, usize),
    pub(crate) indptr: &'a [usize],
    pub(crate) indices: &'a [I],
    pub(crate) values: &'a [T],
    pub(crate) valid: Option<Cow<'a, [u64]>>,
    pub(crate) fill: bool,
}

/// The partial column fold of one row group: a state per column, a bit per column
/// saying whether it saw a valid entry, and (without a mask) a stored count per column.
struct ColGroup<S> {
    states: Vec<S>,
    seen: Vec<u64>,
    stored: Vec<u32>,
}

/// Which dims a reduction over a 2-D matrix covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Axis {
    Rows,
    Cols,
    All,
}

fn axis(dims: &Dims) -> Result<Axis> {
    Ok(match dims.canonical(2)?.as_slice() {
        [1] => Axis::Rows,
        [0] => Axis::Cols,
        _ => Axis::All,
    })
}

fn out_shape(shape: (usize, usize), ax: Axis, keepdim: bool) -> Vec<usize> {
    match (ax, keepdim) {
        (Axis::Rows, false) => vec![shape.0],
        (Axis::Rows, true) => vec![shape.0, 1],
        (Axis::Cols, false) => vec![shape.1],
        (Axis::Cols, true) => vec![1, shape.1],
        (Axis::All, false) => vec![],
        (Axis::All, true) => vec![1, 1],
    }
}

/// Keeps the lanes for which `f` gave a value: the sparse result.
fn collect_sparse<O>(
    shape: Vec<usize>,
    lanes: impl IntoIterator<Item = Option<O>>,
) -> Result<SparseArray<O>> {
    let mut indices = Vec::new();
    let mut values = Vec::new();
    for (i, v) in lanes.into_iter().enumerate() {
        if let Some(v) = v {
            indices.push(i);
            values.push(v);
        }
    }
    SparseArray::new(shape, indices, values)
}

/// The first position in `0..` that the increasing `stored` positions skip.
fn first_gap(stored: impl Iterator<Item = usize>) -> usize {
    let mut next = 0;
    for p in stored {
        if p != next {
            break;
        }
        next += 1;
    }
    next
}

impl<'a, T: Element, I: SpIndex> CsrLanes<'a, T, I> {
    /// Lanes over raw parts: rows `indptr` (from 0 to `indices.len()`, non-decreasing),
    /// column `indices` strictly increasing within each row and below `shape.1`, one
    /// value per entry, optional validity bits (bit `k` of the words for entry `k`), and
    /// `fill`: whether the unstored positions are valid zeros. Other layouts run their
    /// lanes through these kernels this way (the COO layout groups its entries into
    /// such rows).
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] naming the first broken rule.
    ///
    /// ```
    /// use layout_csr::CsrLanes;
    /// use masked_core::MaskedOps;
    /// let (indptr, cols, vals) = ([0, 2, 2], [1usize, 3], [4.0f64, 5.0]);
    /// let l = CsrLanes::try_new((2, 4), &indptr, &cols, &vals, None, false).unwrap();
    /// assert_eq!(l.sum(1, false).unwrap().values(), &[9.0]);
    /// assert!(CsrLanes::try_new((2, 4), &indptr, &[3usize, 1], &vals, None, false).is_err());
    /// ```
    pub fn try_new(
        shape: (usize, usize),
        indptr: &'a [usize],
        indices: &'a [I],
        values: &'a [T],
        valid: Option<&'a [u64]>,
        fill: bool,
    ) -> Result<Self> {
        let bad = |m: String| Err(MaskedError::InvalidData(m));
        if indptr.len() != shape.0 + 1 || indptr[0] != 0 || indptr[shape.0] != indices.len() {
            return bad(format!(
                "row pointer of length {} must run from 0 to {} over {} rows",
                indptr.len(),
                indices.len(),
                shape.0
            ));
        }
        if values.len() != indices.len() {
            return bad(format!(
                "{} values for {} entries",
                values.len(),
                indices.len()
            ));
        }
        if valid.is_some_and(|w| w.len() < indices.len().div_ceil(64)) {
            return bad("too few validity words".into());
        }
        if let Some(r) = indptr.windows(2).position(|w| w[0] > w[1]) {
            return bad(format!("row pointer decreases at row {r}"));
        }
        let broken = (0..shape.0)
            .into_par_iter()
            .with_min_len(1 << 12)
            .find_first(|&r| {
                let row = &indices[indptr[r]..indptr[r + 1]];
                row.windows(2).any(|w| w[0] >= w[1])
                    || row.last().is_some_and(|c| c.index() >= shape.1)
            });
        if let Some(r) = broken {
            return bad(format!(
                "row {r}: indices not strictly increasing and below {}",
                shape.1
            ));
        }
        Ok(CsrLanes {
            shape,
            indptr,
            indices,
            values,
            valid: valid.map(Cow::Borrowed),
            fill,
        })
    }

    /// Lanes over raw parts that are not checked again: the trusted entry of a layout
    /// that builds the parts itself (the COO layout's grouping), so structure validated
    /// once at its public boundary is not validated in O(nnz) on every op. Debug builds
    /// (and the tests) still run [`CsrLanes::try_new`]'s checks.
    ///
    /// # Safety
    /// The parts keep every rule [`CsrLanes::try_new`] checks: `indptr` has `shape.0 + 1`
    /// non-decreasing entries from 0 to `indices.len()`, the indices of each row are
    /// strictly increasing and below `shape.1`, one value per index, and at least
    /// `indices.len().div_ceil(64)` validity words. The kernels index without bounds
    /// checks on these invariants.
    #[doc(hidden)]
    pub unsafe fn new_unchecked(
        shape: (usize, usize),
        indptr: &'a [usize],
        indices: &'a [I],
        values: &'a [T],
        valid: Option<&'a [u64]>,
        fill: bool,
    ) -> Self {
        debug_assert!(
            Self::try_new(shape, indptr, indices, values, valid, fill).is_ok(),
            "CsrLanes::new_unchecked: {:?}",
            Self::try_new(shape, indptr, indices, values, valid, fill).err()
        );
        CsrLanes {
            shape,
            indptr,
            indices,
            values,
            valid: valid.map(Cow::Borrowed),
            fill,
        }
    }

    /// The same lanes with validity bits `!is_nan` ANDed in (unstored zeros stay
    /// valid); the bits are owned, the structure and values still borrowed.
    pub fn nan_masked(&self) -> CsrLanes<'a, T, I> {
        CsrLanes {
            valid: Some(Cow::Owned(not_nan_words(
                self.values,
                self.valid.as_deref(),
            ))),
            ..*self
        }
    }

    /// `(nrows, ncols)`.
    pub fn shape(&self) -> (usize, usize) {
        self.shape
    }

    /// Number of entries (stored positions of the lane structure).
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// A reduction over `dims`: `lanes` gives every output lane's value (`None` where
    /// the lane has no valid element), which become the sparse result.
    fn reduce<O>(
        &self,
        dims: &Dims,
        keepdim: bool,
        lanes: impl FnOnce(Axis) -> Vec<Option<O>>,
    ) -> Result<SparseArray<O>> {
        let ax = axis(dims)?;
        collect_sparse(out_shape(self.shape, ax, keepdim), lanes(ax))
    }

    fn row(&self, r: usize) -> Range<usize> {
        self.indptr[r]..self.indptr[r + 1]
    }

    fn bits_at(&self, start: usize) -> Option<Bits<'_>> {
        self.valid.as_deref().map(|w| Bits::new(w, start))
    }

    fn is_valid(&self, k: usize) -> bool {
        self.valid
            .as_deref()
            .is_none_or(|w| (w[k / 64] >> (k % 64)) & 1 == 1)
    }

    fn count_valid(&self, e: Range<usize>) -> usize {
        self.bits_at(e.start)
            .map_or(e.len(), |b| b.count_ones(e.len()))
    }

    fn col(&self, k: usize) -> usize {
        self.indices[k].index_unchecked()
    }

    /// Folds the entries `ents` of one lane, whose positions (from `pos`) lie in
    /// `span`; with `fill`, the positions of `span` not among them are valid zeros.
    fn fold_segment<F: Fold<T>>(
        &self,
        op: &F,
        st: &mut F::State,
        ents: Range<usize>,
        pos: impl Fn(usize) -> i64,
        span: Range<i64>,
    ) {
        if !op.positional() {
            op.push_run(st, &self.values[ents.clone()], self.bits_at(ents.start), 0);
            if self.fill {
                let zeros = (span.end - span.start) as u64 - ents.len() as u64;
                op.push_zeros(st, zeros, span.start);
            }
            return;
        }
        let mut next = span.start;
        for k in ents {
            let p = pos(k);
            if self.fill && p > next {
                op.push_zeros(st, (p - next) as u64, next);
            }
            if self.is_valid(k) {
                op.push(st, self.values[k], p);
            }
            next = p + 1;
        }
        if self.fill && span.end > next {
            op.push_zeros(st, (span.end - next) as u64, next);
        }
    }

    /// Whether a lane with these entries and `len` positions has a valid element.
    fn lane_valid(&self, ents: Range<usize>, len: usize) -> bool {
        (self.fill && len > ents.len()) || self.count_valid(ents) > 0
    }

    fn fold_rows<F: Fold<T>>(&self, op: &F) -> Vec<Option<F::Output>> {
        let ncols = self.shape.1;
        let fold_row = |ents: Range<usize>, span: Range<i64>| {
            let mut st = op.identity();
            self.fold_segment(op, &mut st, ents, |k| self.col(k) as i64, span);
            st
        };
        let tasks = row_tasks(self.indptr);
        let parts: Vec<Vec<Option<F::Output>>> = tasks
            .par_iter()
            .map(|t| {
                if let Some(pieces) = t.pieces() {
                    // one huge row: fold its pieces in parallel, merge them in order
                    let r = t.rows.start;
                    let e = self.row(r);
                    let states: Vec<F::State> = pieces
                        .par_iter()
                        .map(|p| {
                            let lo = if p.start == e.start {
                                0
                            } else {
                                self.col(p.start - 1) + 1
                            };
                            let hi = if p.end == e.end {
                                ncols
                            } else {
                                self.col(p.end - 1) + 1
                            };
                            fold_row(p.clone(), lo as i64..hi as i64)
                        })
                        .collect();
                    let mut it = states.into_iter();
                    let mut st = it.next().unwrap_or_else(|| op.identity());
                    for s in it {
                        op.merge(&mut st, s);
                    }
                    let ok = op.valid_everywhere() || self.lane_valid(e, ncols);
                    return vec![ok.then(|| op.finish(&st))];
                }
                t.rows
                    .clone()
                    .map(|r| {
                        let e = self.row(r);
                        if !op.valid_everywhere() && !self.lane_valid(e.clone(), ncols) {
                            return None;
                        }
                        Some(op.finish(&fold_row(e, 0..ncols as i64)))
                    })
                    .collect()
            })
            .collect();
        parts.into_iter().flatten().collect()
    }

    fn fold_cols<F: Fold<T>>(&self, op: &F) -> Vec<Option<F::Output>> {
        let (nrows, ncols) = self.shape;
        let positional_fill = self.fill && op.positional();
        let parts: Vec<ColGroup<F::State>> = groups(self.indptr)
            .into_par_iter()
            .map(|rows| {
                let mut states = vec![op.identity(); ncols];
                // one bit per column: any valid entry seen (L1-resident, unlike a count)
                let mut seen = vec![0u64; ncols.div_ceil(64)];
                let mut stored = if self.fill {
                    vec![0u32; ncols]
                } else {
                    Vec::new()
                };
                let mut next = if positional_fill {
                    vec![rows.start as u32; ncols]
                } else {
                    Vec::new()
                };
                if self.valid.is_none() && !self.fill {
                    // the fast path (mask = a pattern): every entry valid, no zeros
                    for r in rows.clone() {
                        let e = self.row(r);
                        for (x, c) in self.values[e.clone()].iter().zip(&self.indices[e]) {
                            let c = c.index_unchecked();
                            // SAFETY: every column index is below `ncols` (the
                            // struct's invariant): `states` has `ncols` slots and
                            // `seen` a bit for each.
                            unsafe {
                                op.push(states.get_unchecked_mut(c), *x, r as i64);
                                *seen.get_unchecked_mut(c / 64) |= 1 << (c % 64);
                            }
                        }
                    }
                } else {
                    // validity bits or unstored zeros: entry by entry
                    for r in rows.clone() {
                        for k in self.row(r) {
                            let c = self.col(k);
                            if positional_fill && (r as u32) > next[c] {
                                let gap = r as u32 - next[c];
                                op.push_zeros(&mut states[c], gap as u64, next[c] as i64);
                            }
                            if self.is_valid(k) {
                                op.push(&mut states[c], self.values[k], r as i64);
                                seen[c / 64] |= 1 << (c % 64);
                            }
                            if self.fill {
                                stored[c] += 1;
                            }
                            if positional_fill {
                                next[c] = r as u32 + 1;
                            }
                        }
                    }
                }
                if positional_fill {
                    for c in 0..ncols {
                        let gap = rows.end as u32 - next[c];
                        op.push_zeros(&mut states[c], gap as u64, next[c] as i64);
                    }
                }
                ColGroup {
                    states,
                    seen,
                    stored,
                }
            })
            .collect();
        (0..ncols)
            .into_par_iter()
            .with_min_len(1024)
            .map(|c| {
                let mut st = op.identity();
                let (mut any, mut ns) = (false, 0u64);
                for ColGroup {
                    states,
                    seen,
                    stored,
                } in &parts
                {
                    op.merge(&mut st, states[c].clone());
                    any |= (seen[c / 64] >> (c % 64)) & 1 == 1;
                    if self.fill {
                        ns += stored[c] as u64;
                    }
                }
                let zeros = if self.fill { nrows as u64 - ns } else { 0 };
                if self.fill && !op.positional() {
                    op.push_zeros(&mut st, zeros, 0);
                }
                (op.valid_everywhere() || any || zeros > 0).then(|| op.finish(&st))
            })
            .collect()
    }

    fn fold_all<F: Fold<T>>(&self, op: &F) -> Option<F::Output> {
        let ncols = self.shape.1 as i64;
        let states: Vec<F::State> = groups(self.indptr)
            .into_par_iter()
            .map(|rows| {
                let mut st = op.identity();
                if op.positional() {
                    for r in rows {
                        let base = r as i64 * ncols;
                        self.fold_segment(
                            op,
                            &mut st,
                            self.row(r),
                            |k| base + self.col(k) as i64,
                            base..base + ncols,
                        );
                    }
                } else {
                    let ents = self.indptr[rows.start]..self.indptr[rows.end];
                    let span = rows.start as i64 * ncols..rows.end as i64 * ncols;
                    self.fold_segment(op, &mut st, ents, |_| 0, span);
                }
                st
            })
            .collect();
        let mut st = op.identity();
        for s in states {
            op.merge(&mut st, s);
        }
        let total = self.shape.0 * self.shape.1;
        let ok = op.valid_everywhere() || self.lane_valid(0..self.nnz(), total);
        ok.then(|| op.finish(&st))
    }

    /// The valid entries of `ents` (values, and positions from `pos` when asked).
    fn gather(
        &self,
        ents: Range<usize>,
        pos: Option<&dyn Fn(usize) -> i64>,
        vals: &mut Vec<T>,
        at: &mut Vec<i64>,
    ) {
        vals.clear();
        at.clear();
        compress_into(&self.values[ents.clone()], self.bits_at(ents.start), vals);
        if let Some(pos) = pos {
            at.extend(ents.filter(|&k| self.is_valid(k)).map(pos));
        }
    }

    fn stat_rows<S: LaneStat<T>>(&self, stat: &S) -> Vec<Option<S::Output>> {
        let ncols = self.shape.1;
        let parts: Vec<Vec<Option<S::Output>>> = row_tasks(self.indptr)
            .par_iter()
            .map(|t| {
                let (mut vals, mut at) = (Vec::new(), Vec::new());
                t.rows
                    .clone()
                    .map(|r| {
                        let e = self.row(r);
                        if !self.lane_valid(e.clone(), ncols) {
                            return None;
                        }
                        let col = |k: usize| self.col(k) as i64;
                        self.gather(
                            e.clone(),
                            stat.positions().then_some(&col as _),
                            &mut vals,
                            &mut at,
                        );
                        let (zeros, first) = if self.fill {
                            (ncols - e.len(), first_gap(e.map(|k| self.col(k))) as i64)
                        } else {
                            (0, -1)
                        };
                        Some(stat.compute_sparse(&mut vals, &at, zeros, first))
                    })
                    .collect()
            })
            .collect();
        parts.into_iter().flatten().collect()
    }

    /// Every entry's slot in column-major order (a counting sort by column: O(nnz)),
    /// and the column pointer.
    fn column_order(&self) -> (Vec<usize>, Vec<usize>) {
        let ncols = self.shape.1;
        let mut colptr = vec![0usize; ncols + 1];
        for k in 0..self.nnz() {
            colptr[self.col(k) + 1] += 1;
        }
        for c in 0..ncols {
            colptr[c + 1] += colptr[c];
        }
        let mut next = colptr.clone();
        let mut slot = vec![0usize; self.nnz()];
        for (k, s) in slot.iter_mut().enumerate() {
            let c = self.col(k);
            *s = next[c];
            next[c] += 1;
        }
        (slot, colptr)
    }

    /// The entries of each column in row order: (entry index by column-major slot,
    /// column pointer).
    fn by_column(&self) -> (Vec<usize>, Vec<usize>) {
        let (slot, colptr) = self.column_order();
        let mut entry = vec![0usize; self.nnz()];
        for (k, &s) in slot.iter().enumerate() {
            entry[s] = k;
        }
        (entry, colptr)
    }

    fn row_of_entries(&self) -> Vec<u32> {
        let mut rows = vec![0u32; self.nnz()];
        for r in 0..self.shape.0 {
            rows[self.row(r)].fill(r as u32);
        }
        rows
    }

    fn stat_cols<S: LaneStat<T>>(&self, stat: &S) -> Vec<Option<S::Output>> {
        let nrows = self.shape.0;
        let (entry, colptr) = self.by_column();
        let row_of = self.row_of_entries();
        (0..self.shape.1)
            .into_par_iter()
            .with_min_len(256)
            .map_init(
                || (Vec::new(), Vec::new()),
                |(vals, at), c| {
                    let ents = &entry[colptr[c]..colptr[c + 1]];
                    vals.clear();
                    at.clear();
                    for &k in ents {
                        if self.is_valid(k) {
                            vals.push(self.values[k]);
                            if stat.positions() {
                                at.push(row_of[k] as i64);
                            }
                        }
                    }
                    let (zeros, first) = if self.fill {
                        (
                            nrows - ents.len(),
                            first_gap(ents.iter().map(|&k| row_of[k] as usize)) as i64,
                        )
                    } else {
                        (0, -1)
                    };
                    (vals.len() + zeros > 0).then(|| stat.compute_sparse(vals, at, zeros, first))
                },
            )
            .collect()
    }

    fn stat_all<S: LaneStat<T>>(&self, stat: &S) -> Option<S::Output> {
        let (nrows, ncols) = self.shape;
        let total = nrows * ncols;
        if !self.lane_valid(0..self.nnz(), total) {
            return None;
        }
        let (mut vals, mut at) = (Vec::with_capacity(self.nnz()), Vec::new());
        let mut first = -1i64;
        for r in 0..nrows {
            let e = self.row(r);
            let base = r * ncols;
            let flat = |k: usize| (base + self.col(k)) as i64;
            compress_into(&self.values[e.clone()], self.bits_at(e.start), &mut vals);
            if stat.positions() {
                at.extend(e.clone().filter(|&k| self.is_valid(k)).map(flat));
            }
            if self.fill && first < 0 {
                let g = first_gap(e.map(|k| self.col(k)));
                if g < ncols {
                    first = (base + g) as i64;
                }
            }
        }
        let zeros = if self.fill { total - self.nnz() } else { 0 };
        Some(stat.compute_sparse(&mut vals, &at, zeros, first))
    }

    /// Every position of the matrix as an entry (the lanes of a mask-free map, which
    /// stores every element): owned indptr, indices, values and validity bits.
    fn filled(&self) -> (Vec<usize>, Vec<I>, Vec<T>, Vec<u64>) {
        let (nrows, ncols) = self.shape;
        let n = nrows * ncols;
        let indptr: Vec<usize> = (0..=nrows).map(|r| r * ncols).collect();
        let indices: Vec<I> = (0..n)
            .map(|p| I::from_usize_unchecked(p % ncols.max(1)))
            .collect();
        let mut values = vec![T::default(); n];
        let mut words = vec![u64::MAX; n.div_ceil(64)];
        for r in 0..nrows {
            for k in self.row(r) {
                let p = r * ncols + self.col(k);
                values[p] = self.values[k];
                if !self.is_valid(k) {
                    words[p / 64] &= !(1u64 << (p % 64));
                }
            }
        }
        (indptr, indices, values, words)
    }

    /// Maps every row; the output stores the valid entries.
    fn map_rows<M: LaneMap<T>>(&self, map: &M) -> (Vec<usize>, Cow<'a, [I]>, Vec<M::Output>) {
        let nrows = self.shape.0;
        // every entry valid: the output has this structure's pattern, shared, not copied
        let shared = self.valid.is_none();
        let out_ptr = if shared {
            self.indptr.to_vec()
        } else {
            let mut p = Vec::with_capacity(nrows + 1);
            p.push(0);
            for r in 0..nrows {
                p.push(p[r] + self.count_valid(self.row(r)));
            }
            p
        };
        let nout = out_ptr[nrows];
        let mut values = fresh_vec::<M::Output>(nout);
        let mut indices = fresh_vec::<I>(if shared { 0 } else { nout });
        let tasks = row_tasks(self.indptr);
        // tasks own disjoint, consecutive ranges of the output
        let mut pieces = Vec::with_capacity(tasks.len());
        let (mut vrest, mut irest): (&mut [M::Output], &mut [I]) = (&mut values, &mut indices);
        for t in &tasks {
            let len = out_ptr[t.rows.end] - out_ptr[t.rows.start];
            let (v, vr) = vrest.split_at_mut(len);
            let (i, ir) = irest.split_at_mut(if shared { 0 } else { len });
            pieces.push((t.rows.clone(), v, i));
            vrest = vr;
            irest = ir;
        }
        pieces.into_par_iter().for_each(|(rows, vout, iout)| {
            let mut tmp = Vec::new();
            let mut o = 0;
            for r in rows {
                let e = self.row(r);
                let bits = self.bits_at(e.start);
                let len = self.count_valid(e.clone());
                if bits.is_none() {
                    map.map(&self.values[e.clone()], None, &mut vout[o..o + len]);
                    if !shared {
                        iout[o..o + len].copy_from_slice(&self.indices[e]);
                    }
                } else {
                    tmp.clear();
                    tmp.resize(e.len(), M::Output::default());
                    map.map(&self.values[e.clone()], bits, &mut tmp);
                    let mut j = o;
                    for (q, k) in e.enumerate() {
                        if self.is_valid(k) {
                            vout[j] = tmp[q];
                            iout[j] = self.indices[k];
                            j += 1;
                        }
                    }
                }
                o += len;
            }
        });
        let indices = if shared {
            Cow::Borrowed(self.indices)
        } else {
            Cow::Owned(indices)
        };
        (out_ptr, indices, values)
    }

    /// Maps every column (gathered by an O(nnz) counting sort); the output stores the
    /// valid entries in row order.
    fn map_cols<M: LaneMap<T>>(&self, map: &M) -> (Vec<usize>, Cow<'a, [I]>, Vec<M::Output>) {
        let nrows = self.shape.0;
        // the valid entries, numbered in row order (all of them: this very structure)
        let (out_ptr, keep, indices) = if self.valid.is_none() {
            (self.indptr.to_vec(), None, Cow::Borrowed(self.indices))
        } else {
            let mut out_ptr = Vec::with_capacity(nrows + 1);
            out_ptr.push(0);
            let mut keep = Vec::with_capacity(self.nnz());
            for r in 0..nrows {
                keep.extend(self.row(r).filter(|&k| self.is_valid(k)));
                out_ptr.push(keep.len());
            }
            let sub: Vec<I> = keep.iter().map(|&k| self.indices[k]).collect();
            (out_ptr, Some(keep), Cow::Owned(sub))
        };
        let src = |k: usize| keep.as_ref().map_or(k, |v| v[k]);
        let (entry, colptr) = CsrLanes {
            shape: self.shape,
            indptr: &out_ptr,
            indices: &indices,
            values: &[] as &[T],
            valid: None,
            fill: false,
        }
        .by_column();
        let gathered: Vec<T> = entry.iter().map(|&k| self.values[src(k)]).collect();
        let mut mapped = vec![M::Output::default(); gathered.len()];
        let mut pieces = Vec::with_capacity(self.shape.1);
        let mut rest: &mut [M::Output] = &mut mapped;
        for c in 0..self.shape.1 {
            let (a, b) = rest.split_at_mut(colptr[c + 1] - colptr[c]);
            pieces.push((c, a));
            rest = b;
        }
        pieces
            .into_par_iter()
            .with_min_len(256)
            .for_each(|(c, out)| {
                map.map(&gathered[colptr[c]..colptr[c + 1]], None, out);
            });
        let mut values = fresh_vec::<M::Output>(indices.len());
        for (s, &k) in entry.iter().enumerate() {
            values[k] = mapped[s];
        }
        (out_ptr, indices, values)
    }
}

impl<'a, T: Element, I: SpIndex> LaneKernels<T> for CsrLanes<'a, T, I> {
    type Reduced<O: Element> = SparseArray<O>;
    type Mapped<O: Element> = CsrMapped<'a, O, I>;
    type NanMasked<'b>
        = CsrLanes<'b, T, I>
    where
        Self: 'b;

    /// The same lanes with validity bits `!is_nan` ANDed in (unstored zeros stay valid).
    fn without_nans(&self) -> Result<CsrLanes<'_, T, I>> {
        Ok(self.nan_masked())
    }

    fn fold_lanes<F: Fold<T>>(
        &self,
        op: &F,
        dims: &Dims,
        keepdim: bool,
    ) -> Result<SparseArray<F::Output>> {
        self.reduce(dims, keepdim, |ax| match ax {
            Axis::Rows => self.fold_rows(op),
            Axis::Cols => self.fold_cols(op),
            Axis::All => vec![self.fold_all(op)],
        })
    }

    fn stat_lanes<S: LaneStat<T>>(
        &self,
        stat: &S,
        dims: &Dims,
        keepdim: bool,
    ) -> Result<SparseArray<S::Output>> {
        self.reduce(dims, keepdim, |ax| match ax {
            Axis::Rows => self.stat_rows(stat),
            Axis::Cols => self.stat_cols(stat),
            Axis::All => vec![self.stat_all(stat)],
        })
    }

    /// Along dim 1 or 0; the output stores exactly the valid entries. Without a mask
    /// every element is valid, so the output then stores every element (dense-sized).
    fn map_lanes<M: LaneMap<T>>(&self, map: &M, dim: isize) -> Result<CsrMapped<'a, O<M, T>, I>> {
        let d = wrap_dim(dim, 2)?;
        if self.fill {
            let (indptr, indices, values, words) = self.filled();
            let full = CsrLanes {
                shape: self.shape,
                indptr: &indptr,
                indices: &indices,
                values: &values,
                valid: Some(Cow::Owned(words)),
                fill: false,
            };
            let out = full.map_lanes(map, dim)?;
            let (indptr, indices, values) = out.into_raw_storage();
            // SAFETY: unchanged from a structure just built by `map_lanes`.
            return Ok(unsafe {
                CsMatBase::new_unchecked(
                    sprs::CompressedStorage::CSR,
                    self.shape,
                    indptr,
                    Cow::Owned(indices.into_owned()),
                    values,
                )
            });
        }
        let (indptr, indices, values) = if d == 1 {
            self.map_rows(map)
        } else {
            self.map_cols(map)
        };
        if indptr.len() != self.shape.0 + 1
            || indices.len() != values.len()
            || indptr.last() != Some(&indices.len())
        {
            return Err(MaskedError::InvalidData(
                "inconsistent mapped structure".into(),
            ));
        }
        // SAFETY: the structure is a subset, in order, of this lane structure's entries:
        // the row pointer is non-decreasing from 0 to `indices.len()` (checked just
        // above for its ends and length; built by prefix sums), and every row's indices
        // are a subsequence of a validated row (a sprs matrix or a `Pattern`): sorted,
        // without duplicates, below `ncols`. sprs's own check would re-scan 10M entries.
        Ok(unsafe {
            CsMatBase::new_unchecked(
                sprs::CompressedStorage::CSR,
                self.shape,
                indptr,
                indices,
                values,
            )
        })
    }
}

/// Output type of a lane map.
type O<M, T> = <M as LaneMap<T>>::Output;
