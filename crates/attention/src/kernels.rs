//! The row and column kernels: each a loop over a chunk of a pattern's rows (or, through
//! the transpose, its columns), compiled once per accumulator type (`f32`, `f64`) and CPU
//! tier by [`multiversion!`](masked_kernels::multiversion), with a [`Madd`] marker of the
//! CPU (fused multiply-adds, the horizontal sum). Three building blocks inside them:
//! `scores` (dot products of one query with its keys, one key at a time in 16-lane
//! blocks), `softmax` (in place over one row's scores) and `combine` (a weighted sum of
//! rows of a dense matrix, accumulated in registers a block of 16 columns at a time, four
//! rows at a time).
//!
//! They index their slices in plain loops, without iterator adapters (`zip`,
//! `chunks_exact`, `step_by`): see masked-kernels' `run.rs` for why (an adapter left out
//! of line keeps the kernel around it from being compiled with the tier's features).
#![allow(clippy::needless_range_loop)]

use masked_core::Float;
use masked_kernels::multiversion;
use masked_kernels::par::Scatter;

pub mod sliced;

/// An accumulator type: `f32` (also for f16 and bf16 storage) or `f64`.
pub trait Acc: Float + PartialOrd + Send + Sync + 'static {
    /// `self * b + c`, rounded once (a fused multiply-add).
    fn fma(self, b: Self, c: Self) -> Self;
    /// To `f64` (exact).
    fn to_f64(self) -> f64;
    /// The sum of 16 lanes with AVX-512 instructions.
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[cfg(target_arch = "x86_64")]
    unsafe fn hsum_avx512(a: &[Self; L]) -> Self;
    /// The sum of 16 lanes with AVX instructions.
    ///
    /// # Safety
    /// The CPU has AVX.
    #[cfg(target_arch = "x86_64")]
    unsafe fn hsum_avx2(a: &[Self; L]) -> Self;
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! Horizontal sums of 16 lanes, one instruction sequence each (the kernels reach them
    //! only through [`super::Avx512`] and [`super::Avx2`], which exist only where the CPU
    //! has the features).
    use super::L;
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn f32_avx512(a: &[f32; L]) -> f32 {
        // SAFETY: 16 f32 read from a 16-element array
        unsafe { _mm512_reduce_add_ps(_mm512_loadu_ps(a.as_ptr())) }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn f64_avx512(a: &[f64; L]) -> f64 {
        // SAFETY: two 8-lane reads inside a 16-element array
        unsafe {
            let v = _mm512_add_pd(
                _mm512_loadu_pd(a.as_ptr()),
                _mm512_loadu_pd(a.as_ptr().add(8)),
            );
            _mm512_reduce_add_pd(v)
        }
    }

    #[inline]
    #[target_feature(enable = "avx")]
    pub(super) fn f32_avx2(a: &[f32; L]) -> f32 {
        // SAFETY: two 8-lane reads inside a 16-element array
        unsafe {
            let v = _mm256_add_ps(
                _mm256_loadu_ps(a.as_ptr()),
                _mm256_loadu_ps(a.as_ptr().add(8)),
            );
            let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps::<1>(h, h)))
        }
    }

    #[inline]
    #[target_feature(enable = "avx")]
    pub(super) fn f64_avx2(a: &[f64; L]) -> f64 {
        // SAFETY: four 4-lane reads inside a 16-element array
        unsafe {
            let p = a.as_ptr();
            let v = _mm256_add_pd(
                _mm256_add_pd(_mm256_loadu_pd(p), _mm256_loadu_pd(p.add(4))),
                _mm256_add_pd(_mm256_loadu_pd(p.add(8)), _mm256_loadu_pd(p.add(12))),
            );
            let h = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd::<1>(v));
            _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)))
        }
    }
}

