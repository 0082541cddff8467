//! Grouping COO entries into the rows of a CSR lane structure: one row per position of
//! the kept dims, the reduced dims' row-major position as the column. The CSR kernels
//! then fold, gather or map every row.

use crate::pattern::{flat_of, size_of};
use masked_core::grad::LaneOrder;
use masked_core::{Element, Result, SparseArray};
use masked_kernels::par;
use masked_sparse::{Cols, CsrLanes};
use rayon::prelude::*;
use std::borrow::Cow;

/// The row structure of a grouping: one row per kept position (or per group with
/// entries), each entry's column along the reduced dims.
pub(crate) struct Rows<'a> {
    /// Number of positions along the reduced dims (the lane length).
    pub ncols: usize,
    /// Row pointer over the groups (borrowed from a pattern's cached plan, or owned).
    pub indptr: Cow<'a, [usize]>,
    /// Each entry's row-major position along the reduced dims (borrowed: the
    /// coordinates of the one reduced dim, in stored order).
    pub cols: Cow<'a, [usize]>,
    /// Row `r` is kept position `ids[r]` (compressed: only groups with entries), or
    /// `None` when rows are every kept position in order.
    pub ids: Option<Cow<'a, [usize]>>,
}

impl Rows<'_> {
    /// The kept position of row `r`.
    pub fn id(&self, r: usize) -> usize {
        self.ids.as_ref().map_or(r, |ids| ids[r])
    }

    /// The reduction of shape `shape` from the reduced rows: each stored row becomes
    /// its kept position.
    pub fn ungroup<O>(&self, shape: Vec<usize>, rows: SparseArray<O>) -> Result<SparseArray<O>> {
        let (_, rows_at, values) = rows.into_parts();
        let ids = rows_at.into_iter().map(|r| self.id(r)).collect();
        SparseArray::new(shape, ids, values)
    }
}

/// COO entries grouped by their kept coordinates.
pub(crate) struct Grouped<'a, T: Clone> {
    /// The rows.
    pub rows: Rows<'a>,
    /// Values in group order (borrowed when the order did not change).
    pub values: Cow<'a, [T]>,
    /// Validity bits in group order (borrowed when the order did not change).
    pub valid: Option<Cow<'a, [u64]>>,
    /// Entry `k` of the group order is entry `perm[k]` of the stored order (`None`:
    /// the same order).
    pub perm: Option<Cow<'a, [usize]>>,
}

impl<T: Element> Grouped<'_, T> {
    /// The lanes the CSR kernels run on.
    pub fn lanes(&self, fill: bool) -> Result<CsrLanes<'_, T>> {
        if self
            .valid
            .as_ref()
            .is_some_and(|w| w.len() < self.rows.cols.len().div_ceil(64))
        {
            return Err(masked_core::MaskedError::InvalidData(
                "too few validity words".into(),
            ));
        }
        // SAFETY: `group` builds one row per kept position (or per group with entries)
        // from a validated COO pattern (row-major sorted, no duplicates, in range): the
        // row pointer runs from 0 to nnz without decreasing, and within a row the
        // reduced positions are distinct, increasing (row-major order) and below
        // `ncols`; one value per entry; the word count is checked above.
        Ok(unsafe {
            CsrLanes::new_unchecked(
                (self.rows.indptr.len() - 1, self.rows.ncols),
                &self.rows.indptr,
                Cols::Usize(&self.rows.cols),
                &self.values,
                self.valid.as_deref(),
                fill,
            )
        })
    }
}

/// Row-major strides of `shape` restricted to `dims` (a linear index over those dims).
pub(crate) fn sub_strides(shape: &[usize], dims: &[usize]) -> Vec<usize> {
    let mut st = vec![0usize; shape.len()];
    let mut s = 1;
    for &d in dims.iter().rev() {
        st[d] = s;
        s *= shape[d];
    }
    st
}

