//! The dense layout's gradient kernels: gather each lane's valid values and upstream
//! gradient, run the op's [`LaneGrad`], scatter the result to the valid positions (0
//! everywhere else). Lanes that are contiguous runs (a reduction over trailing dims, a
//! map along the last dim) and the blocks of a map along another dim run in parallel;
//! a reduction over leading or scattered dims groups its lanes' positions first.

use masked_core::grad::{GradScratch, LaneValues, Spread};
use masked_core::{Bits, Element, Float, LaneGrad, ReducePlan, Upstream};
use masked_kernels::bits::columns_bits;
use masked_kernels::pack::{compress_to, expand_to};
use masked_kernels::par;
use masked_kernels::run::{fill_run, tile_words};
use masked_kernels::transpose::{lane_stride, transpose};
use std::borrow::Cow;

/// Where a lane's upstream gradient (or saved forward output) comes from, unpacked.
#[derive(Clone, Copy)]
enum Src<'a, R> {
    /// Nothing (a saved output not given).
    Absent,
    /// One value for the whole lane.
    One(R),
    /// One value per position, aligned with the lane's values.
    Each(&'a [R]),
}

/// Per-task scratch: a lane's packed valid values, upstream, saved output and result,
/// their positions (for lanes that are not contiguous), and the `f64` lane scratch.
struct Scratch<T, R> {
    x: Vec<T>,
    g: Vec<R>,
    y: Vec<R>,
    o: Vec<R>,
    at: Vec<usize>,
    lane: GradScratch,
}

impl<T, R> Default for Scratch<T, R> {
    fn default() -> Self {
        Scratch {
            x: Vec::new(),
            g: Vec::new(),
            y: Vec::new(),
            o: Vec::new(),
            at: Vec::new(),
            lane: GradScratch::default(),
        }
    }
}

/// `src` packed by `bits` into `buf` (a lane-wide `Each`), or passed through.
fn packed<'a, R: Copy>(
    src: Src<'a, R>, bits: Option<Bits<'_>>, buf: &'a mut Vec<R>, zero: R,
) -> LaneValues<'a, R> {
    match (src, bits) {
        (Src::Absent, _) => LaneValues::Absent,
        (Src::One(v), _) => LaneValues::One(v),
        (Src::Each(v), None) => LaneValues::Each(v),
        (Src::Each(v), Some(b)) => {
            buf.resize(v.len(), zero);
            let n = compress_to(v, b, buf);
            LaneValues::Each(&buf[..n])
        }
    }
}

