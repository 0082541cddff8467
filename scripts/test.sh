#!/usr/bin/env bash
# Every test: the Rust workspace's (unit, golden fixtures from torch.masked, property
# tests, CLI tests, doc tests) and the Python package's (built into .venv, pytest).
#
# The steps overlap where one leaves a core idle (two cores: CI's, this project's
# machines): the venv's packages install while Rust compiles, and the Rust test
# binaries run beside the doc tests and pytest. The Rust tests print as they run; the
# doc tests' and pytest's output follows them (kept in target/test-logs/).
set -euo pipefail
cd "$(dirname "$0")/.."
logs=target/test-logs
mkdir -p "$logs"
# the steps run in the background each in a process group of its own (where `setsid`
# exists), so that on any exit before they end (a failed build, an interrupt) they are
# stopped with everything they started: no pip left writing into .venv
started=()
background() {
    if command -v setsid > /dev/null; then
        setsid "$@" &
    else
        "$@" &
    fi
    started+=("$!")
}
stop_started() {
    for pid in ${started[@]+"${started[@]}"}; do
        kill -- "-$pid" 2> /dev/null || kill "$pid" 2> /dev/null || true
    done
    wait
}
trap stop_started EXIT

# 1. the Python environment: a venv, packages from PyPI
background scripts/python_test.sh env > "$logs/python-env.log" 2>&1
env_pid=$!

# 2. every Rust test target, compiled. `--tests` honours a library's `test = false`
# (`--lib` would not: it built the engine crate a second time, as a test harness with
# no tests, about a minute of CI). Examples are not built here: `.ci/run`'s clippy
# checks them, and the conformance suite runs the worked example
cargo test --workspace --tests --no-run

# 3. the Python package, built in the dev profile: it reuses the engine compiled above
# (masked-cli and masked-tests pin the features the extension turns on in shared
# dependencies, so the builds resolve one feature set: scripts/check_features.py)
if ! wait "$env_pid"; then
    cat "$logs/python-env.log" >&2
    echo "making the Python environment failed (above)" >&2
    exit 1
fi
started=() # (ended and waited for: nothing of it left to stop)
scripts/python_test.sh build

# 4. the tests run: the Rust test binaries here; beside them, the doc tests (the
# benches have none: their library and criterion are not built; the Python extension
# has none either) and then pytest
background bash -c 'cargo test --workspace --doc --exclude masked-benches \
    --exclude masked-python && scripts/python_test.sh run' > "$logs/doc-and-python.log" 2>&1
side_pid=$!
rust=0
cargo test --workspace --tests || rust=$?
side=0
wait "$side_pid" || side=$?
started=()
cat "$logs/doc-and-python.log"
if [ "$rust" != 0 ]; then
    echo "the Rust tests failed (above)" >&2
fi
if [ "$side" != 0 ]; then
    echo "the doc tests or the Python tests failed (the output just above)" >&2
fi
[ "$rust" = 0 ] && [ "$side" = 0 ]
