//! Elementwise unary ops (masked algebra): each written once as a [`Unary`] value, a
//! function on the compute type, and run by every layout through its `map_lanes` kernel
//! ([`FloatMap`] / [`KeepMap`]). The output mask is the input mask; an invalid dense
//! position holds 0 (so NaN or garbage under the mask never leaks), and a sparse output
//! stores exactly the valid positions.
//!
//! Two families, by output type (semantics.md, "Elementwise ops"):
//! - **type-keeping** ops (abs, neg, sign, square, relu, clamp, floor, ceil, round, trunc,
//!   nan_to_num, integer pow): the input type; integers compute in `i64` and wrap back;
//! - **float functions** (exp, log, sin, sigmoid, gelu, ...): the input's float type, `f64`
//!   for integers ([`Element::Real`]).
//!
//! Floats compute in their compute type ([`Float::Calc`]: `f32` for `f32` and the halves,
//! `f64` for `f64` and integers) and round once to the output type.

use crate::element::{ByDType, CalcOf, Element, Erase, Float, SliceMutOf, SliceOf};
use crate::error::{MaskedError, Result};
use crate::math::Math;
use masked_kernels::run::map_run;
use masked_kernels::Bits;
use std::ops::Range;

/// A type-level function of a unary op type (a reference to a map over it, a kernel's
/// result for that map): what [`Unary::to_float_fn`] and its kin convert.
pub trait UnaryFamily {
    /// The thing of op type `U`.
    type Of<U: Unary + 'static>;
}

/// An elementwise function, written once.
pub trait Unary: Copy + Send + Sync {
    /// Whether [`FloatMap`] over it is a listed kernel type ([`FloatFn`] only; the
    /// list is the core's `lane::map_list!`).
    #[doc(hidden)]
    const FLOAT_LISTED: bool = false;
    /// Whether [`KeepMap`] over it is a listed kernel type ([`KeepFn`] only).
    #[doc(hidden)]
    const KEEP_LISTED: bool = false;
    /// `x`, a thing of this op type, as [`FloatFn`]'s (`Some` for [`FloatFn`] itself):
    /// how the listed map over it finds its variant.
    #[doc(hidden)]
    fn to_float_fn<F: UnaryFamily>(_x: F::Of<Self>) -> Option<F::Of<FloatFn>>
    where
        Self: Sized + 'static,
    {
        None
    }
    /// `x`, a thing of [`FloatFn`], as this op type's (`Some` for [`FloatFn`] itself).
    #[doc(hidden)]
    fn from_float_fn<F: UnaryFamily>(_x: F::Of<FloatFn>) -> Option<F::Of<Self>>
    where
        Self: Sized + 'static,
    {
        None
    }
    /// As [`Unary::to_float_fn`], for [`KeepFn`].
    #[doc(hidden)]
    fn to_keep_fn<F: UnaryFamily>(_x: F::Of<Self>) -> Option<F::Of<KeepFn>>
    where
        Self: Sized + 'static,
    {
        None
    }
    /// As [`Unary::from_float_fn`], for [`KeepFn`].
    #[doc(hidden)]
    fn from_keep_fn<F: UnaryFamily>(_x: F::Of<KeepFn>) -> Option<F::Of<Self>>
    where
        Self: Sized + 'static,
    {
        None
    }
    /// The op's name, for messages.
    fn name(&self) -> &'static str;
    /// The value at a valid position, in `T`'s compute type (`T` for type-dependent
    /// constants such as `nan_to_num`'s largest finite value).
    fn float<T: Element>(&self, x: CalcOf<T>) -> CalcOf<T>;
    /// The integer function of a type-keeping op, in `i64` (wrapping); the identity by
    /// default (floor, ceil, round, trunc, nan_to_num).
    fn int(&self, x: i64) -> i64 {
        x
    }
    /// Whether `f(0) == 0` (a mask-free sparse input then keeps its stored positions).
    fn zero_preserving(&self) -> bool;
    /// `f'(x)` in `f64`, for the VJP `g · f'(x)`; kinks follow torch (abs and relu have
    /// derivative 0 at 0, clamp 0 at and beyond its bounds), domain boundaries IEEE.
    /// Written with the engine's branch-free functions ([`Math`]) where it has them, so
    /// that the gradient runs ([`Unary::grad_f32`]) vectorise.
    fn derivative(&self, x: f64) -> f64;

    /// `f'(x)` in the op's branch-free form where it has one (the trigonometric
    /// functions': NaN for `|x|` beyond `Math::TRIG_LIMIT`, which the gradient runs
    /// recompute with [`Unary::derivative`]); [`Unary::derivative`] by default.
    #[doc(hidden)]
    #[inline(always)]
    fn derivative_fast(&self, x: f64) -> f64 {
        self.derivative(x)
    }

    /// The VJP over an `f32` run: `out[k] = g[k] · f'(xs[k])` where bit `k` of `bits` is
    /// set (all for `None`), computed in `f64` and rounded once, and 0 elsewhere; the
    /// common length of the three. The enums ([`FloatFn`], [`KeepFn`]) pick the variant
    /// once per run, each variant's loop compiled once, here.
    fn grad_f32(&self, xs: &[f32], bits: Option<Bits<'_>>, g: &[f32], out: &mut [f32]) {
        grad_run(*self, xs, bits, g, out, false);
    }

    /// [`Unary::grad_f32`] over an `f64` run.
    fn grad_f64(&self, xs: &[f64], bits: Option<Bits<'_>>, g: &[f64], out: &mut [f64]) {
        grad_run(*self, xs, bits, g, out, false);
    }

    /// The value at a valid position in the op's branch-free form where it has one (NaN
    /// where that form does not apply: [`Unary::map_float`] then recomputes those with
    /// [`Unary::float`]); [`Unary::float`] by default.
    #[doc(hidden)]
    #[inline(always)]
    fn fast<T: Element>(&self, x: CalcOf<T>) -> CalcOf<T> {
        self.float::<T>(x)
    }

    /// Maps a run as a float function (output [`Element::Real`], 0 where invalid). The
    /// [`FloatFn`] enum overrides this to pick the variant once per run, so the loop is
    /// compiled per function while the layouts' map kernels are compiled once per dtype.
    fn map_float<T: Element>(&self, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T::Real]) {
        map_run(xs, bits, out, FloatAt::<T, Self, false>::new(*self));
    }

    /// Maps a run as a type-keeping op (output `T`, 0 where invalid); [`KeepFn`]
    /// overrides it as [`FloatFn`] does [`Unary::map_float`].
    fn map_keep<T: Element>(&self, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T]) {
        let u = *self;
        map_run(
            xs,
            bits,
            out,
            #[inline(always)]
            move |x: T, valid| {
                // in the branch, unlike `FloatAt::at`: the type-keeping ops are cheap
                // (abs, neg, clamp ...), and a masked load is the faster form for them
                // (neg 1.11x computed at every element, then selected)
                if valid {
                    x.map_keep(
                        #[inline(always)]
                        |c| u.float::<T>(c),
                        #[inline(always)]
                        |i| u.int(i),
                    )
                } else {
                    T::ZERO
                }
            },
        );
    }
}

/// Declares an enum over unary functions that dispatches once per run.
macro_rules! fn_enum {
    (@listed float) => {
        const FLOAT_LISTED: bool = true;
        fn to_float_fn<F: UnaryFamily>(x: F::Of<Self>) -> Option<F::Of<FloatFn>> {
            Some(x)
        }
        fn from_float_fn<F: UnaryFamily>(x: F::Of<FloatFn>) -> Option<F::Of<Self>> {
            Some(x)
        }
    };
    // FloatFn: through the runs compiled once for each compute type (`float_run`)
    (@map_float float) => {
        fn map_float<T: Element>(&self, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T::Real]) {
            float_run(*self, xs, bits, out);
        }
    };
    (@map_float keep) => {
        fn map_float<T: Element>(&self, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T::Real]) {
            self.map_float_each(xs, bits, out);
        }
    };
    // KeepFn: the floats through the runs compiled once for f32 and f64 (`keep_run`)
    (@map_keep keep) => {
        fn map_keep<T: Element>(&self, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T]) {
            keep_run(*self, xs, bits, out);
        }
    };
    (@map_keep float) => {
        fn map_keep<T: Element>(&self, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T]) {
            self.map_keep_each(xs, bits, out);
        }
    };
    (@listed keep) => {
        const KEEP_LISTED: bool = true;
        fn to_keep_fn<F: UnaryFamily>(x: F::Of<Self>) -> Option<F::Of<KeepFn>> {
            Some(x)
        }
        fn from_keep_fn<F: UnaryFamily>(x: F::Of<KeepFn>) -> Option<F::Of<Self>> {
            Some(x)
        }
    };
    ($(#[$doc:meta])* $role:ident $name:ident { $($v:ident),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub enum $name {
            $(
                #[doc = concat!("[`", stringify!($v), "`].")]
                $v($v),
            )*
        }
        impl $name {
            /// How many variants (a test checks its list of every variant against it).
            #[cfg(test)]
            #[allow(dead_code)]
            const VARIANTS: usize = [$(stringify!($v)),*].len();
            /// [`Unary::map_keep`] of the variant's op at `T` itself.
            fn map_keep_each<T: Element>(
                &self,
                xs: &[T],
                bits: Option<Bits<'_>>,
                out: &mut [T],
            ) {
                match self { $( Self::$v(u) => u.map_keep(xs, bits, out), )* }
            }
            /// [`Unary::map_float`] of the variant's op at `T` itself.
            fn map_float_each<T: Element>(
                &self,
                xs: &[T],
                bits: Option<Bits<'_>>,
                out: &mut [T::Real],
            ) {
                match self { $( Self::$v(u) => u.map_float(xs, bits, out), )* }
            }
        }
        impl Unary for $name {
            fn_enum!(@listed $role);
            fn name(&self) -> &'static str {
                match self { $( Self::$v(u) => u.name(), )* }
            }
            #[inline]
            fn float<T: Element>(&self, x: CalcOf<T>) -> CalcOf<T> {
                match self { $( Self::$v(u) => u.float::<T>(x), )* }
            }
            #[inline]
            fn int(&self, x: i64) -> i64 {
                match self { $( Self::$v(u) => u.int(x), )* }
            }
            fn zero_preserving(&self) -> bool {
                match self { $( Self::$v(u) => u.zero_preserving(), )* }
            }
            fn derivative(&self, x: f64) -> f64 {
                match self { $( Self::$v(u) => u.derivative(x), )* }
            }
            fn derivative_fast(&self, x: f64) -> f64 {
                match self { $( Self::$v(u) => u.derivative_fast(x), )* }
            }
            fn grad_f32(&self, xs: &[f32], bits: Option<Bits<'_>>, g: &[f32], out: &mut [f32]) {
                match self { $( Self::$v(u) => u.grad_f32(xs, bits, g, out), )* }
            }
            fn grad_f64(&self, xs: &[f64], bits: Option<Bits<'_>>, g: &[f64], out: &mut [f64]) {
                match self { $( Self::$v(u) => u.grad_f64(xs, bits, g, out), )* }
            }
            fn_enum!(@map_float $role);
            fn_enum!(@map_keep $role);
        }
    };
}