impl<T: Element> Scratch<T, T::Real> {
    /// A contiguous lane: `xs`, `out` (zeroed) and any `Each` source are the lane's
    /// positions in order, `bits` its validity (none: all valid). The valid values are
    /// packed with the mask (AVX-512 compress where the CPU has it), the gradient
    /// computed packed, and spread back with 0 at the invalid positions.
    fn contiguous<G: LaneGrad>(
        &mut self, grad: &G, xs: &[T], bits: Option<Bits<'_>>, g: Src<'_, T::Real>,
        saved: Src<'_, T::Real>, out: &mut [T::Real],
    ) {
        let zero = <T::Real as Element>::ZERO;
        if let Src::One(gv) = g {
            // one value at every valid element (a sum's, a mean's): written under the
            // mask, the lane's values not read
            let n = bits.map_or(xs.len(), |b| b.count_ones(xs.len()));
            if let Some(v) = grad.uniform(n.max(1), gv.to_f64()) {
                let v = <T::Real as Float>::from_f64(v);
                match bits {
                    Some(b) => fill_run(out, b, v, zero),
                    None => out.fill(v),
                }
                return;
            }
        }
        let saved = if grad.uses_output() {
            saved
        } else {
            Src::Absent
        };
        let Some(b) = bits else {
            let (g, y) = (
                packed(g, None, &mut self.g, zero),
                packed(saved, None, &mut self.y, zero),
            );
            return self.lane.lane(grad, xs, g, y, out);
        };
        self.x.resize(xs.len(), T::ZERO);
        let n = if matches!(saved, Src::Each(_)) && !grad.reads_input_with_output() {
            b.count_ones(xs.len()) // the values are not read: only their count
        } else {
            compress_to(xs, b, &mut self.x)
        };
        if n == 0 {
            // a fully masked lane: nothing of it reaches a gradient (written, since a
            // caller's buffer is not zeroed)
            out.fill(zero);
            return;
        }
        let gl = packed(g, bits, &mut self.g, zero);
        let yl = packed(saved, bits, &mut self.y, zero);
        if let (Src::Each(ya), Src::Each(ga), LaneValues::Each(yp), LaneValues::Each(gp)) =
            (saved, g, yl, gl)
        {
            // an op that sums over the packed lane and writes each position from its own
            // values (the softmax family): straight to `out`, no packed result to expand
            let spread = Spread {
                ys: ya,
                g: ga,
                bits: b,
            };
            if grad.typed_spread_from_output(yp, gp, spread, out) {
                return;
            }
        }
        // a reduction whose gradient is a function of each value and a few lane sums
        // (var, std): straight to `out` from the unpacked lane (its values were packed:
        // the op reads them)
        let packed_x = !matches!(saved, Src::Each(_)) || grad.reads_input_with_output();
        if packed_x && grad.typed_lane(&self.x[..n], Some((xs, b)), gl, yl, out) {
            return;
        }
        self.o.resize(xs.len(), zero);
        self.lane.lane(grad, &self.x[..n], gl, yl, &mut self.o[..n]);
        expand_to(&self.o[..n], b, zero, out);
    }

    /// A lane at scattered `positions` (flat, row-major order, relative to the region
    /// `xs`, `out` and any `Each` source start at); invalid ones are skipped.
    #[allow(clippy::too_many_arguments)]
    fn scattered<G: LaneGrad>(
        &mut self, grad: &G, positions: impl Iterator<Item = usize>, xs: &[T],
        valid: &impl Fn(usize) -> bool, g: Src<'_, T::Real>, saved: Src<'_, T::Real>,
        out: &mut [T::Real],
    ) {
        let saved = if grad.uses_output() {
            saved
        } else {
            Src::Absent
        };
        self.at.clear();
        self.at.extend(positions.filter(|&p| valid(p)));
        if self.at.is_empty() {
            return;
        }
        let gather = |src: Src<'_, T::Real>, buf: &mut Vec<T::Real>, at: &[usize]| {
            if let Src::Each(v) = src {
                buf.clear();
                buf.extend(at.iter().map(|&p| v[p]));
            }
        };
        self.x.clear();
        self.x.extend(self.at.iter().map(|&p| xs[p]));
        gather(g, &mut self.g, &self.at);
        gather(saved, &mut self.y, &self.at);
        let n = self.at.len();
        self.o.resize(n, <T::Real as Element>::ZERO);
        let (gl, yl) = (pick(g, &self.g), pick(saved, &self.y));
        self.lane.lane(grad, &self.x, gl, yl, &mut self.o[..n]);
        for (&p, &v) in self.at.iter().zip(&self.o) {
            out[p] = v;
        }
    }
}

/// The validity test of flat position `p` (relative to `base`).
fn validity(bits: Option<Bits<'_>>, base: usize) -> impl Fn(usize) -> bool + '_ {
    move |p| bits.is_none_or(|b| b.get(base + p))
}

/// `src` as a lane's packed values, `buf` holding them when it is per position.
fn pick<'a, R: Copy>(src: Src<'_, R>, buf: &'a [R]) -> LaneValues<'a, R> {
    match src {
        Src::Absent => LaneValues::Absent,
        Src::One(v) => LaneValues::One(v),
        Src::Each(_) => LaneValues::Each(buf),
    }
}

/// Positions `r` of `v` (one value per position; empty: absent).
fn each<R>(v: &[R], r: std::ops::Range<usize>) -> Src<'_, R> {
    if v.is_empty() {
        Src::Absent
    } else {
        Src::Each(&v[r])
    }
}

