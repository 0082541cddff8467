//! Ops that are not folds: lane statistics (median, quantile) and lane maps (softmax,
//! log_softmax, softmin, normalize, cumsum, cumprod). Each is written once here; a layout
//! supplies the kernels that gather a lane's valid values ([`LaneStat`]) or hand it a
//! lane with its mask bits and an output lane to fill ([`LaneMap`]).

use crate::cast::Cast;
use crate::columns::Columns;
use crate::element::keys_in_place;
use crate::element::{with_calc_out, Acc, CalcOf, Element, Float};
use crate::element::{ByDType, Family};
use crate::error::{MaskedError, Result};
use crate::fold::{kernel_enums, Fold};
use crate::ops::{extremum, max_nan, min_nan, AMaxLanes, AMinLanes, InCalc};
use crate::scattered::Scattered;
use crate::stats::{exp_of, exp_sum, Norm};
use crate::unary::{FloatMap, KeepMap, Unary, UnaryFamily};
use masked_kernels::cpu::fused_exp;
use masked_kernels::pack::{expand_in_place, packed_blocks, packs_fast};
use masked_kernels::run::{
    fold_columns, fold_columns_by, fold_run, map_run, short_kernel, update_run, update_zip_run,
    zip_run, Lanes, SHORT,
};
use masked_kernels::select::select_pair_with_zeros;
use masked_kernels::Bits;
use masked_kernels::BLOCK;

/// A statistic of the valid values of a lane, in any order (median, quantile).
///
/// A lane is given as its explicit valid values (with their lane positions when
/// [`LaneStat::positions`] is true) plus a number of valid zeros that are not
/// materialised: a sparse lane's unstored elements when every position is valid. A
/// statistic counts those zeros without the layout ever writing them out.
pub trait LaneStat<T: Element>: Send + Sync + 'static {
    /// The statistic's type.
    type Output: Element;
    crate::fold::listed!(defaults LaneStat<T>, stat, StatRef, StatOutput, StatEntry);
    /// Name of the op, for messages.
    fn name(&self) -> &'static str;
    /// Whether the statistic needs the lane position of each valid value.
    fn positions(&self) -> bool {
        false
    }
    /// The statistic of the lane made of `vals` (the slice is scratch: its contents are
    /// unspecified afterwards) and `zeros`
    /// further valid zeros. `pos` holds the lane position of each value (same length,
    /// increasing) when [`LaneStat::positions`] is true and is empty otherwise;
    /// `first_zero` is the lowest position of the implicit zeros (unused when `zeros` is
    /// 0; a layout may pass -1 where [`LaneStat::positions`] is false). An empty lane is
    /// a fully masked lane.
    fn compute_sparse(
        &self, vals: &mut [T], pos: &[i64], zeros: usize, first_zero: i64,
    ) -> Self::Output;
    /// The statistic of `vals` with their lane positions `pos` (no implicit zeros).
    fn compute_at(&self, vals: &mut [T], pos: &[i64]) -> Self::Output {
        self.compute_sparse(vals, pos, 0, -1)
    }
    /// The statistic of `vals`, the valid values of one lane.
    fn compute(&self, vals: &mut [T]) -> Self::Output {
        self.compute_sparse(vals, &[], 0, -1)
    }
}

/// The lane position of the lower median (torch.nanmedian / paddle style): the first
/// position holding the lower middle value; with a valid NaN, the first NaN's position
/// (the median is NaN); -1 for a fully masked lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MedianIndex;

impl<T: Element> LaneStat<T> for MedianIndex {
    crate::fold::listed!(stat T, MedianIndex);
    type Output = i64;
    fn name(&self) -> &'static str {
        "median index"
    }
    fn positions(&self) -> bool {
        true
    }
    fn compute_sparse(&self, vals: &mut [T], pos: &[i64], zeros: usize, first_zero: i64) -> i64 {
        let n = vals.len() + zeros;
        if n == 0 {
            return -1;
        }
        if let Some(k) = vals.iter().position(|x| x.is_nan()) {
            return pos[k];
        }
        let zero = T::default().key();
        let mut keys: Vec<T> = vals.to_vec();
        let Some(keys) = keys_in_place(&mut keys) else {
            unreachable!("NaN lanes returned above")
        };
        let (kv, _) = select_pair_with_zeros(keys, zeros, zero, (n - 1) / 2, false);
        let explicit = vals.iter().position(|x| x.key() == kv).map(|k| pos[k]);
        let implicit = (zeros > 0 && kv == zero).then_some(first_zero);
        match (explicit, implicit) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(-1),
        }
    }
}

/// A shape-preserving map of one lane (the softmax family, normalize, cumulative ops).
pub trait LaneMap<T: Element>: Send + Sync + 'static {
    /// Output element type.
    type Output: Element;
    crate::fold::listed!(defaults LaneMap<T>, map, MapRef, MapOutput, MapEntry);
    /// Name of the op, for messages.
    fn name(&self) -> &'static str;
    /// Maps the lane `xs` (valid where `bits` is set; all valid for `None`) into `out`
    /// (same length), writing every position, masked-out ones included.
    fn map(&self, xs: &[T], bits: Option<Bits<'_>>, out: &mut [Self::Output]);
    /// Maps the lanes that run down the columns of a row-major block (a dim outer to
    /// the innermost) into `out`, shaped as the block, every position written as
    /// [`map`](LaneMap::map) writes it; false (nothing written) for an op without a
    /// column form, whose lanes the layout then maps one at a time. The softmax family
    /// and normalize take their statistics as column folds, then map each row; cumsum
    /// and cumprod scan the rows ([`Columns`]).
    fn map_columns(&self, cols: Columns<'_, T>, out: &mut [Self::Output]) -> bool {
        let _ = (cols, out);
        false
    }
    /// Maps the lanes of sparse entries ([`Scattered`]: a lane id an entry, a CSR
    /// matrix's columns) into `out`, one slot an entry in storage order, every slot
    /// written as [`map`](LaneMap::map) writes its element; false (nothing written) for
    /// an op without such a form, whose lanes the layout then gathers into lane order.
    /// The softmax family and normalize fold their statistics into one accumulator a
    /// lane while the entries stream past, then map each entry.
    fn map_scattered(&self, lanes: Scattered<'_, T>, out: &mut [Self::Output]) -> bool {
        let _ = (lanes, out);
        false
    }
    /// Whether [`map_scattered`](LaneMap::map_scattered) applies: a layout that must
    /// compute the entries' lane ids asks first.
    fn scatters(&self) -> bool {
        false
    }
    /// Maps many short lanes at once, every element valid: lane `g` is the elements `i`
    /// with `gid[i] == g`, which are consecutive (`gid` rises by at most 1 from one
    /// element to the next, from 0), each lane holding at most the kernels' `SHORT` elements (the
    /// lanes of sparse data along its trailing dim). The default maps each lane with
    /// [`map`](LaneMap::map); an op whose per-lane set-up outweighs such lanes maps them
    /// together (softmax: one pass per step over all of them).
    fn map_short_lanes(&self, xs: &[T], gid: &[u32], out: &mut [Self::Output]) {
        let mut s = 0;
        while s < xs.len() {
            let mut e = s + 1;
            while e < xs.len() && gid[e] == gid[s] {
                e += 1;
            }
            self.map(&xs[s..e], None, &mut out[s..e]);
            s = e;
        }
    }
}