impl Acc for f32 {
    #[inline(always)]
    fn fma(self, b: f32, c: f32) -> f32 {
        self.mul_add(b, c)
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn hsum_avx512(a: &[f32; L]) -> f32 {
        // SAFETY: the caller's (AVX-512F)
        unsafe { x86::f32_avx512(a) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn hsum_avx2(a: &[f32; L]) -> f32 {
        // SAFETY: the caller's (AVX)
        unsafe { x86::f32_avx2(a) }
    }
}

impl Acc for f64 {
    #[inline(always)]
    fn fma(self, b: f64, c: f64) -> f64 {
        self.mul_add(b, c)
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn hsum_avx512(a: &[f64; L]) -> f64 {
        // SAFETY: the caller's (AVX-512F)
        unsafe { x86::f64_avx512(a) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn hsum_avx2(a: &[f64; L]) -> f64 {
        // SAFETY: the caller's (AVX)
        unsafe { x86::f64_avx2(a) }
    }
}

/// How the kernels multiply-add, exponentiate and sum lanes, by CPU: [`Avx512`] and
/// [`Avx2`] (fused multiply-adds, a horizontal sum in one instruction sequence), [`Fused`]
/// (fused multiply-adds elsewhere: aarch64), [`Plain`] (the baseline, where a fused
/// multiply-add would be a library call). `with_madd!` picks one from the CPU, as
/// `multiversion!` picks the tier.
pub trait Madd: Copy + Send + Sync + 'static {
    /// `a * b + c`.
    fn madd<A: Acc>(a: A, b: A, c: A) -> A;
    /// `e^x` for `x <= 0`.
    fn exp<A: Acc>(x: A) -> A;
    /// The sum of 16 lanes: in order where no instruction sequence is known (a pairwise
    /// sum written as code led the compiler to vectorise the loops that fill the lanes two
    /// lanes wide; in order, 15 dependent adds a key).
    #[inline(always)]
    fn hsum<A: Acc>(a: [A; L]) -> A {
        let mut s = A::ZERO;
        for x in a {
            s = s + x;
        }
        s
    }
}

/// Fused multiply-adds.
#[derive(Clone, Copy)]
pub struct Fused;
/// Separate multiply and add.
#[derive(Clone, Copy)]
pub struct Plain;
/// AVX-512: constructed only where the CPU has it ([`Avx512::detect`]).
#[derive(Clone, Copy)]
pub struct Avx512(());
/// AVX2 with FMA: constructed only where the CPU has them ([`Avx2::detect`]).
#[derive(Clone, Copy)]
pub struct Avx2(());

impl Avx512 {
    /// The marker, where the CPU has AVX-512.
    pub fn detect() -> Option<Avx512> {
        #[cfg(target_arch = "x86_64")]
        if masked_kernels::cpu::has_avx512() {
            return Some(Avx512(()));
        }
        None
    }
}

impl Avx2 {
    /// The marker, where the CPU has AVX2 and FMA.
    pub fn detect() -> Option<Avx2> {
        #[cfg(target_arch = "x86_64")]
        if masked_kernels::cpu::has_avx2() {
            return Some(Avx2(()));
        }
        None
    }
}

macro_rules! fused_madd {
    () => {
        #[inline(always)]
        fn madd<A: Acc>(a: A, b: A, c: A) -> A {
            a.fma(b, c)
        }
        #[inline(always)]
        fn exp<A: Acc>(x: A) -> A {
            x.exp_nonpos_fused()
        }
    };
}

impl Madd for Avx512 {
    fused_madd!();
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn hsum<A: Acc>(a: [A; L]) -> A {
        // SAFETY: an `Avx512` exists only where the CPU has AVX-512 (`detect`)
        unsafe { A::hsum_avx512(&a) }
    }
}

impl Madd for Avx2 {
    fused_madd!();
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn hsum<A: Acc>(a: [A; L]) -> A {
        // SAFETY: an `Avx2` exists only where the CPU has AVX2 (`detect`)
        unsafe { A::hsum_avx2(&a) }
    }
}

impl Madd for Fused {
    fused_madd!();
}

impl Madd for Plain {
    #[inline(always)]
    fn madd<A: Acc>(a: A, b: A, c: A) -> A {
        a * b + c
    }
    #[inline(always)]
    fn exp<A: Acc>(x: A) -> A {
        x.exp_nonpos()
    }
}

/// A lower [`Madd`] than the CPU's, for tests: 0 the CPU's, 1 [`Plain`], 2 [`Fused`]
/// (where the CPU has fused multiply-adds), 3 [`Avx2`] (where it has AVX2).
static CAP: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Caps the kernels' [`Madd`] for the tests of the paths this CPU would not take (see
/// [`CAP`]); a cap the CPU cannot run is ignored.
#[doc(hidden)]
pub fn cap_madd(level: u8) {
    CAP.store(level, std::sync::atomic::Ordering::Relaxed);
}

/// The cap (0: none).
#[doc(hidden)]
pub fn madd_cap() -> u8 {
    CAP.load(std::sync::atomic::Ordering::Relaxed)
}

/// Runs `$body` with `$m` bound to the [`Madd`] of this CPU: [`Avx512`], [`Avx2`],
/// [`Fused`] (other CPUs with fused multiply-adds) or [`Plain`] (lower under a test's
/// [`cap_madd`]).
macro_rules! with_madd {
    ($m:ident => $body:expr) => {{
        let cap = $crate::kernels::madd_cap();
        let fused = masked_kernels::cpu::fused_exp();
        if let Some($m) = $crate::kernels::Avx512::detect().filter(|_| cap == 0) {
            $body
        } else if let Some($m) = $crate::kernels::Avx2::detect().filter(|_| cap == 0 || cap >= 3) {
            $body
        } else if fused && cap != 1 {
            let $m = $crate::kernels::Fused;
            $body
        } else {
            let $m = $crate::kernels::Plain;
            $body
        }
    }};
}
pub(crate) use with_madd;

/// A row-major matrix: `data.len() == rows * cols`.
#[derive(Clone, Copy)]
pub struct Mat<'a, A> {
    /// The values.
    pub data: &'a [A],
    /// Row length.
    pub cols: usize,
}

impl<'a, A> Mat<'a, A> {
    #[inline(always)]
    fn row(&self, i: usize) -> &'a [A] {
        &self.data[i * self.cols..(i + 1) * self.cols]
    }
}

/// A compressed index structure: the entries of row `r` are `ptr[r]..ptr[r + 1]` of
/// `idx` (a pattern's rows over `usize` columns, or its transpose's columns over `u32`
/// rows).
#[derive(Clone, Copy)]
pub struct Index<'a, I> {
    /// Row pointer.
    pub ptr: &'a [usize],
    /// Indices.
    pub idx: &'a [I],
}

/// An index into a matrix's rows.
pub trait Idx: Copy + Send + Sync + 'static {
    /// As `usize`.
    fn at(self) -> usize;
}
impl Idx for usize {
    #[inline(always)]
    fn at(self) -> usize {
        self
    }
}
impl Idx for u32 {
    #[inline(always)]
    fn at(self) -> usize {
        self as usize
    }
}

/// Lanes of the accumulator arrays (one AVX-512 register of f32, two of AVX2).
const L: usize = 16;

/// `acc[l] += w * b[l]` over one block.
#[inline(always)]
fn axpy_block<A: Acc, M: Madd>(acc: &mut [A; L], w: A, b: &[A; L]) {
    for l in 0..L {
        acc[l] = M::madd(w, b[l], acc[l]);
    }
}

/// Block `c` (of `L` values) of `x`.
#[inline(always)]
fn block<A>(x: &[A], c: usize) -> &[A; L] {
    x[c..c + L].try_into().expect("a full block")
}

/// `q·k`: sixteen lanes a block, summed at the end.
#[inline(always)]
fn dot1<A: Acc, M: Madd>(q: &[A], k: &[A]) -> A {
    let d = q.len();
    let k = &k[..d];
    let mut acc = [A::ZERO; L];
    // whole blocks as arrays of one length (`as_chunks`): no bounds check in the loop
    let ((qb, qr), (kb, kr)) = (q.as_chunks::<L>(), k.as_chunks::<L>());
    for c in 0..qb.len().min(kb.len()) {
        let (a, b) = (&qb[c], &kb[c]);
        for l in 0..L {
            acc[l] = M::madd(a[l], b[l], acc[l]);
        }
    }
    let mut s = M::hsum(acc);
    for i in 0..qr.len().min(kr.len()) {
        s = M::madd(qr[i], kr[i], s);
    }
    s
}

/// `s[t] = scale · (q · k[keys[t]])`, one key at a time: each dot product is one loop
/// over 16-lane blocks, which the compiler vectorises along the lanes (four keys in one
/// loop were vectorised across the keys instead, four lanes wide with transposes).
#[inline(always)]
fn scores<A: Acc, M: Madd>(q: &[A], k: Mat<'_, A>, keys: &[usize], scale: A, s: &mut [A]) {
    for t in 0..s.len().min(keys.len()) {
        s[t] = dot1::<A, M>(q, k.row(keys[t])) * scale;
    }
}

/// `xs += ys` (a bias added to scores).
#[inline(always)]
fn add_to<A: Acc>(xs: &mut [A], ys: &[A]) {
    for i in 0..xs.len().min(ys.len()) {
        xs[i] = xs[i] + ys[i];
    }
}

/// The sum of `xs`, in 16 lanes.
#[inline(always)]
fn sum_lanes<A: Acc, M: Madd>(xs: &[A]) -> A {
    let mut acc = [A::ZERO; L];
    let (blocks, rest) = xs.as_chunks::<L>();
    for b in blocks {
        for l in 0..L {
            acc[l] = acc[l] + b[l];
        }
    }
    let mut s = M::hsum(acc);
    for &x in rest {
        s = s + x;
    }
    s
}

/// The largest of `xs` (NaN if any is NaN; `-inf` if empty), in 16 lanes.
#[inline(always)]
fn max_lanes<A: Acc>(xs: &[A]) -> A {
    let mx = |a: A, b: A| if b > a || b.is_nan() { b } else { a };
    let mut acc = [A::NEG_INFINITY; L];
    let (blocks, rest) = xs.as_chunks::<L>();
    for b in blocks {
        for l in 0..L {
            acc[l] = mx(acc[l], b[l]);
        }
    }
    let mut m = A::NEG_INFINITY;
    for l in 0..L {
        m = mx(m, acc[l]);
    }
    for &x in rest {
        m = mx(m, x);
    }
    m
}

/// The softmax of one row's scores, in place; returns the largest score `m` and `inv`,
/// the reciprocal of the sum of `exp(s - m)`, so that `p = exp(s - m) · inv` recomputes
/// any probability bit for bit. A row whose scores are all `-inf` (every key biased
/// away) gives zeros and `inv = 0`, as a row with no key does; a NaN score gives NaNs,
/// as in torch.
#[inline(always)]
fn softmax<A: Acc, M: Madd>(s: &mut [A]) -> (A, A) {
    let m = max_lanes(s);
    if m == A::NEG_INFINITY {
        s.fill(A::ZERO);
        return (m, A::ZERO);
    }
    for x in s.iter_mut() {
        *x = M::exp(*x - m);
    }
    let inv = A::ONE / sum_lanes::<A, M>(s);
    for x in s.iter_mut() {
        *x = *x * inv;
    }
    (m, inv)
}

/// Columns [`combine`] keeps in registers at once where the rows are that wide.
const WIDE: usize = 4 * L;

/// `out += Σ_t w[t] · x[idx[t]]` (rows of `x`, as long as `out`): 64 columns at a time
/// in registers, two keys at a time (each key's row located once for its 64 columns),
/// then sixteen columns at a time, four keys at a time.
#[inline(always)]
fn combine<A: Acc, M: Madd, I: Idx>(w: &[A], idx: &[I], x: Mat<'_, A>, out: &mut [A]) {
    let width = out.len();
    let n = idx.len().min(w.len());
    let (w, idx) = (&w[..n], &idx[..n]);
    let n4 = n / 4 * 4;
    let mut c = 0;
    while c + WIDE <= width {
        let (mut a0, mut a1) = ([[A::ZERO; L]; 4], [[A::ZERO; L]; 4]);
        let wide = |t: usize| -> &[A; WIDE] {
            x.row(idx[t].at())[c..c + WIDE]
                .try_into()
                .expect("a full block")
        };
        let mut t = 0;
        while t + 2 <= n {
            let (r0, r1) = (wide(t), wide(t + 1));
            for b in 0..4 {
                axpy_block::<A, M>(&mut a0[b], w[t], block(r0, b * L));
                axpy_block::<A, M>(&mut a1[b], w[t + 1], block(r1, b * L));
            }
            t += 2;
        }
        if t < n {
            let r0 = wide(t);
            for b in 0..4 {
                axpy_block::<A, M>(&mut a0[b], w[t], block(r0, b * L));
            }
        }
        for b in 0..4 {
            let o = &mut out[c + b * L..c + b * L + L];
            for l in 0..L {
                o[l] = o[l] + (a0[b][l] + a1[b][l]);
            }
        }
        c += WIDE;
    }
    while c + L <= width {
        let (mut a0, mut a1, mut a2, mut a3) =
            ([A::ZERO; L], [A::ZERO; L], [A::ZERO; L], [A::ZERO; L]);
        let mut t = 0;
        while t < n4 {
            axpy_block::<A, M>(&mut a0, w[t], block(x.row(idx[t].at()), c));
            axpy_block::<A, M>(&mut a1, w[t + 1], block(x.row(idx[t + 1].at()), c));
            axpy_block::<A, M>(&mut a2, w[t + 2], block(x.row(idx[t + 2].at()), c));
            axpy_block::<A, M>(&mut a3, w[t + 3], block(x.row(idx[t + 3].at()), c));
            t += 4;
        }
        while t < n {
            axpy_block::<A, M>(&mut a0, w[t], block(x.row(idx[t].at()), c));
            t += 1;
        }
        let o: &mut [A; L] = (&mut out[c..c + L]).try_into().expect("a full block");
        for l in 0..L {
            o[l] = o[l] + ((a0[l] + a1[l]) + (a2[l] + a3[l]));
        }
        c += L;
    }
    if c < width {
        let tail = &mut out[c..];
        for t in 0..n {
            let xr = &x.row(idx[t].at())[c..];
            let wt = w[t];
            for i in 0..tail.len().min(xr.len()) {
                tail[i] = M::madd(wt, xr[i], tail[i]);
            }
        }
    }
}

/// What the attention kernels read for one batch element: the queries (`nq × d`), keys
/// (`nk × d`), values (`nk × dv`), the pattern's rows, its bias (one value per stored
/// position, or none) and the scale.
#[derive(Clone, Copy)]
pub struct Attn<'a, A> {
    /// Queries.
    pub q: Mat<'a, A>,
    /// Keys.
    pub k: Mat<'a, A>,
    /// Values.
    pub v: Mat<'a, A>,
    /// The pattern.
    pub p: Index<'a, usize>,
    /// The bias at the pattern's positions.
    pub bias: Option<&'a [A]>,
    /// Scale of the scores.
    pub scale: A,
}

