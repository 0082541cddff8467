//! 16-bit floats widened to `f32`, exactly: one value at a time inside the vector
//! kernels, or a block at a time with the CPU's conversion instruction (AVX-512's and
//! F16C's `vcvtph2ps`, 16 or 8 values per instruction) where the CPU has one, so that a
//! fold over halves runs the `f32` kernel on an L1-resident block.

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

/// Widens the `f16` bit patterns of `src` into `dst` (same length), exactly, and returns
/// `dst` as initialised values: AVX-512 or F16C where the CPU has them (checked at run
/// time), else [`f16_bits_to_f32`]. `dst` may be uninitialised (a stack block): every
/// element is written, none read.
///
/// # Panics
/// When the lengths differ.
pub fn widen_f16<'d>(src: &[u16], dst: &'d mut [MaybeUninit<f32>]) -> &'d [f32] {
    assert_eq!(src.len(), dst.len(), "widen_f16: lengths differ");
    let done = 'simd: {
        #[cfg(target_arch = "x86_64")]
        {
            if crate::cpu::has_avx512() {
                // SAFETY: the CPU has AVX-512F (checked above).
                break 'simd unsafe { widen_f16_avx512(src, dst) };
            }
            if std::arch::is_x86_feature_detected!("f16c")
                && std::arch::is_x86_feature_detected!("avx")
            {
                // SAFETY: the CPU has F16C and AVX (checked above).
                break 'simd unsafe { widen_f16_f16c(src, dst) };
            }
        }
        0
    };
    for (d, &s) in dst[done..].iter_mut().zip(&src[done..]) {
        d.write(f16_bits_to_f32(s));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