// ---------------------------------------------------------------- quantile / median

/// How a quantile between two order statistics is chosen (numpy's methods).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Interpolation {
    /// `a + (b - a) * frac` (default).
    #[default]
    Linear,
    /// The lower order statistic.
    Lower,
    /// The higher order statistic.
    Higher,
    /// `(a + b) / 2`.
    Midpoint,
    /// The nearer one; a tie (frac = 0.5) goes to the even index, as numpy.
    Nearest,
}

crate::error::named_choices!(Interpolation, "interpolation":
    "linear" => Linear,
    "lower" => Lower,
    "higher" => Higher,
    "midpoint" => Midpoint,
    "nearest" => Nearest,
);

/// Median of an even count: the mean of the two middle values, or the lower one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MedianMode {
    /// Mean of the two middle values (numpy, paddle).
    #[default]
    Avg,
    /// The lower middle value (torch).
    Lower,
}

crate::error::named_choices!(MedianMode, "mode": "avg" => Avg, "lower" => Lower);

/// The `q`-quantile of the valid values of a lane (q in [0, 1]), by selection: O(n)
/// expected, no full sort. A valid NaN gives NaN; a fully masked lane gives NaN.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quantile {
    q: f64,
    interpolation: Interpolation,
}

impl Quantile {
    /// The `q`-quantile with `interpolation`.
    ///
    /// # Errors
    /// [`MaskedError::InvalidArgument`] when `q` is outside [0, 1] or NaN.
    pub fn new(q: f64, interpolation: Interpolation) -> Result<Self> {
        if !(0.0..=1.0).contains(&q) {
            return Err(MaskedError::InvalidArgument {
                name: "q",
                value: q.to_string(),
                reason: "must be in [0, 1]",
            });
        }
        Ok(Quantile { q, interpolation })
    }
    /// The median (`mode` avg = the midpoint of the two middle values).
    pub fn median(mode: MedianMode) -> Self {
        Quantile {
            q: 0.5,
            interpolation: match mode {
                MedianMode::Avg => Interpolation::Midpoint,
                MedianMode::Lower => Interpolation::Lower,
            },
        }
    }
}

/// numpy's `_lerp` (exact at both ends) for finite endpoints; with an infinite endpoint
/// the limit (that infinity, or NaN between `-inf` and `+inf`) where numpy's arithmetic
/// gives NaN.
fn lerp(a: f64, b: f64, t: f64) -> f64 {
    if a == b {
        return a;
    }
    if a.is_infinite() || b.is_infinite() {
        return a + b;
    }
    let d = b - a;
    if t >= 0.5 {
        b - d * (1.0 - t)
    } else {
        a + d * t
    }
}

impl<T: Element> LaneStat<T> for Quantile {
    crate::fold::listed!(stat T, Quantile);
    type Output = T::Real;
    fn name(&self) -> &'static str {
        "quantile"
    }
    fn compute_sparse(&self, vals: &mut [T], _: &[i64], zeros: usize, _: i64) -> T::Real {
        let n = vals.len() + zeros;
        if n == 0 {
            return <T::Real as Float>::NAN;
        }
        let pos = self.q * (n - 1) as f64;
        let lo = pos.floor() as usize;
        let frac = pos - lo as f64;
        let (a, b) = match *vals {
            // a lane of one or two values (a short sparse lane), no NaN: no selection,
            // whose call chain cost a COO lane of one entry 20 ns
            [x] if zeros == 0 && !x.is_nan() => (x, x),
            [x, y] if zeros == 0 && !x.is_nan() && !y.is_nan() => {
                let (s0, s1) = if y.key() < x.key() { (y, x) } else { (x, y) };
                // ranks `lo` and `lo + 1` (q = 1: the larger, twice)
                if lo == 0 {
                    (s0, s1)
                } else {
                    (s1, s1)
                }
            }
            _ => {
                // select on integer order keys: same order as the values, and a plain
                // integer compare instead of a float comparator; the same pass looks
                // for a NaN
                let Some(keys) = keys_in_place(vals) else {
                    return <T::Real as Float>::NAN;
                };
                let zero = T::default().key();
                let (a, b) = select_pair_with_zeros(keys, zeros, zero, lo, frac > 0.0);
                (T::from_key(a), b.map_or(T::from_key(a), T::from_key))
            }
        };
        let v = match self.interpolation {
            Interpolation::Lower => a.to_f64(),
            Interpolation::Higher => {
                if frac > 0.0 {
                    b.to_f64()
                } else {
                    a.to_f64()
                }
            }
            Interpolation::Linear => {
                if frac > 0.0 {
                    lerp(a.to_f64(), b.to_f64(), frac)
                } else {
                    a.to_f64()
                }
            }
            Interpolation::Midpoint => {
                if frac > 0.0 {
                    (a.to_f64() + b.to_f64()) / 2.0
                } else {
                    a.to_f64()
                }
            }
            Interpolation::Nearest => {
                // round half to even on the index, as numpy's around
                let up = frac > 0.5 || (frac == 0.5 && lo % 2 == 1);
                if up {
                    b.to_f64()
                } else {
                    a.to_f64()
                }
            }
        };
        <T::Real as Float>::from_f64(v)
    }
}

// ---------------------------------------------------------------- softmax family

/// Which member of the softmax family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoftmaxKind {
    /// `exp(x - max) / sum`.
    Softmax,
    /// `(x - max) - log(sum)`.
    LogSoftmax,
    /// `softmax(-x)`.
    Softmin,
}

/// The softmax family over the valid elements of a lane, max-shifted. Masked-out
/// positions get 0 (softmax, softmin) or `-inf` (log_softmax), and so does a fully
/// masked lane ("safe softmax": no NaN rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Softmax {
    /// Which one.
    pub kind: SoftmaxKind,
}