impl<A: Acc> Attn<'_, A> {
    /// Row `i`'s probabilities into `s` (resized to the row's length), its keys and its
    /// softmax statistics (`m`, `inv`: see [`softmax`]).
    #[inline(always)]
    fn probs<M: Madd>(&self, i: usize, s: &mut Vec<A>) -> (&[usize], A, A) {
        let (lo, hi) = (self.p.ptr[i], self.p.ptr[i + 1]);
        let keys = &self.p.idx[lo..hi];
        s.clear();
        s.resize(keys.len(), A::ZERO);
        scores::<A, M>(self.q.row(i), self.k, keys, self.scale, s);
        if let Some(b) = self.bias {
            add_to(s, &b[lo..hi]);
        }
        let (m, inv) = softmax::<A, M>(s);
        (keys, m, inv)
    }
}

/// One query row's statistics, saved by the gradient's row pass for its column pass
/// (O(rows), where the probabilities would be O(pairs)): the softmax's largest score
/// `m` and reciprocal sum `inv` ([`softmax`]), and `d = Σ_j P_ij dP_ij`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RowStat<A> {
    /// The largest score.
    pub m: A,
    /// The reciprocal of `Σ exp(s - m)` (0 for a row with no finite score).
    pub inv: A,
    /// `Σ_j P_ij dP_ij` (= `dO_i · O_i`).
    pub d: A,
}

