#!/usr/bin/env bash
# Every test: the Rust workspace's (unit, golden fixtures from torch.masked, property
# tests, CLI tests), then the Python package's (built into .venv, pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
# every test target, then the doc tests (examples are not built here: `.ci/run`'s clippy
# checks them, and the conformance suite runs the worked example). `--tests` honours a
# library's `test = false` (`--lib` would not: it built the engine crate a second time,
# as a test harness with no tests, about a minute of CI)
cargo test --workspace --tests
# (the benches have none: their library and criterion are not built here; the Python
# extension has none either, and maturin builds it below with its own flags, so
# compiling it here, pyo3 with it, was half a minute spent twice. masked-cli and
# masked-tests pin the features the extension turns on in shared dependencies: leaving
# it out resolves the features the test build did, and nothing is compiled again)
cargo test --workspace --doc --exclude masked-benches --exclude masked-python
scripts/python_test.sh
