//! Statistical folds: var, std, norm, logsumexp. Each is a mergeable [`Fold`] whose
//! `push_run` makes two vectorised passes over a cache-resident block.

use crate::element::{CalcOf, Element, Float};
use crate::error::{MaskedError, Result};
use crate::fold::{push_few_rows, Fold};
pub use crate::fold::{LogMeanExp, LogSumExp, Norm, Std, Var};
use crate::ops::{
    blocks, columns_via, extremum, max_nan, min_nan, valid_blocks, valid_count, AMaxLanes, InCalc,
    MeanLanes, COL_ROWS,
};
use crate::wire::Num;
use crate::Acc;
use masked_kernels::bits::count_columns;
use masked_kernels::cpu::fused_exp;
use masked_kernels::run::{fold_columns, fold_columns_by, fold_run, fold_run_within, Lanes};
use masked_kernels::{Bits, BLOCK};
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------- exp

/// `e^d` for `d <= 0`, with fused multiply-adds when `FUSED` (only in kernels that have
/// them: see `masked_kernels::cpu::fused_exp`).
#[inline(always)]
pub(crate) fn exp_of<R: Float, const FUSED: bool>(d: R) -> R {
    if FUSED {
        d.exp_nonpos_fused()
    } else {
        d.exp_nonpos()
    }
}

/// Lane monoid: `exp(x - shift)` in the statistics type of `T` (f32 lanes for f32), the
/// exp fused when `FUSED`: the sums of log_softmax and logsumexp.
#[derive(Debug)]
struct SoftLanes<R, const FUSED: bool> {
    shift: R,
}
impl<T: Element, const FUSED: bool> Lanes<T> for SoftLanes<CalcOf<T>, FUSED> {
    type A = CalcOf<T>;
    const HEAVY: bool = true;
    #[inline(always)]
    fn id(&self) -> CalcOf<T> {
        <CalcOf<T> as Element>::ZERO
    }
    #[inline(always)]
    fn lift(&self, x: T, _: i64) -> CalcOf<T> {
        exp_of::<_, FUSED>(x.calc() - self.shift)
    }
    #[inline(always)]
    fn comb(&self, a: CalcOf<T>, b: CalcOf<T>) -> CalcOf<T> {
        a + b
    }
}

/// `sum(exp(x - shift))` over the valid elements of a run (every `x <= shift`), in the
/// fastest kernel with the fastest `exp` this CPU has.
pub(crate) fn exp_sum<T: Element>(xs: &[T], bits: Option<Bits<'_>>, shift: CalcOf<T>) -> CalcOf<T> {
    if fused_exp() {
        fold_run(&SoftLanes::<CalcOf<T>, true> { shift }, xs, bits, 0)
    } else {
        fold_run(&SoftLanes::<CalcOf<T>, false> { shift }, xs, bits, 0)
    }
}

// ---------------------------------------------------------------- var / std

/// Count, mean and sum of squared deviations of the valid elements: the mergeable state
/// of var and std (Welford per element, Chan et al. to merge).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Moments {
    /// Number of valid elements.
    pub n: i64,
    /// Their mean.
    #[serde(with = "crate::wire::num")]
    pub mean: f64,
    /// Sum of squared deviations from the mean.
    #[serde(with = "crate::wire::num")]
    pub m2: f64,
}

impl Moments {
    /// Adds one value (Welford).
    #[inline]
    pub fn push(&mut self, x: f64) {
        self.n += 1;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
    }
    /// Merges the moments of another part (Chan et al.).
    #[inline]
    pub fn merge(&mut self, o: Moments) {
        if o.n == 0 {
            return;
        }
        if self.n == 0 {
            *self = o;
            return;
        }
        let (na, nb) = (self.n as f64, o.n as f64);
        let n = na + nb;
        let d = o.mean - self.mean;
        self.mean += d * nb / n;
        self.m2 += o.m2 + d * d * na * nb / n;
        self.n += o.n;
    }
    /// `m2 / max(n - correction, 0)`: torch's formula (inf when `n <= correction` and
    /// `m2 > 0`, NaN when both are 0).
    pub fn var(&self, correction: f64) -> f64 {
        self.m2 / (self.n as f64 - correction).max(0.0)
    }
}