/// The lane map of a float function: output [`Element::Real`] (the input float type,
/// `f64` for integers). Its [`LaneMap`](crate::LaneMap) impl is in `lane`.
#[derive(Debug, Clone, Copy)]
pub struct FloatMap<U>(pub U);

/// The lane map of a type-keeping op: output `T`. Its [`LaneMap`](crate::LaneMap) impl is
/// in `lane`.
#[derive(Debug, Clone, Copy)]
pub struct KeepMap<U>(pub U);

/// Declares a stateless unary op: `Name, "name", zero_preserving, |x| float body,
/// d |x| derivative [, |i| integer body] [, fast |x| body, dfast |x| derivative]`. A
/// `fast` body is a branch-free form valid for `|x| < Math::TRIG_LIMIT`, NaN beyond (the
/// trigonometric functions): runs map with it, then recompute the NaN outputs with the
/// float body; `dfast` is the derivative's, and the gradient runs recompute likewise.
macro_rules! unary {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $zero:literal, |$x:ident| $body:expr,
        d |$dx:ident| $dbody:expr, fast |$fx:ident| $fast:expr, dfast |$gx:ident| $dfast:expr) => {
        unary!($(#[$doc])* $ty, $name, $zero, |$x| $body, d |$dx| $dbody;
            #[inline(always)]
            fn fast<T: Element>(&self, $fx: CalcOf<T>) -> CalcOf<T> {
                $fast
            }
            fn map_float<T: Element>(&self, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T::Real]) {
                map_run(xs, bits, out, FloatAt::<T, Self, true>::new(*self));
                beyond_fast(xs, out, #[inline(always)] |_| true, #[inline(always)] |c| self.float::<T>(c));
            }
            #[inline(always)]
            fn derivative_fast(&self, $gx: f64) -> f64 {
                $dfast
            }
            fn grad_f32(&self, xs: &[f32], bits: Option<Bits<'_>>, g: &[f32], out: &mut [f32]) {
                grad_run(*self, xs, bits, g, out, true);
            }
            fn grad_f64(&self, xs: &[f64], bits: Option<Bits<'_>>, g: &[f64], out: &mut [f64]) {
                grad_run(*self, xs, bits, g, out, true);
            }
        );
    };
    ($(#[$doc:meta])* $ty:ident, $name:literal, $zero:literal, |$x:ident| $body:expr,
        d |$dx:ident| $dbody:expr $(, |$i:ident| $ibody:expr)?) => {
        unary!($(#[$doc])* $ty, $name, $zero, |$x| $body, d |$dx| $dbody $(, |$i| $ibody)?;);
    };
    ($(#[$doc:meta])* $ty:ident, $name:literal, $zero:literal, |$x:ident| $body:expr,
        d |$dx:ident| $dbody:expr $(, |$i:ident| $ibody:expr)?; $($map:item)*) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct $ty;
        impl Unary for $ty {
            $($map)*
            fn name(&self) -> &'static str {
                $name
            }
            #[inline(always)]
            fn float<T: Element>(&self, $x: CalcOf<T>) -> CalcOf<T> {
                $body
            }
            $(
                #[inline(always)]
                fn int(&self, $i: i64) -> i64 {
                    $ibody
                }
            )?
            fn zero_preserving(&self) -> bool {
                $zero
            }
            #[allow(unused_variables)]
            #[inline(always)]
            fn derivative(&self, $dx: f64) -> f64 {
                $dbody
            }
        }
    };
}

/// A unary op at one element as a float function: [`Unary::fast`] (when `FAST`) or
/// [`Unary::float`] in the compute type at a valid position, rounded once to the output
/// type; 0 where invalid. A type with an always-inlined method rather than a closure,
/// so that a large function body is inlined into the run kernel
/// ([`ElemMap`](masked_kernels::run::ElemMap)).
struct FloatAt<T, U, const FAST: bool>(U, std::marker::PhantomData<fn() -> T>);

impl<T, U: Copy, const FAST: bool> FloatAt<T, U, FAST> {
    fn new(u: U) -> Self {
        FloatAt(u, std::marker::PhantomData)
    }
}

impl<T, U: Copy, const FAST: bool> Clone for FloatAt<T, U, FAST> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, U: Copy, const FAST: bool> Copy for FloatAt<T, U, FAST> {}

impl<T: Element, U: Unary, const FAST: bool> masked_kernels::run::ElemMap<T, T::Real>
    for FloatAt<T, U, FAST>
{
    #[inline(always)]
    fn at(&self, x: T, valid: bool) -> T::Real {
        // computed at every element, then selected: written `if valid { f(x) }`, LLVM
        // sank the input's load into the branch and the vectoriser made it a masked
        // load, which the whole computation waited on (AMD EPYC, AVX-512, one thread:
        // f32 exp 3.4x, log 2.6x, f64 exp 2x slower)
        let c = x.calc();
        let r = <T::Real as Float>::from_calc(if FAST {
            self.0.fast::<T>(c)
        } else {
            self.0.float::<T>(c)
        });
        if valid {
            r
        } else {
            <T::Real as Element>::ZERO
        }
    }
}

/// A float function over a run of any dtype. Each function's loop is compiled once for
/// each compute type, here ([`FloatFn::run_f32`], [`FloatFn::run_f64`]): `f32` and `f64`
/// runs go straight to it, and every other dtype (the halves, the integers) in blocks
/// converted to its compute type and the results rounded back ([`widened_run`]). A value
/// is converted, computed and rounded exactly as [`FloatAt`] does at `T` (the functions
/// depend on `T` through its compute type only), so the results are the same bit for bit;
/// what is saved is a copy of every function's loop for every dtype in every crate that
/// maps one (the layouts' compiled kernels and the engine's).
pub(crate) fn float_run<T: Element>(
    f: FloatFn, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T::Real],
) {
    match (
        T::erase::<SliceOf<'_>>(xs),
        <T::Real as Erase>::erase::<SliceMutOf<'_>>(out),
    ) {
        (ByDType::F32(x), ByDType::F32(o)) => f.run_f32(x, bits, o),
        (ByDType::F64(x), ByDType::F64(o)) => f.run_f64(x, bits, o),
        (_, o) => {
            let out = <T::Real as Erase>::unerase_owned(o).expect("erased as T::Real above");
            widened_run(f, xs, bits, out);
        }
    }
}

/// Values per block of [`widened_run`]: its three stack blocks (the halves' widened
/// values, the compute type's inputs and outputs) within two pages for `f32`.
pub(crate) const WIDE_BLOCK: usize = 512;

/// [`float_run`] for a dtype that is not its own compute type `C`: each block in `C`
/// (the halves widened by [`Element::unpack`], one instruction per 16 values where the
/// CPU has it; the integers converted as [`Element::calc`]), mapped by `C`'s compiled
/// run, straight into the output where it is `C` (the integers' `f64`), else into a
/// block of `C` rounded to `T::Real` ([`Float::from_calc_block`]: `vcvtps2ph` for
/// `f16`). The conversions are loops of `T` alone, not of the function; buffers are set
/// once, only as far as a run uses them (a short run pays for its own length).
#[inline(never)]
fn widened_run<T: Element>(f: FloatFn, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T::Real]) {
    // a block of results in `C` unless they are `C` (the integers')
    let results = <T::Real as Element>::DTYPE != <CalcOf<T> as Element>::DTYPE;
    calc_blocks(xs, out.len(), bits, results, |wide, b, r, c| {
        match (
            wide,
            <T::Real as Erase>::erase::<SliceMutOf<'_>>(&mut out[r]),
        ) {
            (ByDType::F64(x), ByDType::F64(o)) => f.run_f64(x, b, o),
            (ByDType::F32(x), ByDType::F32(o)) => f.run_f32(x, b, o),
            (x, o) => {
                match (x, <CalcOf<T> as Erase>::erase::<SliceMutOf<'_>>(&mut *c)) {
                    (ByDType::F32(x), ByDType::F32(c)) => f.run_f32(x, b, c),
                    (ByDType::F64(x), ByDType::F64(c)) => f.run_f64(x, b, c),
                    _ => unreachable!("a compute type is f32 or f64, and a block is in it"),
                }
                let o = <T::Real as Erase>::unerase_owned(o).expect("erased as T::Real above");
                <T::Real as Float>::from_calc_block(c, o);
            }
        }
    });
}

