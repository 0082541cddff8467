//! Elementwise binary ops (masked algebra): each written once, as a variant of one of
//! three enums by output type, and run by every layout through its
//! [`ZipKernels`](crate::ZipKernels) kernel:
//!
//! - [`KeepBin`] (add, sub, mul, floor_divide, pow, maximum, minimum, fmax, fmin, fmod,
//!   remainder): the operands' type; integers compute in `i64` and wrap back;
//! - [`FloatBin`] (div, atan2, hypot, logaddexp, xlogy): the float type, `f64` for
//!   integers ([`Element::Real`]);
//! - [`CmpBin`] (eq, ne, lt, le, gt, ge): `bool`.
//!
//! Both operands have one type `T` here: promotion (torch's `result_type`, semantics.md)
//! happens before, by casting, in the by-name layer. A scalar operand is a
//! [`Src::Splat`]; a scalar on the left is the [`Swapped`] op.
//!
//! The output mask follows the [`MaskRule`] of the call; an invalid dense position holds
//! `0` (`false` for comparisons), so NaN or garbage under a mask never leaks, and a
//! sparse output stores exactly the valid positions. An integer `floor_divide`, `fmod` or
//! `remainder` by 0, or an integer raised to a negative power, **at a valid position** is
//! an error naming the position ([`MaskedError::IntegerDomain`]); at an invalid position
//! it is no error.

pub use crate::dims::broadcast_shapes;
use crate::element::{
    ByDType, CalcOf, DType, DynVec, Element, Erase, Family, Float, Scalar, SliceMutOf, SliceOf,
};
use crate::error::{MaskedError, Result};
use crate::fold::Fold;
use crate::math::Math;
use crate::unary::{filled, WIDE_BLOCK};
use half::f16;
use masked_kernels::run::{map_run, pair_run, zip_run};
use masked_kernels::Bits;
use std::mem::MaybeUninit;
use std::ops::Range;

/// How a binary op combines its operands' masks; chosen per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MaskRule {
    /// MaskedTensor's rule: the masks of two masked operands must be equal (after
    /// broadcasting), else an error naming the first differing position; a plain array
    /// or a scalar takes the masked operand's mask. Keeps `sum(a + b) == sum(a) + sum(b)`.
    #[default]
    Strict,
    /// numpy.ma's rule: an output position is valid where both operands are valid.
    And,
}

crate::error::named_choices!(MaskRule, "masks": "strict" => Strict, "and" => And);

/// Output values of an elementwise op, tagged at run time: numbers of any dtype, or
/// `bool` (comparisons, predicates).
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// Numbers.
    Num(DynVec),
    /// Booleans.
    Bool(Vec<bool>),
}

impl From<DynVec> for Values {
    fn from(v: DynVec) -> Self {
        Values::Num(v)
    }
}

/// A value an elementwise op may produce: every [`Element`], and `bool`.
pub trait Value:
    Copy + Default + PartialEq + Send + Sync + std::fmt::Debug + masked_kernels::ZeroBits + 'static
{
    /// The values, tagged with their type.
    fn into_values(v: Vec<Self>) -> Values;
}

impl<T: Element> Value for T {
    fn into_values(v: Vec<Self>) -> Values {
        Values::Num(T::into_dyn(v))
    }
}

impl Value for bool {
    fn into_values(v: Vec<Self>) -> Values {
        Values::Bool(v)
    }
}

/// A scalar operand of a binary op: `x.mul(&Splat(2.0), rule)`; it is valid everywhere
/// and takes the other operand's mask under either rule. A scalar on the left (`1 - x`)
/// is the [`Swapped`] op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Splat<T>(pub T);

/// One operand of a run: consecutive values, or one value standing for every element
/// (a scalar, or a broadcast dim).
#[derive(Debug, Clone, Copy)]
pub enum Src<'a, T> {
    /// One value per element.
    Slice(&'a [T]),
    /// The same value for every element.
    Splat(T),
}

impl<T: Copy> Src<'_, T> {
    /// The value of element `k`.
    #[inline(always)]
    pub fn get(&self, k: usize) -> T {
        match self {
            Src::Slice(s) => s[k],
            Src::Splat(v) => *v,
        }
    }
}

/// The family of [`Src`] runs, for [`Erase::erase`].
pub struct SrcOf<'a>(std::marker::PhantomData<&'a ()>);

impl<'a> Family for SrcOf<'a> {
    type Of<T: Element> = Src<'a, T>;
}

/// A binary elementwise op on `T` operands, as the layouts run it.
pub trait ZipMap<T: Element>: Copy + Send + Sync {
    /// The output value type.
    type Output: Value;
    /// The op's name, for messages.
    fn name(&self) -> &'static str;
    /// The value at one valid position, `None` where the op fails there (an integer
    /// division by 0, an integer raised to a negative power).
    fn one(&self, x: T, y: T) -> Option<Self::Output>;
    /// Why [`ZipMap::one`] fails, in words (for the error message).
    fn failure(&self) -> &'static str {
        "undefined"
    }
    /// Writes `out[k] = op(x_k, y_k)` at valid `k` and the zero value elsewhere, for a
    /// run of `out.len()` elements; returns the first valid `k` where the op fails (the
    /// run's output is then unspecified).
    fn run(
        &self, xs: Src<'_, T>, ys: Src<'_, T>, bits: Option<Bits<'_>>, out: &mut [Self::Output],
    ) -> Option<usize>;
    /// Where this map is an op of the keep family: that op and the two runs it reads,
    /// in its operand order (`xs`, `ys` as this map's operands). A layout's fused fold
    /// then may read both runs in the fold's own kernel ([`keep_pair_run`]) instead of
    /// computing the values first.
    fn keep_operands<'s>(
        &self, xs: &'s [T], ys: &'s [T],
    ) -> Option<KeepOperands<'s, Self::Output>> {
        let _ = (xs, ys);
        None
    }
    /// Whether `op(x, y)` is the zero value (`0`, `false`): a sparse operand without a
    /// mask keeps its stored positions only for such ops.
    fn keeps_zero(&self, x: T, y: T) -> bool {
        self.one(x, y) == Some(Self::Output::default())
    }
}

/// An op with its operands swapped when the flag is set: `Swapped(sub, true)` computes
/// `y - x`, so a scalar on the left (`1 - x`) runs as a scalar on the right. The flag is
/// a run-time value, so one compiled kernel serves both orders.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Swapped<Z>(pub Z, pub bool);

impl<T: Element, Z: ZipMap<T>> ZipMap<T> for Swapped<Z> {
    type Output = Z::Output;
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn one(&self, x: T, y: T) -> Option<Z::Output> {
        if self.1 {
            self.0.one(y, x)
        } else {
            self.0.one(x, y)
        }
    }
    fn failure(&self) -> &'static str {
        self.0.failure()
    }
    fn keep_operands<'s>(&self, xs: &'s [T], ys: &'s [T]) -> Option<KeepOperands<'s, Z::Output>> {
        if self.1 {
            self.0.keep_operands(ys, xs)
        } else {
            self.0.keep_operands(xs, ys)
        }
    }
    fn run(
        &self, xs: Src<'_, T>, ys: Src<'_, T>, bits: Option<Bits<'_>>, out: &mut [Z::Output],
    ) -> Option<usize> {
        if self.1 {
            self.0.run(ys, xs, bits, out)
        } else {
            self.0.run(xs, ys, bits, out)
        }
    }
}

/// Runs `f` over a run, `O::default()` at invalid positions: the one loop every binary
/// op compiles to (vectorised by the kernels crate).
#[inline(always)]
fn run_with<T: Copy, O: Value>(
    xs: Src<'_, T>, ys: Src<'_, T>, bits: Option<Bits<'_>>, out: &mut [O],
    f: impl Fn(T, T) -> O + Copy,
) {
    /// `r` where valid, the default elsewhere
    #[inline(always)]
    fn pick<O: Value>(r: O, v: bool) -> O {
        if v {
            r
        } else {
            O::default()
        }
    }
    let n = out.len();
    match (xs, ys) {
        (Src::Slice(a), Src::Slice(b)) => zip_run(
            &a[..n],
            &b[..n],
            bits,
            out,
            #[inline(always)]
            move |x, y, v| pick(f(x, y), v),
        ),
        (Src::Slice(a), Src::Splat(y)) => map_run(
            &a[..n],
            bits,
            out,
            #[inline(always)]
            move |x, v| pick(f(x, y), v),
        ),
        (Src::Splat(x), Src::Slice(b)) => map_run(
            &b[..n],
            bits,
            out,
            #[inline(always)]
            move |y, v| pick(f(x, y), v),
        ),
        (Src::Splat(x), Src::Splat(y)) => {
            let r = f(x, y);
            for (k, o) in out.iter_mut().enumerate() {
                *o = pick(r, bits.is_none_or(|b| b.get(k)));
            }
        }
    }
}

/// The first valid position of a run where `fails(x, y)`.
fn first_failure<T: Copy>(
    xs: Src<'_, T>, ys: Src<'_, T>, bits: Option<Bits<'_>>, n: usize, fails: impl Fn(T, T) -> bool,
) -> Option<usize> {
    (0..n).find(|&k| bits.is_none_or(|b| b.get(k)) && fails(xs.get(k), ys.get(k)))
}

