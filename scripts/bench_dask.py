#!/usr/bin/env python3
"""mk.dask against dask.array.ma on one LocalCluster, in the same run: masked var and sum
over rows of an N x N float32 array generated chunk by chunk (never held at once), its
mask derived from it (x > 0.1, 90% valid).

    MASKED_PROFILE=release scripts/python_test.sh -k nothing   # an optimised build in .venv
    .venv/bin/pip install 'dask[array]' distributed
    .venv/bin/python scripts/bench_dask.py --n 81920 --chunk 4096 --workers 1,2

Reports per op and worker count: seconds, peak resident memory per worker (the workers
are fresh for each run), the ratio to dask.array.ma, the generation alone
(`x.sum()` of the same graph) and, at one worker, the engine's per-chunk time measured
in this process on one chunk times the chunk count (the scheduler's overhead is the
difference). Prints a markdown table (docs/benchmarks.md, "Dask").
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> None:
    import dask.array as da
    import distributed

    import masked as mk

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--chunk", type=int, default=4096)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--skip-peer", action="store_true", help="time mk.dask only")
    args = ap.parse_args()
    n, c = args.n, args.chunk
    gib = n * n * 4 / 2**30
    rows = []

    def graph():
        x = da.random.RandomState(0).random_sample((n, n), chunks=(c, c)).astype(np.float32)
        return x, x > np.float32(0.1)

    # the engine on one chunk, in this process
    rng = np.random.default_rng(0)
    chunk = rng.random((c, c), dtype=np.float32)
    cvalid = chunk > 0.1
    nchunks = (-(-n // c)) ** 2

    def per_chunk(op):
        getattr(mk, op)(chunk, 1, mask=cvalid)
        t = time.perf_counter()
        for _ in range(3):
            getattr(mk, op)(chunk, 1, mask=cvalid)
        return (time.perf_counter() - t) / 3

    jobs = [("generation only (x.sum())", lambda x, v: x.sum())]
    for op in ("var", "sum"):
        jobs.append((f"mk.dask.{op}", lambda x, v, op=op: getattr(mk.dask, op)(x, axis=1, mask=v)))
        if not args.skip_peer:
            jobs.append((f"dask.array.ma {op}", lambda x, v, op=op: getattr(da.ma.masked_array(x, mask=~v), op)(axis=1)))
    for w in [int(v) for v in args.workers.split(",")]:
        for name, job in jobs:
            # a fresh cluster per job: each worker's peak memory is this job's
            with distributed.LocalCluster(
                n_workers=w,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                host="127.0.0.1",
                env={"RAYON_NUM_THREADS": "1"},
            ) as cluster, distributed.Client(cluster) as client:
                x, v = graph()
                t = time.perf_counter()
                client.compute(job(x, v), sync=True)
                secs = time.perf_counter() - t
                peaks = client.run(peak_rss_mib)
                rows.append((w, name, secs, max(peaks.values())))
    print(f"N = {n} ({gib:.1f} GiB float32 + mask), chunks {c} x {c} ({nchunks} chunks, {c * c * 5 / 2**20:.0f} MiB each with mask)")
    print()
    print("| workers | job | seconds | peak RSS per worker (MiB) | dask.array.ma / mk.dask |")
    print("|---|---|---|---|---|")
    by = {(w, name): s for w, name, s, _ in rows}
    for w, name, secs, peak in rows:
        ratio = ""
        if name.startswith("mk.dask."):
            op = name.split(".")[-1]
            peer = by.get((w, f"dask.array.ma {op}"))
            ratio = f"{peer / secs:.1f}x" if peer else ""
        print(f"| {w} | {name} | {secs:.1f} | {peak:.0f} | {ratio} |")
    print()
    for op in ("var", "sum"):
        pc = per_chunk(op)
        print(f"engine in-process, one {c}x{c} chunk, {op} dim 1: {pc * 1e3:.1f} ms; x {nchunks} chunks = {pc * nchunks:.1f} s")


if __name__ == "__main__":
    main()