/// Lane monoid: squared deviation from a fixed centre `c`, in the statistics type of
/// `T` (f32 lanes for f32 input: twice the vector width of f64).
#[derive(Debug)]
struct SqDevLanes<R> {
    c: R,
}
impl<T: Element> Lanes<T> for SqDevLanes<CalcOf<T>> {
    type A = CalcOf<T>;
    #[inline(always)]
    fn id(&self) -> CalcOf<T> {
        <CalcOf<T> as Element>::ZERO
    }
    #[inline(always)]
    fn lift(&self, x: T, _: i64) -> CalcOf<T> {
        let d = x.calc() - self.c;
        d * d
    }
    #[inline(always)]
    fn comb(&self, a: CalcOf<T>, b: CalcOf<T>) -> CalcOf<T> {
        a + b
    }
}

/// The moments of one run, `xs[..n]` of a readable `xs` ([`Fold::push_run_within`]): per
/// block, the mean from the exact sum lanes, then the squared deviations from it (two
/// passes over an L1/L2-resident block), merged. With a mask and AVX-512 the blocks are
/// the packed valid values; without a mask each block's kernels may read past it.
#[inline]
fn moments_run<T: Element>(m: &mut Moments, xs: &[T], n: usize, bits: Option<Bits<'_>>, idx0: i64) {
    // `b[..len]` is the block, `b[len..]` readable
    let mut block = |b: &[T], len: usize, bb: Option<Bits<'_>>, i: i64| {
        let n = bb.map_or(len, |w| w.count_ones(len)) as i64;
        if n == 0 {
            return;
        }
        let sum = T::mean_lane_to_total(fold_run_within(&MeanLanes, b, len, bb, i)).as_f64();
        let mean = sum / n as f64;
        // deviations from c = mean rounded to the lane type; then exactly
        // sum((x - mean)^2) = sum((x - c)^2) - n (mean - c)^2
        let c = <CalcOf<T> as Float>::from_f64(mean);
        let s: CalcOf<T> = fold_run_within(&SqDevLanes::<CalcOf<T>> { c }, b, len, bb, i);
        let off = mean - c.to_f64();
        let m2 = (s.to_f64() - n as f64 * off * off).max(0.0);
        let m2 = if s.to_f64().is_nan() { f64::NAN } else { m2 };
        m.merge(Moments { n, mean, m2 });
    };
    if bits.is_none() {
        let mut off = 0;
        while off < n {
            let end = (off + BLOCK).min(n);
            block(&xs[off..], end - off, None, idx0 + off as i64);
            off = end;
        }
    } else {
        // with packing, one pass over memory; both passes then read the valid values only
        valid_blocks(&xs[..n], bits, idx0, |b, bb, i| block(b, b.len(), bb, i));
    }
}