/// Declares an op enum with its names, and a macro `$mac!(op, C => body)` that runs
/// `body` with the constant `C` bound to `op`'s variant: one copy of `body` per variant,
/// so the op's function is resolved at compile time inside the loop (a runtime `op`
/// inside the loop left a jump table per element and a scalar loop).
macro_rules! bin_enum {
    ($d:tt $mac:ident; $(#[$doc:meta])* $name:ident { $( $(#[$vdoc:meta])* $v:ident = $s:literal ),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vdoc])* $v, )*
        }
        impl $name {
            /// Every op of this family.
            pub const ALL: &'static [$name] = &[$($name::$v),*];
            /// The op's name.
            pub fn name(self) -> &'static str {
                match self { $( $name::$v => $s, )* }
            }
            /// The op of this family with this name.
            pub fn from_name(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|o| o.name() == s)
            }
        }
        macro_rules! $mac {
            ($d op:expr, $d c:ident => $d body:expr) => {
                match $d op { $( $name::$v => { const $d c: $name = $name::$v; $d body } )* }
            };
        }
    };
}

bin_enum! {
    $ keep_dispatch;
    /// Binary ops that keep the operands' type (integers wrap).
    KeepBin {
        /// `x + y`.
        Add = "add",
        /// `x - y`.
        Sub = "sub",
        /// `x * y`.
        Mul = "mul",
        /// `floor(x / y)` (torch's rounding: from `fmod`, exact); integers by 0 fail.
        FloorDivide = "floor_divide",
        /// `x^y`; `pow(-inf, y)` for a positive non-integer `y` is NaN (as the unary
        /// `pow`); an integer to a negative power fails.
        Pow = "pow",
        /// The larger; NaN propagates.
        Maximum = "maximum",
        /// The smaller; NaN propagates.
        Minimum = "minimum",
        /// The larger; a NaN operand gives the other.
        Fmax = "fmax",
        /// The smaller; a NaN operand gives the other.
        Fmin = "fmin",
        /// C `fmod`: the sign of the dividend; integers by 0 fail.
        Fmod = "fmod",
        /// `x - y * floor(x / y)`: the sign of the divisor (torch's `remainder`); integers
        /// by 0 fail.
        Remainder = "remainder",
    }
}

bin_enum! {
    $ float_dispatch;
    /// Binary float functions: the output is the float type (`f64` for integers).
    FloatBin {
        /// True division `x / y`.
        Div = "div",
        /// The angle of `(y, x)`: `atan2(x, y)`.
        Atan2 = "atan2",
        /// `sqrt(x^2 + y^2)`.
        Hypot = "hypot",
        /// `log(e^x + e^y)` without overflow.
        LogAddExp = "logaddexp",
        /// `x * log(y)`, 0 where `x == 0` (unless `y` is NaN).
        Xlogy = "xlogy",
    }
}

bin_enum! {
    $ cmp_dispatch;
    /// Comparisons: the output is `bool` (false at invalid positions).
    CmpBin {
        /// `x == y`.
        Eq = "eq",
        /// `x != y`.
        Ne = "ne",
        /// `x < y`.
        Lt = "lt",
        /// `x <= y`.
        Le = "le",
        /// `x > y`.
        Gt = "gt",
        /// `x >= y`.
        Ge = "ge",
    }
}

/// `C::of(v)`.
#[inline(always)]
fn c<C: Math>(v: f64) -> C {
    C::of(v)
}

impl KeepBin {
    /// The float function, in the compute type.
    #[inline(always)]
    pub fn float<C: Float + Math>(self, a: C, b: C) -> C {
        match self {
            KeepBin::Add => a + b,
            KeepBin::Sub => a - b,
            KeepBin::Mul => a * b,
            KeepBin::FloorDivide => floor_div(a, b),
            KeepBin::Pow => {
                if b == c(0.5) {
                    // as the unary pow (and torch, numpy): -0 at -0, NaN at -inf
                    a.sqrt()
                } else if a == C::NEG_INFINITY && b > c(0.0) && b.trunc() != b {
                    C::NAN
                } else {
                    a.powf(b)
                }
            }
            KeepBin::Maximum => {
                if a.is_nan() || b.is_nan() {
                    C::NAN
                } else if a > b {
                    a
                } else {
                    b
                }
            }
            KeepBin::Minimum => {
                if a.is_nan() || b.is_nan() {
                    C::NAN
                } else if a < b {
                    a
                } else {
                    b
                }
            }
            KeepBin::Fmax => {
                if b.is_nan() || a > b {
                    a
                } else {
                    b
                }
            }
            KeepBin::Fmin => {
                if b.is_nan() || a < b {
                    a
                } else {
                    b
                }
            }
            KeepBin::Fmod => Math::fmod(a, b),
            KeepBin::Remainder => {
                let m = Math::fmod(a, b);
                if m != c(0.0) && ((b < c(0.0)) != (m < c(0.0))) {
                    m + b
                } else {
                    m
                }
            }
        }
    }

    /// The integer function (wrapping); 0 where [`KeepBin::int_fails`].
    #[inline(always)]
    pub fn int(self, a: i64, b: i64) -> i64 {
        match self {
            KeepBin::Add => a.wrapping_add(b),
            KeepBin::Sub => a.wrapping_sub(b),
            KeepBin::Mul => a.wrapping_mul(b),
            KeepBin::FloorDivide => {
                if b == 0 {
                    0
                } else {
                    let q = a.wrapping_div(b);
                    if (a < 0) != (b < 0) && a.wrapping_rem(b) != 0 {
                        q.wrapping_sub(1)
                    } else {
                        q
                    }
                }
            }
            KeepBin::Pow => {
                if b < 0 {
                    0
                } else {
                    ipow(a, b as u64)
                }
            }
            KeepBin::Maximum | KeepBin::Fmax => a.max(b),
            KeepBin::Minimum | KeepBin::Fmin => a.min(b),
            KeepBin::Fmod => {
                if b == 0 {
                    0
                } else {
                    a.wrapping_rem(b)
                }
            }
            KeepBin::Remainder => {
                if b == 0 {
                    0
                } else {
                    let r = a.wrapping_rem(b);
                    if r != 0 && ((r < 0) != (b < 0)) {
                        r.wrapping_add(b)
                    } else {
                        r
                    }
                }
            }
        }
    }

    /// Whether the integer function fails at `(a, b)`.
    #[inline(always)]
    pub fn int_fails(self, b: i64) -> bool {
        match self {
            KeepBin::FloorDivide | KeepBin::Fmod | KeepBin::Remainder => b == 0,
            KeepBin::Pow => b < 0,
            _ => false,
        }
    }

    /// Why the integer function fails, in words.
    pub fn failure(self) -> &'static str {
        match self {
            KeepBin::Pow => "an integer raised to a negative power",
            _ => "integer division by zero",
        }
    }

    #[inline(always)]
    pub(crate) fn apply<T: Element>(self, x: T, y: T) -> T {
        x.zip_keep(
            y,
            #[inline(always)]
            |a, b| self.float(a, b),
            #[inline(always)]
            |i, j| self.int(i, j),
        )
    }
}

/// `a^b` for `b >= 0`, wrapping.
#[inline(always)]
fn ipow(mut a: i64, mut b: u64) -> i64 {
    let mut r = 1i64;
    while b > 0 {
        if b & 1 == 1 {
            r = r.wrapping_mul(a);
        }
        a = a.wrapping_mul(a);
        b >>= 1;
    }
    r
}

/// torch's floating floor division: from `fmod`, so that `floor_divide(a, b) * b +
/// remainder(a, b) == a` holds where it can.
#[inline(always)]
fn floor_div<C: Float + Math>(a: C, b: C) -> C {
    if b == c(0.0) {
        return a / b;
    }
    let m = a.fmod(b);
    let mut div = (a - m) / b;
    if m != c(0.0) && ((b < c(0.0)) != (m < c(0.0))) {
        div = div - c(1.0);
    }
    if div != c(0.0) {
        let mut f = div.floor();
        if div - f > c(0.5) {
            f = f + c(1.0);
        }
        f
    } else {
        // a signed zero with the sign of a / b
        let q = a / b;
        if q < c(0.0) || (q == c(0.0) && c::<C>(1.0) / q < c(0.0)) {
            c(-0.0)
        } else {
            c(0.0)
        }
    }
}

/// `log(e^a + e^b)` in f64.
#[inline(always)]
fn logaddexp(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        // inf + inf, -inf + -inf, and equal finite values
        a + std::f64::consts::LN_2
    } else {
        let (m, d) = if a > b { (a, b - a) } else { (b, a - b) };
        m + d.exp().ln_1p()
    }
}

impl FloatBin {
    /// The function, in the compute type.
    #[inline(always)]
    pub fn float<C: Float + Math>(self, a: C, b: C) -> C {
        match self {
            FloatBin::Div => a / b,
            FloatBin::Atan2 => a.atan2(b),
            FloatBin::Hypot => a.hypot(b),
            // in f64 for f32 too: `m + log1p(e^-d)` cancels where the result is near 0
            FloatBin::LogAddExp => c(logaddexp(Math::to_f64(a), Math::to_f64(b))),
            FloatBin::Xlogy => {
                if b.is_nan() {
                    C::NAN
                } else if a == c(0.0) {
                    c(0.0)
                } else {
                    a * b.ln()
                }
            }
        }
    }

    #[inline(always)]
    fn apply<T: Element>(self, x: T, y: T) -> T::Real {
        <T::Real as Float>::from_calc(self.float::<CalcOf<T>>(x.calc(), y.calc()))
    }
}