impl<T: Element> LaneMap<T> for Softmax {
    crate::fold::listed!(map T, Softmax);
    type Output = T::Real;
    fn name(&self) -> &'static str {
        match self.kind {
            SoftmaxKind::Softmax => "softmax",
            SoftmaxKind::LogSoftmax => "log_softmax",
            SoftmaxKind::Softmin => "softmin",
        }
    }
    fn map(&self, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T::Real]) {
        with_calc_out(out, |out| {
            if fused_exp() {
                softmax_lane::<T, true>(self.kind, xs, bits, out);
            } else {
                softmax_lane::<T, false>(self.kind, xs, bits, out);
            }
        });
    }
    fn map_short_lanes(&self, xs: &[T], gid: &[u32], out: &mut [T::Real]) {
        with_calc_out(out, |out| softmax_short_lanes::<T>(self.kind, xs, gid, out));
    }
    fn map_columns(&self, cols: Columns<'_, T>, out: &mut [T::Real]) -> bool {
        if fused_exp() {
            softmax_columns::<T, true>(self.kind, cols, out);
        } else {
            softmax_columns::<T, false>(self.kind, cols, out);
        }
        true
    }
    fn scatters(&self) -> bool {
        true
    }
    fn map_scattered(&self, lanes: Scattered<'_, T>, out: &mut [T::Real]) -> bool {
        if fused_exp() {
            softmax_scattered::<T, true>(self.kind, lanes, out);
        } else {
            softmax_scattered::<T, false>(self.kind, lanes, out);
        }
        true
    }
}

/// The exp of a valid `x - shift` (`shift - x` for softmin), <= 0 or NaN, capped at 0
/// (a masked-out element's, which the caller then drops), as the lane kernel takes it.
#[inline(always)]
fn shifted_exp<T: Element, const FUSED: bool>(neg: bool, x: T, s: CalcOf<T>) -> CalcOf<T> {
    let zero = <CalcOf<T> as Element>::ZERO;
    let d = if neg { s - x.calc() } else { x.calc() - s };
    exp_of::<_, FUSED>(if d > zero { zero } else { d })
}

/// Each lane's shift with the log of its sum (log_softmax) or the sum's inverse: the
/// values the last pass of a column form maps each element with.
fn softmax_stats<C: Float>(log: bool, shift: &[C], sums: &[C]) -> Vec<(C, C)> {
    let stat = |s: C| if log { s.ln() } else { C::ONE / s };
    shift
        .iter()
        .zip(sums)
        .map(|(&m, &s)| (m, stat(s)))
        .collect()
}

/// The last pass of a column form, for a run of elements `xs` (valid where `bits` is
/// set) with their lanes' [`softmax_stats`] `cs`: `x - m - log(sum)` (log_softmax) or
/// `exp(x - m) / sum`, masked-out elements `-inf` or 0.
fn softmax_scale<T: Element, const FUSED: bool>(
    kind: SoftmaxKind, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T::Real],
    cs: &[(CalcOf<T>, CalcOf<T>)],
) {
    let neg = kind == SoftmaxKind::Softmin;
    let zero = <CalcOf<T> as Element>::ZERO;
    with_calc_out(out, |out| {
        if kind == SoftmaxKind::LogSoftmax {
            let fill = <CalcOf<T> as Float>::NEG_INFINITY;
            let f = move |x: T, (m, l): (CalcOf<T>, CalcOf<T>), ok| {
                if ok {
                    x.calc() - m - l
                } else {
                    fill
                }
            };
            zip_run(xs, cs, bits, out, f);
        } else {
            let f = move |x: T, (m, inv): (CalcOf<T>, CalcOf<T>), ok| {
                if ok {
                    shifted_exp::<T, FUSED>(neg, x, m) * inv
                } else {
                    zero
                }
            };
            zip_run(xs, cs, bits, out, f);
        }
    })
}

/// `1 / s` for each sum.
fn inverses<C: Float>(sums: &[C]) -> Vec<C> {
    sums.iter().map(|&s| C::ONE / s).collect()
}

/// Scales stored exps (valid where `bits` is set) by their lanes' inverse sums `inv`,
/// in place; masked-out slots 0.
fn scale_exps<C: Float>(out: &mut [C], bits: Option<Bits<'_>>, inv: &[C]) {
    let zero = C::ZERO;
    update_zip_run(
        out,
        inv,
        bits,
        move |e, inv, ok| if ok { e * inv } else { zero },
    );
}

/// Whether the softmax family writes each exp as it sums it and scales it in place
/// after: softmax and softmin with an output of the calculation type (f32, f64; a half
/// output would round each exp before its scale).
fn stores_exps<T: Element>(kind: SoftmaxKind) -> bool {
    kind != SoftmaxKind::LogSoftmax && <T::Real as Element>::DTYPE == <CalcOf<T> as Element>::DTYPE
}

/// [`Softmax`] down columns ([`LaneMap::map_columns`]), the arithmetic of
/// [`softmax_lane`]'s vector path: each lane's shift (its valid max, the min for
/// softmin, NaN-propagating) and sum of `exp(±(x - shift))`, each a column fold over
/// blocks of rows, then every row mapped. For f32 and f64 the sum pass writes each exp
/// and the last pass scales it in place ([`stores_exps`]); the halves take each exp
/// again in the last pass.
fn softmax_columns<T: Element, const FUSED: bool>(
    kind: SoftmaxKind, cols: Columns<'_, T>, out: &mut [T::Real],
) {
    let neg = kind == SoftmaxKind::Softmin;
    let zero = <CalcOf<T> as Element>::ZERO;
    let shift = if neg {
        cols.fold(
            <CalcOf<T> as Float>::INFINITY,
            |_, acc, xs, b, n| fold_columns(&InCalc(AMinLanes), acc, xs, cols.stride(), n, b, 0),
            |s, x| *s = min_nan(*s, x),
        )
    } else {
        cols.fold(
            <CalcOf<T> as Float>::NEG_INFINITY,
            |_, acc, xs, b, n| fold_columns(&InCalc(AMaxLanes), acc, xs, cols.stride(), n, b, 0),
            |s, x| *s = max_nan(*s, x),
        )
    };
    let e = move |x: T, m| shifted_exp::<T, FUSED>(neg, x, m);
    if stores_exps::<T>(kind) {
        // each exp written as it is summed, then scaled in place (one exp an element,
        // as along the last dim); the same sums in the same order, so the same values
        // as the form below
        let sums = cols.fold_rows_into(
            zero,
            out,
            |lane, acc, xs, b, out| {
                let m = &shift[lane..][..acc.len()];
                with_calc_out(out, |o| {
                    zip_run(
                        xs,
                        m,
                        b,
                        o,
                        move |x: T, m, ok| if ok { e(x, m) } else { zero },
                    );
                    for (a, &o) in acc.iter_mut().zip(o.iter()) {
                        *a = *a + o;
                    }
                });
            },
            |s, x| *s = *s + x,
        );
        let inv = inverses(&sums);
        cols.map_rows(&inv, out, |_, bits, out, inv| {
            with_calc_out(out, |o| scale_exps(o, bits, inv))
        });
        return;
    }
    let sums = cols.fold(
        zero,
        |lane, acc, xs, b, n| {
            let w = acc.len();
            let at = |a: CalcOf<T>, x: T, s: CalcOf<T>| a + e(x, s);
            fold_columns_by(at, acc, &shift[lane..][..w], xs, (cols.stride(), n), b);
        },
        |s, x| *s = *s + x,
    );
    let cs = softmax_stats(kind == SoftmaxKind::LogSoftmax, &shift, &sums);
    cols.map_rows(&cs, out, |xs, b, o, cs| {
        softmax_scale::<T, FUSED>(kind, xs, b, o, cs)
    });
}

