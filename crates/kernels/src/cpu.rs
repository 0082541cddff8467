//! Run-time CPU feature detection and [`multiversion!`](crate::multiversion): one generic
//! kernel compiled for AVX-512, for AVX2 + FMA and for the baseline target, the best
//! picked at run time.
//!
//! Which tiers are compiled is chosen when this crate is built (`build.rs`):
//! `MASKED_CPU=portable`, the default for a dependent, compiles all three;
//! `MASKED_CPU=native`, what this repository's `.cargo/config.toml` sets for its own
//! builds (the CLI, the tests, the Python extension built from a checkout), compiles
//! only the building CPU's tier ([`BUILT_FOR`]): a third of the kernels' machine code
//! and of the release build's time, for a binary that runs on CPUs with that tier
//! ([`check`] says so, with the fix, on any other).

/// The CPU tiers [`multiversion!`](crate::multiversion) compiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tiers {
    /// All of them, the best picked at run time (`MASKED_CPU=portable`, the default).
    Portable,
    /// AVX-512 (F, BW, VL, DQ) only: built with `MASKED_CPU=native` on such a CPU.
    Avx512,
    /// AVX2 + FMA only.
    Avx2,
    /// The baseline target only.
    Baseline,
}

/// The tiers this build compiled.
pub const BUILT_FOR: Tiers = if cfg!(masked_tier = "avx512") {
    Tiers::Avx512
} else if cfg!(masked_tier = "avx2") {
    Tiers::Avx2
} else if cfg!(masked_tier = "baseline") {
    Tiers::Baseline
} else {
    Tiers::Portable
};

/// [`multiversion!`](crate::multiversion) compiles its AVX-512 form.
#[doc(hidden)]
pub const TIER_AVX512: bool = matches!(BUILT_FOR, Tiers::Portable | Tiers::Avx512);
/// [`multiversion!`](crate::multiversion) compiles its AVX2 + FMA form.
#[doc(hidden)]
pub const TIER_AVX2: bool = matches!(BUILT_FOR, Tiers::Portable | Tiers::Avx2);
/// [`multiversion!`](crate::multiversion) compiles no baseline form (a native build for
/// a CPU with AVX2 or AVX-512).
#[doc(hidden)]
pub const NO_BASELINE: bool = matches!(BUILT_FOR, Tiers::Avx512 | Tiers::Avx2);

/// Whether this CPU runs this build's kernels: always for a portable build; for a
/// native one, where the CPU has the tier it was built for.
///
/// # Errors
/// A message naming the tier the build needs and the fix (`MASKED_CPU=portable`): the
/// command line and the Python extension check this before any kernel runs.
pub fn check() -> Result<(), String> {
    let ok = match BUILT_FOR {
        Tiers::Portable | Tiers::Baseline => true,
        Tiers::Avx512 => has_avx512(),
        Tiers::Avx2 => has_avx2(),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "this build of masked was compiled for its build machine's CPU ({BUILT_FOR:?} \
             kernels only, MASKED_CPU=native) and this CPU lacks that tier; rebuild here, \
             or build a portable binary with MASKED_CPU=portable"
        ))
    }
}

/// A kernel of a native build called on a CPU without its tier, where no [`check`] ran
/// first.
#[doc(hidden)]
#[cold]
pub fn unsupported() -> ! {
    match check() {
        Err(e) => panic!("{e}"),
        Ok(()) => unreachable!("a native build's kernel fell through on a CPU with its tier"),
    }
}

#[cfg(target_arch = "x86_64")]
pub use x86::{has_avx2, has_avx512, has_avx512_vbmi2};

/// Asks the CPU to bring the cache line holding `p` into the first-level cache: a hint
/// that never faults, whatever the address (a no-op off x86-64).
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing and never faults, whatever the address
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// How far ahead of a run [`prefetch_ahead`] asks for the values, in bytes.
pub const AHEAD_BYTES: usize = 2048;

/// Asks for the cache lines [`AHEAD_BYTES`] past each of the first `n` elements of `xs`:
/// call it before folding the run `xs[..n]` of an array whose runs are folded one after
/// the other (CSR rows, a dense array's last-dim lanes, COO groups), `xs` reaching to
/// the array's end. A short run ends in a mispredicted branch that discards the loads
/// the CPU had begun for the next runs; asked for ahead, they arrive in time (one
/// thread's row sum over CSR rows of 100 entries took 0.6x the time). Runs longer than
/// `2 * AHEAD_BYTES` ask for nothing: the hardware's prefetcher follows them, and the
/// extra loads slowed a 4096² masked sum by a fifth. Past the slice's end it asks for
/// nothing that matters: a prefetch never faults.
#[inline(always)]
pub fn prefetch_ahead<T>(xs: &[T], n: usize) {
    let size = std::mem::size_of::<T>().max(1);
    if n * size > 2 * AHEAD_BYTES {
        return;
    }
    let (ahead, line) = (AHEAD_BYTES / size, (64 / size).max(1));
    let base = xs.as_ptr();
    let mut k = ahead;
    while k < n + ahead {
        prefetch(base.wrapping_add(k));
        k += line;
    }
}

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
/// Without x86-64 there is no AVX-512 VBMI2.
#[cfg(not(target_arch = "x86_64"))]
pub fn has_avx512_vbmi2() -> bool {
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
    /// AVX-512 with VBMI2 (16-bit compress and expand) is available.
    #[inline]
    pub fn has_avx512_vbmi2() -> bool {
        has_avx512() && std::arch::is_x86_feature_detected!("avx512vbmi2")
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
/// the one generic loop is vectorised three times; a native build ([`BUILT_FOR`])
/// compiles only its own tier's form.
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
                // the tier constants are known when this is compiled: a form a native
                // build does not want is never instantiated
                if $crate::cpu::TIER_AVX512 && $crate::cpu::has_avx512() {
                    // SAFETY: the CPU supports every feature `avx512` enables.
                    return unsafe { avx512($($a),*) };
                }
                if $crate::cpu::TIER_AVX2 && $crate::cpu::has_avx2() {
                    // SAFETY: as above for `avx2`.
                    return unsafe { avx2($($a),*) };
                }
                if $crate::cpu::NO_BASELINE {
                    $crate::cpu::unsupported();
                }
            }
            $kernel($($a),*)
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A native build compiled the best tier of the CPU it runs on (the tests run where
    /// they were built): the build script's detection agrees with the run-time one.
    #[test]
    fn native_build_is_this_cpus_best_tier() {
        let best = if has_avx512() {
            Tiers::Avx512
        } else if has_avx2() {
            Tiers::Avx2
        } else {
            Tiers::Baseline
        };
        match BUILT_FOR {
            Tiers::Portable => {
                assert_eq!((TIER_AVX512, TIER_AVX2, NO_BASELINE), (true, true, false))
            }
            tier => {
                assert_eq!(tier, best);
                assert_eq!(TIER_AVX512, tier == Tiers::Avx512);
                assert_eq!(TIER_AVX2, tier == Tiers::Avx2);
            }
        }
        assert!(check().is_ok());
    }

    multiversion! {
        fn double_all[](xs: &mut [f32]) = double_all_k;
    }
    #[inline(always)]
    fn double_all_k(xs: &mut [f32]) {
        for x in xs {
            *x *= 2.0;
        }
    }

    /// A multiversioned kernel runs (and is not the `unsupported` path) in this build.
    #[test]
    fn multiversioned_kernel_runs() {
        let mut xs = [1.0f32, -2.5, 3.0];
        double_all(&mut xs);
        assert_eq!(xs, [2.0, -5.0, 6.0]);
    }
}