impl CmpBin {
    /// The comparison (false with a NaN operand, except `ne`).
    #[inline(always)]
    pub fn apply<T: PartialOrd>(self, x: T, y: T) -> bool {
        match self {
            CmpBin::Eq => x == y,
            CmpBin::Ne => x != y,
            CmpBin::Lt => x < y,
            CmpBin::Le => x <= y,
            CmpBin::Gt => x > y,
            CmpBin::Ge => x >= y,
        }
    }
}

/// Runs `body` with the constant `$c: BinOp` bound to `op`'s variant, as the families'
/// own dispatch macros: one copy of `body` per op, so [`BinOp::partials`] folds to the
/// op's formula inside the loop.
macro_rules! grad_dispatch {
    ($op:expr, $c:ident => $body:expr) => {
        match $op {
            BinOp::Keep(k) => keep_dispatch!(k, K => {
                const $c: BinOp = BinOp::Keep(K);
                $body
            }),
            BinOp::Float(f) => float_dispatch!(f, F => {
                const $c: BinOp = BinOp::Float(F);
                $body
            }),
            BinOp::Cmp(_) => {
                const $c: BinOp = BinOp::Cmp(CmpBin::Eq);
                $body
            }
        }
    };
}

/// The zip map of a type-keeping op: output `T`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepZip(pub KeepBin);

