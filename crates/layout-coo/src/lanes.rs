//! [`CooLanes`]: a masked COO array as the kernels see it, and its [`MaskedReduce`]: a
//! reduction groups the entries by their kept coordinates and runs the CSR layout's lane
//! kernels on the groups; a normalization maps each lane the same way.

// named by the docs' links (a plain import: links of items inlined into the facade
// resolve against this crate as compiled, where a `cfg(doc)` import does not exist)
use crate::group::{self, group, Grouped, Linear};
use crate::{compiled, pattern, CooPattern, MaskedCoo, Resolved};
use masked_core::grad::{
    each_values, scattered_grad, scatters, sparse_lanes, sparse_lanes_ordered, LaneOrder,
    SparseUpstream,
};
use masked_core::scattered::{LaneIds, Scattered};
#[allow(unused_imports)]
use masked_core::MaskedOps;
use masked_core::{
    not_nan_words, with_slots, wrap_dim, Dims, Element, Fold, LaneGrad, LaneMap, LaneStat,
    MaskedError, MaskedReduce, OutSlots, Result, SparseArray, Written,
};
use masked_kernels::pack::compress_into;
use masked_kernels::par;
use masked_kernels::{fresh_vec, Bits};
use std::borrow::Cow;

/// Entries a lane at the least for a reduction's gradient step across the entries
/// where a grouping plan serves too (`LaneGrad::lane_step`).
const STEP_ENTRIES: usize = 32;

/// The lanes of a masked COO array as the kernels see them: entries (positions and
/// values), optional validity bits per entry, and whether the unstored positions are
/// valid zeros. Get one from [`MaskedCoo::lanes`](crate::MaskedCoo::lanes); every op of [`MaskedOps`] runs on
/// it.
#[derive(Debug, Clone)]
pub struct CooLanes<'a, T> {
    pub(crate) pattern: &'a CooPattern,
    pub(crate) values: &'a [T],
    pub(crate) valid: Option<Cow<'a, [u64]>>,
    pub(crate) fill: bool,
}

impl<'a, T: Element> CooLanes<'a, T> {
    /// The stored entries (valid or not).
    pub fn nnz(&self) -> usize {
        self.values.len()
    }

