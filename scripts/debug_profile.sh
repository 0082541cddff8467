#!/usr/bin/env bash
# How fast masked runs in a dependent crate's debug build, under five profile settings
# (docs/guide.md, "Using masked from your crate"). Builds a small dependent crate in a
# temporary directory, once per setting, then runs the binaries in turn, three rounds.
# Usage: scripts/debug_profile.sh [workdir]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d)}
mkdir -p "$work"

main='use masked::prelude::*;
use ndarray::Array2;
use std::time::Instant;

fn time(name: &str, mut f: impl FnMut()) {
    f();
    let n = 5;
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    println!("{name}: {:.3} ms", t.elapsed().as_secs_f64() * 1e3 / n as f64);
}

fn main() {
    let n = 1024;
    let x = Array2::from_shape_fn((n, n), |(i, j)| ((i * 31 + j * 17) % 101) as f32 * 0.01);
    let valid = Array2::from_shape_fn((n, n), |(i, j)| (i + 2 * j) % 3 != 0);
    let a = MaskedArray::from_bool_mask(x.view(), valid.view()).unwrap();
    time("sum", || {
        std::hint::black_box(a.sum(1, false).unwrap());
    });
    time("softmax", || {
        std::hint::black_box(a.softmax(1).unwrap());
    });
    time("median", || {
        std::hint::black_box(a.median(1, false, MedianMode::Lower).unwrap());
    });
    // the same data as CSR and COO, stored where valid (2/3 of the positions)
    let (mut rows, mut cols, mut vals) = (vec![], vec![], vec![]);
    for ((i, j), &v) in x.indexed_iter() {
        if valid[[i, j]] {
            rows.push(i);
            cols.push(j);
            vals.push(v);
        }
    }
    let m = sprs::TriMat::from_triplets((n, n), rows.clone(), cols.clone(), vals.clone()).to_csr::<usize>();
    let c = MaskedCsr::from_pattern(&m).unwrap();
    time("csr sum", || {
        std::hint::black_box(c.sum(1, false).unwrap());
    });
    time("csr softmax", || {
        std::hint::black_box(c.softmax(1).unwrap());
    });
    time("csr median", || {
        std::hint::black_box(c.median(1, false, MedianMode::Lower).unwrap());
    });
    let o = MaskedCoo::from_pattern([n, n], &[rows, cols], vals).unwrap();
    time("coo sum", || {
        std::hint::black_box(o.sum(1, false).unwrap());
    });
    time("coo softmax", || {
        std::hint::black_box(o.softmax(1).unwrap());
    });
}'

mk() { # name, profile toml, cargo flags
    local d="$work/$1"
    mkdir -p "$d/src"
    printf '%s\n' "$main" > "$d/src/main.rs"
    cat > "$d/Cargo.toml" <<TOML
[package]
name = "user"
version = "0.1.0"
edition = "2021"

[dependencies]
masked = { path = "$repo/crates/masked" }
ndarray = "0.17"
sprs = { version = "0.11", default-features = false }

[workspace]

$2
TOML
    local t0=$(date +%s)
    (cd "$d" && cargo build -q ${3:-})
    echo "$1 built in $(( $(date +%s) - t0 )) s"
}

mk A ""
mk B $'[profile.dev.package."*"]\nopt-level = 3'
mk C $'[profile.dev]\nopt-level = 1'
mk D $'[profile.dev]\nopt-level = 1\n\n[profile.dev.package."*"]\nopt-level = 3'
mk E "" --release
for r in 1 2 3; do
    for c in A B C D; do echo "== $c (round $r)"; "$work/$c/target/debug/user"; done
    echo "== E (round $r)"; "$work/E/target/release/user"
done