impl<T: Element> ZipMap<T> for KeepZip {
    type Output = T;
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn keep_operands<'s>(&self, xs: &'s [T], ys: &'s [T]) -> Option<KeepOperands<'s, T>> {
        Some((self.0, xs, ys))
    }
    #[inline]
    fn one(&self, x: T, y: T) -> Option<T> {
        if !T::DTYPE.is_float() && self.0.int_fails(int_of(y)) {
            return None;
        }
        Some(self.0.apply(x, y))
    }
    fn failure(&self) -> &'static str {
        self.0.failure()
    }
    fn run(
        &self, xs: Src<'_, T>, ys: Src<'_, T>, bits: Option<Bits<'_>>, out: &mut [T],
    ) -> Option<usize> {
        let op = self.0;
        if op == KeepBin::Pow
            && T::DTYPE.is_float()
            && let (Src::Slice(x), Src::Splat(p)) = (xs, ys)
            && let Ok(pow) = crate::unary::Pow::new(p.to_f64())
        {
            // `x ** p`, one exponent: the unary pow's loop (short forms at 2, 3, -1, -2
            // and 0.5, else the branch-free power with the exact form at zeros,
            // infinities and NaNs), in the accuracy contract, instead of `powf` per
            // element (4096² f32 `x ** 3` 28 -> 4.4 ms: docs/benchmarks.md)
            let out = <T::Real as Erase>::unerase_owned(T::erase::<SliceMutOf<'_>>(out))
                .expect("a float's real type is itself");
            crate::unary::float_run(crate::unary::FloatFn::Pow(pow), &x[..out.len()], bits, out);
            return None;
        }
        if !T::DTYPE.is_float()
            && matches!(
                op,
                KeepBin::FloorDivide | KeepBin::Fmod | KeepBin::Remainder | KeepBin::Pow
            )
            && let Some(k) =
                first_failure(xs, ys, bits, out.len(), |_, y: T| op.int_fails(int_of(y)))
        {
            return Some(k);
        }
        let (ex, ey) = (T::erase::<SrcOf<'_>>(xs), T::erase::<SrcOf<'_>>(ys));
        match (ex, ey, T::erase::<SliceMutOf<'_>>(out)) {
            (ByDType::F32(x), ByDType::F32(y), ByDType::F32(o)) => op.run_f32(x, y, bits, o),
            (ByDType::F64(x), ByDType::F64(y), ByDType::F64(o)) => op.run_f64(x, y, bits, o),
            (ByDType::F16(x), ByDType::F16(y), ByDType::F16(o)) => {
                f16_blocks(x, y, bits, o, |x, y, b, c| op.run_f32(x, y, b, c))
            }
            // the integers (in i64) and bf16 at their own type: bf16's conversions are
            // shifts, and its loop, one pass, was 2.5x faster than blocks in f32 (a
            // memory-bound op on 10M CSR entries)
            (_, _, o) => {
                let out = T::unerase_owned(o).expect("erased as T above");
                keep_dispatch!(op, OP => run_with(xs, ys, bits, out, #[inline(always)] move |x: T, y: T| OP.apply(x, y)));
            }
        }
        None
    }
}

/// A family's runs over `f32` and `f64` (`run_f32`, `run_f64`): each variant's loop,
/// compiled here once, non-generic; every layout reaches them through the family's
/// `ZipMap::run` (and f16's arithmetic in blocks widened to `f32`).
macro_rules! compiled_runs {
    ($family:ident, $dispatch:ident, $($name:ident: $t:ident -> $o:ty),*) => {
        impl $family {
            $(
                #[doc = concat!("The op over a `", stringify!($t), "` run, compiled here once.")]
                #[inline(never)]
                pub fn $name(
                    self,
                    xs: Src<'_, $t>,
                    ys: Src<'_, $t>,
                    bits: Option<Bits<'_>>,
                    out: &mut [$o],
                ) {
                    $dispatch!(self, OP => run_with(xs, ys, bits, out, #[inline(always)] move |x: $t, y: $t| OP.apply(x, y)));
                }
            )*
        }
    };
}

compiled_runs!(KeepBin, keep_dispatch, run_f32: f32 -> f32, run_f64: f64 -> f64);
compiled_runs!(FloatBin, float_dispatch, run_f32: f32 -> f32, run_f64: f64 -> f64);
compiled_runs!(CmpBin, cmp_dispatch, run_f32: f32 -> bool, run_f64: f64 -> bool);

/// Runs `f` over the blocks of a run (at most [`WIDE_BLOCK`] elements each) with both
/// operands converted to `W` by `conv` (a slice's block into a stack buffer; a splat
/// once, by `one`), passing each block's validity bits and its range in the run.
#[inline(always)]
fn wide_blocks<T: Copy, W: Copy>(
    xs: Src<'_, T>, ys: Src<'_, T>, n: usize, bits: Option<Bits<'_>>,
    conv: impl for<'o> Fn(&[T], &'o mut [MaybeUninit<W>]) -> &'o [W], one: impl Fn(T) -> W,
    mut f: impl FnMut(Src<'_, W>, Src<'_, W>, Option<Bits<'_>>, Range<usize>),
) {
    let mut bx = [MaybeUninit::<W>::uninit(); WIDE_BLOCK];
    let mut by = [MaybeUninit::<W>::uninit(); WIDE_BLOCK];
    let mut off = 0;
    while off < n {
        let m = (n - off).min(WIDE_BLOCK);
        let wx = match xs {
            Src::Slice(s) => Src::Slice(conv(&s[off..off + m], &mut bx[..m])),
            Src::Splat(v) => Src::Splat(one(v)),
        };
        let wy = match ys {
            Src::Slice(s) => Src::Slice(conv(&s[off..off + m], &mut by[..m])),
            Src::Splat(v) => Src::Splat(one(v)),
        };
        f(wx, wy, bits.map(|b| b.offset(off)), off..off + m);
        off += m;
    }
}

/// An f16 run of a type-keeping op or a float function: blocks with both operands
/// widened to `f32` exactly (`vcvtph2ps` where the CPU has it), mapped by the `f32` run
/// `f`, rounded back once (`vcvtps2ph`): what [`Element::zip_keep`] and [`FloatBin`]'s
/// `apply` compute for a half, value by value, so the same bits.
#[inline(never)]
fn f16_blocks(
    xs: Src<'_, f16>, ys: Src<'_, f16>, bits: Option<Bits<'_>>, out: &mut [f16],
    f: impl Fn(Src<'_, f32>, Src<'_, f32>, Option<Bits<'_>>, &mut [f32]),
) {
    let mut co = [MaybeUninit::<f32>::uninit(); WIDE_BLOCK];
    let co = filled(&mut co[..out.len().min(WIDE_BLOCK)], 0.0);
    let widen = |v: f16| v.to_f32();
    wide_blocks(xs, ys, out.len(), bits, f16::unpack, widen, |x, y, b, r| {
        let c = &mut co[..r.len()];
        f(x, y, b, c);
        f16::from_calc_block(c, &mut out[r]);
    });
}

/// A keep-family op and the two runs it reads ([`ZipMap::keep_operands`]).
pub type KeepOperands<'s, T> = (KeepBin, &'s [T], &'s [T]);

/// The pair path of a fused fold ([`Fold::push_pair_run`]) for an op of the keep
/// family: folds `bin(xs[k], ys[k])` into `state` with `op`, reading both runs in the
/// fold's own kernel, the same result bit for bit as folding the values written out.
/// Taken by the arithmetic ops (`add`, `sub`, `mul`) on float values, which cannot
/// fail at a masked-out position; `false`, having done nothing, for every other case
/// (the layout then computes the values first).
pub fn keep_pair_run<T: Element, F: Fold<T>>(
    bin: KeepBin, op: &F, state: &mut F::State, (xs, ys): (&[T], &[T]), bits: Option<Bits<'_>>,
    idx0: i64,
) -> bool {
    if !T::DTYPE.is_float() {
        return false;
    }
    macro_rules! pair {
        ($v:ident) => {{
            const OP: KeepBin = KeepBin::$v;
            op.push_pair_run(
                state,
                xs,
                ys,
                #[inline(always)]
                move |x: T, y: T| OP.apply(x, y),
                bits,
                idx0,
            )
        }};
    }
    match bin {
        KeepBin::Add => pair!(Add),
        KeepBin::Sub => pair!(Sub),
        KeepBin::Mul => pair!(Mul),
        _ => false,
    }
}

/// An integer value as `i64` (only called for integer types).
#[inline(always)]
fn int_of<T: Element>(v: T) -> i64 {
    match v.to_scalar() {
        crate::element::Scalar::Int(i) => i,
        crate::element::Scalar::Float(f) => f as i64,
    }
}

/// The zip map of a float function: output [`Element::Real`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloatZip(pub FloatBin);

impl<T: Element> ZipMap<T> for FloatZip {
    type Output = T::Real;
    fn name(&self) -> &'static str {
        self.0.name()
    }
    #[inline]
    fn one(&self, x: T, y: T) -> Option<T::Real> {
        Some(self.0.apply(x, y))
    }
    fn run(
        &self, xs: Src<'_, T>, ys: Src<'_, T>, bits: Option<Bits<'_>>, out: &mut [T::Real],
    ) -> Option<usize> {
        let op = self.0;
        let (ex, ey) = (T::erase::<SrcOf<'_>>(xs), T::erase::<SrcOf<'_>>(ys));
        match (ex, ey, <T::Real as Erase>::erase::<SliceMutOf<'_>>(out)) {
            (ByDType::F32(x), ByDType::F32(y), ByDType::F32(o)) => op.run_f32(x, y, bits, o),
            (ByDType::F64(x), ByDType::F64(y), ByDType::F64(o)) => op.run_f64(x, y, bits, o),
            (ByDType::F16(x), ByDType::F16(y), ByDType::F16(o)) => {
                f16_blocks(x, y, bits, o, |x, y, b, c| op.run_f32(x, y, b, c))
            }
            // bf16 (its conversions are shifts: see `KeepZip`) and the integers at their
            // own type (converted to f64 in blocks, an i32 `div` took 1.6x as long)
            (_, _, o) => {
                let out = <T::Real as Erase>::unerase_owned(o).expect("erased as T::Real above");
                float_dispatch!(op, OP => run_with(xs, ys, bits, out, #[inline(always)] move |x: T, y: T| OP.apply(x, y)));
            }
        }
        None
    }
}

/// The zip map of a comparison: output `bool`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmpZip(pub CmpBin);

impl<T: Element> ZipMap<T> for CmpZip {
    type Output = bool;
    fn name(&self) -> &'static str {
        self.0.name()
    }
    #[inline]
    fn one(&self, x: T, y: T) -> Option<bool> {
        Some(self.0.apply(x, y))
    }
    fn run(
        &self, xs: Src<'_, T>, ys: Src<'_, T>, bits: Option<Bits<'_>>, out: &mut [bool],
    ) -> Option<usize> {
        let op = self.0;
        match (T::erase::<SrcOf<'_>>(xs), T::erase::<SrcOf<'_>>(ys)) {
            (ByDType::F32(x), ByDType::F32(y)) => op.run_f32(x, y, bits, out),
            (ByDType::F64(x), ByDType::F64(y)) => op.run_f64(x, y, bits, out),
            // the halves, and the integers (i64 has no exact f64), at their own type: f16
            // compares its bits as they are, and blocks widened to f32 made `gt` 1.3x
            // slower
            _ => {
                cmp_dispatch!(op, OP => run_with(xs, ys, bits, out, #[inline(always)] move |x: T, y: T| OP.apply(x, y)))
            }
        }
        None
    }
}

/// A predicate of one value: masks from predicates (numpy.ma's `masked_where`,
/// `masked_invalid`, `masked_greater`, ...). The mask of a predicate is true where it
/// holds **and** the input is valid.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Predicate {
    /// `x` is NaN.
    IsNan,
    /// `x` is finite (integers always).
    IsFinite,
    /// `x` is +inf or -inf.
    IsInf,
    /// `x` is +inf.
    IsPosInf,
    /// `x` is -inf.
    IsNegInf,
    /// `x <op> value`, compared as `f64` (exact for every dtype but `i64` beyond 2^53).
    Cmp(CmpBin, f64),
}

impl Predicate {
    /// Whether the predicate holds for `x`.
    #[inline(always)]
    pub fn holds<T: Element>(self, x: T) -> bool {
        let v = x.to_f64();
        match self {
            Predicate::IsNan => v.is_nan(),
            Predicate::IsFinite => v.is_finite(),
            Predicate::IsInf => v.is_infinite(),
            Predicate::IsPosInf => v == f64::INFINITY,
            Predicate::IsNegInf => v == f64::NEG_INFINITY,
            Predicate::Cmp(c, s) => c.apply(v, s),
        }
    }

    /// The predicate of a name: `isnan`, `isfinite`, `isinf`, `isposinf`, `isneginf`, or
    /// a comparison with a value, `gt:0.5` (`eq ne lt le gt ge`).
    ///
    /// # Errors
    /// [`MaskedError::InvalidArgument`] naming the text.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = || {
            MaskedError::InvalidArgument {
            name: "predicate",
            value: text.to_string(),
            reason: "expected isnan, isfinite, isinf, isposinf, isneginf or OP:VALUE with OP one of eq ne lt le gt ge",
        }
        };
        Ok(match text {
            "isnan" => Predicate::IsNan,
            "isfinite" => Predicate::IsFinite,
            "isinf" => Predicate::IsInf,
            "isposinf" => Predicate::IsPosInf,
            "isneginf" => Predicate::IsNegInf,
            t => {
                let (op, v) = t.split_once(':').ok_or_else(bad)?;
                let op = CmpBin::from_name(op).ok_or_else(bad)?;
                Predicate::Cmp(op, v.trim().parse().map_err(|_| bad())?)
            }
        })
    }
}

/// The zip map of a predicate (its second operand is ignored): `bool` output, false at
/// invalid positions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PredZip(pub Predicate);

impl<T: Element> ZipMap<T> for PredZip {
    type Output = bool;
    fn name(&self) -> &'static str {
        "predicate"
    }
    #[inline]
    fn one(&self, x: T, _: T) -> Option<bool> {
        Some(self.0.holds(x))
    }
    fn run(
        &self, xs: Src<'_, T>, ys: Src<'_, T>, bits: Option<Bits<'_>>, out: &mut [bool],
    ) -> Option<usize> {
        let p = self.0;
        run_with(
            xs,
            ys,
            bits,
            out,
            #[inline(always)]
            move |x: T, _| p.holds(x),
        );
        None
    }
}

/// Merges two sparse operands of `where(cond, a, b)` over positions `0..len`: the output
/// holds `a`'s valid entries where `cond` is true and `b`'s where it is false (positions
/// valid in neither are left out), in order.
pub fn select_merge<I: Copy + Ord, T: Element>(
    a: Side<'_, I, T>, b: Side<'_, I, T>, cond: impl Fn(I) -> bool, pos_out: &mut Vec<I>,
    val_out: &mut Vec<T>,
) {
    let va = |k: usize| a.valid.is_none_or(|bits| bits.get(k));
    let vb = |k: usize| b.valid.is_none_or(|bits| bits.get(k));
    let (mut i, mut j) = (0usize, 0usize);
    loop {
        let (p, from_a, from_b) = match (a.pos.get(i), b.pos.get(j)) {
            (None, None) => break,
            (Some(&x), Some(&y)) if x == y => (x, Some(i), Some(j)),
            (Some(&x), Some(&y)) if x < y => (x, Some(i), None),
            (Some(_), Some(&y)) => (y, None, Some(j)),
            (Some(&x), None) => (x, Some(i), None),
            (None, Some(&y)) => (y, None, Some(j)),
        };
        i += usize::from(from_a.is_some());
        j += usize::from(from_b.is_some());
        let pick = if cond(p) {
            from_a.filter(|&k| va(k)).map(|k| a.values[k])
        } else {
            from_b.filter(|&k| vb(k)).map(|k| b.values[k])
        };
        if let Some(v) = pick {
            pos_out.push(p);
            val_out.push(v);
        }
    }
}

/// One partial derivative of a binary op as a zip map, for the VJPs of the sparse
/// layouts: `∂f/∂x` (or `∂f/∂y` with `wrt_y`) at every valid output position, by
/// [`BinOp::partials`], in the input's float type (0 for a comparison). Run through a
/// layout's forward zip, it lands on exactly the forward output's positions, where the
/// upstream gradient is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartialZip {
    /// The op.
    pub op: BinOp,
    /// Whether the derivative is with respect to the right operand.
    pub wrt_y: bool,
}

impl<T: Element> ZipMap<T> for PartialZip {
    type Output = T::Real;
    fn name(&self) -> &'static str {
        self.op.name()
    }
    #[inline]
    fn one(&self, x: T, y: T) -> Option<T::Real> {
        let (px, py) = self
            .op
            .partials(x.to_f64(), y.to_f64())
            .unwrap_or((0.0, 0.0));
        Some(<T::Real as Float>::from_f64(if self.wrt_y {
            py
        } else {
            px
        }))
    }
    fn run(
        &self, xs: Src<'_, T>, ys: Src<'_, T>, bits: Option<Bits<'_>>, out: &mut [T::Real],
    ) -> Option<usize> {
        let (op, wrt_y) = (self.op, self.wrt_y);
        let (ex, ey) = (T::erase::<SrcOf<'_>>(xs), T::erase::<SrcOf<'_>>(ys));
        match (ex, ey, <T::Real as Erase>::erase::<SliceMutOf<'_>>(out)) {
            (ByDType::F32(x), ByDType::F32(y), ByDType::F32(o)) => {
                op.partial_run_f32(wrt_y, x, y, bits, o)
            }
            (ByDType::F64(x), ByDType::F64(y), ByDType::F64(o)) => {
                op.partial_run_f64(wrt_y, x, y, bits, o)
            }
            // the halves at their own type: in f64 blocks (the partials are f64's) the
            // conversion passes made an f16 `vjp-mul` 1.4x slower than this fused loop
            (_, _, o) => {
                let out = <T::Real as Erase>::unerase_owned(o).expect("erased as T::Real above");
                partial_loop(op, wrt_y, xs, ys, bits, out);
            }
        }
        None
    }
}

/// `∂f/∂x` (or `∂f/∂y`, `wrt_y`) of `op` over a run, in `f64`, rounded once into `O`:
/// the loop of [`PartialZip`], each op resolved at compile time inside it.
#[inline(always)]
fn partial_loop<T: Element, O: Float>(
    op: BinOp, wrt_y: bool, xs: Src<'_, T>, ys: Src<'_, T>, bits: Option<Bits<'_>>, out: &mut [O],
) {
    let pick = |(px, py): (f64, f64), wrt_y: bool| if wrt_y { py } else { px };
    grad_dispatch!(op, OP => run_with(xs, ys, bits, out, #[inline(always)] move |x: T, y: T| {
        let p = OP.partials(x.to_f64(), y.to_f64()).unwrap_or((0.0, 0.0));
        O::from_f64(pick(p, wrt_y))
    }));
}