/// The blocks of `xs[..n]` (`n` at most its length) in `T`'s compute type `C` (the
/// halves widened by [`Element::unpack`], others converted as [`Element::calc`]), each
/// passed to `f` with its validity bits, its range in `xs` and (`results`) a block of
/// `C` for its results, else an empty one. Buffers on the stack, set once, as far as
/// the first block reaches (each run writes its whole block) and only those used.
#[inline(always)]
fn calc_blocks<T: Element>(
    xs: &[T], n: usize, bits: Option<Bits<'_>>, results: bool,
    mut f: impl FnMut(ByDType<SliceOf<'_>>, Option<Bits<'_>>, Range<usize>, &mut [CalcOf<T>]),
) {
    use std::mem::MaybeUninit;
    let n = xs.len().min(n);
    let zero = <CalcOf<T> as Element>::ZERO;
    let mut raw = [MaybeUninit::<T::Unpacked>::uninit(); WIDE_BLOCK];
    let mut cx = [MaybeUninit::<CalcOf<T>>::uninit(); WIDE_BLOCK];
    let mut co = [MaybeUninit::<CalcOf<T>>::uninit(); WIDE_BLOCK];
    let w = n.min(WIDE_BLOCK);
    let wx = if T::as_unpacked(&[]).is_some() { w } else { 0 };
    let wo = if results { w } else { 0 };
    let (cx, co) = (filled(&mut cx[..wx], zero), filled(&mut co[..wo], zero));
    let mut off = 0;
    while off < n {
        let m = (n - off).min(WIDE_BLOCK);
        let src = &xs[off..off + m];
        let wide = match T::as_unpacked(src) {
            None => <T::Unpacked as Erase>::erase::<SliceOf<'_>>(T::unpack(src, &mut raw[..m])),
            Some(_) => {
                let c = &mut cx[..m];
                map_run(
                    src,
                    None,
                    c,
                    #[inline(always)]
                    |x: T, _| x.calc(),
                );
                <CalcOf<T> as Erase>::erase::<SliceOf<'_>>(c)
            }
        };
        let c = &mut co[..m.min(wo)];
        f(wide, bits.map(|b| b.offset(off)), off..off + m, c);
        off += m;
    }
}

/// A type-keeping op over a run of any dtype: `f32` and `f64` runs through the loops
/// compiled once here ([`KeepFn::keep_f32`], [`KeepFn::keep_f64`]), the integers
/// through the op's own loop at their type (they compute in `i64`), and the halves in
/// blocks widened to `f32`, mapped by its run and rounded back, as
/// [`Element::map_keep`] computes them (the same values bit for bit; `nan_to_num`'s
/// default bounds resolved at `T` first, as its loop at `T` would use them).
fn keep_run<T: Element>(f: KeepFn, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T]) {
    let f = match f {
        KeepFn::NanToNum(n) => KeepFn::NanToNum(n.at::<T>()),
        other => other,
    };
    match (T::erase::<SliceOf<'_>>(xs), T::erase::<SliceMutOf<'_>>(out)) {
        (ByDType::F32(x), ByDType::F32(o)) => f.keep_f32(x, bits, o),
        (ByDType::F64(x), ByDType::F64(o)) => f.keep_f64(x, bits, o),
        (ByDType::I32(x), ByDType::I32(o)) => f.map_keep_each(x, bits, o),
        (ByDType::I64(x), ByDType::I64(o)) => f.map_keep_each(x, bits, o),
        (_, o) => {
            let out = T::unerase_owned(o).expect("erased as T above");
            widened_keep(f, xs, bits, out);
        }
    }
}

/// [`keep_run`] for a float that is not its own compute type `C` (the halves): blocks
/// in `C` (f16 widened by [`Element::unpack`]), mapped by `C`'s compiled run, rounded
/// back ([`Float::from_calc_block`]: `vcvtps2ph` for f16).
#[inline(never)]
fn widened_keep<T: Element>(f: KeepFn, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T]) {
    calc_blocks(xs, out.len(), bits, true, |wide, b, r, c| {
        match (wide, <CalcOf<T> as Erase>::erase::<SliceMutOf<'_>>(&mut *c)) {
            (ByDType::F32(x), ByDType::F32(c)) => f.keep_f32(x, b, c),
            (ByDType::F64(x), ByDType::F64(c)) => f.keep_f64(x, b, c),
            _ => unreachable!("a compute type is f32 or f64, and a block is in it"),
        }
        // a float keeps its type: `T::Real` is `T`
        let dst = T::erase::<SliceMutOf<'_>>(&mut out[r]);
        let dst = <T::Real as Erase>::unerase_owned(dst).expect("a float's Real is itself");
        <T::Real as Float>::from_calc_block(c, dst);
    });
}

/// `buf` with every element set to `v`, as initialised values.
pub(crate) fn filled<C: Copy>(buf: &mut [std::mem::MaybeUninit<C>], v: C) -> &mut [C] {
    for b in buf.iter_mut() {
        b.write(v);
    }
    // SAFETY: every element was written above; `MaybeUninit<C>` and `C` have the same
    // layout.
    unsafe { &mut *(buf as *mut [std::mem::MaybeUninit<C>] as *mut [C]) }
}

/// A unary family's runs over `f32` and `f64`, each variant's loop compiled here once
/// (non-generic): the float functions' `run_f32` / `run_f64` and the type-keeping ops'
/// `keep_f32` / `keep_f64`, which every layout and dtype reaches (the halves and the
/// integers in converted blocks, [`widened_run`] / [`widened_keep`]).
macro_rules! compiled_unary_runs {
    ($family:ident, $each:ident, $($name:ident: $t:ident),*) => {
        impl $family {
            $(
                #[doc = concat!("The op over a `", stringify!($t), "` run, compiled here once.")]
                #[inline(never)]
                pub fn $name(self, xs: &[$t], bits: Option<Bits<'_>>, out: &mut [$t]) {
                    self.$each(xs, bits, out);
                }
            )*
        }
    };
}

compiled_unary_runs!(FloatFn, map_float_each, run_f32: f32, run_f64: f64);
compiled_unary_runs!(KeepFn, map_keep_each, keep_f32: f32, keep_f64: f64);

/// Recomputes with `f` (the op's exact form) the elements of a run that a `fast` body
/// left NaN: arguments beyond `Math::TRIG_LIMIT` (and NaN ones, which stay NaN).
/// Masked-out outputs are 0, so no mask is read. First an OR over the output, which
/// vectorises and is all a run of ML data costs (a test of each input, converted
/// again, with a store behind it cost half the sine's time, and more for halves).
/// Of those, only the ones whose argument `needs` it (pow: zeros and non-finite bases).
fn beyond_fast<T: Element>(
    xs: &[T], out: &mut [T::Real], needs: impl Fn(CalcOf<T>) -> bool,
    f: impl Fn(CalcOf<T>) -> CalcOf<T>,
) {
    if !out.iter().fold(false, |any, o| any | o.is_nan()) {
        return;
    }
    for (&x, o) in xs.iter().zip(out.iter_mut()) {
        if needs(x.calc()) && o.is_nan() {
            *o = <T::Real as Float>::from_calc(f(x.calc()));
        }
    }
}

/// The derivative of `|x|`: the sign, 0 at 0 (torch's kink rule), NaN at NaN.
#[inline(always)]
pub(crate) fn sgn(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        x * 0.0
    }
}

/// `1 / (1 + e^-x)` in `f64` (the engine's `exp`: a gradient run over it vectorises).
#[inline(always)]
fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp_k())
}

/// `(σ(x), 1 - σ(x))` in `f64`, both from `e = e^(-|x|)` (one `exp`, one division), so
/// neither is computed as a difference from 1: the derivative `σ(1 - σ)` keeps its
/// precision where `σ` nears 1 (`1 - σ(30)`, as a difference, had lost 3 digits).
#[inline(always)]
fn sigmoid_pair(x: f64) -> (f64, f64) {
    let e = (-x.abs()).exp_k();
    let d = 1.0 / (1.0 + e);
    if x >= 0.0 {
        (d, e * d)
    } else {
        (e * d, d)
    }
}

/// `out[k] = g[k] · f'(xs[k])` at the valid elements (in `f64`, rounded once), 0 at the
/// others: [`Unary::grad_f32`] and [`Unary::grad_f64`]. Computed at every element,
/// then selected (as [`FloatAt::at`]), with [`Unary::derivative_fast`]; with `fix`, the
/// NaN results are then recomputed with [`Unary::derivative`] (arguments beyond a fast
/// form's range; a NaN from a NaN stays NaN), after an OR over the output that is all a
/// run without them costs.
#[inline(always)]
fn grad_run<R: Float, U: Unary>(
    u: U, xs: &[R], bits: Option<Bits<'_>>, g: &[R], out: &mut [R], fix: bool,
) {
    let exact = fix.then_some(
        #[inline(always)]
        move |x| u.derivative(x),
    );
    grad_run_with(
        xs,
        bits,
        g,
        out,
        #[inline(always)]
        move |x| u.derivative_fast(x),
        exact,
    );
}

/// [`grad_run`] with the derivative `fast` (in `f64`), and `exact` recomputing the NaN
/// results where given.
#[inline(always)]
fn grad_run_with<R: Float>(
    xs: &[R], bits: Option<Bits<'_>>, g: &[R], out: &mut [R], fast: impl Fn(f64) -> f64 + Copy,
    exact: Option<impl Fn(f64) -> f64>,
) {
    let zero = <R as Element>::ZERO;
    masked_kernels::run::zip_run(
        xs,
        g,
        bits,
        out,
        #[inline(always)]
        move |x: R, gi: R, valid| {
            let v = R::from_f64(gi.to_f64() * fast(x.to_f64()));
            if valid {
                v
            } else {
                zero
            }
        },
    );
    if let Some(exact) = exact
        && out.iter().fold(false, |any, o| any | o.is_nan())
    {
        for ((o, &x), &gi) in out.iter_mut().zip(xs).zip(g) {
            if o.is_nan() {
                *o = R::from_f64(gi.to_f64() * exact(x.to_f64()));
            }
        }
    }
}

