"""torch's plain (unmasked) sum and softmax along dim 1 at 1, 2, 4 ... threads up to all
cores, the peers of `masked bench --scaling` (scripts/scaling.sh runs both in one go).

usage: python3 scripts/scaling_torch.py [N]     (an N x N float32 array; default 16384)
Prints one line per (op, threads): the median seconds of 7 calls after a warm-up, and
the speedup over one thread.
"""
import os
import sys

import torch

from peers_common import tmed


def counts(cores):
    c, out = 1, []
    while c < cores:
        out.append(c)
        c *= 2
    return out + [cores]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    cores = os.cpu_count() or 1
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, n, generator=g)
    ops = {
        "plain sum": lambda: x.sum(dim=1),
        "plain softmax": lambda: torch.softmax(x, dim=1),
    }
    print(f"torch {torch.__version__}, {n}x{n} float32, {cores} cores")
    for name, fn in ops.items():
        base = None
        for t in counts(cores):
            torch.set_num_threads(t)
            s = tmed(fn)
            base = base or s
            print(f"{name:20} threads {t:3}  {s * 1e3:9.2f} ms  {base / s:5.2f}x", flush=True)


if __name__ == "__main__":
    main()