/// The linear index over `dims` of each of `nnz` entries: one dim's coordinates are
/// that index already and are borrowed (a 2-D array's rows and columns, an n-D array
/// reduced over one dim); several dims are combined by [`flat_of`] into a new array.
pub(crate) fn index_over<'c>(
    shape: &[usize], coords: &[&'c [usize]], dims: &[usize], nnz: usize,
) -> Cow<'c, [usize]> {
    match dims {
        [d] => Cow::Borrowed(&coords[*d][..nnz]),
        _ => Cow::Owned(flat_of(
            coords.iter().copied(),
            &sub_strides(shape, dims),
            nnz,
        )),
    }
}

/// Groups `nnz` entries (coordinates per dim, row-major sorted) by the dims not in
/// `reduced` (sorted). With `full`, there is a row for every kept position (the output
/// is dense-sized anyway); otherwise only for the positions that have entries.
///
/// When the reduced dims are the trailing ones the entries are already in group order:
/// nothing moves and the rows come from [`rows_in_order`]. Otherwise a counting sort by
/// group (or a sort by (group, column) when the groups far outnumber the entries)
/// reorders them; within a group the stored row-major order is already the order of
/// the reduced position.
pub(crate) fn group<'a, T: Element>(
    shape: &[usize], coords: &[&'a [usize]], values: &'a [T], valid: Option<&'a [u64]>,
    reduced: &[usize], full: bool, plan: Option<&'a GroupPlan>,
) -> Result<Grouped<'a, T>> {
    let nnz = values.len();
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !reduced.contains(d)).collect();
    if kept.iter().enumerate().all(|(i, &d)| i == d) {
        return Ok(Grouped {
            rows: rows_in_order(shape, coords, nnz, kept.len(), full)?,
            values: Cow::Borrowed(values),
            valid: valid.map(Cow::Borrowed),
            perm: None,
        });
    }
    let mut g = match plan {
        Some(p) => p.grouped(values, valid),
        None => GroupPlan::build(shape, coords, reduced, nnz)?.into_grouped(values, valid),
    };
    if full {
        let nkept = size_of(&kept.iter().map(|&d| shape[d]).collect::<Vec<_>>())?;
        let ids = g.rows.ids.take().unwrap_or_default();
        g.rows.indptr = Cow::Owned(full_indptr(nkept, &g.rows.indptr, &ids));
    }
    Ok(g)
}

/// The row pointer of a row for every one of `npos` kept positions, from the rows of the
/// groups with entries (`starts`, ending with the entry count) and their positions.
fn full_indptr(npos: usize, starts: &[usize], ids: &[usize]) -> Vec<usize> {
    let mut indptr = vec![0usize; npos + 1];
    for (r, &id) in ids.iter().enumerate() {
        indptr[id + 1] = starts[r + 1] - starts[r];
    }
    for p in 0..npos {
        indptr[p + 1] += indptr[p];
    }
    indptr
}

/// The row pointer (a group starts where the key changes, then the end) and each
/// group's key, of entries in group order.
fn starts_of(keys: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let nnz = keys.len();
    let mut indptr: Vec<usize> = par::flat_map_ranges(nnz, 1 << 14, |es, out| {
        out.extend(es.filter(|&e| e == 0 || keys[e] != keys[e - 1]))
    });
    let ids = par::gather(keys, &indptr);
    indptr.push(nnz);
    (indptr, ids)
}

/// The values and validity bits of the stored entries in the order `perm` (entry `k`
/// is stored entry `perm[k]`).
fn gather_entries<T: Element>(
    perm: &[usize], values: &[T], valid: Option<&[u64]>,
) -> (Vec<T>, Option<Vec<u64>>) {
    let bits = valid.map(|w| {
        let mut out = vec![0u64; perm.len().div_ceil(64)];
        for (k, &p) in perm.iter().enumerate() {
            out[k / 64] |= ((w[p / 64] >> (p % 64)) & 1) << (k % 64);
        }
        out
    });
    (par::gather(values, perm), bits)
}