/// `v` as a lane's source when `has`, else absent.
fn each_or_absent<R>(has: bool, v: &[R]) -> Src<'_, R> {
    if has {
        Src::Each(v)
    } else {
        Src::Absent
    }
}

/// The lane's source in `v` (one value per lane; empty: absent).
fn one<R: Copy>(v: &[R], k: usize) -> Src<'_, R> {
    v.get(k).map_or(Src::Absent, |&r| Src::One(r))
}

/// The VJP of a reduction planned by `plan`: `g` holds the upstream gradient of every
/// output position in row-major order, `saved` the forward output likewise (or
/// nothing); `out` (the input's size; `zeroed` says whether it holds zeros already)
/// receives the gradient at every position.
#[allow(clippy::too_many_arguments)]
pub(crate) fn grad_reduce<T: Element, G: LaneGrad>(
    grad: &G, xs: &[T], bits: Option<Bits<'_>>, plan: &ReducePlan, g: &[T::Real],
    saved: &[T::Real], out: &mut [T::Real], zeroed: bool,
) {
    debug_assert_eq!(grad.upstream(), Upstream::PerLane);
    let len = plan.lane_len;
    if len == 0 || xs.is_empty() {
        return;
    }
    let zero = <T::Real as Element>::ZERO;
    // reduced dims (of size > 1) all after the kept ones: lane k is the k-th run
    let first = plan
        .reduced
        .iter()
        .zip(&plan.in_shape)
        .position(|(&r, &n)| r && n > 1);
    let trailing = first.is_none_or(|f| {
        plan.reduced[f..]
            .iter()
            .zip(&plan.in_shape[f..])
            .all(|(&r, &n)| r || n == 1)
    });
    if trailing {
        // blocks of whole lanes of about 2^14 elements
        let per = ((1 << 14) / len).max(1);
        par::chunks_mut(out, len * per, |c, ob| {
            let s = &mut Scratch::default();
            let xb = &xs[c * len * per..];
            for (i, (o, x)) in ob.chunks_mut(len).zip(xb.chunks(len)).enumerate() {
                let k = c * per + i;
                let b = bits.map(|b| b.offset(k * len));
                s.contiguous(grad, x, b, Src::One(g[k]), one(saved, k), o);
            }
        });
        return;
    }
    // the reduced dims (of size > 1) one run of dims, kept ones after them: lanes at a
    // stride, tiled (a reduction over dim 0 of a matrix, over the middle dims)
    let last = plan
        .reduced
        .iter()
        .zip(&plan.in_shape)
        .rposition(|(&r, &n)| r && n > 1);
    if let (Some(f), Some(e)) = (first, last)
        && (f..=e).all(|d| plan.reduced[d] || plan.in_shape[d] == 1)
    {
        let inner: usize = plan.in_shape[e + 1..].iter().product();
        strided_lanes(grad, xs, bits, (len, inner), PerLane::Yes, g, saved, out);
        return;
    }
    // general: the lane of each position (row-major over the kept dims), positions
    // grouped by lane in row-major order (a counting sort); only valid positions are
    // written
    if !zeroed {
        par::chunks_mut(out, 1 << 16, |_, o| o.fill(zero));
    }
    let lane_of = lane_ids(plan);
    let mut start = vec![0usize; plan.lanes + 1];
    for &l in &lane_of {
        start[l + 1] += 1;
    }
    for k in 0..plan.lanes {
        start[k + 1] += start[k];
    }
    let mut next = start.clone();
    let mut grouped = vec![0usize; lane_of.len()];
    for (p, &l) in lane_of.iter().enumerate() {
        grouped[next[l]] = p;
        next[l] += 1;
    }
    let valid = validity(bits, 0);
    let mut s = Scratch::default();
    for k in 0..plan.lanes {
        let at = grouped[start[k]..start[k + 1]].iter().copied();
        s.scattered(grad, at, xs, &valid, Src::One(g[k]), one(saved, k), out);
    }
}

