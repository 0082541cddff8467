#!/usr/bin/env bash
# Runs the fuzz targets (fuzz/fuzz_targets) with libFuzzer through cargo-fuzz, then
# minimises each corpus in place (fuzz/corpus/TARGET, committed and replayed by
# `cargo test`: tests/tests/fuzz_corpus.rs).
#
#   scripts/fuzz.sh [RUNS] [TARGET...]     default: 10 million runs of every target
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). libFuzzer's instrumentation needs
# nightly flags: the stable toolchain's bootstrap switch enables them. The readers run
# under a 64 MiB memory ceiling; libFuzzer reports any single allocation over 1 GiB
# (a size trusted before it was checked) as an out-of-memory finding, saved in
# fuzz/artifacts/TARGET. A fixed finding is kept in fuzz/regressions/TARGET.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export RUSTC_BOOTSTRAP=1
runs=${1:-10000000}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(npy mtx npz constructors serde by_name differential)
fi
cargo fuzz build -O
for t in "${targets[@]}"; do
  case "$t" in
    # the readers: any single allocation over 1 GiB is a finding (64 MiB ceiling)
    npy | mtx | npz) limit=1024; export ASAN_OPTIONS= ;;
    # the engine's constructors reserve fallibly: an impossible reservation must come
    # back as an error (MaskedError::TooLarge), so the allocator returns null for it
    # instead of stopping the run; real memory use is still capped by -rss_limit_mb
    *) limit=1000000000; export ASAN_OPTIONS=allocator_may_return_null=1 ;;
  esac
  echo "== $t: $runs runs"
  cargo fuzz run -O "$t" -- -runs="$runs" -max_len=4096 -timeout=10 \
    -rss_limit_mb=2048 -malloc_limit_mb="$limit" -print_final_stats=1 2>&1 |
    grep -E "stat::number_of_executed_units|stat::peak_rss|ERROR|panicked|Done" || true
  cargo fuzz cmin -O "$t" >/dev/null 2>&1
  echo "   corpus: $(ls "corpus/$t" | wc -l) inputs"
done
