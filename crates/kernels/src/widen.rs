//! 16-bit floats widened to `f32`, exactly: one value at a time inside the vector
//! kernels, or a block at a time with the CPU's conversion instruction (AVX-512's and
//! F16C's `vcvtph2ps`, 16 or 8 values per instruction) where the CPU has one, so that a
//! fold over halves runs the `f32` kernel on an L1-resident block; and back (per value,
//! branch-free, or a block per `vcvtps2ph`).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;
use std::mem::MaybeUninit;

/// `f16` bits to `f32`, exactly, without branches or a per-call CPU feature check (the
/// `half` crate checks for F16C on every call unless the whole crate is compiled with
/// it, which keeps a loop over it scalar): the vector kernels lift halves with this.
/// Normal values (and infinities, NaN) move their exponent by an integer add; a
/// subnormal's integer mantissa is converted and scaled by `2^-24`, a product of normal
/// floats (no denormal operand, which costs a microcode assist on x86: 10x slower).
#[inline(always)]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let em = h & 0x7fff;
    let normal = (em << 13) + ((127 - 15) << 23);
    let infnan = (em >= 0x7c00) as u32;
    let normal = normal + infnan * ((128 - 16) << 23);
    let sub = ((em as i32) as f32 * f32::from_bits((127 - 24) << 23)).to_bits();
    let is_sub = 0u32.wrapping_sub((em < 0x0400) as u32);
    let r = (sub & is_sub) | (normal & !is_sub);
    f32::from_bits(r | ((h & 0x8000) << 16))
}

/// `bf16` bits to `f32`, exactly: the high half of an `f32`.
#[inline(always)]
pub fn bf16_bits_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// `f32` to `f16` bits, rounded to nearest even, without branches or a per-call CPU
/// feature check (as [`f16_bits_to_f32`], so that a map writing halves vectorises):
/// normal results round their mantissa by an integer add (Giesen's `float_to_half`),
/// subnormal ones by adding a magic float (the FPU rounds), overflow gives infinity, NaN
/// a quiet NaN.
#[inline(always)]
pub fn f32_to_f16_bits(x: f32) -> u16 {
    const INF: u32 = 255 << 23;
    const F16_OVER: u32 = (127 + 16) << 23; // 65536: this and above round to inf
    const DENORM_MAGIC: u32 = ((127 - 15) + (23 - 10) + 1) << 23;
    let b = x.to_bits();
    let sign = (b >> 16) & 0x8000;
    let a = b & 0x7fff_ffff;
    let over = if a > INF { 0x7e00 } else { 0x7c00 };
    let sub = (f32::from_bits(a) + f32::from_bits(DENORM_MAGIC)).to_bits() - DENORM_MAGIC;
    let odd = (a >> 13) & 1;
    let normal = a
        .wrapping_add((15u32.wrapping_sub(127) << 23).wrapping_add(0xfff))
        .wrapping_add(odd)
        >> 13;
    let r = if a >= F16_OVER {
        over
    } else if a < (113 << 23) {
        sub
    } else {
        normal
    };
    (r | sign) as u16
}

/// `f32` to `bf16` bits, rounded to nearest even (NaN stays a quiet NaN), branch-free.
#[inline(always)]
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
    let nan = (b >> 16) | 0x0040;
    (if x.is_nan() { nan } else { rounded }) as u16
}

/// `f64` to `f32` rounded to odd: toward zero, the last mantissa bit set where the
/// conversion was inexact. A value rounded to odd and then to nearest even in a format
/// at least two bits narrower is the value rounded to nearest even once, so the halves'
/// conversions from `f64` go through it ([`f64_to_f16_bits`], [`f64_to_bf16_bits`]).
/// Branch-free (vectorises); NaN stays NaN, beyond `f32`'s range gives `±f32::MAX`
/// (odd, and past every half's overflow threshold).
#[inline(always)]
pub fn f64_to_f32_odd(x: f64) -> f32 {
    let r = x as f32;
    let back = r as f64;
    let bits = r.to_bits();
    // round to nearest went away from zero: one step back (sign-magnitude bits)
    let t = if back.abs() > x.abs() { bits - 1 } else { bits };
    let inexact = (back != x) & !x.is_nan();
    f32::from_bits(t | inexact as u32)
}