/// The output position (row-major over the kept dims) of every input position.
fn lane_ids(plan: &ReducePlan) -> Vec<usize> {
    let shape = &plan.in_shape;
    // the stride of each input dim in the output (0 for a reduced dim)
    let mut stride = vec![0usize; shape.len()];
    let mut acc = 1;
    for d in (0..shape.len()).rev() {
        if !plan.reduced[d] {
            stride[d] = acc;
            acc *= shape[d];
        }
    }
    let n: usize = shape.iter().product();
    let mut ids = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    let mut lane = 0usize;
    for _ in 0..n {
        ids.push(lane);
        // odometer step
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            lane += stride[d];
            if idx[d] < shape[d] {
                break;
            }
            lane -= stride[d] * idx[d];
            idx[d] = 0;
        }
    }
    ids
}

/// The VJP of a map along dim `d` of `shape`: `g`, `saved` (or nothing) and `out` have
/// the input's shape (row-major); every position of `out` is written (0 where invalid).
#[allow(clippy::too_many_arguments)]
pub(crate) fn grad_map<T: Element, G: LaneGrad>(
    grad: &G, xs: &[T], bits: Option<Bits<'_>>, shape: &[usize], d: usize,
    g: &Periodic<'_, T::Real>, saved: &[T::Real], out: &mut [T::Real],
) {
    debug_assert_eq!(grad.upstream(), Upstream::PerElement);
    let n = shape[d];
    let inner: usize = shape[d + 1..].iter().product();
    let period = &g.period[..];
    if !grad.elementwise() && inner == 1 && n > 0 && period.len() % n == 0 {
        // lanes are runs, their upstream read out of the period (a whole upstream, or
        // the rows that an upstream broadcast over leading dims repeats: never copied
        // out to the input's size): blocks of whole lanes of about 2^14 elements
        let per = ((1 << 14) / n).max(1);
        par::chunks_mut(out, n * per, |c, ob| {
            let s = &mut Scratch::default();
            let xb = &xs[c * n * per..];
            for (i, (o, x)) in ob.chunks_mut(n).zip(xb.chunks(n)).enumerate() {
                let start = (c * per + i) * n;
                let r = start..start + n;
                let at = start % period.len();
                let b = bits.map(|b| b.offset(start));
                s.contiguous(grad, x, b, each(period, at..at + n), each(saved, r), o);
            }
        });
        return;
    }
    // each element's gradient from its own value and upstream (a unary op's): the whole
    // array as one run, every position written
    if grad.elementwise() && masked_core::grad::each_into(grad, xs, bits, &g.whole(), out) {
        return;
    }
    if n * inner == 0 || xs.is_empty() {
        return;
    }
    // lanes at a stride read the period in place where it is whole blocks, or divides a
    // row (each lane's upstream is then one value, repeated)
    let block = n * inner;
    if period.len().is_multiple_of(block) || inner.is_multiple_of(period.len()) {
        if let Some(b) = bits
            && statistic_rows::<T, G>(grad, b, (n, inner), period, saved, out)
        {
            return;
        }
        strided_lanes(grad, xs, bits, (n, inner), PerLane::No, period, saved, out);
    } else {
        let g = g.whole();
        strided_lanes(grad, xs, bits, (n, inner), PerLane::No, &g, saved, out);
    }
}

/// A map's upstream gradient in row-major order: `period` repeated to `len` values (all
/// of it once, or the period of an upstream broadcast over its leading dims:
/// the core's `gather::repeated_values`).
pub(crate) struct Periodic<'a, R: Clone> {
    /// The values of one period.
    period: Cow<'a, [R]>,
    /// The upstream's element count, a multiple of the period's.
    len: usize,
}