/// `BinOp`'s VJP loops over `f32` and over `f64` runs, compiled here once,
/// non-generic: the partial derivatives of [`PartialZip`] and both gradients of
/// [`grad_run`]. The halves run the same loops at their own type (in `f64` blocks they
/// were 1.4x slower).
macro_rules! grad_runs {
    ($($t:ident: $partial:ident, $grad:ident;)*) => {
        impl BinOp {
            $(
                #[doc = concat!("The partial derivatives of [`PartialZip`] over a `", stringify!($t), "` run.")]
                #[inline(never)]
                pub fn $partial(
                    self,
                    wrt_y: bool,
                    xs: Src<'_, $t>,
                    ys: Src<'_, $t>,
                    bits: Option<Bits<'_>>,
                    out: &mut [$t],
                ) {
                    partial_loop(self, wrt_y, xs, ys, bits, out);
                }
                #[doc = concat!("[`grad_run`] over `", stringify!($t), "` runs.")]
                #[inline(never)]
                #[allow(clippy::too_many_arguments)]
                pub fn $grad(
                    self,
                    xs: &[$t],
                    ys: Src<'_, $t>,
                    g: &[$t],
                    bits: Option<Bits<'_>>,
                    dx: &mut [$t],
                    dy: &mut [$t],
                ) {
                    grad_loop(self, xs, ys, g, bits, dx, dy);
                }
            )*
        }
    };
}

grad_runs! {
    f32: partial_run_f32, grad_run_f32;
    f64: partial_run_f64, grad_run_f64;
}

/// `g · (∂f/∂x, ∂f/∂y)` at one position in `f64`, rounded once into the output types;
/// both 0 where `valid` is false or the op has no partials (a comparison).
#[inline(always)]
fn times_partials<T: Element, Q: Float>(
    op: BinOp, x: T, y: T, g: T::Real, valid: bool,
) -> (T::Real, Q) {
    let (px, py) = op.partials(x.to_f64(), y.to_f64()).unwrap_or((0.0, 0.0));
    let gv = g.to_f64();
    let zero = (<T::Real as Float>::from_f64(0.0), Q::from_f64(0.0));
    let both = (<T::Real as Float>::from_f64(gv * px), Q::from_f64(gv * py));
    if valid {
        both
    } else {
        zero
    }
}

/// The gradients of the binary op `op` over a run, both at once: `dx[k] = g[k] ·
/// ∂f/∂x(x_k, y_k)` and `dy[k] = g[k] · ∂f/∂y(x_k, y_k)` at valid `k` (per `bits`;
/// all for `None`), 0 elsewhere. Each product is computed in `f64` and rounded once
/// into the output type (`dy` may be `f64`: the terms of a scalar operand's sum). The
/// op is resolved at compile time inside the loop and the loop is the kernels'
/// vectorised `pair_run`: for `mul` it is a multiply per output.
///
/// `f32` and `f64` runs go to the loops compiled once in this crate
/// ([`BinOp::grad_run_f32`], [`BinOp::grad_run_f64`]); every other case (the halves, an
/// `f32` run with `f64` terms) runs the same loop at its own types.
pub fn grad_run<T: Element, Q: Float>(
    op: BinOp, xs: &[T], ys: Src<'_, T>, g: &[T::Real], bits: Option<Bits<'_>>, dx: &mut [T::Real],
    dy: &mut [Q],
) {
    use ByDType::{F32, F64};
    let ins = (
        T::erase::<SliceOf<'_>>(xs),
        T::erase::<SrcOf<'_>>(ys),
        <T::Real as Erase>::erase::<SliceOf<'_>>(g),
    );
    let outs = (
        <T::Real as Erase>::erase::<SliceMutOf<'_>>(dx),
        <Q as Erase>::erase::<SliceMutOf<'_>>(dy),
    );
    match (ins, outs) {
        ((F32(x), F32(y), F32(g)), (F32(dx), F32(dy))) => op.grad_run_f32(x, y, g, bits, dx, dy),
        ((F64(x), F64(y), F64(g)), (F64(dx), F64(dy))) => op.grad_run_f64(x, y, g, bits, dx, dy),
        // the halves, and an f32 run with f64 terms, at their own types (see
        // `PartialZip::run`)
        (_, (dx, dy)) => {
            let dx = <T::Real as Erase>::unerase_owned(dx).expect("erased as T::Real above");
            let dy = <Q as Erase>::unerase_owned(dy).expect("erased as Q above");
            grad_loop(op, xs, ys, g, bits, dx, dy);
        }
    }
}

/// Elements per parallel task of [`flat_grads`].
const GRAD_CHUNK: usize = 1 << 16;

/// What [`flat_grads`] returns: the gradient with respect to `x`, the one with respect
/// to `y` (empty for a scalar `y`), and a scalar `y`'s (the sum of its terms, in `f64`).
pub type FlatGrads<R> = (Vec<R>, Vec<R>, f64);

/// Both operands' gradients of `op` without broadcasting (`x` and `y` of one shape in
/// one order, or `y` a scalar), the common case of every layout (dense arrays of one
/// shape, sparse operands of one structure): one parallel pass of [`grad_run`] writing
/// `g · ∂f` in `T::Real` straight into each operand's gradient, 0 where `bits` (of the
/// output) is clear; a scalar's gradient is the sum of its terms (in `f64`), returned
/// third (0 for a slice; its `dy` is empty).
pub fn flat_grads<T: Element>(
    op: BinOp, xs: &[T], ys: Src<'_, T>, bits: Option<Bits<'_>>, g: &[T::Real],
) -> FlatGrads<T::Real> {
    let n = xs.len();
    let dy_len = if matches!(ys, Src::Slice(_)) { n } else { 0 };
    let fresh = masked_kernels::fresh_vec::<T::Real>;
    let (mut dx, mut dy) = (fresh(n), fresh(dy_len));
    let sum = flat_grads_into(op, xs, ys, bits, g, &mut dx, &mut dy);
    (dx, dy, sum)
}

/// [`flat_grads`] into the caller's `dx` (`xs.len()` values) and `dy` (as many for a
/// `y` slice, ignored for a scalar); returns the scalar's gradient (0 for a slice).
pub fn flat_grads_into<T: Element>(
    op: BinOp, xs: &[T], ys: Src<'_, T>, bits: Option<Bits<'_>>, g: &[T::Real], dx: &mut [T::Real],
    dy: &mut [T::Real],
) -> f64 {
    use masked_kernels::par;
    const CHUNK: usize = GRAD_CHUNK;
    match ys {
        Src::Slice(y) => {
            par::chunks_mut2(dx, CHUNK, dy, CHUNK, |c, dx, dy| {
                let r = c * CHUNK..c * CHUNK + dx.len();
                let b = bits.map(|b| b.offset(r.start));
                grad_run(
                    op,
                    &xs[r.clone()],
                    Src::Slice(&y[r.clone()]),
                    &g[r],
                    b,
                    dx,
                    dy,
                );
            });
            0.0
        }
        // the scalar's gradient: the sum of its terms, kept in f64 per chunk
        // (one scratch per chunk of CHUNK elements)
        Src::Splat(_) => par::chunks_mut(dx, CHUNK, |c, dx| {
            let r = c * CHUNK..c * CHUNK + dx.len();
            let b = bits.map(|b| b.offset(r.start));
            let mut terms = vec![0.0f64; dx.len()];
            grad_run(op, &xs[r.clone()], ys, &g[r], b, dx, &mut terms[..]);
            terms.iter().sum::<f64>()
        })
        .into_iter()
        .sum::<f64>(),
    }
}

