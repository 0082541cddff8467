"""Fused elementwise-then-reduce on the sparse layouts, against materialise-then-reduce
and scipy, measured in the same run.

CSR, 100000 x 100000, about 10M stored f32 entries, the second operand on the same
entries (the strict case): `masked bench --layout csr` (2 threads) for the fused
`sum-of-mul` and `logsumexp-of-add` over rows, against our own materialise-then-reduce
(`mul` then `sum`, `add` then `logsumexp`: the two timings added), and scipy's row sums
of the product two ways: as a user writes it, `A.multiply(B).sum(axis=1)`, and an
expert's values-only form on the shared pattern (`A.data * B.data`, then
`np.add.reduceat` over the rows).
COO, [1000, 1000, 100] f32 with 10% stored (10M entries): `sum-of-mul` over the last dim
against `mul` then `sum`.
Prints per round and the medians. Needs numpy and scipy (a venv outside the repo) and a
release build (MASKED_BIN to use another).

  python scripts/compare_peers_fused.py [ROUNDS]
"""
import os
import sys

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_common import ours, show, medians, tmed  # noqa: E402

rng = np.random.default_rng(0)
n, per = 100_000, 100
cols = np.sort(rng.integers(0, n, (n, per)), axis=1)
keep = np.ones_like(cols, dtype=bool)
keep[:, 1:] = cols[:, 1:] != cols[:, :-1]
indptr = np.concatenate([[0], np.cumsum(keep.sum(1))])
indices = cols[keep].astype(np.int32)
A = sp.csr_matrix((rng.standard_normal(indices.size, dtype=np.float32), indices, indptr), shape=(n, n))
B = sp.csr_matrix((rng.standard_normal(indices.size, dtype=np.float32), indices, indptr), shape=(n, n))
starts = indptr[:-1][np.diff(indptr) > 0]


def scipy_expert():
    prod = A.data * B.data
    return np.add.reduceat(prod, starts)


csr = ["--layout", "csr", "--shape", "100000,100000", "--density", "0.001", "--repeat", "9", "--dim", "1"]
coo = ["--layout", "coo", "--shape", "1000,1000,100", "--density", "0.1", "--repeat", "9", "--dim", "2"]
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
rows = []
for r in range(rounds):
    row = {"round": r + 1}
    o = {k: v["seconds"] for k, v in ours(["sum-of-mul", "mul", "sum", "logsumexp-of-add", "add", "logsumexp"], *csr).items()}
    s_user = tmed(lambda: A.multiply(B).sum(axis=1), reps=3)
    s_expert = tmed(scipy_expert, reps=5)
    row["csr_sum_of_mul_ms"] = o["sum-of-mul"] * 1e3
    row["csr_mul+sum_ms"] = (o["mul"] + o["sum"]) * 1e3
    row["csr_fused/(mul+sum)"] = o["sum-of-mul"] / (o["mul"] + o["sum"])
    row["csr_fused/plain_sum"] = o["sum-of-mul"] / o["sum"]
    row["csr_lse_of_add_ms"] = o["logsumexp-of-add"] * 1e3
    row["csr_lse_fused/(add+lse)"] = o["logsumexp-of-add"] / (o["add"] + o["logsumexp"])
    row["scipy_multiply_sum_ms"] = s_user * 1e3
    row["scipy_multiply_sum/ours_fused"] = s_user / o["sum-of-mul"]
    row["scipy_values_reduceat_ms"] = s_expert * 1e3
    row["scipy_values_reduceat/ours_fused"] = s_expert / o["sum-of-mul"]
    c = {k: v["seconds"] for k, v in ours(["sum-of-mul", "mul", "sum"], *coo).items()}
    row["coo_sum_of_mul_ms"] = c["sum-of-mul"] * 1e3
    row["coo_fused/(mul+sum)"] = c["sum-of-mul"] / (c["mul"] + c["sum"])
    row["coo_fused/plain_sum"] = c["sum-of-mul"] / c["sum"]
    rows.append(row)
    show(row)
medians(rows)
