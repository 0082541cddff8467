//! Vector-Jacobian products of the reductions and normalizations, each written once as a
//! [`LaneGrad`] value: the gradient of one lane's valid values given the upstream
//! gradient of that lane's output. A layout gathers each lane's valid values (in lane
//! order, which is row-major order within the lane) and the upstream gradient, and
//! scatters the result back to the valid positions; every other position gets 0.
//!
//! The rules are those of the semantics contract ("Gradients"): no NaN or inf from a
//! masked-out position or a fully masked lane (a fully masked lane has no valid value,
//! so nothing of it reaches a gradient); count ≤ correction and zero spread give 0;
//! ties of amax/amin split the gradient evenly; a median or quantile sends its weights
//! to the order statistics ranked by (value, lane position); a lane whose forward output
//! is NaN because of a valid NaN gets NaN at its valid positions.
//!
//! Lanes are computed in `f64` whatever the input type: the gradients of var, norm and
//! the softmax family lose nothing to the input's rounding, and the layouts round once
//! to the output type.

use crate::element::Element;
use crate::error::{MaskedError, Result};
use crate::lane::{Interpolation, MedianMode};
use crate::scattered::{LaneIds, Scattered};
use crate::stats::check_correction;
use crate::unary::sgn;

/// What the upstream gradient of a lane is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upstream {
    /// One value per lane: the op is a reduction over the lane.
    PerLane,
    /// One value per valid element of the lane: the op maps the lane (softmax, cumsum).
    PerElement,
}

/// The vector-Jacobian product of a lane op, written once for every layout.
pub trait LaneGrad: Send + Sync + 'static {
    /// The op's name, for messages.
    fn name(&self) -> &'static str;
    /// Whether `g` holds one value per lane or one per valid element.
    fn upstream(&self) -> Upstream;
    /// The gradient of the lane whose valid values are `xs` (in lane order, at least one)
    /// given the upstream gradient `g` (one value, or `xs.len()` values in the same
    /// order), written to `out` (`xs.len()` values).
    fn grad(&self, xs: &[f64], g: &[f64], out: &mut [f64]);
    /// Whether [`LaneGrad::grad_from_output`] reads the forward output (when false, a
    /// layout given the saved output does not gather it).
    fn uses_output(&self) -> bool {
        false
    }
    /// Whether [`LaneGrad::grad_from_output`] reads the lane's values as well (when
    /// false, a layout given the saved output does not gather them, and `xs` holds
    /// placeholders of the right length).
    fn reads_input_with_output(&self) -> bool {
        true
    }
    /// [`LaneGrad::grad`] given the lane's saved forward output `ys`: one value (a
    /// reduction's output) or one per valid element (a map's), so the backward pass does
    /// not recompute what the forward pass found (a softmax's `exp`, a median's
    /// selection, a norm's powers). The default recomputes.
    fn grad_from_output(&self, xs: &[f64], ys: &[f64], g: &[f64], out: &mut [f64]) {
        let _ = ys;
        self.grad(xs, g, out);
    }
    /// When the gradient of a lane with `n` valid elements (at least one) and upstream `g`
    /// (a reduction's, one value) is one value at every valid element whatever their
    /// values, that value: a layout then writes it under the mask without reading the
    /// lane (a sum's `g`, a mean's `g / n`). `None` (the default): the values matter.
    /// Must equal what [`LaneGrad::grad`] writes at each element, bit for bit.
    fn uniform(&self, n: usize, g: f64) -> Option<f64> {
        let _ = (n, g);
        None
    }
    /// Whether [`LaneGrad::uniform`] reads the lane's count (a mean's does, a sum's
    /// not): where it does not, a layout need not count each lane's elements. True by
    /// default.
    fn uniform_reads_count(&self) -> bool {
        true
    }
    /// For a reduction whose gradient at each valid element is a step from that
    /// element's value and its lane's constants ([`LaneConsts`]: the upstream, the
    /// saved output, the count and one statistic folded over the lane), the statistic;
    /// a sparse layout then computes the gradient across its entries in storage order,
    /// with no sort into lane order ([`scattered_grad`]). `None` (the default): the op
    /// has no such form.
    fn lane_fold(&self) -> Option<LaneFold> {
        None
    }
    /// Whether the step applies to a lane with these constants (false: the layout takes
    /// the general path for every lane, as a saved extremum that no element equals
    /// needs). True by default.
    fn lane_applies(&self, c: &LaneConsts) -> bool {
        let _ = c;
        true
    }
    /// The gradient at a valid element of value `x` of a lane with constants `c`: the
    /// value [`LaneGrad::grad_from_output`] (given the saved output) or
    /// [`LaneGrad::grad`] writes there, bit for bit but for the statistic's order of
    /// summation. Only called where [`LaneGrad::lane_fold`] is `Some` and
    /// [`LaneGrad::lane_applies`] holds.
    fn lane_step(&self, x: f64, c: &LaneConsts) -> f64 {
        let _ = (x, c);
        0.0
    }
    /// A shortcut of [`LaneGrad::grad_from_output`] given the saved output `ys` and the
    /// upstream `g` as the layout holds them (packed, in the output type): reads the
    /// lane's values `xs` in their own type and writes the gradient straight into `out`
    /// (`xs.len()` values, each computed in `f64` and rounded once), in the kernels'
    /// vectorised loops, with no `f64` copy of the lane. Returns false (and writes
    /// nothing) where it does not apply; the caller then takes the `f64` path. The
    /// default never applies.
    fn typed_from_output<T: Element>(
        &self, xs: &[T], ys: LaneValues<'_, T::Real>, g: LaneValues<'_, T::Real>,
        out: &mut [T::Real],
    ) -> bool {
        let _ = (xs, ys, g, out);
        false
    }
    /// [`LaneGrad::typed_from_output`] for a layout that holds the lane unpacked (the
    /// dense layout's contiguous lanes): `ys` and `g` are the saved output and upstream
    /// packed (what the op sums over the lane), `spread` the same two unpacked with the
    /// lane's validity, and the gradient goes straight to the unpacked `out` (0 at the
    /// invalid positions), with no packed result to expand. Bit for bit the values of
    /// [`LaneGrad::typed_from_output`]. Returns false (and writes nothing) where it does
    /// not apply; the default never applies.
    fn typed_spread_from_output<R: crate::element::Float>(
        &self, ys: &[R], g: &[R], spread: Spread<'_, R>, out: &mut [R],
    ) -> bool {
        let _ = (ys, g, spread, out);
        false
    }
    /// For a map's gradient that is one statistic of each lane and then a step at each
    /// position from its own values and that statistic (softmax and softmin), the two
    /// halves ([`RowStatistic`]): a layout whose lanes lie across its rows then computes
    /// the statistics a lane at a time and the steps a row at a time. `None` (the
    /// default) where the gradient is not of that form.
    fn row_statistic(&self) -> Option<RowStatistic> {
        None
    }
    /// A shortcut of [`LaneGrad::grad`] (of [`LaneGrad::grad_from_output`] when `saved`
    /// is given) for a reduction's lane as the layout holds it: its valid values `xs`
    /// packed in their own type, `g` one value, the gradient straight into the packed
    /// `out` (`xs.len()` values), each computed in `f64` and rounded once, the same
    /// values bit for bit, with no `f64` copy of the lane (var and std: their sums over
    /// eight accumulators read `xs` as they are; amax and amin: their ties counted).
    /// `spread`, where the layout holds the lane unpacked (the dense layout's contiguous
    /// lanes): its positions and their validity; the gradient then goes straight to the
    /// unpacked `out` (0 at the invalid positions), with no packed result to expand, the
    /// same values. Returns false (and writes nothing) where it does not apply; the
    /// default never applies.
    fn typed_lane<T: Element>(
        &self, xs: &[T], spread: Option<(&[T], masked_kernels::Bits<'_>)>,
        g: LaneValues<'_, T::Real>, saved: LaneValues<'_, T::Real>, out: &mut [T::Real],
    ) -> bool {
        let _ = (xs, spread, g, saved, out);
        false
    }
    /// Whether the gradient at each element is a function of that element's value and
    /// upstream alone (a unary elementwise op's, `g · f'(x)`): then
    /// [`LaneGrad::typed_each`] applies to every float dtype, over any run of elements,
    /// and a layout may run it over its values without forming lanes. False by default.
    fn elementwise(&self) -> bool {
        false
    }
    /// The gradient of an [elementwise](LaneGrad::elementwise) op over a run, in the
    /// kernels' vectorised loops: `out[k]` from `xs[k]` and `g[k]` where bit `k` of `bits`
    /// is set (all for `None`), 0 elsewhere; the common length of the three. Returns
    /// false (and writes nothing) where it does not apply; the default never applies.
    fn typed_each<T: Element>(
        &self, xs: &[T], bits: Option<masked_kernels::Bits<'_>>, g: &[T::Real], out: &mut [T::Real],
    ) -> bool {
        let _ = (xs, bits, g, out);
        false
    }
}

/// A lane's saved output and upstream as a layout holds them unpacked, with the lane's
/// validity: the argument of [`LaneGrad::typed_spread_from_output`].
#[derive(Debug, Clone, Copy)]
pub struct Spread<'a, R> {
    /// The saved output, one value per position of the lane.
    pub ys: &'a [R],
    /// The upstream, one value per position of the lane.
    pub g: &'a [R],
    /// The lane's validity.
    pub bits: masked_kernels::Bits<'a>,
}

/// What a reduction's gradient folds over each lane before its step at each element
/// ([`LaneGrad::lane_fold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneFold {
    /// Nothing beyond the count of valid elements.
    Count,
    /// The elements equal to the lane's saved output (an extremum's ties).
    Ties,
    /// The sum of the elements (for a mean).
    Sum,
}

/// A lane's constants in a reduction's gradient step ([`LaneGrad::lane_step`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LaneConsts {
    /// The upstream gradient of the lane's output (0 where the output is not valid).
    pub g: f64,
    /// The saved output (NaN where the op reads none).
    pub y: f64,
    /// The lane's valid elements.
    pub n: usize,
    /// The statistic of [`LaneGrad::lane_fold`]: the ties' count or the sum (0 for
    /// [`LaneFold::Count`]).
    pub stat: f64,
}

/// `g` everywhere: the gradient of a sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SumGrad;

impl LaneGrad for SumGrad {
    fn name(&self) -> &'static str {
        "sum"
    }
    fn upstream(&self) -> Upstream {
        Upstream::PerLane
    }
    fn grad(&self, _: &[f64], g: &[f64], out: &mut [f64]) {
        out.fill(g[0]);
    }
    fn uniform(&self, _: usize, g: f64) -> Option<f64> {
        Some(g)
    }
    fn uniform_reads_count(&self) -> bool {
        false
    }
}

/// `g / count`: the gradient of a mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MeanGrad;

impl LaneGrad for MeanGrad {
    fn name(&self) -> &'static str {
        "mean"
    }
    fn upstream(&self) -> Upstream {
        Upstream::PerLane
    }
    fn grad(&self, xs: &[f64], g: &[f64], out: &mut [f64]) {
        out.fill(g[0] / xs.len() as f64);
    }
    fn uniform(&self, n: usize, g: f64) -> Option<f64> {
        Some(g / n as f64)
    }
}

/// The product of the other valid elements, from prefix and suffix products: exact with
/// zeros (no division by the element).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProdGrad;

impl LaneGrad for ProdGrad {
    fn name(&self) -> &'static str {
        "prod"
    }
    fn upstream(&self) -> Upstream {
        Upstream::PerLane
    }
    /// `prefix(i) · suffix(i)`: the product of the elements before `i` times `g` and
    /// the product of those after it, each a serial chain of multiplies (four cycles an
    /// element). A lane of `BOTH_CHAINS` or more runs the two chains in one loop (the
    /// suffixes into a scratch lane), which halves the wait; the same products, bit for
    /// bit.
    fn grad(&self, xs: &[f64], g: &[f64], out: &mut [f64]) {
        const BOTH_CHAINS: usize = 64;
        let n = xs.len();
        if n >= BOTH_CHAINS {
            let (out, mut suffix) = (&mut out[..n], vec![0.0; n]);
            let (mut p, mut s) = (1.0, g[0]);
            for k in 0..n {
                let j = n - 1 - k;
                out[k] = p;
                p *= xs[k];
                suffix[j] = s;
                s *= xs[j];
            }
            for (o, s) in out.iter_mut().zip(suffix) {
                *o *= s;
            }
            return;
        }
        // out[i] = prefix(i) first, then times the suffix product from the right
        let mut p = 1.0;
        for (o, &x) in out.iter_mut().zip(xs) {
            *o = p;
            p *= x;
        }
        let mut s = g[0];
        for (o, &x) in out.iter_mut().zip(xs).rev() {
            *o *= s;
            s *= x;
        }
    }
}

/// `g` split evenly among the valid elements equal to the extremum (torch's rule); NaN
/// everywhere in a lane holding a NaN (the forward output is NaN).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtremumGrad {
    /// The maximum (amax) rather than the minimum (amin).
    pub max: bool,
}

impl LaneGrad for ExtremumGrad {
    fn name(&self) -> &'static str {
        if self.max {
            "amax"
        } else {
            "amin"
        }
    }
    fn upstream(&self) -> Upstream {
        Upstream::PerLane
    }
    fn grad(&self, xs: &[f64], g: &[f64], out: &mut [f64]) {
        if nan_lane(xs, out) {
            return;
        }
        let m = if self.max {
            xs.iter().copied().fold(f64::NEG_INFINITY, f64::max)
        } else {
            xs.iter().copied().fold(f64::INFINITY, f64::min)
        };
        split_evenly(xs, |x| x == m, g[0], out);
    }
    fn uses_output(&self) -> bool {
        true
    }
    fn lane_fold(&self) -> Option<LaneFold> {
        Some(LaneFold::Ties)
    }
    /// A saved extremum that no element equals recomputes (the general path).
    fn lane_applies(&self, c: &LaneConsts) -> bool {
        c.y.is_nan() || c.stat > 0.0
    }
    /// `g / ties` at the elements equal to the saved extremum, 0 elsewhere; NaN for a
    /// NaN extremum.
    fn lane_step(&self, x: f64, c: &LaneConsts) -> f64 {
        if c.y.is_nan() {
            f64::NAN
        } else if x == c.y {
            c.g / c.stat
        } else {
            0.0
        }
    }
    /// The saved extremum names the tied elements: one pass, no search for it. A NaN
    /// output (a valid NaN) gives NaN; a value no element equals recomputes.
    fn grad_from_output(&self, xs: &[f64], ys: &[f64], g: &[f64], out: &mut [f64]) {
        let m = ys[0];
        if m.is_nan() {
            out.fill(f64::NAN);
        } else if xs.contains(&m) {
            split_evenly(xs, |x| x == m, g[0], out);
        } else {
            self.grad(xs, g, out);
        }
    }
    /// The extremum (the saved one, else found in the packed `xs`; NaN where the lane
    /// holds a NaN), its ties counted in `xs`, and `g / ties` at each valid position
    /// equal to it, 0 elsewhere; NaN at every valid position for a NaN extremum. The
    /// values of [`LaneGrad::grad`] and [`LaneGrad::grad_from_output`] (a count is
    /// exact); false where a saved extremum is no element's (those recompute).
    fn typed_lane<T: Element>(
        &self, xs: &[T], spread: Option<(&[T], masked_kernels::Bits<'_>)>,
        g: LaneValues<'_, T::Real>, saved: LaneValues<'_, T::Real>, out: &mut [T::Real],
    ) -> bool {
        let LaneValues::One(gv) = g else {
            return false;
        };
        let m = match saved {
            LaneValues::One(y) => y.to_f64(),
            LaneValues::Absent if xs.iter().any(|x| x.is_nan()) => f64::NAN,
            LaneValues::Absent => {
                let pick = if self.max { f64::max } else { f64::min };
                let start = if self.max {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                };
                xs.iter().fold(start, |a, x| pick(a, x.to_f64()))
            }
            LaneValues::Each(_) => return false,
        };
        let ties = xs.iter().filter(|x| x.to_f64() == m).count();
        if ties == 0 && !m.is_nan() {
            return false;
        }
        let nan = m.is_nan();
        let share = if nan {
            f64::NAN
        } else {
            gv.to_f64() / ties as f64
        };
        typed_map(
            xs,
            spread,
            out,
            #[inline(always)]
            move |x| if nan || x == m { share } else { 0.0 },
        );
        true
    }
}