    /// The same lanes with validity bits `!is_nan` ANDed in.
    pub fn nan_masked(&self) -> CooLanes<'a, T> {
        let valid = Some(Cow::Owned(not_nan_words(
            self.values,
            self.valid.as_deref(),
        )));
        CooLanes { valid, ..*self }
    }

    /// Logical shape.
    pub fn shape(&self) -> &[usize] {
        self.pattern.shape()
    }

    /// The entries grouped by the dims not in `reduced`.
    fn grouped(&self, reduced: &[usize], full: bool) -> Result<Grouped<'_, T>> {
        let coords: Vec<&[usize]> = (0..self.pattern.ndim())
            .map(|d| self.pattern.coords(d))
            .collect();
        // along one dim, the pattern's plan (built once)
        let plan = match reduced {
            [d] => self.pattern.plan(*d)?,
            _ => None,
        };
        group(
            self.shape(),
            &coords,
            self.values,
            self.valid.as_deref(),
            reduced,
            full || self.fill,
            plan,
        )
    }

    /// A reduction over `dims`: `run` reduces the rows of the grouped lanes, whose
    /// stored rows become the kept positions of the output.
    fn reduce<O>(
        &self, dims: &Dims, keepdim: bool, full: bool,
        run: impl FnOnce(&masked_sparse::CsrLanes<'_, T>) -> Result<SparseArray<O>>,
    ) -> Result<SparseArray<O>> {
        let reduced = dims.canonical(self.shape().len())?;
        let g = self.grouped(&reduced, full)?;
        let rows = run(&g.lanes(self.fill)?)?;
        g.rows.ungroup(self.out_shape(&reduced, keepdim), rows)
    }

    /// The shape of a reduction over `reduced`.
    pub(crate) fn out_shape(&self, reduced: &[usize], keepdim: bool) -> Vec<usize> {
        out_shape(self.shape(), reduced, keepdim)
    }

    /// A fold by scattering: every entry, in stored order, is pushed into the state of
    /// its kept position, so nothing is sorted. The entries are cut into at most
    /// [`SCATTER_PARTS`] contiguous parts (fixed by the entry count, not the thread
    /// count), each with a state per kept position, merged in order afterwards: the
    /// result does not depend on the thread count, and within a lane the positions
    /// still arrive in order (stored order is row-major).
    ///
    /// `None` where the grouped row kernels apply instead: the reduced dims trailing (no
    /// reordering needed), no mask (unstored zeros count), or more kept positions than
    /// entries (the states would outweigh the data).
    fn scatter_fold<F: Fold<T>>(
        &self, op: &F, reduced: &[usize], keepdim: bool,
    ) -> Result<Option<SparseArray<F::Output>>> {
        let shape = self.shape();
        let nnz = self.values.len();
        let kept: Vec<usize> = (0..shape.len()).filter(|d| !reduced.contains(d)).collect();
        let nkept = kept.iter().map(|&d| shape[d]).product::<usize>();
        let in_order = kept.iter().enumerate().all(|(i, &d)| i == d);
        if in_order || self.fill || nkept > nnz.max(1 << 12) {
            return Ok(None);
        }
        let coords = || (0..shape.len()).map(|d| self.pattern.coords(d));
        let keys = pattern::flat_of(coords(), &group::sub_strides(shape, &kept), nnz);
        let pos = op
            .positional()
            .then(|| pattern::flat_of(coords(), &group::sub_strides(shape, reduced), nnz));
        let parts = nnz.div_ceil(1 << 16).clamp(1, SCATTER_PARTS);
        let per = nnz.div_ceil(parts);
        let valid = self.valid.as_deref();
        let mut states: Vec<(Vec<F::State>, Vec<u64>)> = par::map(parts, |p| {
            let mut st: Vec<F::State> = (0..nkept).map(|_| op.identity()).collect();
            let mut seen = vec![0u64; nkept.div_ceil(64)];
            for e in p * per..((p + 1) * per).min(nnz) {
                if valid.is_some_and(|w| (w[e / 64] >> (e % 64)) & 1 == 0) {
                    continue;
                }
                let k = keys[e];
                let at = pos.as_ref().map_or(0, |c| c[e] as i64);
                op.push(&mut st[k], self.values[e], at);
                seen[k / 64] |= 1 << (k % 64);
            }
            (st, seen)
        });
        let (mut st, mut seen) = states.remove(0);
        for (mut other, other_seen) in states {
            par::chunks_mut2(&mut st, 1 << 12, &mut other, 1 << 12, |_, a, b| {
                for (a, b) in a.iter_mut().zip(b) {
                    op.merge(a, std::mem::replace(b, op.identity()));
                }
            });
            for (a, b) in seen.iter_mut().zip(other_seen) {
                *a |= b;
            }
        }
        let every = op.valid_everywhere();
        let kept = par::flat_map_ranges(st.len(), 1 << 12, |ks, out| {
            out.extend(
                ks.filter(|k| every || (seen[k / 64] >> (k % 64)) & 1 == 1)
                    .map(|k| (k, op.finish(&st[k]))),
            )
        });
        let (ids, values): (Vec<usize>, Vec<F::Output>) = kept.into_iter().unzip();
        SparseArray::new(self.out_shape(reduced, keepdim), ids, values).map(Some)
    }

    /// A fold over trailing dims, group by group as the entries are stored: row-major
    /// order puts the entries of one kept position next to each other, so one pass over
    /// parallel chunks of whole groups folds each group and writes its kept position
    /// and value straight into the output. No row structure, no state per kept
    /// position of the whole array and no `Option` per row: a reduction whose groups
    /// hold a few entries each (632k groups of 1.6 entries in the benchmark's dim-2
    /// sum) costs what its entries cost. Where the groups hold at most
    /// [`SEGMENT_SHORT`] entries on average and every entry is valid, one pass over a
    /// task's entries finds its groups and pushes each entry into its group's state in
    /// stored order (no branch per group: at 1.6 entries a group, a branch on the
    /// change of index mispredicted every other time); otherwise a task folds group by
    /// group as the CSR row kernels do (`push_run`, or positional pushes). Each task
    /// writes its results at its first entry's offset of outputs as long as the input,
    /// then the runs move down into one: no vectors per task kept for a concatenation
    /// (their pages, freed and faulted in again on every call, were most of a
    /// one-thread dim-2 sum's time). An op valid on empty lanes (`count`) gets every
    /// kept position.
    ///
    /// `None` where the grouped row kernels apply instead: reduced dims not trailing,
    /// unstored valid zeros, nothing kept, or lanes longer than [`SEGMENT_MAX_LANE`]
    /// (the row kernels split a long lane across threads).
    fn segment_fold<F: Fold<T>>(
        &self, op: &F, reduced: &[usize], keepdim: bool,
    ) -> Result<Option<SparseArray<F::Output>>> {
        let shape = self.shape();
        let nkept = shape.len() - reduced.len();
        let trailing = reduced.iter().enumerate().all(|(i, &d)| d == nkept + i);
        if !trailing || nkept == 0 || self.fill {
            return Ok(None);
        }
        if pattern::size_of(&shape[nkept..])? > SEGMENT_MAX_LANE {
            return Ok(None);
        }
        let nnz = self.values.len();
        let coords: Vec<&[usize]> = (0..shape.len()).map(|d| self.pattern.coords(d)).collect();
        let keys = Linear::new(shape, &coords, 0..nkept);
        let pos = op
            .positional()
            .then(|| Linear::new(shape, &coords, nkept..shape.len()));
        let bounds = keys.group_bounds(nnz, SEGMENT_CHUNK);
        let short = short_groups(nnz, pattern::size_of(&shape[..nkept])?);
        let valid = self.valid.as_deref();
        // each task writes its groups' positions and values at its first entry's offset
        // (a task has no more groups than entries), then the tasks' results move down
        // into one run: no vectors per task kept until a final concatenation, and the
        // output's pages are faulted in once, by the tasks in parallel
        let mut ids = fresh_vec::<usize>(nnz);
        let mut values = fresh_vec::<F::Output>(nnz);
        let counts = par::parts_mut2(&mut ids, &mut values, &bounds, |c, out_ids, out| {
            let lo = bounds[c];
            let hi = bounds[c + 1];
            if short && valid.is_none() {
                // groups of a few entries on average, all valid: one pass over the
                // entries finds the groups and pushes each entry into its group's state
                // (a slot per group, begun at the identity: no branch per group), then
                // each group's value
                let ks = keys.entry_keys(lo, hi);
                let xs = &self.values[lo..hi];
                let mut st: Vec<F::State> = (0..xs.len()).map(|_| op.identity()).collect();
                let (mut g, mut prev) = (usize::MAX, !ks.ids.first().copied().unwrap_or(0));
                let mut step = |k: usize, x: T, idx: i64| {
                    g = g.wrapping_add((k != prev) as usize);
                    out_ids[g] = k;
                    op.push(&mut st[g], x, idx);
                    prev = k;
                };
                match &pos {
                    None => ks.ids.iter().zip(xs).for_each(|(&k, &x)| step(k, x, 0)),
                    Some(p) => {
                        for (i, (&k, &x)) in ks.ids.iter().zip(xs).enumerate() {
                            step(k, x, p.at(lo + i) as i64);
                        }
                    }
                }
                let ngroups = g.wrapping_add(1);
                for (o, s) in out.iter_mut().zip(&st[..ngroups]) {
                    *o = op.finish(s);
                }
                ks.recycle();
                return ngroups;
            }
            // the groups of this task (index-only work, compiled once), then their values
            let segs = keys.segments(lo, hi, short);
            let mut kept = 0;
            for (g, w) in segs.starts.windows(2).enumerate() {
                let (e, f) = (w[0], w[1]);
                let bits = valid.map(|w| Bits::new(w, e));
                if bits.is_some_and(|b| b.count_ones(f - e) == 0) {
                    continue;
                }
                let mut st = op.identity();
                match &pos {
                    None => op.push_row(&mut st, &self.values[e..], f - e, bits, 0),
                    Some(p) => {
                        for i in e..f {
                            if bits.is_none_or(|b| b.get(i - e)) {
                                op.push(&mut st, self.values[i], p.at(i) as i64);
                            }
                        }
                    }
                }
                out_ids[kept] = segs.ids[g];
                out[kept] = op.finish(&st);
                kept += 1;
            }
            segs.recycle();
            kept
        });
        // the tasks' runs moved down in order (each to at or below where it is: no run
        // overwrites one not yet moved)
        let mut n = 0;
        for (c, &k) in counts.iter().enumerate() {
            ids.copy_within(bounds[c]..bounds[c] + k, n);
            values.copy_within(bounds[c]..bounds[c] + k, n);
            n += k;
        }
        ids.truncate(n);
        values.truncate(n);
        let shape = self.out_shape(reduced, keepdim);
        if op.valid_everywhere() {
            // every kept position, the empty lanes' value where no group fell
            let npos = pattern::size_of(&shape)?;
            let mut all = vec![op.finish(&op.identity()); npos];
            for (&k, &v) in ids.iter().zip(&values) {
                all[k] = v;
            }
            return SparseArray::new(shape, (0..npos).collect(), all).map(Some);
        }
        SparseArray::new(shape, ids, values).map(Some)
    }

    /// A map along `d` straight over the groups (no validity bits, no unstored valid
    /// positions: every entry is mapped and stored): the values, in stored order.
    fn map_groups<M: LaneMap<T>>(&self, map: &M, d: usize, out: &mut [M::Output]) -> Result<()> {
        let nnz = self.values.len();
        let shape = self.shape();
        if d + 1 == shape.len() && shape[d] <= SEGMENT_MAX_LANE {
            // along the last dim the groups are runs of stored entries: tasks of whole
            // groups, each mapped in place in the output; a task of short groups maps
            // them together
            let coords: Vec<&[usize]> = (0..=d).map(|k| self.pattern.coords(k)).collect();
            let keys = Linear::new(shape, &coords, 0..d);
            let bounds = keys.group_bounds(nnz, SEGMENT_CHUNK);
            let short = short_groups(nnz, pattern::size_of(&shape[..d])?);
            par::parts_mut(out, &bounds, |t, o| {
                let es = bounds[t]..bounds[t + 1];
                let segs = keys.segments(es.start, es.end, short);
                let xs = &self.values[es.clone()];
                if short && segs.longest <= SEGMENT_SHORT {
                    map.map_short_lanes(xs, &segs.gid, o);
                } else {
                    for w in segs.starts.windows(2) {
                        let r = w[0] - es.start..w[1] - es.start;
                        map.map(&xs[r.clone()], None, &mut o[r]);
                    }
                }
                segs.recycle();
            });
            return Ok(());
        }
        if self.map_scattered(map, d, out) {
            return Ok(());
        }
        // along the last dim the rows come from a scan of the other coordinates
        let g = self.grouped(&[d], false)?;
        let ind = &g.rows.indptr;
        // in group order: the output itself, else a scratch scattered to it
        let mut grouped: Vec<M::Output> = match g.perm {
            None => Vec::new(),
            Some(_) => fresh_vec(nnz),
        };
        let dst: &mut [M::Output] = if g.perm.is_none() { out } else { &mut grouped };
        // blocks of whole groups of about 2^15 entries, mapped in parallel
        let blocks = par::lane_blocks(ind, 1 << 15);
        let bounds: Vec<usize> = blocks.iter().map(|&r| ind[r] - ind[0]).collect();
        par::parts_mut(dst, &bounds, |b, o| {
            let base = ind[blocks[b]];
            for r in blocks[b]..blocks[b + 1] {
                let e = ind[r]..ind[r + 1];
                map.map(
                    &g.values[e.clone()],
                    None,
                    &mut o[e.start - base..e.end - base],
                );
            }
        });
        if let Some(perm) = &g.perm {
            for (k, &p) in perm.iter().enumerate() {
                out[p] = grouped[k];
            }
        }
        Ok(())
    }

    /// A map along `d` by the op's form over the entries in storage order
    /// ([`LaneMap::map_scattered`]; a lane the entries of one position of the other
    /// dims, named by its linear index): every stored entry's slot written, as a
    /// dense result's position is. False (nothing written) where the op has no such
    /// form or the lanes far outnumber the entries.
    fn map_scattered<M: LaneMap<T>>(&self, map: &M, d: usize, out: &mut [M::Output]) -> bool {
        // asked first: the ids cost a pass over the coordinates
        if !map.scatters() {
            return false;
        }
        let Some((ids, nlanes)) = self.lanes_across(d) else {
            return false;
        };
        let bits = self.valid.as_deref().map(|w| Bits::new(w, 0));
        Scattered::new(self.values, bits, LaneIds::Usize(ids), nlanes)
            .is_some_and(|s| map.map_scattered(s, out))
    }

    /// The lane of each stored entry along `d` (the linear index of its position in
    /// the other dims: a 2-D array's other coordinates, borrowed) and the number of
    /// lanes; `None` where the lanes far outnumber the entries (more than `4 nnz +
    /// 4096`, [`Scattered::new`]'s bound), checked before any index is computed.
    fn lanes_across(&self, d: usize) -> Option<(&[usize], usize)> {
        let nlanes = self.lanes_along(d)?;
        Some((self.pattern.lanes_across(d), nlanes))
    }

    /// The number of lanes along `d`, where they do not far outnumber the entries.
    fn lanes_along(&self, d: usize) -> Option<usize> {
        let (shape, nnz) = (self.shape(), self.values.len());
        (0..shape.len())
            .filter(|&k| k != d)
            .try_fold(1usize, |n, k| n.checked_mul(shape[k]))
            .filter(|&n| n <= 4 * nnz + 4096)
    }

    /// A result with a slot for every stored entry as a `MaskedCoo`: on this pattern
    /// itself where every entry is valid, else the valid entries' slots on their
    /// positions.
    fn keep_valid<O: Element>(&self, out: Vec<O>) -> Result<MaskedCoo<O>> {
        let Some(w) = self.valid.as_deref() else {
            return Ok(self.stored_like(out));
        };
        let flat = self.pattern.flat_slice();
        let bits = Bits::new(w, 0);
        let keep = |k: &usize| bits.get(*k);
        let f = (0..flat.len()).filter(keep).map(|k| flat[k]).collect();
        let v = (0..out.len()).filter(keep).map(|k| out[k]).collect();
        SparseArray::new(self.shape().to_vec(), f, v).map(MaskedCoo::from)
    }

    /// A result stored at this pattern's valid entries (a gradient) as a `MaskedCoo`:
    /// on the pattern itself where every entry is valid, else on the valid entries'
    /// positions.
    fn on_entries<O: Element>(&self, a: SparseArray<O>) -> MaskedCoo<O> {
        if self.valid.is_none() && a.nnz() == self.pattern.nnz() {
            let (_, _, values) = a.into_parts();
            return self.stored_like(values);
        }
        a.into()
    }

    /// A map's result over these lanes. Where every stored entry is valid (no validity
    /// bits), the result stores exactly these positions: this pattern itself, shared (a
    /// reference count), with no flat positions computed and checked only to be
    /// dropped (the most of a COO softmax over long lanes).
    fn stored_like<O: Element>(&self, values: Vec<O>) -> MaskedCoo<O> {
        debug_assert!(self.valid.is_none() && values.len() == self.pattern.nnz());
        MaskedCoo {
            pattern: self.pattern.clone(),
            values,
            mask: Resolved::Stored,
        }
    }
}