/// The column sweep of var and std ([`Fold::push_columns`]): per block of [`COL_ROWS`]
/// rows, each column's count and sum (the mean lanes), its mean, then the squared
/// deviations from that mean rounded to the lane type (a second pass over the
/// cache-resident block), merged into each column's moments as [`moments_run`] merges a
/// block. Reading rows, not transposed tiles of columns (3.8-4.5x the time along dim 1
/// at 1024², half of it in the transpose). Over a few rows, a row at a time.
fn moments_columns<T: Element, F: Fold<T, State = Moments>>(
    op: &F, states: &mut [Moments], xs: &[T], (stride, nrows): (usize, usize),
    bits: Option<Bits<'_>>,
) {
    if push_few_rows(op, states, xs, (stride, nrows), bits, 0) {
        return;
    }
    let w = states.len();
    let zero = <CalcOf<T> as Element>::ZERO;
    let (mut sums, mut counts, mut means, mut centres, mut sq) = (
        vec![<T::MeanLane as Acc>::ZERO; w],
        vec![0i64; w],
        vec![0.0f64; w],
        vec![zero; w],
        vec![zero; w],
    );
    for r0 in (0..nrows).step_by(COL_ROWS) {
        let n = COL_ROWS.min(nrows - r0);
        let (at, b) = (r0 * stride, bits.map(|b| b.offset(r0 * stride)));
        sums.fill(<T::MeanLane as Acc>::ZERO);
        counts.fill(0);
        fold_columns(&MeanLanes, &mut sums, &xs[at..], stride, n, b, 0);
        match b {
            Some(b) => count_columns(b, (stride, n), &mut counts),
            None => counts.fill(n as i64),
        }
        for (((m, c), &s), &n) in means.iter_mut().zip(&mut centres).zip(&sums).zip(&counts) {
            *m = T::mean_lane_to_total(s).as_f64() / n as f64;
            *c = <CalcOf<T> as Float>::from_f64(*m);
        }
        sq.fill(zero);
        fold_columns_by(
            #[inline(always)]
            |a: CalcOf<T>, x: T, c: CalcOf<T>| {
                let d = x.calc() - c;
                a + d * d
            },
            &mut sq,
            &centres,
            &xs[at..],
            (stride, n),
            b,
        );
        for k in 0..w {
            let n = counts[k];
            if n == 0 {
                continue;
            }
            let (mean, s) = (means[k], sq[k].to_f64());
            // exactly sum((x - mean)^2) = sum((x - c)^2) - n (mean - c)^2, as a run's block
            let off = mean - centres[k].to_f64();
            let m2 = if s.is_nan() {
                f64::NAN
            } else {
                (s - n as f64 * off * off).max(0.0)
            };
            states[k].merge(Moments { n, mean, m2 });
        }
    }
}

/// Checks a var/std correction: finite or not, but not negative and not NaN.
///
/// # Errors
/// [`MaskedError::InvalidArgument`].
pub fn check_correction(c: f64) -> Result<f64> {
    if c.is_nan() || c < 0.0 {
        return Err(MaskedError::InvalidArgument {
            name: "correction",
            value: c.to_string(),
            reason: "must be a number >= 0",
        });
    }
    Ok(c)
}

macro_rules! moment_op {
    ($op:ident, $name:literal, $finish:expr) => {
        impl Default for $op {
            fn default() -> Self {
                $op { correction: 1.0 }
            }
        }

        impl<T: Element> Fold<T> for $op {
            crate::fold::listed!(fold T, $op, $name, order_free);
            type State = Moments;
            type Output = T::Real;
            #[inline]
            fn identity(&self) -> Moments {
                Moments::default()
            }
            #[inline]
            fn push(&self, s: &mut Moments, x: T, _: i64) {
                s.push(x.to_f64());
            }
            #[inline]
            fn merge(&self, s: &mut Moments, o: Moments) {
                s.merge(o);
            }
            #[inline]
            fn finish(&self, s: &Moments) -> T::Real {
                let f: fn(f64) -> f64 = $finish;
                <T::Real as Float>::from_f64(f(s.var(self.correction)))
            }
            #[inline]
            fn push_run(&self, s: &mut Moments, xs: &[T], bits: Option<Bits<'_>>, idx0: i64) {
                moments_run(s, xs, xs.len(), bits, idx0);
            }
            fn push_columns(
                &self,
                states: &mut [Moments],
                xs: &[T],
                stride: usize,
                nrows: usize,
                bits: Option<Bits<'_>>,
                _: i64,
            ) {
                moments_columns(self, states, xs, (stride, nrows), bits);
            }
            #[inline]
            fn push_run_within(
                &self,
                s: &mut Moments,
                xs: &[T],
                n: usize,
                bits: Option<Bits<'_>>,
                idx0: i64,
            ) {
                moments_run(s, xs, n, bits, idx0);
            }
        }
    };
}

moment_op!(Var, "var", |v| v);
moment_op!(Std, "std", |v| v.sqrt());

// ---------------------------------------------------------------- norm

/// Which norm an `ord` names, as a const-generic code so that each kind's lane loop is
/// compiled (and vectorised) on its own.
mod kind {
    /// Count of non-zero valid elements (NaN counts).
    pub const ZERO: u8 = 0;
    /// Sum of |x|.
    pub const ONE: u8 = 1;
    /// Euclidean.
    pub const TWO: u8 = 2;
    /// Max |x|.
    pub const INF: u8 = 3;
    /// Min |x|.
    pub const NEG_INF: u8 = 4;
    /// `(sum |x|^p)^(1/p)`, any other finite non-zero p (negative too).
    pub const P: u8 = 5;
}

