"""VJPs (gradients) against torch.masked's backward, measured in the same run.

On 4096 x 4096 f32 with a 50% random mask, over the last dim, per round: torch.masked's
backward alone (forward once with a retained graph, then `out.backward(g,
retain_graph=True)` timed; 2 threads), then `masked bench --op vjp-OP` on the same shape
and mask density (2 threads; a fresh gradient array, as torch's; given the saved forward
output, as torch's backward is), the same written into a reused buffer (`--into`), and
our dense softmax forward, which writes an output of the same size: the yardstick of the
issue's targets.
Also the CSR softmax VJP against our CSR softmax forward on the 100k x 100k, 10M-entry
matrix, and the binary `mul` VJP (both operands' gradients) against its forward on dense
and on that CSR matrix (equal masks and patterns), with torch's backward of
`torch.where(m, x * y, 0)` (a masked product as plain torch writes it) for the dense one. Needs torch and numpy (a venv outside the repo) and a release build (or MASKED_BIN pointing at another).

  python scripts/compare_peers_vjp.py [ROUNDS]
"""
import os
import sys
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_common import ours, show, medians, tmed  # noqa: E402

warnings.filterwarnings("ignore")
torch.set_num_threads(2)
M = torch.masked
OPS = {  # ours -> torch.masked forward (dim -1)
    "sum": lambda a, k: M.sum(a, -1, mask=k),
    "mean": lambda a, k: M.mean(a, -1, mask=k),
    "amax": lambda a, k: M.amax(a, -1, mask=k),
    "var": lambda a, k: M.var(a, -1, mask=k),
    "logsumexp": lambda a, k: M.logsumexp(a, -1, mask=k),
    "softmax": lambda a, k: M.softmax(a, -1, mask=k),
    "median": lambda a, k: M.median(a, -1, mask=k),
}

rng = np.random.default_rng(0)
x = rng.standard_normal((4096, 4096), dtype=np.float32)
m = rng.random((4096, 4096)) < 0.5
tm = torch.from_numpy(m)


def torch_backward(f):
    xt = torch.from_numpy(x).clone().requires_grad_(True)
    out = f(xt, tm)
    g = torch.ones_like(out)
    return tmed(lambda: out.backward(g, retain_graph=True), reps=3)


rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
rows = []
for r in range(rounds):
    row = {"round": r + 1}
    names = [f"vjp-{op}" for op in OPS] + ["softmax"]
    o = {op: rec["seconds"] for op, rec in ours(names, "--repeat", "7", "--mask-density", "0.5").items()}
    oi = {op: rec["seconds"] for op, rec in ours([n for n in names if n != "softmax"], "--repeat", "7",
                                                  "--mask-density", "0.5", "--into").items()}
    fwd = o["softmax"]
    row["softmax_forward_ours_ms"] = fwd * 1e3
    for op, f in OPS.items():
        t = torch_backward(f)
        ours_s = o[f"vjp-{op}"]
        row[f"{op}_vjp_ours_ms"] = ours_s * 1e3
        row[f"{op}_torch_backward_ms"] = t * 1e3
        row[f"{op}_torch/ours"] = t / ours_s
        row[f"{op}_ours/softmax_fwd"] = ours_s / fwd
        row[f"{op}_into_ours/softmax_fwd"] = oi[f"vjp-{op}"] / fwd
    c = ours(["vjp-softmax", "softmax"], "--layout", "csr", "--shape", "100000,100000",
             "--density", "0.001", "--repeat", "5")
    row["csr_softmax_vjp_ms"] = c["vjp-softmax"]["seconds"] * 1e3
    row["csr_softmax_fwd_ms"] = c["softmax"]["seconds"] * 1e3
    row["csr_vjp/fwd"] = c["vjp-softmax"]["seconds"] / c["softmax"]["seconds"]
    # binary: vjp-mul against mul, dense and CSR
    b = ours(["vjp-mul", "mul"], "--repeat", "7", "--mask-density", "0.5")
    row["mul_vjp_dense_ms"] = b["vjp-mul"]["seconds"] * 1e3
    row["mul_vjp/mul_fwd_dense"] = b["vjp-mul"]["seconds"] / b["mul"]["seconds"]
    xt = torch.from_numpy(x).clone().requires_grad_(True)
    yt = torch.from_numpy(x[::-1].copy()).requires_grad_(True)
    out = torch.where(tm, xt * yt, torch.zeros(()))
    t = tmed(lambda: out.backward(torch.ones_like(out), retain_graph=True), reps=3)
    row["mul_torch_where_backward_ms"] = t * 1e3
    row["mul_torch/ours"] = t / b["vjp-mul"]["seconds"]
    c = ours(["vjp-mul", "mul"], "--layout", "csr", "--shape", "100000,100000",
             "--density", "0.001", "--repeat", "5")
    row["csr_mul_vjp_ms"] = c["vjp-mul"]["seconds"] * 1e3
    row["csr_mul_vjp/fwd"] = c["vjp-mul"]["seconds"] / c["mul"]["seconds"]
    rows.append(row)
    show(row)
medians(rows)