/// [`Softmax`] over the lanes of sparse entries ([`LaneMap::map_scattered`]): each
/// lane's shift a fold over the entries, the exps a vector pass a block of entries
/// (their lanes' shifts gathered) summed into their lanes, then every entry mapped.
/// The exps are written and scaled in place where [`stores_exps`]; else taken again.
fn softmax_scattered<T: Element, const FUSED: bool>(
    kind: SoftmaxKind, s: Scattered<'_, T>, out: &mut [T::Real],
) {
    let neg = kind == SoftmaxKind::Softmin;
    let zero = <CalcOf<T> as Element>::ZERO;
    let shift = {
        let pick =
            move |a: CalcOf<T>, x: CalcOf<T>| if neg { min_nan(a, x) } else { max_nan(a, x) };
        let id = if neg {
            <CalcOf<T> as Float>::INFINITY
        } else {
            <CalcOf<T> as Float>::NEG_INFINITY
        };
        s.fold(
            &[] as &[()],
            id,
            |acc, _, idx, xs, b, _| {
                for (j, (&l, &x)) in idx.iter().zip(xs).enumerate() {
                    if b.is_none_or(|b| b.get(j)) {
                        acc[l] = pick(acc[l], x.calc());
                    }
                }
            },
            move |s, x| *s = pick(*s, x),
        )
    };
    let e = move |x: T, m, ok| {
        if ok {
            shifted_exp::<T, FUSED>(neg, x, m)
        } else {
            zero
        }
    };
    let add = |acc: &mut [CalcOf<T>], idx: &[usize], o: &[CalcOf<T>]| {
        for (&l, &o) in idx.iter().zip(o) {
            acc[l] = acc[l] + o;
        }
    };
    let merge = |s: &mut CalcOf<T>, x| *s = *s + x;
    if stores_exps::<T>(kind) {
        let sums = s.fold_into(
            &shift,
            zero,
            out,
            |acc, idx, xs, b, out, m| {
                with_calc_out(out, |o| {
                    zip_run(xs, m, b, o, e);
                    add(acc, idx, o);
                })
            },
            merge,
        );
        let inv = inverses(&sums);
        s.map(&inv, out, |_, _, bits, out, inv| {
            with_calc_out(out, |o| scale_exps(o, bits, inv))
        });
        return;
    }
    // the exps of a block summed into their lanes, written to the output slots as
    // scratch (the last pass overwrites every slot from the values; halves: through
    // `with_calc_out`'s per-thread scratch, summed before any rounding)
    let sums = s.fold_into(
        &shift,
        zero,
        out,
        |acc, idx, xs, b, out, m| {
            with_calc_out(out, |o| {
                zip_run(xs, m, b, o, e);
                add(acc, idx, o);
            })
        },
        merge,
    );
    let cs = softmax_stats(kind == SoftmaxKind::LogSoftmax, &shift, &sums);
    s.map(&cs, out, |_, xs, b, o, cs| {
        softmax_scale::<T, FUSED>(kind, xs, b, o, cs)
    });
}

/// [`Softmax`] over many short lanes (as [`LaneMap::map_short_lanes`] lays them out):
/// each lane's shift, the exps, each lane's sum and the scaling, each a pass over all
/// the lanes' elements, instead of a lane kernel's set-up per lane of one or two
/// entries. The arithmetic of the short lane path of [`softmax_lane`], its sums in
/// element order.
fn softmax_short_lanes<T: Element>(
    kind: SoftmaxKind, xs: &[T], gid: &[u32], out: &mut [CalcOf<T>],
) {
    let Some(&last) = gid.last() else {
        return;
    };
    let ng = last as usize + 1;
    let log = kind == SoftmaxKind::LogSoftmax;
    let neg = kind == SoftmaxKind::Softmin;
    // NaN-propagating max (min for softmin) from -inf (+inf), which the first element
    // replaces whatever it is: no branch on a lane's start (at one or two elements a
    // lane, it mispredicted every other element: a third of a COO softmax over dim 2)
    let from = if neg {
        <CalcOf<T> as Float>::INFINITY
    } else {
        <CalcOf<T> as Float>::NEG_INFINITY
    };
    let mut shift = vec![from; ng];
    if neg {
        for (&g, &x) in gid.iter().zip(xs) {
            let s = &mut shift[g as usize];
            *s = crate::ops::min_nan(*s, x.calc());
        }
    } else {
        for (&g, &x) in gid.iter().zip(xs) {
            let s = &mut shift[g as usize];
            *s = crate::ops::max_nan(*s, x.calc());
        }
    }
    for ((o, &g), &x) in out.iter_mut().zip(gid).zip(xs) {
        let s = shift[g as usize];
        *o = if neg { s - x.calc() } else { x.calc() - s };
    }
    let zero = <CalcOf<T> as Element>::ZERO;
    let mut sum = vec![zero; ng];
    if log {
        for (&d, &g) in out.iter().zip(gid) {
            sum[g as usize] = sum[g as usize] + d.exp_nonpos();
        }
        // a log per lane, not per element
        for s in sum.iter_mut() {
            *s = s.ln();
        }
        for (o, &g) in out.iter_mut().zip(gid) {
            *o = *o - sum[g as usize];
        }
        return;
    }
    for o in out.iter_mut() {
        // plain exp, as the short lane path (this loop is not in a kernel compiled with FMA)
        *o = o.exp_nonpos();
    }
    for (&e, &g) in out.iter().zip(gid) {
        sum[g as usize] = sum[g as usize] + e;
    }
    for s in sum.iter_mut() {
        *s = <CalcOf<T> as Float>::ONE / *s;
    }
    for (o, &g) in out.iter_mut().zip(gid) {
        *o = *o * sum[g as usize];
    }
}

