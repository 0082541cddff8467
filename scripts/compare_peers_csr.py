"""CSR benchmark against the peers, measured in the same run.

Runs ../shared/bench/peers.py (its dense part shrunk to 256 x 256, its COO part off; the
CSR part at 100000 x 100000, density 1e-3, about 10M stored entries, mask = input
pattern, dim 1) and then `masked bench --layout csr --json` on the same workload (f32
values, u32 column indices), ROUNDS times alternating, and prints the ratios per round
and their medians. Needs torch, numpy, scipy (a venv outside the repo) and a release
build (`cargo build --release`).

  python scripts/compare_peers_csr.py [ROUNDS]
"""
import sys
from peers_common import peers, ours, show, medians

OPS = ["sum", "mean", "amax", "softmax", "median", "var", "logsumexp", "argmax"]
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
CSR = ["--layout", "csr", "--shape", "100000,100000", "--density", "0.001", "--repeat", "15"]

rows = []
for r in range(rounds):
    p = peers(R=256, C=256, RS=100000, CS=100000, D=0.001, COO=0)
    o = ours(OPS, *CSR, "--dim", "1")
    o0 = ours(["sum", "amax", "median", "softmax"], *CSR, "--dim", "0")
    srow = p[("scipy", "csr_sum_rows(unmasked)")]
    row = {"round": r + 1, "scipy_row_sum_ms": srow * 1e3, "scipy_row_max_ms": p[("scipy", "csr_max_rows(unmasked)")] * 1e3}
    for op in OPS:
        row[f"{op}_ms"] = o[op]["seconds"] * 1e3
        row[f"{op}_peak_MB"] = o[op]["peak_bytes"] / 1e6
    for op in ["sum", "mean", "amax"]:
        row[f"{op}/scipy_row_sum"] = o[op]["seconds"] / srow
    for op in ["sum", "amax", "mean"]:
        k = ("torch.masked", f"csr_{op}_rows")
        if k in p:
            row[f"torch.masked_{op}/ours"] = p[k] / o[op]["seconds"]
    if ("torch.sparse", "csr_softmax_rows") in p:
        row["torch.sparse.softmax/ours"] = p[("torch.sparse", "csr_softmax_rows")] / o["softmax"]["seconds"]
    if ("torch.masked", "csr_softmax_rows") in p:
        row["torch.masked.softmax/ours"] = p[("torch.masked", "csr_softmax_rows")] / o["softmax"]["seconds"]
    row["median/sum"] = o["median"]["seconds"] / o["sum"]["seconds"]
    for op in ["sum", "amax", "median", "softmax"]:
        row[f"dim0_{op}_ms"] = o0[op]["seconds"] * 1e3
        row[f"dim0_{op}_peak_MB"] = o0[op]["peak_bytes"] / 1e6
    row["dim0_sum/dim1_sum"] = o0["sum"]["seconds"] / o["sum"]["seconds"]
    rows.append(row)
    show(row)

medians(rows)
