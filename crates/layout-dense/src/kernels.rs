//! Lane kernels of the dense layout: fold every lane of a row-major array with any
//! [`Fold`]. Three strategies, picked from the shape of the reduction:
//!
//! - **runs**: the reduced dims are the innermost ones, so each lane is a contiguous run
//!   of values and of mask bits, folded by the op's vector fast path
//!   ([`Fold::push_run`]). A lane too long for one task is split into fixed-size
//!   chunks folded in parallel and merged in order.
//! - **columns**: one block of reduced dims followed by kept dims (`dim=0` of a matrix):
//!   sweep the reduced index over blocks of columns, each block of rows going into a
//!   row of states through the op's column fast path ([`Fold::push_columns`]); memory is
//!   read in order.
//! - **gather**: anything else (several separated reduced blocks): each lane's values
//!   and bits are gathered into scratch buffers, then folded as a run.
//!
//! Work is split by fixed sizes, never by thread count, so results are bit-for-bit the
//! same on any number of threads.

use masked_core::binary::{keep_pair_run, KeepOperands};
use masked_core::{Element, Fold, LaneMap, LaneStat, ReducePlan, RUN_BLOCK};
use masked_kernels::pack::compress_into;
use masked_kernels::par;
use masked_kernels::transpose::{lane_stride, transpose};
use masked_kernels::Bits;

use masked_kernels::fresh_vec as output_vec;

/// The reduced (`reduced == true`) or kept dims of a plan, in order.
fn dims_of(plan: &ReducePlan, reduced: bool) -> Vec<usize> {
    (0..plan.in_shape.len())
        .filter(|&d| plan.reduced[d] == reduced)
        .collect()
}

/// Row-major offsets of every multi-index over `dims` of an array of `shape`, in
/// row-major order of those dims (a lane's element offsets, or the lanes' bases).
fn offsets(shape: &[usize], dims: &[usize]) -> Vec<usize> {
    let nd = shape.len();
    let mut strides = vec![1usize; nd];
    for d in (0..nd.saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    let mut out = vec![0usize];
    for &d in dims {
        let mut next = Vec::with_capacity(out.len() * shape[d]);
        for &o in &out {
            for i in 0..shape[d] {
                next.push(o + i * strides[d]);
            }
        }
        out = next;
    }
    out
}

/// Elements a parallel task should at least cover.
const GRAIN: usize = 1 << 15;
/// Chunk of one long lane folded as one task.
const LANE_CHUNK: usize = 1 << 16;
/// Columns per task in the column sweep.
const COL_CHUNK: usize = 2048;

/// Folds every lane of `xs` (row-major, shape `plan.in_shape`, valid where `bits` is set)
/// and returns one state per output position plus whether its lane had a valid element.
/// Lane positions start at `pos0` (0 for a whole array; a block of rows of a longer
/// array passes the position of its first element in the lane, for argmax and argmin).
pub(crate) fn fold_all<T: Element, F: Fold<T>>(
    op: &F, xs: &[T], bits: Option<Bits<'_>>, plan: &ReducePlan, pos0: i64,
) -> (Vec<F::State>, Vec<bool>) {
    let n_out = plan.lanes;
    let mut states = vec![op.identity(); n_out];
    let mut any = vec![false; n_out];
    if n_out == 0 || plan.lane_len == 0 {
        return (states, any);
    }
    if lanes_are_runs(plan) {
        // the array's own values: nothing to compute, nothing can fail
        let _ = runs(op, xs, bits, plan.lane_len, pos0, &mut states, &mut any);
        return (states, any);
    }
    let groups = plan.groups();
    let kinds: Vec<bool> = groups.iter().map(|g| g.0).collect();
    let (st, an) = (&mut states, &mut any);
    match kinds.as_slice() {
        [true, false] => columns(op, xs, bits, (1, groups[0].1, groups[1].1), pos0, st, an),
        [false, true, false] => {
            let dims = (groups[0].1, groups[1].1, groups[2].1);
            columns(op, xs, bits, dims, pos0, st, an)
        }
        _ => gather(op, xs, bits, plan, pos0, st, an),
    }
    (states, any)
}

/// Whether a run of `len` elements starting at `start` has a valid element.
#[inline]
fn any_valid(bits: Option<Bits<'_>>, start: usize, len: usize) -> bool {
    match bits {
        None => len > 0,
        Some(b) => b.offset(start).any(len),
    }
}

/// Where a run kernel reads a lane's values: the array's own slice, or values computed
/// on demand ([`Lazy`]).
pub(crate) trait Source<T: Element>: Sync {
    /// Pushes elements `start .. start + len` (valid where `bits`, already offset to
    /// `start`, are set; at lane positions from `idx0`) into `state`, with `scratch` for
    /// values that have to be computed first; the position of the first element that
    /// could not be computed, if any.
    #[allow(clippy::too_many_arguments)]
    fn push_run<F: Fold<T>>(
        &self, op: &F, state: &mut F::State, start: usize, len: usize, bits: Option<Bits<'_>>,
        idx0: i64, scratch: &mut Vec<T>,
    ) -> Option<usize>;
}

impl<T: Element> Source<T> for [T] {
    #[inline(always)]
    fn push_run<F: Fold<T>>(
        &self, op: &F, state: &mut F::State, start: usize, len: usize, bits: Option<Bits<'_>>,
        idx0: i64, _: &mut Vec<T>,
    ) -> Option<usize> {
        // the values from the run's start on: the kernel may end with whole vectors
        op.push_row(state, &self[start..], len, bits, idx0);
        None
    }
}

/// Values computed on demand, a piece at a time: a lazy view's (`ZipView`).
pub(crate) trait Fill<T>: Sync {
    /// Computes elements `start .. start + out.len()` of the row-major values into
    /// `out` (where the view's mask is set, or everywhere); the offset in `out` of the
    /// first element that could not be computed (an integer division by zero), if any.
    fn fill(&self, start: usize, out: &mut [T]) -> Option<usize>;

    /// The values as `bin(xs[k], ys[k])` over two operands of the output's shape, where
    /// they are that (an op of the keep family, no broadcasting, no scalar).
    fn pair(&self) -> Option<KeepOperands<'_, T>> {
        None
    }
}

