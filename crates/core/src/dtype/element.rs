//! Value types the engine computes on, and the accumulator types their ops widen to.

use masked_kernels::multiversion;
use masked_kernels::select::SelectKey;
use serde::{de::DeserializeOwned, Serialize};
use std::fmt::Debug;

/// Declares the dtypes once: from this table follow [`DType`] (tags, names, sizes,
/// parsing), [`DynVec`] (a vector of any dtype) and the dispatch macros
/// [`with_dyn_vec!`](crate::with_dyn_vec) and [`with_dtype!`](crate::with_dtype). How
/// each type computes (its accumulators and output types) is its [`Element`] impl.
macro_rules! dtypes {
    ($d:tt $( $(#[doc = $doc:literal])* $var:ident => $t:ty, $name:literal, float: $float:tt; )*) => {
        /// Runtime tag of an [`Element`] type.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
        pub enum DType {
            $( $(#[doc = $doc])* $var, )*
        }

        impl DType {
            /// Every dtype, in declaration order.
            pub const ALL: &'static [DType] = &[$(DType::$var),*];
            /// Lower-case name (`f32`, `bf16`, ...).
            pub fn name(self) -> &'static str {
                match self { $( DType::$var => $name, )* }
            }
            /// Whether the type is a float.
            pub fn is_float(self) -> bool {
                match self { $( DType::$var => $float, )* }
            }
            /// Bytes per value.
            pub fn size(self) -> usize {
                match self { $( DType::$var => std::mem::size_of::<$t>(), )* }
            }
        }

        impl std::fmt::Display for DType {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for DType {
            type Err = crate::MaskedError;
            fn from_str(s: &str) -> crate::Result<DType> {
                match s {
                    $( $name => Ok(DType::$var), )*
                    other => Err(crate::MaskedError::InvalidArgument {
                        name: "dtype",
                        value: other.to_string(),
                        reason: concat!("expected one of:" $(, " ", $name)*),
                    }),
                }
            }
        }

        /// A vector of values of any [`Element`] type, tagged at run time (for I/O and
        /// for code that picks the dtype from a file).
        #[derive(Debug, Clone, PartialEq)]
        pub enum DynVec {
            $( $(#[doc = $doc])* $var(Vec<$t>), )*
        }

        /// The value type of each [`DType`], by the tag's name (what
        /// [`with_dtype!`](crate::with_dtype) binds).
        pub mod types {
            $( #[doc = concat!("The value type of `", $name, "`.")] pub type $var = $t; )*
        }

        impl DynVec {
            /// The tag.
            pub fn dtype(&self) -> DType {
                match self { $( DynVec::$var(_) => DType::$var, )* }
            }
        }

        /// Runs one generic expression on whichever vector a [`DynVec`] holds: `$v` is
        /// matched (by value or by reference, as given) and `$x` binds the `Vec` of each
        /// dtype in turn, so the expression is written once instead of once per dtype.
        ///
        /// ```
        /// use masked::{with_dyn_vec, DynVec, Element};
        /// let v = DynVec::I32(vec![1, 2, 3]);
        /// assert_eq!(with_dyn_vec!(&v, x => x.len()), 3);
        /// let total: f64 = with_dyn_vec!(v, x => x.iter().map(|e| e.to_f64()).sum());
        /// assert_eq!(total, 6.0);
        /// ```
        #[macro_export]
        macro_rules! with_dyn_vec {
            ($d v:expr, $d x:ident => $d body:expr) => {
                match $d v {
                    $( $d crate::DynVec::$var($d x) => $d body, )*
                }
            };
        }

        /// One container of a [`Family`] for whichever dtype: the typed value behind a
        /// dtype-erased handle (the engine crate's arrays are `ByDType` of a layout's
        /// container). Dispatch on it with [`with_by_dtype!`](crate::with_by_dtype).
        pub enum ByDType<F: Family> {
            $( $(#[doc = $doc])* $var(F::Of<$t>), )*
        }

        impl<F: Family> ByDType<F> {
            /// The tag.
            pub fn dtype(&self) -> DType {
                match self { $( ByDType::$var(_) => DType::$var, )* }
            }
            /// The container by reference, in the same dtype.
            pub fn as_ref(&self) -> ByDType<Ref<'_, F>> {
                match self { $( ByDType::$var(x) => ByDType::$var(x), )* }
            }
            /// Each dtype's container turned into `G`'s by `f`, keeping the dtype.
            ///
            /// # Errors
            /// `f`'s.
            pub fn try_map<G: Family, M: FamilyMap<F, G>>(self, f: &M) -> crate::Result<ByDType<G>> {
                Ok(match self { $( ByDType::$var(x) => ByDType::$var(f.map(x)?), )* })
            }
        }

        /// Puts a typed container into the [`ByDType`] of its element type: how typed
        /// code hands a value to the dtype-erased boundary (a supertrait of [`Element`]).
        pub trait Erase: Sized + 'static {
            /// `x` tagged with this type's dtype.
            fn erase<F: Family>(x: F::Of<Self>) -> ByDType<F>
            where
                Self: Element;
            /// The container of `x` if it holds this type's.
            fn unerase<F: Family>(x: &ByDType<F>) -> Option<&F::Of<Self>>
            where
                Self: Element;
            /// The container of `x`, mutably, if it holds this type's.
            fn unerase_mut<F: Family>(x: &mut ByDType<F>) -> Option<&mut F::Of<Self>>
            where
                Self: Element;
            /// The container of `x`, taken, if it holds this type's.
            fn unerase_owned<F: Family>(x: ByDType<F>) -> Option<F::Of<Self>>
            where
                Self: Element;
        }

        $( impl Erase for $t {
            fn erase<F: Family>(x: F::Of<$t>) -> ByDType<F> {
                ByDType::$var(x)
            }
            fn unerase<F: Family>(x: &ByDType<F>) -> Option<&F::Of<$t>> {
                match x {
                    ByDType::$var(v) => Some(v),
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
            fn unerase_mut<F: Family>(x: &mut ByDType<F>) -> Option<&mut F::Of<$t>> {
                match x {
                    ByDType::$var(v) => Some(v),
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
            fn unerase_owned<F: Family>(x: ByDType<F>) -> Option<F::Of<$t>> {
                match x {
                    ByDType::$var(v) => Some(v),
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
        } )*

        impl DynVec {
            /// The vector borrowed as a [`ByDType`] (for [`Erase::unerase`]: the values
            /// as `&Vec<T>` when they are of type `T`).
            pub fn as_by_dtype(&self) -> ByDType<Ref<'_, VecOf>> {
                match self { $( DynVec::$var(x) => ByDType::$var(x), )* }
            }

            /// The values borrowed as a run of their dtype (what the engine's by-values
            /// forms read).
            pub fn as_slices(&self) -> ByDType<SliceOf<'_>> {
                match self { $( DynVec::$var(x) => ByDType::$var(&x[..]), )* }
            }

            /// The values as a caller's output buffer of their dtype (what the `_into`
            /// forms write into).
            pub fn as_out(&mut self) -> ByDType<SliceMutOf<'_>> {
                match self { $( DynVec::$var(x) => ByDType::$var(&mut x[..]), )* }
            }
        }

        impl From<DynVec> for ByDType<VecOf> {
            fn from(v: DynVec) -> Self {
                match v { $( DynVec::$var(x) => ByDType::$var(x), )* }
            }
        }

        impl From<ByDType<VecOf>> for DynVec {
            fn from(v: ByDType<VecOf>) -> Self {
                match v { $( ByDType::$var(x) => DynVec::$var(x), )* }
            }
        }

        /// Runs one generic expression on whichever container a [`ByDType`] holds:
        /// `$x` binds the container of each dtype in turn and `$T` names its element
        /// type, so the expression is written once instead of once per dtype.
        ///
        /// `with_by_dtype!(v, T, x => body; floats_only else other)` compiles `body`
        /// for the float dtypes only and evaluates `other` for the rest (gradients:
        /// no integer instantiation is compiled).
        #[macro_export]
        macro_rules! with_by_dtype {
            ($d v:expr, $d T:ident, $d x:ident => $d body:expr) => {
                match $d v {
                    $( $d crate::element::ByDType::$var($d x) => {
                        #[allow(unused)]
                        type $d T = $d crate::element::types::$var;
                        $d body
                    } )*
                }
            };
            ($d v:expr, $d T:ident, $d x:ident => $d body:expr; floats_only else $d other:expr) => {
                match $d v {
                    $( $d crate::element::ByDType::$var($d x) => {
                        let _ = &$d x;
                        $d crate::__if_float!($float, {
                            #[allow(unused)]
                            type $d T = $d crate::element::types::$var;
                            $d body
                        }, $d other)
                    } )*
                }
            };
        }

        /// Runs one generic expression once for every dtype of the table, with the type
        /// parameter `$T` bound to each [`Element`] type in turn (tests that cover
        /// every dtype, so a new one is covered without a list to extend).
        #[cfg(test)]
        macro_rules! each_dtype {
            ($d T:ident => $d body:expr) => {
                $( { type $d T = $crate::element::types::$var; $d body; } )*
            };
        }
        #[cfg(test)]
        pub(crate) use each_dtype;

        /// Runs one generic expression with the type parameter `$T` bound to the
        /// [`Element`] type of a [`DType`] (a dtype chosen at run time, e.g. by a flag).
        ///
        /// ```
        /// use masked::{with_dtype, DType, Element};
        /// fn zero<T: Element>() -> f64 { T::ZERO.to_f64() }
        /// assert_eq!(with_dtype!(DType::F16, T => zero::<T>()), 0.0);
        /// ```
        #[macro_export]
        macro_rules! with_dtype {
            ($d dt:expr, $d T:ident => $d body:expr) => {
                match $d dt {
                    $( $d crate::DType::$var => { type $d T = $d crate::element::types::$var; $d body } )*
                }
            };
        }
    };
}

/// A family of containers indexed by the element type: `Of<T>` is the family's
/// container of `T` values ([`ByDType`] holds one for whichever dtype).
pub trait Family {
    /// The container of `T` values.
    type Of<T: Element>;
}

/// The family of `&'a F::Of<T>`: a [`ByDType`] borrowed ([`ByDType::as_ref`]).
pub struct Ref<'a, F>(std::marker::PhantomData<&'a F>);

impl<'a, F: Family> Family for Ref<'a, F>
where
    F: 'a,
{
    type Of<T: Element> = &'a F::Of<T>;
}

/// The family of `Vec<T>`: `ByDType<VecOf>` is a [`DynVec`] (`From` both ways).
pub struct VecOf;

impl Family for VecOf {
    type Of<T: Element> = Vec<T>;
}

/// The family of `&'a [T]`: a run of values of any dtype (how a generic kernel reaches
/// the one compiled for its compute type).
pub struct SliceOf<'a>(std::marker::PhantomData<&'a ()>);

impl<'a> Family for SliceOf<'a> {
    type Of<T: Element> = &'a [T];
}

/// The family of `&'a mut [T]`: a caller's output buffer of any dtype (the `_into` forms
/// write into one).
pub struct SliceMutOf<'a>(std::marker::PhantomData<&'a mut ()>);

impl<'a> Family for SliceMutOf<'a> {
    type Of<T: Element> = &'a mut [T];
}

/// A function from one family's container to another's, for every element type
/// ([`ByDType::try_map`]).
pub trait FamilyMap<F: Family, G: Family> {
    /// The container of `T` values turned into `G`'s.
    ///
    /// # Errors
    /// As the function decides (a bad shape, a bad index).
    fn map<T: Element>(&self, x: F::Of<T>) -> crate::Result<G::Of<T>>;
}

/// Picks the first expression for a float dtype and the second otherwise
/// ([`with_by_dtype!`](crate::with_by_dtype)'s `floats_only` form).
#[doc(hidden)]
#[macro_export]
macro_rules! __if_float {
    (true, $a:expr, $b:expr) => {
        $a
    };
    (false, $a:expr, $b:expr) => {
        $b
    };
}

dtypes! { $
    /// 32-bit float.
    F32 => f32, "f32", float: true;
    /// 64-bit float.
    F64 => f64, "f64", float: true;
    /// IEEE half precision (`half::f16`): stored as halves, computed in f32.
    F16 => half::f16, "f16", float: true;
    /// bfloat16 (`half::bf16`): stored as halves, computed in f32.
    BF16 => half::bf16, "bf16", float: true;
    /// 32-bit signed integer.
    I32 => i32, "i32", float: false;
    /// 64-bit signed integer.
    I64 => i64, "i64", float: false;
}

impl DynVec {
    /// Number of values.
    pub fn len(&self) -> usize {
        with_dyn_vec!(self, v => v.len())
    }
    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An accumulator number: the lane and total types of sums and products
/// (`f32`, `f64`, `i64`). Integer arithmetic wraps (two's complement) and never panics.
pub trait Acc:
    Copy
    + Send
    + Sync
    + Debug
    + PartialEq
    + Default
    + Serialize
    + DeserializeOwned
    + crate::wire::WireNum
    + 'static
{
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// Addition (wrapping for integers).
    fn add(self, o: Self) -> Self;
    /// Multiplication (wrapping for integers).
    fn mul(self, o: Self) -> Self;
    /// Subtraction (wrapping for integers).
    fn sub(self, o: Self) -> Self;
    /// Conversion to f64 (exact for floats; rounding for large i64).
    fn as_f64(self) -> f64;
}

/// [`Acc`] for `$t`, its sum, product and difference of `$a` and `$b` as given (plain
/// for floats, wrapping for integers).
macro_rules! acc {
    ($t:ty, $zero:expr, $one:expr, |$a:ident, $b:ident| $add:expr, $mul:expr, $sub:expr) => {
        impl Acc for $t {
            const ZERO: Self = $zero;
            const ONE: Self = $one;
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                let ($a, $b) = (self, o);
                $add
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                let ($a, $b) = (self, o);
                $mul
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                let ($a, $b) = (self, o);
                $sub
            }
            #[inline(always)]
            fn as_f64(self) -> f64 {
                self as f64
            }
        }
    };
}
acc!(f32, 0.0, 1.0, |a, b| a + b, a * b, a - b);
acc!(f64, 0.0, 1.0, |a, b| a + b, a * b, a - b);
acc!(
    i128,
    0,
    1,
    |a, b| a.wrapping_add(b),
    a.wrapping_mul(b),
    a.wrapping_sub(b)
);
acc!(
    i64,
    0,
    1,
    |a, b| a.wrapping_add(b),
    a.wrapping_mul(b),
    a.wrapping_sub(b)
);

/// A value type the engine reduces: `f32`, `f64`, `i32` or `i64`.
///
/// The associated types say how each op widens its input (semantics.md):
/// sums and products of integers accumulate and return `i64`; means, variances, medians
/// and other statistics of integers are computed and returned as `f64`, of `f32` as `f32`
/// (accumulated in `f64` internally).
pub trait Element:
    Copy
    + Send
    + Sync
    + Debug
    + PartialOrd
    + PartialEq
    + Default
    + Serialize
    + DeserializeOwned
    + crate::wire::WireNum
    + Erase
    + masked_kernels::ZeroBits
    + 'static
{
    /// Runtime tag.
    const DTYPE: DType;
    /// Whether the layouts compile their kernels for this dtype in their own crates
    /// (`f32` and `f64`: the core's `compiled` module), so a dependent links them rather
    /// than instantiating the generic kernels (see [`Fold::PREBUILT`](crate::Fold::PREBUILT)).
    #[doc(hidden)]
    const PREBUILT: bool = false;
    /// Whether the extremum kernels compare this type's values widened to its compute
    /// type (`f32`): the halves, whose own comparisons are software, one value at a
    /// time, where `f32` compares vectorise.
    const COMPARES_WIDENED: bool = false;
    /// Lowest value: `-inf` for floats, `MIN` for integers (identity of amax).
    const LOWEST: Self;
    /// Highest value: `+inf` for floats, `MAX` for integers (identity of amin).
    const HIGHEST: Self;
    /// Zero of the type.
    const ZERO: Self;
    /// Accumulator inside one vector block of a sum: `f32` for `f32`, `f64` for `f64`,
    /// `i64` for integers.
    type Lane: Acc;
    /// Accumulator across blocks (the mergeable sum/prod state): `f64` for floats,
    /// `i64` for integers.
    type Total: Acc;
    /// Accumulator inside one vector block of an exact mean: like `Lane`, but `i128` for
    /// `i64` so that integer means never wrap.
    type MeanLane: Acc;
    /// Mergeable total of a mean: `f64` for floats, `i64` for `i32`, `i128` for `i64`.
    type MeanTotal: Acc;
    /// Into a mean block accumulator.
    fn to_mean_lane(self) -> Self::MeanLane;
    /// Mean block accumulator into the mean total.
    fn mean_lane_to_total(l: Self::MeanLane) -> Self::MeanTotal;
    /// Output type of sum/prod/cumsum of this input: the input float type, or `i64`.
    type Wide: Element;
    /// Output type of mean/var/std/median/...: `f32` for `f32`, `f64` otherwise.
    type Real: Float;
    /// Into a vector-block accumulator.
    fn to_lane(self) -> Self::Lane;
    /// Block accumulator into the total.
    fn lane_to_total(l: Self::Lane) -> Self::Total;
    /// Into the total type directly.
    fn to_total(self) -> Self::Total;
    /// Total back into this type (rounding for f32, wrapping for integers): cumsum.
    fn from_total(t: Self::Total) -> Self;
    /// Total into the output type of sum/prod.
    fn total_to_wide(t: Self::Total) -> Self::Wide;
    /// Into f64 (exact for f32, f64 and i32).
    fn to_f64(self) -> f64;
    /// From f64: rounding to nearest for floats, truncating and saturating for integers
    /// (NaN gives 0), as Rust's `as` casts.
    fn from_f64_lossy(v: f64) -> Self;
    /// Whether this is a NaN (always false for integers).
    fn is_nan(self) -> bool;
    /// The largest finite value, as f64 (`nan_to_num`'s default for +inf).
    const MAX_FINITE: f64;
    /// A type-keeping elementwise function ([`crate::unary`]): floats through their
    /// compute type, rounded once back; integers through `i64`, wrapping back.
    fn map_keep(
        self, float: impl Fn(CalcOf<Self>) -> CalcOf<Self>, int: impl Fn(i64) -> i64,
    ) -> Self;
    /// A type-keeping binary function ([`crate::binary`]), as [`Element::map_keep`].
    fn zip_keep(
        self, other: Self, float: impl Fn(CalcOf<Self>, CalcOf<Self>) -> CalcOf<Self>,
        int: impl Fn(i64, i64) -> i64,
    ) -> Self;
    /// This value as a cast source: integers exactly, floats as `f64` (exact for every
    /// float dtype).
    fn to_scalar(self) -> Scalar;
    /// The value of this type for `s` ([`cast`](crate::MaskedOps::cast)): floats round to
    /// nearest (an `i64` beyond 2^53 first rounds to `f64`), integers take a float's value
    /// truncated toward zero; `None` where this type cannot hold it (NaN, an infinity or an
    /// out-of-range value for an integer type).
    fn from_scalar(s: Scalar) -> Option<Self>;
    /// Into the statistics type (`f32` stays `f32`, others become `f64`).
    fn to_real(self) -> Self::Real;
    /// An unsigned integer key of the same width with the same order as the (non-NaN)
    /// values, for fast selection (`masked_kernels::select`).
    type Key: SelectKey;
    /// The order key of a value (not NaN).
    fn key(self) -> Self::Key;
    /// The value of an order key.
    fn from_key(k: Self::Key) -> Self;
    /// Wraps a vector of this type into a [`DynVec`].
    fn into_dyn(v: Vec<Self>) -> DynVec;
    /// The type the sum and mean kernels read a block of these values as: `Self` for
    /// every type but the halves, which widen a block at a time to `f32` (one `vcvtph2ps`
    /// per 16 values where the CPU has it) and then run the `f32` kernels. Both types
    /// accumulate alike, so the results are the same bit for bit.
    type Unpacked: Element<
        Lane = Self::Lane,
        Total = Self::Total,
        MeanLane = Self::MeanLane,
        MeanTotal = Self::MeanTotal,
    >;
    /// `xs` as [`Element::Unpacked`] values without a copy, where the two types are the
    /// same (every type but the halves).
    fn as_unpacked(xs: &[Self]) -> Option<&[Self::Unpacked]>;
    /// Widens `xs` into `out` (same length, possibly uninitialised), exactly, and
    /// returns it initialised; only called where [`Element::as_unpacked`] gives `None`.
    fn unpack<'o>(
        xs: &[Self], out: &'o mut [std::mem::MaybeUninit<Self::Unpacked>],
    ) -> &'o [Self::Unpacked];
    /// Absolute value as f64.
    #[inline(always)]
    fn abs_f64(self) -> f64 {
        self.to_f64().abs()
    }
    /// Into the compute type of the statistics type ([`Float::Calc`]): `f32` for `f32`
    /// and the half types, `f64` otherwise.
    #[inline(always)]
    fn calc(self) -> CalcOf<Self> {
        Float::to_calc(self.to_real())
    }
}

/// A value of any dtype, as a cast goes through it: integers exactly, floats as `f64`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// An integer value.
    Int(i64),
    /// A float value.
    Float(f64),
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x}"),
        }
    }
}

/// The compute type of the statistics of `T` ([`Float::Calc`] of [`Element::Real`]).
pub type CalcOf<T> = <<T as Element>::Real as Float>::Calc;

/// Runs `f` on a slice of the compute type standing for `out`: `out` itself when the
/// output type is its own compute type (`f32`, `f64`: no copy), else a scratch lane whose
/// values are then rounded once into `out` (the half types).
#[inline]
pub fn with_calc_out<R: Float>(out: &mut [R], f: impl FnOnce(&mut [R::Calc])) {
    if std::any::TypeId::of::<R>() == std::any::TypeId::of::<R::Calc>() {
        // SAFETY: `R` and `R::Calc` are the same type (equal type ids).
        let same = unsafe {
            std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<R::Calc>(), out.len())
        };
        f(same);
    } else {
        let round = |scratch: &[R::Calc], out: &mut [R]| {
            for (o, &c) in out.iter_mut().zip(scratch) {
                *o = R::from_calc(c);
            }
        };
        // a scratch lane per thread, reused across lanes (one allocation per thread, not
        // per lane); `f32` and `f64` hold any bit pattern, so old contents are harmless
        // (lanes up to 8 MiB of scratch; a longer lane allocates its own and frees it)
        let plain =
            matches!(<R::Calc as Element>::DTYPE, DType::F32 | DType::F64) && out.len() <= 1 << 20;
        let mut f = Some(f);
        let reused = plain
            && SCRATCH.with(|cell| {
                let Ok(mut words) = cell.try_borrow_mut() else {
                    return false; // re-entered: fall back to a fresh lane
                };
                let n = (out.len() * std::mem::size_of::<R::Calc>()).div_ceil(8);
                if words.len() < n {
                    words.resize(n, 0);
                }
                // SAFETY: `R::Calc` is `f32` or `f64` (checked above): 4 or 8 bytes, align at
                // most 8 = the words' align, every bit pattern valid; the words hold at least
                // `out.len()` of them and are borrowed exclusively here.
                let lane = unsafe {
                    std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<R::Calc>(), out.len())
                };
                if let Some(f) = f.take() {
                    f(lane);
                }
                round(lane, out);
                true
            });
        if let (false, Some(f)) = (reused, f) {
            let mut scratch = vec![<R::Calc as Element>::ZERO; out.len()];
            f(&mut scratch);
            round(&scratch, out);
        }
    }
}

