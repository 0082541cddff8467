"""Reductions along dim 0 (column statistics of a feature matrix) against the peers and
against the same ops along dim 1, measured in the same run.

On an N x N f32 array with a 50% mask (N = 1024 and 4096 by default), each round times
`masked bench --json --dim 0` and `--dim 1` (2 threads; MASKED_BIN picks the binary, and
OLD_BIN, where set, an older binary alternated with it), then torch.masked (mean, amax,
argmax, var, logsumexp, norm, softmax, log_softmax, normalize, cumsum) and numpy.ma (mean,
var, median, argmax, cumsum) along dim 0 on data of the same shape and density, plain
torch's `nanmedian` on the masked-out positions set to NaN and its softmax without a mask,
and prints each op's ratios. Needs torch and numpy (the peers' venv) and a release build.

  python scripts/compare_peers_dim0.py [ROUNDS] [N,N,...]
"""
import os, subprocess, sys, json
import numpy as np
from peers_common import tmed, show, medians, MASKED

OPS = ["sum", "mean", "count", "amax", "argmax", "var", "std", "norm", "logsumexp", "median",
       "softmax", "log_softmax", "normalize", "cumsum"]
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
sizes = [int(n) for n in (sys.argv[2] if len(sys.argv) > 2 else "1024,4096").split(",")]
OLD = os.environ.get("OLD_BIN")


def bench(binary, n, dim):
    out = subprocess.run([binary, "bench", "--op", ",".join(OPS), "--threads", "2", "--json",
                          "--shape", f"{n},{n}", "--dim", str(dim), "--repeat", "15"],
                         capture_output=True, text=True, check=True).stdout
    return {json.loads(l)["op"]: json.loads(l)["seconds"] for l in out.splitlines()}


def peers(n):
    import torch
    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n)).astype(np.float32)
    m = rng.random((n, n)) < 0.5
    t, tm = torch.from_numpy(x), torch.from_numpy(m)
    ma = np.ma.MaskedArray(x, mask=~m)
    tn = t.masked_fill(~tm, float("nan"))
    tma = torch.masked
    return {
        "torch.masked mean": tmed(lambda: tma.mean(t, 0, mask=tm), 5),
        "torch.masked amax": tmed(lambda: tma.amax(t, 0, mask=tm), 5),
        "torch.masked argmax": tmed(lambda: tma.argmax(t, 0, mask=tm), 5),
        "torch.masked var": tmed(lambda: tma.var(t, 0, unbiased=True, mask=tm), 5),
        "torch.masked logsumexp": tmed(lambda: tma.logsumexp(t, 0, mask=tm), 5),
        "torch.masked norm": tmed(lambda: tma.norm(t, 2.0, 0, mask=tm), 5),
        "torch nanmedian": tmed(lambda: torch.nanmedian(tn, 0), 5),
        "torch.masked softmax": tmed(lambda: tma.softmax(t, 0, mask=tm), 5),
        "torch.masked log_softmax": tmed(lambda: tma.log_softmax(t, 0, mask=tm), 5),
        "torch.masked normalize": tmed(lambda: tma.normalize(t, 2.0, 0, mask=tm), 5),
        "torch.masked cumsum": tmed(lambda: tma.cumsum(t, 0, mask=tm), 5),
        "torch softmax (no mask)": tmed(lambda: torch.softmax(t, 0), 5),
        "numpy.ma mean": tmed(lambda: ma.mean(axis=0), 3),
        "numpy.ma cumsum": tmed(lambda: ma.cumsum(axis=0), 3),
        "numpy.ma var": tmed(lambda: ma.var(axis=0, ddof=1), 3),
        "numpy.ma median": tmed(lambda: np.ma.median(ma, axis=0), 3),
        "numpy.ma argmax": tmed(lambda: ma.argmax(axis=0), 3),
    }


PAIRS = [("mean", "torch.masked mean"), ("softmax", "torch.masked softmax"),
         ("log_softmax", "torch.masked log_softmax"), ("normalize", "torch.masked normalize"),
         ("cumsum", "torch.masked cumsum"), ("softmax", "torch softmax (no mask)"),
         ("mean", "numpy.ma mean"), ("cumsum", "numpy.ma cumsum"), ("amax", "torch.masked amax"), ("argmax", "torch.masked argmax"),
         ("var", "torch.masked var"), ("logsumexp", "torch.masked logsumexp"),
         ("norm", "torch.masked norm"), ("median", "torch nanmedian"),
         ("var", "numpy.ma var"), ("median", "numpy.ma median"), ("argmax", "numpy.ma argmax")]

rows = []
for r in range(rounds):
    for n in sizes:
        row = {"round": r + 1, "n": n}
        new0, new1 = bench(MASKED, n, 0), bench(MASKED, n, 1)
        old0 = bench(OLD, n, 0) if OLD else None
        p = peers(n)
        for op in OPS:
            row[f"{op} dim0 ms"] = new0[op] * 1e3
            row[f"{op} dim0/dim1"] = new0[op] / new1[op]
            if old0:
                row[f"{op} old/new dim0"] = old0[op] / new0[op]
        for op, peer in PAIRS:
            row[f"{peer}/ours"] = p[peer] / new0[op]
        show(row)
        rows.append(row)
for n in sizes:
    print(f"n = {n}")
    medians([r for r in rows if r["n"] == n])