impl<'a, R: Element> Periodic<'a, R> {
    /// The upstream held whole.
    pub(crate) fn once(values: Cow<'a, [R]>) -> Self {
        let len = values.len();
        Periodic {
            period: values,
            len,
        }
    }

    /// The upstream `g` as a period where it is broadcast over its leading dims (torch's
    /// expanded upstream of `.sum()`), never copied out to its size; else its row-major
    /// values.
    pub(crate) fn of<S: ndarray::Data<Elem = R>, D: ndarray::Dimension>(
        g: &'a ndarray::ArrayBase<S, D>,
    ) -> Self {
        match masked_core::gather::repeated_values(g) {
            Some((period, times)) => Periodic {
                len: period.len() * times,
                period,
            },
            None => Periodic::once(masked_core::gather::row_major_values(g)),
        }
    }

    /// All `len` values: the period copied out in parallel where it is shorter (for the
    /// paths that read the upstream whole).
    pub(crate) fn whole(&self) -> Cow<'_, [R]> {
        let p = self.period.len();
        if p == self.len {
            return Cow::Borrowed(&self.period);
        }
        let mut v = masked_kernels::fresh_vec::<R>(self.len);
        // tasks of whole periods, of 2^15 values or more
        par::chunks_mut(&mut v, (1usize << 15).div_ceil(p) * p, |_, c| {
            for dst in c.chunks_mut(p) {
                dst.copy_from_slice(&self.period);
            }
        });
        Cow::Owned(v)
    }
}

/// [`strided_lanes`] for a gradient of one statistic a lane and a step a position
/// (`LaneGrad::row_statistic`: softmax, softmin) given the saved output, with a
/// mask, over rows of 64 positions or more: the statistics in tiles of lanes (the saved
/// output's and the upstream's lanes transposed out of their rows and packed under the
/// mask, as [`strided_lanes`] reads them), then every row of `out` written from its
/// rows of the saved output, the upstream, the mask and the statistics, rows in
/// parallel: no gradient lanes transposed back into rows and copied out (1024² softmax
/// along dim 0: 0.57 -> 0.4 ms). The same values bit for bit. `g` is the upstream's
/// period, as [`strided_lanes`] takes it. False (nothing written) where it does not
/// apply.
fn statistic_rows<T: Element, G: LaneGrad>(
    grad: &G, bits: Bits<'_>, (n, inner): (usize, usize), g: &[T::Real], saved: &[T::Real],
    out: &mut [T::Real],
) -> bool {
    const TILE: usize = 32;
    let block = n * inner;
    let Some(rs) = grad.row_statistic() else {
        return false;
    };
    if inner < 64 || block == 0 || saved.len() != out.len() || !grad.uses_output() {
        return false;
    }
    let (blocks, p, tiles) = (out.len() / block, g.len(), inner.div_ceil(TILE));
    let whole = p.is_multiple_of(block);
    let total = blocks * tiles;
    let mut stats = vec![0.0f64; blocks * inner];
    let per = total.div_ceil(4 * par::threads()).max(1);
    let st = par::Scatter::new(&mut stats);
    par::for_each(total.div_ceil(per), |task| {
        let zero = <T::Real as Element>::ZERO;
        let (sr, nw) = (lane_stride::<T::Real>(n), n.div_ceil(64));
        let mut ly = vec![zero; sr * TILE];
        let mut lg = vec![zero; if whole { sr * TILE } else { 0 }];
        let (mut py, mut pg) = (vec![zero; n], vec![zero; n]);
        let (mut rows, mut words) = (vec![0u64; n], vec![0u64; TILE * nw]);
        for t in task * per..((task + 1) * per).min(total) {
            let (b, i0) = (t / tiles, (t % tiles) * TILE);
            let (w, base) = (TILE.min(inner - i0), b * block + i0);
            tile_words(bits, |k| base + k * inner, &mut rows);
            columns_bits(&rows, w, &mut words);
            transpose(&saved[base..], (n, w, inner), &mut ly, sr);
            if whole {
                transpose(&g[base % p..], (n, w, inner), &mut lg, sr);
            }
            // SAFETY: the statistics of this tile's lanes: no other task writes them
            let s = unsafe { st.part(b * inner + i0, b * inner + i0 + w) };
            for (l, sl) in s.iter_mut().enumerate() {
                let lb = Bits::new(&words[l * nw..l * nw + nw], 0);
                let m = compress_to(&ly[l * sr..l * sr + n], lb, &mut py);
                if whole {
                    compress_to(&lg[l * sr..l * sr + n], lb, &mut pg);
                } else {
                    // an upstream dividing a row: one value a lane
                    pg[..m].fill(g[(i0 + l) % p]);
                }
                *sl = rs.lane(&py[..m], &pg[..m]);
            }
        }
    });
    // the rows, in tasks of about 2^15 positions; an upstream that divides a row
    // repeats one row, whose first half of the step serves a whole block's rows
    let per = ((1usize << 15) / inner).max(1);
    let stats = &stats[..];
    par::chunks_mut(out, inner * per, |c, oc| {
        let (mut d, mut held) = (Vec::with_capacity(inner), None);
        let repeated: Vec<T::Real> = if whole {
            vec![]
        } else {
            (0..inner).map(|j| g[j % p]).collect()
        };
        for (k, o) in oc.chunks_mut(inner).enumerate() {
            let start = (c * per + k) * inner;
            let b = start / block;
            let s = &stats[b * inner..b * inner + inner];
            if whole {
                rs.upstream(s, &g[start % p..start % p + inner], &mut d);
            } else if held != Some(b) {
                rs.upstream(s, &repeated, &mut d);
                held = Some(b);
            }
            rs.step(
                &d,
                &saved[start..start + inner],
                Some(bits.offset(start)),
                o,
            );
        }
    });
    true
}