thread_local! {
    /// The reused scratch lane of [`with_calc_out`], as 8-byte words.
    static SCRATCH: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A float output type (`f32`, `f64`, `f16`, `bf16`).
pub trait Float:
    Element
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
{
    /// One.
    const ONE: Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
    /// `self` to the power `p`.
    fn powf(self, p: Self) -> Self;
    /// `e^self` for `self <= 0` (and NaN for NaN), branch-free so that loops over it
    /// vectorise: a Cody-Waite reduction and a Taylor polynomial, within a few ulps of
    /// `exp`; results below the smallest normal flush to 0 and `exp(-inf) == 0`. A
    /// positive argument is treated as 0 (the callers shift by the maximum).
    fn exp_nonpos(self) -> Self;
    /// [`exp_nonpos`](Float::exp_nonpos) with fused multiply-adds (9 fewer operations
    /// per f32 element, 15 per f64): a single instruction each where the caller is
    /// compiled with FMA (the core's AVX2 / AVX-512 kernels; any aarch64), a library
    /// call each elsewhere. Callers pick it only in kernels that have FMA; the results
    /// may differ from `exp_nonpos` in the last bit.
    fn exp_nonpos_fused(self) -> Self;
    /// Not-a-number.
    const NAN: Self;
    /// Positive infinity.
    const INFINITY: Self;
    /// Negative infinity.
    const NEG_INFINITY: Self;
    /// Conversion from f64 (rounding to nearest for f32).
    fn from_f64(v: f64) -> Self;
    /// The type this float computes in: itself for `f32` and `f64`, `f32` for the half
    /// types (accumulators, `exp`, scratch lanes), so a half result is rounded once.
    type Calc: Float + crate::math::Math;
    /// Into the compute type (exact).
    fn to_calc(self) -> Self::Calc;
    /// From the compute type, rounding to nearest.
    fn from_calc(c: Self::Calc) -> Self;
    /// [`Float::from_calc`] of each of `src` into `dst` (the common length): a vector
    /// loop, or (`f16`) the CPU's conversion instruction where it has one.
    fn from_calc_block(src: &[Self::Calc], dst: &mut [Self]) {
        masked_kernels::run::map_run(
            src,
            None,
            dst,
            #[inline(always)]
            |c: Self::Calc, _| Self::from_calc(c),
        );
    }
}

use crate::math::{exp_parts_f32, exp_parts_f64, EXP_F32_DEG6, EXP_F64_DEG12};

/// `e^x` for `x <= 0` in f32 (see [`Float::exp_nonpos`]), with fused multiply-adds when
/// `FUSED`.
#[inline(always)]
fn exp_nonpos_f32<const FUSED: bool>(x: f32) -> f32 {
    let xc = if x < -87.0 { -87.0 } else { x };
    let xc = if xc > 0.0 { 0.0 } else { xc };
    let (p, ni) = exp_parts_f32::<FUSED>(xc, &EXP_F32_DEG6);
    let y = p * f32::from_bits((ni as u32).wrapping_add(127) << 23);
    // NaN propagates through the arithmetic above; -inf and tiny results flush to 0
    if x < -87.0 {
        0.0
    } else {
        y
    }
}

/// `e^x` for `x <= 0` in f64 (see [`Float::exp_nonpos`]), with fused multiply-adds when
/// `FUSED`.
#[inline(always)]
fn exp_nonpos_f64<const FUSED: bool>(x: f64) -> f64 {
    let xc = if x < -708.0 { -708.0 } else { x };
    let xc = if xc > 0.0 { 0.0 } else { xc };
    let (p, ni) = exp_parts_f64::<FUSED>(xc, EXP_F64_DEG12);
    let y = p * f64::from_bits((ni as u64).wrapping_add(1023) << 52);
    if x < -708.0 {
        0.0
    } else {
        y
    }
}

/// `Element::Unpacked = Self`: the type's own slice, never copied.
macro_rules! unpack_self {
    () => {
        type Unpacked = Self;
        #[inline(always)]
        fn as_unpacked(xs: &[Self]) -> Option<&[Self]> {
            Some(xs)
        }
        fn unpack<'o>(xs: &[Self], out: &'o mut [std::mem::MaybeUninit<Self>]) -> &'o [Self] {
            for (o, &x) in out.iter_mut().zip(xs) {
                o.write(x);
            }
            // SAFETY: every element written above (equal lengths by contract)
            unsafe { &*(out as *const [std::mem::MaybeUninit<Self>] as *const [Self]) }
        }
    };
}

