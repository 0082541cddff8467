//! Criterion benchmarks live in `benches/`; run `cargo bench -p masked-benches`.
