//! Accuracy bounds of the f32 reductions, over 10^8 elements, against an f64 reference
//! (compensated sums of the same f32 values widened to f64, two-pass variance). The
//! bounds asserted here are the ones docs/semantics.md ("Accuracy and integers")
//! states; each test prints the error it measured (`--nocapture`).
//!
//! Inputs: a third of the elements masked out (so the masked path runs), reduced over
//! all dims of a [10^8] array and along dim 1 of a [4, 2.5·10^7] one (the two ways a
//! layout splits and merges the work). The requests go through the dtype-erased
//! boundary (`masked::engine`, the `engine` feature), which runs the kernels its crate
//! compiled: a typed `apply_dense::<f32>` here compiled the whole by-name dispatch into
//! this test at the facade's opt-level 3 (45 s of the test build).

use masked::engine::{Array, OpRequest, Outcome, Output};
use masked::{BitMask, DynVec, Op};

const N: usize = 100_000_000;
/// f32's unit roundoff.
const U32: f64 = 1.0 / (1u64 << 24) as f64;

/// Deterministic uniform [0, 1) values (xorshift64*), and standard normal ones.
struct Rng(u64, Option<f64>);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
    /// A standard normal value (Box–Muller: both of the pair, in turn).
    fn normal(&mut self) -> f64 {
        if let Some(z) = self.1.take() {
            return z;
        }
        let (a, b) = (self.next().max(1e-300), self.next());
        let (r, (s, c)) = (
            (-2.0 * a.ln()).sqrt(),
            (std::f64::consts::TAU * b).sin_cos(),
        );
        self.1 = Some(r * s);
        r * c
    }
}

fn valid(i: usize) -> bool {
    i % 3 != 2
}

/// Neumaier's compensated sum of `f(x)` over the valid elements of each lane.
fn reference(x: &[f32], lanes: usize, f: impl Fn(f64) -> f64) -> Vec<f64> {
    lane_sums(x, lanes, |_, v| f(v))
}

/// Neumaier's compensated sum of `f(lane, x)` over the valid elements of each lane.
fn lane_sums(x: &[f32], lanes: usize, f: impl Fn(usize, f64) -> f64) -> Vec<f64> {
    let len = x.len() / lanes;
    (0..lanes)
        .map(|l| {
            let (mut s, mut c) = (0.0f64, 0.0f64);
            for (i, &v) in x.iter().enumerate().skip(l * len).take(len) {
                if !valid(i) {
                    continue;
                }
                let y = f(l, f64::from(v));
                let t = s + y;
                c += if s.abs() >= y.abs() {
                    (s - t) + y
                } else {
                    (y - t) + s
                };
                s = t;
            }
            s + c
        })
        .collect()
}

fn count(x: &[f32], lanes: usize) -> Vec<f64> {
    reference(x, lanes, |_| 1.0)
}

/// Runs `req` over all dims of `[N]` (one lane) and along dim 1 of `[4, N/4]`.
fn run(x: &[f32], req: OpRequest) -> [(usize, Vec<f64>); 2] {
    // one mask for every call (the same positions are valid in every test)
    static MASK: std::sync::OnceLock<BitMask> = std::sync::OnceLock::new();
    let mask = MASK.get_or_init(|| BitMask::from_bools([N], (0..N).map(valid)).unwrap());
    let out = |shape: &[usize], dim: Option<isize>| -> Vec<f64> {
        let m = mask.clone().reshape(shape).unwrap();
        let a = Array::dense(shape, DynVec::F32(x.to_vec()), Some(m)).unwrap();
        let r = match dim {
            Some(d) => req.clone().dims(masked::Dims::from(d)),
            None => req.clone().dims(masked::Dims::All),
        };
        let Output::Dense(Outcome { values, mask, .. }) = a.view().unwrap().apply(&r).unwrap()
        else {
            panic!("a dense input gives a dense output")
        };
        assert!(mask.all(), "every lane has valid elements");
        match values {
            DynVec::F32(v) => v.into_iter().map(f64::from).collect(),
            other => panic!("f32 output expected, got {other:?}"),
        }
    };
    [(1, out(&[N], None)), (4, out(&[4, N / 4], Some(1)))]
}

/// The largest `|got - want| / scale` over the lanes of both splits.
fn worst(
    x: &[f32], req: OpRequest, want: impl Fn(&[f32], usize) -> Vec<f64>,
    scale: impl Fn(&[f32], usize) -> Vec<f64>,
) -> f64 {
    worst_by(x, req, want, Some(scale))
}

/// The largest `|got - want| / |want|` over the lanes of both splits (the reference
/// computed once: it is its own scale).
fn worst_rel(x: &[f32], req: OpRequest, want: impl Fn(&[f32], usize) -> Vec<f64>) -> f64 {
    worst_by(x, req, want, None::<fn(&[f32], usize) -> Vec<f64>>)
}

fn worst_by(
    x: &[f32], req: OpRequest, want: impl Fn(&[f32], usize) -> Vec<f64>,
    scale: Option<impl Fn(&[f32], usize) -> Vec<f64>>,
) -> f64 {
    run(x, req)
        .into_iter()
        .flat_map(|(lanes, got)| {
            let w = want(x, lanes);
            let s = match &scale {
                Some(f) => f(x, lanes),
                None => w.iter().map(|v| v.abs()).collect(),
            };
            got.into_iter()
                .zip(w.into_iter().zip(s))
                .map(|(g, (w, s))| (g - w).abs() / s)
                .collect::<Vec<_>>()
        })
        .fold(0.0, f64::max)
}