/// `f64` to `f16` bits, rounded to nearest even once (as `half`'s `from_f64`), without
/// branches or a per-call CPU feature check: `f64_to_f32_odd`, then
/// [`f32_to_f16_bits`].
#[inline(always)]
pub fn f64_to_f16_bits(x: f64) -> u16 {
    f32_to_f16_bits(f64_to_f32_odd(x))
}

/// `f64` to `bf16` bits, rounded to nearest even once: `f64_to_f32_odd`, then
/// [`f32_to_bf16_bits`].
#[inline(always)]
pub fn f64_to_bf16_bits(x: f64) -> u16 {
    f32_to_bf16_bits(f64_to_f32_odd(x))
}

/// Widens the `f16` bit patterns of `src` into `dst` (same length), exactly, and returns
/// `dst` as initialised values: AVX-512 or F16C where the CPU has them (checked at run
/// time), else [`f16_bits_to_f32`]. `dst` may be uninitialised (a stack block): every
/// element is written, none read.
///
/// # Panics
/// When the lengths differ.
pub fn widen_f16<'d>(src: &[u16], dst: &'d mut [MaybeUninit<f32>]) -> &'d [f32] {
    assert_eq!(src.len(), dst.len(), "widen_f16: lengths differ");
    #[cfg(target_arch = "x86_64")]
    let simd: [Simd<u16, MaybeUninit<f32>>; 2] = [widen_f16_avx512, widen_f16_f16c];
    #[cfg(not(target_arch = "x86_64"))]
    let simd = [];
    by_blocks(src, dst, simd, |s| MaybeUninit::new(f16_bits_to_f32(s)));
    // SAFETY: every element of `dst` was written above (the vector part up to `done`,
    // the scalar loop after it); `f32` and `MaybeUninit<f32>` have the same layout.
    unsafe { &*(dst as *const [MaybeUninit<f32>] as *const [f32]) }
}

/// The whole 16-value groups of `src` into `dst`; returns how many values it wrote.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn widen_f16_avx512(src: &[u16], dst: &mut [MaybeUninit<f32>]) -> usize {
    let n = src.len() / 16 * 16;
    for k in (0..n).step_by(16) {
        // SAFETY: k + 16 <= n <= len of both slices; unaligned loads and stores.
        unsafe {
            let h = _mm256_loadu_si256(src.as_ptr().add(k) as *const __m256i);
            _mm512_storeu_ps(dst.as_mut_ptr().add(k) as *mut f32, _mm512_cvtph_ps(h));
        }
    }
    n
}

/// The whole 8-value groups of `src` into `dst`; returns how many values it wrote.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn widen_f16_f16c(src: &[u16], dst: &mut [MaybeUninit<f32>]) -> usize {
    let n = src.len() / 8 * 8;
    for k in (0..n).step_by(8) {
        // SAFETY: k + 8 <= n <= len of both slices; unaligned loads and stores.
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(k) as *const __m128i);
            _mm256_storeu_ps(dst.as_mut_ptr().add(k) as *mut f32, _mm256_cvtph_ps(h));
        }
    }
    n
}

/// Rounds the `f32` values of `src` into `f16` bit patterns in `dst` (same length), to
/// nearest even as [`f32_to_f16_bits`] (NaN a quiet NaN): AVX-512's or F16C's
/// `vcvtps2ph` where the CPU has one (checked at run time), 16 or 8 values per
/// instruction, else that function.
///
/// # Panics
/// When the lengths differ.
pub fn narrow_f16(src: &[f32], dst: &mut [u16]) {
    assert_eq!(src.len(), dst.len(), "narrow_f16: lengths differ");
    #[cfg(target_arch = "x86_64")]
    let simd: [Simd<f32, u16>; 2] = [narrow_f16_avx512, narrow_f16_f16c];
    #[cfg(not(target_arch = "x86_64"))]
    let simd = [];
    by_blocks(src, dst, simd, f32_to_f16_bits);
}

/// A conversion of a slice's whole vector groups with one CPU's instructions: how many
/// values it wrote. `unsafe`: only where the CPU has them.
type Simd<S, D> = unsafe fn(&[S], &mut [D]) -> usize;