/// The loop of [`grad_run`] at one type, each op resolved at compile time inside it.
#[inline(always)]
fn grad_loop<T: Element, Q: Float>(
    op: BinOp, xs: &[T], ys: Src<'_, T>, g: &[T::Real], bits: Option<Bits<'_>>, dx: &mut [T::Real],
    dy: &mut [Q],
) {
    grad_dispatch!(op, OP => match ys {
        Src::Slice(ys) => pair_run(xs, ys, g, bits, dx, dy, #[inline(always)] move |x: T, y: T, gv, v| {
            times_partials::<T, Q>(OP, x, y, gv, v)
        }),
        // the second run is a stand-in the closure does not read
        Src::Splat(s) => pair_run(xs, xs, g, bits, dx, dy, #[inline(always)] move |x: T, _: T, gv, v| {
            times_partials::<T, Q>(OP, x, s, gv, v)
        }),
    })
}

/// Values stored on a sub-structure spread onto a structure holding it (one CSR row, or
/// the flat positions of a COO array): `out[k]` is the value stored at `pos[k]` in
/// `sub_pos`/`sub_val`, 0 where there is none. Both position lists strictly increase.
/// Returns `false` when some sub position is not in `pos` (the sub-structure does not
/// lie inside the structure).
pub fn spread<I: Copy + Ord, R: Copy + Default>(
    pos: &[I], sub_pos: &[I], sub_val: &[R], out: &mut [R],
) -> bool {
    let mut j = 0usize;
    for (k, &p) in pos.iter().enumerate() {
        out[k] = if j < sub_pos.len() && sub_pos[j] == p {
            j += 1;
            sub_val[j - 1]
        } else {
            R::default()
        };
    }
    j == sub_pos.len()
}

/// `g · ∂f` of a sparse binary VJP, in place: each partial derivative (the forward
/// zip's values, `partial`) times the upstream gradient `g` stored at the same
/// positions, in `f64` and rounded once. `same_positions`: whether `g` is stored exactly
/// where the forward output is (the caller compares its own structures).
///
/// # Errors
/// [`MaskedError::InvalidArgument`] naming `op` where `g` is stored elsewhere.
pub fn times_upstream<R: Float>(
    op: BinOp, partial: &mut [R], g: &[R], same_positions: bool,
) -> Result<()> {
    if !same_positions || partial.len() != g.len() {
        return Err(MaskedError::InvalidArgument {
            name: "upstream gradient",
            value: op.name().to_string(),
            reason: "a binary op's VJP takes values stored exactly at the forward output's \
                     positions",
        });
    }
    masked_kernels::par::chunks_mut(partial, 1 << 16, |c, pc| {
        for (p, &gv) in pc.iter_mut().zip(&g[c << 16..]) {
            *p = R::from_f64(p.to_f64() * gv.to_f64());
        }
    });
    Ok(())
}

/// The gradient of a scalar operand of a binary op: the sum of its contributions at
/// every valid output (`d`), in `f64`.
pub fn scalar_gradient<R: Float>(d: &[R]) -> R {
    let sum = masked_kernels::par::sum_chunks(d.len(), 1 << 16, |r| {
        d[r].iter().map(|v| v.to_f64()).sum()
    });
    R::from_f64(sum)
}

/// A binary op of any family: what the by-name layer dispatches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// A type-keeping op.
    Keep(KeepBin),
    /// A float function.
    Float(FloatBin),
    /// A comparison.
    Cmp(CmpBin),
}

impl BinOp {
    /// The partial derivatives `(∂f/∂x, ∂f/∂y)` at `(x, y)`, in `f64`, for the VJP of
    /// the op (`None` for a comparison: not differentiable). Kinks follow torch:
    /// maximum, minimum, fmax and fmin split a tie half and half (a NaN operand of
    /// maximum/minimum passes `g` to both, as torch; fmax/fmin pass it to the operand
    /// they return); floor_divide is piecewise constant (0, 0); fmod and remainder give
    /// `(1, -trunc(x / y))` and `(1, -floor(x / y))`; pow gives 0 for `∂/∂x` where
    /// `y == 0` and for `∂/∂y` where `x == 0` and `y >= 0`; xlogy gives 0 for `∂/∂x`
    /// where `x == 0`. Elsewhere IEEE arithmetic decides (division by 0 gives inf,
    /// hypot and atan2 at (0, 0) give NaN).
    #[inline]
    pub fn partials(self, x: f64, y: f64) -> Option<(f64, f64)> {
        let tie = |first: bool, second: bool| -> (f64, f64) {
            if x == y {
                (0.5, 0.5)
            } else if first {
                (1.0, 0.0)
            } else if second {
                (0.0, 1.0)
            } else {
                (1.0, 1.0) // a NaN operand
            }
        };
        Some(match self {
            BinOp::Cmp(_) => return None,
            BinOp::Keep(k) => match k {
                KeepBin::Add => (1.0, 1.0),
                KeepBin::Sub => (1.0, -1.0),
                KeepBin::Mul => (y, x),
                KeepBin::FloorDivide => (0.0, 0.0),
                KeepBin::Pow => {
                    let dx = if y == 0.0 { 0.0 } else { y * x.powf(y - 1.0) };
                    let dy = if x == 0.0 && y >= 0.0 {
                        0.0
                    } else {
                        x.powf(y) * x.ln()
                    };
                    (dx, dy)
                }
                KeepBin::Maximum => tie(x > y, x < y),
                KeepBin::Minimum => tie(x < y, x > y),
                KeepBin::Fmax => tie(y.is_nan() || x > y, x.is_nan() || x < y),
                KeepBin::Fmin => tie(y.is_nan() || x < y, x.is_nan() || x > y),
                KeepBin::Fmod => (1.0, -(x / y).trunc()),
                KeepBin::Remainder => (1.0, -(x / y).floor()),
            },
            BinOp::Float(f) => match f {
                FloatBin::Div => (1.0 / y, -x / (y * y)),
                FloatBin::Atan2 => {
                    let r = x * x + y * y;
                    (y / r, -x / r)
                }
                FloatBin::Hypot => {
                    let h = x.hypot(y);
                    (x / h, y / h)
                }
                FloatBin::LogAddExp => {
                    let sx = 1.0 / (1.0 + (y - x).exp());
                    (sx, 1.0 - sx)
                }
                FloatBin::Xlogy => {
                    let dx = if x == 0.0 && !y.is_nan() { 0.0 } else { y.ln() };
                    (dx, x / y)
                }
            },
        })
    }

    /// The op's name.
    pub fn name(self) -> &'static str {
        match self {
            BinOp::Keep(o) => o.name(),
            BinOp::Float(o) => o.name(),
            BinOp::Cmp(o) => o.name(),
        }
    }
}

impl From<KeepZip> for BinOp {
    fn from(z: KeepZip) -> Self {
        BinOp::Keep(z.0)
    }
}
impl From<FloatZip> for BinOp {
    fn from(z: FloatZip) -> Self {
        BinOp::Float(z.0)
    }
}
impl From<CmpZip> for BinOp {
    fn from(z: CmpZip) -> Self {
        BinOp::Cmp(z.0)
    }
}

/// The dtype two arrays compute in (torch's `result_type` for arrays): the same type;
/// `i64` for two integer types; the float type where a float meets an integer; the wider
/// float of two floats, and `f32` where `f16` meets `bf16`.
pub fn promote(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    match (a.is_float(), b.is_float()) {
        (false, false) => I64,
        (true, false) => a,
        (false, true) => b,
        (true, true) if a == F64 || b == F64 => F64,
        (true, true) => F32,
    }
}

/// The dtype an array of `a` computes in with a scalar: the array's type (a scalar is
/// weak), except an integer array with a float scalar, which gives `f64`.
pub fn promote_scalar(a: DType, s: Scalar) -> DType {
    match s {
        Scalar::Float(_) if !a.is_float() => DType::F64,
        _ => a,
    }
}

/// The error of an op that failed at a valid position.
pub fn failed_at<T: Element, Z: ZipMap<T>>(z: &Z, position: Vec<usize>) -> MaskedError {
    MaskedError::IntegerDomain {
        op: z.name(),
        reason: z.failure(),
        position,
    }
}

/// The error of the strict rule: the masks differ at `position`.
pub fn mask_mismatch(op: &'static str, position: Vec<usize>, left_valid: bool) -> MaskedError {
    MaskedError::MaskMismatch {
        op,
        position,
        left_valid,
    }
}

/// One side of a sparse merge: sorted positions, their values, optional validity bits,
/// and whether the unstored positions are valid zeros (no mask).
#[derive(Debug, Clone, Copy)]
pub struct Side<'a, I, T> {
    /// Stored positions, strictly increasing.
    pub pos: &'a [I],
    /// Their values.
    pub values: &'a [T],
    /// Validity of each stored entry (all valid for `None`).
    pub valid: Option<Bits<'a>>,
    /// Whether unstored positions are valid (value 0).
    pub fill: bool,
}

impl<'a, I, T> Side<'a, I, T> {
    /// A side over positions `pos` with their `values`; `valid` are validity words whose
    /// bit `start + k` belongs to entry `k`.
    pub fn new(
        pos: &'a [I], values: &'a [T], valid: Option<&'a [u64]>, start: usize, fill: bool,
    ) -> Self {
        Side {
            pos,
            values,
            valid: valid.map(|w| Bits::new(w, start)),
            fill,
        }
    }
}

