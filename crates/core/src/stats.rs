//! Statistical folds: var, std, norm, logsumexp. Each is a mergeable [`Fold`] whose
//! `push_run` makes two vectorised passes over a cache-resident block.

use crate::element::{Element, Float};
use crate::error::{MaskedError, Result};
use crate::fold::{fold_run, Fold, Lanes};
use crate::lane::SoftLanes;
use crate::mask::Bits;
use crate::ops::{blocks, AMaxLanes, MeanLanes};
use crate::Acc;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------- var / std

/// Count, mean and sum of squared deviations of the valid elements: the mergeable state
/// of var and std (Welford per element, Chan et al. to merge).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Moments {
    /// Number of valid elements.
    pub n: i64,
    /// Their mean.
    pub mean: f64,
    /// Sum of squared deviations from the mean.
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
impl<T: Element> Lanes<T> for SqDevLanes<T::Real> {
    type A = T::Real;
    #[inline(always)]
    fn id(&self) -> T::Real {
        <T::Real as Element>::ZERO
    }
    #[inline(always)]
    fn lift(&self, x: T, _: i64) -> T::Real {
        let d = x.to_real() - self.c;
        d * d
    }
    #[inline(always)]
    fn comb(&self, a: T::Real, b: T::Real) -> T::Real {
        a + b
    }
}

/// The moments of one run: per block, the mean from the exact sum lanes, then the
/// squared deviations from it (two passes over an L1/L2-resident block), merged.
fn moments_run<T: Element>(m: &mut Moments, xs: &[T], bits: Option<Bits<'_>>, idx0: i64) {
    blocks(xs, bits, idx0, |b, bb, i| {
        let n = bb.map_or(b.len(), |w| w.count_ones(b.len())) as i64;
        if n == 0 {
            return;
        }
        let sum = T::mean_lane_to_total(fold_run(&MeanLanes, b, bb, i)).as_f64();
        let mean = sum / n as f64;
        // deviations from c = mean rounded to the lane type; then exactly
        // sum((x - mean)^2) = sum((x - c)^2) - n (mean - c)^2
        let c = <T::Real as Float>::from_f64(mean);
        let s: T::Real = fold_run(&SqDevLanes::<T::Real> { c }, b, bb, i);
        let off = mean - c.to_f64();
        let m2 = (s.to_f64() - n as f64 * off * off).max(0.0);
        let m2 = if s.to_f64().is_nan() { f64::NAN } else { m2 };
        m.merge(Moments { n, mean, m2 });
    });
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
    ($(#[$doc:meta])* $op:ident, $name:literal, $finish:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub struct $op {
            /// Subtracted from the count in the denominator (1 = Bessel's correction).
            pub correction: f64,
        }

        impl Default for $op {
            fn default() -> Self {
                $op { correction: 1.0 }
            }
        }

        impl<T: Element> Fold<T> for $op {
            type State = Moments;
            type Output = T::Real;
            fn name(&self) -> &'static str {
                $name
            }
            fn positional(&self) -> bool {
                false
            }
            fn identity(&self) -> Moments {
                Moments::default()
            }
            #[inline]
            fn push(&self, s: &mut Moments, x: T, _: i64) {
                s.push(x.to_f64());
            }
            fn merge(&self, s: &mut Moments, o: Moments) {
                s.merge(o);
            }
            fn finish(&self, s: &Moments) -> T::Real {
                let f: fn(f64) -> f64 = $finish;
                <T::Real as Float>::from_f64(f(s.var(self.correction)))
            }
            fn push_run(&self, s: &mut Moments, xs: &[T], bits: Option<Bits<'_>>, idx0: i64) {
                moments_run(s, xs, bits, idx0);
            }
        }
    };
}

moment_op!(
    /// Masked variance `sum((x - mean)^2) / max(count - correction, 0)`; NaN when fully
    /// masked. Stable (two passes per block, Chan merges), mergeable.
    Var, "var", |v| v
);
moment_op!(
    /// Masked standard deviation: the square root of [`Var`].
    Std, "std", |v| v.sqrt()
);

// ---------------------------------------------------------------- norm

