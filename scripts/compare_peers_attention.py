"""Sparse attention against torch's paths, measured in the same run (2 threads, f32, one
head, d = 64; docs/benchmarks.md, "Sparse attention").

Per pattern (sliding window `band:W`, `random:P` plus the diagonal) and per round:
- torch's best autograd path: `torch.sparse.sampled_addmm` (CSR scores) ->
  `torch.sparse.softmax` (COO) -> `torch.sparse.mm`, forward, and forward + backward;
- dense SDPA with a bool mask (`F.scaled_dot_product_attention`), forward (and forward +
  backward with --slow: tens of seconds at n = 16384);
- `torch.mm` of [n, d] x [d, 4096], its GFLOP/s (the machine's dense rate);
- with --flex: compiled `flex_attention` forward on the same pattern (its mask_mod reads
  a dense bool mask of the pattern; the compile and the block-mask build are not timed;
  torch has no flex backward on CPU);
- ours: `masked bench --op attention,attention-vjp` (attention-vjp = forward + gradients,
  a training step's attention), with the peak bytes one run allocated.
Useful FLOPs: 4 nnz d forward, 12 nnz d forward + backward. Needs torch and numpy (a venv
outside the repo) and a release build (or MASKED_BIN).

  python scripts/compare_peers_attention.py [ROUNDS] [N] [--slow] [--flex]
"""
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_common import ours, show, medians, tmed  # noqa: E402

warnings.filterwarnings("ignore")
torch.set_num_threads(2)
args = [a for a in sys.argv[1:] if not a.startswith("--")]
ROUNDS = int(args[0]) if args else 3
N = int(args[1]) if len(args) > 1 else 16384
SLOW = "--slow" in sys.argv
FLEX = "--flex" in sys.argv
D = 64


def pattern(kind):
    """The pattern as torch CSR indices (crow, col) and a dense bool mask maker."""
    rng = np.random.default_rng(0)
    if kind.startswith("band:"):
        w = int(kind[5:])
        rows, cols = [], []
        for i in range(N):
            lo = max(0, i - w + 1)
            rows.append(np.full(i - lo + 1, i))
            cols.append(np.arange(lo, i + 1))
        rows, cols = np.concatenate(rows), np.concatenate(cols)
    else:
        p = float(kind[7:])
        rows, cols = [], []
        for i in range(N):
            c = np.flatnonzero(rng.random(N) < p)
            c = np.union1d(c, [i])
            rows.append(np.full(len(c), i))
            cols.append(c)
        rows, cols = np.concatenate(rows), np.concatenate(cols)
    crow = np.zeros(N + 1, dtype=np.int64)
    np.add.at(crow, rows + 1, 1)
    crow = np.cumsum(crow)
    return torch.from_numpy(crow), torch.from_numpy(cols.astype(np.int64)), rows, cols


def torch_sparse(q, k, v, crow, col, backward):
    """sampled_addmm (CSR) -> sparse softmax (COO) -> sparse.mm, with autograd."""
    ones = torch.sparse_csr_tensor(crow, col, torch.ones(len(col)), (N, N))
    s = torch.sparse.sampled_addmm(ones, q, k.t(), beta=0.0, alpha=1.0 / D**0.5)
    p = torch.sparse.softmax(s.to_sparse_coo(), dim=1)
    o = torch.sparse.mm(p, v)
    if backward:
        o.backward(torch.ones_like(o))
    return o


def flex_on(rows, cols):
    """Compiled flex_attention over the pattern (rows, cols), compiled and its block mask
    built here, untimed: a function of (q, k, v) [1, 1, N, D]."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    dense = torch.zeros(N, N, dtype=torch.bool)
    dense[torch.from_numpy(rows), torch.from_numpy(cols)] = True
    bm = create_block_mask(lambda b, h, qi, ki: dense[qi, ki], None, None, N, N, device="cpu")
    compiled = torch.compile(flex_attention)

    def run(q, k, v):
        return compiled(q, k, v, block_mask=bm)

    x = torch.randn(1, 1, N, D)
    run(x, x, x)  # the compile
    return run


def main():
    rows_out = []
    for kind in ["band:256", "random:0.01"]:
        crow, col, r, c = pattern(kind)
        nnz = len(col)
        q, k, v = (torch.randn(N, D) for _ in range(3))
        qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
        flex = flex_on(r, c) if FLEX else None
        for rnd in range(ROUNDS):
            row = {"round": rnd, "pattern": kind, "nnz": nnz}
            t_sf = tmed(lambda: torch_sparse(q, k, v, crow, col, False), 3)
            t_sb = tmed(lambda: torch_sparse(qg, kg, vg, crow, col, True), 3)
            mask = torch.zeros(N, N, dtype=torch.bool)
            mask[torch.from_numpy(r), torch.from_numpy(c)] = True
            qs, ks, vs = (x.view(1, 1, N, D) for x in (q, k, v))
            t_df = tmed(lambda: F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask), 1)
            if SLOW:
                qd, kd, vd = (x.view(1, 1, N, D).clone().requires_grad_(True) for x in (q, k, v))
                row["sdpa_dense_fwd_bwd_s"] = tmed(
                    lambda: F.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask).sum().backward(), 1)
            del mask
            if flex is not None:
                row["flex_fwd_s"] = tmed(lambda: flex(qs, ks, vs), 3)
            a, b = torch.randn(N, D), torch.randn(D, 4096)
            t_mm = tmed(lambda: torch.mm(a, b), 5)
            o = ours(["attention", "attention-vjp"], "--shape", f"{N},{D}", "--pattern", kind, "--repeat", "5")
            fwd, fb = o["attention"]["seconds"], o["attention-vjp"]["seconds"]
            row.update({
                "torch_sparse_fwd_s": t_sf, "torch_sparse_fwd_bwd_s": t_sb, "sdpa_dense_fwd_s": t_df,
                "ours_fwd_s": fwd, "ours_fwd_bwd_s": fb,
                "fwd_speedup_vs_torch_sparse": t_sf / fwd, "fwd_bwd_speedup_vs_torch_sparse": t_sb / fb,
                "fwd_speedup_vs_sdpa": t_df / fwd,
                **({"fwd_speedup_vs_flex": row["flex_fwd_s"] / fwd} if flex is not None else {}),
                "ours_fwd_gflops": 4 * nnz * D / fwd / 1e9, "ours_fwd_bwd_gflops": 12 * nnz * D / fb / 1e9,
                "torch_sparse_fwd_bwd_gflops": 12 * nnz * D / t_sb / 1e9,
                "torch_mm_gflops": 2 * N * D * 4096 / t_mm / 1e9,
                "ours_fwd_bwd_peak_mb": o["attention-vjp"]["peak_bytes"] / 1e6,
                "ours_plan_mb": o["attention-vjp"]["plan_bytes"] / 1e6,
                "ours_fwd_bwd_with_plan_mb": (o["attention-vjp"]["peak_bytes"] + o["attention-vjp"]["plan_bytes"]) / 1e6,
                "bound_3x_nnz_nd_mb": 3 * (nnz + N * D) * 4 / 1e6,
            })
            show(row)
            rows_out.append(row)
        print(f"pattern {kind}:")
        medians([{k2: v2 for k2, v2 in x.items() if k2 != "pattern"} for x in rows_out if x["pattern"] == kind])


if __name__ == "__main__":
    main()