#[inline(always)]
fn attend_rows_k<A: Acc, M: Madd>(_: M, a: &Attn<'_, A>, r0: usize, r1: usize, out: &mut [A]) {
    let dv = a.v.cols;
    let mut s = Vec::new();
    for i in r0..r1 {
        let (keys, _, _) = a.probs::<M>(i, &mut s);
        combine::<A, M, usize>(&s, keys, a.v, &mut out[(i - r0) * dv..(i - r0 + 1) * dv]);
    }
}

multiversion! {
    /// The attention output of rows `r0..r1` (`dv` values each in `out`, zeroed): each
    /// row's probabilities, then their weighted sum of value rows.
    pub fn attend_rows[A: Acc, M: Madd](m: M, a: &Attn<'_, A>, r0: usize, r1: usize, out: &mut [A]) = attend_rows_k;
}

#[inline(always)]
fn grad_rows_k<A: Acc, M: Madd>(
    _: M, a: &Attn<'_, A>, g: Mat<'_, A>, r0: usize, r1: usize, dq: &mut [A], out: &GradOut<'_, A>,
) {
    let d = a.q.cols;
    let (mut s, mut dp) = (Vec::new(), Vec::new());
    for i in r0..r1 {
        let dqi = &mut dq[(i - r0) * d..(i - r0 + 1) * d];
        let (keys, m, inv) = a.probs::<M>(i, &mut s);
        dp.clear();
        dp.resize(keys.len(), A::ZERO);
        scores::<A, M>(g.row(i), a.v, keys, A::ONE, &mut dp);
        // D = Σ p dp = dO · O; dS = P (dP - D)
        let big_d = dot1::<A, M>(&s, &dp);
        // SAFETY: row i is handled by this task only
        unsafe { out.stats.write(i, RowStat { m, inv, d: big_d }) };
        // SAFETY: the stored positions of row i are handled by this task only
        unsafe { ds_row(&s, &mut dp, big_d, a.scale, out.dbias.as_ref(), a.p.ptr[i]) };
        combine::<A, M, usize>(&dp, keys, a.k, dqi);
    }
}

/// One row's `dS = P (dP - D)` in place of `dP` (scaled by `scale`), its unscaled
/// values added to the bias gradient at the row's stored positions `lo..` (with a bias):
/// the step both row passes (this module's and the key-sliced one) share.
///
/// # Safety
/// No other task accesses `dbias` at positions `lo .. lo + dp.len()` meanwhile.
#[inline(always)]
pub(crate) unsafe fn ds_row<A: Acc>(
    p: &[A], dp: &mut [A], big_d: A, scale: A, dbias: Option<&Scatter<'_, A>>, lo: usize,
) {
    for t in 0..p.len().min(dp.len()) {
        let ds = p[t] * (dp[t] - big_d);
        if let Some(db) = dbias {
            // SAFETY: the caller's (position lo + t is this task's)
            let slot = unsafe { db.slot(lo + t) };
            *slot = *slot + ds;
        }
        dp[t] = ds * scale;
    }
}

/// Where the gradient's row pass writes besides `dQ`: each row's [`RowStat`] (slot =
/// row) and, with a bias, `dS` added at each stored position (slot = position).
pub struct GradOut<'a, A> {
    /// One slot per query row.
    pub stats: Scatter<'a, RowStat<A>>,
    /// One slot per stored position, accumulated (a bias shared by batch elements).
    pub dbias: Option<Scatter<'a, A>>,
}