/// Where a sparse merge stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeStop {
    /// The strict rule: validity differs at this position (`left_valid` says which side
    /// is valid).
    Mismatch {
        /// The position (in the merge's own numbering).
        pos: usize,
        /// Whether the left operand is the valid one.
        left_valid: bool,
    },
    /// The op fails at this valid position.
    Fails {
        /// The position.
        pos: usize,
    },
}

/// Merges two sparse operands over positions `0..len` (a CSR row, or the flat positions
/// of a COO array): appends the output positions (those valid under `rule`) and their
/// values, in one pass over both. Unstored positions take part as 0 where valid.
/// Positions stored on neither side are left out: the caller allows two mask-free sides
/// only for an op that keeps 0 at `(0, 0)`.
///
/// # Errors
/// [`MergeStop`] at the first mismatch (strict) or failing position.
#[allow(clippy::too_many_arguments)]
pub fn merge<I: Copy + Ord, T: Element, Z: ZipMap<T>>(
    a: Side<'_, I, T>, b: Side<'_, I, T>, z: &Z, rule: MaskRule, len: usize,
    index: impl Fn(I) -> usize, pos_out: &mut Vec<I>, val_out: &mut Vec<Z::Output>,
) -> std::result::Result<(), MergeStop> {
    let (mut i, mut j) = (0usize, 0usize);
    let va = |k: usize| a.valid.is_none_or(|bits| bits.get(k));
    let vb = |k: usize| b.valid.is_none_or(|bits| bits.get(k));
    if rule == MaskRule::And && !a.fill && !b.fill {
        // only positions stored on both sides can be valid on both: a branch-free
        // intersection (both cursors step on their comparison, not on a branch)
        let (pa, pb) = (a.pos, b.pos);
        while i < pa.len() && j < pb.len() {
            let (x, y) = (pa[i], pb[j]);
            if x == y && va(i) && vb(j) {
                match z.one(a.values[i], b.values[j]) {
                    Some(o) => {
                        pos_out.push(x);
                        val_out.push(o);
                    }
                    None => return Err(MergeStop::Fails { pos: index(x) }),
                }
            }
            i += usize::from(x <= y);
            j += usize::from(y <= x);
        }
        return Ok(());
    }
    // strict with exactly one mask-free side: a position stored on neither side is valid
    // on one side only
    let gaps = rule == MaskRule::Strict && a.fill != b.fill;
    let mut next = 0usize;
    loop {
        let (p, x, xv, y, yv) = match (a.pos.get(i), b.pos.get(j)) {
            (None, None) => break,
            (Some(&pa), None) => {
                i += 1;
                (pa, a.values[i - 1], va(i - 1), T::ZERO, b.fill)
            }
            (None, Some(&pb)) => {
                j += 1;
                (pb, T::ZERO, a.fill, b.values[j - 1], vb(j - 1))
            }
            (Some(&pa), Some(&pb)) => {
                if pa < pb {
                    i += 1;
                    (pa, a.values[i - 1], va(i - 1), T::ZERO, b.fill)
                } else if pb < pa {
                    j += 1;
                    (pb, T::ZERO, a.fill, b.values[j - 1], vb(j - 1))
                } else {
                    i += 1;
                    j += 1;
                    (pa, a.values[i - 1], va(i - 1), b.values[j - 1], vb(j - 1))
                }
            }
        };
        let at = index(p);
        if gaps && at > next {
            return Err(MergeStop::Mismatch {
                pos: next,
                left_valid: a.fill,
            });
        }
        next = at + 1;
        let valid = match rule {
            MaskRule::And => xv && yv,
            MaskRule::Strict => {
                if xv != yv {
                    return Err(MergeStop::Mismatch {
                        pos: at,
                        left_valid: xv,
                    });
                }
                xv
            }
        };
        if valid {
            match z.one(x, y) {
                Some(o) => {
                    pos_out.push(p);
                    val_out.push(o);
                }
                None => return Err(MergeStop::Fails { pos: at }),
            }
        }
    }
    if gaps && next < len {
        return Err(MergeStop::Mismatch {
            pos: next,
            left_valid: a.fill,
        });
    }
    Ok(())
}

/// The validity bits of the entries of one structure zipped under `rule`, from each
/// side's own bits (`None`: every entry valid): under `and` their intersection, under
/// `strict` (the sides already checked equal) this side's. `None`: every entry valid.
pub fn rule_bits(rule: MaskRule, own: Option<&[u64]>, other: Option<&[u64]>) -> Option<Vec<u64>> {
    match (rule, own, other) {
        (MaskRule::And, Some(a), Some(b)) => Some(a.iter().zip(b).map(|(x, y)| x & y).collect()),
        (MaskRule::And, None, Some(b)) => Some(b.to_vec()),
        (_, Some(a), _) => Some(a.to_vec()),
        _ => None,
    }
}

/// The row-major coordinates of flat index `i` in `shape`.
pub fn unravel(shape: &[usize], mut i: usize) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        let s = shape[d].max(1);
        c[d] = i % s;
        i /= s;
    }
    c
}

/// A dense operand in standard layout: its values (borrowed when already row-major),
/// shape and mask. The dense layout gives one (`MaskedArray::dense_parts`); the sparse
/// layouts read it at their entries' positions (the sparse lane engine's `DenseOperand`).
pub struct DenseParts<'a, T: Clone> {
    /// The values in row-major order.
    pub values: std::borrow::Cow<'a, [T]>,
    /// The shape.
    pub shape: &'a [usize],
    /// The mask (`None`: every element valid).
    pub mask: Option<&'a crate::BitMask>,
}

/// Row-major strides of `src` (a shape broadcast to `shape`, aligned from the right),
/// 0 along the dims it stretches.
pub fn broadcast_strides(src: &[usize], shape: &[usize]) -> Vec<usize> {
    let n = shape.len();
    let mut st = vec![0usize; n];
    let mut stride = 1usize;
    for k in 0..src.len() {
        let (sd, td) = (src.len() - 1 - k, n - 1 - k);
        st[td] = if src[sd] == 1 && shape[td] != 1 {
            0
        } else {
            stride
        };
        stride *= src[sd];
    }
    st
}

/// A unary elementwise map as a [`ZipMap`] whose second operand is ignored: the unary
/// ops (`abs`, `exp`, ...) as lazy views (`amax(abs(x))`).
#[derive(Debug, Clone, Copy)]
pub struct Unary<M>(pub M);