/// A [`Fill`] as a [`Source`]. Where the values are a keep-family op of two operands
/// and the op has a pair path ([`keep_pair_run`]: sum and mean of `add`, `sub`, `mul`
/// on floats), each run is folded straight from the two operands. Otherwise it is
/// computed into the scratch buffer one piece of at most [`RUN_BLOCK`] elements at a
/// time (L1-resident) and pushed at once. Either way the computed values are never held
/// whole, and the states are those of the materialised values, bit for bit: the pair
/// path is `push_run` over the values written out, and the pieces start at multiples
/// of `RUN_BLOCK` from the run's start (the Fold law of pieces, see [`Fold`]).
pub(crate) struct Lazy<'a, T> {
    fill: &'a dyn Fill<T>,
    pair: Option<KeepOperands<'a, T>>,
}

impl<'a, T> Lazy<'a, T> {
    /// The source of `fill`'s values.
    pub(crate) fn new(fill: &'a dyn Fill<T>) -> Self {
        Lazy {
            fill,
            pair: fill.pair(),
        }
    }
}

impl<T: Element> Source<T> for Lazy<'_, T> {
    fn push_run<F: Fold<T>>(
        &self, op: &F, state: &mut F::State, start: usize, len: usize, bits: Option<Bits<'_>>,
        idx0: i64, scratch: &mut Vec<T>,
    ) -> Option<usize> {
        if let Some((bin, xs, ys)) = self.pair {
            let run = (&xs[start..start + len], &ys[start..start + len]);
            if keep_pair_run(bin, op, state, run, bits, idx0) {
                return None;
            }
        }
        const PIECE: usize = RUN_BLOCK;
        if scratch.len() < PIECE.min(len) {
            // written by `fill` before it is read: the initial values never show
            scratch.resize(PIECE.min(len), T::default());
        }
        let mut failed = None;
        let mut off = 0;
        while off < len {
            let n = PIECE.min(len - off);
            let buf = &mut scratch[..n];
            if let Some(k) = self.fill.fill(start + off, buf) {
                failed = failed.or(Some(start + off + k));
            }
            op.push_run(state, buf, bits.map(|b| b.offset(off)), idx0 + off as i64);
            off += n;
        }
        failed
    }
}

/// The earlier of two failure positions.
fn first(a: Option<usize>, b: Option<usize>) -> Option<usize> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        _ => a.or(b),
    }
}

/// Whether [`fold_all`] folds the lanes of `plan` as contiguous runs (the reduced dims
/// are the innermost ones): the shapes [`fold_lazy`] takes.
pub(crate) fn lanes_are_runs(plan: &ReducePlan) -> bool {
    let kinds: Vec<bool> = plan.groups().iter().map(|g| g.0).collect();
    matches!(kinds.as_slice(), [] | [true] | [false] | [false, true])
}

/// [`fold_all`] over values computed on demand, for the shapes of [`lanes_are_runs`]:
/// the same tasks, pieces and merge order, so the same states bit for bit; plus the
/// position of the first element that could not be computed, if any.
pub(crate) fn fold_lazy<T: Element, F: Fold<T>>(
    op: &F, src: &Lazy<'_, T>, bits: Option<Bits<'_>>, plan: &ReducePlan,
) -> (Vec<F::State>, Vec<bool>, Option<usize>) {
    debug_assert!(lanes_are_runs(plan));
    let mut states = vec![op.identity(); plan.lanes];
    let mut any = vec![false; plan.lanes];
    if plan.lanes == 0 || plan.lane_len == 0 {
        return (states, any, None);
    }
    let failed = runs(op, src, bits, plan.lane_len, 0, &mut states, &mut any);
    (states, any, failed)
}

fn runs<T: Element, F: Fold<T>, S: Source<T> + ?Sized>(
    op: &F, src: &S, bits: Option<Bits<'_>>, len: usize, pos0: i64, states: &mut [F::State],
    any: &mut [bool],
) -> Option<usize> {
    if states.len() < 4 && len > 2 * LANE_CHUNK {
        // few long lanes: split each lane, fold the chunks in parallel, merge in order
        let mut failed = None;
        for (i, (s, a)) in states.iter_mut().zip(any.iter_mut()).enumerate() {
            let parts: Vec<(F::State, Option<usize>)> = par::map(len.div_ceil(LANE_CHUNK), |c| {
                let scratch = &mut Vec::new();
                let mut st = op.identity();
                let start = i * len + c * LANE_CHUNK;
                let n = LANE_CHUNK.min(len - c * LANE_CHUNK);
                let f = src.push_run(
                    op,
                    &mut st,
                    start,
                    n,
                    bits.map(|b| b.offset(start)),
                    pos0 + (c * LANE_CHUNK) as i64,
                    scratch,
                );
                (st, f)
            });
            for (p, f) in parts {
                op.merge(s, p);
                failed = first(failed, f);
            }
            *a = any_valid(bits, i * len, len);
        }
        return failed;
    }
    let g = (GRAIN / len).max(1);
    par::chunks_mut2(states, g, any, g, |c, st, an| {
        let scratch = &mut Vec::new();
        let mut failed = None;
        for (k, (s, a)) in st.iter_mut().zip(an.iter_mut()).enumerate() {
            let start = (c * g + k) * len;
            let lane_bits = bits.map(|b| b.offset(start));
            let f = src.push_run(op, s, start, len, lane_bits, pos0, scratch);
            failed = first(failed, f);
            *a = any_valid(bits, start, len);
        }
        failed
    })
    .into_iter()
    .fold(None, first)
}