/// One lane of [`Softmax`] in the compute type, the vector kernels' `exp` fused when
/// `FUSED`.
fn softmax_lane<T: Element, const FUSED: bool>(
    kind: SoftmaxKind, xs: &[T], bits: Option<Bits<'_>>, out: &mut [CalcOf<T>],
) {
    let log = kind == SoftmaxKind::LogSoftmax;
    let neg = kind == SoftmaxKind::Softmin;
    let fill = if log {
        <CalcOf<T> as Float>::NEG_INFINITY
    } else {
        <CalcOf<T> as Element>::ZERO
    };
    let valid = bits.map_or(xs.len(), |b| b.count_ones(xs.len()));
    if valid == 0 {
        out.fill(fill);
        return;
    }
    let zero = <CalcOf<T> as Element>::ZERO;
    // packing pays below a quarter valid: at half valid (4096^2 f32, two threads) the
    // exps of every position took 13.0-13.4 ms against 15.2-19.2 packed, at 15% valid
    // 13.3-19.3 against 11.7-11.9 (docs/benchmarks.md)
    let sparse = valid * 4 < xs.len();
    if let Some(b) = bits.filter(|_| sparse && !log && packs_fast::<T>() && xs.len() <= BLOCK) {
        // exp of the valid values only: pack them (one pass over memory), take their
        // max and write their exps packed at the end of `out`, sum and scale those
        // (all in L1), then spread them over the lane with 0 where masked out
        let from = xs.len() - valid;
        packed_blocks(xs, bits, |p| {
            let dst = &mut out[from..];
            if neg {
                let shift = extremum(AMinLanes, p, None, 0).calc();
                map_run(
                    p,
                    None,
                    dst,
                    #[inline(always)]
                    move |x: T, _| exp_of::<_, FUSED>(shift - x.calc()),
                );
            } else {
                let shift = extremum(AMaxLanes, p, None, 0).calc();
                map_run(
                    p,
                    None,
                    dst,
                    #[inline(always)]
                    move |x: T, _| exp_of::<_, FUSED>(x.calc() - shift),
                );
            }
            let inv = <CalcOf<T> as Float>::ONE / fold_run(&RealSum, dst, None, 0);
            update_run(
                dst,
                None,
                #[inline(always)]
                move |e: CalcOf<T>, _| e * inv,
            );
        });
        expand_in_place(out, from, b, zero);
        return;
    }
    // a short run takes the short kernel inside `extremum`, without the tier dispatch
    let m: T = if neg {
        extremum(AMinLanes, xs, bits, 0)
    } else {
        extremum(AMaxLanes, xs, bits, 0)
    };
    let shift = m.calc();
    if log {
        let lsum = exp_sum(xs, bits, shift).ln();
        map_run(
            xs,
            bits,
            out,
            #[inline(always)]
            move |x: T, ok| {
                let v = x.calc() - shift - lsum;
                if ok {
                    v
                } else {
                    fill
                }
            },
        );
        return;
    }
    if bits.is_none() && xs.len() <= SHORT {
        // a lane of a few entries (sparse data): the same arithmetic as below,
        // element by element, without the vector kernels' set-up
        for (o, &x) in out.iter_mut().zip(xs) {
            let d = if neg {
                shift - x.calc()
            } else {
                x.calc() - shift
            };
            // plain exp: this loop is not in a kernel compiled with FMA
            *o = d.exp_nonpos();
        }
        let inv = <CalcOf<T> as Float>::ONE / short_kernel(&RealSum, out, None, 0);
        for o in out.iter_mut() {
            *o = *o * inv;
        }
        return;
    }
    // exp once: write exp(+-(x - shift)) (0 where masked out), sum the lane while it
    // is in L1, then scale in place
    if neg {
        map_run(
            xs,
            bits,
            out,
            #[inline(always)]
            move |x: T, ok| {
                // at every element, then selected (see `FloatAt::at` in unary.rs): a
                // valid `d` is <= 0 (or NaN); a masked-out one is capped at 0
                let d = shift - x.calc();
                let e = exp_of::<_, FUSED>(if d > zero { zero } else { d });
                if ok {
                    e
                } else {
                    zero
                }
            },
        );
    } else {
        map_run(
            xs,
            bits,
            out,
            #[inline(always)]
            move |x: T, ok| {
                // at every element, then selected (see `FloatAt::at` in unary.rs): a
                // valid `d` is <= 0 (or NaN); a masked-out one is capped at 0
                let d = x.calc() - shift;
                let e = exp_of::<_, FUSED>(if d > zero { zero } else { d });
                if ok {
                    e
                } else {
                    zero
                }
            },
        );
    }
    let sum: CalcOf<T> = fold_run(&RealSum, out, None, 0);
    let inv = <CalcOf<T> as Float>::ONE / sum;
    // the lane's largest valid value gives exp(0) = 1, so a sum that is not NaN is in
    // [1, n] and `inv` finite: the masked-out positions' 0 times it stays 0, and the
    // scale needs no mask (a plain multiply: the masked update ran at a third of its
    // speed). Masked-out positions stay 0 when the sum is NaN too
    let bits = if sum.is_nan() { bits } else { None };
    update_run(
        out,
        bits,
        #[inline(always)]
        move |e: CalcOf<T>, ok| if ok { e * inv } else { zero },
    );
}

/// Lane monoid: plain sum of statistics-type values.
#[derive(Debug)]
struct RealSum;
impl<R: Float> Lanes<R> for RealSum {
    type A = R;
    #[inline(always)]
    fn id(&self) -> R {
        R::ZERO
    }
    #[inline(always)]
    fn lift(&self, x: R, _: i64) -> R {
        x
    }
    #[inline(always)]
    fn comb(&self, a: R, b: R) -> R {
        a + b
    }
}

/// `x / max(norm_ord(valid x), eps)` at valid positions, 0 at masked-out ones (and in a
/// fully masked lane).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalize {
    norm: Norm,
    eps: f64,
}

impl Normalize {
    /// A lane's `max(norm, eps)` (NaN-propagating) from its norm's state, in the
    /// calculation type.
    fn denominator<T: Element>(&self, s: &<Norm as Fold<T>>::State) -> CalcOf<T> {
        // the norm's state is f64: finish it there, without rounding to the output type
        let d = self.norm.finish_f64(s.0);
        <CalcOf<T> as Float>::from_f64(if d.is_nan() { d } else { d.max(self.eps) })
    }

