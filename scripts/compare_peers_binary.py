"""Binary elementwise ops and fused forms against the peers, measured in the same run.

Dense, 4096 x 4096 f32, 50% random mask (equal masks: the strict case), per round:
numpy's plain (unmasked, one thread) x + y / x * y / exp(x), torch's plain op (2
threads), MaskedTensor's and numpy.ma's masked op; then `masked bench` (2 threads) for
add, mul, exp (fresh output, as the peers), add and mul written into a caller's buffer
(`--into`), the plain masked sum, the fused sum-of-mul and materialise-then-reduce (mul
then sum, the two timings added).
CSR, 100000 x 100000, 10M stored f32 entries: scipy's A + B on one pattern, A + B on two
patterns and A.multiply(B) on two patterns, against `masked bench --layout csr` add on a
shared structure (strict) and mul under `and` (two patterns: an intersection).
Prints per round and the medians, with the ratios the issue asks for. Needs torch, numpy
and scipy (a venv outside the repo) and a release build.

  python scripts/compare_peers_binary.py [ROUNDS]
"""
import os
import sys
import warnings

import numpy as np
import scipy.sparse as sp
import torch
from torch.masked import masked_tensor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_common import ours, show, medians, tmed  # noqa: E402

warnings.filterwarnings("ignore")
torch.set_num_threads(2)




rng = np.random.default_rng(0)
x = rng.standard_normal((4096, 4096), dtype=np.float32)
y = rng.standard_normal((4096, 4096), dtype=np.float32)
m = rng.random((4096, 4096)) < 0.5
tx, ty, tm = torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(m)
mtx, mty = masked_tensor(tx, tm), masked_tensor(ty, tm)
mx, my = np.ma.masked_array(x, ~m), np.ma.masked_array(y, ~m)


def csr_pair(seed):
    """100k x 100k, about 100 random columns per row (10M entries), f32."""
    r = np.random.default_rng(seed)
    n, per = 100_000, 100
    cols = np.sort(r.integers(0, n, (n, per)), axis=1)
    keep = np.ones_like(cols, dtype=bool)
    keep[:, 1:] = cols[:, 1:] != cols[:, :-1]
    counts = keep.sum(1)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = cols[keep].astype(np.int32)
    data = r.standard_normal(indices.size, dtype=np.float32)
    return sp.csr_matrix((data, indices, indptr), shape=(n, n))


A = csr_pair(1)
B_same = sp.csr_matrix((np.random.default_rng(2).standard_normal(A.nnz, dtype=np.float32), A.indices, A.indptr), shape=A.shape)
B_other = csr_pair(3)

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
rows = []
dense = ["--repeat", "15", "--mask-density", "0.5"]
for r in range(rounds):
    row = {"round": r + 1}
    o = {k: v["seconds"] for k, v in ours(["add", "mul", "exp", "sum"], *dense).items()}
    oi = {k: v["seconds"] for k, v in ours(["add", "mul"], *dense, "--into").items()}
    of = {k: v["seconds"] for k, v in ours(["sum-of-mul"], *dense, "--dim", "1").items()}
    os_ = {k: v["seconds"] for k, v in ours(["sum"], *dense, "--dim", "1").items()}
    for op, npf, tf, in [("add", lambda: x + y, lambda: tx + ty), ("mul", lambda: x * y, lambda: tx * ty)]:
        np_plain, t_plain = tmed(npf), tmed(tf)
        mt_op = tmed(lambda: (mtx + mty) if op == "add" else (mtx * mty), reps=3)
        ma_op = tmed(lambda: (mx + my) if op == "add" else (mx * my), reps=3)
        row[f"{op}_ours_ms"] = o[op] * 1e3
        row[f"{op}_into_ms"] = oi[op] * 1e3
        row[f"{op}_numpy_plain_ms"] = np_plain * 1e3
        row[f"{op}_torch_plain_ms"] = t_plain * 1e3
        row[f"{op}_ours/numpy_plain"] = o[op] / np_plain
        row[f"{op}_into/numpy_plain"] = oi[op] / np_plain
        row[f"{op}_ours/torch_plain"] = o[op] / t_plain
        row[f"{op}_MaskedTensor/ours"] = mt_op / o[op]
        row[f"{op}_numpy.ma/ours"] = ma_op / o[op]
    row["exp_ours/numpy_plain"] = o["exp"] / tmed(lambda: np.exp(x))
    # fused: sum(a * b, dim 1) vs the plain masked sum and materialise-then-reduce
    row["sum_of_mul_ms"] = of["sum-of-mul"] * 1e3
    row["fused/plain_sum"] = of["sum-of-mul"] / os_["sum"]
    row["fused/(mul+sum)"] = of["sum-of-mul"] / (o["mul"] + os_["sum"])
    # CSR against scipy
    c = ours(["add"], "--layout", "csr", "--shape", "100000,100000", "--density", "0.001", "--repeat", "7")
    ci = ours(["add"], "--layout", "csr", "--shape", "100000,100000", "--density", "0.001", "--repeat", "7", "--into")
    ca = ours(["mul"], "--layout", "csr", "--shape", "100000,100000", "--density", "0.001", "--repeat", "7", "--masks", "and")
    s_same = tmed(lambda: A + B_same, reps=5)
    s_mul = tmed(lambda: A.multiply(B_other), reps=5)
    row["csr_add_shared_ms"] = c["add"]["seconds"] * 1e3
    row["scipy_add_same_pattern_ms"] = s_same * 1e3
    row["scipy_add_same/ours"] = s_same / c["add"]["seconds"]
    row["csr_add_into_ms"] = ci["add"]["seconds"] * 1e3
    row["scipy_add_same/ours_into"] = s_same / ci["add"]["seconds"]
    row["csr_mul_and_ms"] = ca["mul"]["seconds"] * 1e3
    row["scipy_multiply_ms"] = s_mul * 1e3
    row["scipy_multiply/ours_and"] = s_mul / ca["mul"]["seconds"]
    rows.append(row)
    show(row)
medians(rows)