/// The shape of a reduction of an array of `shape` over `reduced`.
pub(crate) fn out_shape(shape: &[usize], reduced: &[usize], keepdim: bool) -> Vec<usize> {
    (0..shape.len())
        .filter_map(|d| match (reduced.contains(&d), keepdim) {
            (false, _) => Some(shape[d]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// At most this many parts in a scatter fold (each holds a state per kept position).
const SCATTER_PARTS: usize = 4;

/// The longest lane (positions along the reduced dims) that [`CooLanes::segment_fold`]
/// folds whole in one task.
const SEGMENT_MAX_LANE: usize = 1 << 14;

/// Entries per task of [`CooLanes::segment_fold`] (moved to the next group start).
const SEGMENT_CHUNK: usize = 1 << 12;

/// Groups of at most this many entries (on average: [`short_groups`]; in a task, for
/// the maps) are folded or mapped entry by entry, not by the run kernels.
const SEGMENT_SHORT: usize = 8;

/// Whether `nnz` entries over `npos` kept positions make groups of a few entries on
/// average (at most [`SEGMENT_SHORT`]): then the fold pushes entry by entry, and
/// [`Linear::segments`] records each entry's group for the maps' short path.
fn short_groups(nnz: usize, npos: usize) -> bool {
    nnz <= SEGMENT_SHORT * npos
}

impl<'a, T: Element> MaskedReduce<T> for CooLanes<'a, T> {
    masked_core::reduce_types!(<O> SparseArray<O>, MaskedCoo<O>, <'b> CooLanes<'b, T>);

    // `without_nans`: the same lanes with validity bits `!is_nan` ANDed in. Elementwise
    // maps run over the stored entries in storage order (no grouping), in parallel
    // chunks; lane maps along any one dim. The result stores exactly the valid entries.
    // Without a mask, an elementwise op that keeps 0 at 0 maps the stored entries
    // (unstored ones stay the implicit 0), and any other op is an error rather than a
    // result storing every position.
    masked_core::lane_methods!(compiled);

    /// Over any dims; the gradient stores exactly the valid entries. Without a mask the
    /// gradient would store every position: an error.
    fn grad_reduced<G: LaneGrad>(
        &self, grad: &G, dims: &Dims, keepdim: bool, g: &SparseArray<T::Real>,
        saved: Option<&SparseArray<T::Real>>,
    ) -> Result<MaskedCoo<T::Real>> {
        let reduced = dims.canonical(self.shape().len())?;
        let want = self.out_shape(&reduced, keepdim);
        let up = SparseUpstream::reduced(grad.name(), g, want.clone())?;
        let saved = match saved.filter(|_| grad.uses_output()) {
            Some(y) => Some(SparseUpstream::reduced(grad.name(), y, want)?),
            None => None,
        };
        if let Some(out) = self.grad_planned(grad, &reduced, up, saved)? {
            return Ok(out);
        }
        self.grad_entries(grad, &reduced, up, saved, &[])
            .map(|a| self.on_entries(a))
    }

    /// Along any one dim; `g` stores exactly the valid entries (as the forward map's
    /// output does).
    fn grad_mapped<G: LaneGrad>(
        &self, grad: &G, dim: isize, g: &MaskedCoo<T::Real>, saved: Option<&MaskedCoo<T::Real>>,
    ) -> Result<MaskedCoo<T::Real>> {
        let d = wrap_dim(dim, self.shape().len())?;
        // an upstream (and saved output) on this very pattern (a forward map's result
        // shares it): its stored values are per entry, in order
        let (gl, yl) = (g.lanes(), saved.map(MaskedCoo::lanes));
        // an elementwise op's gradient entry by entry, on this pattern, with no grouping
        if gl.pattern == self.pattern
            && (self.valid.is_none() && !self.fill)
            && let Some(v) = each_values(grad, self.values, gl.values)?
        {
            return Ok(self.stored_like(v));
        }
        if gl.pattern == self.pattern && yl.as_ref().is_none_or(|y| y.pattern == self.pattern) {
            let up = SparseUpstream::PerElement(gl.values);
            let ys = yl
                .as_ref()
                .filter(|_| grad.uses_output())
                .map(|y| SparseUpstream::PerElement(y.values));
            if let Some(out) = self.grad_planned(grad, &[d], up, ys)? {
                return Ok(out);
            }
        }
        // the upstream (and saved output) as the lanes see them: stored positions and
        // values
        let stored = |m: &MaskedCoo<T::Real>| {
            let l = m.lanes();
            SparseArray::new(m.shape().to_vec(), l.pattern.flat(), l.values.to_vec())
        };
        let g = stored(g)?;
        let up = SparseUpstream::PerElement(g.values());
        match saved.filter(|_| grad.uses_output()) {
            Some(y) => {
                let y = stored(y)?;
                let ys = SparseUpstream::PerElement(y.values());
                self.grad_entries(grad, &[d], up, Some(ys), &[&g, &y])
            }
            None => self.grad_entries(grad, &[d], up, None, &[&g]),
        }
        .map(|a| self.on_entries(a))
    }
}

impl<T: Element> CooLanes<'_, T> {
    /// A gradient along one dim through the pattern's grouping plan (built once, by the
    /// forward op along that dim or here), stored on the pattern itself: where every
    /// stored entry is valid and the dim's grouping moves entries; `None` elsewhere.
    fn grad_planned<G: LaneGrad>(
        &self, grad: &G, reduced: &[usize], up: SparseUpstream<'_, T::Real>,
        saved: Option<SparseUpstream<'_, T::Real>>,
    ) -> Result<Option<MaskedCoo<T::Real>>> {
        let (&[d], None, false) = (reduced, &self.valid, self.fill) else {
            return Ok(None);
        };
        let nnz = self.values.len();
        // a reduction's step from each entry and its lane's constants pays an
        // accumulator and a set of constants a lane: with few entries a lane (1M over
        // 100k lanes: amax 1.7x, logsumexp 2x the plan's time) the plan, built once and
        // kept, is the cheaper
        let dense_lanes = |n: usize| grad.lane_fold().is_none() || nnz >= STEP_ENTRIES * n;
        if d + 1 < self.shape().len()
            && scatters(grad, saved.is_some())
            && self.lanes_along(d).is_some_and(dense_lanes)
            && let Some((ids, nlanes)) = self.lanes_across(d)
            && let Some(v) = scattered_grad(
                grad,
                self.values,
                LaneIds::Usize(ids),
                nlanes,
                &up,
                saved.as_ref(),
            )
        {
            return Ok(Some(self.stored_like(v)));
        }
        let lanes = if d + 1 == self.shape().len() && nnz > 0 {
            // along the last dim the lanes are runs of stored entries: their starts and
            // kept positions, scanned once and kept by the pattern
            let (starts, keys) = self.pattern.last_lanes()?;
            LaneOrder {
                order: None,
                starts: Cow::Borrowed(starts),
                keys: Cow::Borrowed(keys),
            }
        } else {
            let Some(plan) = self.pattern.plan(d)? else {
                return Ok(None);
            };
            plan.lane_order()
        };
        let values = sparse_lanes_ordered(grad, &lanes, self.values, up, saved)?;
        Ok(Some(self.stored_like(values)))
    }

    /// A gradient over the valid entries, stored at their positions; a map's upstream
    /// and saved output (`stored_at_valid`) must store exactly those positions.
    fn grad_entries<G: LaneGrad>(
        &self, grad: &G, reduced: &[usize], up: SparseUpstream<'_, T::Real>,
        saved: Option<SparseUpstream<'_, T::Real>>, stored_at_valid: &[&SparseArray<T::Real>],
    ) -> Result<SparseArray<T::Real>> {
        if self.fill {
            return Err(MaskedError::densifying("a gradient"));
        }
        let mut flat = self.pattern.flat();
        let mut xs: Cow<'_, [T]> = Cow::Borrowed(self.values);
        if let Some(w) = self.valid.as_deref() {
            let bits = Some(Bits::new(w, 0));
            let (mut f, mut v) = (Vec::new(), Vec::new());
            compress_into(&flat, bits, &mut f);
            compress_into(self.values, bits, &mut v);
            (flat, xs) = (f, Cow::Owned(v));
        }
        for m in stored_at_valid {
            if m.shape() != self.shape() || m.indices() != flat.as_slice() {
                return Err(MaskedError::InvalidArgument {
                    name: "gradient",
                    value: grad.name().to_string(),
                    reason: "a map's VJP takes an upstream gradient (and a saved output) \
                             stored exactly at the input's valid positions",
                });
            }
        }
        if let [d] = *reduced
            && scatters(grad, saved.is_some())
        {
            // one dim: the lanes named by each entry's position in the other dims
            let shape = self.shape();
            let (len, inner) = (shape[d], shape[d + 1..].iter().product::<usize>());
            let nlanes = pattern::size_of(shape)? / len.max(1);
            let ids = par::collect(flat.len(), |k| {
                let f = flat[k];
                f / (len * inner) * inner + f % inner
            });
            let ids = LaneIds::Usize(&ids);
            if let Some(values) = scattered_grad(grad, &xs, ids, nlanes, &up, saved.as_ref()) {
                return SparseArray::new(shape.to_vec(), flat, values);
            }
        }
        let values = sparse_lanes(grad, self.shape(), reduced, &flat, &xs, up, saved)?;
        SparseArray::new(self.shape().to_vec(), flat, values)
    }
}

/// The lane kernels themselves; the trait methods above dispatch to them through
/// `prebuilt` (compiled in this crate for `f32`/`f64`).
impl<'a, T: Element> CooLanes<'a, T> {
    pub(crate) fn kernel_fold_lanes<F: Fold<T>>(
        &self, op: &F, dims: &Dims, keepdim: bool,
    ) -> Result<SparseArray<F::Output>> {
        let reduced = dims.canonical(self.shape().len())?;
        if let Some(r) = self.scatter_fold(op, &reduced, keepdim)? {
            return Ok(r);
        }
        if let Some(r) = self.segment_fold(op, &reduced, keepdim)? {
            return Ok(r);
        }
        self.reduce(dims, keepdim, op.valid_everywhere(), |l| {
            l.fold_lanes(op, &Dims::from(1), false)
        })
    }

    pub(crate) fn kernel_stat_lanes<S: LaneStat<T>>(
        &self, stat: &S, dims: &Dims, keepdim: bool,
    ) -> Result<SparseArray<S::Output>> {
        self.reduce(dims, keepdim, false, |l| {
            l.stat_lanes(stat, &Dims::from(1), false)
        })
    }

    /// Along any one dim; the output stores exactly the valid entries (every element
    /// without a mask).
    /// The stored entries mapped in storage order (no grouping: each element is on its
    /// own), in parallel chunks; the result stores the valid ones at their positions.
    /// Without a mask, an op that keeps 0 at 0 maps the stored entries (unstored ones
    /// stay the implicit 0), and any other op is an error rather than a result storing
    /// every position.
    /// `map` over every stored element in storage order: into `into` (one slot per
    /// stored entry) where given.
    pub(crate) fn kernel_map_elements<M: LaneMap<T>>(
        &self, map: &M, zero_preserving: bool, into: Option<OutSlots<'_, '_>>,
    ) -> Result<Written<MaskedCoo<M::Output>>> {
        if self.fill && !zero_preserving {
            return Err(MaskedError::densifying(map.name()));
        }
        // a multiple of 64, so every chunk starts on a word of the validity bits
        const CHUNK: usize = 1 << 14;
        let valid = self.valid.as_deref();
        let run = |o: &mut [M::Output]| {
            par::chunks_mut(o, CHUNK, |c, o| {
                let lo = c * CHUNK;
                let bits = valid.map(|w| Bits::new(w, lo));
                map.map(&self.values[lo..lo + o.len()], bits, o);
            });
        };
        if let Some(out) = into {
            with_slots(out, self.values.len(), run)?;
            return Ok(Written::Slots(valid.map(<[u64]>::to_vec)));
        }
        let mut out = fresh_vec::<M::Output>(self.values.len());
        run(&mut out);
        self.keep_valid(out).map(Written::Fresh)
    }

    /// `map` along `dim`: into `into` (one slot per stored entry) where given, which
    /// needs every stored entry valid (no validity bits) and no unstored valid zeros.
    pub(crate) fn kernel_map_lanes<M: LaneMap<T>>(
        &self, map: &M, dim: isize, into: Option<OutSlots<'_, '_>>,
    ) -> Result<Written<MaskedCoo<M::Output>>> {
        let shape = self.shape();
        if shape.is_empty() {
            return Err(MaskedError::Unsupported {
                op: "a normalization",
                context: "on a 0-d array".into(),
            });
        }
        let d = wrap_dim(dim, shape.len())?;
        if let Some(out) = into {
            if self.fill || self.valid.is_some() {
                return Err(MaskedError::Unsupported {
                    op: map.name(),
                    context: "into a caller's buffer on COO input without a mask (the result \
                              would store every position) or with validity bits (use apply)"
                        .into(),
                });
            }
            with_slots(out, self.values.len(), |o| self.map_groups(map, d, o))??;
            return Ok(Written::Slots(None));
        }
        if !self.fill && self.valid.is_none() {
            let mut out = fresh_vec(self.values.len());
            self.map_groups(map, d, &mut out)?;
            return Ok(Written::Fresh(self.stored_like(out)));
        }
        if !self.fill && d + 1 < shape.len() && map.scatters() {
            // validity bits: every stored entry mapped in storage order, the valid
            // ones kept (along the last dim the rows below need no reordering)
            let mut out = fresh_vec(self.values.len());
            if self.map_scattered(map, d, &mut out) {
                return self.keep_valid(out).map(Written::Fresh);
            }
        }
        let g = self.grouped(&[d], false)?;
        let out = g.lanes(self.fill)?.map_lanes(map, 1)?;
        let (len, inner) = (shape[d], shape[d + 1..].iter().product::<usize>());
        let indptr = &out.indptr;
        let cols = out.indices.cols();
        let flat: Vec<usize> = par::flat_map_ranges(indptr.len() - 1, 1 << 12, |rs, out| {
            for r in rs {
                let gid = g.rows.id(r);
                let (outer, low) = if inner == 1 {
                    (gid, 0)
                } else {
                    (gid / inner, gid % inner)
                };
                out.extend(
                    (indptr[r]..indptr[r + 1]).map(|k| (outer * len + cols.get(k)) * inner + low),
                );
            }
        });
        let values = out.values;
        if inner == 1 {
            return SparseArray::new(shape.to_vec(), flat, values)
                .map(MaskedCoo::from)
                .map(Written::Fresh);
        }
        // entries are in (kept, position) order; the output is row-major
        let order = group::sorting_order(&flat);
        let f = order.iter().map(|&k| flat[k]).collect();
        let v = order.iter().map(|&k| values[k]).collect();
        SparseArray::new(shape.to_vec(), f, v)
            .map(MaskedCoo::from)
            .map(Written::Fresh)
    }
}