/// The VJP of the unary op `u` over a run of any float dtype, as [`Unary::grad_f32`]:
/// `f32` and `f64` runs straight to the op's compiled loops, the halves in blocks
/// widened to `f32` (exactly), through the `f32` loop and rounded back. False (nothing
/// written) for the integers, which have no gradient.
pub fn grad_typed<T: Element, U: Unary>(
    u: U, xs: &[T], bits: Option<Bits<'_>>, g: &[T::Real], out: &mut [T::Real],
) -> bool {
    match (
        T::erase::<SliceOf<'_>>(xs),
        <T::Real as Erase>::erase::<SliceOf<'_>>(g),
        <T::Real as Erase>::erase::<SliceMutOf<'_>>(out),
    ) {
        (ByDType::F32(x), ByDType::F32(g), ByDType::F32(o)) => u.grad_f32(x, bits, g, o),
        (ByDType::F64(x), ByDType::F64(g), ByDType::F64(o)) => u.grad_f64(x, bits, g, o),
        (ByDType::F16(x), ByDType::F16(g), ByDType::F16(o)) => {
            grad_half(u, x, bits, g, o, <half::f16 as Element>::unpack)
        }
        (ByDType::BF16(x), ByDType::BF16(g), ByDType::BF16(o)) => {
            grad_half(u, x, bits, g, o, |src: &[half::bf16], buf| {
                let buf = &mut buf[..src.len()];
                for (b, v) in buf.iter_mut().zip(src) {
                    b.write(v.to_f32());
                }
                // SAFETY: every element was written above; `MaybeUninit<f32>` and `f32`
                // have the same layout.
                unsafe { &*(buf as *const [std::mem::MaybeUninit<f32>] as *const [f32]) }
            })
        }
        _ => return false,
    }
    true
}

/// [`grad_typed`] for a half type: blocks of its values and of `g` widened to `f32` by
/// `widen` (f16: one instruction per 16 values where the CPU has it), the `f32` loop,
/// the results rounded back ([`Float::from_calc_block`]).
#[inline(never)]
fn grad_half<H: Float<Calc = f32>, U: Unary>(
    u: U, xs: &[H], bits: Option<Bits<'_>>, g: &[H], out: &mut [H],
    widen: impl for<'b> Fn(&[H], &'b mut [std::mem::MaybeUninit<f32>]) -> &'b [f32],
) {
    use std::mem::MaybeUninit;
    let n = xs.len().min(g.len()).min(out.len());
    let mut wx = [MaybeUninit::<f32>::uninit(); WIDE_BLOCK];
    let mut wg = [MaybeUninit::<f32>::uninit(); WIDE_BLOCK];
    let mut wo = [0f32; WIDE_BLOCK];
    let mut off = 0;
    while off < n {
        let m = (n - off).min(WIDE_BLOCK);
        let r = off..off + m;
        let x = widen(&xs[r.clone()], &mut wx[..m]);
        let gb = widen(&g[r.clone()], &mut wg[..m]);
        u.grad_f32(x, bits.map(|b| b.offset(off)), gb, &mut wo[..m]);
        H::from_calc_block(&wo[..m], &mut out[r]);
        off += m;
    }
}

/// `C::of(v)` for the compute type `C` of `T`.
macro_rules! c {
    ($v:expr) => {
        <CalcOf<T> as Math>::of($v)
    };
}

unary!(/// `|x|` (integers wrap: `|MIN| = MIN`).
    Abs, "abs", true, |x| x.abs(),
    d |x| sgn(x), |i| i.wrapping_abs());
unary!(/// `-x` (integers wrap).
    Neg, "neg", true, |x| -x,
    d |x| -1.0, |i| i.wrapping_neg());
unary!(/// -1, 0 or 1; `sign(±0) = 0` and `sign(NaN) = 0`, as torch.
    Sign, "sign", true,
    |x| if x > c!(0.0) { c!(1.0) } else if x < c!(0.0) { c!(-1.0) } else { c!(0.0) },
    d |x| 0.0,
    |i| i.signum());
unary!(/// `x * x` (integers wrap).
    Square, "square", true, |x| x * x,
    d |x| 2.0 * x, |i| i.wrapping_mul(i));
unary!(/// `max(x, 0)`; NaN propagates.
    Relu, "relu", true, |x| if x > c!(0.0) || x.is_nan() { x } else { c!(0.0) },
    d |x| if x <= 0.0 { 0.0 } else { 1.0 }, |i| i.max(0));
unary!(/// Round toward -inf (integers unchanged).
    Floor, "floor", true, |x| x.floor(),
    d |x| 0.0);
unary!(/// Round toward +inf (integers unchanged).
    Ceil, "ceil", true, |x| x.ceil(),
    d |x| 0.0);
unary!(/// Round to nearest, ties to even (integers unchanged).
    Round, "round", true, |x| x.round_even(),
    d |x| 0.0);
unary!(/// Round toward 0 (integers unchanged).
    Trunc, "trunc", true, |x| x.trunc(),
    d |x| 0.0);
unary!(/// `sqrt(x)` (NaN below 0).
    Sqrt, "sqrt", true, |x| x.sqrt(),
    d |x| 0.5 / x.sqrt());
unary!(/// `1 / sqrt(x)`.
    Rsqrt, "rsqrt", false, |x| c!(1.0) / x.sqrt(),
    d |x| -0.5 / (x * x.sqrt()));
unary!(/// `1 / x`.
    Reciprocal, "reciprocal", false, |x| c!(1.0) / x,
    d |x| { let r = 1.0 / x; -(r * r) });
unary!(/// `e^x`.
    Exp, "exp", false, |x| x.exp_k(),
    d |x| x.exp_k());
unary!(/// `2^x`.
    Exp2, "exp2", false, |x| x.exp2(),
    d |x| std::f64::consts::LN_2 * Math::exp2(x));
unary!(/// `e^x - 1`.
    Expm1, "expm1", true, |x| x.exp_m1(),
    d |x| x.exp_k());
unary!(/// Natural logarithm (NaN below 0, -inf at 0).
    Log, "log", false, |x| x.ln_k(),
    d |x| 1.0 / x);
unary!(/// Base-2 logarithm.
    Log2, "log2", false, |x| x.log2(),
    d |x| std::f64::consts::LOG2_E / x);
unary!(/// Base-10 logarithm.
    Log10, "log10", false, |x| x.log10(),
    d |x| std::f64::consts::LOG10_E / x);
unary!(/// `ln(1 + x)`.
    Log1p, "log1p", true, |x| x.ln_1p(),
    d |x| 1.0 / (1.0 + x));
unary!(/// Sine.
    Sin, "sin", true, |x| x.sin(),
    d |x| x.cos(), fast |x| x.sin_fast(), dfast |x| x.cos_fast());
unary!(/// Cosine.
    Cos, "cos", false, |x| x.cos(),
    d |x| -x.sin(), fast |x| x.cos_fast(), dfast |x| -x.sin_fast());
unary!(/// Tangent.
    Tan, "tan", true, |x| x.tan(),
    d |x| 1.0 + x.tan() * x.tan(), fast |x| x.tan_fast(),
    dfast |x| { let t = x.tan_fast(); 1.0 + t * t });
unary!(/// Arcsine.
    Asin, "asin", true, |x| x.asin(),
    d |x| 1.0 / ((1.0 - x) * (1.0 + x)).sqrt());
unary!(/// Arccosine.
    Acos, "acos", false, |x| x.acos(),
    d |x| -1.0 / ((1.0 - x) * (1.0 + x)).sqrt());
unary!(/// Arctangent.
    Atan, "atan", true, |x| x.atan(),
    d |x| 1.0 / (1.0 + x * x));
unary!(/// Hyperbolic sine.
    Sinh, "sinh", true, |x| x.sinh(),
    d |x| Math::cosh(x));
unary!(/// Hyperbolic cosine.
    Cosh, "cosh", false, |x| x.cosh(),
    d |x| Math::sinh(x));
unary!(/// Hyperbolic tangent.
Tanh, "tanh", true, |x| x.tanh(),
d |x| {
    // sech² as 4e / (1 + e)² with e = e^(-2|x|): no cancellation where tanh nears ±1
    let e = (-2.0 * x.abs()).exp_k();
    4.0 * e / ((1.0 + e) * (1.0 + e))
});
unary!(/// Inverse hyperbolic sine.
Asinh, "asinh", true, |x| x.asinh(),
d |x| {
    // 1 / |x| where x² + 1 would overflow (or round to x²)
    let a = x.abs();
    if a > <f64 as Math>::BIG_HYPERBOLIC { 1.0 / a } else { 1.0 / (a * a + 1.0).sqrt() }
});
unary!(/// Inverse hyperbolic cosine.
Acosh, "acosh", false, |x| x.acosh(),
d |x| {
    // torch's 1 / sqrt(x² - 1) (finite below -1 too), 1 / |x| where x² would overflow
    let a = x.abs();
    if a > <f64 as Math>::BIG_HYPERBOLIC { 1.0 / a } else { 1.0 / ((a - 1.0) * (a + 1.0)).sqrt() }
});
unary!(/// Inverse hyperbolic tangent.
    Atanh, "atanh", true, |x| x.atanh(),
    d |x| 1.0 / ((1.0 - x) * (1.0 + x)));
unary!(/// `1 / (1 + e^-x)`.
    Sigmoid, "sigmoid", false, |x| c!(1.0) / (c!(1.0) + (-x).exp_k()),
    d |x| { let (s, q) = sigmoid_pair(x); s * q });