/// Fills `out` with NaN and returns true when `xs` holds a NaN.
fn nan_lane(xs: &[f64], out: &mut [f64]) -> bool {
    let nan = xs.iter().any(|x| x.is_nan());
    if nan {
        out.fill(f64::NAN);
    }
    nan
}

/// `g / k` at the `k` elements `pick` selects, 0 elsewhere.
fn split_evenly(xs: &[f64], pick: impl Fn(f64) -> bool, g: f64, out: &mut [f64]) {
    let k = xs.iter().filter(|&&x| pick(x)).count();
    let share = if k == 0 { 0.0 } else { g / k as f64 };
    for (o, &x) in out.iter_mut().zip(xs) {
        *o = if pick(x) { share } else { 0.0 };
    }
}

/// The gradient of var (`std: false`) or std with a correction: `2 (x - mean) / (n - c)`
/// for var, `(x - mean) / ((n - c) std)` for std; 0 when `n <= c`, and 0 for std with
/// zero spread.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VarGrad {
    correction: f64,
    std: bool,
}

impl VarGrad {
    /// The gradient of var (or std) with `correction`.
    ///
    /// # Errors
    /// A negative or NaN correction.
    pub fn new(correction: f64, std: bool) -> Result<Self> {
        Ok(VarGrad {
            correction: check_correction(correction)?,
            std,
        })
    }
}

impl LaneGrad for VarGrad {
    fn name(&self) -> &'static str {
        if self.std {
            "std"
        } else {
            "var"
        }
    }
    fn upstream(&self) -> Upstream {
        Upstream::PerLane
    }
    fn grad(&self, xs: &[f64], g: &[f64], out: &mut [f64]) {
        self.grad_with(xs, g, out, None);
    }
    fn uses_output(&self) -> bool {
        self.std
    }
    fn lane_fold(&self) -> Option<LaneFold> {
        Some(LaneFold::Sum)
    }
    /// std reads its saved spread: an infinite one is computed again (the general path).
    fn lane_applies(&self, c: &LaneConsts) -> bool {
        !self.std || !c.y.is_infinite()
    }
    /// `scale · (x - mean)` as `VarGrad::affine_with` gives them (the mean from the
    /// folded sum), 0 where the count is at most the correction or std's spread is 0;
    /// NaN for std's NaN spread (a lane holding a NaN or an inf, whose spread computed
    /// again is NaN too).
    fn lane_step(&self, x: f64, c: &LaneConsts) -> f64 {
        let n = c.n as f64;
        let dof = n - self.correction;
        if dof <= 0.0 || (self.std && c.y == 0.0) {
            return 0.0;
        }
        if self.std && c.y.is_nan() {
            return f64::NAN;
        }
        let scale = if self.std {
            c.g / (dof * c.y)
        } else {
            2.0 * c.g / dof
        };
        scale * (x - c.stat / n)
    }
    /// std reads its saved output as the spread (no second pass for it); var needs only
    /// the mean, one pass over the lane, and recomputes.
    fn grad_from_output(&self, xs: &[f64], ys: &[f64], g: &[f64], out: &mut [f64]) {
        let sd = ys[0];
        self.grad_with(xs, g, out, (self.std && sd.is_finite()).then_some(sd));
    }
    /// The lane's `(scale, mean)` from the packed `xs`, then `scale · (x - mean)` at every
    /// valid position, 0 elsewhere (computed at every position, then selected: a masked
    /// load made the loop wait).
    fn typed_lane<T: Element>(
        &self, xs: &[T], spread: Option<(&[T], masked_kernels::Bits<'_>)>,
        g: LaneValues<'_, T::Real>, saved: LaneValues<'_, T::Real>, out: &mut [T::Real],
    ) -> bool {
        let LaneValues::One(gv) = g else {
            return false;
        };
        match self.affine(xs, gv.to_f64(), saved) {
            Some((scale, mean)) => typed_map(
                xs,
                spread,
                out,
                #[inline(always)]
                move |x| scale * (x - mean),
            ),
            None => typed_map(xs, spread, out, |_| 0.0),
        }
        true
    }
}

/// `f(x)` (in `f64`, rounded once) at every valid position of a lane, 0 elsewhere: over
/// the packed `xs`, or over the unpacked lane and its validity where `spread` gives them
/// (computed at every position, then selected: a masked load made the loop wait). The
/// typed lanes' one writer; pass a `move` closure.
fn typed_map<T: Element>(
    xs: &[T], spread: Option<(&[T], masked_kernels::Bits<'_>)>, out: &mut [T::Real],
    f: impl Fn(f64) -> f64 + Copy,
) {
    let (at, bits) = spread.map_or((xs, None), |(a, b)| (a, Some(b)));
    let zero = <T::Real as Element>::ZERO;
    let to = <T::Real as crate::element::Float>::from_f64;
    masked_kernels::run::map_run(
        at,
        bits,
        &mut out[..at.len()],
        #[inline(always)]
        move |x: T, valid| {
            let v = to(f(x.to_f64()));
            if valid {
                v
            } else {
                zero
            }
        },
    );
}

impl VarGrad {
    /// The gradient, with std's spread `sd` given or computed.
    fn grad_with(&self, xs: &[f64], g: &[f64], out: &mut [f64], sd: Option<f64>) {
        let Some((scale, mean)) = self.affine_with(xs, g[0], sd) else {
            out.fill(0.0);
            return;
        };
        for (o, &x) in out.iter_mut().zip(xs) {
            *o = scale * (x - mean);
        }
    }

    /// The gradient of the lane `xs` (in its own type, read as `f64`) is
    /// `scale · (x - mean)`: `(scale, mean)`, or `None` where it is 0 everywhere (count
    /// at most the correction; std with zero spread). std takes its spread from the saved
    /// output where it is given and finite, as [`LaneGrad::grad_from_output`] does.
    fn affine<T: Element>(
        &self, xs: &[T], g: f64, saved: LaneValues<'_, T::Real>,
    ) -> Option<(f64, f64)> {
        let sd = match saved {
            LaneValues::One(y) if self.std && y.to_f64().is_finite() => Some(y.to_f64()),
            _ => None,
        };
        self.affine_with(xs, g, sd)
    }

    /// [`VarGrad::affine`] with std's spread `sd` given or computed: one code for the
    /// `f64` lanes and the typed ones, so both give the same values bit for bit.
    #[inline(always)]
    fn affine_with<T: Element>(&self, xs: &[T], g: f64, sd: Option<f64>) -> Option<(f64, f64)> {
        let n = xs.len() as f64;
        let dof = n - self.correction;
        if dof <= 0.0 {
            return None;
        }
        // sums over eight accumulators (a serial f64 sum waits four cycles an element)
        let mean = sum8(
            xs,
            xs,
            #[inline(always)]
            |x: T, _| x.to_f64(),
        ) / n;
        let scale = if self.std {
            let sd = sd.unwrap_or_else(|| {
                let ss = sum8(
                    xs,
                    xs,
                    #[inline(always)]
                    move |x: T, _| (x.to_f64() - mean) * (x.to_f64() - mean),
                );
                (ss / dof).sqrt()
            });
            if sd == 0.0 {
                return None;
            }
            g / (dof * sd)
        } else {
            2.0 * g / dof
        };
        Some((scale, mean))
    }
}

/// The gradient of a vector norm of order `ord`: `sign(x) |x|^(p-1) / norm^(p-1)`; 0 at
/// a zero norm and for ord 0; inf / -inf split evenly among the extremal `|x|` times
/// their signs (so 0 where the extremum is 0: a lane of zeros gets 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NormGrad {
    ord: f64,
}

impl NormGrad {
    /// The gradient of the `ord` norm.
    ///
    /// # Errors
    /// A NaN `ord`.
    pub fn new(ord: f64) -> Result<Self> {
        let ord = MaskedError::not_nan("ord", ord, crate::stats::ORD_REASON)?;
        Ok(NormGrad { ord })
    }
    /// The norm of `xs` (f64), as the forward op computes it (its sums over eight
    /// accumulators, [`sum8`]: a serial `f64` sum waits four cycles an element).
    fn norm(&self, xs: &[f64]) -> f64 {
        let p = self.ord;
        if p == f64::INFINITY {
            xs.iter().fold(0.0, |m, x| m.max(x.abs()))
        } else if p == f64::NEG_INFINITY {
            xs.iter().fold(f64::INFINITY, |m, x| m.min(x.abs()))
        } else if p == 1.0 {
            sum8(xs, xs, |x: f64, _| x.abs())
        } else if p == 2.0 {
            sum8(xs, xs, |x: f64, _| x * x).sqrt()
        } else {
            sum8(xs, xs, |x: f64, _| x.abs().powf(p)).powf(1.0 / p)
        }
    }
}

impl LaneGrad for NormGrad {
    fn name(&self) -> &'static str {
        "norm"
    }
    fn upstream(&self) -> Upstream {
        Upstream::PerLane
    }
    fn grad(&self, xs: &[f64], g: &[f64], out: &mut [f64]) {
        let n = if self.ord == 0.0 { 0.0 } else { self.norm(xs) };
        self.grad_with(xs, g, out, n);
    }
    fn uses_output(&self) -> bool {
        true
    }
    /// The saved norm: no second pass of powers for it (a NaN lane recomputes, to
    /// report NaN).
    fn grad_from_output(&self, xs: &[f64], ys: &[f64], g: &[f64], out: &mut [f64]) {
        if ys[0].is_nan() {
            return self.grad(xs, g, out);
        }
        self.grad_with(xs, g, out, ys[0]);
    }
    /// Finite nonzero orders (a lane's saved norm is then NaN exactly where it holds a
    /// NaN); order 0 and the infinite ones have no step form.
    fn lane_fold(&self) -> Option<LaneFold> {
        (self.ord.is_finite() && self.ord != 0.0).then_some(LaneFold::Count)
    }
    /// [`NormGrad`]'s `grad_with` at one element given the saved norm: NaN for a lane
    /// holding a NaN, 0 for a zero or infinite norm.
    fn lane_step(&self, x: f64, c: &LaneConsts) -> f64 {
        let n = c.y;
        if n.is_nan() {
            return f64::NAN;
        }
        if n == 0.0 || !n.is_finite() {
            return 0.0;
        }
        c.g * self.slope(x, n)
    }
    /// Orders 0, 1, 2 and ±inf on the lane in its own type: the norm (the saved one,
    /// else summed as the `f64` lane sums it), then one vectorised pass writing the
    /// values of [`LaneGrad::grad`], bit for bit. A lane holding a NaN or an inf,
    /// and the other orders (a `powf` per element), take the `f64` path.
    fn typed_lane<T: Element>(
        &self, xs: &[T], spread: Option<(&[T], masked_kernels::Bits<'_>)>,
        g: LaneValues<'_, T::Real>, saved: LaneValues<'_, T::Real>, out: &mut [T::Real],
    ) -> bool {
        let p = self.ord;
        let LaneValues::One(gv) = g else {
            return false;
        };
        let gv = gv.to_f64();
        if !(p == 0.0 || p == 1.0 || p == 2.0 || p.is_infinite()) {
            return false;
        }
        // NaN where the lane holds a NaN or an inf (the f64 path's NaN lane, and an
        // infinite norm): one vectorised pass, unless the norm summed below tells (orders
        // 1 and 2 without a saved norm: NaN with a NaN in the lane, and an inf gives the
        // f64 path's zeros as well)
        let summed = matches!(saved, LaneValues::Absent) && (p == 1.0 || p == 2.0);
        if !summed
            && sum8(
                xs,
                xs,
                #[inline(always)]
                |x: T, _| x.to_f64() * 0.0,
            )
            .is_nan()
        {
            return false;
        }
        if p == 0.0 {
            typed_map(xs, spread, out, |_| 0.0);
            return true;
        }
        let n = match saved {
            LaneValues::One(y) if !y.to_f64().is_nan() => y.to_f64(),
            LaneValues::Each(_) => return false,
            _ if p.is_infinite() => {
                let pick = if p > 0.0 { f64::max } else { f64::min };
                let start = if p > 0.0 { 0.0 } else { f64::INFINITY };
                xs.iter().fold(start, |m, x| pick(m, x.to_f64().abs()))
            }
            _ if p == 1.0 => sum8(
                xs,
                xs,
                #[inline(always)]
                |x: T, _| x.to_f64().abs(),
            ),
            _ => sum8(
                xs,
                xs,
                #[inline(always)]
                |x: T, _| x.to_f64() * x.to_f64(),
            )
            .sqrt(),
        };
        if n.is_nan() {
            return false; // a NaN in the lane: the f64 path's NaN lane
        }
        if p.is_infinite() {
            // as `split_evenly`, then times the sign
            let k = xs.iter().filter(|x| x.to_f64().abs() == n).count();
            let share = if k == 0 { 0.0 } else { gv / k as f64 };
            typed_map(
                xs,
                spread,
                out,
                #[inline(always)]
                move |x| (if x.abs() == n { share } else { 0.0 }) * sgn(x),
            );
        } else if n == 0.0 || !n.is_finite() {
            typed_map(xs, spread, out, |_| 0.0);
        } else if p == 1.0 {
            typed_map(
                xs,
                spread,
                out,
                #[inline(always)]
                move |x| gv * sgn(x),
            );
        } else {
            typed_map(
                xs,
                spread,
                out,
                #[inline(always)]
                move |x| gv * (x / n),
            );
        }
        true
    }
}

