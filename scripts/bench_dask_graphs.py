#!/usr/bin/env python3
"""Graph construction: how long `mk.dask.<op>(x, axis, mask=valid)` takes to return its
lazy array (nothing computed), against dask.array.ma's reduction on the same masked
dask array, in the same run. A 4000 x 4000 float64 array in 1000 x 1000 chunks, each op
over both axes, the best of `--rounds` rounds per op.

    scripts/python_test.sh -k nothing          # builds the package into .venv
    .venv/bin/python scripts/bench_dask_graphs.py --rounds 7

Prints a markdown table (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import time

import dask.array as da
import numpy as np

import masked as mk

# mk.dask op -> dask.array.ma's counterpart on a numpy.ma-chunked array (None: none)
PEERS = {
    "sum": lambda m, ax: m.sum(axis=ax),
    "mean": lambda m, ax: m.mean(axis=ax),
    "var": lambda m, ax: m.var(axis=ax, ddof=1),
    "amax": lambda m, ax: m.max(axis=ax),
    "argmax": lambda m, ax: da.argmax(m, axis=ax),
    "logsumexp": None,
    "median": None,
}


def best_ms(fn, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for ax in (0, 1):
            fn(ax)
        best = min(best, (time.perf_counter() - t) / 2)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    x = np.random.default_rng(0).standard_normal((4000, 4000))
    dx = da.from_array(x, chunks=(1000, 1000))
    dv = dx > 0.1
    m = da.ma.masked_array(dx, mask=~dv)
    print("| op | mk.dask (ms) | dask.array.ma (ms) | dask.array.ma / mk.dask |")
    print("|---|---|---|---|")
    for op, peer in PEERS.items():
        ours = best_ms(lambda ax: getattr(mk.dask, op)(dx, axis=ax, mask=dv), args.rounds)
        if peer is None:
            print(f"| {op} | {ours:.2f} | - | - |")
            continue
        theirs = best_ms(lambda ax: peer(m, ax), args.rounds)
        print(f"| {op} | {ours:.2f} | {theirs:.2f} | {theirs / ours:.2f}x |")


if __name__ == "__main__":
    main()