/// What one element contributes to a norm of kind `K`.
#[inline(always)]
fn norm_g<const K: u8>(x: f64, p: f64) -> f64 {
    match K {
        kind::ZERO => (x != 0.0) as u8 as f64,
        kind::TWO => x * x,
        kind::P => x.abs().powf(p),
        _ => x.abs(),
    }
}

/// How two partial norms of kind `K` combine: a sum, or a NaN-propagating max / min.
#[inline(always)]
fn norm_comb<const K: u8>(a: f64, b: f64) -> f64 {
    match K {
        kind::INF => max_nan(a, b),
        kind::NEG_INF => min_nan(a, b),
        _ => a + b,
    }
}

/// The partial norm of nothing.
#[inline(always)]
fn norm_id<const K: u8>() -> f64 {
    if K == kind::NEG_INF {
        f64::INFINITY
    } else {
        0.0
    }
}

/// Runs `$body` with `K` bound to the const kind code of `$norm` (one arm a kind).
macro_rules! with_kind {
    ($norm:expr, $k:ident => $body:expr) => {
        with_kind!(@arms $norm, $k, $body; ZERO ONE TWO INF NEG_INF)
    };
    (@arms $norm:expr, $k:ident, $body:expr; $($kind:ident)*) => {
        match $norm.kind {
            $(kind::$kind => {
                const $k: u8 = kind::$kind;
                $body
            })*
            _ => {
                const $k: u8 = kind::P;
                $body
            }
        }
    };
}

/// Why a NaN order is no norm's.
pub(crate) const ORD_REASON: &str = "must be a number or +-inf";

impl Norm {
    /// The norm of order `ord`.
    ///
    /// # Errors
    /// [`MaskedError::InvalidArgument`] for a NaN `ord`.
    pub fn new(ord: f64) -> Result<Self> {
        let ord = MaskedError::not_nan("ord", ord, ORD_REASON)?;
        let kind = if ord == 0.0 {
            kind::ZERO
        } else if ord == 1.0 {
            kind::ONE
        } else if ord == 2.0 {
            kind::TWO
        } else if ord == f64::INFINITY {
            kind::INF
        } else if ord == f64::NEG_INFINITY {
            kind::NEG_INF
        } else {
            kind::P
        };
        Ok(Norm { kind, ord })
    }
    /// The order.
    pub fn ord(&self) -> f64 {
        self.ord
    }
    /// The norm from its (f64) fold state, before rounding to an output type.
    pub fn finish_f64(&self, s: f64) -> f64 {
        match self.kind {
            kind::TWO => s.sqrt(),
            kind::P => s.powf(1.0 / self.ord),
            _ => s,
        }
    }
}

/// Lane monoid of a [`Norm`] of kind `K` (order `p` for the general kind).
#[derive(Debug)]
struct NormLanes<const K: u8> {
    p: f64,
}
impl<T: Element, const K: u8> Lanes<T> for NormLanes<K> {
    type A = f64;
    #[inline(always)]
    fn id(&self) -> f64 {
        norm_id::<K>()
    }
    #[inline(always)]
    fn lift(&self, x: T, _: i64) -> f64 {
        norm_g::<K>(x.to_f64(), self.p)
    }
    #[inline(always)]
    fn comb(&self, a: f64, b: f64) -> f64 {
        norm_comb::<K>(a, b)
    }
}

