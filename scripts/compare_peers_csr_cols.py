"""CSR ops along the columns (dim 0) against the peers, measured in the same run.

On a 100000 x 100000 CSR matrix with about 10M stored entries (the mask its pattern,
f32), each round times `masked bench --layout csr --dim 0 --json` (2 threads; MASKED_BIN
picks the binary, and OLD_BIN, where set, an older binary alternated with it) for
softmax, normalize, cumsum, median, sum and the softmax and sum VJPs, then the peers on a matrix
of the same shape and density: torch.sparse.softmax over dim 0 (COO, coalesced), and
scipy's `tocsc()` (the column order every column op of scipy's starts from) and
`max(axis=0)`. Prints each round's ratios and their medians. Needs torch, numpy and
scipy (the peers' venv) and a release build.

  python scripts/compare_peers_csr_cols.py [ROUNDS]
"""
import os
import sys

import numpy as np
import torch

from peers_common import tmed, show, medians, MASKED
import peers_common

OPS = ["softmax", "normalize", "cumsum", "median", "sum", "vjp-softmax", "vjp-sum"]
ARGS = ["--layout", "csr", "--shape", "100000,100000", "--density", "0.001", "--dim", "0",
        "--repeat", "5"]
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
OLD = os.environ.get("OLD_BIN")

torch.set_num_threads(2)
a, rng = peers_common.csr_100k()
n = a.shape[0]
t = torch.sparse_coo_tensor(
    torch.from_numpy(np.vstack([np.repeat(np.arange(n), np.diff(a.indptr)), a.indices]).astype(np.int64)),
    torch.from_numpy(a.data), size=(n, n)).coalesce()


def ours(binary):
    peers_common.MASKED = binary
    return peers_common.ours(OPS, *ARGS)


rows = []
for r in range(rounds):
    new = ours(MASKED)
    old = ours(OLD) if OLD else None
    row = {"round": r + 1}
    for op in OPS:
        row[f"{op} ms"] = new[op]["seconds"] * 1e3
        if old:
            row[f"{op} old/new"] = old[op]["seconds"] / new[op]["seconds"]
    ts = tmed(lambda: torch.sparse.softmax(t, 0), 3)
    row["torch.sparse.softmax dim 0 ms"] = ts * 1e3
    row["torch.sparse.softmax/ours"] = ts / new["softmax"]["seconds"]
    row["scipy tocsc ms"] = tmed(lambda: a.tocsc(), 3) * 1e3
    smax = tmed(lambda: a.max(axis=0), 3)
    row["scipy max(axis=0) ms"] = smax * 1e3
    row["scipy max(axis=0)/our sum"] = smax / new["sum"]["seconds"]
    rows.append(row)
    show(row)

medians(rows)
