"""What the compare_peers*.py scripts share: running ../shared/bench/peers.py, running
`masked bench --json` (2 threads, like the peers), and printing rounds and medians."""
import json, os, subprocess, sys, statistics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(ROOT, "..", "shared", "bench", "peers.py")
MASKED = os.environ.get("MASKED_BIN", os.path.join(ROOT, "target", "release", "masked"))

def peers(**env):
    """The peers' median seconds by (peer, work); `env` sizes or switches off parts."""
    full = dict(os.environ, THREADS="2", **{k: str(v) for k, v in env.items()})
    out = subprocess.run([sys.executable, PEERS], env=full, capture_output=True, text=True, check=True).stdout
    res = {}
    for line in out.splitlines():
        d = json.loads(line)
        if "s" in d:
            res[(d["peer"], d["work"])] = d["s"]
        else:
            print("peer error:", line, file=sys.stderr, flush=True)
    return res

def ours(ops, *args):
    """`masked bench --json` records by op, for `ops` and any further bench arguments."""
    out = subprocess.run([MASKED, "bench", "--op", ",".join(ops), "--threads", "2", "--json", *args],
                         capture_output=True, text=True, check=True).stdout
    return {json.loads(l)["op"]: json.loads(l) for l in out.splitlines()}

def tmed(fn, reps=7):
    """The median seconds of `reps` calls of `fn` after one warm-up call."""
    import time
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2]

def show(row):
    """Prints one round's row."""
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)

def medians(rows):
    """Prints the median of every field over the rounds."""
    print("median over rounds:")
    for key in rows[0]:
        if key != "round":
            print(f"  {key:32s} {statistics.median(r[key] for r in rows if key in r):10.3f}")


def csr_100k(seed=0):
    """The column scripts' matrix: 100000 x 100000 CSR, 100 random columns a row (about
    10M stored after duplicates are summed; f32 standard normal), sorted indices, and
    the generator it came from (for the scripts' further draws)."""
    import numpy as np
    import scipy.sparse as sp
    n, per = 100_000, 100
    rng = np.random.default_rng(seed)
    a = sp.csr_array((rng.standard_normal(n * per).astype(np.float32),
                      (np.repeat(np.arange(n), per), rng.integers(0, n, size=n * per))),
                     shape=(n, n))
    a.sum_duplicates()
    a.sort_indices()
    return a, rng