unary!(/// `ln(x / (1 - x))`; on [0.25, 1] as `2 atanh(2x - 1)` (exact argument, no
    /// cancellation near x = 0.5).
    Logit, "logit", false,
    |x| if x >= c!(0.25) { c!(2.0) * (c!(2.0) * x - c!(1.0)).atanh() } else { (x / (c!(1.0) - x)).ln() },
    d |x| 1.0 / (x * (1.0 - x)));
unary!(/// The error function.
    Erf, "erf", true, |x| x.erf(),
    d |x| std::f64::consts::FRAC_2_SQRT_PI * (-x * x).exp_k());
unary!(/// `1 - erf(x)`.
    Erfc, "erfc", false, |x| x.erfc(),
    d |x| -std::f64::consts::FRAC_2_SQRT_PI * (-x * x).exp_k());
unary!(/// `x - trunc(x)` (the sign of `x`; 0 for integers).
    Frac, "frac", true, |x| x - x.trunc(),
    d |x| 1.0);
unary!(/// `ln(1 + e^x)`, and `x` itself above 20 (torch's threshold).
    Softplus, "softplus", false,
    |x| if x > c!(20.0) { x } else { x.exp_k().ln_1p() },
    d |x| if x > 20.0 { 1.0 } else { sigmoid(x) });
unary!(/// `x Φ(x) = x (1 + erf(x / √2)) / 2` (the exact GELU), computed as
    /// `x erfc(-x / √2) / 2`, which has no cancellation for negative `x`, with the argument carried to twice the
    /// working precision (erfc magnifies its rounding).
    Gelu, "gelu", true, |x| gelu::<CalcOf<T>>(x),
    d |x| 0.5 * Math::erfc(-x * std::f64::consts::FRAC_1_SQRT_2) + x * (-0.5 * x * x).exp_k() * (0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2));

/// `x erfc(y) / 2` with `y = -x / √2` carried to twice the working precision: `erfc`
/// magnifies the rounding of its argument by `2y²` (24 ulp at `x = -5`), so the rounding
/// error `dy` of `y` is computed exactly (a fused multiply-add and the low part of
/// `1/√2`) and applied as the first-order term `erfc(y + dy) = erfc(y) - 2/√π e^(-y²) dy`.
#[inline(always)]
fn gelu<C: Float + Math>(x: C) -> C {
    const R: f64 = std::f64::consts::FRAC_1_SQRT_2;
    // 1/√2 - R as f64 (R is 1/√2 rounded to f64)
    const R_LO: f64 = -4.833_646_656_726_457e-17;
    let hi = C::of(R);
    let lo = C::of((R - Math::to_f64(hi)) + R_LO);
    let y = -x * hi;
    let dy = (-x).mul_add(hi, -y) + (-x) * lo;
    // at x = ±inf the correction is inf - inf: there is nothing to correct
    let dy = if dy.is_nan() { C::of(0.0) } else { dy };
    let slope = C::of(std::f64::consts::FRAC_2_SQRT_PI) * (-(y * y)).exp_k();
    C::of(0.5) * x * (y.erfc() - slope * dy)
}
unary!(/// `x σ(x) = x / (1 + e^-x)` (SiLU, swish).
    Silu, "silu", true, |x| x / (c!(1.0) + (-x).exp_k()),
    d |x| { let (s, q) = sigmoid_pair(x); s * (1.0 + x * q) });

/// `min(max(x, min), max)`: NaN propagates, and `min > max` gives `max` everywhere (as
/// torch). Integers compare with the bounds rounded inward (`ceil(min)`, `floor(max)`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clamp {
    min: Option<f64>,
    max: Option<f64>,
}

impl Clamp {
    /// A clamp to `[min, max]` (either may be absent, not both).
    ///
    /// # Errors
    /// [`MaskedError::InvalidArgument`] when both are absent or a bound is NaN.
    pub fn new(min: Option<f64>, max: Option<f64>) -> Result<Self> {
        if min.is_none() && max.is_none() {
            return Err(MaskedError::InvalidArgument {
                name: "min",
                value: "none".into(),
                reason: "clamp needs min, max or both",
            });
        }
        for (name, v) in [("min", min), ("max", max)] {
            if v.is_some_and(f64::is_nan) {
                return Err(MaskedError::InvalidArgument {
                    name,
                    value: "NaN".into(),
                    reason: "a clamp bound must be a number",
                });
            }
        }
        Ok(Clamp { min, max })
    }
}

impl Unary for Clamp {
    fn name(&self) -> &'static str {
        "clamp"
    }
    #[inline(always)]
    fn float<T: Element>(&self, x: CalcOf<T>) -> CalcOf<T> {
        let mut y = x;
        if let Some(lo) = self.min {
            let lo = <CalcOf<T> as Float>::from_f64(lo);
            y = if y < lo { lo } else { y };
        }
        if let Some(hi) = self.max {
            let hi = <CalcOf<T> as Float>::from_f64(hi);
            y = if y > hi { hi } else { y };
        }
        y
    }
    #[inline(always)]
    fn int(&self, i: i64) -> i64 {
        let mut y = i;
        if let Some(lo) = self.min {
            let lo = lo.ceil();
            y = if (y as f64) < lo { lo as i64 } else { y };
        }
        if let Some(hi) = self.max {
            let hi = hi.floor();
            y = if (y as f64) > hi { hi as i64 } else { y };
        }
        y
    }
    fn zero_preserving(&self) -> bool {
        self.float::<f64>(0.0) == 0.0
    }
    #[inline(always)]
    fn derivative(&self, x: f64) -> f64 {
        if x.is_nan() {
            return x;
        }
        let inside = self.min.is_none_or(|lo| x > lo) && self.max.is_none_or(|hi| x < hi);
        if inside {
            1.0
        } else {
            0.0
        }
    }
}

/// `x^p` for a scalar exponent: a float function, or type-keeping for an integer input
/// and a non-negative integer exponent ([`Pow::keeps_integers`]); `pow(-inf, 0.5)` is
/// NaN and `pow(-0, 0.5)` is -0, as torch. The binary `pow` with a scalar exponent
/// (`x ** p`) runs this op's loop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pow {
    p: f64,
    /// The sign of a negative base's power: 1 (even integer `p`), -1 (odd), NaN
    /// (fractional).
    neg: f64,
    /// The same for `x^(p - 1)`, the derivative's power.
    dneg: f64,
}

impl Pow {
    /// `x^p`.
    ///
    /// # Errors
    /// [`MaskedError::InvalidArgument`] for a NaN exponent.
    pub fn new(p: f64) -> Result<Self> {
        let p = MaskedError::not_nan("exponent", p, "pow needs a numeric exponent (--exponent)")?;
        Ok(Pow {
            p,
            neg: crate::math::pow_sign_of_negative(p),
            dneg: crate::math::pow_sign_of_negative(p - 1.0),
        })
    }
    /// `x^p` as a float function of `T` values.
    ///
    /// # Errors
    /// A NaN exponent; an integer `T` with a negative integer exponent (semantics.md: an
    /// error, as torch).
    pub fn float_of<T: Element>(p: f64) -> Result<Self> {
        let pow = Pow::new(p)?;
        if !T::DTYPE.is_float() && p < 0.0 && p.fract() == 0.0 {
            return Err(MaskedError::InvalidArgument {
                name: "exponent",
                value: p.to_string(),
                reason: "integers cannot be raised to a negative integer power",
            });
        }
        Ok(pow)
    }
    /// The exponent as a non-negative integer, if it is one (then integer inputs keep
    /// their type).
    pub fn keeps_integers(&self) -> Option<u32> {
        (self.p >= 0.0 && self.p.fract() == 0.0 && self.p <= u32::MAX as f64)
            .then_some(self.p as u32)
    }
}

impl Pow {
    /// The VJP run with the exponent's case picked once: `2x` at 2 (square's loop), a
    /// short form's loop at 3, -1, -2 and 0.5 ([`short_derivative`]), else the
    /// branch-free power; the NaN results recomputed exactly (`std`'s `powi` and `powf`
    /// per element cost 25x the forward op).
    #[inline(always)]
    fn grad_any<R: Float>(&self, xs: &[R], bits: Option<Bits<'_>>, g: &[R], out: &mut [R]) {
        let exact = Some(
            #[inline(always)]
            |x| self.derivative(x),
        );
        // each case its own loop, the derivative inlined into it (the run kernels are
        // compiled per SIMD level: a closure not inlined is a call per element)
        macro_rules! with {
            (|$x:ident| $fast:expr) => {
                grad_run_with(
                    xs,
                    bits,
                    g,
                    out,
                    #[inline(always)]
                    |$x: f64| $fast,
                    exact,
                )
            };
        }
        match self.p {
            2.0 => grad_run(Square, xs, bits, g, out, false),
            3.0 => with!(|x| short_derivative(3.0, x).unwrap_or(f64::NAN)),
            -1.0 => with!(|x| short_derivative(-1.0, x).unwrap_or(f64::NAN)),
            -2.0 => with!(|x| short_derivative(-2.0, x).unwrap_or(f64::NAN)),
            0.5 => with!(|x| short_derivative(0.5, x).unwrap_or(f64::NAN)),
            _ => with!(|x| self.power_fast(x)),
        }
    }

    /// `p x^(p-1)` with the branch-free `e^((p-1) ln |x|)` ([`Math::powf_fast`]): NaN at
    /// zeros, infinities and NaNs, which the gradient run recomputes; `2x` at `p = 2`.
    #[inline(always)]
    fn power_fast(&self, x: f64) -> f64 {
        let p = self.p;
        if p == 2.0 {
            2.0 * x
        } else if p == 0.0 || p == 1.0 {
            p
        } else if p.is_finite() {
            p * x.powf_fast(p - 1.0, self.dneg)
        } else {
            f64::NAN // recomputed
        }
    }
}

