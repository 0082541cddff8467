//! Dense masked reductions along dim 1 of a 4096 x 4096 f32 array with a 50% random mask
//! (the workload), plus dim 0 and all dims. `masked bench` times the same
//! workload from the command line for comparison with the peers in one run.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use masked::{BitMask, Dims, MaskedArray, MaskedOps};
use ndarray::Array2;
use std::hint::black_box;

/// A small deterministic generator (xorshift) so the bench needs no extra crates.
fn lcg(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

fn dense(c: &mut Criterion) {
    let (r, k) = (4096usize, 4096usize);
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let x = Array2::from_shape_fn((r, k), |_| (lcg(&mut s) % 20_000) as f32 / 1000.0 - 10.0);
    let m = BitMask::from_bools([r, k], (0..r * k).map(|_| lcg(&mut s) & 1 == 1)).unwrap();
    let a = MaskedArray::new(x.view(), m).unwrap();
    let mut g = c.benchmark_group("dense_4096x4096_f32_mask50");
    g.throughput(Throughput::Bytes((r * k * 4 + r * k / 8) as u64));
    g.sample_size(30);
    g.bench_function("plain_sum_dim1_ndarray", |b| {
        b.iter(|| black_box(x.sum_axis(ndarray::Axis(1))))
    });
    g.bench_function("sum_dim1", |b| {
        b.iter(|| black_box(a.sum(1, false).unwrap()))
    });
    g.bench_function("mean_dim1", |b| {
        b.iter(|| black_box(a.mean(1, false).unwrap()))
    });
    g.bench_function("amax_dim1", |b| {
        b.iter(|| black_box(a.amax(1, false).unwrap()))
    });
    g.bench_function("argmax_dim1", |b| {
        b.iter(|| black_box(a.argmax(1, false).unwrap()))
    });
    g.bench_function("sum_dim0", |b| {
        b.iter(|| black_box(a.sum(0, false).unwrap()))
    });
    g.bench_function("sum_all", |b| {
        b.iter(|| black_box(a.sum(Dims::All, false).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, dense);
criterion_main!(benches);
