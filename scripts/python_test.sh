#!/usr/bin/env bash
# Builds the Python package into a venv inside the checkout (.venv) and runs its tests.
#
#   scripts/python_test.sh            # all three steps below, then pytest python/tests
#   scripts/python_test.sh -k softmax # the same, pytest's arguments after the steps
#   scripts/python_test.sh env        # one step: the venv and its packages from PyPI
#   scripts/python_test.sh build      # one step: the package, built and installed
#   scripts/python_test.sh run [ARGS] # one step: the ops table checked, pytest
#   MASKED_PROFILE=release scripts/python_test.sh   # the optimised build (benchmarks)
#
# The build uses the dev profile by default, which shares `cargo test`'s compiled engine
# (scripts/test.sh runs the steps apart, to make the venv while Rust compiles and run
# pytest beside the Rust tests).
#
# Needs python3 (>= 3.10) and cargo on PATH; installs maturin, numpy, scipy, pytest,
# dask and distributed into the venv from PyPI. torch is optional: its tests skip,
# saying so, when it is absent (pip install torch into .venv to run them).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${MASKED_VENV:-.venv}
profile=${MASKED_PROFILE:-dev}
steps=(env build run)
case "${1:-}" in
    env | build | run)
        steps=("$1")
        shift
        ;;
esac

make_env() {
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv"
    fi
    # dask through its `distributed` extra, which pins the matching distributed release:
    # asked for separately, pip paired dask 2026.11.0 (no distributed of that release
    # yet) with distributed 2021.4.1, which fails to import. No bytecode compiled at
    # install (half of pip's CPU time here): Python compiles what the tests import, once
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-compile \
        "maturin>=1.7,<2" numpy scipy pytest "dask[array,distributed]"
}

build_package() {
    # pip install . with maturin from the venv (no isolated build env to download), in
    # the chosen cargo profile: dev, whose settings the test profile inherits, reuses
    # the engine that `cargo test` compiled into target/debug
    MATURIN_PEP517_ARGS="--profile $profile" \
        "$venv/bin/python" -m pip install -q --disable-pip-version-check \
        --no-build-isolation --force-reinstall --no-deps .
}

run_tests() {
    "$venv/bin/python" scripts/gen_python_ops.py --check
    "$venv/bin/python" -m pytest -q python/tests "$@"
}

for step in "${steps[@]}"; do
    case $step in
        env) make_env ;;
        build) build_package ;;
        run) run_tests "$@" ;;
    esac
done