impl NormGrad {
    /// `∂norm / ∂x` for a finite nonzero order and a finite nonzero norm `n`:
    /// `sign(x) (|x| / n)^(p-1)` (orders 1 and 2 without the power).
    #[inline(always)]
    fn slope(&self, x: f64, n: f64) -> f64 {
        let p = self.ord;
        if p == 1.0 {
            sgn(x)
        } else if p == 2.0 {
            x / n
        } else {
            sgn(x) * (x.abs() / n).powf(p - 1.0)
        }
    }

    /// The gradient given the lane's norm `n`.
    fn grad_with(&self, xs: &[f64], g: &[f64], out: &mut [f64], n: f64) {
        if nan_lane(xs, out) {
            return;
        }
        let p = self.ord;
        if p == 0.0 {
            out.fill(0.0);
            return;
        }
        if p.is_infinite() {
            // all of g to the extremal |x| (split evenly), times sign(x): 0 where the
            // extremum is a zero (a lane of zeros: the contract's 0, as torch's
            // `sign(x) * (|x| == norm) / count`)
            split_evenly(xs, |x| x.abs() == n, g[0], out);
            for (o, &x) in out.iter_mut().zip(xs) {
                *o *= sgn(x);
            }
            return;
        }
        if n == 0.0 || !n.is_finite() {
            out.fill(0.0);
            return;
        }
        for (o, &x) in out.iter_mut().zip(xs) {
            *o = g[0] * self.slope(x, n);
        }
    }
}

/// The lane's softmax in `f64` (max-shifted; a lane whose values are all `-inf` gives
/// the uniform distribution, the limit the logsumexp gradient splits `g` by).
fn softmax_f64(xs: &[f64], out: &mut [f64]) {
    let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        out.fill(1.0 / xs.len() as f64);
        return;
    }
    let mut s = 0.0;
    for (o, &x) in out.iter_mut().zip(xs) {
        *o = (x - m).exp();
        s += *o;
    }
    for o in out.iter_mut() {
        *o /= s;
    }
}

/// `g · softmax(x)`: the gradient of logsumexp, and of logmeanexp (logsumexp minus a
/// constant per lane: the same gradient); a lane whose valid values are all `-inf`
/// splits `g` evenly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogSumExpGrad {
    /// logmeanexp rather than logsumexp (its saved output is lower by `ln n`).
    pub mean: bool,
}

impl LogSumExpGrad {
    /// The factor of `exp(x - y)` given the saved output `y`: `g`, or `g / n` for
    /// logmeanexp over `n` valid elements.
    fn scale(&self, g: f64, n: usize) -> f64 {
        if self.mean {
            g / n as f64
        } else {
            g
        }
    }
}

impl LaneGrad for LogSumExpGrad {
    fn name(&self) -> &'static str {
        if self.mean {
            "logmeanexp"
        } else {
            "logsumexp"
        }
    }
    fn upstream(&self) -> Upstream {
        Upstream::PerLane
    }
    fn grad(&self, xs: &[f64], g: &[f64], out: &mut [f64]) {
        softmax_f64(xs, out);
        for o in out.iter_mut() {
            *o *= g[0];
        }
    }
    fn uses_output(&self) -> bool {
        true
    }
    /// `scale · exp(x - y)` from the saved output `y`: one pass, no max or sum (a
    /// non-finite output recomputes, for the all `-inf` and the `inf` lanes).
    fn grad_from_output(&self, xs: &[f64], ys: &[f64], g: &[f64], out: &mut [f64]) {
        let y = ys[0];
        if !y.is_finite() {
            return self.grad(xs, g, out);
        }
        let scale = self.scale(g[0], xs.len());
        for (o, &x) in out.iter_mut().zip(xs) {
            *o = scale * (x - y).exp();
        }
    }
    fn lane_fold(&self) -> Option<LaneFold> {
        Some(LaneFold::Count)
    }
    /// An infinite saved output recomputes (the general path).
    fn lane_applies(&self, c: &LaneConsts) -> bool {
        !c.y.is_infinite()
    }
    /// `scale · exp(x - y)` with the engine's `exp`, as the typed form computes it; NaN
    /// for a NaN output (a lane holding a NaN, whose softmax computed again is NaN).
    fn lane_step(&self, x: f64, c: &LaneConsts) -> f64 {
        use crate::math::Math;
        if c.y.is_nan() {
            return f64::NAN;
        }
        self.scale(c.g, c.n) * (x - c.y).exp_full()
    }
    /// `scale · exp(x - y)` in `f64` on the lane in its own type, in the kernels'
    /// vectorised map with the engine's branch-free `exp` (within a few `f64` ulps of the
    /// library's), rounded once. Packed only: on the dense layout's unpacked lanes
    /// (`typed_lane`'s spread) the `exp` at every position, masked ones included, made
    /// a 50% masked VJP 1.2-1.8x slower.
    fn typed_from_output<T: Element>(
        &self, xs: &[T], ys: LaneValues<'_, T::Real>, g: LaneValues<'_, T::Real>,
        out: &mut [T::Real],
    ) -> bool {
        use crate::element::Float;
        use crate::math::Math;
        let (LaneValues::One(y), LaneValues::One(g)) = (ys, g) else {
            return false;
        };
        let (y, scale) = (y.to_f64(), self.scale(g.to_f64(), xs.len()));
        if !y.is_finite() {
            return false;
        }
        masked_kernels::run::map_run(
            xs,
            None,
            &mut out[..xs.len()],
            #[inline(always)]
            move |x: T, _| <T::Real as Float>::from_f64(scale * (x.to_f64() - y).exp_full()),
        );
        true
    }
}

/// The gradient of a quantile (the median is the quantile at 0.5 with the `midpoint` or
/// `lower` interpolation): its interpolation weights on the two order statistics, ranked
/// by (value, lane position).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuantileGrad {
    q: f64,
    interpolation: Interpolation,
}

impl QuantileGrad {
    /// The gradient of the `q`-quantile with `interpolation`.
    ///
    /// # Errors
    /// `q` outside [0, 1] or NaN.
    pub fn new(q: f64, interpolation: Interpolation) -> Result<Self> {
        crate::lane::Quantile::new(q, interpolation)?;
        Ok(QuantileGrad { q, interpolation })
    }
    /// The gradient of the median in `mode`.
    pub fn median(mode: MedianMode) -> Self {
        QuantileGrad {
            q: 0.5,
            interpolation: match mode {
                MedianMode::Avg => Interpolation::Midpoint,
                MedianMode::Lower => Interpolation::Lower,
            },
        }
    }
    /// The weights of order statistics `lo` and `lo + 1` for a lane of `n` values.
    fn weights(&self, n: usize) -> (usize, f64, f64) {
        let pos = self.q * (n - 1) as f64;
        let lo = pos.floor() as usize;
        let frac = pos - lo as f64;
        if frac == 0.0 {
            return (lo, 1.0, 0.0);
        }
        let (a, b) = match self.interpolation {
            Interpolation::Lower => (1.0, 0.0),
            Interpolation::Higher => (0.0, 1.0),
            Interpolation::Linear => (1.0 - frac, frac),
            Interpolation::Midpoint => (0.5, 0.5),
            Interpolation::Nearest => {
                if frac > 0.5 || (frac == 0.5 && lo % 2 == 1) {
                    (0.0, 1.0)
                } else {
                    (1.0, 0.0)
                }
            }
        };
        (lo, a, b)
    }
}

impl LaneGrad for QuantileGrad {
    fn name(&self) -> &'static str {
        "quantile"
    }
    fn upstream(&self) -> Upstream {
        Upstream::PerLane
    }
    fn grad(&self, xs: &[f64], g: &[f64], out: &mut [f64]) {
        if nan_lane(xs, out) {
            return;
        }
        out.fill(0.0);
        let (lo, a, b) = self.weights(xs.len());
        // rank by (value, position): a stable sort of the positions by value
        let mut order: Vec<u32> = (0..xs.len() as u32).collect();
        let key = |&i: &u32| xs[i as usize];
        let k = lo.min(xs.len() - 1);
        order.select_nth_unstable_by(k, |i, j| key(i).total_cmp(&key(j)).then(i.cmp(j)));
        out[order[k] as usize] += a * g[0];
        if b != 0.0 {
            // the next order statistic: the least of the elements ranked above k
            let next = order[k + 1..]
                .iter()
                .min_by(|i, j| key(i).total_cmp(&key(j)).then(i.cmp(j)));
            if let Some(&j) = next {
                out[j as usize] += b * g[0];
            }
        }
    }
    fn uses_output(&self) -> bool {
        true
    }
    /// From the saved value (the elements it names, counted in one pass): zero but at those
    /// elements.
    fn grad_from_output(&self, xs: &[f64], ys: &[f64], g: &[f64], out: &mut [f64]) {
        let Some(picks) = self.picks(xs, ys[0]) else {
            return self.grad(xs, g, out);
        };
        out.fill(0.0);
        for (i, w) in picks.into_iter().flatten() {
            out[i] = w * g[0];
        }
    }
    fn typed_from_output<T: Element>(
        &self, xs: &[T], ys: LaneValues<'_, T::Real>, g: LaneValues<'_, T::Real>,
        out: &mut [T::Real],
    ) -> bool {
        use crate::element::Float;
        let (LaneValues::One(y), LaneValues::One(g)) = (ys, g) else {
            return false;
        };
        let g = g.to_f64();
        let Some(picks) = self.picks(xs, y.to_f64()) else {
            return false;
        };
        out[..xs.len()].fill(<T::Real as Float>::from_f64(0.0));
        for (i, w) in picks.into_iter().flatten() {
            out[i] = <T::Real as Float>::from_f64(w * g);
        }
        true
    }
}

impl QuantileGrad {
    /// The elements the saved value `v` names, with their weights, or `None` where it
    /// must recompute (a NaN value, or a value inconsistent with the lane: a rank it
    /// cannot name). With `less` values below `v` and `eq` equal to it, rank `r` is the
    /// last of the largest values below (`r = less - 1`), the `(r - less)`-th equal one,
    /// or the first of the smallest above (`r = less + eq`), each by (value, position).
    /// A counting pass and at most two scans, no selection, for every interpolation (a
    /// midpoint or linear output lies between its two statistics). Reads the lane in
    /// its own type.
    fn picks<T: crate::element::Element>(
        &self, xs: &[T], v: f64,
    ) -> Option<[Option<(usize, f64)>; 2]> {
        if v.is_nan() {
            return None;
        }
        let (lo, a, b) = self.weights(xs.len());
        // the order is total_cmp's (-0 before +0); away from zero, and for the lane's
        // non-NaN values (a lane with a NaN has a NaN output), that is `<`, `==` and
        // `>`: one vectorised pass counts below and equal and finds the largest value
        // below and the smallest above
        let lt = |x: f64, w: f64| x.total_cmp(&w).is_lt();
        let fast = v != 0.0;
        let (less, eq, below, above) = if fast {
            use masked_kernels::run::around;
            let (lo, hi) = (f64::NEG_INFINITY, f64::INFINITY);
            let vt = T::from_f64_lossy(v);
            if vt.to_f64() == v && T::LOWEST.to_f64() == lo && T::HIGHEST.to_f64() == hi {
                // `v` is a value of the lane's type (always for f32 and f64): compare there
                let (l, e, b, a) = around(
                    xs,
                    vt,
                    T::LOWEST,
                    T::HIGHEST,
                    #[inline(always)]
                    |x| x,
                );
                (l, e, b.to_f64(), a.to_f64())
            } else {
                around(
                    xs,
                    v,
                    lo,
                    hi,
                    #[inline(always)]
                    |x: T| x.to_f64(),
                )
            }
        } else {
            (
                xs.iter().filter(|x| lt(x.to_f64(), v)).count(),
                xs.iter()
                    .filter(|x| x.to_f64().total_cmp(&v).is_eq())
                    .count(),
                f64::NEG_INFINITY,
                f64::INFINITY,
            )
        };
        let at_rank = |r: usize| -> Option<usize> {
            if r + 1 == less {
                // the last position of the largest value below v
                if fast && below != 0.0 && below > f64::NEG_INFINITY {
                    return xs.iter().rposition(|x| x.to_f64() == below);
                }
                let mut best: Option<usize> = None;
                for (i, x) in xs.iter().enumerate() {
                    let x = x.to_f64();
                    if lt(x, v) && best.is_none_or(|j| !lt(x, xs[j].to_f64())) {
                        best = Some(i);
                    }
                }
                best
            } else if (less..less + eq).contains(&r) {
                let mut equal = xs.iter().enumerate().filter(|(_, x)| {
                    let x = x.to_f64();
                    if fast {
                        x == v
                    } else {
                        x.total_cmp(&v).is_eq()
                    }
                });
                equal.nth(r - less).map(|(i, _)| i)
            } else if r == less + eq {
                // the first position of the smallest value above v
                if fast && above != 0.0 && above < f64::INFINITY {
                    return xs.iter().position(|x| x.to_f64() == above);
                }
                let mut best: Option<usize> = None;
                for (i, x) in xs.iter().enumerate() {
                    let x = x.to_f64();
                    if lt(v, x) && best.is_none_or(|j| lt(x, xs[j].to_f64())) {
                        best = Some(i);
                    }
                }
                best
            } else {
                None
            }
        };
        let first = if a != 0.0 {
            at_rank(lo).map(Some)
        } else {
            Some(None)
        };
        let second = if b != 0.0 {
            at_rank(lo + 1).map(Some)
        } else {
            Some(None)
        };
        let (Some(first), Some(second)) = (first, second) else {
            return None;
        };
        Some([first.map(|i| (i, a)), second.map(|j| (j, b))])
    }
}

/// The Jacobian-vector products of the softmax family over a lane's valid elements:
/// softmax `y (g - Σ g y)`, log_softmax `g - softmax · Σ g`, softmin
/// `-y (g - Σ g y)` with `y = softmax(-x)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoftmaxGrad {
    /// Which member of the family.
    pub kind: crate::lane::SoftmaxKind,
}