    /// Normalize by the `ord` norm, with denominator floor `eps`.
    ///
    /// # Errors
    /// A NaN `ord`; a negative or NaN `eps`.
    pub fn new(ord: f64, eps: f64) -> Result<Self> {
        if eps.is_nan() || eps < 0.0 {
            return Err(MaskedError::InvalidArgument {
                name: "eps",
                value: eps.to_string(),
                reason: "must be a number >= 0",
            });
        }
        Ok(Normalize {
            norm: Norm::new(ord)?,
            eps,
        })
    }
}

impl<T: Element> LaneMap<T> for Normalize {
    crate::fold::listed!(map T, Normalize);
    type Output = T::Real;
    fn name(&self) -> &'static str {
        "normalize"
    }
    fn map(&self, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T::Real]) {
        let denom = self.denominator::<T>(&Fold::<T>::fold_slice(&self.norm, xs, bits));
        let zero = <CalcOf<T> as Element>::ZERO;
        with_calc_out(out, |out| {
            map_run(
                xs,
                bits,
                out,
                #[inline(always)]
                move |x: T, ok| if ok { x.calc() / denom } else { zero },
            )
        });
    }
    /// Each lane's norm a column fold ([`Fold::push_columns`] of the norm), then every
    /// row divided by its columns' denominators.
    fn map_columns(&self, cols: Columns<'_, T>, out: &mut [T::Real]) -> bool {
        let norm = &self.norm;
        let states = cols.fold(
            Fold::<T>::identity(norm),
            |_, acc, xs, b, n| Fold::<T>::push_columns(norm, acc, xs, cols.stride(), n, b, 0),
            |s, x| Fold::<T>::merge(norm, s, x),
        );
        let denoms: Vec<CalcOf<T>> = states.iter().map(|s| self.denominator::<T>(s)).collect();
        cols.map_rows(&denoms, out, divide_by::<T>);
        true
    }
    fn scatters(&self) -> bool {
        true
    }
    /// Each lane's norm folded an entry at a time into its lane's state, then every
    /// entry divided by its lane's denominator.
    fn map_scattered(&self, lanes: Scattered<'_, T>, out: &mut [T::Real]) -> bool {
        let norm = &self.norm;
        let states = lanes.fold(
            &[] as &[()],
            Fold::<T>::identity(norm),
            |acc, _, idx, xs, b, _| {
                for (j, (&l, &x)) in idx.iter().zip(xs).enumerate() {
                    if b.is_none_or(|b| b.get(j)) {
                        Fold::<T>::push(norm, &mut acc[l], x, 0);
                    }
                }
            },
            |s, x| Fold::<T>::merge(norm, s, x),
        );
        let denoms: Vec<CalcOf<T>> = states.iter().map(|s| self.denominator::<T>(s)).collect();
        lanes.map(&denoms, out, |_, xs, b, o, ds| divide_by::<T>(xs, b, o, ds));
        true
    }
}

/// A run of elements (valid where `bits` is set) divided by their lanes' denominators
/// `ds`, masked-out elements 0: normalize's last pass.
fn divide_by<T: Element>(xs: &[T], bits: Option<Bits<'_>>, out: &mut [T::Real], ds: &[CalcOf<T>]) {
    let zero = <CalcOf<T> as Element>::ZERO;
    with_calc_out(out, |out| {
        let f = move |x: T, d: CalcOf<T>, ok| if ok { x.calc() / d } else { zero };
        zip_run(xs, ds, bits, out, f);
    })
}

/// Cumulative sum (`prod == false`) or product along the lane, in the input type
/// (accumulated in `T::Total`: f64 for floats, wrapping i64 for integers, then cast back,
/// wrapping for integers). Masked-out positions carry the running value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cumulative {
    /// Product instead of sum.
    pub prod: bool,
}

impl Cumulative {
    /// The running total's start (and a masked-out element's term): 1 for cumprod, 0
    /// for cumsum.
    fn identity<T: Element>(&self) -> T::Total {
        if self.prod {
            <T::Total as Acc>::ONE
        } else {
            <T::Total as Acc>::ZERO
        }
    }
}

impl<T: Element> LaneMap<T> for Cumulative {
    crate::fold::listed!(map T, Cumulative);
    type Output = T;
    fn name(&self) -> &'static str {
        if self.prod {
            "cumprod"
        } else {
            "cumsum"
        }
    }
    fn map(&self, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T]) {
        let id = self.identity::<T>();
        let mut acc = id;
        // per chunk of one mask word: the chunk's terms (the identity where masked out)
        // chained into running totals, then their conversion to `T` in the CPU's vector
        // kernel (the halves' rounding from f64 is a few dozen instructions; generic
        // code is compiled for the baseline CPU). A lane of `VECTOR_TERMS` or more picks
        // its terms in the vector kernel first and chains them after: picked inside the
        // chain, the pick is a branch on the mask bit (`select_unpredictable` did not
        // change that), mispredicted on every other element of a random mask, 12 cycles
        // an element (dense 2048^2 cumsum 8.1 -> 2.9 ms); shorter lanes (CSR rows) pay
        // less for the branch than for the kernel's call. Chunks of one mask word:
        // larger ones (1024) measured 1.8x slower on CSR rows of ~100, which then
        // initialise a scratch far longer than the row
        const VECTOR_TERMS: usize = 256;
        let mut step = |v: T::Total| {
            acc = if self.prod { acc.mul(v) } else { acc.add(v) };
            acc
        };
        let mut totals = [id; 64];
        let vector_terms = xs.len() >= VECTOR_TERMS;
        for (c, (oc, xc)) in out.chunks_mut(64).zip(xs.chunks(64)).enumerate() {
            let m = oc.len();
            if vector_terms {
                // the terms into `totals`, then the chain over them in place
                let b = bits.map(|b| b.offset(c * 64));
                map_run(
                    xc,
                    b,
                    &mut totals[..m],
                    #[inline(always)]
                    move |x: T, ok| if ok { x.to_total() } else { id },
                );
                for t in &mut totals[..m] {
                    *t = step(*t);
                }
            } else {
                let w = bits.map_or(u64::MAX, |b| b.word_at(c * 64));
                for (k, (t, &x)) in totals.iter_mut().zip(xc).enumerate() {
                    *t = step(if (w >> k) & 1 == 1 { x.to_total() } else { id });
                }
            }
            map_run(
                &totals[..m],
                None,
                oc,
                #[inline(always)]
                |t: T::Total, _| T::from_total(t),
            );
        }
    }
    fn scatters(&self) -> bool {
        true
    }
    /// The entries in storage order, each lane's running total in `T::Total` carried
    /// from one of its entries to the next ([`Scattered::scan`]): each lane's chain is
    /// the lane's own, in order, so the result is [`map`](LaneMap::map)'s to the bit.
    fn map_scattered(&self, lanes: Scattered<'_, T>, out: &mut [T]) -> bool {
        let (prod, id) = (self.prod, self.identity::<T>());
        lanes.scan(out, id, move |acc: &mut T::Total, x: T, ok| {
            let v = if ok { x.to_total() } else { id };
            *acc = if prod { acc.mul(v) } else { acc.add(v) };
            T::from_total(*acc)
        });
        true
    }
    /// A row at a time, each column's running total carried to the next row: the
    /// row's terms (the identity where masked out), the totals chained, converted to
    /// `T`, each a loop across the columns; each lane's chain is the lane's own, in
    /// order, so the result is [`map`](LaneMap::map)'s to the bit.
    fn map_columns(&self, cols: Columns<'_, T>, out: &mut [T]) -> bool {
        let (prod, id) = (self.prod, self.identity::<T>());
        let init = |w| (vec![id; w], vec![id; w]);
        cols.scan_rows(out, init, |(acc, terms), xs, bits, out| {
            let term = move |x: T, ok| if ok { x.to_total() } else { id };
            map_run(xs, bits, terms, term);
            if prod {
                acc.iter_mut()
                    .zip(terms.iter())
                    .for_each(|(a, &t)| *a = a.mul(t));
            } else {
                acc.iter_mut()
                    .zip(terms.iter())
                    .for_each(|(a, &t)| *a = a.add(t));
            }
            map_run(acc, None, out, |t: T::Total, _| T::from_total(t));
        });
        true
    }
}