multiversion! {
    /// The first pass of the attention VJP over rows `r0..r1` (`d` values each in `dq`):
    /// each row's probabilities `P` again, `dP = dO Vᵀ`, `dS = P ⊙ (dP − rowsum(P ⊙ dP))`,
    /// `dQ += scale · dS K` into `dq`; the row's [`RowStat`] and the bias gradient into
    /// `out`. Nothing per pair is kept: the column pass recomputes `P` and `dS`.
    pub fn grad_rows[A: Acc, M: Madd](m: M, a: &Attn<'_, A>, g: Mat<'_, A>, r0: usize, r1: usize, dq: &mut [A], out: &GradOut<'_, A>) = grad_rows_k;
}

/// What the gradient's column pass reads: the forward's operands, the upstream `dO`,
/// the row pass's [`RowStat`]s, the pattern's transpose and, with a bias, each
/// transposed entry's stored position in row order (the plan's `src`).
#[derive(Clone, Copy)]
pub struct GradCols<'a, A> {
    /// The forward's operands and pattern.
    pub a: Attn<'a, A>,
    /// The upstream gradient of the output (`nq × dv`).
    pub g: Mat<'a, A>,
    /// Each query row's statistics.
    pub stats: &'a [RowStat<A>],
    /// The transpose: column pointer and rows.
    pub t: Index<'a, u32>,
    /// Each transposed entry's stored position (read only with a bias).
    pub src: &'a [u32],
}