/// The column sweep over `(outer, red, inner)` blocks of dims: the middle one reduced.
/// A task takes up to [`COL_CHUNK`] columns of one outer block. Where that makes one
/// task and the reduced dim is long (more than [`COL_TASK`] elements), a task takes a
/// block of its rows instead, each block folded from the identity and the blocks merged
/// in row order, so that a few columns (a 10⁵ x 256 feature matrix over dim 0: 0.52x
/// the time on two cores) take every core rather than one. Where there are two tasks
/// or more already, blocks of rows made it slower (4096² over dim 0 on two cores:
/// argmax 3.9 -> 4.7-6.9 ms, sum 2.0 -> 2.1-3.1). The cut depends on the shape only,
/// not on the thread count.
fn columns<T: Element, F: Fold<T>>(
    op: &F, xs: &[T], bits: Option<Bits<'_>>, (outer, red, inner): (usize, usize, usize),
    pos0: i64, states: &mut [F::State], any: &mut [bool],
) {
    debug_assert_eq!(states.len(), outer * inner);
    let nc = inner.div_ceil(COL_CHUNK);
    let rows = match (COL_TASK / inner.clamp(1, COL_CHUNK)).max(COL_MIN_ROWS) {
        r if red > r && outer * nc == 1 => r,
        _ => red.max(1),
    };
    let nb = red.div_ceil(rows);
    if nb <= 1 {
        // a task a chunk of columns, folded into its states in place (no states of its
        // own to merge: with many outer blocks, 1.3-1.9x faster)
        par::chunks_mut2(states, inner, any, inner, |o, srow, arow| {
            par::chunks_mut2(srow, COL_CHUNK, arow, COL_CHUNK, |c, s, a| {
                let base = o * red * inner + c * COL_CHUNK;
                let b = bits.map(|b| b.offset(base));
                op.push_columns(s, &xs[base..], inner, red, b, pos0);
                let valid = valid_columns(b, (inner, red), s.len());
                for (k, ak) in a.iter_mut().enumerate() {
                    *ak = valid
                        .as_ref()
                        .map_or(red > 0, |v| (v[k / 64] >> (k % 64)) & 1 == 1);
                }
            });
        });
        return;
    }
    let cut = |t: usize| (t / (nc * nb), (t / nb) % nc * COL_CHUNK, t % nb * rows);
    let parts = par::map(outer * nc * nb, |t| {
        let (o, j0, r0) = cut(t);
        let (w, n) = (COL_CHUNK.min(inner - j0), rows.min(red - r0));
        let base = (o * red + r0) * inner + j0;
        let b = bits.map(|b| b.offset(base));
        let mut s = vec![op.identity(); w];
        op.push_columns(&mut s, &xs[base..], inner, n, b, pos0 + r0 as i64);
        (s, valid_columns(b, (inner, n), w))
    });
    for (t, (s, valid)) in parts.into_iter().enumerate() {
        let (o, j0, _) = cut(t);
        let at = o * inner + j0;
        for (k, x) in s.into_iter().enumerate() {
            op.merge(&mut states[at + k], x);
            any[at + k] |= valid
                .as_ref()
                .is_none_or(|v| (v[k / 64] >> (k % 64)) & 1 == 1);
        }
    }
}

/// Elements of one column task past which [`columns`] cuts the reduced dim into blocks.
const COL_TASK: usize = 1 << 18;
/// Rows of a block of [`columns`] at the least.
const COL_MIN_ROWS: usize = 64;

/// Which of the first `w` columns of `nrows` rows (`shape`: the rows' stride and count)
/// hold a valid element: the rows' mask words ORed, 64 columns a word (`None` without a
/// mask: every column of a nonempty block).
fn valid_columns(
    bits: Option<Bits<'_>>, (stride, nrows): (usize, usize), w: usize,
) -> Option<Vec<u64>> {
    let b = bits?;
    let (mut words, mut row) = (vec![0u64; w.div_ceil(64)], vec![0; w.div_ceil(64)]);
    for r in 0..nrows {
        b.words_into(r * stride, &mut row);
        for (wd, x) in words.iter_mut().zip(&row) {
            *wd |= x;
        }
    }
    Some(words)
}

fn gather<T: Element, F: Fold<T>>(
    op: &F, xs: &[T], bits: Option<Bits<'_>>, plan: &ReducePlan, pos0: i64,
    states: &mut [F::State], any: &mut [bool],
) {
    let shape = &plan.in_shape;
    let (dims_of, offsets) = (|r| dims_of(plan, r), |dims: &[usize]| offsets(shape, dims));
    let bases = offsets(&dims_of(false));
    // when the innermost dims are reduced, a lane is a sequence of contiguous segments:
    // fold them in place instead of gathering
    let groups = plan.groups();
    if let Some(&(true, seg)) = groups.last()
        && seg >= 16
    {
        let mut seg_dims = dims_of(true);
        let mut inner = 1;
        while inner < seg {
            match seg_dims.pop() {
                Some(d) => inner *= shape[d],
                None => break,
            }
        }
        let seg_off = offsets(&seg_dims);
        let g = (GRAIN / plan.lane_len).max(1);
        par::chunks_mut2(states, g, any, g, |c, st, an| {
            for (k, (s, a)) in st.iter_mut().zip(an.iter_mut()).enumerate() {
                let base = bases[c * g + k];
                for (i, &o) in seg_off.iter().enumerate() {
                    let start = base + o;
                    let b = bits.map(|b| b.offset(start));
                    let pos = pos0 + (i * inner) as i64;
                    op.push_run(s, &xs[start..start + inner], b, pos);
                    *a = *a || any_valid(bits, start, inner);
                }
            }
        });
        return;
    }
    let lane_off = offsets(&dims_of(true));
    let len = lane_off.len();
    let g = (GRAIN / len).max(1);
    par::chunks_mut2(states, g, any, g, |c, st, an| {
        let (vals, words) = &mut (Vec::with_capacity(len), vec![0u64; len.div_ceil(64)]);
        {
            for (k, (s, a)) in st.iter_mut().zip(an.iter_mut()).enumerate() {
                let base = bases[c * g + k];
                vals.clear();
                vals.extend(lane_off.iter().map(|&o| xs[base + o]));
                match bits {
                    None => {
                        op.push_run(s, vals, None, pos0);
                        *a = true;
                    }
                    Some(b) => {
                        words.fill(0);
                        for (i, &o) in lane_off.iter().enumerate() {
                            words[i / 64] |= (b.get(base + o) as u64) << (i % 64);
                        }
                        op.push_run(s, vals, Some(Bits::new(words, 0)), pos0);
                        *a = words.iter().any(|&w| w != 0);
                    }
                }
            }
        }
    });
}