impl LaneGrad for SoftmaxGrad {
    fn name(&self) -> &'static str {
        use crate::lane::SoftmaxKind::*;
        match self.kind {
            Softmax => "softmax",
            LogSoftmax => "log_softmax",
            Softmin => "softmin",
        }
    }
    fn upstream(&self) -> Upstream {
        Upstream::PerElement
    }
    fn grad(&self, xs: &[f64], g: &[f64], out: &mut [f64]) {
        use crate::lane::SoftmaxKind::*;
        match self.kind {
            Softmax | Softmin => {
                let neg = self.kind == Softmin;
                if neg {
                    let nx: Vec<f64> = xs.iter().map(|x| -x).collect();
                    softmax_f64(&nx, out);
                } else {
                    softmax_f64(xs, out);
                }
                let dot: f64 = out.iter().zip(g).map(|(y, g)| y * g).sum();
                for (o, &gi) in out.iter_mut().zip(g) {
                    *o *= gi - dot;
                    if neg {
                        *o = -*o;
                    }
                }
            }
            LogSoftmax => {
                softmax_f64(xs, out);
                let total: f64 = g.iter().sum();
                for (o, &gi) in out.iter_mut().zip(g) {
                    *o = gi - *o * total;
                }
            }
        }
    }
    fn uses_output(&self) -> bool {
        true
    }
    fn reads_input_with_output(&self) -> bool {
        false
    }
    /// From the saved output `y`: softmax and softmin have no `exp` left to do,
    /// log_softmax one `exp(y)` per element (no max, no sum).
    fn grad_from_output(&self, _: &[f64], ys: &[f64], g: &[f64], out: &mut [f64]) {
        use crate::lane::SoftmaxKind::*;
        match self.kind {
            Softmax | Softmin => {
                let dot: f64 = ys.iter().zip(g).map(|(y, g)| y * g).sum();
                let sign = if self.kind == Softmin { -1.0 } else { 1.0 };
                for ((o, &y), &gi) in out.iter_mut().zip(ys).zip(g) {
                    *o = sign * y * (gi - dot);
                }
            }
            LogSoftmax => {
                let total: f64 = g.iter().sum();
                for ((o, &y), &gi) in out.iter_mut().zip(ys).zip(g) {
                    *o = gi - y.exp() * total;
                }
            }
        }
    }
    /// [`LaneGrad::grad_from_output`] on the packed output-type lanes: the dot product
    /// (or the sum of `g`) in `f64` over eight accumulators, then one vectorised pass
    /// writing `y (g - Σ g y)` (log_softmax: `g - exp(y) Σ g`, with the engine's
    /// branch-free `exp`), each value in `f64` and rounded once.
    fn typed_from_output<T: Element>(
        &self, xs: &[T], ys: LaneValues<'_, T::Real>, g: LaneValues<'_, T::Real>,
        out: &mut [T::Real],
    ) -> bool {
        let (LaneValues::Each(ys), LaneValues::Each(g)) = (ys, g) else {
            return false;
        };
        let n = xs.len();
        let (ys, g) = (&ys[..n], &g[..n]);
        self.softmax_run(ys, g, ys, g, None, &mut out[..n]);
        true
    }
    fn typed_spread_from_output<R: crate::element::Float>(
        &self, ys: &[R], g: &[R], spread: Spread<'_, R>, out: &mut [R],
    ) -> bool {
        self.softmax_run(ys, g, spread.ys, spread.g, Some(spread.bits), out);
        true
    }
    fn row_statistic(&self) -> Option<RowStatistic> {
        use crate::lane::SoftmaxKind::*;
        match self.kind {
            Softmax => Some(RowStatistic { sign: 1.0 }),
            Softmin => Some(RowStatistic { sign: -1.0 }),
            LogSoftmax => None,
        }
    }
}

/// The softmax and softmin gradients `±y (g - Σ g y)` in two halves
/// ([`LaneGrad::row_statistic`]): each lane's statistic `Σ g y` from its packed saved
/// output and upstream ([`RowStatistic::lane`]), then over a run of positions each in a
/// lane of its own, `d = g - s` ([`RowStatistic::upstream`], once for rows that repeat
/// one upstream row) and the gradient `±y · d` under the mask ([`RowStatistic::step`]):
/// the values of [`LaneGrad::typed_spread_from_output`], bit for bit (the same
/// operations in the same order).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowStatistic {
    /// 1 for softmax, -1 for softmin.
    sign: f64,
}

impl RowStatistic {
    /// The lane's statistic from its packed saved output `ys` and upstream `g`.
    pub fn lane<R: crate::element::Float>(&self, ys: &[R], g: &[R]) -> f64 {
        SoftmaxGrad::dot(ys, g)
    }

    /// `d[j] = g[j] - s[j]`, `s[j]` the statistic of position `j`'s lane.
    pub fn upstream<R: crate::element::Float>(&self, s: &[f64], g: &[R], d: &mut Vec<f64>) {
        d.resize(g.len(), 0.0);
        masked_kernels::run::zip_run(
            g,
            &s[..g.len()],
            None,
            &mut d[..],
            #[inline(always)]
            |gi: R, si: f64, _| gi.to_f64() - si,
        );
    }

    /// `out[j] = ±ys[j] · d[j]` where bit `j` of `bits` is set (everywhere for
    /// `None`), 0 elsewhere.
    pub fn step<R: crate::element::Float>(
        &self, d: &[f64], ys: &[R], bits: Option<masked_kernels::Bits<'_>>, out: &mut [R],
    ) {
        use crate::element::Float;
        let (sign, to, zero) = (self.sign, <R as Float>::from_f64, R::ZERO);
        masked_kernels::run::zip_run(
            &ys[..out.len()],
            &d[..out.len()],
            bits,
            out,
            #[inline(always)]
            move |y: R, d: f64, ok| {
                if ok {
                    to(sign * y.to_f64() * d)
                } else {
                    zero
                }
            },
        );
    }
}

impl RowStatistic {
    /// The gradient over the lanes of sparse entries ([`Scattered`]: the saved output,
    /// one value an entry, with each entry's lane), `g` the upstream (one an entry, in
    /// the same order), into `out` (one an entry): each lane's `Σ g y` folded in `f64`
    /// while the entries stream past, then each entry's `±y (g - Σ g y)`. No sort
    /// into lane order; the sums in entry order (not [`RowStatistic::lane`]'s eight
    /// accumulators).
    pub fn scattered<R: crate::element::Float>(
        &self, ys: Scattered<'_, R>, g: &[R], out: &mut [R],
    ) {
        let stats = ys.fold(
            &[] as &[()],
            0.0f64,
            |acc, at, idx, ys, _, _| {
                for ((&l, &y), &gi) in idx.iter().zip(ys).zip(&g[at..]) {
                    acc[l] += y.to_f64() * gi.to_f64();
                }
            },
            |a, b| *a += b,
        );
        ys.map(&stats, out, |at, ys, _, out, s| {
            let mut d = Vec::new();
            self.upstream(s, &g[at..at + ys.len()], &mut d);
            self.step(&d, ys, None, out);
        });
    }
}

/// Whether [`scattered_grad`] has a form for `grad` (`saved`: the forward output is
/// given): a layout asks before it computes the entries' lane ids.
pub fn scatters<G: LaneGrad>(grad: &G, saved: bool) -> bool {
    match grad.upstream() {
        Upstream::PerElement => saved && grad.row_statistic().is_some(),
        Upstream::PerLane => {
            grad.uniform(1, 0.0).is_some()
                || (grad.lane_fold().is_some() && (saved || !grad.uses_output()))
        }
    }
}

/// A gradient over the lanes of sparse entries named by `ids` (`nlanes` of them), one
/// value an entry in storage order, without a sort into lane order; `xs` are the
/// entries' values. A map's through the op's [`RowStatistic`] form (softmax, softmin)
/// given the saved output. A reduction's (`g`'s positions are the lanes) where its
/// gradient is [uniform](LaneGrad::uniform) over a lane (sum, mean: each lane's count
/// folded, then every entry written its lane's value), or a [step](LaneGrad::lane_step)
/// from each entry's value and its lane's constants (amax, var, norm, logsumexp: the
/// count and the op's [`LaneFold`] folded first). `None` where the op has no such
/// form, the output it reads is not saved, a lane needs the general path, a
/// reduction's upstream names a lane past `nlanes`, or the lanes far outnumber the
/// entries: the caller then groups the lanes (and reports what is wrong).
pub fn scattered_grad<G: LaneGrad, T: Element>(
    grad: &G, xs: &[T], ids: LaneIds<'_>, nlanes: usize, g: &SparseUpstream<'_, T::Real>,
    saved: Option<&SparseUpstream<'_, T::Real>>,
) -> Option<Vec<T::Real>> {
    use crate::element::Float;
    match (g, saved) {
        (SparseUpstream::PerElement(g), Some(SparseUpstream::PerElement(ys))) => {
            let rs = grad.row_statistic()?;
            let lanes = Scattered::new(ys, None, ids, nlanes)?;
            let mut out = masked_kernels::fresh_vec(ys.len());
            rs.scattered(lanes, g, &mut out);
            Some(out)
        }
        (SparseUpstream::PerLane { .. }, _) if grad.upstream() == Upstream::PerLane => {
            let step = grad.lane_fold();
            if step.is_none() {
                grad.uniform(1, 0.0)?;
            }
            let reads_output = grad.uses_output() && step.is_some();
            let ys = match saved.filter(|_| reads_output) {
                Some(y @ SparseUpstream::PerLane { .. }) => Some(y.by_lane(nlanes).ok()?),
                // a map's in a reduction's place: the general path reports it
                Some(SparseUpstream::PerElement(_)) => return None,
                None if reads_output => return None,
                None => None,
            };
            let lanes = Scattered::new(xs, None, ids, nlanes)?;
            let gl = g.by_lane(nlanes).ok()?;
            let mut out = masked_kernels::fresh_vec(ids.len());
            let Some(fold) = step else {
                // the count is all a uniform gradient reads, and a sum's not even that
                // (every lane taken as one element: an empty lane's value is never read)
                let counts = if grad.uniform_reads_count() {
                    lanes.fold(
                        &[] as &[()],
                        0usize,
                        |acc, _, idx, _, _, _| idx.iter().for_each(|&l| acc[l] += 1),
                        |a, b| *a += b,
                    )
                } else {
                    vec![1; nlanes]
                };
                let each: Vec<T::Real> = counts
                    .iter()
                    .zip(gl.iter())
                    .map(|(&n, &gv)| match n {
                        0 => <T::Real as Element>::ZERO,
                        n => grad
                            .uniform(n, gv.to_f64())
                            .map_or(<T::Real as Element>::ZERO, <T::Real as Float>::from_f64),
                    })
                    .collect();
                lanes.spread(&each, &mut out);
                return Some(out);
            };
            // the count and the statistic, an accumulator a lane
            let y_of = |l: usize| ys.as_ref().map_or(f64::NAN, |y| y[l].to_f64());
            let yt: Vec<f64> = match fold {
                LaneFold::Ties => (0..nlanes).map(y_of).collect(),
                _ => Vec::new(),
            };
            let stats = lanes.fold(
                &yt,
                (0usize, 0.0f64),
                |acc, _, idx, xs, _, ys| match fold {
                    LaneFold::Count => idx.iter().for_each(|&l| acc[l].0 += 1),
                    LaneFold::Ties => {
                        for ((&l, &x), &y) in idx.iter().zip(xs).zip(ys) {
                            acc[l].0 += 1;
                            acc[l].1 += (x.to_f64() == y) as u8 as f64;
                        }
                    }
                    LaneFold::Sum => {
                        for (&l, &x) in idx.iter().zip(xs) {
                            acc[l].0 += 1;
                            acc[l].1 += x.to_f64();
                        }
                    }
                },
                |a, b| *a = (a.0 + b.0, a.1 + b.1),
            );
            let mut consts = Vec::with_capacity(nlanes);
            for (l, (&(n, stat), &gv)) in stats.iter().zip(gl.iter()).enumerate() {
                let c = LaneConsts {
                    g: gv.to_f64(),
                    y: y_of(l),
                    n,
                    stat,
                };
                if n > 0 && !grad.lane_applies(&c) {
                    return None;
                }
                consts.push(c);
            }
            lanes.map(&consts, &mut out, |_, xs, _, out, cs| {
                for ((o, &x), c) in out.iter_mut().zip(xs).zip(cs) {
                    *o = <T::Real as Float>::from_f64(grad.lane_step(x.to_f64(), c));
                }
            });
            Some(out)
        }
        _ => None,
    }
}

impl SoftmaxGrad {
    /// `Σ y g` over the packed lane, in `f64` over eight accumulators ([`sum8`]).
    fn dot<R: crate::element::Float>(ys: &[R], g: &[R]) -> f64 {
        sum8(
            ys,
            g,
            #[inline(always)]
            |y: R, g: R| y.to_f64() * g.to_f64(),
        )
    }

    /// The lane's constant from the packed `ys` and `g` (the dot product, or the sum of
    /// `g`) in `f64` over eight accumulators, then one vectorised pass over `at_ys`,
    /// `at_g` (the same values, packed or unpacked with `bits`; 0 written where a bit
    /// is clear) writing `y (g - Σ g y)` (log_softmax: `g - exp(y) Σ g`, with the
    /// engine's branch-free `exp`), each value in `f64` and rounded once.
    fn softmax_run<R: crate::element::Float>(
        &self, ys: &[R], g: &[R], at_ys: &[R], at_g: &[R], bits: Option<masked_kernels::Bits<'_>>,
        out: &mut [R],
    ) {
        use crate::element::Float;
        use crate::lane::SoftmaxKind::*;
        use crate::math::Math;
        use masked_kernels::run::zip_run;
        let to = <R as Float>::from_f64;
        let zero = R::ZERO;
        match self.kind {
            Softmax | Softmin => {
                let dot = Self::dot(ys, g);
                let sign = if self.kind == Softmin { -1.0 } else { 1.0 };
                zip_run(
                    at_ys,
                    at_g,
                    bits,
                    out,
                    #[inline(always)]
                    move |y: R, gi: R, ok| {
                        if ok {
                            to(sign * y.to_f64() * (gi.to_f64() - dot))
                        } else {
                            zero
                        }
                    },
                );
            }
            LogSoftmax => {
                let total = sum8(
                    g,
                    g,
                    #[inline(always)]
                    |g: R, _| g.to_f64(),
                );
                zip_run(
                    at_ys,
                    at_g,
                    bits,
                    out,
                    #[inline(always)]
                    move |y: R, gi: R, ok| {
                        // kept in the branch: computed at every element, then
                        // selected (`FloatAt::at` in unary.rs), it measured 1.86x
                        if ok {
                            to(gi.to_f64() - y.to_f64().exp_full() * total)
                        } else {
                            zero
                        }
                    },
                );
            }
        }
    }
}

/// The sum of `f(xs[k], ys[k])` in `f64` over eight interleaved accumulators (term `k`
/// into accumulator `k % 8`), combined in a fixed tree: vectorised (the kernels'
/// `sum8_run`), and the same for every layout.
///
/// A lane shorter than eight sums here, term `k` into accumulator `k` as the kernel
/// does (the same values bit for bit), without the call into the vector kernel: the
/// lanes of a sparse gradient are often one or two entries long.
fn sum8<A: Copy, B: Copy>(xs: &[A], ys: &[B], f: impl Fn(A, B) -> f64 + Copy) -> f64 {
    let n = xs.len().min(ys.len());
    let acc = if n < 8 {
        let mut acc = [0.0f64; 8];
        for k in 0..n {
            acc[k] += f(xs[k], ys[k]);
        }
        acc
    } else {
        masked_kernels::run::sum8_run(xs, ys, f)
    };
    ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
}

