//! The monoid ops, each written once as a [`Fold`] value.
//!
//! | op | state | output | fully masked lane |
//! |---|---|---|---|
//! | [`Sum`] | `T::Total` (f64 / i64) | `T::Wide` | 0 |
//! | [`Prod`] | `T::Total` | `T::Wide` | 1 |
//! | [`AMax`] / [`AMin`] | `T` | `T` | `LOWEST` / `HIGHEST` (∓inf, integer MIN / MAX) |
//! | [`Ptp`] | `(T, T)` | `T::Wide` | 0 |
//! | [`ArgMax`] / [`ArgMin`] | `(T, i64)` | `i64` | 0 |
//! | [`Mean`] | `(T::Total, i64)` | `T::Real` | NaN |
//! | [`Count`] | `i64` | `i64` | 0 (count is valid everywhere) |

use crate::element::{Acc, CalcOf, Element, Float};
use crate::fold::Fold;
pub use crate::fold::{AMax, AMin, ArgMax, ArgMin, Count, Mean, Prod, Ptp, Sum};
use crate::wire::Num;
use masked_kernels::bits::count_columns;
use masked_kernels::pack::{packed_blocks, packs_fast};
use masked_kernels::run::{
    first_match, fold_columns, fold_pair_run, fold_run, fold_run_within, Lanes,
};
use masked_kernels::{Bits, BLOCK};

/// Runs `f` on consecutive blocks of at most the kernels' `BLOCK` elements.
#[inline]
pub(crate) fn blocks<T>(
    xs: &[T], bits: Option<Bits<'_>>, idx0: i64, mut f: impl FnMut(&[T], Option<Bits<'_>>, i64),
) {
    let mut off = 0;
    while off < xs.len() {
        let end = (off + BLOCK).min(xs.len());
        f(
            &xs[off..end],
            bits.map(|b| b.offset(off)),
            idx0 + off as i64,
        );
        off = end;
    }
}

