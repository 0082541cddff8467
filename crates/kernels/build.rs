//! Picks the CPU tiers that `multiversion!` compiles (`crates/kernels/src/cpu.rs`).
//!
//! `MASKED_CPU=portable` (the default, as for any crate a dependent builds): every tier
//! (AVX-512, AVX2 + FMA, the baseline target), the best one picked at run time, so the
//! binary runs on any x86-64 CPU. `MASKED_CPU=native` (this repository's
//! `.cargo/config.toml`): only the tier of the CPU that builds, a third of the kernels'
//! machine code and of the release build's time; the binary then refuses, with an
//! error naming the fix, a CPU without that tier. A cross build is always portable.

use std::env;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=MASKED_CPU");
    println!("cargo::rustc-check-cfg=cfg(masked_tier, values(\"avx512\", \"avx2\", \"baseline\"))");
    let wanted = env::var("MASKED_CPU").unwrap_or_default();
    let tier = match wanted.as_str() {
        "" | "portable" => None,
        "native" => native(),
        other => panic!("MASKED_CPU={other}: expected `portable` or `native`"),
    };
    if let Some(tier) = tier {
        println!("cargo::rustc-cfg=masked_tier=\"{tier}\"");
    }
}

/// The tier of the CPU running this build script, where it is also the target's.
fn native() -> Option<&'static str> {
    let host = env::var("HOST").ok()?;
    let target = env::var("TARGET").ok()?;
    if host != target || env::var("CARGO_CFG_TARGET_ARCH").ok()? != "x86_64" {
        return None;
    }
    detect()
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Option<&'static str> {
    use std::arch::is_x86_feature_detected as has;
    Some(
        if has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512dq") {
            "avx512"
        } else if has!("avx2") && has!("fma") {
            "avx2"
        } else {
            "baseline"
        },
    )
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Option<&'static str> {
    None
}
