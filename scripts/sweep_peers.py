"""The layout sweep with the peers in the same run: torch.masked (dense, CSR, COO where it
supports the op), torch.sparse and scipy timed on the very data `masked sweep` generated.

    python scripts/sweep_peers.py [--out DIR] [--masked BIN] [-- SWEEP ARGS...]

1. runs `masked sweep --export --out DIR SWEEP ARGS` (our times, and each point's data:
   DIR/data/*.npz, DIR/points.jsonl, DIR/meta.json);
2. loads every point (the stored CSR, its mask) and times each peer on the same values,
   mask, dim and dtype, with as many threads as the sweep used;
3. writes DIR/peers.jsonl and runs `masked sweep --report-only --out DIR`, which overlays
   the peers on the plots (dashed) and adds a peer / ours table to DIR/report.md.

Only the same work is timed:
- torch.masked on a strided tensor: every op (the dense array and bool mask of the point);
- torch.masked on sparse CSR: sum, amax, amin, mean, prod (keepdim=True, mask required:
  the point's mask as a CSR);
- torch.masked on sparse COO: sum, amax, amin, prod (mask required);
- torch.sparse.softmax / log_softmax on COO, and scipy's row or column sum on CSR: only
  where the mask is the stored pattern (unspecified = masked out, as there).
Needs torch, numpy and scipy (not needed by the sweep itself or by the tests).
"""
import argparse, json, os, subprocess, sys, time

import numpy as np
import scipy.sparse as sp
import torch
import torch.masked as M

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTYPES = {"f32": (np.float32, torch.float32), "f64": (np.float64, torch.float64),
          "f16": (np.float16, torch.float16), "bf16": (np.float32, torch.bfloat16),
          "i32": (np.int32, torch.int32), "i64": (np.int64, torch.int64)}
CSR_OPS = {"sum", "amax", "amin", "mean", "prod"}
COO_OPS = {"sum", "amax", "amin", "prod"}


def tmed(fn, budget=0.1, min_reps=3, max_reps=7):
    """Median seconds: one warm-up call, then at least `min_reps` timed calls and more
    until `budget` seconds of them (at most `max_reps`), as the sweep times ours."""
    fn()
    ts, start = [], time.perf_counter()
    while len(ts) < min_reps or (len(ts) < max_reps and time.perf_counter() - start < budget):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2]


def load(path, shape, np_dtype):
    z = np.load(path)
    a = sp.csr_array((z["data"].astype(np_dtype), z["indices"], z["indptr"]), shape=shape)
    if "mask_indptr" in z:
        m = sp.csr_array((np.ones(len(z["mask_indices"]), dtype=bool), z["mask_indices"],
                          z["mask_indptr"]), shape=shape)
        return a, m, False
    m = sp.csr_array((np.ones(a.nnz, dtype=bool), a.indices, a.indptr), shape=shape)
    return a, m, True


def csr_tensor(a, dtype):
    return torch.sparse_csr_tensor(torch.from_numpy(a.indptr.astype(np.int64)),
                                   torch.from_numpy(a.indices.astype(np.int64)),
                                   torch.from_numpy(np.asarray(a.data)).to(dtype), size=a.shape)


def peers_of_point(a, m, pattern, dtype, dim, ops):
    """(peer, layout, op, callable) for every peer that does the same work."""
    dense = torch.from_numpy(a.toarray()).to(dtype)
    dmask = torch.from_numpy(m.toarray())
    tc = csr_tensor(a, dtype)
    tcm = torch.sparse_csr_tensor(torch.from_numpy(m.indptr.astype(np.int64)),
                                  torch.from_numpy(m.indices.astype(np.int64)),
                                  torch.ones(m.nnz, dtype=torch.bool), size=m.shape)
    coo, coom = tc.to_sparse_coo().coalesce(), tcm.to_sparse_coo().coalesce()
    out = []
    for op in ops:
        f = getattr(M, op, None)
        if f is None:
            continue
        out.append(("torch.masked", "dense", op, lambda f=f: f(dense, dim, mask=dmask)))
        if op in CSR_OPS:
            out.append(("torch.masked", "csr", op,
                        lambda f=f: f(tc, dim, keepdim=True, mask=tcm)))
        if op in COO_OPS:
            out.append(("torch.masked", "coo", op, lambda f=f: f(coo, dim, mask=coom)))
        if pattern and op in ("softmax", "log_softmax"):
            g = getattr(torch.sparse, op)
            out.append(("torch.sparse", "coo", op, lambda g=g: g(coo, dim)))
        if pattern and op == "sum":
            out.append(("scipy", "csr", op, lambda: a.sum(axis=dim)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="sweep-out")
    ap.add_argument("--masked", default=os.environ.get(
        "MASKED_BIN", os.path.join(ROOT, "target", "release", "masked")))
    ap.add_argument("--skip-sweep", action="store_true",
                    help="time the peers on the data an earlier `masked sweep --export` left in --out")
    ap.add_argument("sweep", nargs=argparse.REMAINDER, help="-- then the sweep's arguments")
    args = ap.parse_args()
    extra = [x for x in args.sweep if x != "--"]
    if not args.skip_sweep:
        subprocess.run([args.masked, "sweep", "--export", "--out", args.out, *extra], check=True)
    meta = json.load(open(os.path.join(args.out, "meta.json")))
    np_dtype, dtype = DTYPES[meta["dtype"]]
    threads = max(meta["threads"])
    torch.set_num_threads(threads)
    shape, dim = tuple(meta["shape"]), meta["dim"]
    points = [json.loads(l) for l in open(os.path.join(args.out, "points.jsonl")) if l.strip()]
    failed = set()
    with open(os.path.join(args.out, "peers.jsonl"), "w") as res:
        for k, p in enumerate(points):
            a, m, pattern = load(os.path.join(args.out, p["file"]), shape, np_dtype)
            print(f"[{k + 1}/{len(points)}] {p['series']} {p['x']:.0e}", file=sys.stderr, flush=True)
            for peer, layout, op, fn in peers_of_point(a, m, pattern, dtype, dim, meta["ops"]):
                try:
                    secs = tmed(fn)
                except Exception as e:  # an op the peer refuses on this input: say it once
                    key = (peer, layout, op)
                    if key not in failed:
                        failed.add(key)
                        print(f"  {peer} {layout} {op}: {type(e).__name__}: {str(e)[:160]}",
                              file=sys.stderr, flush=True)
                    continue
                res.write(json.dumps({"series": p["series"], "x": p["x"], "op": op, "peer": peer,
                                      "layout": layout, "seconds": secs, "threads": threads}) + "\n")
                res.flush()
    subprocess.run([args.masked, "sweep", "--report-only", "--out", args.out], check=True)


if __name__ == "__main__":
    main()