fn data(f: impl Fn(&mut Rng) -> f64) -> Vec<f32> {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15, None);
    (0..N).map(|_| f(&mut r) as f32).collect()
}

/// Sum and mean of positive data: within 4 u relative (u = 2^-24), i.e. 2.4e-7. Sum
/// of mixed signs: within 4 u of the sum of magnitudes.
#[test]
fn f32_sum_and_mean_over_1e8() {
    let x = data(|r| r.next());
    let sum = |x: &[f32], l| reference(x, l, |v| v);
    let mean = |x: &[f32], l| {
        let (s, n) = (sum(x, l), count(x, l));
        s.iter().zip(n).map(|(s, n)| s / n).collect()
    };
    let e = worst_rel(&x, OpRequest::from_op(Op::Sum), sum) / U32;
    println!("sum of U(0,1): {e:.3} u relative");
    assert!(e <= 4.0, "sum: {e} u");
    let e = worst_rel(&x, OpRequest::from_op(Op::Mean), mean) / U32;
    println!("mean of U(0,1): {e:.3} u relative");
    assert!(e <= 4.0, "mean: {e} u");
    let x = data(|r| r.normal());
    let abs = |x: &[f32], l| reference(x, l, f64::abs);
    let e = worst(&x, OpRequest::from_op(Op::Sum), sum, abs) / U32;
    println!("sum of N(0,1): {e:.3} u of the sum of magnitudes");
    assert!(e <= 4.0, "sum of mixed signs: {e} u");
}

/// Variance (correction 1) of 10^4 + N(0, 1), where E[x²] - E[x]² would lose every
/// digit in f32 and most in f64: within 16 u relative (1e-6) of the two-pass f64
/// variance of the same f32 values (they carry their own rounding of 10^4 + z, about
/// 5e-4, which is the data, not an error); std within 8 u. Each block of up to 4096
/// values sums its squared deviations from the block mean in f32 (several
/// accumulators), and blocks merge in f64 (Chan), so the bound does not grow with N.
#[test]
fn f32_var_of_badly_conditioned_data_over_1e8() {
    let x = data(|r| 1e4 + r.normal());
    // two passes in f64, compensated: the mean, then the squared deviations from it
    let var = |x: &[f32], l: usize| -> Vec<f64> {
        let (s, n) = (reference(x, l, |v| v), count(x, l));
        let means: Vec<f64> = s.iter().zip(&n).map(|(s, n)| s / n).collect();
        lane_sums(x, l, |k, v| (v - means[k]) * (v - means[k]))
            .into_iter()
            .zip(n)
            .map(|(m2, n)| m2 / (n - 1.0))
            .collect()
    };
    let e = worst_rel(&x, OpRequest::from_op(Op::Var), var) / U32;
    println!("var of 1e4 + N(0,1): {e:.3} u relative");
    assert!(e <= 16.0, "var: {e} u");
    let std = |x: &[f32], l| var(x, l).into_iter().map(f64::sqrt).collect();
    let e = worst_rel(&x, OpRequest::from_op(Op::Std), std) / U32;
    println!("std of 1e4 + N(0,1): {e:.3} u relative");
    assert!(e <= 8.0, "std: {e} u");
}

/// logsumexp of 10·N(0, 1) (terms from e^-50 to e^50): within 4 u relative; the
/// 2-norm of N(0, 1) and the 1-norm: within 4 u relative.
#[test]
fn f32_logsumexp_and_norm_over_1e8() {
    let x = data(|r| 10.0 * r.normal());
    let lse = |x: &[f32], l| -> Vec<f64> {
        // shift by the lane's maximum, as any stable reference must
        let len = x.len() / l;
        (0..l)
            .map(|k| {
                let m = (k * len..(k + 1) * len)
                    .filter(|&i| valid(i))
                    .map(|i| f64::from(x[i]))
                    .fold(f64::NEG_INFINITY, f64::max);
                let s: f64 = (k * len..(k + 1) * len)
                    .filter(|&i| valid(i))
                    .map(|i| (f64::from(x[i]) - m).exp())
                    .sum();
                m + s.ln()
            })
            .collect()
    };
    let e = worst_rel(&x, OpRequest::from_op(Op::LogSumExp), lse) / U32;
    println!("logsumexp of 10 N(0,1): {e:.3} u relative");
    assert!(e <= 4.0, "logsumexp: {e} u");
    let x = data(|r| r.normal());
    let n2 = |x: &[f32], l| {
        reference(x, l, |v| v * v)
            .into_iter()
            .map(f64::sqrt)
            .collect()
    };
    let n1 = |x: &[f32], l| reference(x, l, f64::abs);
    let e = worst_rel(&x, OpRequest::from_op(Op::Norm), n2) / U32;
    println!("2-norm of N(0,1): {e:.3} u relative");
    assert!(e <= 4.0, "2-norm: {e} u");
    let e = worst_rel(&x, OpRequest::from_op(Op::Norm).ord(1.0), n1) / U32;
    println!("1-norm of N(0,1): {e:.3} u relative");
    assert!(e <= 4.0, "1-norm: {e} u");
}
