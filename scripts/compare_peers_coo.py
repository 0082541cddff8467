"""COO benchmark against the peers and the dense layout, measured in the same run.

Runs ../shared/bench/peers.py (dense part shrunk to 256 x 256, CSR part to 1000 x 1000,
its COO part as it is: a [1000, 1000, 100] f32 tensor with 1e6 stored entries, mask =
input pattern) and then, on the same workload, `masked bench --layout coo --json` (sum
and amax over dim 1 and dims (0, 2), softmax along dim 2) and the dense layout on an
array of that shape whose mask has the same density (1%): a dense masked reduction costs
the same whichever positions are valid. ROUNDS rounds; prints the ratios per round and
their medians. Needs torch, numpy, scipy (a venv outside the repo) and a release build.

  python scripts/compare_peers_coo.py [ROUNDS]
"""
import sys
from peers_common import peers, ours, show, medians

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2

def bench(layout, ops, dim, *extra):
    return ours(ops, "--layout", layout, "--shape", "1000,1000,100", "--density", "0.01",
                "--dim", dim, "--repeat", "9", *extra)

rows = []
for r in range(rounds):
    p = peers(R=256, C=256, RS=1000, CS=1000, COO=1)
    row = {"round": r + 1}
    for dim, tag in [("1", "1"), ("0,2", "(0, 2)")]:
        o = bench("coo", ["sum", "amax"], dim)
        dn = bench("dense", ["sum", "amax"], dim, "--mask-density", "0.01")
        for op in ["sum", "amax"]:
            ms = o[op]["seconds"]
            row[f"coo_{op}_dim{dim}_ms"] = ms * 1e3
            row[f"coo_{op}_dim{dim}_peak_MB"] = o[op]["peak_bytes"] / 1e6
            row[f"dense_{op}_dim{dim}_ms"] = dn[op]["seconds"] * 1e3
            k = ("torch.masked", f"coo3d_{op}_dim{tag}")
            if k in p:
                row[f"torch.masked_{op}_dim{dim}/ours"] = p[k] / ms
    o = bench("coo", ["softmax"], "2")
    dn = bench("dense", ["softmax"], "2", "--mask-density", "0.01")
    row["coo_softmax_dim2_ms"] = o["softmax"]["seconds"] * 1e3
    row["coo_softmax_dim2_peak_MB"] = o["softmax"]["peak_bytes"] / 1e6
    row["dense_softmax_dim2_ms"] = dn["softmax"]["seconds"] * 1e3
    k = ("torch.sparse", "coo3d_softmax_dim2")
    if k in p:
        row["torch.sparse.softmax/ours"] = p[k] / o["softmax"]["seconds"]
    row.update({f"peer_{a}_{b}_ms": v * 1e3 for (a, b), v in p.items() if "coo3d" in b})
    show(row)
    rows.append(row)

medians(rows)