#[inline(always)]
fn grad_cols_k<A: Acc, M: Madd>(
    _: M, c: &GradCols<'_, A>, (c0, c1): (usize, usize), dk: &mut [A], dv: &mut [A],
) {
    let a = &c.a;
    let (d, dvw) = (a.k.cols, a.v.cols);
    let (mut wp, mut wds) = ([A::ZERO; GROUP], [A::ZERO; GROUP]);
    for j in c0..c1 {
        let (lo, hi) = (c.t.ptr[j], c.t.ptr[j + 1]);
        let (kj, vj) = (a.k.row(j), a.v.row(j));
        let j0 = j - c0;
        let (dkj, dvj) = (
            &mut dk[j0 * d..(j0 + 1) * d],
            &mut dv[j0 * dvw..(j0 + 1) * dvw],
        );
        // a few pairs at a time: their query and upstream rows, gathered for the dot
        // products, are still in the first-level cache when combined
        let mut g0 = lo;
        while g0 < hi {
            let g1 = (g0 + GROUP).min(hi);
            let rows = &c.t.idx[g0..g1];
            for t in 0..g1 - g0 {
                let (e, i) = (g0 + t, rows[t] as usize);
                let st = c.stats[i];
                let (p, ds) = if st.inv == A::ZERO {
                    (A::ZERO, A::ZERO) // a row with no finite score: P = 0
                } else {
                    // P and dS of pair (i, j) as the row pass computed them
                    let mut s = dot1::<A, M>(a.q.row(i), kj) * a.scale;
                    if let Some(b) = a.bias {
                        s = s + b[c.src[e] as usize];
                    }
                    let p = M::exp(s - st.m) * st.inv;
                    let dp = dot1::<A, M>(c.g.row(i), vj);
                    (p, p * (dp - st.d))
                };
                wp[t] = p;
                wds[t] = ds * a.scale;
            }
            let n = g1 - g0;
            combine::<A, M, u32>(&wds[..n], rows, a.q, dkj);
            combine::<A, M, u32>(&wp[..n], rows, c.g, dvj);
            g0 = g1;
        }
    }
}