/// The derivative of `x^p` at the exponents with a short form (3, -1, -2, 0.5): the
/// same bits as [`Pow`]'s exact `powi` form at the integers; `0.5 / sqrt(x)` at 0.5
/// (+inf at -0, as `powf`; NaN below 0, recomputed). `None` at other exponents.
#[inline(always)]
fn short_derivative(p: f64, x: f64) -> Option<f64> {
    Some(match p {
        3.0 => 3.0 * (x * x),
        -1.0 => -(1.0 / (x * x)),
        -2.0 => -2.0 * (1.0 / (x * (x * x))),
        0.5 => 0.5 / (x.sqrt() + 0.0),
        _ => return None,
    })
}

impl Unary for Pow {
    fn name(&self) -> &'static str {
        "pow"
    }
    /// The exponent's case picked once per run: `x * x` at 2, a short form at 3, -1, -2
    /// and 0.5 (`sqrt`); otherwise the branch-free
    /// `e^(p ln |x|)` ([`Math::powf_fast`]: f32 and the halves in f64, f64 in
    /// double-double), then the NaN outputs at zeros, infinities and NaNs recomputed with
    /// the exact form (a negative base's fractional power is NaN from both); an infinite
    /// exponent per element as [`Unary::float`].
    fn map_float<T: Element>(&self, xs: &[T], bits: Option<Bits<'_>>, out: &mut [T::Real]) {
        /// `f` of each valid element in the compute type, rounded once; 0 where invalid
        macro_rules! short {
            (|$c:ident| $f:expr) => {
                map_run(
                    xs,
                    bits,
                    out,
                    #[inline(always)]
                    move |x: T, valid: bool| {
                        let $c = x.calc();
                        let r = <T::Real as Float>::from_calc($f);
                        if valid {
                            r
                        } else {
                            <T::Real as Element>::ZERO
                        }
                    },
                )
            };
        }
        let one = <CalcOf<T> as Float>::ONE;
        // the exponents with a short form (torch picks the same ones), each the same bits
        // as `float`'s (`powi` multiplies as these do; 0.5 is `sqrt` there too)
        if self.p == 2.0 {
            map_run(xs, bits, out, FloatAt::<T, Square, false>::new(Square));
        } else if self.p == 3.0 {
            short!(|c| c * c * c);
        } else if self.p == -1.0 {
            short!(|c| one / c);
        } else if self.p == -2.0 {
            short!(|c| one / (c * c));
        } else if self.p == 0.5 {
            short!(|c| c.sqrt());
        } else if self.p.is_finite() {
            map_run(xs, bits, out, FloatAt::<T, Self, true>::new(*self));
            // zeros, infinities and NaNs; a negative base's fractional power is NaN from
            // either form, and not recomputed (half of a normal sample's)
            let (zero, inf) = (<CalcOf<T> as Element>::ZERO, <CalcOf<T> as Float>::INFINITY);
            beyond_fast(
                xs,
                out,
                #[inline(always)]
                move |c: CalcOf<T>| c == zero || c.abs() == inf || c.is_nan(),
                #[inline(always)]
                |c| self.float::<T>(c),
            );
        } else {
            map_run(xs, bits, out, FloatAt::<T, Self, false>::new(*self));
        }
    }
    #[inline(always)]
    fn fast<T: Element>(&self, x: CalcOf<T>) -> CalcOf<T> {
        x.powf_fast(self.p, self.neg)
    }
    #[inline(always)]
    fn float<T: Element>(&self, x: CalcOf<T>) -> CalcOf<T> {
        let p = self.p;
        if p == 2.0 {
            x * x
        } else if p == 0.5 {
            // torch's and numpy's: -0 at -0 (`powf` gives +0), NaN at -inf (semantics.md)
            x.sqrt()
        } else if p.fract() == 0.0 && p.abs() <= i32::MAX as f64 {
            x.powi(p as i32)
        } else if x == <CalcOf<T> as Float>::NEG_INFINITY && p.fract() != 0.0 && p > 0.0 {
            <CalcOf<T> as Float>::NAN
        } else {
            x.powf(<CalcOf<T> as Float>::from_f64(p))
        }
    }
    #[inline(always)]
    fn int(&self, i: i64) -> i64 {
        i.wrapping_pow(self.keeps_integers().unwrap_or(1))
    }
    fn zero_preserving(&self) -> bool {
        self.p > 0.0
    }
    #[inline(always)]
    fn derivative(&self, x: f64) -> f64 {
        let p = self.p;
        if p == 0.0 {
            0.0
        } else if p == 1.0 {
            1.0
        } else if p.fract() == 0.0 && p.abs() <= i32::MAX as f64 {
            p * x.powi(p as i32 - 1)
        } else {
            p * x.powf(p - 1.0)
        }
    }
    /// The gradient runs' derivative: a short form ([`short_derivative`]) or
    /// [`Pow::power_fast`].
    #[inline(always)]
    fn derivative_fast(&self, x: f64) -> f64 {
        short_derivative(self.p, x).unwrap_or_else(|| self.power_fast(x))
    }
    /// The exponent's case picked once per run: `2x` at 2, else the branch-free power
    /// and the NaN results recomputed exactly.
    fn grad_f32(&self, xs: &[f32], bits: Option<Bits<'_>>, g: &[f32], out: &mut [f32]) {
        self.grad_any(xs, bits, g, out);
    }
    /// As [`Pow::grad_f32`].
    fn grad_f64(&self, xs: &[f64], bits: Option<Bits<'_>>, g: &[f64], out: &mut [f64]) {
        self.grad_any(xs, bits, g, out);
    }
}

/// NaN, +inf and -inf replaced by given finite values (defaults: 0, the type's largest
/// and lowest finite value); integers unchanged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NanToNum {
    nan: f64,
    posinf: Option<f64>,
    neginf: Option<f64>,
}

impl NanToNum {
    /// The replacement values (`None`: the type's largest / lowest finite value).
    pub fn new(nan: f64, posinf: Option<f64>, neginf: Option<f64>) -> Self {
        NanToNum {
            nan,
            posinf,
            neginf,
        }
    }
}

impl NanToNum {
    /// Its default bounds (`None`) replaced by `T`'s largest and lowest finite values:
    /// the op as it computes at `T`, whatever type then runs it.
    pub fn at<T: Element>(self) -> Self {
        NanToNum {
            nan: self.nan,
            posinf: Some(self.posinf.unwrap_or(T::MAX_FINITE)),
            neginf: Some(self.neginf.unwrap_or(-T::MAX_FINITE)),
        }
    }
}

impl Unary for NanToNum {
    fn name(&self) -> &'static str {
        "nan_to_num"
    }
    #[inline(always)]
    fn float<T: Element>(&self, x: CalcOf<T>) -> CalcOf<T> {
        let f = <CalcOf<T> as Float>::from_f64;
        if x.is_nan() {
            f(self.nan)
        } else if x == <CalcOf<T> as Float>::INFINITY {
            f(self.posinf.unwrap_or(T::MAX_FINITE))
        } else if x == <CalcOf<T> as Float>::NEG_INFINITY {
            f(self.neginf.unwrap_or(-T::MAX_FINITE))
        } else {
            x
        }
    }
    fn zero_preserving(&self) -> bool {
        true
    }
    #[inline(always)]
    fn derivative(&self, x: f64) -> f64 {
        if x.is_finite() {
            1.0
        } else {
            0.0
        }
    }
}

fn_enum! {
    /// Every float function: the one [`FloatMap`] type the layouts' map kernels are
    /// compiled for (per dtype), whichever function runs.
    float FloatFn {
        Sqrt, Rsqrt, Reciprocal, Exp, Exp2, Expm1, Log, Log2, Log10, Log1p, Sin, Cos, Tan,
        Asin, Acos, Atan, Sinh, Cosh, Tanh, Asinh, Acosh, Atanh, Sigmoid, Logit, Erf, Erfc,
        Frac, Softplus, Gelu, Silu, Pow,
    }
}