impl<T: Element, M: crate::LaneMap<T> + Copy + Send + Sync> ZipMap<T> for Unary<M>
where
    M::Output: crate::Value,
{
    type Output = M::Output;
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn one(&self, x: T, _: T) -> Option<M::Output> {
        let mut o = [M::Output::default()];
        self.0.map(&[x], None, &mut o);
        Some(o[0])
    }
    fn run(
        &self, xs: Src<'_, T>, _: Src<'_, T>, bits: Option<Bits<'_>>, out: &mut [M::Output],
    ) -> Option<usize> {
        match xs {
            Src::Slice(x) => self.0.map(&x[..out.len()], bits, out),
            Src::Splat(x) => {
                let v = vec![x; out.len()];
                self.0.map(&v, bits, out);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unary::tests::{assert_same_bits, run_inputs};
    use half::bf16;

    /// Every operand form of a run: two slices, a scalar on either side.
    fn operand_forms<'a, T: Copy>(xs: &'a [T], ys: &'a [T]) -> [(Src<'a, T>, Src<'a, T>); 3] {
        [
            (Src::Slice(xs), Src::Slice(ys)),
            (Src::Slice(xs), Src::Splat(ys[5])),
            (Src::Splat(xs[7]), Src::Slice(ys)),
        ]
    }

    /// `z`'s run (the loops compiled once for `f32`/`f64`, the halves and integers in
    /// converted blocks) equals its value-by-value form at `T` itself, bit for bit:
    /// every operand form, masked and not, three blocks and a ragged end.
    /// `splat_is_pow`: `z` is `KeepZip(KeepBin::Pow)`, whose run with one exponent is
    /// the unary pow's (`x ** p`).
    fn run_equals_each_value<T: Element, Z: ZipMap<T>>(z: Z, splat_is_pow: bool)
    where
        Z::Output: Element,
    {
        let (xs, words) = run_inputs::<T>();
        let ys: Vec<T> = xs.iter().rev().copied().collect();
        for (a, b) in operand_forms(&xs, &ys) {
            for bits in [None, Some(Bits::new(&words, 3))] {
                let n = xs.len();
                let want: Vec<Z::Output> = (0..n)
                    .map(|k| match bits.is_none_or(|b| b.get(k)) {
                        true => z.one(a.get(k), b.get(k)).expect("no failing input here"),
                        false => Z::Output::default(),
                    })
                    .collect();
                let mut got = vec![<Z::Output as Element>::from_f64_lossy(7.0); n];
                assert_eq!(z.run(a, b, bits, &mut got), None);
                if let (Src::Slice(x), Src::Splat(p)) = (a, b)
                    && splat_is_pow
                {
                    // one exponent runs the unary pow's loop (its accuracy is tested
                    // there): the same bits as that op (f64 differs from `powf` per
                    // element in the last bit at some of these inputs)
                    use crate::unary::Unary;
                    let mut w = vec![<T::Real as Element>::ZERO; n];
                    crate::unary::Pow::new(p.to_f64())
                        .unwrap()
                        .map_float(x, bits, &mut w);
                    let got: Vec<f64> = got.iter().map(|v| v.to_f64()).collect();
                    let w: Vec<f64> = w.iter().map(|v| v.to_f64()).collect();
                    assert_same_bits(z.name(), &xs, &got, &w);
                    continue;
                }
                assert_same_bits(z.name(), &xs, &got, &want);
            }
        }
    }

    fn every_zip_on<T: Element>() {
        for &op in KeepBin::ALL {
            // the integers' failing ops (by 0, negative powers) keep their own loop
            if T::DTYPE.is_float() {
                run_equals_each_value::<T, _>(KeepZip(op), op == KeepBin::Pow);
            }
        }
        for &op in FloatBin::ALL {
            run_equals_each_value::<T, _>(FloatZip(op), false);
        }
        if T::DTYPE.is_float() {
            let ops = KeepBin::ALL.iter().map(|&k| BinOp::Keep(k));
            for op in ops.chain(FloatBin::ALL.iter().map(|&f| BinOp::Float(f))) {
                for wrt_y in [false, true] {
                    run_equals_each_value::<T, _>(PartialZip { op, wrt_y }, false);
                }
            }
        }
    }

    /// The comparisons (output `bool`, not an `Element`): against `apply` at `T`.
    fn every_cmp_on<T: Element>() {
        let (xs, words) = run_inputs::<T>();
        let ys: Vec<T> = xs.iter().rev().copied().collect();
        for &op in CmpBin::ALL {
            for (a, b) in operand_forms(&xs, &ys) {
                for bits in [None, Some(Bits::new(&words, 3))] {
                    let want: Vec<bool> = (0..xs.len())
                        .map(|k| bits.is_none_or(|b| b.get(k)) && op.apply(a.get(k), b.get(k)))
                        .collect();
                    let mut got = vec![true; xs.len()];
                    CmpZip(op).run(a, b, bits, &mut got);
                    assert_eq!(got, want, "{} {}", op.name(), T::DTYPE);
                }
            }
        }
    }

    /// Both gradients of every differentiable op over a run (the `f32`/`f64` loops
    /// compiled once, every other pair of types in `f64` blocks) equal the value-by-value
    /// products at the types themselves, bit for bit, `dy` in the input's type and in
    /// `f64` (a scalar operand's terms).
    fn grad_run_equals_each_value<T: Element, Q: Float>() {
        let (xs, words) = run_inputs::<T>();
        let ys: Vec<T> = xs.iter().rev().copied().collect();
        let g: Vec<T::Real> = (0..xs.len())
            .map(|k| <T::Real as Float>::from_f64(1.0 + (k % 5) as f64 * 0.3))
            .collect();
        let ops = KeepBin::ALL.iter().map(|&k| BinOp::Keep(k));
        for op in ops.chain(FloatBin::ALL.iter().map(|&f| BinOp::Float(f))) {
            for ys in [Src::Slice(&ys[..]), Src::Splat(ys[5])] {
                for bits in [None, Some(Bits::new(&words, 3))] {
                    let n = xs.len();
                    let valid = |k: usize| bits.is_none_or(|b| b.get(k));
                    let want: Vec<(T::Real, Q)> = (0..n)
                        .map(|k| times_partials::<T, Q>(op, xs[k], ys.get(k), g[k], valid(k)))
                        .collect();
                    let (mut dx, mut dy) = (vec![<T::Real as Float>::ONE; n], vec![Q::ONE; n]);
                    grad_run(op, &xs, ys, &g, bits, &mut dx, &mut dy);
                    let (wx, wy): (Vec<T::Real>, Vec<Q>) = want.into_iter().unzip();
                    assert_same_bits(op.name(), &xs, &dx, &wx);
                    assert_same_bits(op.name(), &xs, &dy, &wy);
                }
            }
        }
    }

    #[test]
    fn binary_runs_equal_their_value_by_value_form_on_every_dtype() {
        crate::element::each_dtype!(T => {
            every_zip_on::<T>();
            every_cmp_on::<T>();
        });
        grad_run_equals_each_value::<f32, f32>();
        grad_run_equals_each_value::<f32, f64>();
        grad_run_equals_each_value::<f64, f64>();
        grad_run_equals_each_value::<f16, f16>();
        grad_run_equals_each_value::<f16, f64>();
        grad_run_equals_each_value::<bf16, bf16>();
        grad_run_equals_each_value::<bf16, f64>();
    }

    fn keep(op: KeepBin, x: f64, y: f64) -> f64 {
        op.float(x, y)
    }

    #[test]
    fn sign_rules_of_fmod_remainder_floor_divide() {
        // fmod: the dividend's sign; remainder: the divisor's (torch, numpy)
        assert_eq!(keep(KeepBin::Fmod, -7.0, 3.0), -1.0);
        assert_eq!(keep(KeepBin::Remainder, -7.0, 3.0), 2.0);
        assert_eq!(keep(KeepBin::Remainder, 7.0, -3.0), -2.0);
        assert_eq!(keep(KeepBin::FloorDivide, -7.0, 2.0), -4.0);
        assert_eq!(keep(KeepBin::FloorDivide, 7.0, -2.0), -4.0);
        assert!(keep(KeepBin::FloorDivide, -0.0, 3.0).is_sign_negative());
        assert_eq!(KeepBin::FloorDivide.int(-7, 2), -4);
        assert_eq!(KeepBin::Remainder.int(-7, 3), 2);
        assert_eq!(KeepBin::Fmod.int(-7, 3), -1);
        assert_eq!(KeepBin::Fmod.int(i64::MIN, -1), 0);
        assert_eq!(KeepBin::Pow.int(3, 4), 81);
        assert_eq!(KeepBin::Pow.int(2, 64), 0); // wraps
    }

    #[test]
    fn nan_rules() {
        assert!(keep(KeepBin::Maximum, f64::NAN, 1.0).is_nan());
        assert!(keep(KeepBin::Minimum, 1.0, f64::NAN).is_nan());
        assert_eq!(keep(KeepBin::Fmax, f64::NAN, 1.0), 1.0);
        assert_eq!(keep(KeepBin::Fmin, 1.0, f64::NAN), 1.0);
        assert!(keep(KeepBin::Pow, f64::NEG_INFINITY, 0.5).is_nan());
        // (-0) ** 0.5 = -0, as the unary pow, torch and numpy
        assert!(keep(KeepBin::Pow, -0.0, 0.5).is_sign_negative());
        let inf = f64::INFINITY;
        assert_eq!(FloatBin::LogAddExp.float(inf, inf), inf);
        assert_eq!(FloatBin::LogAddExp.float(-inf, -inf), -inf);
        assert_eq!(FloatBin::LogAddExp.float(0.0, 0.0), std::f64::consts::LN_2);
        assert_eq!(FloatBin::Xlogy.float(0.0, 0.0), 0.0);
        assert!(FloatBin::Xlogy.float(0.0, f64::NAN).is_nan());
        assert!(!CmpBin::Eq.apply(f64::NAN, f64::NAN));
        assert!(CmpBin::Ne.apply(f64::NAN, f64::NAN));
    }

    #[test]
    fn promotion_follows_result_type() {
        use DType::*;
        assert_eq!(promote(I32, I64), I64);
        assert_eq!(promote(I64, F32), F32);
        assert_eq!(promote(F16, BF16), F32);
        assert_eq!(promote(F16, F64), F64);
        assert_eq!(promote(BF16, BF16), BF16);
        assert_eq!(promote_scalar(I32, Scalar::Int(3)), I32);
        assert_eq!(promote_scalar(I32, Scalar::Float(2.5)), F64);
        assert_eq!(promote_scalar(F16, Scalar::Float(2.5)), F16);
    }

    #[test]
    fn merge_rules() {
        let z = KeepZip(KeepBin::Add);
        let a = Side {
            pos: &[0usize, 2, 3][..],
            values: &[1.0f64, 2.0, 3.0][..],
            valid: None,
            fill: false,
        };
        let b = Side {
            pos: &[2usize, 3, 4][..],
            values: &[10.0f64, 20.0, 30.0][..],
            valid: None,
            fill: false,
        };
        let (mut p, mut v) = (vec![], vec![]);
        merge(a, b, &z, MaskRule::And, 5, |i| i, &mut p, &mut v).unwrap();
        assert_eq!((p, v), (vec![2, 3], vec![12.0, 23.0]));
        let (mut p, mut v) = (vec![], vec![]);
        let e = merge(a, b, &z, MaskRule::Strict, 5, |i| i, &mut p, &mut v);
        assert_eq!(
            e,
            Err(MergeStop::Mismatch {
                pos: 0,
                left_valid: true
            })
        );
        // a mask-free right side: valid everywhere, so strict fails at the first gap of a
        let b = Side { fill: true, ..b };
        let (mut p, mut v) = (vec![], vec![]);
        let e = merge(a, b, &z, MaskRule::Strict, 5, |i| i, &mut p, &mut v);
        assert_eq!(
            e,
            Err(MergeStop::Mismatch {
                pos: 1,
                left_valid: false
            })
        );
        let (mut p, mut v) = (vec![], vec![]);
        merge(a, b, &z, MaskRule::And, 5, |i| i, &mut p, &mut v).unwrap();
        assert_eq!((p, v), (vec![0, 2, 3], vec![1.0, 12.0, 23.0]));
    }
}