/// The gradient of `x / max(norm(x), eps)`: `g / N - (Σ g x) / N² · ∂N/∂x` when the norm
/// `N` is above `eps`, `g / eps` when the floor holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NormalizeGrad {
    norm: NormGrad,
    eps: f64,
}

impl NormalizeGrad {
    /// The gradient of normalize by the `ord` norm with floor `eps`.
    ///
    /// # Errors
    /// A NaN `ord`, a negative or NaN `eps`.
    pub fn new(ord: f64, eps: f64) -> Result<Self> {
        crate::lane::Normalize::new(ord, eps)?;
        Ok(NormalizeGrad {
            norm: NormGrad::new(ord)?,
            eps,
        })
    }
}

impl LaneGrad for NormalizeGrad {
    fn name(&self) -> &'static str {
        "normalize"
    }
    fn upstream(&self) -> Upstream {
        Upstream::PerElement
    }
    fn grad(&self, xs: &[f64], g: &[f64], out: &mut [f64]) {
        if nan_lane(xs, out) {
            return;
        }
        let n = if self.norm.ord == 0.0 {
            xs.iter().filter(|&&x| x != 0.0).count() as f64
        } else {
            self.norm.norm(xs)
        };
        if n.is_nan() || n <= self.eps {
            // the floor: a constant denominator
            let d = self.eps.max(n);
            for (o, &gi) in out.iter_mut().zip(g) {
                *o = gi / d;
            }
            return;
        }
        // ∂N/∂x, then the quotient rule
        let dot = sum8(g, xs, |g: f64, x: f64| g * x);
        self.norm.grad(xs, &[1.0], out);
        for ((o, &gi), _) in out.iter_mut().zip(g).zip(xs) {
            *o = gi / n - dot / (n * n) * *o;
        }
    }
    /// Orders 1 and 2 on the packed lane in its own type: the norm and `Σ g x` summed as
    /// [`LaneGrad::grad`] sums them, then one vectorised pass over `x` and `g` writing
    /// its values, bit for bit. A NaN or infinite norm, the other orders, and an
    /// unpacked lane (the dense layout packs it and spreads the result) take the other
    /// paths.
    fn typed_lane<T: Element>(
        &self, xs: &[T], spread: Option<(&[T], masked_kernels::Bits<'_>)>,
        g: LaneValues<'_, T::Real>, saved: LaneValues<'_, T::Real>, out: &mut [T::Real],
    ) -> bool {
        use crate::element::Float;
        use masked_kernels::run::zip_run;
        let p = self.norm.ord;
        let (None, LaneValues::Each(g), LaneValues::Absent) = (spread, g, saved) else {
            return false;
        };
        if !(p == 1.0 || p == 2.0) {
            return false;
        }
        let (g, out) = (&g[..xs.len()], &mut out[..xs.len()]);
        let n = if p == 1.0 {
            sum8(
                xs,
                xs,
                #[inline(always)]
                |x: T, _| x.to_f64().abs(),
            )
        } else {
            sum8(
                xs,
                xs,
                #[inline(always)]
                |x: T, _| x.to_f64() * x.to_f64(),
            )
            .sqrt()
        };
        if n.is_nan() || n.is_infinite() {
            return false;
        }
        let to = <T::Real as Float>::from_f64;
        if n <= self.eps {
            let d = self.eps.max(n);
            zip_run(
                xs,
                g,
                None,
                out,
                #[inline(always)]
                move |_: T, gi: T::Real, _| to(gi.to_f64() / d),
            );
            return true;
        }
        let dot = sum8(
            g,
            xs,
            #[inline(always)]
            |g: T::Real, x: T| g.to_f64() * x.to_f64(),
        );
        let c = dot / (n * n);
        if p == 1.0 {
            zip_run(
                xs,
                g,
                None,
                out,
                #[inline(always)]
                move |x: T, gi: T::Real, _| to(gi.to_f64() / n - c * sgn(x.to_f64())),
            );
        } else {
            zip_run(
                xs,
                g,
                None,
                out,
                #[inline(always)]
                move |x: T, gi: T::Real, _| to(gi.to_f64() / n - c * (x.to_f64() / n)),
            );
        }
        true
    }
}

/// The gradients of cumsum (`Σ_{j ≥ i} g_j`) and cumprod (exact with zeros:
/// `P_i · S_i` with the prefix product `P_i` of the elements before `i` and
/// `S_i = g_i + x_{i+1} S_{i+1}`), over the valid elements in lane order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CumulativeGrad {
    /// cumprod rather than cumsum.
    pub prod: bool,
}

impl LaneGrad for CumulativeGrad {
    fn name(&self) -> &'static str {
        if self.prod {
            "cumprod"
        } else {
            "cumsum"
        }
    }
    fn upstream(&self) -> Upstream {
        Upstream::PerElement
    }
    fn grad(&self, xs: &[f64], g: &[f64], out: &mut [f64]) {
        if !self.prod {
            let mut s = 0.0;
            for (o, &gi) in out.iter_mut().zip(g).rev() {
                s += gi;
                *o = s;
            }
            return;
        }
        let n = xs.len();
        let mut s = 0.0;
        for i in (0..n).rev() {
            s = g[i] + if i + 1 < n { xs[i + 1] * s } else { 0.0 };
            out[i] = s;
        }
        let mut p = 1.0;
        for (o, &x) in out.iter_mut().zip(xs) {
            *o *= p;
            p *= x;
        }
    }
}

/// What receives an op's gradient value: [`visit_grad`](crate::registry::visit_grad)
/// builds the [`LaneGrad`] of a request from the registry and hands it here (a layout's
/// gradient kernel, typically).
pub trait GradVisitor {
    /// The result.
    type Out;
    /// Runs with the op's gradient value.
    ///
    /// # Errors
    /// Whatever the visitor's kernel reports.
    fn visit<G: LaneGrad>(self, grad: &G) -> Result<Self::Out>;
}

/// The gradient of a nan-family op: `G`'s on the lane without its NaN values (the op
/// with the `!isnan` mask), 0 at the NaN positions; a lane of NaN only is a fully masked
/// lane (all 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NanFree<G>(pub G);

impl<G: LaneGrad> LaneGrad for NanFree<G> {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn upstream(&self) -> Upstream {
        self.0.upstream()
    }
    fn grad(&self, xs: &[f64], g: &[f64], out: &mut [f64]) {
        self.without_nans(xs, &[], g, out);
    }
    fn uses_output(&self) -> bool {
        self.0.uses_output()
    }
    fn grad_from_output(&self, xs: &[f64], ys: &[f64], g: &[f64], out: &mut [f64]) {
        self.without_nans(xs, ys, g, out);
    }
}

impl<G: LaneGrad> NanFree<G> {
    /// `G`'s gradient (from the saved output `ys` when there is one) over the lane's
    /// non-NaN elements, 0 at the NaN ones.
    fn without_nans(&self, xs: &[f64], ys: &[f64], g: &[f64], out: &mut [f64]) {
        let run = |x: &[f64], y: &[f64], g: &[f64], o: &mut [f64]| {
            if y.is_empty() {
                self.0.grad(x, g, o)
            } else {
                self.0.grad_from_output(x, y, g, o)
            }
        };
        if !xs.iter().any(|x| x.is_nan()) {
            return run(xs, ys, g, out);
        }
        let keep: Vec<usize> = (0..xs.len()).filter(|&i| !xs[i].is_nan()).collect();
        out.fill(0.0);
        if keep.is_empty() {
            return;
        }
        let pick = |v: &[f64]| -> Vec<f64> {
            match self.0.upstream() {
                Upstream::PerLane => v.to_vec(),
                Upstream::PerElement if v.is_empty() => Vec::new(),
                Upstream::PerElement => keep.iter().map(|&i| v[i]).collect(),
            }
        };
        let x: Vec<f64> = keep.iter().map(|&i| xs[i]).collect();
        let mut o = vec![0.0; x.len()];
        run(&x, &pick(ys), &pick(g), &mut o);
        for (&i, v) in keep.iter().zip(o) {
            out[i] = v;
        }
    }
}

/// The gradient of `amax - amin`: `g` split among the maxima, `-g` among the minima (a
/// lane of equal values gets both, 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PtpGrad;

impl LaneGrad for PtpGrad {
    fn name(&self) -> &'static str {
        "ptp"
    }
    fn upstream(&self) -> Upstream {
        Upstream::PerLane
    }
    /// amax's gradient minus amin's: one pass for both extrema, one counting each one's
    /// ties, one for the result (no scratch). Counting the ties inside the extrema's
    /// pass was slower: its compare-and-count chain does not vectorise (dense 2048^2
    /// 3.6-3.8 -> 4.1-4.3 ms).
    fn grad(&self, xs: &[f64], g: &[f64], out: &mut [f64]) {
        if nan_lane(xs, out) {
            return;
        }
        let (hi, lo) = xs
            .iter()
            .fold((f64::NEG_INFINITY, f64::INFINITY), |(h, l), &x| {
                (h.max(x), l.min(x))
            });
        let share = |m: f64| {
            let k = xs.iter().filter(|&&x| x == m).count();
            if k == 0 {
                0.0
            } else {
                g[0] / k as f64
            }
        };
        let (up, down) = (share(hi), share(lo));
        for (o, &x) in out.iter_mut().zip(xs) {
            *o = (if x == hi { up } else { 0.0 }) - (if x == lo { down } else { 0.0 });
        }
    }
}

/// `g · f'(x)`: the gradient of a unary elementwise op, element by element (its
/// [`Unary::derivative`](crate::unary::Unary::derivative)); every float dtype runs the
/// op's vectorised gradient loops ([`Unary::grad_f32`](crate::unary::Unary::grad_f32)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UnaryGrad<U>(pub U);

impl<U: crate::unary::Unary + 'static> LaneGrad for UnaryGrad<U> {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn upstream(&self) -> Upstream {
        Upstream::PerElement
    }
    fn grad(&self, xs: &[f64], g: &[f64], out: &mut [f64]) {
        self.0.grad_f64(xs, None, g, out);
    }
    fn elementwise(&self) -> bool {
        true
    }
    fn typed_each<T: Element>(
        &self, xs: &[T], bits: Option<masked_kernels::Bits<'_>>, g: &[T::Real], out: &mut [T::Real],
    ) -> bool {
        crate::unary::grad_typed(self.0, xs, bits, g, out)
    }
}

/// A lane's upstream gradient or saved forward output, as a layout holds it: absent,
/// one value for the lane (a reduction's), or one per valid element (a map's), packed in
/// lane order.
#[derive(Debug, Clone, Copy)]
pub enum LaneValues<'a, R> {
    /// None given (only for a saved output: the VJP recomputes).
    Absent,
    /// One value for the whole lane.
    One(R),
    /// One value per valid element.
    Each(&'a [R]),
}

/// The one place a lane's gradient is computed for every layout: widens the packed
/// valid values (and `g`, and the saved output when the op reads it) to `f64`, runs the
/// op's [`LaneGrad`] and rounds the result once into the layout's type. Holds the
/// scratch, so a worker reuses it across lanes.
#[derive(Debug, Default)]
pub struct GradScratch {
    x: Vec<f64>,
    g: Vec<f64>,
    y: Vec<f64>,
    o: Vec<f64>,
}

impl GradScratch {
    /// The gradient of the lane whose valid values are `xs` (packed, in lane order, at
    /// least one), written packed to `out[..xs.len()]`.
    ///
    /// # Panics
    /// When `out`, or an `Each` of `g` or `saved`, is shorter than `xs`.
    pub fn lane<T: crate::element::Element, G: LaneGrad>(
        &mut self, grad: &G, xs: &[T], g: LaneValues<'_, T::Real>, saved: LaneValues<'_, T::Real>,
        out: &mut [T::Real],
    ) {
        use crate::element::{Element, Float};
        let n = xs.len();
        fn widen<R: Element>(v: &mut Vec<f64>, src: LaneValues<'_, R>, n: usize) {
            v.clear();
            match src {
                LaneValues::Absent => {}
                LaneValues::One(r) => v.push(r.to_f64()),
                LaneValues::Each(rs) => v.extend(rs[..n].iter().map(|r| r.to_f64())),
            }
        }
        if let LaneValues::Each(gs) = g
            && grad.elementwise()
            && grad.typed_each(xs, None, &gs[..n], &mut out[..n])
        {
            return;
        }
        if let LaneValues::One(g) = g
            && let Some(v) = grad.uniform(n, g.to_f64())
        {
            out[..n].fill(<T::Real as Float>::from_f64(v));
            return;
        }
        let from_output = grad.uses_output() && !matches!(saved, LaneValues::Absent);
        if from_output && grad.typed_from_output(xs, saved, g, out) {
            return;
        }
        let kept = if from_output {
            saved
        } else {
            LaneValues::Absent
        };
        if grad.typed_lane(xs, None, g, kept, out) {
            return;
        }
        self.x.clear();
        if from_output && !grad.reads_input_with_output() {
            self.x.resize(n, 0.0); // placeholders: not read
        } else {
            self.x.extend(xs.iter().map(|x| x.to_f64()));
        }
        widen(&mut self.g, g, n);
        self.o.clear();
        self.o.resize(n, 0.0);
        if from_output {
            widen(&mut self.y, saved, n);
            grad.grad_from_output(&self.x, &self.y, &self.g, &mut self.o);
        } else {
            grad.grad(&self.x, &self.g, &mut self.o);
        }
        // in the CPU's vector kernel: generic code is compiled for the baseline CPU,
        // where the halves' rounding from f64 runs two values at a time
        let to = <T::Real as Float>::from_f64;
        masked_kernels::run::map_run(
            &self.o,
            None,
            &mut out[..n],
            #[inline(always)]
            move |v: f64, _| to(v),
        );
    }
}

/// An [elementwise](LaneGrad::elementwise) gradient over values and their upstream in
/// one order, in parallel blocks: `out[k]` from `xs[k]` and `g[k]` where bit `k` of
/// `bits` is set (all for `None`), 0 elsewhere. The lanes of a map do not matter to such
/// an op, so a layout runs its whole values at once. False (nothing written) where it
/// does not apply: `grad` not elementwise, `T` not a float, or `g` or `out` shorter
/// than `xs`.
pub fn each_into<T: Element, G: LaneGrad>(
    grad: &G, xs: &[T], bits: Option<masked_kernels::Bits<'_>>, g: &[T::Real], out: &mut [T::Real],
) -> bool {
    if !grad.elementwise() || !T::DTYPE.is_float() || g.len() < xs.len() || out.len() < xs.len() {
        return false;
    }
    const BLOCK: usize = 1 << 14;
    masked_kernels::par::chunks_mut(&mut out[..xs.len()], BLOCK, |c, o| {
        let r = c * BLOCK..c * BLOCK + o.len();
        let b = bits.map(|b| b.offset(r.start));
        let done = grad.typed_each(&xs[r.clone()], b, &g[r], o);
        debug_assert!(done, "an elementwise gradient applies to every float dtype");
    });
    true
}

