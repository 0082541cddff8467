//! The scalar math of the compute types (`f32`, `f64`): what the elementwise ops
//! ([`crate::unary`]) call on [`Float::Calc`](crate::Float::Calc) values. The engine's own
//! branch-free functions, so that a loop over them vectorises: `exp`, ln, log2, log10,
//! log1p, expm1, atan, atan2, tanh, asinh, acosh, atanh, erf and erfc (both types; f32
//! erf, erfc and atan2 computed in f64); sin, cos and tan (both) below
//! [`Math::TRIG_LIMIT`] (the map recomputes larger arguments with the std functions);
//! asin and acos (fdlibm's), sinh and cosh (through exp); `pow` as `e^(p ln x)`, f32's
//! in f64 and f64's in double-double ([`Math::powf_fast`]). The rest (hypot, and the few
//! arguments a fast form leaves NaN) come from the standard library.

/// `a * b + c`, with one rounding when `FUSED` (a multiply and an add otherwise).
#[inline(always)]
fn madd<C: crate::Float + Math, const FUSED: bool>(a: C, b: C, c: C) -> C {
    if FUSED {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// The polynomial of coefficients `c` (highest degree first) at `w` by Horner's rule,
/// its steps fused when `FUSED` (loops over it vectorise).
#[inline(always)]
fn horner<C: crate::Float + Math, const FUSED: bool>(c: &[C], w: C) -> C {
    c[1..].iter().fold(c[0], |p, &k| madd::<C, FUSED>(p, w, k))
}

/// The reduction and polynomial every `exp` of the engine shares, in f32: for `xc`
/// (clamped by the caller to where its scaling is valid), `x = n ln2 + r` with
/// `|r| <= ln2 / 2` (Cody-Waite; `n * LN2_HI` is exact), the Taylor polynomial of `e^r`
/// with the `coeffs` given highest degree first (the constant terms last), and `n`.
/// Fused multiply-adds when `FUSED`. Branch-free: loops over it vectorise.
#[inline(always)]
pub(crate) fn exp_parts_f32<const FUSED: bool>(xc: f32, coeffs: &[f32]) -> (f32, i32) {
    let fma = madd::<f32, FUSED>;
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let t = fma(xc, LOG2E, MAGIC);
    let n = t - MAGIC;
    let r = fma(-n, LN2_LO, fma(-n, LN2_HI, xc));
    let p = horner::<f32, FUSED>(coeffs, r);
    // the integer n sits in the low mantissa bits of t: no float-to-int conversion
    // (Rust's saturating `as` does not vectorise well)
    (p, t.to_bits().wrapping_sub(MAGIC.to_bits()) as i32)
}

/// [`exp_parts_f32`] in f64 (fdlibm's split of ln 2).
#[inline(always)]
pub(crate) fn exp_parts_f64<const FUSED: bool>(xc: f64, coeffs: &[f64]) -> (f64, i64) {
    exp_parts2_f64::<FUSED, false>(xc, 0.0, coeffs)
}

/// [`exp_parts_f64`] of `hi + lo` when `LO`, with `lo` added to the reduced argument
/// (`r = (hi - n ln2) + lo`), so that a large exact `hi` keeps `lo`'s bits.
#[inline(always)]
fn exp_parts2_f64<const FUSED: bool, const LO: bool>(
    xc: f64, lo: f64, coeffs: &[f64],
) -> (f64, i64) {
    let fma = madd::<f64, FUSED>;
    const LOG2E: f64 = std::f64::consts::LOG2_E;
    // the high part has trailing zero bits so n * LN2_HI is exact
    const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
    const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52
    let t = fma(if LO { xc + lo } else { xc }, LOG2E, MAGIC);
    let n = t - MAGIC;
    let hi = fma(-n, LN2_HI, xc);
    let r = fma(-n, LN2_LO, if LO { hi + lo } else { hi });
    let p = horner::<f64, FUSED>(coeffs, r);
    (p, t.to_bits().wrapping_sub(MAGIC.to_bits()) as i64)
}

/// Taylor coefficients of `e^r` to degree 6 (f32 `exp_nonpos`), highest first.
pub(crate) const EXP_F32_DEG6: [f32; 7] = [
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];

/// Taylor coefficients of `e^r` to degree 13 (truncation 4e-18 relative on
/// `|r| <= ln2 / 2`), highest first: erfc's tails.
const EXP_F64_DEG13: [f64; 14] = [
    1.0 / 6_227_020_800.0,
    1.0 / 479_001_600.0,
    1.0 / 39_916_800.0,
    1.0 / 3_628_800.0,
    1.0 / 362_880.0,
    1.0 / 40_320.0,
    1.0 / 5_040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];

/// Taylor coefficients of `e^r` to degree 12 (every f64 exp: truncation below 1e-16
/// relative on `|r| <= ln2 / 2`), highest first.
pub(crate) const EXP_F64_DEG12: &[f64] = EXP_F64_DEG13.split_at(1).1;

/// The Taylor polynomial of degree 8 (truncation below 2^-32 relative on `|r| <=
/// ln 2 / 2`): f32 pow's exp, which needs f32's precision only.
const EXP_F64_DEG8: &[f64] = EXP_F64_DEG13.split_at(5).1;

/// The scalar math the unary ops compute with, on the compute types `f32` and `f64`.
pub trait Math: Copy {
    /// Largest finite value.
    const MAX: Self;
    /// Smallest (most negative) finite value.
    const MIN: Self;
    /// From an f64 constant (rounding to nearest).
    fn of(v: f64) -> Self;
    /// `e^x` over the whole range, branch-free so that loops over it vectorise.
    fn exp_full(self) -> Self;
    /// [`Math::exp_full`] in the unary kernels' form: multiply-adds fused where every
    /// vector kernel has FMA (f64 `exp` 0.7x the time). For the unary ops' bodies and
    /// derivatives only, which run inside those kernels (the maps' and the gradients'):
    /// elsewhere, on x86-64, a fused step is a library call.
    fn exp_k(self) -> Self;
    /// `ln(x)` in the unary kernels' form (as [`Math::exp_k`]).
    fn ln_k(self) -> Self;
    /// `2^x`.
    fn exp2(self) -> Self;
    /// `e^x - 1`, accurate near 0.
    fn exp_m1(self) -> Self;
    /// `log2(x)`.
    fn log2(self) -> Self;
    /// `log10(x)`.
    fn log10(self) -> Self;
    /// `ln(1 + x)`, accurate near 0.
    fn ln_1p(self) -> Self;
    /// Sine.
    fn sin(self) -> Self;
    /// Cosine.
    fn cos(self) -> Self;
    /// Tangent.
    fn tan(self) -> Self;
    /// Below this magnitude `sin_fast`, `cos_fast` and `tan_fast` are accurate (f32:
    /// 2^19; f64: 2^30).
    const TRIG_LIMIT: Self;
    /// Sine for `|x| < TRIG_LIMIT`, branch-free (loops over it vectorise); beyond, NaN,
    /// which the caller replaces ([`crate::unary`]'s `map_float` recomputes its NaN
    /// outputs with [`Math::sin`]).
    fn sin_fast(self) -> Self;
    /// Cosine as [`Math::sin_fast`].
    fn cos_fast(self) -> Self;
    /// Tangent as [`Math::sin_fast`].
    fn tan_fast(self) -> Self;
    /// Arcsine.
    fn asin(self) -> Self;
    /// Arccosine.
    fn acos(self) -> Self;
    /// Arctangent.
    fn atan(self) -> Self;
    /// The angle of the point `(other, self)`: `atan2(self, other)`, in `[-pi, pi]`.
    fn atan2(self, other: Self) -> Self;
    /// `self^p` where that is a positive finite number's power, or a negative one's
    /// integer power (`neg`: the sign of a negative base's power, 1 or -1 for an even or
    /// odd integer `p`, NaN for a fractional one); NaN elsewhere (zeros, infinities,
    /// NaNs), which the caller recomputes with [`Float::powf`](crate::Float::powf).
    /// Branch-free: f32 computes `e^(p ln x)` in f64, f64 in double-double (within 2 ulp
    /// of `powf`).
    fn powf_fast(self, p: f64, neg: f64) -> Self;
    /// Above this the inverse hyperbolic functions take `ln(x) + ln 2` (`x^2` would
    /// overflow, and the next term is below the type's precision): 2^28 in f64, 2^12 in
    /// f32.
    const BIG_HYPERBOLIC: f64;
    /// Below this `e^x` is finite (709 in f64, 88 in f32).
    const EXP_SAFE: f64;
    /// Terms past `x` of `sinh`'s odd series below 1: to `x^19` in f64 (truncation below
    /// 1e-17 relative), `x^11` in f32 (below 2e-10).
    const SINH_TERMS: usize;
    /// `sqrt(self^2 + other^2)` without undue overflow.
    fn hypot(self, other: Self) -> Self;
    /// C `fmod`: `self - n * other` with `n` truncated, the sign of `self`.
    fn fmod(self, other: Self) -> Self;
    /// Hyperbolic sine.
    fn sinh(self) -> Self;
    /// Hyperbolic cosine.
    fn cosh(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// Inverse hyperbolic sine.
    fn asinh(self) -> Self;
    /// Inverse hyperbolic cosine.
    fn acosh(self) -> Self;
    /// Inverse hyperbolic tangent.
    fn atanh(self) -> Self;
    /// The error function.
    fn erf(self) -> Self;
    /// The complementary error function `1 - erf(x)`, accurate for large `x`.
    fn erfc(self) -> Self;
    /// Round toward -inf.
    fn floor(self) -> Self;
    /// Round toward +inf.
    fn ceil(self) -> Self;
    /// Round to nearest, ties to even.
    fn round_even(self) -> Self;
    /// Round toward 0.
    fn trunc(self) -> Self;
    /// `self^p` for an integer `p`.
    fn powi(self, p: i32) -> Self;
    /// `self * a + b` with one rounding.
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// Into f64, exactly.
    fn to_f64(self) -> f64;
}

macro_rules! math {
    ($t:ty, $erf:path, $erfc:path, $exp:ident, $ln:ident, $log2:ident, $log10:ident, $ln1p:path, $expm1:path, $tanh:path,
        trig: $limit:expr, $sinf:path, $cosf:path, $tanf:path, $atan:path,
        $atan2:path, $asinh:path, $acosh:path, $atanh:path, $powf:path,
        $asin:path, $acos:path, $sinh:path, $cosh:path) => {
        impl Math for $t {
            const BIG_HYPERBOLIC: f64 = if <$t>::MANTISSA_DIGITS == 24 {
                4096.0
            } else {
                268_435_456.0
            };
            const EXP_SAFE: f64 = if <$t>::MANTISSA_DIGITS == 24 {
                88.0
            } else {
                709.0
            };
            const SINH_TERMS: usize = if <$t>::MANTISSA_DIGITS == 24 { 5 } else { 9 };
            const MAX: Self = <$t>::MAX;
            const MIN: Self = <$t>::MIN;
            const TRIG_LIMIT: Self = $limit;
            #[inline(always)]
            fn sin_fast(self) -> Self {
                $sinf(self)
            }
            #[inline(always)]
            fn cos_fast(self) -> Self {
                $cosf(self)
            }
            #[inline(always)]
            fn tan_fast(self) -> Self {
                $tanf(self)
            }
            #[inline(always)]
            fn of(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn exp_full(self) -> Self {
                $exp::<false>(self)
            }
            #[inline(always)]
            fn exp_k(self) -> Self {
                $exp::<FUSED_KERNELS>(self)
            }
            #[inline(always)]
            fn ln_k(self) -> Self {
                $ln::<FUSED_KERNELS>(self)
            }
            #[inline(always)]
            fn exp2(self) -> Self {
                <$t>::exp2(self)
            }
            #[inline(always)]
            fn exp_m1(self) -> Self {
                $expm1(self)
            }
            #[inline(always)]
            fn log2(self) -> Self {
                $log2::<FUSED_KERNELS>(self)
            }
            #[inline(always)]
            fn log10(self) -> Self {
                $log10::<FUSED_KERNELS>(self)
            }
            #[inline(always)]
            fn ln_1p(self) -> Self {
                $ln1p(self)
            }
            #[inline(always)]
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            #[inline(always)]
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            #[inline(always)]
            fn tan(self) -> Self {
                <$t>::tan(self)
            }
            #[inline(always)]
            fn asin(self) -> Self {
                $asin(self)
            }
            #[inline(always)]
            fn acos(self) -> Self {
                $acos(self)
            }
            #[inline(always)]
            fn atan(self) -> Self {
                $atan(self)
            }
            #[inline(always)]
            fn atan2(self, other: Self) -> Self {
                $atan2(self, other)
            }
            #[inline(always)]
            fn powf_fast(self, p: f64, neg: f64) -> Self {
                $powf(self, p, neg)
            }
            #[inline(always)]
            fn hypot(self, other: Self) -> Self {
                <$t>::hypot(self, other)
            }
            #[inline(always)]
            fn fmod(self, other: Self) -> Self {
                self % other
            }
            #[inline(always)]
            fn sinh(self) -> Self {
                $sinh(self)
            }
            #[inline(always)]
            fn cosh(self) -> Self {
                $cosh(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                $tanh(self)
            }
            #[inline(always)]
            fn asinh(self) -> Self {
                $asinh(self)
            }
            #[inline(always)]
            fn acosh(self) -> Self {
                $acosh(self)
            }
            #[inline(always)]
            fn atanh(self) -> Self {
                $atanh(self)
            }
            #[inline(always)]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline(always)]
            fn erfc(self) -> Self {
                $erfc(self)
            }
            #[inline(always)]
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            #[inline(always)]
            fn ceil(self) -> Self {
                <$t>::ceil(self)
            }
            #[inline(always)]
            fn round_even(self) -> Self {
                <$t>::round_ties_even(self)
            }
            #[inline(always)]
            fn trunc(self) -> Self {
                <$t>::trunc(self)
            }
            #[inline(always)]
            fn powi(self, p: i32) -> Self {
                <$t>::powi(self, p)
            }
            #[inline(always)]
            fn mul_add(self, a: Self, b: Self) -> Self {
                <$t>::mul_add(self, a, b)
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}
math!(
    f32,
    erf_f32,
    erfc_f32,
    exp_f32_of,
    ln_f32_of,
    log2_f32_of,
    log10_f32_of,
    ln_1p_of,
    exp_m1_f32,
    tanh_f32,
    trig: F32_TRIG_LIMIT,
    sin_f32,
    cos_f32,
    tan_f32,
    atan_f32,
    atan2_f32,
    asinh_f32,
    acosh_f32,
    atanh_of,
    powf_fast_f32,
    asin_f32,
    acos_f32,
    sinh_of,
    cosh_of
);
math!(
    f64,
    erf_f64,
    erfc_f64,
    exp_f64_of,
    ln_f64_of,
    log2_f64_of,
    log10_f64_of,
    ln_1p_of,
    exp_m1_f64,
    tanh_f64,
    trig: F64_TRIG_LIMIT,
    sin_f64,
    cos_f64,
    tan_f64,
    atan_f64,
    atan2_f64,
    asinh_of,
    acosh_of,
    atanh_of,
    powf_fast_f64,
    asin_f64,
    acos_f64,
    sinh_of,
    cosh_of
);

/// `e^x` in f32 over the whole range, branch-free (vectorises): the engine's shared
/// reduction ([`exp_parts_f32`]) with a degree-7 polynomial (truncation 5e-9 relative),
/// and `2^n` applied as two factors so that overflow gives inf and the subnormal range is
/// rounded by the final multiply. NaN propagates. Multiply-adds fused when `FUSED`.
#[inline(always)]
fn exp_f32_of<const FUSED: bool>(x: f32) -> f32 {
    const DEG7: [f32; 8] = [
        1.0 / 5040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ];
    // beyond these e^x is inf / 0 in f32; NaN fails both compares and stays NaN
    let xc = if x < -104.0 { -104.0 } else { x };
    let xc = if xc > 89.0 { 89.0 } else { xc };
    let (p, ni) = exp_parts_f32::<FUSED>(xc, &DEG7);
    let h = ni >> 1;
    let s1 = f32::from_bits(((h + 127) as u32) << 23);
    let s2 = f32::from_bits(((ni - h + 127) as u32) << 23);
    p * s1 * s2
}

/// [`exp_f32_of`], unfused.
#[inline(always)]
fn exp_f32(x: f32) -> f32 {
    exp_f32_of::<false>(x)
}

/// `x = 2^e (1 + f)` with `1 + f` in `[sqrt(1/2), sqrt(2))`, and `y`, the part of
/// `ln(1 + f)` beyond `f` (Cephes' `logf` polynomial, degree 8, about 1 ulp): the shared
/// core of the f32 logarithms, for positive finite `x` (subnormals scaled first).
/// Branch-free: loops over it vectorise.
#[inline(always)]
fn log_parts_f32<const FUSED: bool>(x: f32) -> (f32, f32, f32) {
    let sub = x < f32::MIN_POSITIVE;
    let xs = if sub { x * 33_554_432.0 } else { x }; // 2^25
    let bits = xs.to_bits();
    // m in [0.5, 1): x = 2^e m
    let e = ((bits >> 23) & 0xff) as i32 - 126 - if sub { 25 } else { 0 };
    let m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000);
    let low = m < std::f32::consts::FRAC_1_SQRT_2;
    let f = if low { m + m - 1.0 } else { m - 1.0 };
    let e = (if low { e - 1 } else { e }) as f32;
    const P: [f32; 9] = [
        7.037_683_6e-2,
        -1.151_461e-1,
        1.167_699_9e-1,
        -1.242_014_1e-1,
        1.424_932_3e-1,
        -1.666_805_8e-1,
        2.000_071_4e-1,
        -2.499_999_4e-1,
        3.333_333e-1,
    ];
    let z = f * f;
    let p = horner::<f32, FUSED>(&P, f);
    (e, f, p * f * z - 0.5 * z)
}

/// The special values of a logarithm: `r` for positive finite `x`, `+inf` at `+inf`,
/// `-inf` at 0, NaN below 0 and at NaN (selects: loops over it vectorise).
#[inline(always)]
fn log_specials<C: crate::Float>(x: C, r: C) -> C {
    let r = if x > C::ZERO {
        r
    } else if x == C::ZERO {
        C::NEG_INFINITY
    } else {
        C::NAN
    };
    if x == C::INFINITY {
        x
    } else {
        r
    }
}

/// `ln(x)` in f32, branch-free (vectorises): Cephes' `logf` (about 1 ulp).
#[inline(always)]
pub(crate) fn ln_f32(x: f32) -> f32 {
    ln_f32_of::<false>(x)
}

/// [`ln_f32`], its polynomial fused when `FUSED`.
#[inline(always)]
fn ln_f32_of<const FUSED: bool>(x: f32) -> f32 {
    let (e, f, y) = log_parts_f32::<FUSED>(x);
    // ln 2 in two parts: e * 0.693359375 is exact
    let r = (y - 2.121_944_4e-4 * e) + f + 0.693_359_4 * e;
    log_specials(x, r)
}

/// `log2(x)` in f32, branch-free: the exponent added exactly (powers of 2 give exact
/// integers), `log2(e) - 1` applied to the small part (Cephes' `log2f`).
#[inline(always)]
fn log2_f32_of<const FUSED: bool>(x: f32) -> f32 {
    const LOG2EA: f32 = 0.442_695_04; // log2(e) - 1
    let (e, f, y) = log_parts_f32::<FUSED>(x);
    let r = y * LOG2EA + f * LOG2EA + y + f + e;
    log_specials(x, r)
}

/// `log10(x)` in f32, branch-free: `log10(e)` and `log10(2)` each in two parts
/// (Cephes' `log10f`).
#[inline(always)]
fn log10_f32_of<const FUSED: bool>(x: f32) -> f32 {
    const L102A: f32 = 3.007_812_5e-1;
    const L102B: f32 = 2.487_456_6e-4;
    const L10EA: f32 = 4.335_937_5e-1;
    const L10EB: f32 = 7.007_319e-4;
    let (e, f, y) = log_parts_f32::<FUSED>(x);
    let r = y * L10EB + f * L10EB + e * L102B + y * L10EA + f * L10EA + e * L102A;
    log_specials(x, r)
}

/// `ln(1 + t)` from `u = 1 + t` rounded and `ln_u = ln(u)`: `ln(u) * t / (u - 1)`, which
/// cancels the rounding of `u` (Goldberg's formula); `t` itself where `u` rounds to 1.
/// The shared step of log1p and the inverse hyperbolic functions (their `ln` is computed
/// once, of an argument each picks by selects).
#[inline(always)]
fn ln_1p_from<C: crate::Float>(t: C, u: C, ln_u: C) -> C {
    let d = u - C::ONE;
    if d == C::ZERO {
        t
    } else {
        ln_u * (t / d)
    }
}

/// `ln(1 + x)`, branch-free (vectorises): [`ln_1p_from`] with the engine's `ln`; `-inf`
/// at -1, `inf` at `inf`, NaN below -1.
#[inline(always)]
fn ln_1p_of<C: crate::Float>(x: C) -> C {
    let u = C::ONE + x;
    let ln_u = u.ln();
    // u = 0 (x = -1): -inf; u = inf: inf (the quotient is NaN there)
    if u == C::ZERO || u == C::INFINITY {
        ln_u
    } else {
        ln_1p_from(x, u, ln_u)
    }
}

/// Taylor coefficients of `e^r - 1` to degree 13 (no constant term), highest first:
/// [`exp_m1_f64`]'s polynomial on the reduced argument.
const EXPM1_F64_DEG13: [f64; 14] = {
    let mut t = EXP_F64_DEG13;
    t[13] = 0.0;
    t
};

/// `e^x - 1` in f64, branch-free (fdlibm's form): `x = n ln2 + r` with `|r| <= ln2 / 2`
/// (the reduction [`exp_f64_of`] uses), `p = e^r - 1` by its Taylor polynomial, then
/// `2^n p + (2^n - 1)` (both terms exact, one rounding; `r = x` when `n = 0`, so no
/// cancellation near 0), or `2^n (1 + p)` where `2^n` outgrows 1 (`n > 53`); -1 below
/// -40, inf above the overflow; `-0` stays `-0`. One reduction and a polynomial where
/// Kahan's formula took an exp, a log and a division.
#[inline(always)]
fn exp_m1_f64(x: f64) -> f64 {
    let xc = if x < -40.0 { -40.0 } else { x };
    let xc = if xc > 710.0 { 710.0 } else { xc };
    let (p, n) = exp_parts_f64::<false>(xc, &EXPM1_F64_DEG13);
    let s = f64::from_bits((n.min(53).wrapping_add(1023) as u64) << 52);
    let r = if n > 53 {
        scale_f64(p + 1.0, n)
    } else {
        s * p + (s - 1.0)
    };
    if x == 0.0 || x.is_nan() {
        x
    } else {
        r
    }
}

/// `e^x - 1` in f32, branch-free: the Taylor series to `x^11` for `|x| < 1` (its
/// truncation below 2^-28 relative; no cancellation), `e^x - 1` beyond (where the
/// subtraction at most doubles [`exp_f32`]'s error); `-0` stays `-0`. One f32 exp and a
/// polynomial, at f32's vector width, instead of Kahan's exp and log.
#[inline(always)]
fn exp_m1_f32(x: f32) -> f32 {
    // 1/11!, ..., 1/2, 1 (highest degree first): x (1 + x/2 + ... + x^10/11!)
    const T: [f32; 11] = [
        (1.0 / 39_916_800.0f64) as f32,
        (1.0 / 3_628_800.0f64) as f32,
        (1.0 / 362_880.0f64) as f32,
        (1.0 / 40_320.0f64) as f32,
        (1.0 / 5_040.0f64) as f32,
        (1.0 / 720.0f64) as f32,
        (1.0 / 120.0f64) as f32,
        (1.0 / 24.0f64) as f32,
        (1.0 / 6.0f64) as f32,
        0.5,
        1.0,
    ];
    let near = x * horner::<f32, false>(&T, x);
    let far = exp_f32(x) - 1.0;
    if x.abs() < 1.0 {
        near
    } else {
        far
    }
}

/// Whether the sign of `s` is negative (-0 included; not NaN's), by selects.
#[inline(always)]
fn negative<C: crate::Float>(s: C) -> bool {
    s < C::ZERO || (s == C::ZERO && C::ONE / s < C::ZERO)
}

/// A non-negative `x` (or NaN) with the sign of `s`: `-x` where `s` is [`negative`]
/// (the odd functions keep `-0`).
#[inline(always)]
fn signed<C: crate::Float>(x: C, s: C) -> C {
    if negative(s) {
        -x
    } else {
        x
    }
}

/// `log1p(t)` where `small`, `ln(big_arg) + ln 2` where `big`, `ln(mid)` elsewhere: the
/// three ranges of asinh and acosh with one `ln`, of the argument picked by selects.
#[inline(always)]
fn ln_of_ranges<C: crate::Float + Math>(small: bool, t: C, big: bool, big_arg: C, mid: C) -> C {
    let u = if small {
        C::ONE + t
    } else if big {
        big_arg
    } else {
        mid
    };
    let ln_u = u.ln_k();
    if small {
        ln_1p_from(t, u, ln_u)
    } else if big {
        ln_u + C::of(std::f64::consts::LN_2)
    } else {
        ln_u
    }
}

/// `asinh(x)`, branch-free (vectorises): fdlibm's three ranges with one `ln`:
/// `log1p(a + a^2 / (1 + s))` below 2, `ln(a + s)` below 2^28 (f32: 2^12), `ln(a) +
/// ln 2` beyond (`a = |x|`, `s = sqrt(a^2 + 1)`); the sign of `x`. The middle range
/// takes `a + s` itself where fdlibm writes it `2a + 1 / (s + a)`: one division less
/// (every lane computes every range), within the same 2 ulp.
#[inline(always)]
fn asinh_of<C: crate::Float + Math>(x: C) -> C {
    let one = C::ONE;
    let two = C::of(2.0);
    let a = x.abs();
    let s = (a * a + one).sqrt();
    let small = a < two;
    let big = a > C::of(C::BIG_HYPERBOLIC);
    let t = a + a * a / (one + s);
    signed(ln_of_ranges(small, t, big, a, a + s), x)
}

/// `acosh(x)`, branch-free (vectorises): fdlibm's three ranges with one `ln`:
/// `log1p(t + s)` below 2, `ln(x + s)` below 2^28 (f32: 2^12), `ln(x) + ln 2` beyond
/// (`t = x - 1`, `s = sqrt(x^2 - 1)`, from `2t + t^2` in the lower range); NaN below 1.
/// One square root serves both ranges, and the middle one takes `x + s` where fdlibm
/// writes it
/// `2x - 1 / (x + s)`: a square root and a division less (every lane computes every
/// range), within the same 2 ulp.
#[inline(always)]
fn acosh_of<C: crate::Float + Math>(x: C) -> C {
    let one = C::ONE;
    let two = C::of(2.0);
    let t = x - one;
    let small = x < two;
    let s = if small { two * t + t * t } else { x * x - one }.sqrt();
    let big = x > C::of(C::BIG_HYPERBOLIC);
    let r = ln_of_ranges(small, t + s, big, x, x + s);
    if x < one {
        C::NAN
    } else {
        r
    }
}

/// `atanh(x)`, branch-free (vectorises): fdlibm's `log1p(2a + 2a^2 / (1 - a)) / 2` below
/// `a = |x| = 0.5`, `log1p(2a / (1 - a)) / 2` above; inf at 1, NaN beyond; the sign of
/// `x`.
#[inline(always)]
fn atanh_of<C: crate::Float + Math>(x: C) -> C {
    let one = C::ONE;
    let two = C::of(2.0);
    let a = x.abs();
    let t = if a < C::of(0.5) {
        two * a + two * a * a / (one - a)
    } else {
        two * a / (one - a)
    };
    let u = one + t;
    let ln_u = u.ln();
    // a = 1: t = u = inf, and the quotient in ln_1p_from is NaN
    let r = if u == C::INFINITY {
        u
    } else {
        C::of(0.5) * ln_1p_from(t, u, ln_u)
    };
    signed(r, x)
}

/// fdlibm's erf and erfc coefficients, by range of `|x|`: `[0, 0.84375)` (a rational
/// function of `x^2`), `[0.84375, 1.25)` (of `|x| - 1`), `[1.25, 1/0.35)` and
/// `[1/0.35, inf)` (of `1 / x^2`); the numerator from degree 0 up, then the denominator
/// from degree 1 up (its constant term is 1). Zeros pad the shorter ones.
// fdlibm's coefficients as published
#[allow(clippy::excessive_precision)]
const ERF_NUM: [[f64; 4]; 8] = [
    [
        1.28379167095512558561e-01,
        -2.36211856075265944077e-03,
        -9.86494403484714822705e-03,
        -9.86494292470009928597e-03,
    ],
    [
        -3.25042107247001499370e-01,
        4.14856118683748331666e-01,
        -6.93858572707181764372e-01,
        -7.99283237680523006574e-01,
    ],
    [
        -2.84817495755985104766e-02,
        -3.72207876035701323847e-01,
        -1.05586262253232909814e+01,
        -1.77579549177547519889e+01,
    ],
    [
        -5.77027029648944159157e-03,
        3.18346619901161753674e-01,
        -6.23753324503260060396e+01,
        -1.60636384855821916062e+02,
    ],
    [
        -2.37630166566501626084e-05,
        -1.10894694282396677476e-01,
        -1.62396669462573470355e+02,
        -6.37566443368389627722e+02,
    ],
    [
        0.0,
        3.54783043256182359371e-02,
        -1.84605092906711035994e+02,
        -1.02509513161107724954e+03,
    ],
    [
        0.0,
        -2.16637559486879084300e-03,
        -8.12874355063065934246e+01,
        -4.83519191608651397019e+02,
    ],
    [0.0, 0.0, -9.81432934416914548592e+00, 0.0],
];
/// The denominators of [`ERF_NUM`], from degree 1 up.
#[allow(clippy::excessive_precision)]
const ERF_DEN: [[f64; 4]; 8] = [
    [
        3.97917223959155352819e-01,
        1.06420880400844228286e-01,
        1.96512716674392571292e+01,
        3.03380607434824582924e+01,
    ],
    [
        6.50222499887672944485e-02,
        5.40397917702171048937e-01,
        1.37657754143519042600e+02,
        3.25792512996573918826e+02,
    ],
    [
        5.08130628187576562776e-03,
        7.18286544141962662868e-02,
        4.34565877475229228821e+02,
        1.53672958608443695994e+03,
    ],
    [
        1.32494738004321644526e-04,
        1.26171219808761642112e-01,
        6.45387271733267880336e+02,
        3.19985821950859553908e+03,
    ],
    [
        -3.96022827877536812320e-06,
        1.36370839120290507362e-02,
        4.29008140027567833386e+02,
        2.55305040643316442583e+03,
    ],
    [
        0.0,
        1.19844998467991074170e-02,
        1.08635005541779435134e+02,
        4.74528541206955367215e+02,
    ],
    [
        0.0,
        0.0,
        6.57024977031928170135e+00,
        -2.24409524465858183362e+01,
    ],
    [0.0, 0.0, -6.04244152148580987438e-02, 0.0],
];

/// `(erf(x), erfc(x))` in f64, branch-free (vectorises): fdlibm's `s_erf.c` with its four
/// ranges' rational functions evaluated as one (each coefficient picked by selects, one
/// quotient), and its `exp(-z^2 - 0.5625) exp((z - a)(z + a) + R/S) / a` for the tails
/// (`z` is `a = |x|` with its low 32 bits cleared, so `z^2` is exact); below 1 ulp.
// fdlibm's constants as published
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn erf_erfc_f64(x: f64) -> (f64, f64) {
    const ERX: f64 = 8.45062911510467529297e-01;
    let a = x.abs();
    let (r0, r1, r2) = (a < 0.84375, a < 1.25, a < 2.857_142_857_142_857);
    let pick = |c: [f64; 4]| {
        if r0 {
            c[0]
        } else if r1 {
            c[1]
        } else if r2 {
            c[2]
        } else {
            c[3]
        }
    };
    let t = if r0 {
        a * a
    } else if r1 {
        a - 1.0
    } else {
        1.0 / (a * a)
    };
    let mut p = pick(ERF_NUM[7]);
    for k in (0..7).rev() {
        p = p * t + pick(ERF_NUM[k]);
    }
    let mut q = pick(ERF_DEN[7]);
    for k in (0..7).rev() {
        q = q * t + pick(ERF_DEN[k]);
    }
    let y = p / (q * t + 1.0);
    // the tails: erfc(a)
    let z = f64::from_bits(a.to_bits() & 0xffff_ffff_0000_0000);
    let e = exp_sum_f64(-z * z - 0.5625, (z - a) * (z + a) + y) / a;
    // below 2^-1074 from 28 on (and the formula is NaN at inf)
    let e = if a >= 28.0 { 0.0 } else { e };
    let (erf_a, erfc_pos, erfc_neg) = if r0 {
        let xy = x * y;
        let near = if x < 0.25 {
            1.0 - (x + xy)
        } else {
            0.5 - (x - 0.5 + xy)
        };
        (a + a * y, near, near)
    } else if r1 {
        (ERX + y, 1.0 - ERX - y, 1.0 + (ERX + y))
    } else {
        (1.0 - e, e, 2.0 - e)
    };
    (signed(erf_a, x), if x < 0.0 { erfc_neg } else { erfc_pos })
}

/// `erf(x)` in f64 ([`erf_erfc_f64`]).
#[inline(always)]
fn erf_f64(x: f64) -> f64 {
    erf_erfc_f64(x).0
}

/// `erfc(x)` in f64 ([`erf_erfc_f64`]).
#[inline(always)]
fn erfc_f64(x: f64) -> f64 {
    erf_erfc_f64(x).1
}

/// `atan2(y, x)` in f64, branch-free (vectorises): `atan(y / x)`, plus pi with the sign
/// of `y` (in two parts) where `x` is negative or -0; the quotient's NaNs at two zeros
/// and two infinities replaced by the IEEE values (0 or pi, pi/4 or 3pi/4, the sign of
/// `y`); NaN in, NaN out.
#[inline(always)]
fn atan2_f64(y: f64, x: f64) -> f64 {
    const PI_LO: f64 = 1.224_646_799_147_353_2e-16;
    let q = y / x;
    let t = atan_f64(q);
    let neg = negative(x);
    let s = if neg { signed(1.0, y) } else { 0.0 };
    let r = (t + s * PI_LO) + s * std::f64::consts::PI;
    let both = if x.is_infinite() {
        if neg {
            3.0 * std::f64::consts::FRAC_PI_4
        } else {
            std::f64::consts::FRAC_PI_4
        }
    } else if neg {
        std::f64::consts::PI
    } else {
        0.0
    };
    if q.is_nan() && !x.is_nan() && !y.is_nan() {
        signed(both, y)
    } else {
        r
    }
}

/// `x^p` in f64 for `x > 0` finite: `e^(p ln x)`, NaN elsewhere (the caller recomputes
/// those with the exact `powf`); accurate to f32's precision only (the error of `ln x`
/// is multiplied by `p ln x`), which is what [`Math::powf_fast`] of f32 asks of it.
#[inline(always)]
fn pow_positive_f64(x: f64, p: f64) -> f64 {
    let inside = x > 0.0 && x < f64::INFINITY;
    // 1 elsewhere: a masked-out lane's 0 would take exp to the subnormal range, whose
    // multiplies cost a microcode assist each (measured: pow 2.5x slower at half a mask)
    let xi = if inside { x } else { 1.0 };
    // ln and exp to about 2^-33 relative (a fifth of their terms saved): the error of
    // `p ln x` stays below 2^-26 over f32's range (|p ln x| < 128), a sixteenth of an
    // f32 ulp
    let (k, f, y) = log_parts_f64::<false, false>(xi);
    let ln_x = k * std::f64::consts::LN_2 + (f + y);
    let yc = (p * ln_x).clamp(-746.0, 710.0);
    let (e, ni) = exp_parts_f64::<false>(yc, EXP_F64_DEG8);
    let r = scale_f64(e, ni);
    if inside {
        r
    } else {
        f64::NAN
    }
}

/// f32 functions computed in f64 and rounded once (within 1 ulp where the f64 one is
/// within a few of its own): erf and erfc, whose f64 forms above are branch-free.
macro_rules! in_f64 {
    ($($name:ident = $f:ident),* $(,)?) => {
        $(
            #[doc = concat!("[`", stringify!($f), "`] of an f32, rounded to f32.")]
            #[inline(always)]
            fn $name(x: f32) -> f32 {
                $f(x as f64) as f32
            }
        )*
    };
}

/// The shared parts of fdlibm's `asin` and `acos`, of `z = x^2` below `|x| = 0.5` and
/// `z = (1 - |x|) / 2` above: its rational `R(z) = z P(z) / Q(z)`, which approximates
/// `asin(sqrt z) / sqrt z - 1` over `z` in `[0, 0.25]`; `s = sqrt(z)`; `df`, `s` with its
/// low 32 bits cleared; and `c = (z - df^2) / (s + df)`, so that `df + c` is `s` to twice
/// the precision.
/// Every lane computes every part (the ranges are picked by selects).
// fdlibm's coefficients as published
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn asin_parts_f64(x: f64) -> (f64, f64, f64, f64) {
    const PS: [f64; 6] = [
        3.479_331_075_960_211_675_70e-05,
        7.915_349_942_898_145_321_76e-04,
        -4.005_553_450_067_941_140_27e-02,
        2.012_125_321_348_629_258_81e-01,
        -3.255_658_186_224_009_154_05e-01,
        1.666_666_666_666_666_574_15e-01,
    ];
    const QS: [f64; 5] = [
        7.703_815_055_590_193_527_91e-02,
        -6.882_839_716_054_532_930_30e-01,
        2.020_945_760_233_505_694_71e+00,
        -2.403_394_911_734_414_218_78e+00,
        1.0,
    ];
    let a = x.abs();
    let z = if a < 0.5 { x * x } else { (1.0 - a) * 0.5 };
    let r = z * horner::<f64, false>(&PS, z) / horner::<f64, false>(&QS, z);
    let s = z.sqrt();
    let df = f64::from_bits(s.to_bits() & 0xffff_ffff_0000_0000);
    // 0 / 0 at z = 0 (|x| = 1)
    let c = if z == 0.0 {
        0.0
    } else {
        (z - df * df) / (s + df)
    };
    (r, s, df, c)
}

/// `asin(x)` in f64, branch-free: fdlibm's three ranges (`x + x R(x^2)` below 0.5; from
/// `sqrt((1 - |x|) / 2)` in two parts below 0.975, in one above), picked by selects; NaN
/// beyond 1 (the root of a negative number).
// fdlibm's constants as published
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn asin_f64(x: f64) -> f64 {
    const PIO2_HI: f64 = std::f64::consts::FRAC_PI_2;
    const PIO2_LO: f64 = 6.123_233_995_736_766_035_87e-17;
    const PIO4_HI: f64 = std::f64::consts::FRAC_PI_4;
    let (r, s, df, c) = asin_parts_f64(x);
    let a = x.abs();
    let small = a + a * r;
    let near_one = PIO2_HI - (2.0 * (s + s * r) - PIO2_LO);
    let mid = PIO4_HI - ((2.0 * s * r - (PIO2_LO - 2.0 * c)) - (PIO4_HI - 2.0 * df));
    let t = if a < 0.5 {
        small
    } else if a >= 0.975 {
        near_one
    } else {
        mid
    };
    signed(t, x)
}

/// `acos(x)` in f64, branch-free: fdlibm's three ranges (`pi/2 - (x + x R(x^2))` below
/// 0.5 in magnitude; `pi - 2 asin(sqrt((1 + x) / 2))` below -0.5; `2 asin(sqrt((1 - x) /
/// 2))` above 0.5, the root in two parts), picked by selects: pi at -1, 0 at 1, NaN
/// beyond.
// fdlibm's constants as published
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn acos_f64(x: f64) -> f64 {
    const PIO2_HI: f64 = std::f64::consts::FRAC_PI_2;
    const PIO2_LO: f64 = 6.123_233_995_736_766_035_87e-17;
    const PI: f64 = std::f64::consts::PI;
    let (r, s, df, c) = asin_parts_f64(x);
    let small = PIO2_HI - (x - (PIO2_LO - x * r));
    let below = PI - 2.0 * (s + (r * s - PIO2_LO));
    let above = 2.0 * (df + (r * s + c));
    if x.abs() < 0.5 {
        small
    } else if x < 0.0 {
        below
    } else {
        above
    }
}

/// `sinh(x)`, branch-free: the odd Taylor series below `|x| = 1` ([`Math::SINH_TERMS`]),
/// `(e^a - e^-a) / 2` above, `(e^(a/2) / 2) e^(a/2)` beyond [`Math::EXP_SAFE`] (where
/// `e^a` alone overflows before `sinh` does); the sign of `x`.
#[inline(always)]
fn sinh_of<C: crate::Float + Math>(x: C) -> C {
    let (one, half) = (C::ONE, C::of(0.5));
    let a = x.abs();
    let big = a > C::of(C::EXP_SAFE);
    let e = (if big { half * a } else { a }).exp_k();
    let large = if big {
        (half * e) * e
    } else {
        half * (e - one / e)
    };
    // x + x^3/3! + ... + x^(2m+1)/(2m+1)!, by Horner in z = x^2 (m a constant per type:
    // the loop unrolls)
    let m = C::SINH_TERMS;
    let z = a * a;
    let mut p = C::of(INV_ODD_FACT[m]);
    for k in (1..m).rev() {
        p = madd::<C, FUSED_KERNELS>(p, z, C::of(INV_ODD_FACT[k]));
    }
    let small = a + a * z * p;
    signed(if a < one { small } else { large }, x)
}

/// `1 / (2k + 1)!` for `k` in `0..10` (the sine-like series' coefficients).
const INV_ODD_FACT: [f64; 10] = [
    1.0,
    1.0 / 6.0,
    1.0 / 120.0,
    1.0 / 5_040.0,
    1.0 / 362_880.0,
    1.0 / 39_916_800.0,
    1.0 / 6_227_020_800.0,
    1.0 / 1_307_674_368_000.0,
    1.0 / 355_687_428_096_000.0,
    1.0 / 121_645_100_408_832_000.0,
];

/// `cosh(x)`, branch-free: `(e^a + e^-a) / 2`, `(e^(a/2) / 2) e^(a/2)` beyond
/// [`Math::EXP_SAFE`].
#[inline(always)]
fn cosh_of<C: crate::Float + Math>(x: C) -> C {
    let half = C::of(0.5);
    let a = x.abs();
    let big = a > C::of(C::EXP_SAFE);
    let e = (if big { half * a } else { a }).exp_k();
    if big {
        (half * e) * e
    } else {
        half * (e + C::ONE / e)
    }
}

in_f64!(erf_f32 = erf_f64, erfc_f32 = erfc_f64,);

/// `asin` of `a = |x| <= 1` in f32 (Cephes' `asinf`): the odd polynomial of degree 9
/// below 0.5, `pi/2 - 2 asin(sqrt((1 - a) / 2))` above; NaN beyond 1 (the root of a
/// negative number).
#[inline(always)]
fn asin_abs_f32(a: f32) -> f32 {
    let big = a > 0.5;
    let z = if big { 0.5 * (1.0 - a) } else { a * a };
    let s = if big { z.sqrt() } else { a };
    let p = asin_poly_f32(z, s);
    if big {
        std::f32::consts::FRAC_PI_2 - (p + p)
    } else {
        p
    }
}

/// Cephes' `asinf` polynomial: `asin(s)` for `0 <= s <= 0.5` given `z = s^2` (or the
/// value `s` is the root of).
// Cephes' coefficients as published
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn asin_poly_f32(z: f32, s: f32) -> f32 {
    ((((4.216_319_904_8e-2 * z + 2.418_131_104_9e-2) * z + 4.547_002_599_8e-2) * z
        + 7.495_300_268_6e-2)
        * z
        + 1.666_675_242_2e-1)
        * z
        * s
        + s
}

/// `asin(x)` in f32, branch-free ([`asin_abs_f32`]), the sign of `x`.
#[inline(always)]
fn asin_f32(x: f32) -> f32 {
    f32::from_bits(asin_abs_f32(x.abs()).to_bits() | (x.to_bits() & 0x8000_0000))
}

/// `acos(x)` in f32, branch-free, with one square root: `2 asin(s)` above 0.5, `pi - 2
/// asin(s)` below -0.5 (`s = sqrt((1 - |x|) / 2)`), `pi/2 - asin(x)` between (Cephes'
/// `acosf`; every `asin` argument is at most 0.5, the polynomial's range).
#[inline(always)]
fn acos_f32(x: f32) -> f32 {
    let a = x.abs();
    let far = a > 0.5;
    let z = if far { 0.5 * (1.0 - a) } else { a * a };
    let p = asin_poly_f32(z, if far { z.sqrt() } else { a });
    if far {
        if x > 0.0 {
            p + p
        } else {
            std::f32::consts::PI - (p + p)
        }
    } else {
        std::f32::consts::FRAC_PI_2 - (if x >= 0.0 { p } else { -p })
    }
}

/// `atan2(y, x)` of f32 in f64 ([`atan2_f64`]), rounded to f32.
#[inline(always)]
fn atan2_f32(y: f32, x: f32) -> f32 {
    atan2_f64(y as f64, x as f64) as f32
}

/// Whether every vector kernel this build compiles has fused multiply-adds, and no
/// baseline form of them exists: a native build for an AVX2 or AVX-512 CPU
/// (`masked_kernels::cpu::BUILT_FOR`), an FMA target, or aarch64. Then the functions
/// that only the unary kernels call per element take their `FUSED` form, a
/// multiply-add an instruction: [`asinh_f32`] and [`acosh_f32`] (0.86x and 0.88x the
/// time), sinh and cosh, and the unary ops' `exp` and `ln` ([`Math::exp_k`],
/// [`Math::ln_k`]: f64 exp, sinh, cosh, sigmoid and silu 0.7x, f64 asinh and acosh 0.9x,
/// f32 exp and sigmoid 0.84x), log2, log10 (f32 log, log2, log10 0.86x) and tanh's exp
/// (f32 0.85x, f64 0.76x). Elsewhere (a portable build's baseline form, and on
/// x86-64 any code outside those kernels) `mul_add` is a library call: `exp_full` and
/// `ln` themselves, which scalar loops call per element, stay unfused.
const FUSED_KERNELS: bool = masked_kernels::cpu::NO_BASELINE
    || cfg!(target_feature = "fma")
    || cfg!(target_arch = "aarch64");

/// `ln(u) + if big { ln 2 }` for the inverse hyperbolic functions' upper ranges.
#[inline(always)]
fn ln_plus_ln2_f32<const FUSED: bool>(u: f32, big: bool) -> f32 {
    ln_f32_of::<FUSED>(u) + if big { std::f32::consts::LN_2 } else { 0.0 }
}

/// [`asinh_f32_of`] in this build's form.
#[inline(always)]
fn asinh_f32(x: f32) -> f32 {
    asinh_f32_of::<FUSED_KERNELS>(x)
}

/// [`acosh_f32_of`] in this build's form.
#[inline(always)]
fn acosh_f32(x: f32) -> f32 {
    acosh_f32_of::<FUSED_KERNELS>(x)
}

/// `asinh(x)` in f32, branch-free and without a division (every lane computes every
/// range): `a + a z P(z)` up to 1 (`a = |x|`, `z = a^2`), a polynomial in `a - 1.25` up
/// to 1.5, `ln(a + sqrt(z + 1))` up to 2^12 and `ln(a) + ln 2` beyond; the sign of `x`.
/// The polynomials (scripts/fit_hyperbolic_f32.py) are within 1 ulp, and from 1.5 on the
/// log's argument carries its rounding into a result above 1.19 (within 2 ulp). Its
/// f64 form (a square root and a log with a division, per 8 lanes) took 1.2x numpy's.
/// Multiply-adds fused when `FUSED`.
#[inline(always)]
fn asinh_f32_of<const FUSED: bool>(x: f32) -> f32 {
    const P: [f32; 8] = [
        0.00087153,
        -0.0046014665,
        0.011618178,
        -0.020132653,
        0.029870246,
        -0.044582825,
        0.07499723,
        -0.16666664,
    ];
    const Q: [f32; 8] = [
        -0.0018804212,
        0.0041743596,
        -0.0054224124,
        -0.0007272834,
        0.033693653,
        -0.15236461,
        0.62469506,
        1.047593,
    ];
    let a = x.abs();
    let z = a * a;
    let near = a + a * (z * horner::<f32, FUSED>(&P, z));
    let mid = horner::<f32, FUSED>(&Q, a - 1.25);
    let big = a > 4096.0;
    let far = ln_plus_ln2_f32::<FUSED>(if big { a } else { a + (z + 1.0).sqrt() }, big);
    let r = if a <= 1.0 {
        near
    } else if a <= 1.5 {
        mid
    } else {
        far
    };
    signed(r, x)
}

/// `acosh(x)` in f32, branch-free and without a division: `sqrt(2t) H(t)` up to 2 (`t =
/// x - 1`, exact), `ln(x + sqrt(x^2 - 1))` up to 2^12 and `ln(x) + ln 2` beyond; NaN
/// below 1. As [`asinh_f32_of`] (within 2 ulp).
#[inline(always)]
fn acosh_f32_of<const FUSED: bool>(x: f32) -> f32 {
    const H: [f32; 7] = [
        8.0708385e-05,
        -0.00050028344,
        0.0017804024,
        -0.005541848,
        0.018743843,
        -0.083332956,
        1.0,
    ];
    let t = x - 1.0;
    let near = (t + t).sqrt() * horner::<f32, FUSED>(&H, t);
    let big = x > 4096.0;
    let far = ln_plus_ln2_f32::<FUSED>(if big { x } else { x + (x * x - 1.0).sqrt() }, big);
    if x < 1.0 {
        f32::NAN
    } else if x <= 2.0 {
        near
    } else {
        far
    }
}

/// `x^p` of f32 for the engine's `pow`: `e^(p ln |x|)` in f64 (the product carries f64's
/// precision, so the f32 result is within 1 ulp), times `neg` for a negative `x` (the
/// caller's sign of a negative base's power: 1 for an even integer `p`, -1 for an odd
/// one, NaN for a fractional one); NaN at zeros, infinities and NaNs (the caller
/// recomputes those with `powf`).
#[inline(always)]
fn powf_fast_f32(x: f32, p: f64, neg: f64) -> f32 {
    let xd = x as f64;
    let r = pow_positive_f64(xd.abs(), p);
    (if xd < 0.0 { r * neg } else { r }) as f32
}

/// The sign of a negative base's power `x^p` for [`Math::powf_fast`]: 1 for an even
/// integer `p`, -1 for an odd one, NaN for a fractional (or infinite) one.
pub(crate) fn pow_sign_of_negative(p: f64) -> f64 {
    if p.fract() != 0.0 {
        f64::NAN
    } else if (p * 0.5).fract() != 0.0 {
        -1.0
    } else {
        1.0
    }
}

/// `x^p` of f64 for the engine's `pow`, as [`powf_fast_f32`] does for f32: `e^(p ln |x|)`
/// with `ln |x|` in double-double ([`ln_dd_f64`]) and `p ln |x|` as an exact product
/// plus its rounding error, so that the exponent's error stays below 2^-60 of the
/// result's over f64's range (within 2 ulp of `powf`); times `neg` for a negative `x`;
/// NaN at zeros, infinities and NaNs (the caller recomputes those with `powf`).
#[inline(always)]
fn powf_fast_f64(x: f64, p: f64, neg: f64) -> f64 {
    let a = x.abs();
    let inside = a > 0.0 && a < f64::INFINITY;
    // 1 elsewhere, as pow_positive_f64 (no subnormal multiplies on masked-out zeros)
    let (hi, lo) = ln_dd_f64(if inside { a } else { 1.0 });
    let yh = p * hi;
    let yl = p.mul_add(hi, -yh) + p * lo;
    // beyond these e^y is 0 or inf, whatever the low part
    let (yh, yl) = if yh.abs() < 746.0 {
        (yh, yl)
    } else {
        (yh.clamp(-746.0, 710.0), 0.0)
    };
    let (e, ni) = exp_parts2_f64::<true, true>(yh, yl, &EXP_F64_DEG13);
    let r = scale_f64(e, ni);
    let r = if x < 0.0 { r * neg } else { r };
    if inside {
        r
    } else {
        f64::NAN
    }
}

/// `ln(x)` for a positive finite `x` (normal or subnormal) as `hi + lo`, to about 2^-64
/// relative: with `x = 2^k (1 + f)` and `s = f / (2 + f)` (`|s| < 0.172`),
/// `ln(1 + f) = 2s + (2/3) s^3 + s^5 Q(s^2)`, where `s`, `s^3`, the first two terms and
/// `k ln 2` are carried in double-double and `Q` (the series' next ten terms; the first
/// left out is below 2^-65 of the sum) in f64. Branch-free; its exact products are
/// fused multiply-adds (error-free, so every CPU tier computes the same bits).
#[inline(always)]
fn ln_dd_f64(x: f64) -> (f64, f64) {
    const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000); // k * LN2_HI is exact
    const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
    const TWO_THIRDS_LO: f64 = 3.700_743_415_417_188e-17; // 2/3 - (2/3 as f64)
    let (k, f) = split_f64(x);
    // s = f / (2 + f) as sh + sl
    let d = 2.0 + f;
    let dl = (2.0 - d) + f; // 2 + f = d + dl exactly
    let inv = 1.0 / d;
    let sh = f * inv;
    let sl = ((-sh).mul_add(d, f) - sh * dl) * inv;
    // s^2 = z + zl, s^3 = c + cl, (2/3) s^3 = t + tl
    let z = sh * sh;
    let zl = sh.mul_add(sh, -z) + 2.0 * sh * sl;
    let c = z * sh;
    let cl = z.mul_add(sh, -c) + (zl * sh + z * sl);
    let t = c * (2.0 / 3.0);
    let tl = c.mul_add(2.0 / 3.0, -t) + (cl * (2.0 / 3.0) + c * TWO_THIRDS_LO);
    // 2 / (2j + 5) for j in 0..10, highest first
    let mut q = 2.0 / 23.0;
    for j in (0..9).rev() {
        q = q.mul_add(z, 2.0 / (2 * j + 5) as f64);
    }
    let q = z * z * sh * q;
    // 2s + t (|t| < |2s| / 100), then k ln 2 beside it (either may be the larger)
    let two_s = 2.0 * sh;
    let hi = two_s + t;
    let lo = ((two_s - hi) + t) + (2.0 * sl + tl + q);
    let kh = k * LN2_HI;
    let sum = kh + hi;
    let b = sum - kh;
    let err = (kh - (sum - b)) + (hi - b);
    let lo = err + (lo + k * LN2_LO);
    let h = sum + lo;
    (h, (sum - h) + lo)
}

/// `tanh(x)` in f32, branch-free: Cephes' odd polynomial below `|x| = 0.625`,
/// `1 - 2 / (e^(2|x|) + 1)` above (1 once `e^(2|x|)` overflows), the sign of `x`.
// Cephes' coefficients as published
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let p = ((((-5.704_988_7e-3 * z + 2.063_908_9e-2) * z - 5.373_971_6e-2) * z + 1.333_144_2e-1)
        * z
        - 3.333_328_2e-1)
        * z
        * x
        + x;
    let big = 1.0 - 2.0 / (exp_f32_of::<FUSED_KERNELS>(a + a) + 1.0);
    let r = if a < 0.625 { p.abs() } else { big };
    // tanh is odd: the sign of x (-0 at -0, which the polynomial loses)
    f32::from_bits(r.to_bits() | (x.to_bits() & 0x8000_0000))
}

/// `tanh(x)` in f64, branch-free: Cephes' `tanh` (an odd rational function below
/// `|x| = 0.625`, `1 - 2 / (e^(2|x|) + 1)` above with the engine's branch-free `exp`, 1
/// once it overflows), the sign of `x` (`-0` at `-0`); NaN propagates.
// Cephes' coefficients as published
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn tanh_f64(x: f64) -> f64 {
    let a = x.abs();
    let z = x * x;
    let p = (-9.643_991_794_250_522_386_28e-1 * z - 9.928_772_310_019_185_865_64e1) * z
        - 1.614_687_684_417_084_479_52e3;
    let q = ((z + 1.128_116_784_916_329_314_02e2) * z + 2.235_488_390_601_004_485_83e3) * z
        + 4.844_063_053_251_254_860_48e3;
    let small = a + a * (z * p / q);
    let big = 1.0 - 2.0 / (exp_f64_of::<FUSED_KERNELS>(a + a) + 1.0);
    let r = if a < 0.625 { small } else { big };
    f64::from_bits(r.to_bits() | (x.to_bits() & 0x8000_0000_0000_0000))
}

/// `sin r` and `cos r` in f32 for `x = n pi/2 + r`, `|r| <= pi/4`, and `n mod 4`: the
/// shared core of the f32 sine and cosine, within 2 ulp for `|x| < 2^19` (tested),
/// branch-free (loops over it vectorise). The reduction subtracts pi/2 in three f32
/// parts with fused multiply-adds (each product exact inside the fma, so the result does
/// not depend on the CPU tier: without FMA instructions `mul_add` is the exact libm
/// call, slower); Cephes' `sinf` / `cosf` polynomials.
// Cephes' coefficients as published
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn trig_parts_f32(x: f32) -> (f32, f32, u32) {
    // pi/2 = P1 + P2 + P3 to 72 bits
    const P1: f32 = f32::from_bits(0x3fc9_0fdb);
    const P2: f32 = f32::from_bits(0xb33b_bd2e);
    const P3: f32 = f32::from_bits(0xa6f7_2ced);
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let t = x.mul_add(std::f32::consts::FRAC_2_PI, MAGIC);
    let n = t - MAGIC;
    let r = (-n).mul_add(P1, x);
    let r = (-n).mul_add(P2, r);
    let r = (-n).mul_add(P3, r);
    let z = r * r;
    let s = ((-1.951_529_589_1e-4 * z + 8.332_160_873_6e-3) * z - 1.666_665_461_1e-1) * z * r + r;
    // sin(-0) = -0 (the reduction's sums give +0; r is 0 only at x = 0)
    let s = if x == 0.0 { x } else { s };
    let c = ((2.443_315_711_809_948e-5 * z - 1.388_731_625_493_765e-3) * z
        + 4.166_664_568_298_827e-2)
        * z
        * z
        - 0.5 * z
        + 1.0;
    // n mod 4 from the low mantissa bits of t (two's complement for negative n)
    (s, c, t.to_bits())
}

/// Where the f32 trigonometric functions apply: `|x| < 2^19`.
const F32_TRIG_LIMIT: f32 = 524_288.0;

/// `v` where `|x| < F32_TRIG_LIMIT`, else NaN (which the map recomputes).
#[inline(always)]
fn within_trig_limit(x: f32, v: f32) -> f32 {
    if x.abs() < F32_TRIG_LIMIT {
        v
    } else {
        f32::NAN
    }
}

/// `sin(x + shift pi/2)` in f32 for `|x| < 2^19` (NaN beyond), branch-free:
/// [`trig_parts_f32`] by quadrant.
#[inline(always)]
fn sin_quadrant_f32(x: f32, shift: u32) -> f32 {
    let (s, c, q) = trig_parts_f32(x);
    let q = q.wrapping_add(shift);
    let v = if q & 1 == 0 { s } else { c };
    within_trig_limit(x, if q & 2 == 0 { v } else { -v })
}

/// `sin(x)` in f32 for `|x| < 2^19` (NaN beyond), branch-free.
#[inline(always)]
fn sin_f32(x: f32) -> f32 {
    sin_quadrant_f32(x, 0)
}

/// `cos(x)` in f32 for `|x| < 2^19` (NaN beyond), branch-free: `sin(x + pi/2)`.
#[inline(always)]
fn cos_f32(x: f32) -> f32 {
    sin_quadrant_f32(x, 1)
}

/// `tan(x)` in f32 for `|x| < 2^19` (NaN beyond), branch-free, in f64 (the quotient of two f32
/// polynomials reached 4 ulp): `x = n pi/2 + r` by Cody-Waite in f64 (`n` fits 19 bits,
/// so `n` times the 33-bit head of pi/2 is exact), Taylor polynomials of `sin r` and
/// `cos r` (truncation below 2e-9 relative on `|r| <= pi/4`), `sin r / cos r`, or
/// `-cos r / sin r` in the odd quadrants, rounded once to f32. NaN and infinities give
/// NaN.
#[inline(always)]
fn tan_f32(x: f32) -> f32 {
    // fdlibm's pi/2: 33 leading bits, then the rest
    const PIO2_1: f64 = 1.570_796_326_734_125_6;
    const PIO2_1T: f64 = 6.077_100_506_506_192e-11;
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52
    let xd = x as f64;
    let t = xd * std::f64::consts::FRAC_2_PI + MAGIC;
    let n = t - MAGIC;
    let r = (xd - n * PIO2_1) - n * PIO2_1T;
    let z = r * r;
    // r (1 + ...), not r + r (...): the sign of r survives at -0
    let s = r
        * (1.0
            + z * (-1.0 / 6.0 + z * (1.0 / 120.0 + z * (-1.0 / 5040.0 + z * (1.0 / 362_880.0)))));
    let c = 1.0
        + z * (-0.5
            + z * (1.0 / 24.0
                + z * (-1.0 / 720.0 + z * (1.0 / 40_320.0 + z * (-1.0 / 3_628_800.0)))));
    let (a, b) = if t.to_bits() & 1 == 1 {
        (-c, s)
    } else {
        (s, c)
    };
    within_trig_limit(x, (a / b) as f32)
}

/// `sin r` and `cos r` in f64 for `x = n pi/2 + r`, `|r| <= pi/4`, and the bits of
/// `n` (low bits: `n mod 4`): the shared core of the f64 sine and cosine, within 1 ulp of
/// the std functions for `|x| < 2^30` (tested), branch-free (loops over it vectorise).
/// pi/2 in three doubles (159 bits) subtracted with fused multiply-adds: the first step
/// is exact (the difference fits 53 bits), the others round once each, so even the
/// arguments nearest a multiple of pi/2 keep their relative accuracy; musl's `__sin` and
/// `__cos` kernels (fdlibm's polynomials) without the reduction's tail.
// fdlibm's coefficients as published
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn trig_parts_f64(x: f64) -> (f64, f64, u64) {
    const P1: f64 = f64::from_bits(0x3ff9_21fb_5444_2d18);
    const P2: f64 = f64::from_bits(0x3c91_a626_3314_5c07);
    const P3: f64 = f64::from_bits(0xb91f_1976_b7ed_8fbc);
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52: adding it rounds to an integer
    const S1: f64 = -1.666_666_666_666_663_243_48e-01;
    const S2: f64 = 8.333_333_333_322_489_461_24e-03;
    const S3: f64 = -1.984_126_982_985_794_931_34e-04;
    const S4: f64 = 2.755_731_370_707_006_767_89e-06;
    const S5: f64 = -2.505_076_025_340_686_341_95e-08;
    const S6: f64 = 1.589_690_995_211_550_102_21e-10;
    const C1: f64 = 4.166_666_666_666_660_190_37e-02;
    const C2: f64 = -1.388_888_888_887_410_957_49e-03;
    const C3: f64 = 2.480_158_728_947_672_941_78e-05;
    const C4: f64 = -2.755_731_435_139_066_330_35e-07;
    const C5: f64 = 2.087_572_321_298_174_827_90e-09;
    const C6: f64 = -1.135_964_755_778_819_482_65e-11;
    let t = x.mul_add(std::f64::consts::FRAC_2_PI, MAGIC);
    let n = t - MAGIC;
    let r = (-n).mul_add(P1, x);
    let r = (-n).mul_add(P2, r);
    let r = (-n).mul_add(P3, r);
    let z = r * r;
    let w = z * z;
    let p = S2 + z * (S3 + z * S4) + z * w * (S5 + z * S6);
    let s = r + z * r * (S1 + z * p);
    // sin(-0) = -0 (the polynomial's sum gives +0; r is 0 only at x = 0)
    let s = if x == 0.0 { x } else { s };
    let q = z * (C1 + z * (C2 + z * C3)) + w * w * (C4 + z * (C5 + z * C6));
    // 1 - z/2 with its rounding error added back (musl's compensated form)
    let hz = 0.5 * z;
    let one_hz = 1.0 - hz;
    let c = one_hz + (((1.0 - one_hz) - hz) + z * q);
    // n mod 4 from the low mantissa bits of t (two's complement for negative n)
    (s, c, t.to_bits())
}

/// Where the f64 sine, cosine and tangent apply: `|x| < 2^30`.
const F64_TRIG_LIMIT: f64 = 1_073_741_824.0;

/// `sin(x + shift pi/2)` in f64 for `|x| < 2^30` (NaN beyond), branch-free:
/// [`trig_parts_f64`] by quadrant.
#[inline(always)]
fn sin_quadrant_f64(x: f64, shift: u64) -> f64 {
    let (s, c, q) = trig_parts_f64(x);
    let q = q.wrapping_add(shift);
    let v = if q & 1 == 0 { s } else { c };
    let v = if q & 2 == 0 { v } else { -v };
    if x.abs() < F64_TRIG_LIMIT {
        v
    } else {
        f64::NAN
    }
}

/// `sin(x)` in f64 for `|x| < 2^30` (NaN beyond), branch-free.
#[inline(always)]
fn sin_f64(x: f64) -> f64 {
    sin_quadrant_f64(x, 0)
}

/// `cos(x)` in f64 for `|x| < 2^30` (NaN beyond), branch-free: `sin(x + pi/2)`.
#[inline(always)]
fn cos_f64(x: f64) -> f64 {
    sin_quadrant_f64(x, 1)
}

/// `tan(x)` in f64 for `|x| < 2^30` (NaN beyond), branch-free: `sin r / cos r` from
/// [`trig_parts_f64`], or `-cos r / sin r` in the odd quadrants.
#[inline(always)]
fn tan_f64(x: f64) -> f64 {
    let (s, c, q) = trig_parts_f64(x);
    let (a, b) = if q & 1 == 0 { (s, c) } else { (-c, s) };
    if x.abs() < F64_TRIG_LIMIT {
        a / b
    } else {
        f64::NAN
    }
}

/// `atan(x)` in f32 over the whole range, branch-free (vectorises): Cephes' `atanf`
/// (the argument reduced to `|t| <= tan(pi/8)` by `-1/|x|` above `tan(3 pi/8)` and
/// `(|x| - 1)/(|x| + 1)` above `tan(pi/8)`, an odd polynomial of degree 9), the sign of
/// `x` (`-0` at `-0`).
// Cephes' coefficients as published
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn atan_f32(x: f32) -> f32 {
    let a = x.abs();
    let big = a > 2.414_213_562_373_095;
    let mid = a > 0.414_213_562_373_095;
    let t = if big {
        -1.0 / a
    } else if mid {
        (a - 1.0) / (a + 1.0)
    } else {
        a
    };
    let y0 = if big {
        std::f32::consts::FRAC_PI_2
    } else if mid {
        std::f32::consts::FRAC_PI_4
    } else {
        0.0
    };
    let z = t * t;
    let p = (((8.053_744_495_38e-2 * z - 1.387_768_560_32e-1) * z + 1.997_771_064_78e-1) * z
        - 3.333_294_915_39e-1)
        * z
        * t
        + t;
    f32::from_bits((y0 + p).to_bits() | (x.to_bits() & 0x8000_0000))
}

/// `atan(x)` in f64 over the whole range, branch-free (vectorises): fdlibm's `atan`
/// with its five argument ranges chosen by selects (one quotient `num / den` covers the
/// four reductions), `atan` of the range's breakpoint in two parts (0 for the first
/// range, where the same formula is fdlibm's `x - x (s1 + s2)`), the degree-22
/// polynomial; the sign of `x` (`-0` at `-0`); NaN propagates.
// fdlibm's coefficients as published
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn atan_f64(x: f64) -> f64 {
    const AT: [f64; 11] = [
        3.333_333_333_333_293_180_27e-01,
        -1.999_999_999_987_648_324_76e-01,
        1.428_571_427_250_346_637_11e-01,
        -1.111_111_040_546_235_578_80e-01,
        9.090_887_133_436_506_561_96e-02,
        -7.691_876_205_044_829_994_95e-02,
        6.661_073_137_387_531_206_69e-02,
        -5.833_570_133_790_573_486_45e-02,
        4.976_877_994_615_932_360_17e-02,
        -3.653_157_274_421_691_552_70e-02,
        1.628_582_011_536_578_236_23e-02,
    ];
    let a = x.abs();
    // fdlibm's breakpoints: 7/16, 11/16, 19/16, 39/16
    let (num, den, hi, lo) = if a < 0.4375 {
        (a, 1.0, 0.0, 0.0)
    } else if a < 0.6875 {
        (
            2.0 * a - 1.0,
            2.0 + a,
            4.636_476_090_008_060_935_15e-01,
            2.269_877_745_296_168_709_24e-17,
        )
    } else if a < 1.1875 {
        (
            a - 1.0,
            a + 1.0,
            std::f64::consts::FRAC_PI_4,
            3.061_616_997_868_383_017_93e-17,
        )
    } else if a < 2.4375 {
        (
            a - 1.5,
            1.0 + 1.5 * a,
            9.827_937_232_473_290_540_82e-01,
            1.390_331_103_123_099_845_16e-17,
        )
    } else {
        (
            -1.0,
            a,
            std::f64::consts::FRAC_PI_2,
            6.123_233_995_736_766_035_87e-17,
        )
    };
    let t = num / den;
    let z = t * t;
    let w = z * z;
    let s1 = z * (AT[0] + w * (AT[2] + w * (AT[4] + w * (AT[6] + w * (AT[8] + w * AT[10])))));
    let s2 = w * (AT[1] + w * (AT[3] + w * (AT[5] + w * (AT[7] + w * AT[9]))));
    let r = hi - ((t * (s1 + s2) - lo) - t);
    f64::from_bits(r.to_bits() | (x.to_bits() & 0x8000_0000_0000_0000))
}

/// `x = 2^k (1 + f)` for a positive finite `x` (subnormals scaled first), with `1 + f`
/// in `[sqrt(1/2), sqrt(2))`: `(k, f)`, `f` exact (Sterbenz: `m` or `m / 2` is within a
/// factor of 2 of 1). The reduction every f64 logarithm starts from.
#[inline(always)]
fn split_f64(x: f64) -> (f64, f64) {
    let sub = x < f64::MIN_POSITIVE;
    let xs = if sub { x * 18_014_398_509_481_984.0 } else { x }; // 2^54
    let bits = xs.to_bits();
    // m in [1, 2): x = 2^k m
    let k = ((bits >> 52) & 0x7ff) as i64 - 1023 - if sub { 54 } else { 0 };
    let m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    let high = m > std::f64::consts::SQRT_2;
    let f = if high { 0.5 * m - 1.0 } else { m - 1.0 };
    ((if high { k + 1 } else { k }) as f64, f)
}

/// `x = 2^k (1 + f)` with `1 + f` in `[sqrt(1/2), sqrt(2))`, and `ln(1 + f) - f`
/// (fdlibm's `__ieee754_log` reduction and polynomial, below 1 ulp; without `FULL` its
/// first five terms, to about 2^-33 relative), for positive finite `x` (subnormals
/// scaled first). Branch-free: loops over it vectorise.
// fdlibm's constants as published
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn log_parts_f64<const FULL: bool, const FUSED: bool>(x: f64) -> (f64, f64, f64) {
    const LG: [f64; 7] = [
        6.666_666_666_666_735e-1,
        3.999_999_999_940_942e-1,
        2.857_142_874_366_239e-1,
        2.222_219_843_214_978_4e-1,
        1.818_357_216_161_805e-1,
        1.531_383_769_920_937_3e-1,
        1.479_819_860_511_658_6e-1,
    ];
    let (k, f) = split_f64(x);
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let fma = madd::<f64, FUSED>;
    let (t1, t2) = if FULL {
        (
            w * fma(w, fma(w, LG[5], LG[3]), LG[1]),
            z * fma(w, fma(w, fma(w, LG[6], LG[4]), LG[2]), LG[0]),
        )
    } else {
        // to about 2^-33 relative (the two terms left out are below 0.16 s^12)
        (
            w * fma(w, LG[3], LG[1]),
            z * fma(w, fma(w, LG[4], LG[2]), LG[0]),
        )
    };
    let hfsq = 0.5 * f * f;
    // ln(1 + f) - f = s (hfsq + R) - hfsq
    (k, f, s * (hfsq + t1 + t2) - hfsq)
}

/// `ln(x)` in f64, branch-free (vectorises): fdlibm's `log` (below 1 ulp).
#[inline(always)]
pub(crate) fn ln_f64(x: f64) -> f64 {
    ln_f64_of::<false>(x)
}

/// [`ln_f64`], its polynomial fused when `FUSED`.
// fdlibm's constants as published
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn ln_f64_of<const FUSED: bool>(x: f64) -> f64 {
    const LN2_HI: f64 = 6.931_471_803_691_238_2e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    let (k, f, y) = log_parts_f64::<true, FUSED>(x);
    log_specials(x, k * LN2_HI + (f + (y + k * LN2_LO)))
}

/// `log2(x)` in f64, branch-free: the exponent added exactly (powers of 2 give exact
/// integers) to `ln(1 + f) / ln 2`, the `f` term split in two parts.
// fdlibm's constants as published
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn log2_f64_of<const FUSED: bool>(x: f64) -> f64 {
    const IVLN2HI: f64 = 1.442_695_040_721_446_2; // the high 32 bits of 1 / ln 2
    const IVLN2LO: f64 = 1.675_171_316_488_651e-10;
    let (k, f, y) = log_parts_f64::<true, FUSED>(x);
    let hi = f64::from_bits(f.to_bits() & 0xffff_ffff_0000_0000);
    let lo = (f - hi) + y;
    let (val_hi, val_lo) = (hi * IVLN2HI, (lo + hi) * IVLN2LO + lo * IVLN2HI);
    // k + val_hi with its rounding error carried (k is exact)
    let w = k + val_hi;
    log_specials(x, w + (val_lo + ((k - w) + val_hi)))
}

/// `log10(x)` in f64, branch-free: `ln(x) / ln 10` with `log10(2)` and `1 / ln 10` in
/// two parts.
// fdlibm's constants as published
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn log10_f64_of<const FUSED: bool>(x: f64) -> f64 {
    const IVLN10HI: f64 = 4.342_944_818_781_689e-1;
    const IVLN10LO: f64 = 2.508_294_671_164_527_5e-11;
    const LOG10_2HI: f64 = 3.010_299_956_636_117_7e-1;
    const LOG10_2LO: f64 = 3.694_239_077_158_931e-13;
    let (k, f, y) = log_parts_f64::<true, FUSED>(x);
    let hi = f64::from_bits(f.to_bits() & 0xffff_ffff_0000_0000);
    let lo = (f - hi) + y;
    let (y2, val_hi) = (k * LOG10_2HI, hi * IVLN10HI);
    let val_lo = k * LOG10_2LO + (lo + hi) * IVLN10LO + lo * IVLN10HI;
    let w = y2 + val_hi;
    log_specials(x, w + (val_lo + ((y2 - w) + val_hi)))
}

/// `e^x` in f64 over the whole range, as [`exp_f32_of`] with the degree-12 polynomial.
#[inline(always)]
fn exp_f64_of<const FUSED: bool>(x: f64) -> f64 {
    let xc = if x < -746.0 { -746.0 } else { x };
    let xc = if xc > 710.0 { 710.0 } else { xc };
    let (p, ni) = exp_parts_f64::<FUSED>(xc, EXP_F64_DEG12);
    scale_f64(p, ni)
}

/// `p 2^n` as two factors, so that overflow gives inf and the subnormal range is rounded
/// by the final multiply.
#[inline(always)]
fn scale_f64(p: f64, ni: i64) -> f64 {
    let h = ni >> 1;
    let s1 = f64::from_bits(((h + 1023) as u64) << 52);
    let s2 = f64::from_bits(((ni - h + 1023) as u64) << 52);
    p * s1 * s2
}

/// `e^(hi + lo)` for `hi` in `[-800, 0]` and `|lo| < 1` (erfc's tails): one reduction of
/// the sum with `lo` kept beside `hi` ([`exp_parts2_f64`]); 0 below -746.
#[inline(always)]
fn exp_sum_f64(hi: f64, lo: f64) -> f64 {
    let (p, ni) = exp_parts2_f64::<false, true>(hi, lo, &EXP_F64_DEG13);
    if hi + lo < -746.0 {
        0.0
    } else {
        scale_f64(p, ni)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `got(x)` against `want(x)` (the pair `f(x)` gives) at every `x`: within the
    /// contract's 4 ulp each, and at most `max` ulp at the worst.
    fn check_ulps<X: Copy + std::fmt::LowerExp, Y: Copy + std::fmt::LowerExp>(
        name: &str, xs: impl Iterator<Item = X>, f: impl Fn(X) -> (Y, Y),
        ulps: impl Fn(Y, Y) -> u64, max: u64,
    ) {
        let mut worst: Option<(u64, X)> = None;
        for x in xs {
            let (got, want) = f(x);
            let e = ulps(got, want);
            assert!(
                e <= 4,
                "{name}({x:e}): got {got:e}, want {want:e} ({e} ulp)"
            );
            if worst.is_none_or(|w| e > w.0) {
                worst = Some((e, x));
            }
        }
        if let Some((e, x)) = worst {
            eprintln!("{name}: worst {e} ulp at {x:e}");
            assert!(e <= max, "{name}: worst {e} ulp at {x:e}");
        }
    }

    /// Distance in ulp between two floats: 0 for two NaNs, a huge number for a NaN
    /// against a number; `key` maps raw bits to an order-preserving integer.
    fn ulps_by<X: Copy>(a: X, b: X, is_nan: fn(X) -> bool, key: impl Fn(X) -> i128) -> u64 {
        if is_nan(a) || is_nan(b) {
            return if is_nan(a) && is_nan(b) { 0 } else { u64::MAX };
        }
        key(a).abs_diff(key(b)) as u64
    }

    /// The order-preserving integer of raw float bits whose sign bit is `sign`.
    fn order_key(bits: u64, sign: u64) -> i128 {
        let (b, s) = (bits as i128, sign as i128);
        if b < s {
            b
        } else {
            s - b
        }
    }

    fn ulps(a: f32, b: f32) -> u64 {
        ulps_by(a, b, f32::is_nan, |x| {
            order_key(x.to_bits() as u64, 1 << 31)
        })
    }

    fn ulps64(a: f64, b: f64) -> u64 {
        ulps_by(a, b, f64::is_nan, |x| order_key(x.to_bits(), 1 << 63))
    }

    /// The f32 logarithms, log1p, expm1, tanh and atan against f64's std functions rounded to
    /// f32 (correctly rounded in practice) over the whole f32 range: every 1021st bit
    /// pattern (both signs, subnormals, infinities, NaNs) plus the special values; within
    /// the contract's 4 ulp (the worst seen is asserted below that).
    #[test]
    fn f32_functions_are_accurate_over_the_range() {
        type F = (&'static str, fn(f32) -> f32, fn(f64) -> f64);
        let fns: [F; 21] = [
            ("atan", atan_f32, f64::atan),
            ("ln", ln_f32, f64::ln),
            ("log2", log2_f32_of::<false>, f64::log2),
            ("log10", log10_f32_of::<false>, f64::log10),
            ("log2 fused", log2_f32_of::<true>, f64::log2),
            ("log10 fused", log10_f32_of::<true>, f64::log10),
            ("ln fused", ln_f32_of::<true>, f64::ln),
            ("ln_1p", ln_1p_of::<f32>, f64::ln_1p),
            ("exp_m1", exp_m1_f32, f64::exp_m1),
            ("tanh", tanh_f32, f64::tanh),
            ("asinh", asinh_f32_of::<false>, libm::asinh),
            ("acosh", acosh_f32_of::<false>, acosh_ref),
            ("asinh fused", asinh_f32_of::<true>, libm::asinh),
            ("acosh fused", acosh_f32_of::<true>, acosh_ref),
            ("atanh", atanh_of::<f32>, libm::atanh),
            ("erf", erf_f32, libm::erf),
            ("erfc", erfc_f32, libm::erfc),
            ("asin", asin_f32, f64::asin),
            ("acos", acos_f32, f64::acos),
            ("sinh", sinh_of::<f32>, f64::sinh),
            ("cosh", cosh_of::<f32>, f64::cosh),
        ];
        let specials = [
            0.0f32,
            -0.0,
            1.0,
            -1.0,
            2.0,
            8.0,
            10.0,
            0.5,
            f32::MIN_POSITIVE,
            1e-45,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            0.625,
            -0.625,
            88.7,
            89.0,
            -104.0,
            1e-8,
            -1e-8,
            0.999_999_94,
            1.000_000_1,
            -0.999_999_94,
        ];
        for (name, f, g) in fns {
            let xs = (0..u32::MAX / 1021)
                .map(|k| f32::from_bits(k * 1021))
                .chain(specials);
            check_ulps(name, xs, |x| (f(x), g(x as f64) as f32), ulps, 3);
        }
        // exact where users expect it
        for log2_f32 in [log2_f32_of::<false>, log2_f32_of::<true>] {
            assert_eq!(log2_f32(8.0), 3.0);
            assert_eq!(log2_f32(0.25), -2.0);
        }
        assert_eq!(ln_f32(1.0), 0.0);
        assert_eq!(tanh_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(ln_1p_of(-1.0f32), f32::NEG_INFINITY);
        assert_eq!(exp_m1_f32(f32::NEG_INFINITY), -1.0);
        assert_eq!(exp_m1_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(exp_m1_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_m1_f32(89.0), f32::INFINITY);
        assert_eq!(atanh_of(-1.0f32), f32::NEG_INFINITY);
        assert_eq!(erfc_f32(f32::NEG_INFINITY), 2.0);
        assert_eq!(erf_f32(-0.0).to_bits(), (-0.0f32).to_bits());
    }

    /// The acosh reference: libm's, NaN below 1 (where libm's is not).
    fn acosh_ref(x: f64) -> f64 {
        if x < 1.0 {
            f64::NAN
        } else {
            libm::acosh(x)
        }
    }

    /// 2^22 bit patterns spread over the whole f64 range (both signs, subnormals,
    /// infinities, NaNs).
    fn spread64() -> impl Iterator<Item = f64> {
        (0..1u64 << 22).map(|k| f64::from_bits(k.wrapping_mul(0x1000_0000_0001)))
    }

    /// `b`, its neighbours and their negations, for each of `bs`.
    fn around(bs: &[f64]) -> Vec<f64> {
        bs.iter()
            .flat_map(|&b| {
                [
                    b,
                    b.next_up(),
                    b.next_down(),
                    -b,
                    -b.next_up(),
                    -b.next_down(),
                ]
            })
            .chain([0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN])
            .collect()
    }

    /// f64 asin, acos, sinh, cosh, log1p, expm1, the inverse hyperbolic functions, erf and
    /// erfc against Rust's std
    /// functions (libm's for erf / erfc) over the whole range (`spread64`), a dense grid
    /// of [-8, 8] where the ranges switch, and each range's breakpoints with their
    /// neighbours; within 2 ulp (the contract: 4), erfc within 3 (libm's erfc is itself up
    /// to 2 ulp off in its tails, a product of two exps: see the next test) and sinh
    /// within 3 (`(e^a - e^-a) / 2` carries exp's error). std's asinh
    /// overflows above `f64::MAX / 2` and libm's acosh is not NaN below -1, so those two
    /// references are libm's asinh and libm's acosh with NaN below 1.
    #[test]
    fn f64_functions_are_accurate_over_the_range() {
        type F = (&'static str, fn(f64) -> f64, fn(f64) -> f64, u64);
        let fns: [F; 11] = [
            ("asin", asin_f64, f64::asin, 2),
            ("acos", acos_f64, f64::acos, 2),
            ("sinh", sinh_of::<f64>, f64::sinh, 3),
            ("cosh", cosh_of::<f64>, f64::cosh, 2),
            ("ln_1p", ln_1p_of::<f64>, f64::ln_1p, 2),
            ("exp_m1", exp_m1_f64, f64::exp_m1, 2),
            ("asinh", asinh_of::<f64>, libm::asinh, 2),
            ("acosh", acosh_of::<f64>, acosh_ref, 2),
            ("atanh", atanh_of::<f64>, libm::atanh, 2),
            ("erf", erf_f64, libm::erf, 2),
            ("erfc", erfc_f64, libm::erfc, 3),
        ];
        let breaks = around(&[
            0.84375,
            1.25,
            2.857_142_857_142_857,
            6.0,
            28.0,
            26.5,
            0.25,
            0.5,
            1.0,
            2.0,
            268_435_456.0,
            1e-300,
            1e300,
            709.0,
            1e-9,
        ]);
        for (name, f, g, max) in fns {
            let grid = (0..1u64 << 20).map(|k| -8.0 + 16.0 * k as f64 / (1u64 << 20) as f64);
            let xs = spread64().chain(grid).chain(breaks.iter().copied());
            check_ulps(name, xs, |x| (f(x), g(x)), ulps64, max);
        }
        assert_eq!(erf_f64(f64::INFINITY), 1.0);
        assert_eq!(erfc_f64(f64::INFINITY), 0.0);
        assert_eq!(erfc_f64(f64::NEG_INFINITY), 2.0);
        assert_eq!(asinh_of(-0.0f64).to_bits(), (-0.0f64).to_bits());
        assert_eq!(exp_m1_f64(-0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(exp_m1_f64(f64::NEG_INFINITY), -1.0);
        assert_eq!(exp_m1_f64(-745.0), -1.0);
        assert_eq!(exp_m1_f64(f64::INFINITY), f64::INFINITY);
        assert_eq!(exp_m1_f64(709.8), f64::INFINITY);
        assert!(exp_m1_f64(f64::NAN).is_nan());
        assert_eq!(exp_m1_f64(1e-300), 1e-300);
        assert_eq!(acosh_of(1.0f64), 0.0);
        assert!(acosh_of(0.5f64).is_nan() && atanh_of(1.5f64).is_nan());
    }

    /// erf and erfc against mpmath's at 200 bits, rounded to f64 (generated once in
    /// Python: `float(mpmath.erf(x))`), in every range of the f64 form and its tails down
    /// to a subnormal result: within 1 ulp.
    #[test]
    fn erf_erfc_match_mpmath() {
        #[allow(clippy::excessive_precision)]
        let golden: [(f64, f64, f64); 18] = [
            (0.1, 0.1124629160182849, 0.887537083981715),
            (0.5, 0.5204998778130465, 0.4795001221869535),
            (0.84375, 0.7672256612323416, 0.23277433876765838),
            (1.0, 0.8427007929497149, 0.15729920705028513),
            (1.3, 0.9340079449406524, 0.06599205505934755),
            (1.5470733642578125, 0.9713225395651269, 0.028677460434873105),
            (2.0, 0.9953222650189527, 0.004677734981047266),
            (2.857, 0.9999466417399131, 5.3358260086846374e-05),
            (3.5, 0.9999992569016276, 7.430983723414128e-07),
            (5.92187500116449, 1.0, 5.5319640401350367e-17),
            (6.5, 1.0, 3.8421483271206475e-20),
            (10.0, 1.0, 2.088487583762545e-45),
            (20.0, 1.0, 5.395865611607901e-176),
            (26.0, 1.0, 5.663192408856143e-296),
            (27.0, 1.0, 5.23705e-319),
            (-0.3, -0.3286267594591274, 1.3286267594591274),
            (-1.1, -0.8802050695740817, 1.8802050695740817),
            (-3.0, -0.9999779095030014, 1.9999779095030015),
        ];
        for (x, erf, erfc) in golden {
            assert!(
                ulps64(erf_f64(x), erf) <= 1,
                "erf({x}) = {:e}, want {erf:e}",
                erf_f64(x)
            );
            assert!(
                ulps64(erfc_f64(x), erfc) <= 1,
                "erfc({x}) = {:e}, want {erfc:e}",
                erfc_f64(x)
            );
        }
    }

    /// atan2 in f64 and f32 against the std functions: pairs from the spread patterns
    /// (every quadrant, zeros, infinities, NaNs), the IEEE special pairs, and angles near
    /// the axes, where `x < 0` adds pi; f64 within 2 ulp, f32 within 1.
    #[test]
    fn atan2_is_accurate_in_every_quadrant() {
        let specials = around(&[1.0, 1e-300, 1e300, 3.0, f64::MIN_POSITIVE]);
        let pairs: Vec<(f64, f64)> = spread64()
            .step_by(3)
            .zip(spread64().skip(1 << 20))
            .chain(
                specials
                    .iter()
                    .flat_map(|&y| specials.iter().map(move |&x| (y, x))),
            )
            .chain((0..1u64 << 16).map(|k| (1e-3 * k as f64, -1.0)))
            .collect();
        let mut worst = 0;
        for &(y, x) in &pairs {
            let (got, want) = (atan2_f64(y, x), y.atan2(x));
            let e = ulps64(got, want);
            assert!(e <= 2, "atan2({y:e}, {x:e}): got {got:e}, want {want:e}");
            worst = worst.max(e);
            let (y, x) = (y as f32, x as f32);
            let (got, want) = (atan2_f32(y, x), (y as f64).atan2(x as f64) as f32);
            assert!(
                ulps(got, want) <= 1,
                "atan2({y:e}, {x:e}): got {got:e}, want {want:e}"
            );
        }
        eprintln!("atan2 f64: worst {worst} ulp");
    }

    /// The exponents the pow tests raise to: integers of both signs and parities, halves,
    /// thirds, large ones.
    const POW_EXPONENTS: [f64; 12] = [
        3.0,
        -1.0,
        -2.0,
        0.5,
        -0.5,
        1.5,
        1.0 / 3.0,
        7.0,
        -7.0,
        100.0,
        0.0,
        2.5e-3,
    ];

    /// Whether the fast pow leaves `x^p` to the exact form (NaN): zeros, infinities,
    /// NaNs, and negative bases with a fractional exponent; asserts that it does.
    fn pow_deferred(x: f64, p: f64, got_nan: bool) -> bool {
        let defer = x == 0.0 || x.is_infinite() || x.is_nan() || (x < 0.0 && p.fract() != 0.0);
        assert!(
            !defer || got_nan,
            "pow({x:e}, {p}) not deferred (NaN expected)"
        );
        defer
    }

    /// The f32 pow's fast form against f64's `powf` rounded to f32, for exponents users
    /// raise to (integers of both signs and parities, halves, thirds, large ones) over
    /// every 2039th f32 pattern: within 1 ulp where it gives a number, and NaN (for the
    /// caller to recompute) exactly at zeros, infinities, NaNs and negative bases with a
    /// fractional exponent.
    #[test]
    fn f32_pow_is_accurate_or_defers() {
        for p in POW_EXPONENTS {
            for k in 0..u32::MAX / 2039 {
                let x = f32::from_bits(k * 2039);
                let got = powf_fast_f32(x, p, pow_sign_of_negative(p));
                if !pow_deferred(x as f64, p, got.is_nan()) {
                    let want = (x as f64).powf(p) as f32;
                    assert!(
                        ulps(got, want) <= 1,
                        "pow({x:e}, {p}): got {got:e}, want {want:e}"
                    );
                }
            }
        }
    }

    /// The f64 pow's fast form against std's `powf` over every 2^44th bit pattern
    /// (both signs, subnormals, infinities, NaNs) for the exponents of the f32 test, and
    /// for each base the exponents that take `p ln |x|` to +-700 and +-740 (where the
    /// logarithm's error is multiplied most: a plain f64 `e^(p ln x)` is off by hundreds
    /// of ulp there): within 2 ulp where it gives a number, NaN (deferred) exactly where
    /// the f32 form defers.
    #[test]
    fn f64_pow_is_accurate_or_defers() {
        let mut worst = (0, 0.0, 0.0);
        for k in 0..1u64 << 20 {
            let x = f64::from_bits(k << 44 | k >> 10);
            let l = x.abs().ln();
            let wide = [700.0, -700.0, 740.0, -740.0].map(|t| t / l);
            for p in POW_EXPONENTS
                .into_iter()
                .chain(wide.into_iter().filter(|p| p.is_finite()))
            {
                let got = powf_fast_f64(x, p, pow_sign_of_negative(p));
                if pow_deferred(x, p, got.is_nan()) {
                    continue;
                }
                let want = x.powf(p);
                let e = ulps64(got, want);
                assert!(e <= 2, "pow({x:e}, {p:e}): got {got:e}, want {want:e}");
                if e > worst.0 {
                    worst = (e, x, p);
                }
            }
        }
        eprintln!(
            "f64 pow: worst {} ulp at pow({:e}, {:e})",
            worst.0, worst.1, worst.2
        );
    }

    /// The f32 sine, cosine and tangent below `TRIG_LIMIT` (where the vector form
    /// applies: beyond, `map_float` recomputes with the std functions) against f64's std
    /// functions rounded to f32: every 241st bit pattern of that range (both signs,
    /// subnormals) plus the values nearest multiples of pi/4, where the reduction
    /// cancels; within 2 ulp.
    #[test]
    fn f32_trigonometry_is_accurate_below_the_limit() {
        type F = (&'static str, fn(f32) -> f32, fn(f64) -> f64);
        let fns: [F; 3] = [
            ("sin", sin_f32, f64::sin),
            ("cos", cos_f32, f64::cos),
            ("tan", tan_f32, f64::tan),
        ];
        let limit = <f32 as Math>::TRIG_LIMIT.to_bits();
        let near = (1..300_000u32).flat_map(|k| {
            let m = k as f64 * std::f64::consts::FRAC_PI_4;
            let x = m as f32;
            [
                x,
                f32::from_bits(x.to_bits() + 1),
                f32::from_bits(x.to_bits() - 1),
                -x,
            ]
        });
        for (name, f, g) in fns {
            let xs = (0..limit / 241)
                .map(|k| f32::from_bits(k * 241))
                .flat_map(|x| [x, -x])
                .chain(near.clone())
                .chain([0.0, -0.0, 1e-45, -1e-45, f32::MIN_POSITIVE, 1.0, -1.0]);
            check_ulps(name, xs, |x| (f(x), g(x as f64) as f32), ulps, 2);
        }
        assert_eq!(sin_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(tan_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(cos_f32(0.0), 1.0);
        for f in [sin_f32, cos_f32, tan_f32] {
            assert!(
                f(f32::NAN).is_nan() && f(f32::INFINITY).is_nan() && f(f32::NEG_INFINITY).is_nan()
            );
        }
    }

    /// The f64 sine, cosine and tangent below their limit against the std functions: 2^21
    /// arguments spread log-uniformly over (2^-31, 2^30) with both signs, the doubles
    /// nearest 2^18 multiples of pi/4 and their neighbours (where the reduction cancels),
    /// and the special values; sin and cos within 1 ulp, tan 3.
    #[test]
    fn f64_trigonometry_is_accurate_below_the_limit() {
        // tan is a quotient of the two (3 ulp near the poles)
        type F = (&'static str, fn(f64) -> f64, fn(f64) -> f64, u64);
        let fns: [F; 3] = [
            ("sin", sin_f64, f64::sin, 1),
            ("cos", cos_f64, f64::cos, 1),
            ("tan", tan_f64, f64::tan, 3),
        ];
        let limit = <f64 as Math>::TRIG_LIMIT;
        let spread = (0..1u64 << 20).flat_map(|k| {
            // a cheap mixing of k for the mantissa, the exponent from k's position
            let e = -31.0 + 60.0 * k as f64 / (1u64 << 20) as f64;
            let m =
                1.0 + (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 12) as f64 / (1u64 << 52) as f64;
            let x = m * e.exp2();
            [x, -x]
        });
        let near = (1..1u64 << 18).flat_map(|k| {
            // multiples spread up to the limit, not only the small ones
            let k = k.wrapping_mul(4093) % (limit / std::f64::consts::FRAC_PI_4) as u64;
            let x = k as f64 * std::f64::consts::FRAC_PI_4;
            [
                x,
                f64::from_bits(x.to_bits() + 1),
                f64::from_bits(x.to_bits() - 1),
                -x,
            ]
        });
        let specials = [
            0.0,
            -0.0,
            5e-324,
            f64::MIN_POSITIVE,
            1.0,
            -1.0,
            limit.next_down(),
        ];
        for (name, f, g, max) in fns {
            let xs = spread.clone().chain(near.clone()).chain(specials);
            check_ulps(name, xs, |x| (f(x), g(x)), ulps64, max);
        }
        assert_eq!(sin_f64(-0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(tan_f64(-0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(cos_f64(0.0), 1.0);
        for f in [sin_f64, cos_f64, tan_f64] {
            assert!(f(f64::NAN).is_nan() && f(f64::INFINITY).is_nan() && f(limit).is_nan());
        }
    }

    /// The f64 tanh against the std function over the whole range: 2^22 bit patterns
    /// (both signs, subnormals, infinities, NaNs), 2^20 points of (0.5, 0.75) around the
    /// switch of forms, the switch's neighbours; within 2 ulp.
    #[test]
    fn f64_tanh_is_accurate_over_the_range() {
        let spread = (0..1u64 << 22).map(|k| f64::from_bits(k.wrapping_mul(0x1000_0000_0001)));
        let switch = (0..1u64 << 20).map(|k| 0.5 + 0.25 * k as f64 / (1u64 << 20) as f64);
        let edges = [
            0.625f64,
            0.625f64.next_up(),
            0.625f64.next_down(),
            19.0,
            22.0,
            1e-300,
        ];
        let xs = spread
            .chain(switch)
            .chain(edges.into_iter().flat_map(|x| [x, -x]))
            .chain([0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN]);
        check_ulps("tanh", xs, |x| (tanh_f64(x), x.tanh()), ulps64, 2);
        assert_eq!(tanh_f64(-0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(tanh_f64(f64::INFINITY), 1.0);
    }

    /// The f64 arctangent against the std function over the whole range: 2^22 bit
    /// patterns spread over the f64 range (both signs, subnormals, infinities, NaNs), the
    /// breakpoints of its argument ranges and their neighbours; within 2 ulp.
    #[test]
    fn f64_arctangent_is_accurate_over_the_range() {
        let spread = (0..1u64 << 22).map(|k| f64::from_bits(k.wrapping_mul(0x1000_0000_0001)));
        let breaks = [
            0.4375f64, 0.6875, 1.1875, 2.4375, 1.0, 0.5, 1.5, 1e-30, 1e30,
        ]
        .into_iter()
        .flat_map(|b| {
            [
                b,
                b.next_up(),
                b.next_down(),
                -b,
                -b.next_up(),
                -b.next_down(),
            ]
        });
        let xs = spread
            .chain(breaks)
            .chain([0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY]);
        check_ulps("atan", xs, |x| (atan_f64(x), x.atan()), ulps64, 2);
        assert_eq!(atan_f64(-0.0).to_bits(), (-0.0f64).to_bits());
        assert!(atan_f64(f64::NAN).is_nan());
    }

    /// The f64 logarithms against Rust's std functions: 2^22 bit patterns spread over
    /// the whole f64 range (both signs, subnormals, infinities, NaNs), 2^20 points of
    /// [0.5, 2] (where the result is near 0) and the special values; within the
    /// contract's 4 ulp (the worst is asserted below that).
    #[test]
    fn f64_logarithms_are_accurate_over_the_range() {
        type F = (&'static str, fn(f64) -> f64, fn(f64) -> f64);
        let fns: [F; 6] = [
            ("ln", ln_f64, f64::ln),
            ("ln fused", ln_f64_of::<true>, f64::ln),
            ("log2", log2_f64_of::<false>, f64::log2),
            ("log10", log10_f64_of::<false>, f64::log10),
            ("log2 fused", log2_f64_of::<true>, f64::log2),
            ("log10 fused", log10_f64_of::<true>, f64::log10),
        ];
        let specials = [
            0.0f64,
            -0.0,
            1.0,
            -1.0,
            2.0,
            8.0,
            10.0,
            1e300,
            f64::MIN_POSITIVE,
            5e-324,
            f64::MAX,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            0.999_999_999_999_999_9,
            1.000_000_000_000_000_2,
            std::f64::consts::SQRT_2,
            std::f64::consts::E,
        ];
        for (name, f, g) in fns {
            let spread = (0..1u64 << 22).map(|k| f64::from_bits(k.wrapping_mul(0x1000_0000_0001)));
            let near_one = (0..1u64 << 20).map(|k| 0.5 + 1.5 * k as f64 / (1u64 << 20) as f64);
            let xs = spread.chain(near_one).chain(specials);
            check_ulps(name, xs, |x| (f(x), g(x)), ulps64, 2);
        }
        let log2s: [fn(f64) -> f64; 2] = [log2_f64_of::<false>, log2_f64_of::<true>];
        let log10s: [fn(f64) -> f64; 2] = [log10_f64_of::<false>, log10_f64_of::<true>];
        for (log2_f64, log10_f64) in log2s.into_iter().zip(log10s) {
            assert_eq!(log2_f64(8.0), 3.0);
            assert_eq!(log2_f64(2f64.powi(-1074)), -1074.0);
            assert_eq!(log10_f64(1.0), 0.0);
        }
        assert_eq!(ln_f64(1.0), 0.0);
    }

    /// The engine's exp against the f64 exp (correctly rounded to f32 in practice) over
    /// the whole f32 range, subnormal results included: within 2 ulp; and the edges.
    #[test]
    fn exp_full_is_accurate_over_the_range() {
        // both forms: the plain one and the unary kernels' fused one
        let f32s: [fn(f32) -> f32; 2] = [exp_f32_of::<false>, exp_f32_of::<true>];
        let f64s: [fn(f64) -> f64; 2] = [exp_f64_of::<false>, exp_f64_of::<true>];
        for (exp_f32, exp_f64) in f32s.into_iter().zip(f64s) {
            let mut worst = 0.0f64;
            let mut x = -104.0f32;
            while x < 89.0 {
                let got = exp_f32(x) as f64;
                let want = (x as f64).exp() as f32 as f64;
                if want != 0.0 && want.is_finite() {
                    let ulp = 2f64.powi((want.abs().log2().floor() as i32).max(-126) - 23);
                    worst = worst.max((got - want).abs() / ulp);
                } else {
                    assert_eq!(got, want, "at {x}");
                }
                x += 0.0137;
            }
            assert!(worst <= 2.0, "worst f32 error {worst} ulp");
            assert!(exp_f32(f32::NAN).is_nan());
            assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
            assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
            assert_eq!(exp_f32(0.0), 1.0);
            let mut worst = 0.0f64;
            let mut x = -745.0f64;
            while x < 709.7 {
                let (got, want) = (exp_f64(x), x.exp());
                if want != 0.0 {
                    // (two factors: 2^-1074 in one powi underflows on the way)
                    let ulp =
                        2f64.powi((want.abs().log2().floor() as i32).max(-1022)) * 2f64.powi(-52);
                    let e = (got - want).abs() / ulp;
                    assert!(e <= 2.0, "at {x}: got {got}, want {want}");
                    worst = worst.max(e);
                }
                x += 0.0731;
            }
            assert!(worst <= 2.0, "worst f64 error {worst} ulp");
            assert_eq!(exp_f64(710.0), f64::INFINITY);
            assert_eq!(exp_f64(f64::NEG_INFINITY), 0.0);
        }
    }
}
