"""Dense benchmark against the peers, measured in the same run.

Runs ../shared/bench/peers.py (the dense workloads; its CSR part shrunk and COO part
off, they belong to the sparse layouts) and then `masked bench --json` on the same
4096 x 4096 f32, 50% mask, dim 1 workload, ROUNDS times alternating, and prints the
ratios per round. Needs torch, numpy, scipy (a venv outside the repo) and a release
build (`cargo build --release`).

  python scripts/compare_peers.py [ROUNDS]
"""
import sys
from peers_common import peers, ours, show, medians

OPS = ["sum", "mean", "amax", "argmax", "var", "std", "logsumexp", "softmax", "median", "nanmedian"]
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3

rows = []
for r in range(rounds):
    p = peers(RS=1000, CS=1000, COO=0)
    o = {op: rec["seconds"] for op, rec in ours(OPS, "--repeat", "15").items()}
    plain = p[("torch", "plain_sum_rows")]
    row = {"round": r + 1, "torch_plain_sum_ms": plain * 1e3}
    for op in OPS:
        row[f"{op}_ms"] = o[op] * 1e3
        row[f"{op}/torch_plain_sum"] = o[op] / plain
    for op in ["sum", "mean", "amax", "var", "logsumexp", "softmax", "median"]:
        row[f"torch.masked_{op}/ours"] = p[("torch.masked", f"dense_{op}_rows")] / o[op]
    row["numpy.ma_sum/ours"] = p[("numpy.ma", "dense_sum_rows")] / o["sum"]
    row["torch.nanmedian/ours_nanmedian"] = p[("torch", "dense_nanmedian_rows")] / o["nanmedian"]
    row["numpy.nanmedian/ours_nanmedian"] = p[("numpy", "dense_nanmedian_rows")] / o["nanmedian"]
    rows.append(row)
    show(row)

medians(rows)