/// [`each_into`] over every value, into a fresh vector: `None` where it does not apply.
///
/// # Errors
/// [`MaskedError::TooLarge`] when the vector cannot be had.
pub fn each_values<T: Element, G: LaneGrad>(
    grad: &G, xs: &[T], g: &[T::Real],
) -> Result<Option<Vec<T::Real>>> {
    if !grad.elementwise() || !T::DTYPE.is_float() || g.len() != xs.len() {
        return Ok(None);
    }
    let n = xs.len();
    drop(crate::error::try_vec::<T::Real>(n, || {
        format!("a gradient of {n} values")
    })?);
    // every value is written: fresh pages, not a zeroing pass
    let mut out = masked_kernels::fresh_vec::<T::Real>(n);
    Ok(each_into(grad, xs, None, g, &mut out).then_some(out))
}

/// The VJP of lanes that are consecutive runs of packed values: lane `l` is
/// `xs[starts[l]..starts[l + 1]]` (empty lanes allowed), `g` and `saved` hold one value
/// per lane ([`Upstream::PerLane`]) or per value ([`Upstream::PerElement`]; `saved` may
/// be empty: recompute). Returns the gradient of each value, in order; runs in parallel
/// blocks of whole lanes. A CSR row is such a run, and so is every sparse lane once its
/// entries are grouped.
///
/// # Errors
/// [`MaskedError::TooLarge`] when the output cannot be had.
pub fn grad_runs<T: crate::element::Element, G: LaneGrad>(
    grad: &G, starts: &[usize], xs: &[T], g: &[T::Real], saved: &[T::Real],
) -> Result<Vec<T::Real>> {
    let n = xs.len();
    // the size checked fallibly, then fresh zeroed pages (huge pages where the kernel
    // grants them): every value is written below, and a zeroing pass would fault each
    // page in first
    drop(crate::error::try_vec::<T::Real>(n, || {
        format!("a gradient of {n} values")
    })?);
    let mut out = masked_kernels::fresh_vec::<T::Real>(n);
    let per_lane = grad.upstream() == Upstream::PerLane;
    if !per_lane && each_into(grad, xs, None, g, &mut out) {
        return Ok(out);
    }
    // blocks of whole lanes of about 2^14 values
    let blocks = masked_kernels::par::lane_blocks(starts, 1 << 14);
    let bounds: Vec<usize> = blocks.iter().map(|&l| starts[l] - starts[0]).collect();
    fn pick<'v, R: Copy>(
        v: &'v [R], l: usize, starts: &[usize], per_lane: bool,
    ) -> LaneValues<'v, R> {
        if v.is_empty() {
            LaneValues::Absent
        } else if per_lane {
            LaneValues::One(v[l])
        } else {
            LaneValues::Each(&v[starts[l]..starts[l + 1]])
        }
    }
    masked_kernels::par::parts_mut(&mut out, &bounds, |b, out| {
        let s = &mut GradScratch::default();
        let base = starts[blocks[b]];
        for l in blocks[b]..blocks[b + 1] {
            let run = starts[l]..starts[l + 1];
            if run.is_empty() {
                continue;
            }
            let o = &mut out[run.start - base..run.end - base];
            s.lane(
                grad,
                &xs[run],
                pick(g, l, starts, per_lane),
                pick(saved, l, starts, per_lane),
                o,
            );
        }
    });
    Ok(out)
}

/// The permutation that sorts `keys` stably (entries of one key keep their order): a
/// counting sort when the keys span not much more than their count (a lane's position
/// over the kept dims usually does), else a merge sort; non-generic, compiled once.
fn stable_order(keys: &[usize]) -> Vec<usize> {
    use masked_kernels::order::{counting_order, counting_suits};
    use rayon::prelude::*;
    let nkeys = keys.iter().max().map_or(0, |&k| k + 1);
    if counting_suits(nkeys, keys.len()) {
        return counting_order(keys, nkeys);
    }
    let mut o: Vec<usize> = (0..keys.len()).collect();
    masked_kernels::par::on_free_pool(|| o.par_sort_by_key(|&e| keys[e]));
    o
}

/// The upstream gradient of a VJP over a sparse layout's valid entries.
#[derive(Debug, Clone, Copy)]
pub enum SparseUpstream<'a, R> {
    /// A reduction's: the valid output positions (row-major over the kept dims,
    /// increasing) and their values; a lane missing here takes 0.
    PerLane {
        /// Output positions.
        ids: &'a [usize],
        /// Their upstream values.
        values: &'a [R],
    },
    /// A map's: one value per valid entry, in the entries' order.
    PerElement(&'a [R]),
}

impl<'a, R> SparseUpstream<'a, R> {
    /// A reduction's upstream from its sparse form, which must have the forward output's
    /// shape `want`.
    ///
    /// # Errors
    /// [`MaskedError::ShapeMismatch`] naming the op.
    pub fn reduced(
        op: &str, g: &'a crate::sparse::SparseArray<R>, want: Vec<usize>,
    ) -> Result<Self> {
        if g.shape() != want.as_slice() {
            return Err(MaskedError::ShapeMismatch {
                what: format!("the upstream gradient of {op} and its output"),
                left: g.shape().to_vec(),
                right: want,
            });
        }
        Ok(SparseUpstream::PerLane {
            ids: g.indices(),
            values: g.values(),
        })
    }
}

impl<'a, R: crate::element::Element> SparseUpstream<'a, R> {
    /// The values in the form [`grad_runs`] takes when lane `l` is output position `l`
    /// (a reduction over trailing dims): one per lane out of `lanes`, 0 for a lane
    /// missing here; a map's, as they are.
    ///
    /// # Errors
    /// [`MaskedError::InvalidArgument`] for an output position outside `0..lanes`.
    pub fn by_lane(&self, lanes: usize) -> Result<std::borrow::Cow<'a, [R]>> {
        match *self {
            SparseUpstream::PerElement(v) => Ok(std::borrow::Cow::Borrowed(v)),
            SparseUpstream::PerLane { ids, values } => {
                let mut out = vec![R::ZERO; lanes];
                for (&i, &v) in ids.iter().zip(values) {
                    *out.get_mut(i).ok_or(MaskedError::InvalidArgument {
                        name: "gradient",
                        value: i.to_string(),
                        reason: "an output position outside the op's output",
                    })? = v;
                }
                Ok(std::borrow::Cow::Owned(out))
            }
        }
    }
}

/// The VJP of `grad` over the valid entries of a sparse array of `shape`: `flat` holds
/// their row-major positions (increasing) and `xs` their values; a lane is the set of
/// entries that agree on every dim outside `reduced` (for a map along `d`, `reduced` is
/// `[d]`). `saved`, when given, is the forward output in the form of `g`. Returns the
/// gradient of each entry, in the entries' order: the layouts store it on their own
/// structure, so the result is sparse with the input's valid positions. Work O(nnz) when
/// the lanes are runs of entries (reduced dims trailing) or the kept positions are not
/// many more than the entries (a counting sort by lane), O(nnz log nnz) otherwise (a
/// stable sort); the lanes then run through [`grad_runs`] ([`sparse_lanes_ordered`]).
///
/// # Errors
/// [`MaskedError::InvalidArgument`] when `g` (or `saved`) is of the other kind or a
/// map's has another length than `xs`; [`MaskedError::TooLarge`] when the scratch cannot
/// be had.
pub fn sparse_lanes<'a, T: crate::element::Element, G: LaneGrad>(
    grad: &G, shape: &[usize], reduced: &[usize], flat: &[usize], xs: &[T],
    g: SparseUpstream<'a, T::Real>, saved: Option<SparseUpstream<'a, T::Real>>,
) -> Result<Vec<T::Real>> {
    if flat.len() != xs.len() {
        return Err(upstream_error(grad));
    }
    // an elementwise op's entries need no lanes (the upstream is in the entries' order)
    if let SparseUpstream::PerElement(gv) = g
        && let Some(v) = each_values(grad, xs, gv)?
    {
        return Ok(v);
    }
    sparse_lanes_ordered(
        grad,
        &LaneOrder::of_flat(shape, reduced, flat),
        xs,
        g,
        saved,
    )
}

/// Entries grouped into lanes, in an order that a layout may build once and keep (the
/// COO layout's grouping plan): lane `r` is the entries `order[starts[r]..starts[r +
/// 1]]` (`order` `None`: the entries' own order), in row-major order within the lane,
/// and `keys[r]` is its position over the kept dims, row-major (increasing with `r`).
#[derive(Debug, Clone)]
pub struct LaneOrder<'a> {
    /// Entry numbers in lane order, or `None` when the entries are in lane order.
    pub order: Option<std::borrow::Cow<'a, [usize]>>,
    /// Lane boundaries into the lane order, ending with the entry count.
    pub starts: std::borrow::Cow<'a, [usize]>,
    /// Each lane's position over the kept dims.
    pub keys: std::borrow::Cow<'a, [usize]>,
}

impl LaneOrder<'static> {
    /// The lanes of the entries at row-major positions `flat` (increasing) of an array
    /// of `shape` reduced over `reduced`.
    pub fn of_flat(shape: &[usize], reduced: &[usize], flat: &[usize]) -> Self {
        let n = flat.len();
        // the lane key of each entry: its position over the kept dims, row-major
        let mut stride = vec![0usize; shape.len()];
        let mut acc = 1usize;
        for d in (0..shape.len()).rev() {
            if !reduced.contains(&d) {
                stride[d] = acc;
                acc = acc.saturating_mul(shape[d]);
            }
        }
        let key = |p: usize| {
            let (mut p, mut k) = (p, 0usize);
            for d in (0..shape.len()).rev() {
                let n = shape[d].max(1);
                k += (p % n) * stride[d];
                p /= n;
            }
            k
        };
        let keys: Vec<usize> = masked_kernels::par::flat_map_ranges(n, 1 << 12, |r, out| {
            out.extend(flat[r].iter().map(|&p| key(p)))
        });
        // entries grouped by lane, row-major within a lane (a stable sort when needed)
        let order: Option<Vec<usize>> = if keys.windows(2).all(|w| w[0] <= w[1]) {
            None
        } else {
            Some(stable_order(&keys))
        };
        let at = |i: usize| order.as_ref().map_or(i, |o| o[i]);
        let mut starts: Vec<usize> = (0..n)
            .filter(|&i| i == 0 || keys[at(i)] != keys[at(i - 1)])
            .collect();
        let lane_keys = starts.iter().map(|&i| keys[at(i)]).collect();
        starts.push(n);
        use std::borrow::Cow;
        LaneOrder {
            order: order.map(Cow::Owned),
            starts: Cow::Owned(starts),
            keys: Cow::Owned(lane_keys),
        }
    }
}

fn upstream_error(grad: &impl LaneGrad) -> MaskedError {
    MaskedError::InvalidArgument {
        name: "gradient",
        value: grad.name().to_string(),
        reason: "the upstream gradient (and a saved output) must be one value per valid \
                 output position (a reduction) or per valid input entry (a map)",
    }
}

