//! The lanes of sparse entries named by a lane id an entry (a CSR matrix's columns: the
//! entry's column index), taken in storage order: a lane map's per-lane statistics
//! folded into one accumulator a lane while the entries stream past, then every entry
//! mapped with its lane's statistics. A few passes over the entries, with no sort into
//! lane order ([`LaneMap::map_scattered`]); the sparse counterpart of
//! [`Columns`](crate::columns::Columns).
//!
//! [`LaneMap::map_scattered`]: crate::lane::LaneMap::map_scattered

use masked_kernels::{par, Bits, BLOCK};
use std::ops::Range;

/// Entries of one map task (a chunk of the output), about.
const MAP_TASK: usize = 1 << 14;
/// Fold tasks at the most (each holds one accumulator a lane).
const MAX_TASKS: usize = 16;
/// Entries of one fold task at the least.
const MIN_TASK: usize = 1 << 16;
/// Lanes of one chunk of the accumulators' merge.
const MERGE_CHUNK: usize = 1 << 12;

/// The lane of each entry, in either index width a sparse structure stores.
#[derive(Debug, Clone, Copy)]
pub enum LaneIds<'a> {
    /// 32-bit ids.
    U32(&'a [u32]),
    /// `usize` ids.
    Usize(&'a [usize]),
}

impl LaneIds<'_> {
    /// Number of ids.
    pub fn len(&self) -> usize {
        match self {
            LaneIds::U32(ix) => ix.len(),
            LaneIds::Usize(ix) => ix.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `out[k] = table[id of entry lo + k]`.
    fn gather_into<C: Copy>(&self, lo: usize, table: &[C], out: &mut [C]) {
        let r = lo..lo + out.len();
        match self {
            LaneIds::U32(ix) => {
                for (o, &l) in out.iter_mut().zip(&ix[r]) {
                    *o = table[l as usize];
                }
            }
            LaneIds::Usize(ix) => {
                for (o, &l) in out.iter_mut().zip(&ix[r]) {
                    *o = table[l];
                }
            }
        }
    }

    /// Ids `r`, widened, into `out` (cleared first).
    fn widen_into(&self, r: Range<usize>, out: &mut Vec<usize>) {
        out.clear();
        match self {
            LaneIds::U32(ix) => out.extend(ix[r].iter().map(|&l| l as usize)),
            LaneIds::Usize(ix) => out.extend_from_slice(&ix[r]),
        }
    }
}

/// The lanes of `nlanes` lanes over entries `xs` (valid where `bits` is set; all valid
/// for `None`): lane `l` is the entries `k` with `ids[k] == l`, in storage order.
#[derive(Debug, Clone, Copy)]
pub struct Scattered<'a, T> {
    xs: &'a [T],
    bits: Option<Bits<'a>>,
    ids: LaneIds<'a>,
    nlanes: usize,
}

impl<'a, T: Sync> Scattered<'a, T> {
    /// The lanes of `xs` by `ids` (one an entry, each below `nlanes`); `None` where the
    /// lanes outnumber the entries so far that one accumulator a lane would cost more
    /// than the entries (more than `4 nnz + 4096` lanes), or the lengths differ.
    pub fn new(
        xs: &'a [T], bits: Option<Bits<'a>>, ids: LaneIds<'a>, nlanes: usize,
    ) -> Option<Self> {
        (ids.len() == xs.len() && nlanes <= 4 * xs.len() + 4096).then_some(Scattered {
            xs,
            bits,
            ids,
            nlanes,
        })
    }

    /// The number of lanes.
    pub fn lanes(&self) -> usize {
        self.nlanes
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.xs.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.xs.is_empty()
    }

    /// The fold tasks' entry ranges: as many as the entries allow ([`MIN_TASK`] a task,
    /// at least four entries a lane, [`MAX_TASKS`] at the most), cut by the shape only,
    /// so results do not depend on the thread count.
    fn task_len(&self) -> usize {
        let n = self.xs.len();
        let tasks = (n / (4 * self.nlanes).max(MIN_TASK)).clamp(1, MAX_TASKS);
        n.div_ceil(tasks).max(1)
    }

    /// Each block of at most [`BLOCK`] entries of `r`, in order: `f(at, idx, xs, bits,
    /// cs)`, `at` its first entry, `idx` its entries' lanes, `cs` their values of `table`
    /// (one a lane; empty for an empty table).
    fn blocks<C: Copy>(
        &self, r: Range<usize>, table: &[C],
        mut f: impl FnMut(usize, &[usize], &[T], Option<Bits<'_>>, &[C]),
    ) {
        let (mut idx, mut cs) = (Vec::with_capacity(BLOCK), Vec::with_capacity(BLOCK));
        for at in r.clone().step_by(BLOCK) {
            let e = at..(at + BLOCK).min(r.end);
            self.ids.widen_into(e.clone(), &mut idx);
            cs.clear();
            if !table.is_empty() {
                cs.extend(idx.iter().map(|&l| table[l]));
            }
            f(at, &idx, &self.xs[e], self.bits.map(|b| b.offset(at)), &cs);
        }
    }

    /// One value a lane: tasks of consecutive entries in parallel, each folding its
    /// blocks into an accumulator a lane from `id` by `fold(acc, at, idx, xs, bits, cs)`
    /// (`at` the block's first entry, `idx` its entries' lanes, `cs` their values of
    /// `table`), the tasks' accumulators merged in task order by `merge`.
    pub fn fold<A: Clone + Send + Sync, C: Copy + Sync>(
        &self, table: &[C], id: A,
        fold: impl Fn(&mut [A], usize, &[usize], &[T], Option<Bits<'_>>, &[C]) + Sync,
        merge: impl Fn(&mut A, A) + Sync,
    ) -> Vec<A> {
        let (n, step) = (self.xs.len(), self.task_len());
        let parts = par::map(n.div_ceil(step), |t| {
            let mut acc = vec![id.clone(); self.nlanes];
            let r = t * step..((t + 1) * step).min(n);
            self.blocks(r, table, |at, idx, xs, bits, cs| {
                fold(&mut acc, at, idx, xs, bits, cs)
            });
            acc
        });
        merge_parts(parts, id, self.nlanes, merge)
    }

    /// As [`Scattered::fold`], each block written too: `row(acc, idx, xs, bits, out,
    /// cs)` folds the block into `acc` and writes its part of `out` (one slot an entry),
    /// `cs` the block's entries' values of `table`. A pass that writes what its fold
    /// computes (softmax's exps) rather than computing it again.
    pub fn fold_into<A: Clone + Send + Sync, C: Copy + Sync, O: Send>(
        &self, table: &[C], id: A, out: &mut [O],
        row: impl Fn(&mut [A], &[usize], &[T], Option<Bits<'_>>, &mut [O], &[C]) + Sync,
        merge: impl Fn(&mut A, A) + Sync,
    ) -> Vec<A> {
        let step = self.task_len();
        let parts = par::chunks_mut(&mut out[..self.xs.len()], step, |t, out| {
            let mut acc = vec![id.clone(); self.nlanes];
            let r = t * step..t * step + out.len();
            self.blocks(r, table, |at, idx, xs, bits, cs| {
                let o = &mut out[at - t * step..][..xs.len()];
                row(&mut acc, idx, xs, bits, o, cs)
            });
            acc
        });
        merge_parts(parts, id, self.nlanes, merge)
    }

    /// Writes every entry's slot of `out`: `f(at, xs, bits, out, cs)` maps one block
    /// (from entry `at`) with its entries' values `cs` of `table` (one a lane, as
    /// [`Scattered::fold`] returns them), chunks of entries in parallel.
    pub fn map<C: Copy + Sync, O: Send>(
        &self, table: &[C], out: &mut [O],
        f: impl Fn(usize, &[T], Option<Bits<'_>>, &mut [O], &[C]) + Sync,
    ) {
        par::chunks_mut(&mut out[..self.xs.len()], MAP_TASK, |t, out| {
            let r = t * MAP_TASK..t * MAP_TASK + out.len();
            self.blocks(r, table, |at, _, xs, bits, cs| {
                f(at, xs, bits, &mut out[at - t * MAP_TASK..][..xs.len()], cs)
            });
        });
    }

    /// Each entry's slot of `out` its lane's value of `table` (one a lane), chunks of
    /// entries in parallel: a gradient uniform over each lane.
    pub fn spread<C: Copy + Send + Sync>(&self, table: &[C], out: &mut [C]) {
        par::chunks_mut(&mut out[..self.xs.len()], MAP_TASK, |t, out| {
            self.ids.gather_into(t * MAP_TASK, table, out)
        });
    }

    /// Walks the entries in storage order with a running state a lane from `id`:
    /// `out[k] = step(state, x_k, valid_k)`, `state` entry `k`'s lane's. Tasks own
    /// ranges of lanes (as many as threads, at most four) and each reads every
    /// entry's lane: a lane's entries come in storage order whatever the cut, so each
    /// lane is scanned as the lane alone is (cumsum's chain, to the bit).
    pub fn scan<S: Clone + Send + Sync, O: Send>(
        &self, out: &mut [O], id: S, step: impl Fn(&mut S, T, bool) -> O + Sync,
    ) where
        T: Copy,
    {
        let n = self.xs.len();
        let tasks = par::threads().clamp(1, SCAN_TASKS).min(self.nlanes.max(1));
        let per = self.nlanes.div_ceil(tasks).max(1);
        let dst = par::Scatter::new(&mut out[..n]);
        par::for_each(tasks, |t| {
            let lanes = t * per..((t + 1) * per).min(self.nlanes);
            let mut state = vec![id.clone(); lanes.len()];
            self.blocks(0..n, &[] as &[()], |at, idx, xs, bits, _| {
                for (j, (&l, &x)) in idx.iter().zip(xs).enumerate() {
                    if lanes.contains(&l) {
                        let o = step(
                            &mut state[l - lanes.start],
                            x,
                            bits.is_none_or(|b| b.get(j)),
                        );
                        // SAFETY: entry `at + j` is in this task's lanes alone (the tasks
                        // cut the lanes into disjoint ranges; an entry has one lane)
                        unsafe { dst.write(at + j, o) };
                    }
                }
            });
        });
    }
}

/// Tasks of a scan at the most (each reads every entry's lane).
const SCAN_TASKS: usize = 4;

/// The tasks' accumulators (`nlanes` each) merged in task order, chunks of lanes in
/// parallel: the first task's taken as they are, each later one merged in.
fn merge_parts<A: Clone + Send + Sync>(
    mut parts: Vec<Vec<A>>, id: A, nlanes: usize, merge: impl Fn(&mut A, A) + Sync,
) -> Vec<A> {
    if parts.is_empty() {
        return vec![id; nlanes];
    }
    let mut first = parts.remove(0);
    if parts.is_empty() {
        return first;
    }
    par::chunks_mut(&mut first, MERGE_CHUNK, |c, out| {
        for p in &parts {
            for (s, a) in out.iter_mut().zip(&p[c * MERGE_CHUNK..]) {
                merge(s, a.clone());
            }
        }
    });
    first
}

/// The test lanes the scattered forms are checked on: `n` entries spread over `nlanes`
/// lanes by a multiplicative hash (ids in both widths), and each lane's entries in
/// storage order.
#[cfg(test)]
pub(crate) fn test_lanes(n: usize, nlanes: usize) -> (Vec<u32>, Vec<usize>, Vec<Vec<usize>>) {
    let ids: Vec<u32> = (0..n as u64)
        .map(|k| ((k * 2_654_435_761) % 1_000_003 % nlanes as u64) as u32)
        .collect();
    let wide: Vec<usize> = ids.iter().map(|&l| l as usize).collect();
    let mut lanes = vec![Vec::new(); nlanes];
    for (k, &l) in wide.iter().enumerate() {
        lanes[l].push(k);
    }
    (ids, wide, lanes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lanes of a pseudo-random assignment, over enough entries for several tasks and
    /// blocks: the fold's per-lane sums and counts, the written pass and the map against
    /// a loop over the entries, with and without validity bits.
    #[test]
    fn folds_and_maps_equal_a_loop_over_the_entries() {
        let (n, nlanes) = (300_001usize, 1000usize);
        let (ids, wide, _) = test_lanes(n, nlanes);
        let xs: Vec<i64> = (0..n as i64).map(|k| (k * 7919) % 1013 - 500).collect();
        let words: Vec<u64> = (0..n.div_ceil(64) as u64)
            .map(|w| w.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555)
            .collect();
        let self_xs = &xs;
        for bits in [None, Some(Bits::new(&words, 0))] {
            for lane_ids in [LaneIds::U32(&ids), LaneIds::Usize(&wide)] {
                let s = Scattered::new(&xs, bits, lane_ids, nlanes).unwrap();
                let ok = |k: usize| bits.is_none_or(|b| b.get(k));
                let mut want = vec![(0i64, 0usize); nlanes];
                for k in (0..n).filter(|&k| ok(k)) {
                    want[ids[k] as usize].0 += xs[k];
                    want[ids[k] as usize].1 += 1;
                }
                let got = s.fold(
                    &[] as &[()],
                    (0i64, 0usize),
                    |acc, at, idx, xs, b, _| {
                        assert_eq!(xs[0], self_xs[at]);
                        for (j, (&l, &x)) in idx.iter().zip(xs).enumerate() {
                            if b.is_none_or(|b| b.get(j)) {
                                acc[l].0 += x;
                                acc[l].1 += 1;
                            }
                        }
                    },
                    |s, x| *s = (s.0 + x.0, s.1 + x.1),
                );
                assert_eq!(got, want);
                // the written pass: each slot its entry's lane, the fold a count a lane
                let mut out = vec![0usize; n];
                let counts = s.fold_into(
                    &[] as &[()],
                    0usize,
                    &mut out,
                    |acc, idx, _, _, o, _| {
                        for (&l, o) in idx.iter().zip(o) {
                            acc[l] += 1;
                            *o = l;
                        }
                    },
                    |s, x| *s += x,
                );
                assert_eq!(out, wide);
                assert_eq!(counts.iter().sum::<usize>(), n);
                // the map: each valid slot its lane's sum
                let sums: Vec<i64> = want.iter().map(|w| w.0).collect();
                let mut mapped = vec![0i64; n];
                s.map(&sums, &mut mapped, |at, xs, b, o, cs| {
                    assert_eq!(xs[0], self_xs[at]);
                    for (j, (o, &c)) in o.iter_mut().zip(cs).enumerate() {
                        *o = if b.is_none_or(|b| b.get(j)) { c } else { -1 };
                    }
                });
                for k in 0..n {
                    let w = if ok(k) { sums[ids[k] as usize] } else { -1 };
                    assert_eq!(mapped[k], w, "entry {k}");
                }
            }
        }
    }

    use crate::element::Element;
    use crate::lane::LaneMap;

    /// [`scattered_maps_equal_each_lane_alone`]'s check of one map.
    struct EachLane;

    impl crate::testing::MapCheck for EachLane {
        fn check<T: Element, M: LaneMap<T>>(&mut self, map: &M, of: fn(f64) -> T, tol: (f64, f64)) {
            for (n, nlanes) in [(5000usize, 70usize), (140_001, 1000)] {
                let (ids, wide, lanes) = test_lanes(n, nlanes);
                let mut seen = vec![0usize; nlanes];
                let at = ids.iter().map(|&l| {
                    seen[l as usize] += 1;
                    (l as usize, seen[l as usize] - 1)
                });
                let (xs, valid) = crate::testing::lane_inputs(at, of);
                let words = masked_kernels::bits::pack_bools(&valid);
                for with_bits in [false, true] {
                    let bits = with_bits.then(|| Bits::new(&words, 0));
                    // each lane alone: its entries in storage order
                    let mut want = vec![M::Output::default(); n];
                    for at in &lanes {
                        let lx: Vec<T> = at.iter().map(|&k| xs[k]).collect();
                        let lv: Vec<bool> = at.iter().map(|&k| valid[k]).collect();
                        let lw = masked_kernels::bits::pack_bools(&lv);
                        let mut lo = vec![M::Output::default(); at.len()];
                        map.map(&lx, with_bits.then(|| Bits::new(&lw, 0)), &mut lo);
                        for (&k, &o) in at.iter().zip(&lo) {
                            want[k] = o;
                        }
                    }
                    for lane_ids in [LaneIds::U32(&ids), LaneIds::Usize(&wide)] {
                        let s = Scattered::new(&xs, bits, lane_ids, nlanes).unwrap();
                        let mut got = vec![M::Output::default(); n];
                        assert!(map.scatters() && map.map_scattered(s, &mut got));
                        let what = |k: usize| format!("n {n} bits {with_bits} lane {}", ids[k]);
                        crate::testing::assert_all_close(map, &got, &want, tol, what);
                    }
                }
            }
        }
    }

    /// The softmax family and normalize over scattered lanes against each lane
    /// gathered and mapped alone ([`LaneMap::map`]), every slot (masked-out ones
    /// included): NaN, ±inf, an all-zero lane, fully masked lanes, both id widths,
    /// one task and several ([`crate::testing::lane_inputs`]).
    #[test]
    fn scattered_maps_equal_each_lane_alone() {
        use crate::lane::Normalize;
        use crate::testing::{lane_maps, MapCheck};
        lane_maps(&mut EachLane);
        let m = Normalize::new(1.0, 1e-12).unwrap();
        EachLane.check::<i32, _>(&m, |v| v as i32, (1e-13, 0.0));
        // the scans: each lane's chain, to the bit
        for prod in [false, true] {
            let m = crate::lane::Cumulative { prod };
            EachLane.check::<f64, _>(&m, |v| v, (0.0, 0.0));
            EachLane.check::<f32, _>(&m, |v| v as f32, (0.0, 0.0));
            EachLane.check::<half::f16, _>(&m, half::f16::from_f64, (0.0, 0.0));
            EachLane.check::<i32, _>(&m, |v| v as i32, (0.0, 0.0));
        }
        // an op without the form says so and writes nothing
        let cast = crate::cast::Cast::<f64>::new();
        let s = Scattered::new(&[1.0f32, 2.0], None, LaneIds::U32(&[0, 0]), 1).unwrap();
        let mut out = [7.0f64; 2];
        assert!(!LaneMap::<f32>::scatters(&cast));
        assert!(!cast.map_scattered(s, &mut out));
        assert_eq!(out, [7.0; 2]);
    }

    /// Too many lanes for the entries, or ids and entries of other lengths: no lanes.
    #[test]
    fn refuses_lanes_that_outnumber_the_entries() {
        let ids = [0u32, 5000];
        assert!(Scattered::new(&[1.0f32, 2.0], None, LaneIds::U32(&ids), 4104).is_some());
        assert!(Scattered::new(&[1.0f32, 2.0], None, LaneIds::U32(&ids), 4105).is_none());
        assert!(Scattered::new(&[1.0f32], None, LaneIds::U32(&ids), 10).is_none());
    }
}