fn_enum! {
    /// Every type-keeping op: the one [`KeepMap`] type the layouts' map kernels are
    /// compiled for (per dtype).
    keep KeepFn {
        Abs, Neg, Sign, Square, Relu, Floor, Ceil, Round, Trunc, Clamp, NanToNum, Pow,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use half::{bf16, f16};

    /// Every float function (pow at each of its exponent's cases).
    fn every_float_fn() -> Vec<FloatFn> {
        use FloatFn as F;
        let mut fs = vec![
            F::Sqrt(Sqrt),
            F::Rsqrt(Rsqrt),
            F::Reciprocal(Reciprocal),
            F::Exp(Exp),
            F::Exp2(Exp2),
            F::Expm1(Expm1),
            F::Log(Log),
            F::Log2(Log2),
            F::Log10(Log10),
            F::Log1p(Log1p),
            F::Sin(Sin),
            F::Cos(Cos),
            F::Tan(Tan),
            F::Asin(Asin),
            F::Acos(Acos),
            F::Atan(Atan),
            F::Sinh(Sinh),
            F::Cosh(Cosh),
            F::Tanh(Tanh),
            F::Asinh(Asinh),
            F::Acosh(Acosh),
            F::Atanh(Atanh),
            F::Sigmoid(Sigmoid),
            F::Logit(Logit),
            F::Erf(Erf),
            F::Erfc(Erfc),
            F::Frac(Frac),
            F::Softplus(Softplus),
            F::Gelu(Gelu),
            F::Silu(Silu),
        ];
        // one of each variant above, and pow
        assert_eq!(fs.len() + 1, FloatFn::VARIANTS);
        for p in [2.0, 0.5, 3.0, -1.0, -2.0, -1.5, f64::INFINITY] {
            fs.push(F::Pow(Pow::new(p).unwrap()));
        }
        fs
    }

    /// Values of `T` over more than two blocks with a ragged end: zeros, ±1, values in
    /// and beyond the fast forms' range (the trigonometric recompute), infinity, NaN,
    /// halves (ties for round), and a sine sweep (integers: rounded, times three); and
    /// a mask's words (about half valid).
    pub(crate) fn run_inputs<T: Element>() -> (Vec<T>, Vec<u64>) {
        let n = 2 * WIDE_BLOCK + 77;
        let special = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            1e5,
            -3e4,
            f64::INFINITY,
            f64::NAN,
            0.5,
            2.5,
        ];
        let xs = (0..n)
            .map(|k| match k % 11 {
                0 => special[(k / 11) % special.len()],
                _ => ((k as f64) * 0.7311).sin() * (1.0 + (k % 7) as f64),
            })
            .map(|v| {
                T::from_f64_lossy(if T::DTYPE.is_float() {
                    v
                } else {
                    (v * 3.0).round()
                })
            })
            .collect();
        let words = (0..n.div_ceil(64))
            .map(|k| 0x9E37_79B9_7F4A_7C15u64.rotate_left(k as u32 * 7) | 1)
            .collect();
        (xs, words)
    }

    /// `got` equals `want` bit for bit (NaN as NaN), for op `name` at `T` over `xs`.
    pub(crate) fn assert_same_bits<T: Element, O: Element>(
        name: &str, xs: &[T], got: &[O], want: &[O],
    ) {
        for (k, (g, w)) in got.iter().zip(want).enumerate() {
            let (g, w) = (g.to_f64(), w.to_f64());
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "{name} {} at {k} (x = {:?}): {g} != {w}",
                T::DTYPE,
                xs[k].to_f64(),
            );
        }
    }

    /// A float function over a dtype that is not its own compute type (through
    /// `widened_run`: blocks converted, mapped by the compute type's compiled run,
    /// rounded back) equals the function's loop at that dtype itself, bit for bit,
    /// masked and not, over [`run_inputs`].
    fn widened_run_equals_the_typed_loop<T: Element>() {
        let (xs, words) = run_inputs::<T>();
        for f in every_float_fn() {
            for bits in [None, Some(Bits::new(&words, 3))] {
                let mut want = vec![<T::Real as Element>::ZERO; xs.len()];
                f.map_float_each(&xs, bits, &mut want);
                let mut got = vec![<T::Real as Float>::ONE; xs.len()];
                f.map_float(&xs, bits, &mut got);
                assert_same_bits(f.name(), &xs, &got, &want);
            }
        }
    }

    /// Every type-keeping op (clamp, nan_to_num and pow with options of each kind).
    fn every_keep_fn() -> Vec<KeepFn> {
        use KeepFn as K;
        let mut fs = vec![
            K::Abs(Abs),
            K::Neg(Neg),
            K::Sign(Sign),
            K::Square(Square),
            K::Relu(Relu),
            K::Floor(Floor),
            K::Ceil(Ceil),
            K::Round(Round),
            K::Trunc(Trunc),
        ];
        // one of each variant above, and clamp, nan_to_num, pow
        assert_eq!(fs.len() + 3, KeepFn::VARIANTS);
        for (lo, hi) in [
            (Some(-1.5), Some(2.25)),
            (None, Some(0.3)),
            (Some(-7.0), None),
        ] {
            fs.push(K::Clamp(Clamp::new(lo, hi).unwrap()));
        }
        fs.push(K::NanToNum(NanToNum::new(0.0, None, None)));
        fs.push(K::NanToNum(NanToNum::new(-2.5, Some(1e4), Some(-3.0))));
        for p in [0.0, 2.0, 3.0] {
            fs.push(K::Pow(Pow::new(p).unwrap()));
        }
        fs
    }

    /// A type-keeping op over every dtype (f32 and f64 through the runs compiled once,
    /// the halves through widened blocks, the integers through their own loop) equals
    /// the op's loop at that dtype, bit for bit, masked and not, over [`run_inputs`].
    fn keep_run_equals_the_typed_loop<T: Element>() {
        let (xs, words) = run_inputs::<T>();
        for f in every_keep_fn() {
            for bits in [None, Some(Bits::new(&words, 3))] {
                let mut want = vec![T::ZERO; xs.len()];
                f.map_keep_each(&xs, bits, &mut want);
                let mut got = vec![T::from_f64_lossy(1.0); xs.len()];
                f.map_keep(&xs, bits, &mut got);
                assert_same_bits(f.name(), &xs, &got, &want);
            }
        }
    }

    #[test]
    fn type_keeping_ops_run_alike_on_every_dtype() {
        crate::element::each_dtype!(T => keep_run_equals_the_typed_loop::<T>());
    }

    #[test]
    fn halves_and_integers_map_through_the_compute_types_runs() {
        widened_run_equals_the_typed_loop::<f16>();
        widened_run_equals_the_typed_loop::<bf16>();
        widened_run_equals_the_typed_loop::<i32>();
        widened_run_equals_the_typed_loop::<i64>();
    }

    /// pow's map (the fast form, then the exact one at zeros, infinities and NaNs)
    /// equals the exact form per element, bit for bit where the exact form is exact
    /// (specials) and within `tol` relative elsewhere (an ulp or two; the exact form of
    /// an integer exponent is `powi`), for exponents of each kind; masked-out positions
    /// (a zero and an infinity among them) stay 0.
    fn pow_map_recomputes_the_specials_and_keeps_the_mask<T>(tol: f64)
    where
        T: Element<Real = T> + Float<Calc = T> + Math,
    {
        let specials = [0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN].map(T::of);
        let mut xs: Vec<T> = (0..130).map(|k| T::of((k as f64 - 65.0) * 0.37)).collect();
        for (k, v) in specials.into_iter().enumerate() {
            xs[9 * k + 2] = v;
            xs[9 * k + 70] = v;
        }
        // the second copies of the specials and every 13th position masked out
        let mut words = [u64::MAX; 3];
        for k in (0..130usize).filter(|&k| k % 13 == 0 || (k >= 70 && (k - 70) % 9 == 0 && k < 115))
        {
            words[k / 64] &= !(1u64 << (k % 64));
        }
        let bits = |v: T| Math::to_f64(v).to_bits();
        for p in [
            1.5,
            -0.5,
            3.0,
            -2.0,
            -1.0,
            0.5,
            2.0,
            0.0,
            1.0 / 3.0,
            f64::INFINITY,
        ] {
            let pow = Pow::new(p).unwrap();
            let mut out = vec![T::NAN; xs.len()];
            pow.map_float(&xs, Some(Bits::new(&words, 0)), &mut out);
            for (k, (&x, &o)) in xs.iter().zip(&out).enumerate() {
                if words[k / 64] >> (k % 64) & 1 == 0 {
                    assert_eq!(bits(o), 0, "pow({x:?}, {p}) at masked-out {k}");
                    continue;
                }
                let want = pow.float::<T>(x);
                let (of, wf) = (Math::to_f64(o), Math::to_f64(want));
                let close =
                    of == wf || (of - wf).abs() <= tol * wf.abs() || (of.is_nan() && wf.is_nan());
                assert!(close, "pow({x:?}, {p}) = {o:?}, want {want:?}");
                if specials.iter().any(|&s| bits(s) == bits(x)) {
                    assert!(
                        bits(o) == bits(want) || (of.is_nan() && wf.is_nan()),
                        "pow({x:?}, {p}) = {o:?}, want {want:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn f32_pow_map_recomputes_the_specials_and_keeps_the_mask() {
        pow_map_recomputes_the_specials_and_keeps_the_mask::<f32>(f32::EPSILON as f64);
    }

    #[test]
    fn f64_pow_map_recomputes_the_specials_and_keeps_the_mask() {
        pow_map_recomputes_the_specials_and_keeps_the_mask::<f64>(2.0 * f64::EPSILON);
    }

    /// Arguments for the trigonometric map tests: a run longer than a vector, with values
    /// beyond `T`'s `TRIG_LIMIT`, infinities and NaN at every 7th position; the mask: every
    /// 10th position and position 3 (a large value, left 0) masked out.
    fn trig_inputs<T: Math>() -> (Vec<T>, [u64; 2]) {
        let big = T::TRIG_LIMIT.to_f64();
        let mut xs: Vec<T> = (0..100).map(|k| T::of((k as f64 - 50.0) * 0.37)).collect();
        let far = [
            big,
            -big,
            big * 4.0,
            big * 1e6,
            -big * 20.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        for (k, v) in far.into_iter().chain([f64::NAN]).enumerate() {
            xs[7 * k + 3] = T::of(v);
        }
        let mut words = [u64::MAX; 2];
        for k in (0..100).step_by(10).chain([3]) {
            words[k / 64] &= !(1u64 << (k % 64));
        }
        (xs, words)
    }

    /// `u` mapped over [`trig_inputs`] equals `f` (f64's std function) element for element
    /// within `tol` relative, masked-out elements 0.
    fn check_trig_map<T: Math + Element<Real = T>>(u: FloatFn, f: fn(f64) -> f64, tol: f64) {
        let (xs, words) = trig_inputs::<T>();
        let bits = Bits::new(&words, 0);
        let mut out = vec![T::of(1.0); xs.len()];
        u.map_float(&xs, Some(bits), &mut out);
        for (k, (&x, &o)) in xs.iter().zip(&out).enumerate() {
            let (x, got) = (Math::to_f64(x), Math::to_f64(o));
            let want = if bits.get(k) { f(x) } else { 0.0 };
            let close = (want.is_nan() && got.is_nan())
                || (want - got).abs() <= tol * want.abs().max(1e-30);
            assert!(
                close,
                "{}({x:e}) at {k}: got {got:e}, want {want:e}",
                u.name()
            );
        }
    }

    /// The trigonometric maps take the vector form below `TRIG_LIMIT` and the std
    /// functions beyond (and at infinities and NaN), masked-out elements 0: element for
    /// element what the scalar functions give, on f32, f16 and f64 runs longer than a
    /// vector (each type beyond its own limit).
    #[test]
    fn trigonometric_maps_recompute_arguments_beyond_the_fast_range() {
        type F = (FloatFn, fn(f64) -> f64);
        let fns: [F; 3] = [
            (FloatFn::Sin(Sin), f64::sin),
            (FloatFn::Cos(Cos), f64::cos),
            (FloatFn::Tan(Tan), f64::tan),
        ];
        for (u, f) in fns {
            check_trig_map::<f32>(u, f, 2e-7);
            // tan of f64 is within 3 ulp
            check_trig_map::<f64>(u, f, 8e-16);
            // f16 values compute in f32: the f32 result rounded once
            let (xs, _) = trig_inputs::<f32>();
            let hs: Vec<half::f16> = xs.iter().map(|&x| half::f16::from_f32(x)).collect();
            let mut out = vec![half::f16::ONE; hs.len()];
            u.map_float(&hs, None, &mut out);
            for (&x, &o) in hs.iter().zip(&out) {
                let want = half::f16::from_f32(f(x.to_f64()) as f32);
                assert!(
                    want.to_bits() == o.to_bits() || (want.is_nan() && o.is_nan()),
                    "{}({x}) = {o}, want {want}",
                    u.name()
                );
            }
        }
    }

    /// Arguments for the derivatives: zero, tiny, inside every domain, near its
    /// edges, large (beyond the trigonometric fast range, where `x²` overflows), and
    /// infinities and NaN; both signs.
    fn grad_points() -> Vec<f64> {
        let mags = [
            0.0,
            1e-300,
            1e-8,
            0.1,
            0.3,
            0.5,
            0.7,
            0.9,
            0.999,
            1.0,
            1.5,
            2.0,
            3.0,
            7.0,
            15.0,
            25.0,
            40.0,
            100.0,
            700.0,
            1e5,
            3e9,
            1e20,
            1e300,
            f64::INFINITY,
            f64::NAN,
        ];
        mags.iter().flat_map(|&m| [m, -m]).collect()
    }

    /// `f'(x)` of every float function, written out with the std functions in textbook
    /// forms, independent of the ops' branch-free bodies (gelu's `Φ` takes the engine's
    /// `erfc`, which its own tests check; std has none).
    fn reference_derivative(u: FloatFn, x: f64) -> f64 {
        use std::f64::consts::*;
        let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
        match u {
            FloatFn::Sqrt(_) | FloatFn::Rsqrt(_) if x < 0.0 => f64::NAN,
            FloatFn::Sqrt(_) => 0.5 / x.sqrt(),
            FloatFn::Rsqrt(_) => -0.5 / x.powf(1.5),
            FloatFn::Reciprocal(_) => -(1.0 / x).powi(2),
            FloatFn::Exp(_) | FloatFn::Expm1(_) => x.exp(),
            FloatFn::Exp2(_) => LN_2 * x.exp2(),
            FloatFn::Log(_) => 1.0 / x,
            FloatFn::Log2(_) => 1.0 / x / LN_2,
            FloatFn::Log10(_) => 1.0 / x / LN_10,
            FloatFn::Log1p(_) => 1.0 / (1.0 + x),
            FloatFn::Sin(_) => x.cos(),
            FloatFn::Cos(_) => -x.sin(),
            FloatFn::Tan(_) => 1.0 / x.cos().powi(2),
            FloatFn::Asin(_) => 1.0 / (1.0 - x * x).sqrt(),
            FloatFn::Acos(_) => -1.0 / (1.0 - x * x).sqrt(),
            FloatFn::Atan(_) => 1.0 / (1.0 + x * x),
            FloatFn::Sinh(_) => x.cosh(),
            FloatFn::Cosh(_) => x.sinh(),
            FloatFn::Tanh(_) => 1.0 / x.cosh().powi(2),
            FloatFn::Asinh(_) => 1.0 / x.hypot(1.0),
            // 1 / sqrt(x² - 1), torch's form (finite below -1 too)
            FloatFn::Acosh(_) => 1.0 / (x.abs() * (1.0 - 1.0 / (x * x)).sqrt()),
            FloatFn::Atanh(_) => 1.0 / (1.0 - x * x),
            FloatFn::Sigmoid(_) => sig(x) * sig(-x),
            FloatFn::Logit(_) => 1.0 / (x * (1.0 - x)),
            FloatFn::Erf(_) => FRAC_2_SQRT_PI * (-x * x).exp(),
            FloatFn::Erfc(_) => -FRAC_2_SQRT_PI * (-x * x).exp(),
            FloatFn::Frac(_) => 1.0,
            FloatFn::Softplus(_) => {
                if x > 20.0 {
                    1.0
                } else {
                    sig(x)
                }
            }
            FloatFn::Gelu(_) => {
                0.5 * Math::erfc(-x * FRAC_1_SQRT_2) + x * (-0.5 * x * x).exp() / (2.0 * PI).sqrt()
            }
            FloatFn::Silu(_) => sig(x) * (1.0 + x * sig(-x)),
            FloatFn::Pow(p) => p.p * x.powf(p.p - 1.0),
        }
    }

    /// Every float function's derivative against its textbook form over the whole range
    /// (within 1e-13 relative; NaN and infinities alike), in the forms that keep their
    /// precision where the textbook's lose it too (`tanh` and `sigmoid` near ±1, `σ(1 - σ)`
    /// at 30), without spurious overflow (`asinh` and `acosh` at 1e20 and beyond).
    #[test]
    fn derivatives_equal_their_textbook_forms() {
        for u in every_float_fn() {
            if matches!(u, FloatFn::Pow(p) if !p.p.is_finite()) {
                continue;
            }
            for x in grad_points() {
                // the branch-free form (trigonometric, pow) where it gives a number
                let fast = u.derivative_fast(x);
                let exact = u.derivative(x);
                assert!(
                    fast.is_nan() || fast == exact || (fast - exact).abs() <= 1e-13 * exact.abs(),
                    "{}'({x}): fast {fast}, exact {exact}",
                    u.name()
                );
                let (got, want) = (exact, reference_derivative(u, x));
                let ok = if want.is_finite() {
                    (got - want).abs() <= 1e-13 * want.abs()
                } else {
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan())
                };
                assert!(ok, "{}'({x}) = {got}, want {want}", u.name());
            }
        }
        // where 1 - tanh² and 1 - σ cancel: the textbook forms above are the accurate ones
        let (t, s) = (FloatFn::Tanh(Tanh), FloatFn::Sigmoid(Sigmoid));
        assert!((t.derivative(20.0) / (4.0 * (-40.0f64).exp()) - 1.0).abs() < 1e-13);
        assert!((s.derivative(30.0) / (-30.0f64).exp() - 1.0).abs() < 1e-12);
    }

    /// The gradient runs equal `g · f'(x)` element by element, rounded once (the halves
    /// through `f32`; the trigonometric functions' fast form, the std one beyond its
    /// range), 0 where masked (NaN and infinite arguments there included), for
    /// every float function and type-keeping op, on f32, f64, f16 and bf16 runs longer
    /// than two blocks, unmasked and masked, at an offset into the mask.
    #[test]
    fn gradient_runs_equal_the_scalar_derivative() {
        fn check<T: Element, U: Unary + 'static>(u: U) {
            let (mut xs, words) = run_inputs::<T>();
            // large arguments (the trigonometric recompute) among the others
            for (k, x) in xs.iter_mut().enumerate().step_by(13) {
                *x = T::from_f64_lossy(if k % 2 == 0 { 3e9 } else { -1e20 });
            }
            let n = xs.len();
            let g: Vec<T::Real> = (0..n)
                .map(|k| <T::Real as Float>::from_f64(((k as f64) * 0.37).cos() * 3.0))
                .collect();
            for (bits, off) in [
                (None, 0),
                (Some(Bits::new(&words, 0)), 0),
                (Some(Bits::new(&words, 5)), 5),
            ] {
                let m = n - off;
                let mut out = vec![<T::Real as Float>::from_f64(7.0); m];
                assert!(grad_typed(u, &xs[..m], bits, &g[..m], &mut out));
                for k in 0..m {
                    let valid = bits.is_none_or(|b| b.get(k));
                    // the branch-free form, and the exact one where that gives NaN
                    let (x, gk) = (xs[k].to_f64(), g[k].to_f64());
                    let v = gk * u.derivative_fast(x);
                    let v = if v.is_nan() { gk * u.derivative(x) } else { v };
                    let want = if !valid {
                        <T::Real as Element>::ZERO
                    } else if T::DTYPE == crate::DType::F64 {
                        <T::Real as Float>::from_f64(v)
                    } else {
                        <T::Real as Float>::from_f64(v as f32 as f64)
                    };
                    let got = out[k];
                    assert!(
                        got.to_f64().to_bits() == want.to_f64().to_bits()
                            || (got.is_nan() && want.is_nan()),
                        "{} {:?} at {k} ({:?}, valid {valid}): {got:?}, want {want:?}",
                        u.name(),
                        T::DTYPE,
                        xs[k]
                    );
                }
            }
        }
        fn each<U: Unary + 'static>(u: U) {
            check::<f32, U>(u);
            check::<f64, U>(u);
            check::<f16, U>(u);
            check::<bf16, U>(u);
        }
        for u in every_float_fn() {
            each(u);
        }
        for u in every_keep_fn() {
            each(u);
        }
        // integers have no gradient: nothing written
        let mut out = [0.0f64; 3];
        assert!(!grad_typed(
            FloatFn::Exp(Exp),
            &[1i32, 2, 3],
            None,
            &[1.0; 3],
            &mut out
        ));
    }
}