/// `src` converted into `dst` (same length): by `simd[0]` (AVX-512) or `simd[1]` (F16C and
/// AVX) where the CPU has those (checked at run time), then by `one`, a value at a time,
/// from where that left off.
fn by_blocks<S: Copy, D, const K: usize>(
    src: &[S], dst: &mut [D], simd: [Simd<S, D>; K], one: impl Fn(S) -> D,
) {
    let done = 'simd: {
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(f) = simd.first().filter(|_| crate::cpu::has_avx512()) {
                // SAFETY: the CPU has AVX-512F (checked above), what `simd[0]` needs.
                break 'simd unsafe { f(src, dst) };
            }
            if let Some(f) = simd.get(1).filter(|_| {
                std::arch::is_x86_feature_detected!("f16c")
                    && std::arch::is_x86_feature_detected!("avx")
            }) {
                // SAFETY: the CPU has F16C and AVX (checked above), what `simd[1]` needs.
                break 'simd unsafe { f(src, dst) };
            }
        }
        let _ = &simd;
        0
    };
    for (d, &s) in dst[done..].iter_mut().zip(&src[done..]) {
        *d = one(s);
    }
}

/// The whole 16-value groups of `src` into `dst`; returns how many values it wrote.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn narrow_f16_avx512(src: &[f32], dst: &mut [u16]) -> usize {
    let n = src.len() / 16 * 16;
    for k in (0..n).step_by(16) {
        // SAFETY: k + 16 <= n <= len of both slices; unaligned loads and stores.
        unsafe {
            let x = _mm512_loadu_ps(src.as_ptr().add(k));
            let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x);
            _mm256_storeu_si256(dst.as_mut_ptr().add(k) as *mut __m256i, h);
        }
    }
    n
}

