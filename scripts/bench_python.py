#!/usr/bin/env python3
"""Times the Python package against its peers in one run (best of --rounds each):
per-call overhead, dense 4096^2 f32 reductions and softmax, numpy.ma's where / filled /
compressed, strided views, mk.torch forward+backward,
CSR row sums, elementwise and binary ops against scipy, CSR map gradients, COO maps,
reductions and binary ops, and two Python threads against one.

    MASKED_PROFILE=release scripts/python_test.sh -k nothing   # an optimised build in .venv
    .venv/bin/pip install torch                                 # optional peer
    .venv/bin/python scripts/bench_python.py [--rounds 5] [--cli target/release/masked]

Prints a markdown table (docs/benchmarks.md, "Python"). Ratios are measured in the same
run; the machine is shared and noisy, so compare ratios, not absolute times.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import threading
import time

import numpy as np

import masked as mk


def best(f, rounds: int) -> float:
    f()  # warm up
    ts = []
    for _ in range(rounds):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return min(ts)


def per_call(f, n: int = 2000) -> float:
    f()
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--cli", default=None, help="the masked binary, to time `masked bench` on the same data")
    args = ap.parse_args()
    R = args.rounds
    rows = []

    def row(what, ours, peer_name=None, peer=None):
        ratio = f"{peer / ours:.1f}x" if peer else ""
        rows.append((what, f"{ours * 1e3:.3f}", peer_name or "", f"{peer * 1e3:.3f}" if peer else "", ratio))

    try:
        import torch
        import torch.masked  # noqa: F401

        torch.set_num_threads(2)
    except ImportError:
        torch = None

    # per-call overhead
    one = np.ones(1, dtype=np.float32)
    onev = np.ones(1, dtype=bool)
    o_mk = per_call(lambda: mk.sum(one, mask=onev))
    om = np.ma.MaskedArray(one, mask=~onev)
    o_np = per_call(lambda: om.sum())
    rows.append(("per call: sum of 1 element (us)", f"{o_mk * 1e6:.1f}", "numpy.ma", f"{o_np * 1e6:.1f}", ""))
    if torch is not None:
        t1, m1 = torch.ones(1), torch.ones(1, dtype=torch.bool)
        o_t = per_call(lambda: torch.masked.sum(t1, mask=m1), 500)
        rows.append(("per call: sum of 1 element (us)", f"{o_mk * 1e6:.1f}", "torch.masked", f"{o_t * 1e6:.1f}", ""))

    # dense 4096^2 f32, 50% mask, dim 1
    n = args.n
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n), dtype=np.float32)
    valid = rng.random((n, n)) < 0.5
    a = mk.MaskedArray(x, valid)
    for op in ("sum", "softmax", "median"):
        t_mk = best(lambda: getattr(a, op)(1), R)
        peer = None
        if torch is not None:
            tx, tv = torch.from_numpy(x), torch.from_numpy(valid)
            f = getattr(torch.masked, op, None)
            if f is not None:
                peer = best(lambda: f(tx, 1, mask=tv), max(1, R // 2))
        row(f"dense {n}^2 f32 {op} dim 1 (ms)", t_mk, "torch.masked" if peer else None, peer)
    # numpy.ma's everyday calls: where, filled, compressed
    mm = np.ma.MaskedArray(x, mask=~valid)
    row(f"dense {n}^2 where (ms)", best(lambda: mk.where(valid, a, a), R), "np.ma.where", best(lambda: np.ma.where(valid, mm, mm), R))
    row(f"dense {n}^2 filled(0) (ms)", best(lambda: a.filled(0.0), R), "np.ma filled", best(lambda: mm.filled(0.0), R))
    row(f"dense {n}^2 compressed (ms)", best(a.compressed, R), "np.ma compressed", best(mm.compressed, R))
    # strided views read in place (a transpose, a broadcast row): numpy's own op on the
    # same view alongside
    xt, xb = x[:1024, :1024].T, np.broadcast_to(x[0, :1024], (1024, 1024))
    vs = valid[:1024, :1024]
    for what, v in (("x.T", xt), ("broadcast row", xb)):
        m = mk.MaskedArray(v, vs)
        row(f"dense 1024^2 {what}: exp (ms)", best(lambda: mk.exp(m), R), "np.exp (no mask)", best(lambda: np.exp(v), R))
        row(f"dense 1024^2 {what}: sum dim 1 (ms)", best(lambda: mk.sum(m, 1), R), "np.sum (no mask)", best(lambda: v.sum(1), R))
        row(f"dense 1024^2 {what}: softmax dim 1 (ms)", best(lambda: mk.softmax(m, 1), R))
    if args.cli:
        # the engine alone on the same shape (its own data: 50% mask, dim 1)
        out = subprocess.run(
            [args.cli, "bench", "--op", "sum,softmax,median", "--layout", "dense", "--shape", f"{n},{n}", "--dim", "1", "--json"],
            capture_output=True, text=True,
        )
        if out.returncode != 0:
            raise SystemExit(f"masked bench failed: {out.stderr.strip()}")
        for line in out.stdout.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                rows.append((f"masked bench {n}^2 {r['op']} dim 1 (ms, the engine alone)", f"{r['seconds'] * 1e3:.3f}", "", "", ""))

    if torch is not None:
        tx = torch.from_numpy(x[:1024, :1024].copy())
        tv = torch.from_numpy(valid[:1024, :1024].copy())
        # dim 0: lanes at a stride (the gradients' tiled path)
        for op, d in (("softmax", 1), ("var", 1), ("softmax", 0), ("sum", 0)):
            def fwd_bwd(lib):
                y = tx.clone().requires_grad_(True)
                getattr(lib, op)(y, d, mask=tv).sum().backward()

            what = f"mk.torch.{op}" + (" dim 0" if d == 0 else "")
            row(f"{what} fwd+bwd 1024^2 (ms)", best(lambda: fwd_bwd(mk.torch), R), "torch.masked", best(lambda: fwd_bwd(torch.masked), R))

    # CSR row sums against scipy
    try:
        import scipy.sparse as sp

        m = 100_000
        nnz = 10_000_000
        rr = np.sort(rng.integers(0, m, nnz))
        cc = rng.integers(0, m, nnz)
        A = sp.csr_array((rng.standard_normal(nnz).astype(np.float32), (rr, cc)), shape=(m, m))
        A.sum_duplicates()
        ca = mk.csr(A)
        row(f"CSR {m}^2 {A.nnz} stored, row sum (ms)", best(lambda: ca.sum(1), R), "scipy A.sum(1)", best(lambda: A.sum(1), R))
        # elementwise results: a new CSR matrix on the same structure (ours shares the
        # input's index arrays; scipy's copies them)
        B = sp.csr_array((np.cos(A.data), A.indices, A.indptr), shape=A.shape)
        cb = mk.csr(B)

        def sc_exp():
            E = A.copy()
            E.data = np.exp(E.data)
            return E

        row("CSR exp (ms)", best(ca.exp, R), "scipy copy + np.exp(data)", best(sc_exp, R))
        row("CSR x * 2 (ms)", best(lambda: ca * 2, R), "scipy A * 2", best(lambda: A * 2, R))
        row("CSR x * y, one structure (ms)", best(lambda: ca * cb, R), "scipy A.multiply(B)", best(lambda: A.multiply(B), R))
        # gradients of maps: the upstream read as values, the gradient on the input's
        # structure (the kernels alone: `masked bench --layout csr --op vjp-exp ...`)
        y = ca.softmax(1)
        row("CSR vjp exp (ms)", best(lambda: mk.vjp("exp", ca, y), R))
        row("CSR vjp softmax, saved output (ms)", best(lambda: mk.vjp("softmax", ca, y, 1, saved=y), R))
    except ImportError:
        pass

    # COO 1000x1000x100, 1M entries: results on their pattern (maps) or from flat
    # positions (reductions, binary ops)
    shape3 = (1000, 1000, 100)
    flat = np.unique(rng.integers(0, np.prod(shape3), 1_000_000))
    c3 = mk.coo(np.array(np.unravel_index(flat, shape3)), rng.standard_normal(flat.size).astype(np.float32), shape3)
    row(f"COO 1000x1000x100 {c3.nnz} entries, exp (ms)", best(c3.exp, R))
    row("COO softmax dim 2 (ms)", best(lambda: c3.softmax(2), R))
    row("COO sum dim 2 (ms)", best(lambda: c3.sum(2), R))
    row("COO x * 2 (ms)", best(lambda: c3 * 2, R))

    # two Python threads, each a 4096^2 softmax
    def one_run():
        a.softmax(1)

    t1 = best(one_run, R)

    def two():
        ts = [threading.Thread(target=one_run) for _ in range(2)]
        [t.start() for t in ts]
        [t.join() for t in ts]

    t2 = best(two, R)
    rows.append(("two threads x softmax vs one: throughput", f"{2 * t1 / t2:.2f}x", "", "", ""))
    # the same with each call on one thread (mk.set_num_threads(1), a server's setting):
    # what the GIL's release gives where one call does not fill the machine
    mk.set_num_threads(1)
    try:
        t1, t2 = best(one_run, R), best(two, R)
    finally:
        mk.set_num_threads(0)
    rows.append(("two threads x softmax vs one, mk.set_num_threads(1): throughput", f"{2 * t1 / t2:.2f}x", "", "", ""))

    print("| what | masked | peer | peer | peer / masked |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print(json.dumps({"rounds": R}))


if __name__ == "__main__":
    main()
