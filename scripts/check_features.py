#!/usr/bin/env python3
"""Checks that builds meant to share compiled crates resolve the same features for them
(Cargo compiles a crate again for every feature set it is asked for):

- `cargo run --release -p masked-cli` (the README's first command) and `cargo build
  --release` (the workspace): every crate of the CLI's graph (normal and build edges);
- `cargo test --workspace` and scripts/test.sh's doc-test pass, which leaves the Python
  extension and the benches out: every crate of the pass's graph.

The pins that keep them equal are in crates/cli/Cargo.toml and tests/Cargo.toml. Exits
1 naming each crate whose features differ.
"""

from __future__ import annotations

import subprocess
import sys


def features(*args: str) -> dict[str, set[str]]:
    out = subprocess.run(
        ["cargo", "tree", "--prefix", "none", "-f", "{p} {f}", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found: dict[str, set[str]] = {}
    for line in out.splitlines():
        parts = line.replace(" (*)", "").split()
        if len(parts) < 2:
            continue
        name = f"{parts[0]} {parts[1]}"
        feats = parts[-1] if len(parts) > 2 and not parts[-1].startswith("(") else ""
        found.setdefault(name, set()).add(feats)
    return found


def differ(what: str, part: dict[str, set[str]], whole: dict[str, set[str]]) -> list[str]:
    return [f"{what}: {k}: {sorted(part[k])} against {sorted(whole.get(k, set()))}" for k in sorted(part) if part[k] != whole.get(k)]


def main() -> int:
    bad = differ(
        "-p masked-cli vs the workspace (release)",
        features("-p", "masked-cli", "-e", "normal,build"),
        features("--workspace", "-e", "normal,build"),
    )
    bad += differ(
        "the doc-test pass vs cargo test --workspace",
        features("--workspace", "--exclude", "masked-benches", "--exclude", "masked-python"),
        features("--workspace"),
    )
    for b in bad:
        print(b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