/// Pairs the column pass handles at a time.
const GROUP: usize = 8;

multiversion! {
    /// The second pass of the attention VJP over key columns `c0..c1` (`dk` and `dv`
    /// hold their rows): each pair's `P` and `dS` recomputed from the row statistics
    /// (two dot products, no per-pair buffer), then `dK_j += scale · Σ_i dS_ij Q_i`
    /// and `dV_j += Σ_i P_ij dO_i` in registers.
    pub fn grad_cols[A: Acc, M: Madd](m: M, c: &GradCols<'_, A>, cols: (usize, usize), dk: &mut [A], dv: &mut [A]) = grad_cols_k;
}

/// A column pass: `out[j] += Σ w[e] · x[row[e]]` over the entries `e` of columns `c0..`
/// of the transpose: `Pᵀ x` for a pattern's values `w` (in column order).
#[derive(Clone, Copy)]
pub struct Cols<'a, A> {
    /// The transpose: column pointer and rows.
    pub t: Index<'a, u32>,
    /// The weights, one a stored position, in column order.
    pub w: &'a [A],
    /// The rows combined.
    pub x: Mat<'a, A>,
}

#[inline(always)]
fn cols_k<A: Acc, M: Madd>(_: M, c: &Cols<'_, A>, c0: usize, out: &mut [A]) {
    let width = c.x.cols.max(1);
    for r in 0..out.len() / width {
        let (j, oj) = (c0 + r, &mut out[r * width..(r + 1) * width]);
        let (lo, hi) = (c.t.ptr[j], c.t.ptr[j + 1]);
        combine::<A, M, u32>(&c.w[lo..hi], &c.t.idx[lo..hi], c.x, oj);
    }
}