impl<T: Element> Fold<T> for Norm {
    crate::fold::listed!(fold T, Norm, "norm", order_free);
    type State = Num<f64>;
    type Output = T::Real;
    #[inline]
    fn identity(&self) -> Num<f64> {
        Num(with_kind!(self, K => norm_id::<K>()))
    }
    #[inline]
    fn push(&self, s: &mut Num<f64>, x: T, _: i64) {
        s.0 = with_kind!(self, K => norm_comb::<K>(s.0, norm_g::<K>(x.to_f64(), self.ord)));
    }
    #[inline]
    fn merge(&self, s: &mut Num<f64>, o: Num<f64>) {
        s.0 = with_kind!(self, K => norm_comb::<K>(s.0, o.0));
    }
    #[inline]
    fn finish(&self, s: &Num<f64>) -> T::Real {
        <T::Real as Float>::from_f64(self.finish_f64(s.0))
    }
    /// The vector column kernel over the norm's lanes (f64 accumulators, one pass), a
    /// block of rows at a time; under 16 rows, a row at a time.
    fn push_columns(
        &self, states: &mut [Num<f64>], xs: &[T], stride: usize, nrows: usize,
        bits: Option<Bits<'_>>, idx0: i64,
    ) {
        if push_few_rows(self, states, xs, (stride, nrows), bits, idx0) {
            return;
        }
        with_kind!(self, K => {
            let lanes = NormLanes::<K> { p: self.ord };
            columns_via(&lanes, states, xs, stride, nrows, bits, idx0, |s, a| {
                s.0 = norm_comb::<K>(s.0, a)
            })
        });
    }
    #[inline]
    fn push_run(&self, s: &mut Num<f64>, xs: &[T], bits: Option<Bits<'_>>, idx0: i64) {
        // per block, so that a run's norm is its blocks' in order (the Fold law)
        with_kind!(self, K => blocks(xs, bits, idx0, |b, m, i| {
            let r = fold_run(&NormLanes::<K> { p: self.ord }, b, m, i);
            s.0 = norm_comb::<K>(s.0, r);
        }));
    }
}

// ---------------------------------------------------------------- logsumexp

/// State of [`LogSumExp`]: `(max, sum of exp(x - max))`.
pub type LseState = (Num<f64>, Num<f64>);

#[inline]
fn lse_merge(s: &mut LseState, b: (f64, f64)) {
    let mut a = (s.0 .0, s.1 .0);
    lse_merge_f64(&mut a, b);
    *s = (Num(a.0), Num(a.1));
}

#[inline]
fn lse_merge_f64(a: &mut (f64, f64), b: (f64, f64)) {
    if a.0.is_nan() || b.0.is_nan() {
        *a = (f64::NAN, 0.0);
    } else if b.0 == f64::NEG_INFINITY {
    } else if a.0 == f64::NEG_INFINITY {
        *a = b;
    } else if b.0 > a.0 {
        a.1 = a.1 * (a.0 - b.0).exp() + b.1;
        a.0 = b.0;
    } else if b.0 == f64::INFINITY {
        // both +inf: the result is +inf whatever the sum
        a.1 += b.1;
    } else {
        a.1 += b.1 * (b.0 - a.0).exp();
    }
}

/// The column sweep of logsumexp ([`Fold::push_columns`], `FUSED` as [`exp_of`]): per
/// block of [`COL_ROWS`] rows, each column's max (a column pass, compared in the compute
/// type), then its sum of `exp(x - max)` (a second pass over the cache-resident block),
/// merged as a run's block is (a NaN or infinite max as it is). Reading rows, not
/// transposed tiles of columns pushed as runs (3-4x the time along dim 1 at 1024²).
fn lse_columns<T: Element, const FUSED: bool>(
    states: &mut [LseState], xs: &[T], (stride, nrows): (usize, usize), bits: Option<Bits<'_>>,
) {
    let w = states.len();
    let zero = <CalcOf<T> as Element>::ZERO;
    let (mut maxes, mut sums) = (vec![zero; w], vec![zero; w]);
    for r0 in (0..nrows).step_by(COL_ROWS) {
        let n = COL_ROWS.min(nrows - r0);
        let (at, b) = (r0 * stride, bits.map(|b| b.offset(r0 * stride)));
        maxes.fill(<CalcOf<T> as Float>::NEG_INFINITY);
        fold_columns(&InCalc(AMaxLanes), &mut maxes, &xs[at..], stride, n, b, 0);
        sums.fill(zero);
        // the columns whose max is NaN or infinite compute garbage here, never read
        fold_columns_by(
            #[inline(always)]
            |a: CalcOf<T>, x: T, m: CalcOf<T>| a + exp_of::<_, FUSED>(x.calc() - m),
            &mut sums,
            &maxes,
            &xs[at..],
            (stride, n),
            b,
        );
        for ((s, &m), &e) in states.iter_mut().zip(&maxes).zip(&sums) {
            let mf = m.to_f64();
            if mf.is_nan() || mf.is_infinite() {
                lse_merge(s, (mf, if mf == f64::INFINITY { 1.0 } else { 0.0 }));
            } else {
                lse_merge(s, (mf, e.to_f64()));
            }
        }
    }
}

