#!/usr/bin/env python3
"""mk.dask against dask.array.ma on one LocalCluster, in the same run: masked var and sum
over rows of an N x N float32 array generated chunk by chunk (never held at once: each
block from its own seed, PCG64 straight to float32), its mask derived from it (x > 0.1,
90% valid).

    MASKED_PROFILE=release scripts/python_test.sh -k nothing   # an optimised build in .venv
    .venv/bin/python scripts/bench_dask.py --n 81920 --chunk 8192 --workers 1,2

Reports per job and worker count (a fresh cluster per job, `RAYON_NUM_THREADS=1` in the
workers): seconds; each worker's peak resident memory, absolute and over the idle
worker's (after its imports), in MiB and in chunks (a float32 chunk plus its bool mask);
the ratio of dask.array.ma's time to mk.dask's. "generation only" makes every block and
its mask and computes nothing. Then, per op, the engine's time on one chunk in this
process (one thread, the mask packed from bools as each chunk's is) times the chunk
count, against mk.dask's time at one worker minus the generation: the scheduler's and
the partial states' overhead. Prints markdown (docs/benchmarks.md, "Dask").
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> None:
    import os

    # the in-process per-chunk time on one thread, as each worker runs (set before the
    # engine's pool starts)
    os.environ["RAYON_NUM_THREADS"] = "1"
    import dask.array as da
    import distributed

    import masked as mk

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--chunk", type=int, default=4096)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--skip-peer", action="store_true", help="time mk.dask only")
    ap.add_argument("--ops", default="var,sum")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    n, c = args.n, args.chunk
    gib = n * n * 4 / 2**30
    rows = []

    nb = -(-n // c)
    blocks = tuple(min(c, n - i * c) for i in range(nb))

    def graph():
        # each block from its own seed, straight in float32 (no float64 intermediate):
        # the same data for every job and worker count, never held whole
        def block(block_info=None):
            info = block_info[None]
            (r0, r1), (c0, c1) = info["array-location"]
            rng = np.random.default_rng([args.seed, *info["chunk-location"]])
            return rng.random((r1 - r0, c1 - c0), dtype=np.float32)

        x = da.map_blocks(block, chunks=(blocks, blocks), dtype=np.float32, meta=np.empty((0, 0), np.float32))
        return x, x > np.float32(0.1)

    def touch(a, b):
        # the generation-only job's chunk function: both inputs made, nothing computed
        return np.zeros((1, 1), dtype=np.float32)

    def generation(x, v):
        return da.map_blocks(touch, x, v, chunks=((1,) * nb, (1,) * nb), dtype=np.float32).sum()

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

    ops = args.ops.split(",")
    jobs = [("generation only", generation)]
    for op in ops:
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
                client.run(_warm)
                base = max(client.run(rss_now_mib).values())
                t = time.perf_counter()
                client.compute(job(x, v), sync=True)
                secs = time.perf_counter() - t
                peaks = client.run(peak_rss_mib)
                rows.append((w, name, secs, max(peaks.values()), base))
    chunk_mib = c * c * 5 / 2**20
    print(f"N = {n} ({gib:.1f} GiB float32 + mask), chunks {c} x {c} ({nchunks} chunks, {chunk_mib:.0f} MiB each with mask)")
    print()
    print("| workers | job | seconds | peak RSS per worker (MiB) | peak over the idle worker (chunks) | dask.array.ma / mk.dask |")
    print("|---|---|---|---|---|---|")
    by = {(w, name): s for w, name, s, _, _ in rows}
    for w, name, secs, peak, base in rows:
        ratio = ""
        if name.startswith("mk.dask."):
            op = name.split(".")[-1]
            peer = by.get((w, f"dask.array.ma {op}"))
            ratio = f"{peer / secs:.1f}x" if peer else ""
        print(f"| {w} | {name} | {secs:.1f} | {peak:.0f} | {peak - base:.0f} ({(peak - base) / chunk_mib:.1f}) | {ratio} |")
    print()
    gen1 = by.get((1, "generation only"))
    for op in ops:
        pc = per_chunk(op)
        line = f"engine in-process, one {c}x{c} chunk, {op} dim 1 (mask packed, as a chunk is): {pc * 1e3:.1f} ms; x {nchunks} chunks = {pc * nchunks:.1f} s"
        one = by.get((1, f"mk.dask.{op}"))
        if one is not None and gen1 is not None:
            line += f"; mk.dask at 1 worker minus the generation: {one - gen1:.1f} s ({(one - gen1) / (pc * nchunks):.2f}x)"
        print(line)


def rss_now_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _warm() -> None:
    # what every job's chunk functions import, imported before the baseline is taken
    import dask.array  # noqa: F401
    import masked  # noqa: F401
    import masked.dask  # noqa: F401


if __name__ == "__main__":
    main()