/// The whole 8-value groups of `src` into `dst`; returns how many values it wrote.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn narrow_f16_f16c(src: &[f32], dst: &mut [u16]) -> usize {
    let n = src.len() / 8 * 8;
    for k in (0..n).step_by(8) {
        // SAFETY: k + 8 <= n <= len of both slices; unaligned loads and stores.
        unsafe {
            let x = _mm256_loadu_ps(src.as_ptr().add(k));
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
            _mm_storeu_si128(dst.as_mut_ptr().add(k) as *mut __m128i, h);
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The block narrowing (the CPU's instructions where it has them, each tried, and
    /// the scalar tail: lengths off a multiple of 16) equals [`f32_to_f16_bits`] on
    /// every 251st f32 bit pattern, NaN as NaN.
    #[test]
    fn block_narrowing_equals_the_scalar_one() {
        let xs: Vec<f32> = (0..u32::MAX / 251)
            .map(|k| f32::from_bits(k * 251))
            .collect();
        let check = |chunk: &[f32], got: &[u16], done: usize| {
            for (&x, &h) in chunk[..done].iter().zip(got) {
                if x.is_nan() {
                    assert!(f16_bits_to_f32(h).is_nan(), "{x}");
                } else {
                    assert_eq!(h, f32_to_f16_bits(x), "f16 of {x:e}");
                }
            }
        };
        for chunk in xs.chunks(4099) {
            let mut got = vec![0u16; chunk.len()];
            narrow_f16(chunk, &mut got);
            check(chunk, &got, chunk.len());
            #[cfg(target_arch = "x86_64")]
            {
                if crate::cpu::has_avx512() {
                    // SAFETY: the CPU has AVX-512F (checked above).
                    let done = unsafe { narrow_f16_avx512(chunk, &mut got) };
                    check(chunk, &got, done);
                }
                if std::arch::is_x86_feature_detected!("f16c")
                    && std::arch::is_x86_feature_detected!("avx")
                {
                    // SAFETY: the CPU has F16C and AVX (checked above).
                    let done = unsafe { narrow_f16_f16c(chunk, &mut got) };
                    check(chunk, &got, done);
                }
            }
        }
    }

    /// The narrowing conversions equal the `half` crate's (round to nearest even) on
    /// every 13th f32 bit pattern and the boundaries (subnormal, overflow, ties), NaN
    /// staying NaN.
    #[test]
    fn narrowing_rounds_to_nearest_even() {
        let edges = [
            0.0f32,
            -0.0,
            65504.0,
            65519.99,
            65520.0,
            -65520.0,
            6.1035156e-5,
            6.097555e-5,
            5.9604645e-8,
            2.9802322e-8,
            2.9802326e-8,
            1.0 + 1.0 / 2048.0,
            1.0 + 3.0 / 2048.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MAX,
            f32::MIN_POSITIVE,
            1e-45,
        ];
        let xs = (0..u32::MAX / 13)
            .map(|k| f32::from_bits(k * 13))
            .chain(edges);
        for x in xs {
            let (h, b) = (f32_to_f16_bits(x), f32_to_bf16_bits(x));
            if x.is_nan() {
                assert!(
                    f16_bits_to_f32(h).is_nan() && bf16_bits_to_f32(b).is_nan(),
                    "{x}"
                );
                continue;
            }
            assert_eq!(h, half::f16::from_f32(x).to_bits(), "f16 of {x:e}");
            assert_eq!(b, half::bf16::from_f32(x).to_bits(), "bf16 of {x:e}");
        }
    }

    /// The conversions from `f64` round once, to nearest even: they equal an exact
    /// reference (scaling by the target's ulp at the value's magnitude and rounding the
    /// quotient, both exact in `f64`) on spread bit patterns, the midpoints between
    /// neighbouring halves and the values just off them (where rounding twice, through
    /// a nearest `f32`, goes wrong, as `half`'s own `from_f64` does: its f16 of
    /// 0.4871826123073599 is 0.4873046875, the far neighbour), the
    /// overflow and subnormal boundaries; NaN staying NaN.
    #[test]
    fn narrowing_from_f64_rounds_once() {
        // `x` rounded to `mant` fraction bits, exponents from `min_exp` (subnormals
        // below), infinity past `max` (the largest finite value)
        let once = |x: f64, mant: i32, min_exp: i32, max: f64| -> f64 {
            if x == 0.0 {
                return x;
            }
            let e = (((x.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(min_exp);
            let q = 2f64.powi(e - mant);
            let y = (x / q).round_ties_even() * q;
            if y.abs() > max {
                f64::INFINITY.copysign(x)
            } else {
                y.copysign(x)
            }
        };
        let check = |x: f64| {
            let (h, b) = (f64_to_f16_bits(x), f64_to_bf16_bits(x));
            let (h, b) = (f16_bits_to_f32(h) as f64, bf16_bits_to_f32(b) as f64);
            if x.is_nan() {
                assert!(h.is_nan() && b.is_nan());
                return;
            }
            let want_h = once(x, 10, -14, 65504.0);
            let want_b = once(x, 7, -126, bf16_bits_to_f32(0x7f7f) as f64);
            assert_eq!(h.to_bits(), want_h.to_bits(), "f16 of {x:e}");
            assert_eq!(b.to_bits(), want_b.to_bits(), "bf16 of {x:e}");
        };
        for k in 0..(1u64 << 22) {
            check(f64::from_bits(k.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        }
        for h in 0..=u16::MAX {
            for (lo, hi) in [
                (
                    f16_bits_to_f32(h) as f64,
                    f16_bits_to_f32(h.wrapping_add(1)) as f64,
                ),
                (
                    bf16_bits_to_f32(h) as f64,
                    bf16_bits_to_f32(h.wrapping_add(1)) as f64,
                ),
            ] {
                let mid = (lo + hi) / 2.0;
                for x in [lo, mid, mid * (1.0 + 1e-12), mid * (1.0 - 1e-12), -mid] {
                    check(x);
                }
                check(f64::from_bits(mid.to_bits() + 1));
                check(f64::from_bits(mid.to_bits().wrapping_sub(1)));
            }
        }
        for x in [
            f64::MAX,
            f64::MIN_POSITIVE,
            1e-320,
            3.4028235e38,
            3.4e38,
            65520.0,
            1e300,
            f64::INFINITY,
            f64::NAN,
            -0.0,
        ] {
            check(x);
            check(-x);
        }
    }

    /// Every bit pattern, through every path this CPU has, equals the scalar conversion
    /// (NaN payloads included: compared as bits).
    #[test]
    fn bulk_widening_is_exact_on_every_pattern() {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        // odd lengths and offsets exercise the tails
        for (lo, hi) in [(0usize, all.len()), (3, all.len() - 5), (7, 20)] {
            let src = &all[lo..hi];
            let mut buf = vec![MaybeUninit::<f32>::uninit(); src.len()];
            let got = widen_f16(src, &mut buf);
            for (k, (&h, g)) in src.iter().zip(got).enumerate() {
                let want = f16_bits_to_f32(h);
                let same = g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan());
                assert!(same, "at {k}: {h:#06x} gave {g:?}, want {want:?}");
            }
        }
    }
}