/// The logsumexp of a state, in `f64`.
fn lse_value(s: &LseState) -> f64 {
    let (m, sum) = (s.0 .0, s.1 .0);
    if m.is_nan() || m.is_infinite() {
        m
    } else {
        m + sum.ln()
    }
}

impl<T: Element> Fold<T> for LogSumExp {
    crate::fold::listed!(fold T, LogSumExp, "logsumexp", order_free);
    type State = LseState;
    type Output = T::Real;
    #[inline]
    fn identity(&self) -> LseState {
        (Num(f64::NEG_INFINITY), Num(0.0))
    }
    #[inline]
    fn push(&self, s: &mut LseState, x: T, _: i64) {
        lse_merge(s, (x.to_f64(), 1.0));
    }
    #[inline]
    fn merge(&self, s: &mut LseState, o: LseState) {
        lse_merge(s, (o.0 .0, o.1 .0));
    }
    #[inline]
    fn finish(&self, s: &LseState) -> T::Real {
        <T::Real as Float>::from_f64(lse_value(s))
    }
    fn push_columns(
        &self, states: &mut [LseState], xs: &[T], stride: usize, nrows: usize,
        bits: Option<Bits<'_>>, idx0: i64,
    ) {
        if push_few_rows(self, states, xs, (stride, nrows), bits, idx0) {
            return;
        }
        if fused_exp() {
            lse_columns::<T, true>(states, xs, (stride, nrows), bits);
        } else {
            lse_columns::<T, false>(states, xs, (stride, nrows), bits);
        }
    }
    #[inline]
    fn push_run(&self, s: &mut LseState, xs: &[T], bits: Option<Bits<'_>>, idx0: i64) {
        // per block: the max, then the sum of exp(x - max) from L1
        let block = |b: &[T], bb: Option<Bits<'_>>, i: i64| {
            let m: T = extremum(AMaxLanes, b, bb, i);
            let mf = m.to_f64();
            if mf.is_nan() || mf.is_infinite() {
                lse_merge(s, (mf, if mf == f64::INFINITY { 1.0 } else { 0.0 }));
                return;
            }
            let shift = m.calc();
            let sum = exp_sum(b, bb, shift);
            // the shift is the block's max in the compute type: record it exactly in f64
            lse_merge(s, (shift.to_f64(), sum.to_f64()));
        };
        // with packing, max and exp see only the valid values
        valid_blocks(xs, bits, idx0, block);
    }
}

// ---------------------------------------------------------------- logmeanexp

impl<T: Element> Fold<T> for LogMeanExp {
    crate::fold::listed!(fold T, LogMeanExp, "logmeanexp", order_free);
    type State = (LseState, i64);
    type Output = T::Real;
    #[inline]
    fn identity(&self) -> (LseState, i64) {
        (Fold::<T>::identity(&LogSumExp), 0)
    }
    #[inline]
    fn push(&self, s: &mut (LseState, i64), x: T, i: i64) {
        LogSumExp.push(&mut s.0, x, i);
        s.1 += 1;
    }
    #[inline]
    fn merge(&self, s: &mut (LseState, i64), o: (LseState, i64)) {
        Fold::<T>::merge(&LogSumExp, &mut s.0, o.0);
        s.1 += o.1;
    }
    #[inline]
    fn finish(&self, s: &(LseState, i64)) -> T::Real {
        let v = if s.1 == 0 {
            f64::NAN
        } else {
            lse_value(&s.0) - (s.1 as f64).ln()
        };
        <T::Real as Float>::from_f64(v)
    }
    #[inline]
    fn push_run(&self, s: &mut (LseState, i64), xs: &[T], bits: Option<Bits<'_>>, idx0: i64) {
        LogSumExp.push_run(&mut s.0, xs, bits, idx0);
        s.1 += valid_count(xs.len(), bits);
    }
}