/// [`blocks`] over two runs of one length at once (a fused fold's two operands).
#[inline]
pub(crate) fn pair_blocks<A, B>(
    xs: &[A], ys: &[B], bits: Option<Bits<'_>>, idx0: i64,
    mut f: impl FnMut(&[A], &[B], Option<Bits<'_>>, i64),
) {
    let n = xs.len().min(ys.len());
    let mut off = 0;
    while off < n {
        let end = (off + BLOCK).min(n);
        f(
            &xs[off..end],
            &ys[off..end],
            bits.map(|b| b.offset(off)),
            idx0 + off as i64,
        );
        off = end;
    }
}

/// [`blocks`] over `xs[..n]` as the values' [`Element::Unpacked`] type: the slice
/// itself for every type but the halves, which widen each block into an L1-resident
/// `f32` buffer first (one conversion instruction per 16 values where the CPU has it),
/// so their sums run the `f32` kernel instead of converting inside it. `xs[n..]` is
/// readable ([`Fold::push_run_within`]): `f` gets each block's values from its start to
/// the end of `xs`, and the block's length (the widened halves: their buffer alone).
#[inline]
pub(crate) fn unpacked_blocks_within<T: Element>(
    xs: &[T], n: usize, bits: Option<Bits<'_>>, idx0: i64,
    mut f: impl FnMut(&[T::Unpacked], usize, Option<Bits<'_>>, i64),
) {
    match T::as_unpacked(xs) {
        Some(u) => {
            let mut off = 0;
            while off < n {
                let end = (off + BLOCK).min(n);
                f(
                    &u[off..],
                    end - off,
                    bits.map(|b| b.offset(off)),
                    idx0 + off as i64,
                );
                off = end;
            }
        }
        None => widened_blocks::<T>(&xs[..n], bits, idx0, &mut |b, m, i| f(b, b.len(), m, i)),
    }
}

/// The widening half of [`unpacked_blocks_within`], out of line: its block buffer (16 KiB of
/// stack) would otherwise sit in the frame of every call, and a frame over a page costs
/// a stack probe per call (measured: 33% on COO sums of one-entry lanes).
#[inline(never)]
fn widened_blocks<T: Element>(
    xs: &[T], bits: Option<Bits<'_>>, idx0: i64,
    f: &mut impl FnMut(&[T::Unpacked], Option<Bits<'_>>, i64),
) {
    // uninitialised: `unpack` writes every element it hands back
    let mut raw = [std::mem::MaybeUninit::<T::Unpacked>::uninit(); BLOCK];
    blocks(xs, bits, idx0, |b, m, i| {
        let u = T::unpack(b, &mut raw[..b.len()]);
        f(u, m, i);
    });
}

/// Runs `f` on the valid values of `xs` in blocks, for ops whose per-element work is
/// worth skipping for masked-out elements and that ignore positions: the packed valid
/// values of each block when packing is fast on this CPU ([`packed_blocks`], then
/// unmasked, positions dropped), else the masked blocks of [`blocks`].
#[inline]
pub(crate) fn valid_blocks<T: Copy>(
    xs: &[T], bits: Option<Bits<'_>>, idx0: i64, mut f: impl FnMut(&[T], Option<Bits<'_>>, i64),
) {
    if bits.is_some() && packs_fast::<T>() {
        packed_blocks(xs, bits, |p| f(p, None, 0));
    } else {
        blocks(xs, bits, idx0, f);
    }
}

/// Rows per block of a column sweep: each block folds into vector accumulators of the
/// lane type, then into the states (the accuracy argument of the kernels' `BLOCK`, per
/// column).
pub const COL_ROWS: usize = 256;

/// The column sweep of an op with lane monoid `L`: blocks of [`COL_ROWS`] rows fold into
/// a scratch row of `L` accumulators, which `into` then merges into the states.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn columns_via<T: Copy, L: Lanes<T>, S>(
    l: &L, states: &mut [S], xs: &[T], stride: usize, nrows: usize, bits: Option<Bits<'_>>,
    idx0: i64, into: impl Fn(&mut S, L::A),
) {
    let mut acc = vec![l.id(); states.len()];
    let mut r0 = 0;
    while r0 < nrows {
        let n = COL_ROWS.min(nrows - r0);
        acc.fill(l.id());
        let off = r0 * stride;
        fold_columns(
            l,
            &mut acc,
            &xs[off..],
            stride,
            n,
            bits.map(|b| b.offset(off)),
            idx0 + r0 as i64,
        );
        for (s, &a) in states.iter_mut().zip(&acc) {
            into(s, a);
        }
        r0 += n;
    }
}

/// Adds each column's number of valid elements over `nrows` rows (`shape`: the rows'
/// stride and count) to its state: the bit-sliced [`count_columns`], or `nrows` each
/// without a mask.
pub(crate) fn column_counts<S>(
    states: &mut [S], shape: (usize, usize), bits: Option<Bits<'_>>, into: impl Fn(&mut S, i64),
) {
    let Some(b) = bits else {
        return states.iter_mut().for_each(|s| into(s, shape.1 as i64));
    };
    let mut counts = vec![0i64; states.len()];
    count_columns(b, shape, &mut counts);
    for (s, &n) in states.iter_mut().zip(&counts) {
        into(s, n);
    }
}

/// Number of valid elements in a run.
#[inline]
pub(crate) fn valid_count(len: usize, bits: Option<Bits<'_>>) -> i64 {
    bits.map_or(len, |b| b.count_ones(len)) as i64
}

// ---------------------------------------------------------------- sum

/// Lane monoid of [`Sum`].
#[derive(Debug)]
pub struct SumLanes;
impl<T: Element> Lanes<T> for SumLanes {
    type A = T::Lane;
    #[inline(always)]
    fn id(&self) -> T::Lane {
        <T::Lane as Acc>::ZERO
    }
    #[inline(always)]
    fn lift(&self, x: T, _: i64) -> T::Lane {
        x.to_lane()
    }
    #[inline(always)]
    fn comb(&self, a: T::Lane, b: T::Lane) -> T::Lane {
        a.add(b)
    }
}

impl<T: Element> Fold<T> for Sum {
    crate::fold::listed!(fold T, Sum, "sum", order_free);
    type State = Num<T::Total>;
    type Output = T::Wide;
    #[inline]
    fn identity(&self) -> Num<T::Total> {
        Num(<T::Total as Acc>::ZERO)
    }
    #[inline]
    fn push(&self, s: &mut Num<T::Total>, x: T, _: i64) {
        s.0 = s.0.add(x.to_total());
    }
    #[inline]
    fn merge(&self, s: &mut Num<T::Total>, o: Num<T::Total>) {
        s.0 = s.0.add(o.0);
    }
    #[inline]
    fn finish(&self, s: &Num<T::Total>) -> T::Wide {
        T::total_to_wide(s.0)
    }
    #[inline]
    fn push_run(&self, s: &mut Num<T::Total>, xs: &[T], bits: Option<Bits<'_>>, idx0: i64) {
        self.push_run_within(s, xs, xs.len(), bits, idx0);
    }
    #[inline]
    fn push_run_within(
        &self, s: &mut Num<T::Total>, xs: &[T], n: usize, bits: Option<Bits<'_>>, idx0: i64,
    ) {
        unpacked_blocks_within(xs, n, bits, idx0, |b, n, m, i| {
            s.0 =
                s.0.add(T::lane_to_total(fold_run_within(&SumLanes, b, n, m, i)));
        });
    }
    // the same blocks and lanes as `push_run` (the halves' lanes read the values as the
    // unpacked kernel does, exactly)
    #[inline]
    fn push_pair_run<A: Copy, B: Copy, Z: Fn(A, B) -> T + Copy>(
        &self, s: &mut Num<T::Total>, xs: &[A], ys: &[B], f: Z, bits: Option<Bits<'_>>, idx0: i64,
    ) -> bool {
        pair_blocks(xs, ys, bits, idx0, |bx, by, m, i| {
            s.0 =
                s.0.add(T::lane_to_total(fold_pair_run(&SumLanes, bx, by, f, m, i)));
        });
        true
    }
    fn push_columns(
        &self, states: &mut [Num<T::Total>], xs: &[T], stride: usize, nrows: usize,
        bits: Option<Bits<'_>>, idx0: i64,
    ) {
        columns_via(&SumLanes, states, xs, stride, nrows, bits, idx0, |s, a| {
            s.0 = s.0.add(T::lane_to_total(a))
        });
    }
}

// ---------------------------------------------------------------- prod

/// Lane monoid of [`Prod`].
#[derive(Debug)]
pub struct ProdLanes;
impl<T: Element> Lanes<T> for ProdLanes {
    type A = T::Total;
    #[inline(always)]
    fn id(&self) -> T::Total {
        <T::Total as Acc>::ONE
    }
    #[inline(always)]
    fn lift(&self, x: T, _: i64) -> T::Total {
        x.to_total()
    }
    #[inline(always)]
    fn comb(&self, a: T::Total, b: T::Total) -> T::Total {
        a.mul(b)
    }
}

impl<T: Element> Fold<T> for Prod {
    crate::fold::listed!(fold T, Prod, "prod", order_free);
    type State = Num<T::Total>;
    type Output = T::Wide;
    #[inline]
    fn identity(&self) -> Num<T::Total> {
        Num(<T::Total as Acc>::ONE)
    }
    #[inline]
    fn push(&self, s: &mut Num<T::Total>, x: T, _: i64) {
        s.0 = s.0.mul(x.to_total());
    }
    #[inline]
    fn merge(&self, s: &mut Num<T::Total>, o: Num<T::Total>) {
        s.0 = s.0.mul(o.0);
    }
    #[inline]
    fn finish(&self, s: &Num<T::Total>) -> T::Wide {
        T::total_to_wide(s.0)
    }
    #[inline]
    fn push_run(&self, s: &mut Num<T::Total>, xs: &[T], bits: Option<Bits<'_>>, idx0: i64) {
        // per block, so that a run's product is its blocks' in order (the Fold law)
        blocks(xs, bits, idx0, |b, m, i| {
            s.0 = s.0.mul(fold_run(&ProdLanes, b, m, i));
        });
    }
    fn push_columns(
        &self, states: &mut [Num<T::Total>], xs: &[T], stride: usize, nrows: usize,
        bits: Option<Bits<'_>>, idx0: i64,
    ) {
        columns_via(&ProdLanes, states, xs, stride, nrows, bits, idx0, |s, a| {
            s.0 = s.0.mul(a)
        });
    }
}

// ---------------------------------------------------------------- amax / amin

/// NaN-propagating maximum: a NaN operand wins.
#[inline(always)]
pub(crate) fn max_nan<T: Element>(a: T, b: T) -> T {
    // `|` not `||`: no control flow, so the vector kernel stays a compare and a blend
    if (b > a) | b.is_nan() {
        b
    } else {
        a
    }
}
/// NaN-propagating minimum: a NaN operand wins.
#[inline(always)]
pub(crate) fn min_nan<T: Element>(a: T, b: T) -> T {
    if (b < a) | b.is_nan() {
        b
    } else {
        a
    }
}

/// An extremum's lanes ([`AMaxLanes`], [`AMinLanes`]) on values compared in their
/// compute type ([`CalcOf`]: `f32` for the halves), widened inside the kernel by the
/// branch-free conversion, which vectorises.
pub(crate) struct InCalc<L>(pub(crate) L);
impl<T: Element, L: Lanes<CalcOf<T>, A = CalcOf<T>>> Lanes<T> for InCalc<L> {
    type A = CalcOf<T>;
    const ORDER_FREE: bool = L::ORDER_FREE;
    #[inline(always)]
    fn id(&self) -> CalcOf<T> {
        self.0.id()
    }
    #[inline(always)]
    fn lift(&self, x: T, _: i64) -> CalcOf<T> {
        x.calc()
    }
    #[inline(always)]
    fn comb(&self, a: CalcOf<T>, b: CalcOf<T>) -> CalcOf<T> {
        self.0.comb(a, b)
    }
}

/// The extremum of `lanes` ([`AMaxLanes`] or [`AMinLanes`]) over the valid values of
/// `xs[..n]` (`xs[n..]` readable, as [`fold_run_within`]): one of those values, or the
/// identity. The types that compare widened ([`Element::COMPARES_WIDENED`]: the halves,
/// whose own comparisons are software, one value at a time: 18x the `f32` time on CSR
/// rows) are compared as `f32`, exactly, and the result is the same value back.
#[inline(always)]
pub(crate) fn extremum_within<T: Element, L>(
    lanes: L, xs: &[T], n: usize, bits: Option<Bits<'_>>, idx0: i64,
) -> T
where
    L: Lanes<T, A = T> + Lanes<CalcOf<T>, A = CalcOf<T>>,
{
    if T::COMPARES_WIDENED {
        let c = fold_run_within(&InCalc(lanes), xs, n, bits, idx0);
        T::from_f64_lossy(c.to_f64())
    } else {
        fold_run_within(&lanes, xs, n, bits, idx0)
    }
}

/// [`extremum_within`] over the whole of `xs`.
#[inline(always)]
pub(crate) fn extremum<T: Element, L>(lanes: L, xs: &[T], bits: Option<Bits<'_>>, idx0: i64) -> T
where
    L: Lanes<T, A = T> + Lanes<CalcOf<T>, A = CalcOf<T>>,
{
    extremum_within(lanes, xs, xs.len(), bits, idx0)
}

macro_rules! extreme_op {
    ($op:ident, $lanes:ident, $name:literal, $id:ident, $f:ident) => {
        #[doc = concat!("Lane monoid of [`", stringify!($op), "`].")]
        #[derive(Debug)]
        pub struct $lanes;
        impl<T: Element> Lanes<T> for $lanes {
            type A = T;
            // a NaN wins from anywhere, else the extreme value (the sign of a zero
            // tying with its negation, a NaN's payload: whichever the order meets)
            const ORDER_FREE: bool = true;
            #[inline(always)]
            fn id(&self) -> T {
                T::$id
            }
            #[inline(always)]
            fn lift(&self, x: T, _: i64) -> T {
                x
            }
            #[inline(always)]
            fn comb(&self, a: T, b: T) -> T {
                $f(a, b)
            }
        }

        impl<T: Element> Fold<T> for $op {
            crate::fold::listed!(fold T, $op, $name, order_free);
            type State = Num<T>;
            type Output = T;
            #[inline]
            fn identity(&self) -> Num<T> {
                Num(T::$id)
            }
            #[inline]
            fn push(&self, s: &mut Num<T>, x: T, _: i64) {
                s.0 = $f(s.0, x);
            }
            #[inline]
            fn merge(&self, s: &mut Num<T>, o: Num<T>) {
                s.0 = $f(s.0, o.0);
            }
            #[inline]
            fn finish(&self, s: &Num<T>) -> T {
                s.0
            }
            #[inline]
            fn push_run(&self, s: &mut Num<T>, xs: &[T], bits: Option<Bits<'_>>, idx0: i64) {
                s.0 = $f(s.0, extremum($lanes, xs, bits, idx0));
            }
            #[inline]
            fn push_run_within(
                &self,
                s: &mut Num<T>,
                xs: &[T],
                n: usize,
                bits: Option<Bits<'_>>,
                idx0: i64,
            ) {
                // masked runs only: unmasked, the whole-vector tail measured 10% slower
                // than the conditional loads here (CSR rows of 100: the tree then
                // reloads the accumulators in pieces, a store-forwarding stall)
                let xs = if bits.is_some() { xs } else { &xs[..n] };
                s.0 = $f(s.0, extremum_within($lanes, xs, n, bits, idx0));
            }
            fn push_columns(
                &self,
                states: &mut [Num<T>],
                xs: &[T],
                stride: usize,
                nrows: usize,
                bits: Option<Bits<'_>>,
                idx0: i64,
            ) {
                columns_via(&$lanes, states, xs, stride, nrows, bits, idx0, |s, a| {
                    s.0 = $f(s.0, a)
                });
            }
        }
    };
}

extreme_op!(AMax, AMaxLanes, "amax", LOWEST, max_nan);
extreme_op!(AMin, AMinLanes, "amin", HIGHEST, min_nan);

// ---------------------------------------------------------------- ptp

impl<T: Element> Fold<T> for Ptp {
    crate::fold::listed!(fold T, Ptp, "ptp", order_free);
    type State = (Num<T>, Num<T>);
    type Output = T::Wide;
    #[inline]
    fn identity(&self) -> (Num<T>, Num<T>) {
        (Num(T::LOWEST), Num(T::HIGHEST))
    }
    #[inline]
    fn push(&self, s: &mut (Num<T>, Num<T>), x: T, _: i64) {
        *s = (Num(max_nan(s.0 .0, x)), Num(min_nan(s.1 .0, x)));
    }
    #[inline]
    fn merge(&self, s: &mut (Num<T>, Num<T>), o: (Num<T>, Num<T>)) {
        *s = (Num(max_nan(s.0 .0, o.0 .0)), Num(min_nan(s.1 .0, o.1 .0)));
    }
    #[inline]
    fn finish(&self, s: &(Num<T>, Num<T>)) -> T::Wide {
        // an empty lane still holds the identity (LOWEST, HIGHEST): no element at all
        if s.0 .0 < s.1 .0 {
            return T::total_to_wide(<T::Total as Acc>::ZERO);
        }
        T::total_to_wide(s.0 .0.to_total().sub(s.1 .0.to_total()))
    }
    /// Two vectorised passes over the (cache-resident) run: the maximum and the minimum.
    #[inline]
    fn push_run(&self, s: &mut (Num<T>, Num<T>), xs: &[T], bits: Option<Bits<'_>>, idx0: i64) {
        let hi = extremum(AMaxLanes, xs, bits, idx0);
        let lo = extremum(AMinLanes, xs, bits, idx0);
        self.merge(s, (Num(hi), Num(lo)));
    }
    fn push_columns(
        &self, states: &mut [(Num<T>, Num<T>)], xs: &[T], stride: usize, nrows: usize,
        bits: Option<Bits<'_>>, idx0: i64,
    ) {
        columns_via(&AMaxLanes, states, xs, stride, nrows, bits, idx0, |s, a| {
            s.0 .0 = max_nan(s.0 .0, a)
        });
        columns_via(&AMinLanes, states, xs, stride, nrows, bits, idx0, |s, a| {
            s.1 .0 = min_nan(s.1 .0, a)
        });
    }
}

// ---------------------------------------------------------------- argmax / argmin

/// Index sentinel of an empty arg state.
const NO_INDEX: i64 = i64::MAX;

/// The better of two `(value, index)` candidates: a NaN beats any number, the first NaN
/// beats later ones; otherwise the value `better` prefers, ties to the smaller index.
/// Written with `&`/`|` on bools and one select, so the vector kernel stays branch-free.
#[inline(always)]
fn arg_pick<T: Element>(a: (T, i64), b: (T, i64), better: impl Fn(T, T) -> bool) -> (T, i64) {
    let (an, bn) = (a.0.is_nan(), b.0.is_nan());
    let earlier = b.1 < a.1;
    let take_b = (an & bn & earlier)
        | (!an & bn)
        | (!an & !bn & (better(b.0, a.0) | ((b.0 == a.0) & earlier)));
    if take_b {
        b
    } else {
        a
    }
}

/// [`arg_pick`] into a state: the state's candidate against `c`.
#[inline(always)]
fn arg_step<T: Element>(s: &mut (Num<T>, i64), c: (T, i64), better: impl Fn(T, T) -> bool) {
    let (v, i) = arg_pick((s.0 .0, s.1), c, better);
    *s = (Num(v), i);
}

/// Where the first valid element holding the extremum of `lanes` ([`AMaxLanes`],
/// [`AMinLanes`]) over `xs` is (the first NaN where there is one): two vectorised passes
/// over the (cache-resident) run, the extreme value, then its first position. `None`
/// for a run without a valid element.
#[inline(always)]
fn first_extremum<T: Element, L>(lanes: L, xs: &[T], bits: Option<Bits<'_>>) -> Option<usize>
where
    L: Lanes<T, A = T> + Lanes<CalcOf<T>, A = CalcOf<T>>,
{
    let best = extremum(lanes, xs, bits, 0);
    if best.is_nan() {
        first_match(
            xs,
            bits,
            #[inline(always)]
            move |x: T| x.is_nan(),
        )
    } else if T::COMPARES_WIDENED {
        // the halves compared as f32, as `extremum` does
        let b = best.calc();
        first_match(
            xs,
            bits,
            #[inline(always)]
            move |x: T| x.calc() == b,
        )
    } else {
        first_match(
            xs,
            bits,
            #[inline(always)]
            move |x: T| x == best,
        )
    }
}

/// The column sweep of argmax / argmin: row by row, each valid element against its
/// column's best so far (a NaN beats any number and stays; otherwise the value `better`
/// prefers; a later row never wins a tie), the best values and their rows in two scratch
/// rows, then merged into the states. Branch-free over whole chunks of 64 columns (one
/// validity word each), so the compares and selects vectorise (the extremes first, then
/// a search for each column's first row holding its extreme, a bit built a compare at a
/// time, took 9x the op's time along dim 1).
#[inline(always)]
fn arg_columns<T: Element>(
    states: &mut [(Num<T>, i64)], xs: &[T], (stride, nrows): (usize, usize),
    bits: Option<Bits<'_>>, idx0: i64, better: impl Fn(T, T) -> bool + Copy,
) {
    const NONE: u32 = u32::MAX;
    let w = states.len();
    let (mut best, mut row) = (vec![T::default(); w], vec![NONE; w]);
    // blocks of rows whose numbers fit the scratch row's u32
    for r0 in (0..nrows).step_by(1 << 31) {
        best.fill(T::default());
        row.fill(NONE);
        let n = (nrows - r0).min(1 << 31);
        let at = r0 * stride;
        masked_kernels::run::arg_columns(
            (
                better,
                #[inline(always)]
                |x: T| x.is_nan(),
            ),
            &mut best,
            &mut row,
            &xs[at..],
            (stride, n),
            bits.map(|b| b.offset(at)),
            0,
        );
        for ((s, &b), &i) in states.iter_mut().zip(&best).zip(&row) {
            if i != NONE {
                arg_step(s, (b, idx0 + (r0 + i as usize) as i64), better);
            }
        }
    }
}

macro_rules! arg_op {
    ($op:ident, $lanes:ident, $ext:ident, $name:literal, $id:ident, $cmp:expr) => {
        #[doc = concat!("Lane monoid of [`", stringify!($op), "`].")]
        #[derive(Debug)]
        pub struct $lanes;
        impl<T: Element> Lanes<T> for $lanes {
            type A = (T, i64);
            #[inline(always)]
            fn id(&self) -> (T, i64) {
                (T::$id, NO_INDEX)
            }
            #[inline(always)]
            fn lift(&self, x: T, i: i64) -> (T, i64) {
                (x, i)
            }
            #[inline(always)]
            fn comb(&self, a: (T, i64), b: (T, i64)) -> (T, i64) {
                arg_pick(a, b, $cmp)
            }
        }

        impl<T: Element> Fold<T> for $op {
            crate::fold::listed!(fold T, $op, $name);
            type State = (Num<T>, i64);
            type Output = i64;
            #[inline]
            fn identity(&self) -> (Num<T>, i64) {
                (Num(T::$id), NO_INDEX)
            }
            #[inline]
            fn push(&self, s: &mut (Num<T>, i64), x: T, i: i64) {
                arg_step(s, (x, i), $cmp);
            }
            #[inline]
            fn merge(&self, s: &mut (Num<T>, i64), o: (Num<T>, i64)) {
                arg_step(s, (o.0 .0, o.1), $cmp);
            }
            #[inline]
            fn finish(&self, s: &(Num<T>, i64)) -> i64 {
                if s.1 == NO_INDEX {
                    0
                } else {
                    s.1
                }
            }
            /// Two passes over the (cache-resident) run, both vectorised: the extreme
            /// value with the branch-free extreme lanes, then the first valid position
            /// holding it.
            #[inline]
            fn push_run(&self, s: &mut (Num<T>, i64), xs: &[T], bits: Option<Bits<'_>>, idx0: i64) {
                if let Some(p) = first_extremum($ext, xs, bits) {
                    arg_step(s, (xs[p], idx0 + p as i64), $cmp);
                }
            }
            /// As `push_run`: the winner is the first valid element holding the run's
            /// extremum, whatever the positions, as long as they increase.
            #[inline]
            fn push_run_at(
                &self,
                s: &mut (Num<T>, i64),
                xs: &[T],
                bits: Option<Bits<'_>>,
                pos: &dyn Fn(usize) -> i64,
            ) -> bool {
                if let Some(p) = first_extremum($ext, xs, bits) {
                    arg_step(s, (xs[p], pos(p)), $cmp);
                }
                true
            }
            /// One sweep over the rows, each row's candidates against the columns'
            /// best so far (the kernels' `arg_columns`).
            fn push_columns(
                &self,
                states: &mut [(Num<T>, i64)],
                xs: &[T],
                stride: usize,
                nrows: usize,
                bits: Option<Bits<'_>>,
                idx0: i64,
            ) {
                arg_columns(states, xs, (stride, nrows), bits, idx0, $cmp);
            }
        }
    };
}

arg_op!(
    ArgMax,
    ArgMaxLanes,
    AMaxLanes,
    "argmax",
    LOWEST,
    |b: T, a: T| b > a
);
arg_op!(
    ArgMin,
    ArgMinLanes,
    AMinLanes,
    "argmin",
    HIGHEST,
    |b: T, a: T| b < a
);

// ---------------------------------------------------------------- mean / count

/// Lane monoid of [`Mean`]'s sum.
#[derive(Debug)]
pub struct MeanLanes;
impl<T: Element> Lanes<T> for MeanLanes {
    type A = T::MeanLane;
    #[inline(always)]
    fn id(&self) -> T::MeanLane {
        <T::MeanLane as Acc>::ZERO
    }
    #[inline(always)]
    fn lift(&self, x: T, _: i64) -> T::MeanLane {
        x.to_mean_lane()
    }
    #[inline(always)]
    fn comb(&self, a: T::MeanLane, b: T::MeanLane) -> T::MeanLane {
        a.add(b)
    }
}

impl<T: Element> Fold<T> for Mean {
    crate::fold::listed!(fold T, Mean, "mean", order_free);
    type State = (Num<T::MeanTotal>, i64);
    type Output = T::Real;
    #[inline]
    fn identity(&self) -> (Num<T::MeanTotal>, i64) {
        (Num(<T::MeanTotal as Acc>::ZERO), 0)
    }
    #[inline]
    fn push(&self, s: &mut (Num<T::MeanTotal>, i64), x: T, _: i64) {
        s.0 .0 = s.0 .0.add(T::mean_lane_to_total(x.to_mean_lane()));
        s.1 += 1;
    }
    #[inline]
    fn merge(&self, s: &mut (Num<T::MeanTotal>, i64), o: (Num<T::MeanTotal>, i64)) {
        s.0 .0 = s.0 .0.add(o.0 .0);
        s.1 += o.1;
    }
    #[inline]
    fn finish(&self, s: &(Num<T::MeanTotal>, i64)) -> T::Real {
        <T::Real as Float>::from_f64(s.0 .0.as_f64() / s.1 as f64)
    }
    #[inline]
    fn push_run(
        &self, s: &mut (Num<T::MeanTotal>, i64), xs: &[T], bits: Option<Bits<'_>>, idx0: i64,
    ) {
        self.push_run_within(s, xs, xs.len(), bits, idx0);
    }
    #[inline]
    fn push_run_within(
        &self, s: &mut (Num<T::MeanTotal>, i64), xs: &[T], n: usize, bits: Option<Bits<'_>>,
        idx0: i64,
    ) {
        unpacked_blocks_within(xs, n, bits, idx0, |b, n, m, i| {
            let lane = fold_run_within(&MeanLanes, b, n, m, i);
            s.0 .0 = s.0 .0.add(T::mean_lane_to_total(lane));
        });
        s.1 += valid_count(n, bits);
    }
    #[inline]
    fn push_pair_run<A: Copy, B: Copy, Z: Fn(A, B) -> T + Copy>(
        &self, s: &mut (Num<T::MeanTotal>, i64), xs: &[A], ys: &[B], f: Z, bits: Option<Bits<'_>>,
        idx0: i64,
    ) -> bool {
        pair_blocks(xs, ys, bits, idx0, |bx, by, m, i| {
            s.0 .0 = s.0 .0.add(T::mean_lane_to_total(fold_pair_run(
                &MeanLanes, bx, by, f, m, i,
            )));
        });
        s.1 += valid_count(xs.len().min(ys.len()), bits);
        true
    }
    fn push_columns(
        &self, states: &mut [(Num<T::MeanTotal>, i64)], xs: &[T], stride: usize, nrows: usize,
        bits: Option<Bits<'_>>, idx0: i64,
    ) {
        columns_via(&MeanLanes, states, xs, stride, nrows, bits, idx0, |s, a| {
            s.0 .0 = s.0 .0.add(T::mean_lane_to_total(a))
        });
        column_counts(states, (stride, nrows), bits, |s, n| s.1 += n);
    }
}

impl<T: Element> Fold<T> for Count {
    crate::fold::listed!(fold T, Count, "count", order_free);
    type State = i64;
    type Output = i64;
    #[inline]
    fn identity(&self) -> i64 {
        0
    }
    #[inline]
    fn push(&self, s: &mut i64, _: T, _: i64) {
        *s += 1;
    }
    #[inline]
    fn merge(&self, s: &mut i64, o: i64) {
        *s += o;
    }
    #[inline]
    fn finish(&self, s: &i64) -> i64 {
        *s
    }
    fn valid_everywhere(&self) -> bool {
        true
    }
    #[inline]
    fn push_run(&self, s: &mut i64, xs: &[T], bits: Option<Bits<'_>>, _: i64) {
        *s += valid_count(xs.len(), bits);
    }
    fn push_columns(
        &self, states: &mut [i64], _: &[T], stride: usize, nrows: usize, bits: Option<Bits<'_>>,
        _: i64,
    ) {
        column_counts(states, (stride, nrows), bits, |s, n| *s += n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `push_pair_run` of sum and mean equals `push_run` over the values written out
    /// (what a zip writes: the value where valid, 0 elsewhere), bit for bit, on every
    /// float type; NaN where the mask is clear does not leak.
    #[test]
    fn pair_runs_equal_the_runs_of_the_written_values() {
        fn check<T: Element, F: Fold<T>>(op: &F, xs: &[T], ys: &[T], words: &[u64]) {
            let keep = crate::binary::KeepBin::Mul;
            let f = move |x: T, y: T| keep.apply(x, y);
            for bits in [None, Some(Bits::new(words, 0)), Some(Bits::new(words, 5))] {
                let z: Vec<T> = (0..xs.len())
                    .map(|k| match bits {
                        Some(b) if !b.get(k) => T::ZERO,
                        _ => f(xs[k], ys[k]),
                    })
                    .collect();
                let (mut want, mut got) = (op.identity(), op.identity());
                op.push_run(&mut want, &z, bits, 3);
                assert!(
                    op.push_pair_run(&mut got, xs, ys, f, bits, 3),
                    "{}",
                    op.name()
                );
                let (w, g) = (format!("{want:?}"), format!("{got:?}"));
                assert_eq!(w, g, "{} masked {}", op.name(), bits.is_some());
                // the keep family's entry takes the same path
                let mut via = op.identity();
                assert!(crate::binary::keep_pair_run(
                    keep,
                    op,
                    &mut via,
                    (xs, ys),
                    bits,
                    3
                ));
                assert_eq!(w, format!("{via:?}"), "{} by keep_pair_run", op.name());
            }
            // an op without the path does nothing and says so
            let mut s = <Count as Fold<T>>::identity(&Count);
            assert!(!<Count as Fold<T>>::push_pair_run(
                &Count, &mut s, xs, ys, f, None, 0
            ));
            assert_eq!(s, 0);
        }
        fn every<T: Element>(xs: &[T], ys: &[T], words: &[u64]) {
            check(&Sum, xs, ys, words);
            check(&Mean, xs, ys, words);
        }
        let n = 2 * BLOCK + 301;
        let x64: Vec<f64> = (0..n)
            .map(|i| ((i * 7919) % 113) as f64 * 0.37 - 20.0)
            .collect();
        let mut y64: Vec<f64> = (0..n)
            .map(|i| ((i * 31) % 17) as f64 * 0.011 - 0.09)
            .collect();
        let words: Vec<u64> = (0..n.div_ceil(64) + 1)
            .map(|i| 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1))
            .collect();
        // a NaN at a masked-out position of the first mask
        let hole = (0..n).find(|&k| !Bits::new(&words, 0).get(k)).unwrap();
        y64[hole] = f64::NAN;
        let clean: Vec<f64> = y64
            .iter()
            .map(|v| if v.is_nan() { 0.25 } else { *v })
            .collect();
        every(&x64, &clean, &words);
        // the NaN under the mask does not leak
        let mut s = <Sum as Fold<f64>>::identity(&Sum);
        let b = Some(Bits::new(&words, 0));
        assert!(Sum.push_pair_run(&mut s, &x64, &y64, |x: f64, y: f64| x * y, b, 0));
        assert!(!s.0.is_nan());
        let x32: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
        let y32: Vec<f32> = clean.iter().map(|&v| v as f32).collect();
        every(&x32, &y32, &words);
        let xh: Vec<half::f16> = x64.iter().map(|&v| half::f16::from_f64(v)).collect();
        let yh: Vec<half::f16> = clean.iter().map(|&v| half::f16::from_f64(v)).collect();
        every(&xh, &yh, &words);
    }

    /// The halves' extrema compared as `f32` ([`extremum_within`]) are the values the
    /// halves' own comparisons find through the same kernel, bit for bit (NaN for NaN),
    /// over specials (NaN, infinities, signed zeros, subnormals, the largest finite),
    /// every run length to 140 and slack past the run, with and without a mask: max,
    /// min, and the ops built on them (ptp, logsumexp's shift).
    #[test]
    fn halves_extrema_compared_widened_equal_their_own_comparisons() {
        fn check<T: Element>(of: impl Fn(f64) -> T) {
            let specials = [
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                0.0,
                -0.0,
                6.0e-8,
                -6.0e-8,
                65504.0,
                -65504.0,
                1.5,
                -2.25,
                3.0e38,
            ];
            let xs: Vec<T> = (0..400)
                .map(|i: usize| of(specials[(i * 7 + i / 13) % specials.len()]))
                .collect();
            let words: Vec<u64> = (0..8)
                .map(|i| 0xD6E8_FEB8_6659_FD93u64.wrapping_mul(i + 3))
                .collect();
            let same = |a: T, b: T| {
                assert!(
                    (a.is_nan() && b.is_nan()) || format!("{a:?}") == format!("{b:?}"),
                    "{a:?} {b:?}"
                );
            };
            for start in [0usize, 5, 64] {
                for n in 0..140 {
                    let run = &xs[start..];
                    // no NaN in some runs, so that the extrema themselves are compared
                    let clean: Vec<T> = run
                        .iter()
                        .map(|&x| if x.is_nan() { of(0.5) } else { x })
                        .collect();
                    for r in [run, &clean[..]] {
                        for bits in [None, Some(Bits::new(&words, start))] {
                            let want_max: T = fold_run_within(&AMaxLanes, r, n, bits, 0);
                            let want_min: T = fold_run_within(&AMinLanes, r, n, bits, 0);
                            same(extremum_within(AMaxLanes, r, n, bits, 0), want_max);
                            same(extremum_within(AMinLanes, r, n, bits, 0), want_min);
                        }
                    }
                }
            }
        }
        check(half::f16::from_f64);
        check(half::bf16::from_f64);
        // the halves compare widened, the other types as themselves
        let widened = [
            half::f16::COMPARES_WIDENED,
            half::bf16::COMPARES_WIDENED,
            f32::COMPARES_WIDENED,
            f64::COMPARES_WIDENED,
            i32::COMPARES_WIDENED,
        ];
        assert_eq!(widened, [true, true, false, false, false]);
    }

    /// The Fold law of block-aligned pieces: a run pushed whole equals the same run
    /// pushed in pieces whose lengths are multiples of `RUN_BLOCK` (the last one excepted),
    /// bit for bit, for every op a layout compiles (the `compiled` module's list).
    #[test]
    fn pushing_block_aligned_pieces_equals_pushing_the_run() {
        fn check<T: Element, F: Fold<T>>(op: &F, xs: &[T], words: &[u64]) {
            let n = xs.len();
            for bits in [None, Some(Bits::new(words, 0))] {
                let mut whole = op.identity();
                op.push_run(&mut whole, xs, bits, 0);
                for piece in [BLOCK, 2 * BLOCK] {
                    let mut parts = op.identity();
                    let mut off = 0;
                    while off < n {
                        let end = (off + piece).min(n);
                        let b = bits.map(|b| b.offset(off));
                        op.push_run(&mut parts, &xs[off..end], b, off as i64);
                        off = end;
                    }
                    // the states' debug forms show every bit of their floats
                    let (w, p) = (format!("{whole:?}"), format!("{parts:?}"));
                    assert_eq!(
                        w,
                        p,
                        "{} piece {piece} masked {}",
                        op.name(),
                        bits.is_some()
                    );
                }
            }
        }
        fn every<T: Element>(xs: &[T], words: &[u64]) {
            check(&Sum, xs, words);
            check(&Prod, xs, words);
            check(&AMax, xs, words);
            check(&AMin, xs, words);
            check(&Ptp, xs, words);
            check(&ArgMax, xs, words);
            check(&ArgMin, xs, words);
            check(&Mean, xs, words);
            check(&Count, xs, words);
            check(&crate::stats::Var { correction: 1.0 }, xs, words);
            check(&crate::stats::Std { correction: 0.0 }, xs, words);
            for ord in [0.0, 1.0, 2.0, 3.5, f64::INFINITY, f64::NEG_INFINITY] {
                check(&crate::stats::Norm::new(ord).unwrap(), xs, words);
            }
            check(&crate::stats::LogSumExp, xs, words);
        }
        let n = 3 * BLOCK + 777;
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        // values near 1 (the product stays finite over 13 000 of them), a few repeats
        // of the maximum (argmax keeps the first)
        let x64: Vec<f64> = (0..n)
            .map(|_| 1.0 + ((next() >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 1e-3)
            .collect();
        let words: Vec<u64> = (0..n.div_ceil(64)).map(|_| next()).collect();
        every(&x64, &words);
        let x32: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
        every(&x32, &words);
    }

    fn fold<T: Element, F: Fold<T>>(f: &F, xs: &[T], valid: &[bool]) -> F::Output {
        let words: Vec<u64> = valid
            .chunks(64)
            .map(|c| {
                c.iter()
                    .enumerate()
                    .fold(0u64, |w, (k, &v)| w | ((v as u64) << k))
            })
            .collect();
        let s = f.fold_slice(xs, Some(Bits::new(&words, 0)));
        // the element-by-element path agrees with the vector path
        let mut t = f.identity();
        for (k, (&x, &v)) in xs.iter().zip(valid).enumerate() {
            if v {
                f.push(&mut t, x, k as i64);
            }
        }
        let (a, b) = (f.finish(&s), f.finish(&t));
        assert!(a == b || (a.is_nan() && b.is_nan()), "{a:?} vs {b:?}");
        a
    }

    #[test]
    fn hand_checked_values() {
        let x = [-3.0f32, f32::NAN, -1.0, 2.0];
        let m = [true, false, true, false];
        assert_eq!(fold(&Sum, &x, &m), -4.0);
        assert_eq!(fold(&Prod, &x, &m), 3.0);
        assert_eq!(fold(&AMax, &x, &m), -1.0);
        assert_eq!(fold(&AMin, &x, &m), -3.0);
        assert_eq!(fold(&ArgMax, &x, &m), 2);
        assert_eq!(fold(&ArgMin, &x, &m), 0);
        assert_eq!(fold(&Mean, &x, &m), -2.0);
        assert_eq!(fold(&Count, &x, &m), 2);
        assert_eq!(fold(&Ptp, &x, &m), 2.0);
        assert_eq!(
            fold(&Ptp, &[i32::MIN, 5, i32::MAX], &[true; 3]),
            (1i64 << 32) - 1
        );
        let none = [false; 4];
        assert_eq!(fold(&Sum, &x, &none), 0.0);
        assert_eq!(fold(&Prod, &x, &none), 1.0);
        assert_eq!(fold(&AMax, &x, &none), f32::NEG_INFINITY);
        assert_eq!(fold(&AMin, &x, &none), f32::INFINITY);
        assert_eq!(fold(&ArgMax, &x, &none), 0);
        assert!(fold(&Mean, &x, &none).is_nan());
        assert_eq!(fold(&Ptp, &x, &none), 0.0);
        // valid NaN propagates; argmax picks the first valid NaN
        let all = [true; 4];
        assert!(fold(&AMax, &x, &all).is_nan());
        assert!(fold(&AMin, &x, &all).is_nan());
        assert_eq!(fold(&ArgMax, &x, &all), 1);
        assert_eq!(fold(&ArgMin, &x, &all), 1);
    }

    #[test]
    fn ties_and_integers() {
        let x = [5i32, 1, 5, 1, i32::MAX];
        let m = [true, true, true, true, false];
        assert_eq!(fold(&ArgMax, &x, &m), 0);
        assert_eq!(fold(&ArgMin, &x, &m), 1);
        let none = [false; 5];
        assert_eq!(fold(&AMax, &x, &none), i32::MIN);
        assert_eq!(fold(&AMin, &x, &none), i32::MAX);
        // sums widen to i64; products wrap
        let big = [i32::MAX; 3];
        assert_eq!(fold(&Sum, &big, &[true; 3]), 3 * i32::MAX as i64);
        let huge = [i64::MAX, 2];
        assert_eq!(fold(&Prod, &huge, &[true; 2]), i64::MAX.wrapping_mul(2));
        assert_eq!(fold(&Mean, &[1i64, 2], &[true; 2]), 1.5f64);
        // an i64 mean never wraps: (MAX + MAX) / 2 == MAX
        let m = fold(&Mean, &[i64::MAX, i64::MAX], &[true; 2]);
        assert_eq!(m, i64::MAX as f64);
        // and is exact where an f64 running sum would lose the small terms
        let m = fold(&Mean, &[i64::MAX, 3, i64::MIN, 2], &[true; 4]);
        assert_eq!(m, 4.0 / 4.0);
    }

    #[test]
    fn argmax_ties_across_vector_accumulators() {
        // equal maxima at positions 3 and 40 (different accumulators): first wins
        let mut x = vec![0.0f64; 100];
        x[40] = 7.0;
        x[3] = 7.0;
        assert_eq!(fold(&ArgMax, &x, &[true; 100]), 3);
        let mut y = vec![0.0f64; 100];
        y[70] = f64::NAN;
        y[65] = f64::NAN;
        assert_eq!(fold(&ArgMin, &y, &[true; 100]), 65);
        // all -inf: the first valid one
        let z = vec![f64::NEG_INFINITY; 70];
        let mut m = vec![true; 70];
        m[0] = false;
        assert_eq!(fold(&ArgMax, &z, &m), 1);
    }

    #[test]
    fn merge_of_halves_equals_one_pass() {
        let x: Vec<f64> = (0..1000).map(|i| ((i * 37) % 101) as f64 - 50.0).collect();
        let f = ArgMax;
        let whole = f.fold_slice(&x, None);
        let mut a = f.identity();
        Fold::<f64>::push_run(&f, &mut a, &x[..333], None, 0);
        let mut b = f.identity();
        Fold::<f64>::push_run(&f, &mut b, &x[333..], None, 333);
        Fold::<f64>::merge(&f, &mut a, b);
        assert_eq!(a, whole);
    }

    #[test]
    fn f32_sum_accuracy_at_size() {
        let n = 1 << 22;
        let x: Vec<f32> = (0..n).map(|i| 1.0 + ((i % 1000) as f32) * 1e-3).collect();
        let exact: f64 = x.iter().map(|&v| v as f64).sum();
        let got = Fold::<f32>::finish(&Sum, &Sum.fold_slice(&x, None)) as f64;
        assert!(((got - exact) / exact).abs() < 1e-6, "{got} vs {exact}");
    }
}