/// Where the upstream gradient and the saved output of [`strided_lanes`] are held.
#[derive(Clone, Copy, PartialEq)]
enum PerLane {
    /// One value per position (a map's).
    No,
    /// One value per lane, lanes numbered row-major over the kept dims (a reduction's).
    Yes,
}

/// The VJP over lanes of `n` elements at stride `inner` (lane `b * inner + i` holds the
/// positions `b * n * inner + i + k * inner`, `k < n`), every position of `out`
/// written: tiles of `TILE` neighbouring lanes (rows of a large block lie on different
/// pages: a page walk per row serves the tile; 16 lanes were 1.15x slower, 64 no
/// faster) transposed straight from the rows into runs, one a lane (a column read out
/// one value a row was a scalar store an element), the lanes' gradients transposed
/// back and the tile copied back by rows; the tiles in parallel. The forward
/// normalizations' kernels (`transpose`, `tile_words`, `columns_bits`). A lone
/// 4096 x 4096 block was one serial task of strided gathers (40x the last dim's time),
/// and a reduction over dim 0 grouped its positions by a sort (100x).
///
/// A map's upstream `g` (`PerLane::No`) is a period of the row-major upstream: whole
/// blocks (`n * inner` values, or a multiple: the whole upstream among them) whose
/// tiles are transposed straight out of it, like the saved output's, or a divisor of a
/// row, each lane's upstream one value. A reduction's (`PerLane::Yes`) has a value a
/// lane.
#[allow(clippy::too_many_arguments)]
fn strided_lanes<T: Element, G: LaneGrad>(
    grad: &G, xs: &[T], bits: Option<Bits<'_>>, (n, inner): (usize, usize), per_lane: PerLane,
    g: &[T::Real], saved: &[T::Real], out: &mut [T::Real],
) {
    let block = n * inner;
    if per_lane == PerLane::Yes && uniform_rows(grad, xs, bits, (n, inner), g, out) {
        return;
    }
    const TILE: usize = 32;
    let tiles = inner.div_ceil(TILE);
    let total = (xs.len() / block) * tiles;
    // tasks of consecutive tiles (a few per thread), each with its scratch allocated once
    let per = total.div_ceil(4 * par::threads()).max(1);
    let dst = par::Scatter::new(out);
    // per-position upstream and saved output, read out of tiles of their own
    let (has_g, has_y) = (
        per_lane == PerLane::No && !g.is_empty(),
        per_lane == PerLane::No && !saved.is_empty(),
    );
    // a map's gradient from its saved output alone (the softmax family): the values are
    // not read, only the mask's words (`Scratch::contiguous` counts them)
    let skip_x = has_y && grad.uses_output() && !grad.reads_input_with_output();
    par::for_each(total.div_ceil(per), |task| {
        let zero = <T::Real as Element>::ZERO;
        // row-major tiles (a contiguous copy a row, the forward's kernels) transposed
        // into runs, one a lane; the lanes' gradients, runs too, transposed back
        let mut back = vec![];
        let (mut lx, mut lg, mut ly, mut lo) = (vec![], vec![], vec![], vec![]);
        // the values' stand-in where they are not read
        let vx = vec![T::ZERO; if skip_x { n } else { 0 }];
        // the lanes' runs a cache line apart where `n` values are a multiple of 256 bytes
        let (sx, sr) = (lane_stride::<T>(n), lane_stride::<T::Real>(n));
        let mut rows = vec![u64::MAX; if bits.is_some() { n } else { 0 }];
        let nw = n.div_ceil(64);
        let mut words = vec![0u64; TILE * nw];
        let s = &mut Scratch::default();
        for t in task * per..((task + 1) * per).min(total) {
            let (b, i0) = (t / tiles, (t % tiles) * TILE);
            let (w, base) = (TILE.min(inner - i0), b * block + i0);
            let at = |k: usize| base + k * inner;
            match (skip_x, bits) {
                (true, Some(bm)) => tile_words(bm, at, &mut rows),
                (true, None) => {}
                (false, _) => {
                    // straight from the rows (a copy of each row's part first cost
                    // a memcpy call a row)
                    lx.resize(sx * w, T::ZERO);
                    transpose(&xs[base..], (n, w, inner), &mut lx, sx);
                    if let Some(bm) = bits {
                        tile_words(bm, at, &mut rows);
                    }
                }
            }
            if bits.is_some() {
                columns_bits(&rows, w, &mut words);
            }
            // the upstream's and saved output's lanes, transposed straight out of their
            // rows (no mask to read beside them: no row copies first)
            if has_g {
                lg.resize(sr * w, zero);
                let p = g.len();
                if p.is_multiple_of(block) {
                    transpose(&g[base % p..], (n, w, inner), &mut lg, sr);
                } else {
                    for (l, lane) in lg.chunks_mut(sr).take(w).enumerate() {
                        lane[..n].fill(g[(i0 + l) % p]);
                    }
                }
            }
            if has_y {
                ly.resize(sr * w, zero);
                transpose(&saved[base..], (n, w, inner), &mut ly, sr);
            }
            lo.resize(sr * w, zero);
            back.resize(n * w, zero);
            for l in 0..w {
                let lane = l * sr..l * sr + n;
                let xl = if skip_x {
                    &vx[..]
                } else {
                    &lx[l * sx..l * sx + n]
                };
                let lb = bits.map(|_| Bits::new(&words[l * nw..l * nw + nw], 0));
                let (gl, yl) = match per_lane {
                    PerLane::No => {
                        // (empty where absent)
                        let (gs, ys) = (lg.get(lane.clone()), ly.get(lane.clone()));
                        (
                            each_or_absent(has_g, gs.unwrap_or_default()),
                            each_or_absent(has_y, ys.unwrap_or_default()),
                        )
                    }
                    PerLane::Yes => {
                        let k = b * inner + i0 + l;
                        (Src::One(g[k]), one(saved, k))
                    }
                };
                s.contiguous(grad, xl, lb, gl, yl, &mut lo[lane]);
            }
            transpose(&lo, (w, n, sr), &mut back, w);
            for k in 0..n {
                // SAFETY: row part k of this tile: positions no other task writes
                let part = unsafe { dst.part(at(k), at(k) + w) };
                part.copy_from_slice(&back[k * w..k * w + w]);
            }
        }
    });
}