/// Which norm an `ord` names.
#[derive(Debug, Clone, Copy, PartialEq)]
enum NormKind {
    /// Count of non-zero valid elements (NaN counts).
    Zero,
    /// Sum of |x|.
    One,
    /// Euclidean.
    Two,
    /// Max |x|.
    Inf,
    /// Min |x|.
    NegInf,
    /// `(sum |x|^p)^(1/p)`, any other finite non-zero p (negative too).
    P(f64),
}

/// Masked vector norm of order `ord` over the valid elements: `ord` > 0 finite
/// `(sum |x|^ord)^(1/ord)`; 0 counts non-zero elements; `inf` is max |x|; `-inf` min |x|;
/// a negative finite `ord` uses the valid elements only (torch returns 0 there because
/// masked-out zeros take part: not copied). Fully masked: 0, or `+inf` for `-inf` and
/// negative `ord`. Computed in f64.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Norm {
    kind: NormKind,
    ord: f64,
}

impl Norm {
    /// The norm of order `ord`.
    ///
    /// # Errors
    /// [`MaskedError::InvalidArgument`] for a NaN `ord`.
    pub fn new(ord: f64) -> Result<Self> {
        let kind = if ord.is_nan() {
            return Err(MaskedError::InvalidArgument {
                name: "ord",
                value: ord.to_string(),
                reason: "must be a number or +-inf",
            });
        } else if ord == 0.0 {
            NormKind::Zero
        } else if ord == 1.0 {
            NormKind::One
        } else if ord == 2.0 {
            NormKind::Two
        } else if ord == f64::INFINITY {
            NormKind::Inf
        } else if ord == f64::NEG_INFINITY {
            NormKind::NegInf
        } else {
            NormKind::P(ord)
        };
        Ok(Norm { kind, ord })
    }
    /// The order.
    pub fn ord(&self) -> f64 {
        self.ord
    }
}

/// Lane monoid of [`Norm`]: a sum of `g(x)` or a NaN-propagating max/min of |x|.
#[derive(Debug)]
struct NormLanes<G: Fn(f64) -> f64> {
    g: G,
    op: u8, // 0 sum, 1 max, 2 min
}
impl<T: Element, G: Fn(f64) -> f64> Lanes<T> for NormLanes<G> {
    type A = f64;
    #[inline(always)]
    fn id(&self) -> f64 {
        if self.op == 2 {
            f64::INFINITY
        } else {
            0.0
        }
    }
    #[inline(always)]
    fn lift(&self, x: T, _: i64) -> f64 {
        (self.g)(x.to_f64())
    }
    #[inline(always)]
    fn comb(&self, a: f64, b: f64) -> f64 {
        match self.op {
            0 => a + b,
            1 => {
                if (b > a) | b.is_nan() {
                    b
                } else {
                    a
                }
            }
            _ => {
                if (b < a) | b.is_nan() {
                    b
                } else {
                    a
                }
            }
        }
    }
}

impl Norm {
    #[inline(always)]
    fn comb(&self, a: f64, b: f64) -> f64 {
        match self.kind {
            NormKind::Inf => {
                if (b > a) | b.is_nan() {
                    b
                } else {
                    a
                }
            }
            NormKind::NegInf => {
                if (b < a) | b.is_nan() {
                    b
                } else {
                    a
                }
            }
            _ => a + b,
        }
    }
    #[inline(always)]
    fn g(&self, x: f64) -> f64 {
        match self.kind {
            NormKind::Zero => (x != 0.0) as u8 as f64,
            NormKind::One | NormKind::Inf | NormKind::NegInf => x.abs(),
            NormKind::Two => x * x,
            NormKind::P(p) => x.abs().powf(p),
        }
    }
}