/// The index-only part of a grouping that moves entries (the kept dims are not the
/// leading ones), with a row per group that has entries: the order, the rows and their
/// columns, computed from the coordinates alone. The symbolic half of faer's
/// symbolic/numeric split: a pattern builds it once per reduced dim (on first use,
/// [`CooPattern::plan`](crate::CooPattern)) and every later map or reduction along that
/// dim, on any values over the pattern, only gathers its values in that order.
#[derive(Debug)]
pub(crate) struct GroupPlan {
    ncols: usize,
    indptr: Vec<usize>,
    cols: Vec<usize>,
    ids: Vec<usize>,
    perm: Vec<usize>,
}

impl GroupPlan {
    /// The plan of grouping `nnz` entries by the dims not in `reduced`.
    pub(crate) fn build(
        shape: &[usize], coords: &[&[usize]], reduced: &[usize], nnz: usize,
    ) -> Result<GroupPlan> {
        let kept: Vec<usize> = (0..shape.len()).filter(|d| !reduced.contains(d)).collect();
        let nkept = size_of(&kept.iter().map(|&d| shape[d]).collect::<Vec<_>>())?;
        let ncols = size_of(&reduced.iter().map(|&d| shape[d]).collect::<Vec<_>>())?;
        let keys = index_over(shape, coords, &kept, nnz);
        let cols = index_over(shape, coords, reduced, nnz);
        let perm = order_by_group(&keys, &cols, nkept, ncols);
        let (indptr, ids) = starts_of(&par::gather(&keys, &perm));
        Ok(GroupPlan {
            ncols,
            indptr,
            cols: par::gather(&cols, &perm),
            ids,
            perm,
        })
    }

    /// The grouping of `values` (and `valid`) over the plan's pattern, its rows borrowed
    /// from the plan.
    pub(crate) fn grouped<'a, T: Element>(
        &'a self, values: &[T], valid: Option<&[u64]>,
    ) -> Grouped<'a, T> {
        let (vals, bits) = gather_entries(&self.perm, values, valid);
        Grouped {
            rows: Rows {
                ncols: self.ncols,
                indptr: Cow::Borrowed(&self.indptr),
                cols: Cow::Borrowed(&self.cols),
                ids: Some(Cow::Borrowed(&self.ids)),
            },
            values: Cow::Owned(vals),
            valid: bits.map(Cow::Owned),
            perm: Some(Cow::Borrowed(&self.perm)),
        }
    }

    /// The plan's lanes as a VJP takes them: the order, the row starts and each row's
    /// kept position, borrowed.
    pub(crate) fn lane_order(&self) -> LaneOrder<'_> {
        LaneOrder {
            order: Some(Cow::Borrowed(&self.perm)),
            starts: Cow::Borrowed(&self.indptr),
            keys: Cow::Borrowed(&self.ids),
        }
    }

    /// [`GroupPlan::grouped`], the rows moved out of the plan.
    fn into_grouped<'a, T: Element>(self, values: &[T], valid: Option<&[u64]>) -> Grouped<'a, T> {
        let (vals, bits) = gather_entries(&self.perm, values, valid);
        Grouped {
            rows: Rows {
                ncols: self.ncols,
                indptr: Cow::Owned(self.indptr),
                cols: Cow::Owned(self.cols),
                ids: Some(Cow::Owned(self.ids)),
            },
            values: Cow::Owned(vals),
            valid: bits.map(Cow::Owned),
            perm: Some(Cow::Owned(self.perm)),
        }
    }
}