/// [`strided_lanes`] for a reduction whose gradient is one value a lane
/// ([`LaneGrad::uniform`]: sum, mean): each lane's valid count from the forward count's
/// column kernel (when there is a mask), its value, then every row of `out` written from
/// the row of lane values under its mask, rows in parallel: two streaming passes rather
/// than tiles of lanes (4096² over dim 0: see docs/benchmarks.md). False (nothing
/// written) for any other gradient.
fn uniform_rows<T: Element, G: LaneGrad>(
    grad: &G, xs: &[T], bits: Option<Bits<'_>>, (n, inner): (usize, usize), g: &[T::Real],
    out: &mut [T::Real],
) -> bool {
    if grad.uniform(1, 0.0).is_none() {
        return false;
    }
    let block = n * inner;
    let mut counts = vec![n as i64; g.len()];
    if let Some(b) = bits {
        counts.fill(0);
        // column ranges in parallel, each a column kernel over the block's rows
        const COLS: usize = 1 << 10;
        par::chunks_mut(&mut counts, COLS, |c, st| {
            let (blk, i0) = ((c * COLS) / inner, (c * COLS) % inner);
            let mut start = 0;
            let mut at = blk * block + i0;
            // a chunk may cross into the next block's lanes: a kernel call per block
            while start < st.len() {
                let w = (inner - (at % block)).min(st.len() - start);
                let o = at;
                masked_core::Fold::<T>::push_columns(
                    &masked_core::fold::Count,
                    &mut st[start..start + w],
                    &xs[o..],
                    inner,
                    n,
                    Some(b.offset(o)),
                    0,
                );
                start += w;
                at = (at / block + 1) * block;
            }
        });
    }
    let mut vals = Vec::with_capacity(g.len());
    for (&c, &gv) in counts.iter().zip(g) {
        match grad.uniform((c as usize).max(1), gv.to_f64()) {
            Some(v) => vals.push(<T::Real as Float>::from_f64(v)),
            None => return false,
        }
    }
    let zero = <T::Real as Element>::ZERO;
    // rows of about 2^14 elements a task
    let rows = ((1 << 14) / inner).max(1);
    par::chunks_mut(out, rows * inner, |c, o| {
        for (j, row) in o.chunks_mut(inner).enumerate() {
            let r = c * rows + j;
            let v = &vals[(r / n) * inner..][..inner];
            match bits {
                Some(b) => masked_kernels::run::map_run(
                    v,
                    Some(b.offset(r * inner)),
                    row,
                    #[inline(always)]
                    move |x, valid| if valid { x } else { zero },
                ),
                None => row.copy_from_slice(v),
            }
        }
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use masked_core::Dims;

    #[test]
    fn lane_ids_follow_the_kept_dims() {
        // shape [2, 3, 2], reducing dim 1: output [2, 2]
        let plan = ReducePlan::new(&[2, 3, 2], &Dims::from(1), false).unwrap();
        let ids = lane_ids(&plan);
        assert_eq!(ids, [0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3]);
        // reducing dims 0 and 2: output [3]
        let plan = ReducePlan::new(&[2, 3, 2], &Dims::from([0isize, 2]), false).unwrap();
        assert_eq!(lane_ids(&plan), [0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]);
    }
}