// ---------------------------------------------------------------- the listed maps

/// The statistic and map families of the kernel list (the fold family is
/// [`fold_list!`](crate::fold_list)): every [`LaneStat`] / [`LaneMap`] type the layouts
/// compile in their own crates, as `Variant: type`. Each calls back `$cb!` with its tokens
/// followed by the list in brackets. A new type of the engine goes here, and
/// `listed!(stat T, Name)` / `listed!(map T, Name)` in its impl.
#[doc(hidden)]
#[macro_export]
macro_rules! stat_list {
    ($cb:path, $($args:tt)*) => {
        $cb! { $($args)* [Quantile: $crate::lane::Quantile, MedianIndex: $crate::lane::MedianIndex] }
    };
}

/// See [`stat_list!`](crate::stat_list).
#[doc(hidden)]
#[macro_export]
macro_rules! map_list {
    ($cb:path, $($args:tt)*) => {
        $cb! { $($args)* [
            Softmax: $crate::lane::Softmax, Normalize: $crate::lane::Normalize,
            Cumulative: $crate::lane::Cumulative,
            FloatMap: $crate::unary::FloatMap<$crate::unary::FloatFn>,
            KeepMap: $crate::unary::KeepMap<$crate::unary::KeepFn>,
            CastF32: $crate::cast::Cast<f32>, CastF64: $crate::cast::Cast<f64>,
        ] }
    };
}

crate::stat_list!(kernel_enums, "lane statistic" LaneStat, StatRef, StatOutput, StatOutputOf, StatEntry);
crate::map_list!(kernel_enums, "lane map" LaneMap, MapRef, MapOutput, MapOutputOf, MapEntry);

/// `&FloatMap<U>` over `U`.
struct FloatMapRef<'k>(std::marker::PhantomData<&'k ()>);
impl<'k> UnaryFamily for FloatMapRef<'k> {
    type Of<U: Unary + 'static> = &'k FloatMap<U>;
}
/// A map entry's result for `FloatMap<U>`, over `U`.
struct FloatMapOut<'a, T, E>(std::marker::PhantomData<(&'a (), T, E)>);
impl<'a, T: Element, E: MapEntry<'a>> UnaryFamily for FloatMapOut<'a, T, E> {
    type Of<U: Unary + 'static> = E::Out<T, FloatMap<U>>;
}
/// `&KeepMap<U>` over `U`.
struct KeepMapRef<'k>(std::marker::PhantomData<&'k ()>);
impl<'k> UnaryFamily for KeepMapRef<'k> {
    type Of<U: Unary + 'static> = &'k KeepMap<U>;
}
/// A map entry's result for `KeepMap<U>`, over `U`.
struct KeepMapOut<'a, T, E>(std::marker::PhantomData<(&'a (), T, E)>);
impl<'a, T: Element, E: MapEntry<'a>> UnaryFamily for KeepMapOut<'a, T, E> {
    type Of<U: Unary + 'static> = E::Out<T, KeepMap<U>>;
}
/// `&Cast<D>` over the target `D`.
struct CastRef<'k>(std::marker::PhantomData<&'k ()>);
impl<'k> Family for CastRef<'k> {
    type Of<D: Element> = &'k Cast<D>;
}
/// A map entry's result for `Cast<D>`, over the target `D`.
struct CastOut<'a, T, E>(std::marker::PhantomData<(&'a (), T, E)>);
impl<'a, T: Element, E: MapEntry<'a>> Family for CastOut<'a, T, E> {
    type Of<D: Element> = E::Out<T, Cast<D>>;
}

impl<T: Element, U: Unary + 'static> LaneMap<T> for FloatMap<U> {
    // listed over FloatFn
    const PREBUILT: bool = U::FLOAT_LISTED;
    fn listed(&self) -> Option<MapRef<'_>> {
        U::to_float_fn::<FloatMapRef<'_>>(self).map(MapRef::FloatMap)
    }
    fn take<'a, E: MapEntry<'a>>(out: MapOutput<'a, T, E>) -> E::Out<T, Self> {
        let typed = match out {
            MapOutput::FloatMap(o) => U::from_float_fn::<FloatMapOut<'a, T, E>>(o),
            _ => None,
        };
        typed.expect("an output of another kernel type")
    }
    type Output = T::Real;
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn map(&self, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T::Real]) {
        self.0.map_float(xs, bits, out);
    }
}