multiversion! {
    /// A column pass over columns `c0..` (as many as `out` holds, `x.cols` each).
    pub fn cols[A: Acc, M: Madd](m: M, c: &Cols<'_, A>, c0: usize, out: &mut [A]) = cols_k;
}

#[inline(always)]
fn sddmm_rows_k<A: Acc, M: Madd>(
    _: M, a: Mat<'_, A>, b: Mat<'_, A>, p: Index<'_, usize>, scale: A, (r0, r1): (usize, usize),
    out: &mut [A],
) {
    let base = p.ptr[r0];
    for i in r0..r1 {
        let (lo, hi) = (p.ptr[i], p.ptr[i + 1]);
        scores::<A, M>(
            a.row(i),
            b,
            &p.idx[lo..hi],
            scale,
            &mut out[lo - base..hi - base],
        );
    }
}

multiversion! {
    /// `out = scale · (a bᵀ)` at the stored positions of rows `r0..r1` (`out` holds
    /// exactly their entries).
    pub fn sddmm_rows[A: Acc, M: Madd](m: M, a: Mat<'_, A>, b: Mat<'_, A>, p: Index<'_, usize>, scale: A, rows: (usize, usize), out: &mut [A]) = sddmm_rows_k;
}

#[inline(always)]
fn spmm_rows_k<A: Acc, M: Madd>(
    _: M, vals: &[A], p: Index<'_, usize>, x: Mat<'_, A>, r0: usize, out: &mut [A],
) {
    let width = x.cols.max(1);
    for r in 0..out.len() / width {
        let (i, oi) = (r0 + r, &mut out[r * width..(r + 1) * width]);
        let (lo, hi) = (p.ptr[i], p.ptr[i + 1]);
        combine::<A, M, usize>(&vals[lo..hi], &p.idx[lo..hi], x, oi);
    }
}

multiversion! {
    /// `out += P x` for rows `r0..` of the pattern with values `vals` (as many rows as
    /// `out` holds, `x.cols` each).
    pub fn spmm_rows[A: Acc, M: Madd](m: M, vals: &[A], p: Index<'_, usize>, x: Mat<'_, A>, r0: usize, out: &mut [A]) = spmm_rows_k;
}