macro_rules! element_float {
    ($t:ty, $dt:expr, $lane:ty, $var:ident, $exp:ident, $ln:path, $key:ty) => {
        impl Element for $t {
            const DTYPE: DType = $dt;
            const PREBUILT: bool = true;
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            const ZERO: Self = 0.0;
            type Lane = $lane;
            type Total = f64;
            type Wide = $t;
            type Real = $t;
            type MeanLane = $lane;
            type MeanTotal = f64;
            #[inline(always)]
            fn to_mean_lane(self) -> $lane {
                self as $lane
            }
            #[inline(always)]
            fn mean_lane_to_total(l: $lane) -> f64 {
                l as f64
            }
            #[inline(always)]
            fn to_lane(self) -> $lane {
                self as $lane
            }
            #[inline(always)]
            fn lane_to_total(l: $lane) -> f64 {
                l as f64
            }
            #[inline(always)]
            fn to_total(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn total_to_wide(t: f64) -> $t {
                t as $t
            }
            #[inline(always)]
            fn from_total(t: f64) -> $t {
                t as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_f64_lossy(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            const MAX_FINITE: f64 = <$t>::MAX as f64;
            #[inline(always)]
            fn map_keep(
                self, float: impl Fn(CalcOf<Self>) -> CalcOf<Self>, _: impl Fn(i64) -> i64,
            ) -> Self {
                float(self)
            }
            #[inline(always)]
            fn zip_keep(
                self, other: Self, float: impl Fn(CalcOf<Self>, CalcOf<Self>) -> CalcOf<Self>,
                _: impl Fn(i64, i64) -> i64,
            ) -> Self {
                float(self, other)
            }
            #[inline(always)]
            fn to_scalar(self) -> Scalar {
                Scalar::Float(self as f64)
            }
            #[inline(always)]
            fn from_scalar(s: Scalar) -> Option<Self> {
                Some(match s {
                    Scalar::Int(i) => i as $t,
                    Scalar::Float(f) => f as $t,
                })
            }
            fn into_dyn(v: Vec<Self>) -> DynVec {
                DynVec::$var(v)
            }
            unpack_self!();
            #[inline(always)]
            fn to_real(self) -> Self::Real {
                self as Self::Real
            }
            type Key = $key;
            /// IEEE bits with the sign flipped (positives) or all bits flipped
            /// (negatives): unsigned order equals numeric order; -0.0 sorts before 0.0.
            #[inline(always)]
            fn key(self) -> $key {
                let b = self.to_bits();
                // all ones for a negative value, else zero: branch-free, so it vectorises
                let neg = (0 as $key).wrapping_sub(b >> (<$key>::BITS - 1));
                b ^ (neg | (1 << (<$key>::BITS - 1)))
            }
            #[inline(always)]
            fn from_key(k: $key) -> Self {
                let b = if k >> (<$key>::BITS - 1) == 1 {
                    k & !(1 << (<$key>::BITS - 1))
                } else {
                    !k
                };
                <$t>::from_bits(b)
            }
        }
        impl Float for $t {
            const ONE: Self = 1.0;
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                $ln(self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn powf(self, p: Self) -> Self {
                <$t>::powf(self, p)
            }
            #[inline(always)]
            fn exp_nonpos(self) -> Self {
                $exp::<false>(self)
            }
            #[inline(always)]
            fn exp_nonpos_fused(self) -> Self {
                $exp::<true>(self)
            }
            const NAN: Self = <$t>::NAN;
            const INFINITY: Self = <$t>::INFINITY;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            type Calc = $t;
            #[inline(always)]
            fn to_calc(self) -> $t {
                self
            }
            #[inline(always)]
            fn from_calc(c: $t) -> $t {
                c
            }
        }
    };
}
element_float!(
    f32,
    DType::F32,
    f32,
    F32,
    exp_nonpos_f32,
    crate::math::ln_f32,
    u32
);
element_float!(
    f64,
    DType::F64,
    f64,
    F64,
    exp_nonpos_f64,
    crate::math::ln_f64,
    u64
);

pub use masked_kernels::widen::{
    bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits, f64_to_bf16_bits,
    f64_to_f16_bits,
};

macro_rules! element_half {
    // f16 unpacks a block at a time with the CPU's conversion instruction; bf16 widens
    // by a shift, which the vector kernels do as cheaply inline (measured: a separate
    // widening pass made bf16 sums 30% slower), so it reads itself
    (@unpack $widen:path) => {
        type Unpacked = f32;
        #[inline(always)]
        fn as_unpacked(_: &[Self]) -> Option<&[f32]> {
            None
        }
        fn unpack<'o>(xs: &[Self], out: &'o mut [std::mem::MaybeUninit<f32>]) -> &'o [f32] {
            use half::slice::HalfFloatSliceExt;
            $widen(xs.reinterpret_cast(), out)
        }
    };
    (@unpack) => {
        unpack_self!();
    };
    // f16 rounds a block at a time with the CPU's instruction, too
    (@narrow $widen:path) => {
        fn from_calc_block(src: &[f32], dst: &mut [Self]) {
            use half::slice::HalfFloatSliceExt;
            let n = src.len().min(dst.len());
            masked_kernels::widen::narrow_f16(&src[..n], dst[..n].reinterpret_cast_mut());
        }
    };
    (@narrow) => {};
    ($t:ty, $dt:expr, $var:ident, $to32:ident, $from32:ident, $from64:ident $(, $widen:path)?) => {
        impl Element for $t {
            const DTYPE: DType = $dt;
            const COMPARES_WIDENED: bool = true;
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            const ZERO: Self = <$t>::ZERO;
            type Lane = f32;
            type Total = f64;
            type Wide = $t;
            type Real = $t;
            type MeanLane = f32;
            type MeanTotal = f64;
            #[inline(always)]
            fn to_mean_lane(self) -> f32 {
                $to32(self.to_bits())
            }
            #[inline(always)]
            fn mean_lane_to_total(l: f32) -> f64 {
                l as f64
            }
            #[inline(always)]
            fn to_lane(self) -> f32 {
                $to32(self.to_bits())
            }
            #[inline(always)]
            fn lane_to_total(l: f32) -> f64 {
                l as f64
            }
            #[inline(always)]
            fn to_total(self) -> f64 {
                // not `self.to_f64()`: half's inherent method (which checks the CPU on
                // every call) would be picked over the trait's
                $to32(self.to_bits()) as f64
            }
            #[inline(always)]
            fn total_to_wide(t: f64) -> $t {
                <$t>::from_bits($from64(t))
            }
            #[inline(always)]
            fn from_total(t: f64) -> $t {
                <$t>::from_bits($from64(t))
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                $to32(self.to_bits()) as f64
            }
            #[inline(always)]
            fn from_f64_lossy(v: f64) -> Self {
                <$t>::from_bits($from64(v))
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            const MAX_FINITE: f64 = <$t>::MAX.to_f64_const();
            #[inline(always)]
            fn map_keep(
                self,
                float: impl Fn(CalcOf<Self>) -> CalcOf<Self>,
                _: impl Fn(i64) -> i64,
            ) -> Self {
                <$t>::from_bits($from32(float($to32(self.to_bits()))))
            }
            #[inline(always)]
            fn zip_keep(
                self,
                other: Self,
                float: impl Fn(CalcOf<Self>, CalcOf<Self>) -> CalcOf<Self>,
                _: impl Fn(i64, i64) -> i64,
            ) -> Self {
                <$t>::from_bits($from32(float($to32(self.to_bits()), $to32(other.to_bits()))))
            }
            #[inline(always)]
            fn to_scalar(self) -> Scalar {
                Scalar::Float($to32(self.to_bits()) as f64)
            }
            #[inline(always)]
            fn from_scalar(s: Scalar) -> Option<Self> {
                Some(match s {
                    Scalar::Int(i) => <$t>::from_bits($from64(i as f64)),
                    Scalar::Float(f) => <$t>::from_bits($from64(f)),
                })
            }
            fn into_dyn(v: Vec<Self>) -> DynVec {
                DynVec::$var(v)
            }
            element_half!(@unpack $($widen)?);
            #[inline(always)]
            fn to_real(self) -> $t {
                self
            }
            type Key = u16;
            /// The bits with the sign flipped (positives) or all bits flipped
            /// (negatives), as for the wider floats.
            #[inline(always)]
            fn key(self) -> u16 {
                let b = self.to_bits();
                let neg = 0u16.wrapping_sub(b >> 15);
                b ^ (neg | 0x8000)
            }
            #[inline(always)]
            fn from_key(k: u16) -> Self {
                let b = if k >> 15 == 1 { k & 0x7fff } else { !k };
                <$t>::from_bits(b)
            }
        }
        impl Float for $t {
            const ONE: Self = <$t>::ONE;
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::from_bits($from32($to32(self.to_bits()).sqrt()))
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::from_bits($from32($to32(self.to_bits()).ln()))
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::from_bits(self.to_bits() & 0x7fff)
            }
            #[inline(always)]
            fn powf(self, p: Self) -> Self {
                <$t>::from_bits($from32($to32(self.to_bits()).powf($to32(p.to_bits()))))
            }
            #[inline(always)]
            fn exp_nonpos(self) -> Self {
                <$t>::from_bits($from32(exp_nonpos_f32::<false>($to32(self.to_bits()))))
            }
            #[inline(always)]
            fn exp_nonpos_fused(self) -> Self {
                <$t>::from_bits($from32(exp_nonpos_f32::<true>($to32(self.to_bits()))))
            }
            const NAN: Self = <$t>::NAN;
            const INFINITY: Self = <$t>::INFINITY;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                <$t>::from_bits($from64(v))
            }
            type Calc = f32;
            #[inline(always)]
            fn to_calc(self) -> f32 {
                $to32(self.to_bits())
            }
            #[inline(always)]
            fn from_calc(c: f32) -> $t {
                // branch-free (half's own conversion checks the CPU on every call, which
                // kept every map writing halves scalar)
                <$t>::from_bits($from32(c))
            }
            element_half!(@narrow $($widen)?);
        }
    };
}
element_half!(
    half::f16,
    DType::F16,
    F16,
    f16_bits_to_f32,
    f32_to_f16_bits,
    f64_to_f16_bits,
    masked_kernels::widen::widen_f16
);
element_half!(
    half::bf16,
    DType::BF16,
    BF16,
    bf16_bits_to_f32,
    f32_to_bf16_bits,
    f64_to_bf16_bits
);

macro_rules! element_int {
    ($t:ty, $dt:expr, $var:ident, $mean:ty, $key:ty) => {
        impl Element for $t {
            const DTYPE: DType = $dt;
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            const ZERO: Self = 0;
            type Lane = i64;
            type Total = i64;
            type Wide = i64;
            type Real = f64;
            type MeanLane = $mean;
            type MeanTotal = $mean;
            #[inline(always)]
            fn to_mean_lane(self) -> $mean {
                self as $mean
            }
            #[inline(always)]
            fn mean_lane_to_total(l: $mean) -> $mean {
                l
            }
            #[inline(always)]
            fn to_lane(self) -> i64 {
                self as i64
            }
            #[inline(always)]
            fn lane_to_total(l: i64) -> i64 {
                l
            }
            #[inline(always)]
            fn to_total(self) -> i64 {
                self as i64
            }
            #[inline(always)]
            fn total_to_wide(t: i64) -> i64 {
                t
            }
            #[inline(always)]
            fn from_total(t: i64) -> $t {
                t as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_f64_lossy(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                false
            }
            const MAX_FINITE: f64 = <$t>::MAX as f64;
            #[inline(always)]
            fn map_keep(
                self, _: impl Fn(CalcOf<Self>) -> CalcOf<Self>, int: impl Fn(i64) -> i64,
            ) -> Self {
                int(self as i64) as $t
            }
            #[inline(always)]
            fn zip_keep(
                self, other: Self, _: impl Fn(CalcOf<Self>, CalcOf<Self>) -> CalcOf<Self>,
                int: impl Fn(i64, i64) -> i64,
            ) -> Self {
                int(self as i64, other as i64) as $t
            }
            #[inline(always)]
            fn to_scalar(self) -> Scalar {
                Scalar::Int(self as i64)
            }
            #[inline(always)]
            fn from_scalar(s: Scalar) -> Option<Self> {
                match s {
                    Scalar::Int(i) => <$t>::try_from(i).ok(),
                    // MIN = -2^(bits-1) is exact in f64 and the range is [MIN, -MIN);
                    // NaN fails the test
                    Scalar::Float(f) => {
                        let (t, lo) = (f.trunc(), <$t>::MIN as f64);
                        (t >= lo && t < -lo).then(|| t as $t)
                    }
                }
            }
            fn into_dyn(v: Vec<Self>) -> DynVec {
                DynVec::$var(v)
            }
            unpack_self!();
            #[inline(always)]
            fn to_real(self) -> f64 {
                self as f64
            }
            type Key = $key;
            /// The bits with the sign bit flipped: unsigned order equals signed order.
            #[inline(always)]
            fn key(self) -> $key {
                (self as $key) ^ (1 << (<$key>::BITS - 1))
            }
            #[inline(always)]
            fn from_key(k: $key) -> Self {
                (k ^ (1 << (<$key>::BITS - 1))) as $t
            }
        }
    };
}
element_int!(i32, DType::I32, I32, i64, u32);
element_int!(i64, DType::I64, I64, i128, u64);

multiversion! {
/// Turns the values of `v` into their order keys ([`Element::key`]) in place and gives
/// the slice as keys, or `None` when some value is NaN (`v` is then unspecified): one
/// vector pass, no buffer.
///
/// ```
/// use masked::element::keys_in_place;
/// let mut v = [2.5f32, -1.0, 0.0];
/// let keys = keys_in_place(&mut v).unwrap();
/// assert!(keys[1] < keys[2] && keys[2] < keys[0]);
/// assert!(keys_in_place(&mut [1.0f64, f64::NAN]).is_none());
/// ```
    pub fn keys_in_place[T: Element](v: &mut [T]) -> Option<&mut [T::Key]> = keys_kernel;
}

#[inline(always)]
fn keys_kernel<T: Element>(v: &mut [T]) -> Option<&mut [T::Key]> {
    const {
        assert!(
            std::mem::size_of::<T>() == std::mem::size_of::<T::Key>()
                && std::mem::align_of::<T>() == std::mem::align_of::<T::Key>(),
            "a key has its value's size and alignment"
        )
    };
    let (p, n) = (v.as_mut_ptr(), v.len());
    let mut nan = false;
    for i in 0..n {
        // SAFETY: `i < n`; slot `i` still holds a value when it is read, and a key of
        // the same size and alignment is written over it.
        unsafe {
            let x = p.add(i).read();
            nan |= x.is_nan();
            p.cast::<T::Key>().add(i).write(x.key());
        }
    }
    // SAFETY: every slot now holds a key, and the slice covers `v`'s memory (same size
    // and alignment per element).
    (!nan).then(|| unsafe { std::slice::from_raw_parts_mut(p.cast::<T::Key>(), n) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_nonpos_is_accurate_over_its_domain() {
        check_exp::<false>();
        check_exp::<true>();
    }

    fn check_exp<const FUSED: bool>() {
        let (e32, e64) = (exp_nonpos_f32::<FUSED>, exp_nonpos_f64::<FUSED>);
        let mut worst32 = 0.0f64;
        let mut worst64 = 0.0f64;
        for i in 0..=200_000 {
            let x = -(i as f64) * 708.0 / 200_000.0;
            let want = x.exp();
            let g64 = e64(x);
            if want > 1e-300 {
                worst64 = worst64.max(((g64 - want) / want).abs());
            }
            if x > -87.0 {
                let g32 = e32(x as f32) as f64;
                let w32 = (x as f32 as f64).exp();
                worst32 = worst32.max(((g32 - w32) / w32).abs());
            }
        }
        assert!(
            worst64 < 4e-16,
            "f64 relative error {worst64} (fused: {FUSED})"
        );
        assert!(
            worst32 < 4e-7,
            "f32 relative error {worst32} (fused: {FUSED})"
        );
        assert_eq!(e64(0.0), 1.0);
        assert_eq!(e32(0.0), 1.0);
        assert_eq!(e64(f64::NEG_INFINITY), 0.0);
        assert_eq!(e32(f32::NEG_INFINITY), 0.0);
        assert!(e64(f64::NAN).is_nan());
        assert!(e32(f32::NAN).is_nan());
        // outside the domain: no panic, no garbage
        assert_eq!(e64(f64::INFINITY), 1.0);
        assert_eq!(e32(1e30), 1.0);
    }

    #[test]
    fn half_to_f32_is_exact_for_every_bit_pattern() {
        for b in 0..=u16::MAX {
            let (want, got) = (half::f16::from_bits(b).to_f32(), f16_bits_to_f32(b));
            assert!(
                want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()),
                "f16 {b:#06x}: {want} vs {got}"
            );
            let (want, got) = (half::bf16::from_bits(b).to_f32(), bf16_bits_to_f32(b));
            assert!(
                want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()),
                "bf16 {b:#06x}: {want} vs {got}"
            );
        }
    }

    #[test]
    fn order_keys_follow_numeric_order() {
        let v = [
            f64::NEG_INFINITY,
            -3.5,
            -1e-300,
            -0.0,
            0.0,
            1e-300,
            2.0,
            f64::INFINITY,
        ];
        for w in v.windows(2) {
            assert!(w[0].key() < w[1].key(), "{} {}", w[0], w[1]);
            assert_eq!(f64::from_key(w[0].key()).to_bits(), w[0].to_bits());
        }
        let f = [f32::NEG_INFINITY, -1.0, 0.0, 3.0, f32::INFINITY];
        for w in f.windows(2) {
            assert!(w[0].key() < w[1].key());
            assert_eq!(f32::from_key(w[1].key()), w[1]);
        }
        let i = [i64::MIN, -5, -1, 0, 1, i64::MAX];
        for w in i.windows(2) {
            assert!(w[0].key() < w[1].key());
            assert_eq!(i64::from_key(w[0].key()), w[0]);
        }
        let mut v = [3i32, i32::MIN, -2, 0];
        let want: Vec<u32> = v.iter().map(|x| x.key()).collect();
        assert_eq!(crate::element::keys_in_place(&mut v).unwrap(), &want[..]);
        let mut f = [-0.0f32, 2.5, f32::NEG_INFINITY];
        let want: Vec<u32> = f.iter().map(|x| x.key()).collect();
        assert_eq!(crate::element::keys_in_place(&mut f).unwrap(), &want[..]);
    }
}