/// Computes `stat` over the valid values of every lane: gathers each lane's valid values
/// into per-thread scratch (contiguous lanes are read in place), then hands them over.
pub(crate) fn stat_all<T: Element, S: LaneStat<T>>(
    stat: &S, xs: &[T], bits: Option<Bits<'_>>, plan: &ReducePlan,
) -> (Vec<S::Output>, Vec<bool>) {
    let n_out = plan.lanes;
    let len = plan.lane_len;
    let mut out: Vec<S::Output> = vec![S::Output::default(); n_out];
    let mut any = vec![false; n_out];
    if n_out == 0 {
        return (out, any);
    }
    let shape = &plan.in_shape;
    let kept = dims_of(plan, false);
    let red = dims_of(plan, true);
    let bases = offsets(shape, &kept);
    let kinds: Vec<bool> = plan.groups().iter().map(|g| g.0).collect();
    let contiguous = matches!(kinds.as_slice(), [] | [true] | [false] | [false, true]);
    let lane_off = if contiguous {
        Vec::new()
    } else {
        offsets(shape, &red)
    };
    let want_pos = stat.positions();
    // the lanes in runs of `run` whose first elements are neighbours (a dim reduced
    // before the last kept ones: every lane for a median over dim 0 of a matrix, a
    // block's for one over dim 1 of a 3-d array)
    let run = (bases.windows(2).position(|w| w[1] != w[0] + 1)).map_or(bases.len(), |i| i + 1);
    let in_runs = bases.len().is_multiple_of(run)
        && (bases.chunks(run)).all(|c| c.windows(2).all(|w| w[1] == w[0] + 1));
    if !contiguous && run >= 4 && in_runs {
        // neighbouring lanes at neighbouring elements: a tile of up to `m` lanes of one
        // run is read a row at a time with its validity bits as one word, then each lane
        // read out of the cache-resident tile. One lane at a time, every element was a
        // load from another cache line and a bit test (16x the time of dim 1; a median
        // over dim 1 of 16 x 256 x 256 took 7x that over dim 0 of 1024 x 1024).
        let m = (8 * GRAIN / len.max(1)).clamp(1, 64);
        // a lane's elements a constant stride apart (one reduced dim, or several whose
        // elements are)
        let step = match lane_off.as_slice() {
            [a, b, ..] if lane_off.windows(2).all(|w| w[1] - w[0] == b - a) => Some(b - a),
            _ => None,
        };
        // tasks of a few tiles each (its buffers allocated once: a task a tile allocated
        // megabytes of fresh pages per tile at 4096², a page fault each)
        let per = out.len().div_ceil(m).div_ceil(4 * par::threads()).max(1) * m;
        par::chunks_mut2(&mut out, per, &mut any, per, |c, oc, ac| {
            let sx = lane_stride::<T>(len);
            let nw = len.div_ceil(64);
            let wm = m.min(oc.len());
            let (tile, rows, cols, words, vals, pos) = &mut (
                vec![T::default(); if step.is_some() { 0 } else { len * wm }],
                vec![u64::MAX; if bits.is_some() { len } else { 0 }],
                vec![T::default(); sx * wm],
                vec![0u64; wm * nw],
                Vec::with_capacity(len),
                Vec::new(),
            );
            let mut at = 0;
            while at < oc.len() {
                // a tile within one run
                let g = c * per + at;
                let w = m.min(oc.len() - at).min(run - g % run);
                let first = bases[g];
                let (oc, ac) = (&mut oc[at..at + w], &mut ac[at..at + w]);
                at += w;
                // the lanes as runs, one after another (a tile transpose: straight from
                // the rows where they lie a stride apart, else from a copy of each row's
                // part), and their validity words (a bit transpose)
                if let Some(step) = step {
                    transpose(&xs[first..], (len, w, step), cols, sx);
                    if let Some(b) = bits {
                        masked_kernels::run::tile_words(b, |i| first + i * step, rows);
                    }
                } else {
                    let tile = &mut tile[..len * w];
                    masked_kernels::run::gather_tile(
                        xs,
                        bits,
                        w,
                        |i| first + lane_off[i],
                        tile,
                        rows,
                    );
                    transpose(tile, (len, w, w), cols, sx);
                }
                if bits.is_some() {
                    masked_kernels::bits::columns_bits(rows, w, words);
                }
                for k in 0..w {
                    vals.clear();
                    pos.clear();
                    // the lane, a run, packed by its validity word by word (a branch per
                    // element on a random mask mispredicted half the time: 14x the time
                    // of dim 1)
                    let col = &cols[k * sx..k * sx + len];
                    let lw = &words[k * nw..k * nw + nw];
                    let lane_bits = bits.map(|_| Bits::new(lw, 0));
                    compress_into(col, lane_bits, vals);
                    if want_pos {
                        match lane_bits {
                            None => pos.extend(0..len as i64),
                            Some(_) => {
                                for (c, &wd) in lw.iter().enumerate() {
                                    let mut wd = wd;
                                    while wd != 0 {
                                        pos.push((c * 64) as i64 + i64::from(wd.trailing_zeros()));
                                        wd &= wd - 1;
                                    }
                                }
                            }
                        }
                    }
                    ac[k] = !vals.is_empty();
                    oc[k] = stat.compute_at(vals, pos);
                }
            }
        });
        return (out, any);
    }
    let g = (GRAIN / len.max(1)).max(1);
    par::chunks_mut2(&mut out, g, &mut any, g, |c, oc, ac| {
        let (vals, pos) = &mut (Vec::with_capacity(len), Vec::new());
        for (k, (o, a)) in oc.iter_mut().zip(ac.iter_mut()).enumerate() {
            let lane = c * g + k;
            vals.clear();
            pos.clear();
            if contiguous {
                let start = lane * len;
                let lx = &xs[start..start + len];
                let lb = bits.map(|b| b.offset(start));
                if want_pos {
                    for (i, &x) in lx.iter().enumerate() {
                        if lb.is_none_or(|b| b.get(i)) {
                            vals.push(x);
                            pos.push(i as i64);
                        }
                    }
                } else {
                    compress_into(lx, lb, vals);
                }
            } else {
                let base = bases[lane];
                for (i, &off) in lane_off.iter().enumerate() {
                    if bits.is_none_or(|b| b.get(base + off)) {
                        vals.push(xs[base + off]);
                        if want_pos {
                            pos.push(i as i64);
                        }
                    }
                }
            }
            *a = !vals.is_empty();
            *o = stat.compute_at(vals, pos);
        }
    });
    (out, any)
}

