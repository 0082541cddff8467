#!/usr/bin/env bash
# Builds the Python package into a venv inside the checkout (.venv) and runs its tests.
#
#   scripts/python_test.sh            # build with the dev profile (shares `cargo test`'s
#                                     # compiled engine), then pytest python/tests
#   MASKED_PROFILE=release scripts/python_test.sh   # the optimised build (benchmarks)
#
# Needs python3 (>= 3.10) and cargo on PATH; installs maturin, numpy, scipy, pytest,
# dask and distributed into the venv from PyPI. torch is optional: its tests skip,
# saying so, when it is absent (pip install torch into .venv to run them).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${MASKED_VENV:-.venv}
profile=${MASKED_PROFILE:-dev}
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
# dask through its `distributed` extra, which pins the matching distributed release: asked
# for separately, pip paired dask 2026.11.0 (no distributed of that release yet) with
# distributed 2021.4.1, which fails to import
"$venv/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.7,<2" numpy scipy pytest "dask[array,distributed]"
# pip install . with maturin from the venv (no isolated build env to download), in the
# chosen cargo profile: dev, whose settings the test profile inherits, reuses the engine
# that `cargo test` compiled into target/debug
MATURIN_PEP517_ARGS="--profile $profile" \
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps .
"$venv/bin/python" scripts/gen_python_ops.py --check
"$venv/bin/python" -m pytest -q python/tests "$@"
