#!/usr/bin/env bash
# Every test: the Rust workspace's (unit, golden fixtures from torch.masked, property
# tests, CLI tests), then the Python package's (built into .venv, pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
scripts/python_test.sh