/// Maps every lane along `dim` of a row-major array of `shape` with `map`, returning the
/// mapped array in row-major order. Lanes along the last dim are read and written in
/// place; others are gathered into scratch and scattered back.
pub(crate) fn map_all<T: Element, M: LaneMap<T>>(
    map: &M, xs: &[T], bits: Option<Bits<'_>>, shape: &[usize], dim: usize,
) -> Vec<M::Output> {
    let n: usize = shape.iter().product();
    let mut out = output_vec::<M::Output>(n);
    map_all_into(map, xs, bits, shape, dim, &mut out);
    out
}

/// [`map_all`] into `out` (one slot per element, every slot written).
pub(crate) fn map_all_into<T: Element, M: LaneMap<T>>(
    map: &M, xs: &[T], bits: Option<Bits<'_>>, shape: &[usize], dim: usize, out: &mut [M::Output],
) {
    let n: usize = shape.iter().product();
    debug_assert_eq!(out.len(), n);
    if n == 0 {
        return;
    }
    if shape.is_empty() {
        map.map(xs, bits, out);
        return;
    }
    let len = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    // rows a word wide at least: down the columns where the op has a column form
    let cols = masked_core::columns::Columns::new(xs, bits, (n / (len * inner), len, inner));
    if inner >= 64 && map.map_columns(cols, out) {
        return;
    }
    if inner == 1 {
        let g = (GRAIN / len).max(1);
        par::chunks_mut(out, len * g, |c, oc| {
            for (k, o) in oc.chunks_mut(len).enumerate() {
                let start = (c * g + k) * len;
                map.map(&xs[start..start + len], bits.map(|b| b.offset(start)), o);
            }
        });
        return;
    }
    // lanes in tiles of up to 64 neighbouring inner positions (four cache lines of a
    // row, with the tile under about 2^18 elements: each row of a large block is on a
    // page of its own, a page walk that a wider tile shares among more lanes; at 2^16,
    // 4096^2 along dim 0 was 1.35x slower): the tile's rows (one per lane position,
    // each a contiguous run) are copied into a contiguous buffer with their validity
    // words, each lane read out of it (its validity built a word at a time in a
    // register), mapped into a row-major output tile, and the tile written back row by
    // row. Reading each lane straight from the array with its stride was 2x slower: a
    // stride of a power of two maps a lane's elements to one cache set, so the tile's
    // lines left the cache between its lanes. Tasks of tiles over every block, about
    // GRAIN elements each (whole blocks as tasks left a single block, a normalization
    // over dim 0, on one thread).
    let line = (64 / std::mem::size_of::<T>().max(1)).max(1);
    let tile = ((1 << 18) / len).clamp(1, (4 * line).min(64)).min(inner);
    let tiles = inner.div_ceil(tile);
    let ntiles = n / (len * inner) * tiles;
    // at least a few tiles a task (each task's buffers allocated once: a task a tile
    // allocated megabytes of fresh pages per tile at 4096², a page fault each)
    let per_task = (GRAIN / (len * tile))
        .max(ntiles.div_ceil(4 * par::threads()))
        .max(1);
    // the mapped lanes transposed straight into the output's rows when it is larger than
    // a cache (4096² f32 along dim 0: 29.5 -> 23.2 ms), else through a tile of rows
    // copied out a row at a time (1024²: 0.59 against 0.91 ms; 2048²: 3.2 against 4.4:
    // the output's rows a power-of-two stride apart evict each other's lines)
    let direct = n * std::mem::size_of::<M::Output>() >= 1 << 25;
    let dst = par::Scatter::new(out);
    par::for_each(ntiles.div_ceil(per_task), |t| {
        let (sx, so) = (lane_stride::<T>(len), lane_stride::<M::Output>(len));
        let nw = len.div_ceil(64);
        let (rows, lanes, words, mapped, back) = &mut (
            vec![u64::MAX; if bits.is_some() { len } else { 0 }],
            vec![T::default(); sx * tile],
            vec![0u64; tile * nw],
            vec![M::Output::default(); so * tile],
            vec![M::Output::default(); if direct { 0 } else { len * tile }],
        );
        for i in t * per_task..ntiles.min((t + 1) * per_task) {
            let (base, j0) = (i / tiles * len * inner, i % tiles * tile);
            let w = tile.min(inner - j0);
            // the tile's lanes as runs, one after another (a transpose straight from the
            // array's rows), with each row's validity word; mapped into runs, transposed
            // back into rows, the rows copied out
            transpose(&xs[base + j0..], (len, w, inner), lanes, sx);
            if let Some(b) = bits {
                masked_kernels::run::tile_words(b, |k| base + k * inner + j0, rows);
                masked_kernels::bits::columns_bits(rows, w, words);
            }
            for jj in 0..w {
                let lane_bits = bits.map(|_| Bits::new(&words[jj * nw..jj * nw + nw], 0));
                let x = &lanes[jj * sx..jj * sx + len];
                map.map(x, lane_bits, &mut mapped[jj * so..jj * so + len]);
            }
            if direct {
                // SAFETY: this tile's elements (`w` from `base + k * inner + j0` in each
                // row `k`) are written by this task alone: tiles partition every block's
                // positions
                unsafe { dst.transposed(mapped, (w, len, so), base + j0, inner) };
                continue;
            }
            let back = &mut back[..len * w];
            transpose(mapped, (w, len, so), back, w);
            for k in 0..len {
                let row = base + k * inner + j0;
                // SAFETY: this tile's elements of row `k` (`w` of them from `row`) are
                // written by this task alone: tiles partition every block's positions
                let o = unsafe { dst.part(row, row + w) };
                o.copy_from_slice(&back[k * w..k * w + w]);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use masked_core::lane::Cumulative;

    /// The row-major offsets of every lane's start (`bases`, over the kept dims) and of
    /// the elements within a lane (`lane`, over the reduced dims `red`), each coordinate
    /// tuple in row-major order.
    fn lane_offsets(shape: &[usize], red: &[usize]) -> (Vec<usize>, Vec<usize>) {
        let strides: Vec<usize> = (0..shape.len())
            .map(|d| shape[d + 1..].iter().product())
            .collect();
        let strides = &strides[..];
        let offs = |ds: &[usize]| {
            let mut o = vec![0usize];
            for &d in ds {
                o = o
                    .iter()
                    .flat_map(|&b| (0..shape[d]).map(move |i| b + i * strides[d]))
                    .collect();
            }
            o
        };
        let kept: Vec<usize> = (0..shape.len()).filter(|d| !red.contains(d)).collect();
        (offs(&kept), offs(red))
    }

    /// `fold_all` over dims outer to the kept ones (the column sweep) equals each lane
    /// folded alone as one run, for sum, mean and count (the column kernel; count's
    /// bit-sliced counters), var, std, norm and logsumexp (their column passes) and
    /// argmax and argmin's column search, on values with ties and NaNs: a few rows
    /// (pushed row by row), more rows than a block holds (several blocks a column
    /// merged), column counts past a word of 64 and past a chunk of columns, a middle
    /// dim, reduced dims long enough to be cut into tasks of rows, with and without a
    /// mask. Within 1e-12
    /// relative: the runs' states are merged where one run took the whole lane.
    #[test]
    fn fold_over_outer_dims_equals_each_lane_alone() {
        use masked_core::fold::{ArgMax, ArgMin, Count, LogSumExp, Mean, Norm, Std, Sum, Var};
        use masked_core::{Dims, Fold};
        fn check<F: Fold<f64>>(op: &F, val: impl Fn(F::Output) -> f64) {
            for (shape, dims) in [
                (vec![3000usize, 70], vec![0isize]),
                (vec![20, 130], vec![0]),
                (vec![9, 5], vec![0]),
                (vec![3, 1500, 5], vec![1]),
                (vec![1100, 3, 65], vec![0, 1]),
                // one task's columns over a dim long enough to be cut into blocks of
                // rows (merged in row order): two blocks of 70 columns, three of 300
                // over a middle dim; two column chunks, and four outer blocks (not cut)
                (vec![5000, 70], vec![0]),
                (vec![1, 2000, 300], vec![1]),
                (vec![600, 2100], vec![0]),
                (vec![4, 700, 600], vec![1]),
            ] {
                let n: usize = shape.iter().product();
                // ties (101 values) and a NaN every 997th element
                let xs: Vec<f64> = (0..n)
                    .map(|i| {
                        if i % 997 == 500 {
                            f64::NAN
                        } else {
                            ((i * 7919) % 101) as f64 / 7.0 - 6.0
                        }
                    })
                    .collect();
                let words: Vec<u64> = (0..n.div_ceil(64) as u64)
                    .map(|i| 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i + 11))
                    .collect();
                // and valid in the first tenth of the elements only: lanes with no valid
                // element, blocks of rows with none after blocks with some
                let head = masked_kernels::bits::pack_bools(
                    &(0..n).map(|i| i < n / 10).collect::<Vec<_>>(),
                );
                for bits in [None, Some(Bits::new(&words, 0)), Some(Bits::new(&head, 0))] {
                    let plan = ReducePlan::new(&shape, &Dims::from(dims.clone()), false).unwrap();
                    let (got, any) = fold_all(op, &xs, bits, &plan, 0);
                    let red: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
                    let (bases, lane) = lane_offsets(&shape, &red);
                    for (l, &b) in bases.iter().enumerate() {
                        let vals: Vec<f64> = lane.iter().map(|&o| xs[b + o]).collect();
                        let w = bits.map(|bb| {
                            masked_kernels::bits::pack_bools(
                                &lane.iter().map(|&o| bb.get(b + o)).collect::<Vec<_>>(),
                            )
                        });
                        let mut want = op.identity();
                        op.push_run(&mut want, &vals, w.as_deref().map(|w| Bits::new(w, 0)), 0);
                        let (g, e) = (val(op.finish(&got[l])), val(op.finish(&want)));
                        assert_eq!(
                            any[l],
                            w.as_deref().is_none_or(|w| w.iter().any(|&x| x != 0))
                        );
                        assert!(
                            g == e
                                || (g - e).abs() <= 1e-12 * e.abs().max(1.0)
                                || (g.is_nan() && e.is_nan()),
                            "{} {shape:?} dims {dims:?} lane {l} mask {}: {g} vs {e}",
                            op.name(),
                            bits.is_some()
                        );
                    }
                }
            }
        }
        check(&Sum, |v| v);
        check(&Mean, |v| v);
        check(&Count, |n| n as f64);
        check(&Var::default(), |v| v);
        check(&Std { correction: 0.0 }, |v| v);
        check(&Norm::new(2.0).unwrap(), |v| v);
        check(&LogSumExp, |v| v);
        // the positional folds' own column kernel: extremes, then the first row holding
        // each (ties and NaNs above)
        check(&ArgMax, |i| i as f64);
        check(&ArgMin, |i| i as f64);
    }

    /// The column sweep of var in f32 (sums in f32 lanes, squared deviations from each
    /// column's mean rounded to f32) within 1e-5 relative of the variance in f64 of the
    /// same values, with and without a mask, over more rows than a block: on values
    /// around 100 with a spread of about 1, where the textbook `E[x²] - E[x]²` in f32
    /// would lose three digits. The same for logsumexp's (within 1e-6).
    #[test]
    fn f32_variance_over_dim0_is_within_1e_5_of_f64() {
        use masked_core::fold::{LogSumExp, Var};
        use masked_core::{Dims, Fold};
        let (rows, cols) = (700usize, 70usize);
        let mut r = 0x2545_F491_4F6C_DD1Du64;
        let xs: Vec<f32> = (0..rows * cols)
            .map(|_| {
                r ^= r << 13;
                r ^= r >> 7;
                r ^= r << 17;
                100.0 + (r % 2000) as f32 / 1000.0
            })
            .collect();
        let words: Vec<u64> = (0..(rows * cols).div_ceil(64) as u64)
            .map(|i| 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i + 3))
            .collect();
        let plan = ReducePlan::new(&[rows, cols], &Dims::from(0), false).unwrap();
        let op = Var { correction: 1.0 };
        for bits in [None, Some(Bits::new(&words, 0))] {
            // column `c`'s valid values in f64
            let column = |c: usize| -> Vec<f64> {
                (0..rows)
                    .filter(|&i| bits.is_none_or(|b| b.get(i * cols + c)))
                    .map(|i| xs[i * cols + c] as f64)
                    .collect()
            };
            let (got, _) = fold_all(&op, &xs, bits, &plan, 0);
            for (c, s) in got.iter().enumerate() {
                let v = column(c);
                let mean = v.iter().sum::<f64>() / v.len() as f64;
                let want =
                    v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (v.len() - 1) as f64;
                let g = Fold::<f32>::finish(&op, s) as f64;
                assert!((g / want - 1.0).abs() < 1e-5, "column {c}: {g} vs {want}");
            }
            // and logsumexp's column sweep (the max, then the exps from it)
            let (got, _) = fold_all(&LogSumExp, &xs, bits, &plan, 0);
            for (c, s) in got.iter().enumerate() {
                let v = column(c);
                let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let want = m + v.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
                let g = Fold::<f32>::finish(&LogSumExp, s) as f64;
                assert!(
                    (g / want - 1.0).abs() < 1e-6,
                    "logsumexp column {c}: {g} vs {want}"
                );
            }
        }
    }

    /// `stat_all` over dims that leave lanes strided equals the statistic of each lane
    /// gathered alone, its positions included (the median's index), with and without a
    /// mask.
    #[test]
    fn stat_over_strided_lanes_equals_each_lane_alone() {
        use masked_core::lane::MedianIndex;
        use masked_core::{Dims, LaneStat};
        let shape = [4usize, 37, 70];
        let n: usize = shape.iter().product();
        let xs: Vec<f64> = (0..n).map(|i| ((i * 7919) % 101) as f64).collect();
        let words: Vec<u64> = (0..n.div_ceil(64) as u64)
            .map(|i| 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i + 5))
            .collect();
        for bits in [None, Some(Bits::new(&words, 0))] {
            for dims in [vec![0isize], vec![1], vec![0, 2], vec![0, 1]] {
                let plan = ReducePlan::new(&shape, &Dims::from(dims.clone()), false).unwrap();
                let (got, any) = stat_all(&MedianIndex, &xs, bits, &plan);
                let red: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
                let (bases, lane) = lane_offsets(&shape, &red);
                for (l, &b) in bases.iter().enumerate() {
                    let (mut vals, mut pos) = (Vec::new(), Vec::new());
                    for (i, &o) in lane.iter().enumerate() {
                        if bits.is_none_or(|w| w.get(b + o)) {
                            vals.push(xs[b + o]);
                            pos.push(i as i64);
                        }
                    }
                    assert_eq!(any[l], !vals.is_empty());
                    let want = MedianIndex.compute_at(&mut vals, &pos);
                    assert_eq!(
                        got[l],
                        want,
                        "dims {dims:?} lane {l} mask {}",
                        bits.is_some()
                    );
                }
            }
        }
    }

    /// [`map_all`] of a cumulative sum and product along `dim` equals the map run on
    /// each lane gathered alone, bit for bit (lanes down columns a word wide or more
    /// take the column scan).
    fn assert_map_equals_each_lane_alone<T: Element>(
        xs: &[T], bits: Option<Bits<'_>>, shape: &[usize], dim: usize,
    ) {
        for prod in [false, true] {
            let (got, want) =
                mapped_and_each_lane_alone(&Cumulative { prod }, xs, bits, shape, dim);
            let same = got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_f64().to_bits() == b.to_f64().to_bits());
            assert!(
                same,
                "prod {prod} {} {shape:?} dim {dim} mask {}",
                T::DTYPE,
                bits.is_some()
            );
        }
    }

    /// [`map_all`] of `map` along `dim`, and the map run on each lane gathered alone.
    fn mapped_and_each_lane_alone<T: Element, M: LaneMap<T>>(
        map: &M, xs: &[T], bits: Option<Bits<'_>>, shape: &[usize], dim: usize,
    ) -> (Vec<M::Output>, Vec<M::Output>) {
        let n = xs.len();
        let got = map_all(map, xs, bits, shape, dim);
        let (len, inner) = (shape[dim], shape[dim + 1..].iter().product::<usize>());
        let mut want = vec![M::Output::default(); n];
        for o in 0..n / (len * inner) {
            for j in 0..inner {
                let at: Vec<usize> = (0..len).map(|k| o * len * inner + k * inner + j).collect();
                let lane: Vec<T> = at.iter().map(|&p| xs[p]).collect();
                let w = bits.map(|b| {
                    masked_kernels::bits::pack_bools(
                        &at.iter().map(|&p| b.get(p)).collect::<Vec<_>>(),
                    )
                });
                let mut out = vec![M::Output::default(); len];
                map.map(&lane, w.as_deref().map(|w| Bits::new(w, 0)), &mut out);
                for (k, &p) in at.iter().enumerate() {
                    want[p] = out[k];
                }
            }
        }
        (got, want)
    }

    /// [`column_maps_equal_each_lane_alone`]'s check of one map.
    struct EachColumn;

    impl masked_core::testing::MapCheck for EachColumn {
        fn check<T: Element, M: LaneMap<T>>(&mut self, map: &M, of: fn(f64) -> T, tol: (f64, f64)) {
            // rows past a chunk of columns (4096: two chunks, three tasks of rows each)
            for (shape, dim) in [
                (vec![300, 70], 0),
                (vec![3, 50, 130], 1),
                (vec![5000, 64], 0),
                (vec![40, 5000], 0),
            ] {
                let n: usize = shape.iter().product();
                let (len, inner) = (shape[dim], shape[dim + 1..].iter().product::<usize>());
                // each element's lane (a column of its block) and place in it
                let at = (0..n).map(|i| ((i / (len * inner)) * inner + i % inner, i / inner % len));
                let (xs, valid) = masked_core::testing::lane_inputs(at, of);
                let words = masked_kernels::bits::pack_bools(&valid);
                for bits in [None, Some(Bits::new(&words, 0))] {
                    let (got, want) = mapped_and_each_lane_alone(map, &xs, bits, &shape, dim);
                    let what = |_| format!("{shape:?} dim {dim} mask {}", bits.is_some());
                    masked_core::testing::assert_all_close(map, &got, &want, tol, what);
                }
            }
        }
    }

    /// The column forms of the softmax family and normalize (lanes down the columns of
    /// a block a word wide or more: statistics as column folds over tasks of rows, then
    /// each row mapped) equal the map run on each lane alone: within `tol` relative
    /// (their sums run in another order; f16 also within its smallest subnormal), the
    /// same where either is NaN or infinite.
    /// On values with ties, lanes holding a NaN, a +inf or a -inf, lanes with no valid
    /// element (the core's `testing::lane_inputs`), along dim 0 and a middle dim,
    /// lanes long enough to be cut into tasks, rows wider than a task's chunk of
    /// columns; f64, f32 and f16 (computed in f32, rounded a row at a time).
    #[test]
    fn column_maps_equal_each_lane_alone() {
        masked_core::testing::lane_maps(&mut EachColumn);
    }

    /// Values and a mask for `n` elements.
    fn lane_inputs<T: Element>(n: usize, of: impl Fn(f64) -> T) -> (Vec<T>, Vec<u64>) {
        let xs: Vec<T> = (0..n).map(|i| of(((i * 7919) % 13) as f64 - 6.0)).collect();
        let words: Vec<u64> = (0..n.div_ceil(64) as u64)
            .map(|i| 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i + 3))
            .collect();
        (xs, words)
    }

    /// `map_all` along every dim (tiles of neighbouring lanes, tasks over blocks) equals
    /// the map run on each lane gathered alone, with and without a mask, for inner
    /// sizes below, at and past a tile and lanes long enough to shrink the tile.
    #[test]
    fn map_along_any_dim_equals_each_lane_alone() {
        // f64 and f32: tiles of up to 32 and 64 lanes (four cache lines of a row)
        fn check<T: Element>(of: impl Fn(f64) -> T) {
            for shape in [
                vec![3, 37, 23],
                vec![2, 5, 16],
                vec![3, 4, 150],
                vec![4000, 3, 17],
                vec![65, 2, 33],
                vec![1, 2, 1],
            ] {
                let (xs, words) = lane_inputs(shape.iter().product(), &of);
                for bits in [None, Some(Bits::new(&words, 0))] {
                    for dim in 0..shape.len() {
                        assert_map_equals_each_lane_alone(&xs, bits, &shape, dim);
                    }
                }
            }
        }
        check::<f64>(|v| v);
        check::<f32>(|v| v as f32);
        check::<i32>(|v| v as i32);
    }

    /// An output past the size that writes the mapped lanes straight into its rows (32
    /// MiB of f64) maps as each lane alone, with a mask and without.
    #[test]
    fn map_along_a_leading_dim_of_a_large_array_equals_each_lane_alone() {
        let shape = [1024, 4096];
        let (xs, words) = lane_inputs::<f64>(shape.iter().product(), |v| v);
        for bits in [None, Some(Bits::new(&words, 0))] {
            assert_map_equals_each_lane_alone(&xs, bits, &shape, 0);
        }
    }
}
