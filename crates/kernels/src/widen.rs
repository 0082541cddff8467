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