impl<T: Element, U: Unary + 'static> LaneMap<T> for KeepMap<U> {
    // listed over KeepFn
    const PREBUILT: bool = U::KEEP_LISTED;
    fn listed(&self) -> Option<MapRef<'_>> {
        U::to_keep_fn::<KeepMapRef<'_>>(self).map(MapRef::KeepMap)
    }
    fn take<'a, E: MapEntry<'a>>(out: MapOutput<'a, T, E>) -> E::Out<T, Self> {
        let typed = match out {
            MapOutput::KeepMap(o) => U::from_keep_fn::<KeepMapOut<'a, T, E>>(o),
            _ => None,
        };
        typed.expect("an output of another kernel type")
    }
    type Output = T;
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn map(&self, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T]) {
        self.0.map_keep(xs, bits, out);
    }
}

impl<T: Element, D: Element> LaneMap<T> for Cast<D> {
    // listed for the dtypes with compiled entries: Cast<f32>, Cast<f64>
    const PREBUILT: bool = D::PREBUILT;
    fn listed(&self) -> Option<MapRef<'_>> {
        match D::erase::<CastRef<'_>>(self) {
            ByDType::F32(c) => Some(MapRef::CastF32(c)),
            ByDType::F64(c) => Some(MapRef::CastF64(c)),
            _ => None,
        }
    }
    fn take<'a, E: MapEntry<'a>>(out: MapOutput<'a, T, E>) -> E::Out<T, Self> {
        let typed = match out {
            MapOutput::CastF32(o) => D::unerase_owned::<CastOut<'a, T, E>>(ByDType::F32(o)),
            MapOutput::CastF64(o) => D::unerase_owned::<CastOut<'a, T, E>>(ByDType::F64(o)),
            _ => None,
        };
        typed.expect("a cast's output of another target dtype")
    }
    type Output = D;
    fn name(&self) -> &'static str {
        "cast"
    }
    fn map(&self, xs: &[T], bits: Option<Bits<'_>>, out: &mut [D]) {
        self.map_lane(xs, bits, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cumsum and cumprod equal the plain serial chain in `T::Total` (a masked-out
    /// element contributes the identity), bit for bit, on lanes short and long (the
    /// terms picked in the chain below 256, in the vector kernel from there), f32 and
    /// f64, with and without a mask.
    #[test]
    fn cumulative_equals_the_serial_chain_on_short_and_long_lanes() {
        fn check<T: Element>(xs: &[T], words: &[u64]) {
            for prod in [false, true] {
                for bits in [None, Some(Bits::new(words, 0))] {
                    let mut out = vec![T::ZERO; xs.len()];
                    Cumulative { prod }.map(xs, bits, &mut out);
                    let mut acc = if prod {
                        <T::Total as Acc>::ONE
                    } else {
                        <T::Total as Acc>::ZERO
                    };
                    for (k, (&x, &o)) in xs.iter().zip(&out).enumerate() {
                        if bits.is_none_or(|b| b.get(k)) {
                            acc = if prod {
                                acc.mul(x.to_total())
                            } else {
                                acc.add(x.to_total())
                            };
                        }
                        let want = T::from_total(acc);
                        // the same value, NaN and the sign of zero included
                        assert_eq!(
                            format!("{o:?}"),
                            format!("{want:?}"),
                            "prod {prod}, mask {}, len {}, at {k}",
                            bits.is_some(),
                            xs.len()
                        );
                    }
                }
            }
        }
        let mut r = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            r
        };
        let words: Vec<u64> = (0..10).map(|_| next()).collect();
        for n in [0, 1, 63, 64, 65, 255, 256, 257, 600] {
            // values near 1 (the products stay finite), a NaN and an infinity in the
            // long lanes
            let mut xs: Vec<f64> = (0..n)
                .map(|_| 0.9 + (next() % 1000) as f64 / 5000.0)
                .collect();
            if n > 300 {
                xs[280] = f64::INFINITY;
                xs[290] = f64::NAN;
            }
            check(&xs, &words);
            check(&xs.iter().map(|&x| x as f32).collect::<Vec<_>>(), &words);
        }
    }

    /// Lanes of one to eight elements mapped together equal each lane mapped alone:
    /// bit for bit where a lane's sum is of at most two terms (order-free) near 0,
    /// within rounding beyond; NaN, infinities and a lane of -inf give what the lane
    /// kernel gives; lanes far from 0 need their own shift.
    #[test]
    fn short_lanes_together_equal_each_lane_alone() {
        let lanes: Vec<Vec<f32>> = vec![
            vec![0.5],
            vec![1.0, -2.0],
            vec![f32::NAN, 1.0],
            vec![f32::INFINITY, 3.0],
            vec![f32::NEG_INFINITY, f32::NEG_INFINITY],
            vec![f32::NEG_INFINITY, 2.0],
            vec![3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0],
            vec![-7.0, 0.0, 7.0],
            // far from 0: only each lane's own shift keeps the exps finite and nonzero
            vec![100.0, 99.0],
            vec![-100.0, -101.0],
            vec![-200.0],
        ];
        let xs: Vec<f32> = lanes.concat();
        let gid: Vec<u32> = lanes
            .iter()
            .enumerate()
            .flat_map(|(g, l)| std::iter::repeat_n(g as u32, l.len()))
            .collect();
        for kind in [
            SoftmaxKind::Softmax,
            SoftmaxKind::LogSoftmax,
            SoftmaxKind::Softmin,
        ] {
            let op = Softmax { kind };
            let mut together = vec![0.0f32; xs.len()];
            op.map_short_lanes(&xs, &gid, &mut together);
            let mut at = 0;
            for l in &lanes {
                let mut alone = vec![0.0f32; l.len()];
                op.map(l, None, &mut alone);
                for (a, b) in alone.iter().zip(&together[at..at + l.len()]) {
                    // (far from 0 the lane kernel's log_softmax rounds differently)
                    let far = l.iter().any(|x| x.is_finite() && x.abs() >= 50.0);
                    if (l.len() <= 2 && !far) || a.is_nan() {
                        assert_eq!(a.to_bits(), b.to_bits(), "{kind:?} {l:?}: {a} vs {b}");
                    } else {
                        assert!(
                            (a - b).abs() <= 4.0 * f32::EPSILON * a.abs().max(1e-30),
                            "{kind:?} {l:?}: {a} vs {b}"
                        );
                    }
                }
                at += l.len();
            }
        }
        // the default: each lane through `map` (a normalization without its own)
        let mut out = vec![0.0f32; xs.len()];
        let mut alone = Vec::new();
        for l in &lanes {
            let mut o = vec![0.0f32; l.len()];
            Normalize::new(2.0, 1e-12).unwrap().map(l, None, &mut o);
            alone.extend(o);
        }
        Normalize::new(2.0, 1e-12)
            .unwrap()
            .map_short_lanes(&xs, &gid, &mut out);
        assert_eq!(
            out.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            alone.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
    }
}