/// [`sparse_lanes`] over entries already grouped into `lanes`: `xs` (and a map's
/// upstream and saved output) in the entries' order.
///
/// # Errors
/// As [`sparse_lanes`].
pub fn sparse_lanes_ordered<'a, T: crate::element::Element, G: LaneGrad>(
    grad: &G, lanes: &LaneOrder<'_>, xs: &[T], g: SparseUpstream<'a, T::Real>,
    saved: Option<SparseUpstream<'a, T::Real>>,
) -> Result<Vec<T::Real>> {
    use crate::element::Element;
    use std::borrow::Cow;
    let n = xs.len();
    let kind_ok = |g: &SparseUpstream<'_, T::Real>| match (grad.upstream(), g) {
        (Upstream::PerLane, SparseUpstream::PerLane { ids, values }) => ids.len() == values.len(),
        (Upstream::PerElement, SparseUpstream::PerElement(v)) => v.len() == n,
        _ => false,
    };
    let shape_ok = lanes.starts.last() == Some(&n)
        && lanes.keys.len() + 1 == lanes.starts.len()
        && lanes.order.as_ref().is_none_or(|o| o.len() == n);
    if !kind_ok(&g) || !saved.as_ref().is_none_or(kind_ok) || !shape_ok {
        return Err(upstream_error(grad));
    }
    let saved = saved.filter(|_| grad.uses_output());
    let order = lanes.order.as_deref();
    let sorted = |v: &[T::Real]| -> Vec<T::Real> {
        order.map_or_else(Vec::new, |o| o.iter().map(|&e| v[e]).collect())
    };
    // a reduction's upstream (or saved output) per lane, 0 for a lane missing from it;
    // a map's, in lane order
    // (both the lane keys and `ids` increase: one merge walk, not a search per lane)
    let per_lane = |ids: &[usize], values: &[T::Real]| -> Vec<T::Real> {
        let mut j = 0;
        lanes
            .keys
            .iter()
            .map(|&k| {
                while j < ids.len() && ids[j] < k {
                    j += 1;
                }
                if j < ids.len() && ids[j] == k {
                    values[j]
                } else {
                    <T::Real as Element>::ZERO
                }
            })
            .collect()
    };
    let lane_values = |u: &SparseUpstream<'a, T::Real>| -> Cow<'a, [T::Real]> {
        match *u {
            SparseUpstream::PerLane { ids, values } => Cow::Owned(per_lane(ids, values)),
            SparseUpstream::PerElement(v) => match order {
                None => Cow::Borrowed(v),
                Some(_) => Cow::Owned(sorted(v)),
            },
        }
    };
    let gl = lane_values(&g);
    let yl = saved.as_ref().map_or(Cow::Borrowed(&[][..]), lane_values);
    let xs_sorted: Vec<T>;
    let xs_lanes: &[T] = match order {
        None => xs,
        Some(o) => {
            xs_sorted = masked_kernels::par::gather(xs, o);
            &xs_sorted
        }
    };
    let sorted_out = grad_runs(grad, &lanes.starts, xs_lanes, &gl, &yl)?;
    Ok(match order {
        None => sorted_out,
        Some(o) => {
            let mut out = vec![<T::Real as Element>::ZERO; n];
            for (i, &e) in o.iter().enumerate() {
                out[e] = sorted_out[i];
            }
            out
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The softmax and softmin gradients over scattered lanes (several fold tasks, both
    /// id widths) against each lane gathered and given to
    /// [`LaneGrad::grad_from_output`]; the ops without the form (log_softmax, a
    /// reduction's upstream, no saved output) get `None`.
    #[test]
    fn scattered_grads_equal_each_lane_alone() {
        use crate::lane::SoftmaxKind;
        let (n, nlanes) = (300_001usize, 1000usize);
        let (ids, wide, lanes) = crate::scattered::test_lanes(n, nlanes);
        let ys: Vec<f32> = (0..n).map(|k| ((k * 7919) % 101) as f32 / 400.0).collect();
        let g: Vec<f32> = (0..n)
            .map(|k| ((k * 104_729) % 37) as f32 / 9.0 - 2.0)
            .collect();
        let (up, saved) = (
            SparseUpstream::PerElement(&g[..]),
            SparseUpstream::PerElement(&ys[..]),
        );
        for kind in [SoftmaxKind::Softmax, SoftmaxKind::Softmin] {
            let grad = SoftmaxGrad { kind };
            let mut want = vec![0.0f64; n];
            for at in &lanes {
                let ly: Vec<f64> = at.iter().map(|&k| ys[k] as f64).collect();
                let lg: Vec<f64> = at.iter().map(|&k| g[k] as f64).collect();
                let mut lo = vec![0.0; at.len()];
                grad.grad_from_output(&ly, &ly, &lg, &mut lo);
                for (&k, &o) in at.iter().zip(&lo) {
                    want[k] = o;
                }
            }
            for lane_ids in [LaneIds::U32(&ids), LaneIds::Usize(&wide)] {
                let got = scattered_grad(&grad, &ys, lane_ids, nlanes, &up, Some(&saved)).unwrap();
                for (k, (&a, &w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a as f64 - w).abs() <= 1e-6 * w.abs() + 1e-7,
                        "{kind:?} at {k} (lane {}): {a} vs {w}",
                        ids[k]
                    );
                }
            }
        }
        let log = SoftmaxGrad {
            kind: SoftmaxKind::LogSoftmax,
        };
        let soft = SoftmaxGrad {
            kind: SoftmaxKind::Softmax,
        };
        let per_lane = SparseUpstream::PerLane {
            ids: &[0],
            values: &[1.0f32],
        };
        let ids = LaneIds::U32(&ids);
        assert!(scattered_grad(&log, &ys, ids, nlanes, &up, Some(&saved)).is_none());
        assert!(scattered_grad(&soft, &ys, ids, nlanes, &up, None).is_none());
        assert!(scattered_grad(&soft, &ys, ids, nlanes, &per_lane, Some(&saved)).is_none());
    }

    /// The reductions' gradients over scattered lanes (uniform: sum, mean; a step from
    /// each element and its lane's constants: amax, amin, var, std, norms,
    /// logsumexp, logmeanexp), from a sparse upstream (some lanes missing: 0 there;
    /// lanes with no entries) and the saved outputs each lane's own: each entry the
    /// value [`LaneGrad::grad_from_output`] writes for its lane gathered alone (the
    /// uniform ones and the extrema bit for bit, the rest within the order of their
    /// sums). No form where the op has none (median), where the output it reads is
    /// not saved, where a lane needs the general path (a saved extremum no element
    /// equals), or where the upstream names a lane past the lanes.
    #[test]
    fn scattered_reduction_grads_equal_each_lane_alone() {
        use crate::element::Float;
        let (n, nlanes) = (300_001usize, 1000usize);
        let (ids, wide, lanes) = crate::scattered::test_lanes(n, nlanes);
        // lanes 0, 3, 6, ... hold an upstream value; the last 10 lanes hold no entries
        let gl: Vec<usize> = (0..nlanes + 10).step_by(3).collect();
        let gv: Vec<f32> = gl.iter().map(|&l| (l % 37) as f32 / 9.0 - 2.0).collect();
        let up = SparseUpstream::PerLane {
            ids: &gl,
            values: &gv,
        };
        // values with ties (13 of them), a NaN in lane 5
        let xs: Vec<f32> = (0..n)
            .map(|k| match (ids[k], k % 97) {
                (5, 0) => f32::NAN,
                _ => ((k * 7919) % 13) as f32 / 4.0 - 1.5,
            })
            .collect();
        let lane_x = |at: &[usize]| -> Vec<f64> { at.iter().map(|&k| xs[k] as f64).collect() };
        let upstream = |l: usize| {
            gl.iter()
                .position(|&i| i == l)
                .map_or(0.0, |p| gv[p] as f64)
        };
        /// The entries, their lane ids in both widths, each lane's entries.
        #[derive(Clone, Copy)]
        struct Lanes<'a> {
            xs: &'a [f32],
            ids: &'a [u32],
            wide: &'a [usize],
            lanes: &'a [Vec<usize>],
            nlanes: usize,
        }
        fn check<G: LaneGrad>(
            grad: &G, forward: impl Fn(&[f64]) -> f64, rel: f64,
            Lanes {
                xs,
                ids,
                wide,
                lanes,
                nlanes,
            }: Lanes<'_>,
            up: &SparseUpstream<'_, f32>, upstream: &dyn Fn(usize) -> f64,
            lane_x: &dyn Fn(&[usize]) -> Vec<f64>,
        ) {
            // the saved outputs, one a lane (rounded to f32, as the forward op's are)
            let ys: Vec<f32> = lanes.iter().map(|at| forward(&lane_x(at)) as f32).collect();
            let yl: Vec<usize> = (0..nlanes).collect();
            let saved = SparseUpstream::PerLane {
                ids: &yl,
                values: &ys,
            };
            for lane_ids in [LaneIds::U32(ids), LaneIds::Usize(wide)] {
                let got = scattered_grad(grad, xs, lane_ids, nlanes + 10, up, Some(&saved))
                    .unwrap_or_else(|| panic!("{}: no scattered form", grad.name()));
                for (l, at) in lanes.iter().enumerate() {
                    let lx = lane_x(at);
                    let mut lo = vec![0.0; at.len()];
                    grad.grad_from_output(&lx, &[ys[l] as f64], &[upstream(l)], &mut lo);
                    for (&k, &w) in at.iter().zip(&lo) {
                        let (g, w) = (got[k] as f64, <f32 as Float>::from_f64(w) as f64);
                        assert!(
                            g.to_bits() == w.to_bits()
                                || (g.is_nan() && w.is_nan())
                                || (g - w).abs() <= rel * w.abs() + 1e-30,
                            "{} at {k} (lane {l}): {g} vs {w}",
                            grad.name()
                        );
                    }
                }
            }
        }
        let all = Lanes {
            xs: &xs,
            ids: &ids,
            wide: &wide,
            lanes: &lanes,
            nlanes,
        };
        let max = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let nan_or = |v: &[f64], f: f64| {
            if v.iter().any(|x| x.is_nan()) {
                f64::NAN
            } else {
                f
            }
        };
        let lse = |v: &[f64]| {
            let m = max(v);
            nan_or(v, m + v.iter().map(|x| (x - m).exp()).sum::<f64>().ln())
        };
        let std = |v: &[f64]| {
            let m = v.iter().sum::<f64>() / v.len() as f64;
            (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() as f64 - 1.0)).sqrt()
        };
        check(&SumGrad, |_| f64::NAN, 0.0, all, &up, &upstream, &lane_x);
        check(&MeanGrad, |_| f64::NAN, 0.0, all, &up, &upstream, &lane_x);
        let amax = ExtremumGrad { max: true };
        check(
            &amax,
            |v| nan_or(v, max(v)),
            0.0,
            all,
            &up,
            &upstream,
            &lane_x,
        );
        let amin = ExtremumGrad { max: false };
        let min = |v: &[f64]| nan_or(v, v.iter().copied().fold(f64::INFINITY, f64::min));
        check(&amin, min, 0.0, all, &up, &upstream, &lane_x);
        for c in [0.0, 1.0] {
            let var = VarGrad::new(c, false).unwrap();
            check(&var, |_| f64::NAN, 1e-9, all, &up, &upstream, &lane_x);
        }
        check(
            &VarGrad::new(1.0, true).unwrap(),
            std,
            1e-6,
            all,
            &up,
            &upstream,
            &lane_x,
        );
        for p in [1.0, 2.0, 3.0] {
            let norm = |v: &[f64]| v.iter().map(|x| x.abs().powf(p)).sum::<f64>().powf(1.0 / p);
            check(
                &NormGrad::new(p).unwrap(),
                norm,
                1e-6,
                all,
                &up,
                &upstream,
                &lane_x,
            );
        }
        for mean in [false, true] {
            let lme = move |v: &[f64]| lse(v) - if mean { (v.len() as f64).ln() } else { 0.0 };
            check(
                &LogSumExpGrad { mean },
                lme,
                1e-6,
                all,
                &up,
                &upstream,
                &lane_x,
            );
        }
        let u32s = LaneIds::U32(&ids);
        // median has no form; amax needs its saved output; a saved maximum that no
        // element equals takes the general path; lanes past the ones given
        let median = QuantileGrad::new(0.5, Interpolation::Midpoint).unwrap();
        assert!(scattered_grad(&median, &xs, u32s, nlanes + 10, &up, None).is_none());
        assert!(scattered_grad(&amax, &xs, u32s, nlanes + 10, &up, None).is_none());
        let off: Vec<f32> = vec![100.0; nlanes];
        let yl: Vec<usize> = (0..nlanes).collect();
        let saved = SparseUpstream::PerLane {
            ids: &yl,
            values: &off,
        };
        assert!(scattered_grad(&amax, &xs, u32s, nlanes + 10, &up, Some(&saved)).is_none());
        assert!(scattered_grad(&SumGrad, &xs, u32s, nlanes, &up, None).is_none());
        let each = SparseUpstream::PerElement(&xs[..]);
        assert!(scattered_grad(&amax, &xs, u32s, nlanes + 10, &up, Some(&each)).is_none());
        assert!(!scatters(&amax, false) && scatters(&amax, true) && scatters(&MeanGrad, false));
        assert!(!scatters(&median, true));
        // the norms of order 0 and inf have no step form: nothing is folded for them
        for p in [0.0, f64::INFINITY] {
            let norm = NormGrad::new(p).unwrap();
            assert!(!scatters(&norm, true));
            assert!(scattered_grad(&norm, &xs, u32s, nlanes + 10, &up, Some(&saved)).is_none());
        }
    }

    /// ptp's gradient, hand-checked: `g` split among the ties of the maximum, minus `g`
    /// split among the ties of the minimum (`-0` ties `+0`; a constant lane gives 0; an
    /// infinite extremum takes its share).
    #[test]
    fn ptp_grad_splits_among_the_ties_of_each_extremum() {
        let cases: [(&[f64], &[f64]); 4] = [
            (
                &[3.0, -1.0, 3.0, 0.0, -1.0, -1.0],
                &[0.6, -0.4, 0.6, 0.0, -0.4, -0.4],
            ),
            (&[-0.0, 0.0], &[0.0, 0.0]),
            (&[2.0, 2.0, 2.0], &[0.0, 0.0, 0.0]),
            (&[f64::INFINITY, 1.0, -5.0], &[1.2, 0.0, -1.2]),
        ];
        for (xs, want) in cases {
            let mut got = vec![9.0; xs.len()];
            PtpGrad.grad(xs, &[1.2], &mut got);
            for (g, w) in got.iter().zip(want) {
                assert!(
                    (g - w).abs() < 1e-12,
                    "ptp grad of {xs:?}: {got:?}, want {want:?}"
                );
            }
        }
    }

    /// prod's gradient on a lane long enough for the two chains in one loop equals the
    /// two loops', bit for bit, zeros and a NaN included.
    #[test]
    fn prod_grad_with_both_chains_equals_the_two_loops() {
        for n in [0, 1, 63, 64, 65, 200] {
            let mut xs: Vec<f64> = (0..n).map(|k| 0.9 + (k * 37 % 23) as f64 / 100.0).collect();
            if n == 200 {
                (xs[17], xs[150], xs[151]) = (0.0, 0.0, f64::NAN);
            }
            let mut got = vec![0.0; n];
            ProdGrad.grad(&xs, &[0.75], &mut got);
            let mut want = vec![1.0; n];
            let mut p = 1.0;
            for (w, &x) in want.iter_mut().zip(&xs) {
                *w = p;
                p *= x;
            }
            let mut s = 0.75;
            for (w, &x) in want.iter_mut().zip(&xs).rev() {
                *w *= s;
                s *= x;
            }
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "n = {n}");
        }
    }
    /// `sum8`'s short lanes (summed without the kernel) give the kernel's sums bit for
    /// bit: every length below eight and the first lengths above, on terms whose sum
    /// depends on the order (a -0 alone included).
    #[test]
    fn short_lane_sums_equal_the_kernels() {
        let terms = [
            1e16, 1.0, -1e16, 3.5, -0.0, 1e-300, 7.25e15, -2.0, 0.1, 1e16, -1.0,
        ];
        for n in 0..terms.len() {
            let xs = &terms[..n];
            let acc = masked_kernels::run::sum8_run(xs, xs, |x: f64, _| x);
            let want =
                ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
            let got = sum8(xs, xs, |x: f64, _| x);
            assert_eq!(got.to_bits(), want.to_bits(), "{n} terms");
        }
        let neg_zero = sum8(&[-0.0f64], &[-0.0f64], |x: f64, _| x);
        let acc = masked_kernels::run::sum8_run(&[-0.0f64], &[-0.0f64], |x: f64, _| x);
        assert_eq!(
            neg_zero.to_bits(),
            (((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7])))
                .to_bits()
        );
    }

    /// The typed lanes (`typed_lane`: var, std, amax, norm of every order, normalize)
    /// against the `f64` lane rounded once, on f32 and f64 lanes with ties, zeros,
    /// signed values, tiny values, a NaN and an inf, with and without a saved output:
    /// the same values bit for bit where the typed path applies (it may decline), and
    /// with an unpacked `spread` the same values at the valid positions and 0 at the
    /// invalid ones. (logsumexp's typed lane runs the engine's `exp`, not the library's:
    /// not bit for bit; the finite-difference tests cover it.)
    #[test]
    fn typed_lanes_equal_the_f64_lanes_bit_for_bit() {
        use crate::element::Float;
        fn check<T: Element + Float, G: LaneGrad>(op: &G, lane: &[f64], fwd: fn(&[f64]) -> f64) {
            let xs: Vec<T> = lane.iter().map(|&x| T::from_f64(x)).collect();
            let wide: Vec<f64> = xs.iter().map(|x| x.to_f64()).collect();
            let n = xs.len();
            let per_elem = op.upstream() == Upstream::PerElement;
            let g: Vec<T::Real> = (0..if per_elem { n } else { 1 })
                .map(|k| Float::from_f64(0.7 - (k % 5) as f64 * 0.3))
                .collect();
            let g_wide: Vec<f64> = g.iter().map(|v| v.to_f64()).collect();
            let gv = if per_elem {
                LaneValues::Each(&g[..])
            } else {
                LaneValues::One(g[0])
            };
            let bits = |v: &[T::Real]| v.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<_>>();
            let zero = <T::Real as Element>::ZERO;
            let saved_one = (!per_elem).then(|| <T::Real as Float>::from_f64(fwd(&wide)));
            for saved in [None, saved_one] {
                let saved = saved.filter(|_| op.uses_output());
                let sv = saved.map_or(LaneValues::Absent, LaneValues::One);
                let mut want = vec![0.0; n];
                match saved {
                    Some(y) => op.grad_from_output(&wide, &[y.to_f64()], &g_wide, &mut want),
                    None => op.grad(&wide, &g_wide, &mut want),
                }
                let want: Vec<T::Real> = want.iter().map(|&v| Float::from_f64(v)).collect();
                let mut got = vec![zero; n];
                if op.typed_lane(&xs, None, gv, sv, &mut got) {
                    let what = format!("{} of {lane:?}, saved {saved:?}", op.name());
                    assert_eq!(bits(&got), bits(&want), "{what}");
                }
                // unpacked: the valid positions interleaved with invalid ones holding -7
                let mut at = Vec::new();
                let mut words = vec![0u64; (2 * n).div_ceil(64)];
                for (k, &x) in xs.iter().enumerate() {
                    words[(2 * k + 1) / 64] |= 1 << ((2 * k + 1) % 64);
                    at.extend([T::from_f64(-7.0), x]);
                }
                let b = masked_kernels::Bits::new(&words, 0);
                let mut spread = vec![<T::Real as Float>::from_f64(5.0); 2 * n];
                if op.typed_lane(&xs, Some((&at, b)), gv, sv, &mut spread) {
                    let expect: Vec<T::Real> = want.iter().flat_map(|&w| [zero, w]).collect();
                    let what = format!("{} of {lane:?} spread, saved {saved:?}", op.name());
                    assert_eq!(bits(&spread), bits(&expect), "{what}");
                }
            }
        }
        let lanes: [&[f64]; 7] = [
            &[1.5, -2.25, 0.0, 3.0, -3.0, 0.125, 7.0, -0.5, 2.0, 1.0],
            &[0.0, 0.0, -0.0],
            &[-4.0],
            &[2.0, -2.0, 2.0, 1.0],
            &[1.0, f64::NAN, 2.0],
            &[1.0, f64::INFINITY, -3.0],
            &[
                1e-30, -2e-30, 3e-31, 0.5e-30, 1e-30, 1e-30, 1e-30, 1e-30, 1e-30,
            ],
        ];
        let max = |xs: &[f64]| xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        for lane in lanes {
            macro_rules! each_op {
                ($t:ty) => {
                    for ord in [0.0, 1.0, 2.0, 3.0, f64::INFINITY, f64::NEG_INFINITY] {
                        let norm = NormGrad::new(ord).unwrap();
                        // the saved norm: the lane's own (a fn pointer cannot capture ord)
                        let fwd: fn(&[f64]) -> f64 = match ord {
                            0.0 => |xs| xs.iter().filter(|&&x| x != 0.0).count() as f64,
                            1.0 => |xs| NormGrad::new(1.0).unwrap().norm(xs),
                            2.0 => |xs| NormGrad::new(2.0).unwrap().norm(xs),
                            3.0 => |xs| NormGrad::new(3.0).unwrap().norm(xs),
                            o if o > 0.0 => |xs| NormGrad::new(f64::INFINITY).unwrap().norm(xs),
                            _ => |xs| NormGrad::new(f64::NEG_INFINITY).unwrap().norm(xs),
                        };
                        check::<$t, _>(&norm, lane, fwd);
                        check::<$t, _>(&NormalizeGrad::new(ord, 1e-12).unwrap(), lane, fwd);
                        check::<$t, _>(&NormalizeGrad::new(ord, 10.0).unwrap(), lane, fwd);
                    }
                    for (c, std) in [(0.0, false), (1.0, true), (5.0, false), (0.0, true)] {
                        let sd: fn(&[f64]) -> f64 = |xs| {
                            let m = xs.iter().sum::<f64>() / xs.len() as f64;
                            (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / xs.len() as f64)
                                .sqrt()
                        };
                        check::<$t, _>(&VarGrad::new(c, std).unwrap(), lane, sd);
                    }
                    check::<$t, _>(&ExtremumGrad { max: true }, lane, max);
                    check::<$t, _>(&ExtremumGrad { max: false }, lane, |xs| {
                        xs.iter().copied().fold(f64::INFINITY, f64::min)
                    });
                };
            }
            each_op!(f32);
            each_op!(f64);
        }
    }

    use crate::lane::SoftmaxKind;

    fn run(op: &impl LaneGrad, xs: &[f64], g: &[f64]) -> Vec<f64> {
        let mut out = vec![f64::NAN; xs.len()];
        op.grad(xs, g, &mut out);
        out
    }

    #[test]
    fn hand_checked_lanes() {
        assert_eq!(run(&SumGrad, &[1.0, 2.0], &[3.0]), [3.0, 3.0]);
        assert_eq!(run(&MeanGrad, &[1.0, 2.0, 5.0, 7.0], &[2.0]), [0.5; 4]);
        // prod of the others, exact with one and with two zeros
        assert_eq!(run(&ProdGrad, &[2.0, 3.0, 4.0], &[1.0]), [12.0, 8.0, 6.0]);
        assert_eq!(run(&ProdGrad, &[2.0, 0.0, 4.0], &[1.0]), [0.0, 8.0, 0.0]);
        assert_eq!(run(&ProdGrad, &[0.0, 0.0, 4.0], &[1.0]), [0.0; 3]);
        let amax = ExtremumGrad { max: true };
        assert_eq!(run(&amax, &[1.0, 5.0, 5.0], &[1.0]), [0.0, 0.5, 0.5]);
        assert!(run(&amax, &[1.0, f64::NAN], &[1.0])
            .iter()
            .all(|x| x.is_nan()));
        // var with correction 1 of [1, 3]: mean 2, 2 (x - 2) / 1
        let var = VarGrad::new(1.0, false).unwrap();
        assert_eq!(run(&var, &[1.0, 3.0], &[1.0]), [-2.0, 2.0]);
        assert_eq!(run(&var, &[4.0], &[1.0]), [0.0]);
        let std = VarGrad::new(0.0, true).unwrap();
        assert_eq!(run(&std, &[2.0, 2.0], &[1.0]), [0.0, 0.0]);
        // std (c = 0) of [1, 3] is 1: (x - 2) / (2 · 1)
        assert_eq!(run(&std, &[1.0, 3.0], &[1.0]), [-0.5, 0.5]);
        // norm 2 of [3, -4] is 5
        let n2 = NormGrad::new(2.0).unwrap();
        assert_eq!(run(&n2, &[3.0, -4.0], &[1.0]), [0.6, -0.8]);
        assert_eq!(run(&n2, &[0.0, 0.0], &[1.0]), [0.0, 0.0]);
        let ninf = NormGrad::new(f64::INFINITY).unwrap();
        assert_eq!(run(&ninf, &[3.0, -4.0, 4.0], &[1.0]), [0.0, -0.5, 0.5]);
        // a lane of valid zeros: 0 everywhere (not g / len), for +inf and -inf
        assert_eq!(run(&ninf, &[0.0; 8], &[1.0]), [0.0; 8]);
        let nminf = NormGrad::new(f64::NEG_INFINITY).unwrap();
        assert_eq!(run(&nminf, &[0.0, 2.0, -0.0], &[1.0]), [0.0; 3]);
        assert_eq!(run(&nminf, &[-1.0, 2.0, 1.0], &[1.0]), [-0.5, 0.0, 0.5]);
        // logsumexp of all -inf splits evenly
        let lse = run(
            &LogSumExpGrad { mean: false },
            &[f64::NEG_INFINITY; 4],
            &[1.0],
        );
        assert_eq!(lse, [0.25; 4]);
        // median avg of [4, 1, 3, 2]: 2 and 3 (positions 3 and 2) take half each
        let med = QuantileGrad::median(MedianMode::Avg);
        assert_eq!(
            run(&med, &[4.0, 1.0, 3.0, 2.0], &[1.0]),
            [0.0, 0.0, 0.5, 0.5]
        );
        // ties resolve by position: the lower median of [1, 1, 1] is the middle one
        let lower = QuantileGrad::median(MedianMode::Lower);
        assert_eq!(run(&lower, &[1.0, 1.0, 1.0], &[1.0]), [0.0, 1.0, 0.0]);
        let q = QuantileGrad::new(0.25, Interpolation::Linear).unwrap();
        // n = 3: pos 0.5 between the 1st and 2nd order statistics
        assert_eq!(run(&q, &[9.0, 1.0, 5.0], &[2.0]), [0.0, 1.0, 1.0]);
        // cumsum: reverse cumulative sums of g
        let cs = CumulativeGrad { prod: false };
        assert_eq!(run(&cs, &[0.0; 3], &[1.0, 2.0, 3.0]), [6.0, 5.0, 3.0]);
        // cumprod of [2, 0, 3]: y = [2, 0, 0]; dy/dx0 = [1, 0, 0], dx1 = [0, 2, 6], dx2 = 0
        let cp = CumulativeGrad { prod: true };
        assert_eq!(
            run(&cp, &[2.0, 0.0, 3.0], &[1.0, 1.0, 1.0]),
            [1.0, 8.0, 0.0]
        );
        // softmax of two equal values: y = 1/2, g = [1, 0]: 0.5 (1 - 0.5) = 0.25
        let sm = SoftmaxGrad {
            kind: SoftmaxKind::Softmax,
        };
        assert_eq!(run(&sm, &[0.0, 0.0], &[1.0, 0.0]), [0.25, -0.25]);
        let lsm = SoftmaxGrad {
            kind: SoftmaxKind::LogSoftmax,
        };
        assert_eq!(run(&lsm, &[0.0, 0.0], &[1.0, 0.0]), [0.5, -0.5]);
        assert_eq!(run(&PtpGrad, &[1.0, 3.0, 1.0], &[2.0]), [-1.0, 2.0, -1.0]);
        assert_eq!(run(&PtpGrad, &[4.0, 4.0], &[1.0]), [0.0, 0.0]);
        // nan-family: the mean of the non-NaN values, 0 at the NaN
        let nm = NanFree(MeanGrad);
        assert_eq!(run(&nm, &[1.0, f64::NAN, 3.0], &[1.0]), [0.5, 0.0, 0.5]);
        assert_eq!(run(&nm, &[f64::NAN], &[1.0]), [0.0]);
    }

    /// Central differences of `f` at `xs` against the lane VJP with upstream `g`.
    fn check_fd(op: &impl LaneGrad, f: impl Fn(&[f64]) -> Vec<f64>, xs: &[f64], g: &[f64]) {
        let got = run(op, xs, g);
        let h = 1e-6;
        for i in 0..xs.len() {
            let mut up = xs.to_vec();
            let mut dn = xs.to_vec();
            up[i] += h;
            dn[i] -= h;
            let d: f64 = f(&up)
                .iter()
                .zip(f(&dn))
                .zip(g)
                .map(|((a, b), g)| g * (a - b) / (2.0 * h))
                .sum();
            assert!(
                (d - got[i]).abs() <= 1e-6 * (1.0 + d.abs()),
                "{} at {i}: finite difference {d}, vjp {}",
                op.name(),
                got[i]
            );
        }
    }

    #[test]
    fn lane_vjps_equal_finite_differences() {
        let xs = [0.3, -1.2, 2.5, 0.7, -0.4];
        let g5 = [0.5, -1.0, 2.0, 0.25, 1.5];
        let n = xs.len() as f64;
        let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
        let var = move |x: &[f64], c: f64| {
            let m = mean(x);
            x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (x.len() as f64 - c)
        };
        check_fd(&ProdGrad, |x| vec![x.iter().product()], &xs, &[1.3]);
        check_fd(&MeanGrad, |x| vec![mean(x)], &xs, &[1.3]);
        check_fd(
            &VarGrad::new(1.0, false).unwrap(),
            |x| vec![var(x, 1.0)],
            &xs,
            &[0.7],
        );
        check_fd(
            &VarGrad::new(0.5, true).unwrap(),
            |x| vec![var(x, 0.5).sqrt()],
            &xs,
            &[0.7],
        );
        for p in [1.0, 2.0, 3.0, 0.5, -1.5] {
            let f =
                move |x: &[f64]| vec![x.iter().map(|v| v.abs().powf(p)).sum::<f64>().powf(1.0 / p)];
            check_fd(&NormGrad::new(p).unwrap(), f, &xs, &[1.1]);
        }
        let lse = |x: &[f64]| vec![x.iter().map(|v| v.exp()).sum::<f64>().ln()];
        check_fd(&LogSumExpGrad { mean: false }, lse, &xs, &[0.9]);
        let softmax = |x: &[f64]| {
            let s: f64 = x.iter().map(|v| v.exp()).sum();
            x.iter().map(|v| v.exp() / s).collect::<Vec<_>>()
        };
        check_fd(
            &SoftmaxGrad {
                kind: SoftmaxKind::Softmax,
            },
            softmax,
            &xs,
            &g5,
        );
        let log_softmax = move |x: &[f64]| softmax(x).iter().map(|v| v.ln()).collect();
        check_fd(
            &SoftmaxGrad {
                kind: SoftmaxKind::LogSoftmax,
            },
            log_softmax,
            &xs,
            &g5,
        );
        let softmin = move |x: &[f64]| softmax(&x.iter().map(|v| -v).collect::<Vec<_>>());
        check_fd(
            &SoftmaxGrad {
                kind: SoftmaxKind::Softmin,
            },
            softmin,
            &xs,
            &g5,
        );
        for (p, eps) in [(2.0, 1e-12), (1.0, 1e-12), (3.0, 1e-12), (2.0, 100.0)] {
            let f = move |x: &[f64]| {
                let nm = x.iter().map(|v| v.abs().powf(p)).sum::<f64>().powf(1.0 / p);
                x.iter().map(|v| v / nm.max(eps)).collect::<Vec<_>>()
            };
            check_fd(&NormalizeGrad::new(p, eps).unwrap(), f, &xs, &g5);
        }
        let cumsum = |x: &[f64]| {
            x.iter()
                .scan(0.0, |s, v| {
                    *s += v;
                    Some(*s)
                })
                .collect()
        };
        check_fd(&CumulativeGrad { prod: false }, cumsum, &xs, &g5);
        let cumprod = |x: &[f64]| {
            x.iter()
                .scan(1.0, |s, v| {
                    *s *= v;
                    Some(*s)
                })
                .collect()
        };
        check_fd(&CumulativeGrad { prod: true }, cumprod, &xs, &g5);
        let q = |qq: f64| {
            move |x: &[f64]| {
                let mut s = x.to_vec();
                s.sort_by(f64::total_cmp);
                let pos = qq * (s.len() - 1) as f64;
                let lo = pos.floor() as usize;
                let fr = pos - lo as f64;
                vec![s[lo] + fr * (s[(lo + 1).min(s.len() - 1)] - s[lo])]
            }
        };
        for qq in [0.0, 0.3, 0.5, 0.9, 1.0] {
            let op = QuantileGrad::new(qq, Interpolation::Linear).unwrap();
            check_fd(&op, q(qq), &xs, &[1.7]);
        }
        let _ = n;
    }
}