/// The rows of `nnz` entries (coordinates per dim, row-major sorted) grouped by their
/// first `nkept` dims, the others reduced: the entries are in group order already, so
/// a row starts where the kept position changes ([`Linear::starts_and_ids`]), and the columns are
/// the reduced dim's coordinates, borrowed, when one dim is reduced. With `full`, a row
/// for every kept position.
pub(crate) fn rows_in_order<'a>(
    shape: &[usize], coords: &[&'a [usize]], nnz: usize, nkept: usize, full: bool,
) -> Result<Rows<'a>> {
    let reduced: Vec<usize> = (nkept..shape.len()).collect();
    let npos = size_of(&shape[..nkept])?;
    let ncols = size_of(&shape[nkept..])?;
    let cols = index_over(shape, coords, &reduced, nnz);
    let (mut starts, ids) = Linear::new(shape, coords, 0..nkept).starts_and_ids(nnz);
    starts.push(nnz);
    let (indptr, ids) = if full {
        (full_indptr(npos, &starts, &ids), None)
    } else {
        (starts, Some(Cow::Owned(ids)))
    };
    Ok(Rows {
        ncols,
        indptr: Cow::Owned(indptr),
        cols,
        ids,
    })
}

thread_local! {
    /// Each thread's buffers for [`Segments::starts`], [`Segments::gid`] and
    /// [`Segments::ids`], reused from task to task: a task's buffers freed and the next
    /// one's allocated made the allocator return the pages and fault them in again
    /// (madvise, then a page fault per 4 KiB: most of a one-thread reduction's time).
    static SCRATCH: std::cell::RefCell<(Vec<usize>, Vec<u32>, Vec<usize>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// This thread's segment buffers, emptied (fresh ones if they are out: a task within a
/// task).
fn scratch() -> (Vec<usize>, Vec<u32>, Vec<usize>) {
    let (mut starts, mut gid, mut ids) = SCRATCH.with(|c| {
        c.try_borrow_mut()
            .map(|mut b| std::mem::take(&mut *b))
            .unwrap_or_default()
    });
    starts.clear();
    gid.clear();
    ids.clear();
    (starts, gid, ids)
}

/// The groups of a task of entries (the segment fold's and the trailing-dim maps').
pub(crate) struct Segments {
    /// Where each group starts, then the task's end.
    pub starts: Vec<usize>,
    /// Each group's kept position.
    pub ids: Vec<usize>,
    /// Each entry's group (a task holds under 2^16 entries: a chunk and one lane).
    pub gid: Vec<u32>,
    /// The most entries in one group.
    pub longest: usize,
}

impl Segments {
    /// The groups that start at `starts` (then the task's end), with their kept
    /// positions and each entry's group (or none).
    fn of(starts: Vec<usize>, ids: Vec<usize>, gid: Vec<u32>) -> Segments {
        let longest = starts.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        Segments {
            starts,
            ids,
            gid,
            longest,
        }
    }

    /// Returns the buffers to this thread for its next task.
    pub fn recycle(self) {
        SCRATCH.with(|c| {
            if let Ok(mut b) = c.try_borrow_mut() {
                *b = (self.starts, self.gid, self.ids);
            }
        });
    }
}

/// The row-major linear index over a run of dims of each entry, read from the
/// coordinates: one or two dims without a stride table (the common cases), more by a
/// sum of products.
pub(crate) enum Linear<'c> {
    One(&'c [usize]),
    Two(&'c [usize], usize, &'c [usize]),
    Many(Vec<(&'c [usize], usize)>),
}

impl<'c> Linear<'c> {
    pub fn new(shape: &[usize], coords: &[&'c [usize]], dims: std::ops::Range<usize>) -> Self {
        let dims: Vec<usize> = dims.collect();
        let st = sub_strides(shape, &dims);
        match dims[..] {
            [d] => Linear::One(coords[d]),
            [a, b] => Linear::Two(coords[a], st[a], coords[b]),
            _ => Linear::Many(dims.iter().map(|&d| (coords[d], st[d])).collect()),
        }
    }

    #[inline(always)]
    pub fn at(&self, e: usize) -> usize {
        match self {
            Linear::One(c) => c[e],
            Linear::Two(a, s, b) => a[e] * s + b[e],
            Linear::Many(ds) => ds.iter().map(|(c, s)| c[e] * s).sum(),
        }
    }

    /// Task boundaries over `nnz` entries: about every `chunk` entries, each moved
    /// forward to the start of a group (a change of index), so no group spans two tasks.
    pub fn group_bounds(&self, nnz: usize, chunk: usize) -> Vec<usize> {
        let mut b = vec![0];
        let mut at = chunk;
        while at < nnz {
            let mut s = at.max(*b.last().unwrap_or(&0));
            while s < nnz && self.at(s) == self.at(s - 1) {
                s += 1;
            }
            if s >= nnz {
                break;
            }
            b.push(s);
            at = s + chunk;
        }
        b.push(nnz);
        b
    }

    /// The groups among entries `lo..hi` (`lo` starts one): index-only work, compiled
    /// once, branch-free (a write per entry to the current group's slot, which only a
    /// change of index moves on).
    ///
    /// With `short` false (groups expected long), a scan that writes only at each
    /// group's start, with no per-entry group (`gid` empty) and `longest` from the
    /// starts: the branch on a change of index is then predictable, and the per-entry
    /// writes would cost more than the groups' work.
    pub fn segments(&self, lo: usize, hi: usize, short: bool) -> Segments {
        #[inline(always)]
        fn starts_only(lo: usize, hi: usize, keys: impl Iterator<Item = usize>) -> Segments {
            let (mut starts, gid, mut ids) = scratch();
            let mut prev = None;
            for (e, k) in (lo..hi).zip(keys) {
                if prev != Some(k) {
                    starts.push(e);
                    ids.push(k);
                    prev = Some(k);
                }
            }
            starts.push(hi);
            Segments::of(starts, ids, gid)
        }
        // branch-free: every entry writes its group's start and index (the same until
        // the group changes) and its group number
        #[inline(always)]
        fn scan(lo: usize, hi: usize, first: usize, keys: impl Iterator<Item = usize>) -> Segments {
            let n = hi - lo;
            let (mut starts, mut gid, mut ids) = scratch();
            starts.resize(n + 1, 0);
            gid.resize(n, 0);
            ids.resize(n + 1, 0);
            // `prev` differs from the first key: entry 0 starts a group
            let (mut g, mut prev) = (0usize, !first);
            for ((i, k), gd) in keys.enumerate().zip(gid.iter_mut()) {
                let new = k != prev;
                starts[g] = lo + i;
                ids[g] = k;
                g += new as usize;
                *gd = (g - 1) as u32;
                prev = k;
            }
            starts[g] = hi;
            starts.truncate(g + 1);
            ids.truncate(g);
            Segments::of(starts, ids, gid)
        }
        // the per-entry scan for short groups, the starts alone for long ones
        #[inline(always)]
        fn by(
            short: bool, lo: usize, hi: usize, first: usize, keys: impl Iterator<Item = usize>,
        ) -> Segments {
            if short {
                scan(lo, hi, first, keys)
            } else {
                starts_only(lo, hi, keys)
            }
        }
        if lo >= hi {
            return Segments::of(vec![hi], Vec::new(), Vec::new());
        }
        let first = self.at(lo);
        match self {
            Linear::One(c) => by(short, lo, hi, first, c[lo..hi].iter().copied()),
            Linear::Two(a, s, b) => {
                let keys = a[lo..hi].iter().zip(&b[lo..hi]).map(|(x, y)| x * s + y);
                by(short, lo, hi, first, keys)
            }
            Linear::Many(_) => by(short, lo, hi, first, (lo..hi).map(|e| self.at(e))),
        }
    }

    /// Every entry's index over `lo..hi`, in this thread's scratch: the returned
    /// [`Segments::ids`] holds one per entry (no groups found: `starts` and `gid`
    /// empty, `longest` 0). Index-only work compiled once, so that a kernel generic over
    /// its op and dtype reads the indices from a slice instead of being compiled once
    /// per index form.
    pub fn entry_keys(&self, lo: usize, hi: usize) -> Segments {
        let (starts, gid, mut ids) = scratch();
        let r = lo.min(hi)..hi;
        match self {
            Linear::One(c) => ids.extend_from_slice(&c[r]),
            Linear::Two(a, s, b) => {
                ids.extend(a[r.clone()].iter().zip(&b[r]).map(|(x, y)| x * s + y))
            }
            Linear::Many(_) => ids.extend(r.map(|e| self.at(e))),
        }
        Segments {
            starts,
            ids,
            gid,
            longest: 0,
        }
    }

    /// Where each group of `nnz` entries (a change of index) starts, and its index,
    /// over every entry: tasks of whole groups scanned in parallel.
    pub fn starts_and_ids(&self, nnz: usize) -> (Vec<usize>, Vec<usize>) {
        let bounds = self.group_bounds(nnz, 1 << 15);
        let parts: Vec<(Vec<usize>, Vec<usize>)> = par::map(bounds.len() - 1, |c| {
            let s = self.segments(bounds[c], bounds[c + 1], false);
            let part = (s.starts[..s.ids.len()].to_vec(), s.ids.to_vec());
            s.recycle();
            part
        });
        let n: usize = parts.iter().map(|p| p.1.len()).sum();
        let (mut starts, mut ids) = (Vec::with_capacity(n + 1), Vec::with_capacity(n));
        for (s, i) in parts {
            starts.extend_from_slice(&s);
            ids.extend_from_slice(&i);
        }
        (starts, ids)
    }
}

/// The permutation that sorts `flat` (distinct values) increasingly.
pub(crate) fn sorting_order(flat: &[usize]) -> Vec<usize> {
    let mut order: Vec<(usize, usize)> = flat.iter().copied().zip(0..).collect();
    masked_kernels::par::on_free_pool(|| order.par_sort_unstable());
    order.into_iter().map(|p| p.1).collect()
}

/// The permutation that sorts entries by (group, column): a stable counting sort by
/// group when there are not many more groups than entries (entries of one group are
/// already in column order), a sort of the combined key otherwise.
fn order_by_group(keys: &[usize], cols: &[usize], nkept: usize, ncols: usize) -> Vec<usize> {
    if masked_kernels::order::counting_suits(nkept, keys.len()) {
        masked_kernels::order::counting_order(keys, nkept)
    } else {
        // key * ncols + col is the position in (kept, reduced) order: below the size
        let mut order: Vec<(usize, usize)> = keys
            .iter()
            .zip(cols)
            .enumerate()
            .map(|(e, (&k, &c))| (k * ncols + c, e))
            .collect();
        masked_kernels::par::on_free_pool(|| order.par_sort_unstable());
        order.into_iter().map(|p| p.1).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_by_kept_dims() {
        // shape [2, 3]: entries (0,1) (0,2) (1,0) (1,2)
        let c0 = [0usize, 0, 1, 1];
        let c1 = [1usize, 2, 0, 2];
        let v = [1.0f64, 2.0, 3.0, 4.0];
        // reduce dim 1: groups are rows, no reordering
        let g = group(&[2, 3], &[&c0, &c1], &v, None, &[1], false, None).unwrap();
        assert_eq!(g.rows.indptr, vec![0, 2, 4]);
        assert_eq!(g.rows.cols[..], [1, 2, 0, 2]);
        assert!(matches!(g.values, Cow::Borrowed(_)));
        // reduce dim 0: groups are columns 0, 1, 2 (compressed: all three have entries)
        let g = group(&[2, 3], &[&c0, &c1], &v, Some(&[0b1010]), &[0], false, None).unwrap();
        assert_eq!(g.rows.ids.as_deref(), Some(&[0, 1, 2][..]));
        assert_eq!(g.rows.indptr, vec![0, 1, 2, 4]);
        assert_eq!(g.rows.cols[..], [1, 0, 0, 1]);
        assert_eq!(&g.values[..], &[3.0, 1.0, 2.0, 4.0]);
        // entry bits follow their entries: entries 1 and 3 were valid, now at 2 and 3
        assert_eq!(g.valid.as_deref(), Some(&[0b1100u64][..]));
        // full rows over a larger kept dim
        let g = group(&[2, 5], &[&c0, &c1], &v, None, &[0], true, None).unwrap();
        assert_eq!(g.rows.indptr, vec![0, 1, 2, 4, 4, 4]);
        assert_eq!(g.rows.ids, None);
        // 3-D [2, 2, 3], reduced over the trailing dims: rows from the coordinate scan
        let (d0, d1, d2) = (
            [0usize, 0, 0, 1, 1],
            [0usize, 0, 1, 1, 1],
            [0usize, 2, 1, 0, 2],
        );
        let coords: [&[usize]; 3] = [&d0, &d1, &d2];
        let r = rows_in_order(&[2, 2, 3], &coords, 5, 2, false).unwrap();
        assert_eq!((r.ncols, &r.indptr[..]), (3, &[0, 2, 3, 5][..]));
        assert_eq!(r.ids.as_deref(), Some(&[0, 1, 3][..]));
        assert_eq!(r.cols[..], [0, 2, 1, 0, 2]);
        assert!(matches!(r.cols, Cow::Borrowed(_)));
        let r = rows_in_order(&[2, 2, 3], &coords, 5, 2, true).unwrap();
        assert_eq!((&r.indptr[..], &r.ids), (&[0, 2, 3, 3, 5][..], &None));
        let r = rows_in_order(&[2, 2, 3], &coords, 5, 1, false).unwrap();
        assert_eq!((r.ncols, &r.indptr[..]), (6, &[0, 3, 5][..]));
        assert_eq!(
            (r.ids.as_deref(), &r.cols[..]),
            (Some(&[0, 1][..]), &[0, 2, 4, 3, 5][..])
        );
        // over every dim: one row
        let r = rows_in_order(&[2, 2, 3], &coords, 5, 0, false).unwrap();
        assert_eq!(
            (&r.indptr[..], r.ids.as_deref()),
            (&[0, 5][..], Some(&[0][..]))
        );
        let g = group(&[2, 2, 3], &coords, &[1.0f64; 5], None, &[2], false, None).unwrap();
        assert_eq!((&g.rows.indptr[..], g.perm), (&[0, 2, 3, 5][..], None));
        // the plan path: grouped through a plan built once equals grouping afresh, the
        // rows borrowed from the plan, for any values over the pattern
        let plan = GroupPlan::build(&[2, 3], &[&c0, &c1], &[0], 4).unwrap();
        let bits = [0b1010u64];
        let fresh = group(&[2, 3], &[&c0, &c1], &v, Some(&bits), &[0], false, None).unwrap();
        let planned = group(
            &[2, 3],
            &[&c0, &c1],
            &v,
            Some(&bits),
            &[0],
            false,
            Some(&plan),
        )
        .unwrap();
        assert_eq!(planned.rows.indptr, fresh.rows.indptr);
        assert_eq!(planned.rows.cols, fresh.rows.cols);
        assert_eq!(planned.rows.ids, fresh.rows.ids);
        assert_eq!(planned.perm, fresh.perm);
        assert_eq!(planned.values, fresh.values);
        assert_eq!(planned.valid, fresh.valid);
        assert!(matches!(planned.rows.indptr, Cow::Borrowed(_)));
        let w = [5.0f64, 6.0, 7.0, 8.0];
        assert_eq!(&plan.grouped(&w, None).values[..], &[7.0, 5.0, 6.0, 8.0]);
        // the sort path (many more groups than entries)
        let perm = order_by_group(&[9000, 3, 3], &[0, 1, 0], 10_000, 2);
        assert_eq!(perm, vec![2, 1, 0]);
    }
}
