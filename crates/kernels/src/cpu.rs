//! Run-time CPU feature detection and [`multiversion!`](crate::multiversion): one generic
//! kernel compiled for AVX-512, for AVX2 + FMA and for the baseline target, the best
//! picked at run time.

#[cfg(target_arch = "x86_64")]
pub use x86::{has_avx2, has_avx512};

/// Without x86-64 there is no AVX-512.
#[cfg(not(target_arch = "x86_64"))]
pub fn has_avx512() -> bool {
    false
}
/// Without x86-64 there is no AVX2.
#[cfg(not(target_arch = "x86_64"))]
pub fn has_avx2() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    /// AVX-512 (F, BW, VL, DQ) is available.
    #[inline]
    pub fn has_avx512() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512dq")
    }
    /// AVX2 with FMA is available.
    #[inline]
    pub fn has_avx2() -> bool {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
}

/// Whether the vector kernels this CPU runs have fused multiply-adds, so that
/// `Float::exp_nonpos_fused` (masked-core) is the faster `exp` inside
/// them: the AVX2 and AVX-512 kernels on x86-64 (which enable FMA), every kernel on
/// aarch64. Outside [`multiversion!`](crate::multiversion) kernels on x86-64 it is a library call, so code
/// there keeps the plain `exp_nonpos`.
#[inline]
pub fn fused_exp() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        has_avx2()
    }
    #[cfg(target_arch = "aarch64")]
    {
        true
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// Defines a function (of the given visibility) that runs an `#[inline(always)]` kernel compiled for
/// AVX-512, for AVX2 + FMA, or for the baseline target, whichever this CPU supports
/// (checked at run time). The kernel is inlined into each `#[target_feature]` wrapper, so
/// the one generic loop is vectorised three times.
#[macro_export]
macro_rules! multiversion {
    ($(#[$doc:meta])* $vis:vis fn $name:ident[$($gen:tt)*]($($a:ident: $t:ty),* $(,)?) $(-> $r:ty)? = $kernel:ident;) => {
        $(#[$doc])*
        #[inline]
        $vis fn $name<$($gen)*>($($a: $t),*) $(-> $r)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,bmi1,bmi2,popcnt")]
                unsafe fn avx512<$($gen)*>($($a: $t),*) $(-> $r)? {
                    $kernel($($a),*)
                }
                #[target_feature(enable = "avx2,fma,bmi1,bmi2,popcnt")]
                unsafe fn avx2<$($gen)*>($($a: $t),*) $(-> $r)? {
                    $kernel($($a),*)
                }
                if $crate::cpu::has_avx512() {
                    // SAFETY: the CPU supports every feature `avx512` enables.
                    return unsafe { avx512($($a),*) };
                }
                if $crate::cpu::has_avx2() {
                    // SAFETY: as above for `avx2`.
                    return unsafe { avx2($($a),*) };
                }
            }
            $kernel($($a),*)
        }
    };
}
