"""Gradients of reductions down CSR columns (dim 0), and the column median, against
numpy/scipy, in one run.

On a 100000 x 100000 CSR matrix with about 10M stored entries (f32, the mask its
pattern), each round times `masked bench --layout csr --dim 0 --json` (2 threads;
MASKED_BIN picks the binary, and OLD_BIN, where set, an older binary alternated with
it) for the VJPs of sum, mean, amax and var, then the same gradients written by hand
in numpy over scipy's arrays (scipy has no autograd): sum `g[indices]`; mean
`(g / counts)[indices]` with `np.bincount`; amax the column maxima (`A.max(axis=0)`),
the ties counted with `np.bincount`, `g / ties` where an entry equals its column's
maximum; var the column means from `np.bincount(..., weights=data)`, then
`2 g (x - mean) / (n - 1)`; the median scipy's column order (`tocsc`), each column's
values sorted by one `np.lexsort` (by column, then value), the middle pair averaged.
numpy runs on one thread; scipy's `tocsc` alone is timed too (any column statistic of
scipy's starts from it). Prints each round's times and
the medians of ours / numpy's. Needs numpy and scipy and a release build.

  python scripts/compare_peers_csr_col_grads.py [ROUNDS]
"""
import os
import statistics
import sys
import time

import numpy as np

import peers_common
from peers_common import MASKED

OPS = ["vjp-sum", "vjp-mean", "vjp-amax", "vjp-var", "median"]
ARGS = ["--layout", "csr", "--shape", "100000,100000", "--density", "0.001", "--dim", "0",
        "--repeat", "5"]
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
OLD = os.environ.get("OLD_BIN")

a, rng = peers_common.csr_100k()
n = a.shape[0]
g = rng.standard_normal(n).astype(np.float32)
idx, x = a.indices, a.data


def grad_sum():
    return g[idx]


def grad_mean():
    counts = np.bincount(idx, minlength=n)
    return (g / np.maximum(counts, 1)).astype(np.float32)[idx]


def grad_amax():
    m = a.max(axis=0).toarray().ravel()
    eq = x == m[idx]
    ties = np.bincount(idx[eq], minlength=n)
    return np.where(eq, (g / np.maximum(ties, 1)).astype(np.float32)[idx], np.float32(0))


def grad_var():
    counts = np.bincount(idx, minlength=n)
    mean = np.bincount(idx, weights=x, minlength=n) / np.maximum(counts, 1)
    scale = 2.0 * g / np.maximum(counts - 1, 1)
    return (scale[idx] * (x - mean[idx])).astype(np.float32)


def median():
    c = a.tocsc()
    counts = np.diff(c.indptr)
    v = c.data[np.lexsort((c.data, np.repeat(np.arange(n), counts)))]
    has = counts > 0
    lo = (c.indptr[:-1] + (counts - 1) // 2)[has]
    hi = (c.indptr[:-1] + counts // 2)[has]
    return (v[lo] + v[hi]) / 2


PEERS = {"vjp-sum": grad_sum, "vjp-mean": grad_mean, "vjp-amax": grad_amax,
         "vjp-var": grad_var, "median": median}


def best(f, reps=5):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def ours(binary):
    """Milliseconds by op."""
    peers_common.MASKED = binary
    return {op: r["seconds"] * 1e3 for op, r in peers_common.ours(OPS, *ARGS).items()}


ratios = {op: [] for op in OPS}
old_ratios = {op: [] for op in OPS}
for r in range(rounds):
    new = ours(MASKED)
    old = ours(OLD) if OLD else None
    for op in OPS:
        peer = best(PEERS[op])
        ratios[op].append(new[op] / peer)
        line = f"round {r} {op:9} ours {new[op]:8.2f} ms  numpy {peer:8.2f} ms  ratio {new[op] / peer:.2f}"
        if old:
            old_ratios[op].append(new[op] / old[op])
            line += f"  old {old[op]:8.2f} ms  new/old {new[op] / old[op]:.2f}"
        print(line, flush=True)
# the floor of any column statistic in scipy: its column order alone
print(f"scipy tocsc alone {best(a.tocsc):8.2f} ms")
for op in OPS:
    line = f"{op:9} ours/numpy median {statistics.median(ratios[op]):.2f}"
    if OLD:
        line += f"  new/old median {statistics.median(old_ratios[op]):.2f}"
    print(line)