impl<T: Element> Fold<T> for Norm {
    type State = f64;
    type Output = T::Real;
    fn name(&self) -> &'static str {
        "norm"
    }
    fn positional(&self) -> bool {
        false
    }
    fn identity(&self) -> f64 {
        if self.kind == NormKind::NegInf {
            f64::INFINITY
        } else {
            0.0
        }
    }
    #[inline]
    fn push(&self, s: &mut f64, x: T, _: i64) {
        *s = self.comb(*s, self.g(x.to_f64()));
    }
    fn merge(&self, s: &mut f64, o: f64) {
        *s = self.comb(*s, o);
    }
    fn finish(&self, s: &f64) -> T::Real {
        let v = match self.kind {
            NormKind::Zero | NormKind::One | NormKind::Inf | NormKind::NegInf => *s,
            NormKind::Two => s.sqrt(),
            NormKind::P(p) => s.powf(1.0 / p),
        };
        <T::Real as Float>::from_f64(v)
    }
    fn push_run(&self, s: &mut f64, xs: &[T], bits: Option<Bits<'_>>, idx0: i64) {
        let r = match self.kind {
            NormKind::Zero => fold_run(
                &NormLanes {
                    g: |x: f64| (x != 0.0) as u8 as f64,
                    op: 0,
                },
                xs,
                bits,
                idx0,
            ),
            NormKind::One => fold_run(
                &NormLanes {
                    g: |x: f64| x.abs(),
                    op: 0,
                },
                xs,
                bits,
                idx0,
            ),
            NormKind::Two => fold_run(
                &NormLanes {
                    g: |x: f64| x * x,
                    op: 0,
                },
                xs,
                bits,
                idx0,
            ),
            NormKind::Inf => fold_run(
                &NormLanes {
                    g: |x: f64| x.abs(),
                    op: 1,
                },
                xs,
                bits,
                idx0,
            ),
            NormKind::NegInf => fold_run(
                &NormLanes {
                    g: |x: f64| x.abs(),
                    op: 2,
                },
                xs,
                bits,
                idx0,
            ),
            NormKind::P(p) => fold_run(
                &NormLanes {
                    g: move |x: f64| x.abs().powf(p),
                    op: 0,
                },
                xs,
                bits,
                idx0,
            ),
        };
        *s = self.comb(*s, r);
    }
}

// ---------------------------------------------------------------- logsumexp

/// Masked `log(sum(exp(x)))`, overflow-safe (max-shifted), mergeable: the state is the
/// running max and the sum of `exp(x - max)`. A valid `+inf` gives `+inf`, a valid NaN
/// NaN; a lane whose valid values are all `-inf`, or a fully masked lane, gives `-inf`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogSumExp;

/// State of [`LogSumExp`]: `(max, sum of exp(x - max))`.
pub type LseState = (f64, f64);

#[inline]
fn lse_merge(a: &mut LseState, b: LseState) {
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

impl<T: Element> Fold<T> for LogSumExp {
    type State = LseState;
    type Output = T::Real;
    fn name(&self) -> &'static str {
        "logsumexp"
    }
    fn positional(&self) -> bool {
        false
    }
    fn identity(&self) -> LseState {
        (f64::NEG_INFINITY, 0.0)
    }
    #[inline]
    fn push(&self, s: &mut LseState, x: T, _: i64) {
        lse_merge(s, (x.to_f64(), 1.0));
    }
    fn merge(&self, s: &mut LseState, o: LseState) {
        lse_merge(s, o);
    }
    fn finish(&self, s: &LseState) -> T::Real {
        let v = if s.0.is_nan() || s.0.is_infinite() {
            s.0
        } else {
            s.0 + s.1.ln()
        };
        <T::Real as Float>::from_f64(v)
    }
    fn push_run(&self, s: &mut LseState, xs: &[T], bits: Option<Bits<'_>>, idx0: i64) {
        blocks(xs, bits, idx0, |b, bb, i| {
            let m: T = fold_run(&AMaxLanes, b, bb, i);
            let mf = m.to_f64();
            if mf.is_nan() || mf.is_infinite() {
                lse_merge(s, (mf, if mf == f64::INFINITY { 1.0 } else { 0.0 }));
                return;
            }
            let shift = m.to_real();
            let sum: T::Real = fold_run(&SoftLanes::<T::Real, false> { shift }, b, bb, i);
            // the shift was rounded to T::Real: account for it exactly in f64
            lse_merge(s, (shift.to_f64(), sum.to_f64()));
        });
    }
}
