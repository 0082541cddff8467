//! CSR masked ops on a 20000 x 20000 f32 matrix with about 400K stored entries (density
//! 1e-3), u32 column indices, mask = input pattern: along dim 1 and dim 0, with a
//! plain (unmasked) row-sum loop over the same arrays as the baseline. `masked bench
//! --layout csr` times the 100000 x 100000 workload for the peer comparison.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use masked::{MaskedCsr, MaskedOps, MedianMode};
use sprs::CsMatI;
use std::hint::black_box;

/// A small deterministic generator (xorshift).
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

fn csr(c: &mut Criterion) {
    let (n, per_row) = (20_000usize, 20usize);
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let (mut indptr, mut indices, mut data) = (vec![0usize], Vec::new(), Vec::new());
    for _ in 0..n {
        let mut cols: Vec<u32> = (0..per_row)
            .map(|_| (next(&mut s) % n as u64) as u32)
            .collect();
        cols.sort_unstable();
        cols.dedup();
        for col in cols {
            indices.push(col);
            data.push((next(&mut s) % 20_000) as f32 / 1000.0 - 10.0);
        }
        indptr.push(indices.len());
    }
    let nnz = indices.len();
    let m: CsMatI<f32, u32, usize> = CsMatI::new((n, n), indptr, indices, data);
    let a = MaskedCsr::from_pattern(m.view()).unwrap();
    let mut g = c.benchmark_group("csr_20000x20000_f32_nnz400k");
    g.throughput(Throughput::Bytes((nnz * 8 + (n + 1) * 8) as u64));
    g.sample_size(30);
    g.bench_function("plain_row_sum_loop", |b| {
        b.iter(|| {
            let ip = m.indptr();
            let ip = ip.raw_storage();
            let d = m.data();
            black_box(
                (0..n)
                    .map(|r| d[ip[r]..ip[r + 1]].iter().sum::<f32>())
                    .collect::<Vec<_>>(),
            )
        })
    });
    for dim in [1isize, 0] {
        g.bench_function(format!("sum_dim{dim}"), |b| {
            b.iter(|| black_box(a.sum(dim, false).unwrap()))
        });
        g.bench_function(format!("amax_dim{dim}"), |b| {
            b.iter(|| black_box(a.amax(dim, false).unwrap()))
        });
        g.bench_function(format!("argmax_dim{dim}"), |b| {
            b.iter(|| black_box(a.argmax(dim, false).unwrap()))
        });
        g.bench_function(format!("var_dim{dim}"), |b| {
            b.iter(|| black_box(a.var(dim, false, 1.0).unwrap()))
        });
        g.bench_function(format!("median_dim{dim}"), |b| {
            b.iter(|| black_box(a.median(dim, false, MedianMode::Avg).unwrap()))
        });
        g.bench_function(format!("softmax_dim{dim}"), |b| {
            b.iter(|| black_box(a.softmax(dim).unwrap()))
        });
    }
    g.finish();
}

criterion_group!(benches, csr);
criterion_main!(benches);
