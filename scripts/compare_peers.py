"""Dense benchmark against the peers, measured in the same run.

Runs ../shared/bench/peers.py (the dense workloads; its CSR part shrunk and COO part
off, they belong to the sparse layouts) and then `masked bench --json` on the same
4096 x 4096 f32, 50% mask, dim 1 workload, ROUNDS times alternating, and prints the
ratios per round. Needs torch, numpy, scipy (a venv outside the repo) and a release
build (`cargo build --release`).

  python scripts/compare_peers.py [ROUNDS]
"""
import json, os, subprocess, sys, statistics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(ROOT, "..", "shared", "bench", "peers.py")
MASKED = os.path.join(ROOT, "target", "release", "masked")
OPS = ["sum", "mean", "amax", "argmax", "var", "std", "logsumexp", "softmax", "median", "nanmedian"]
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3

def peers():
    env = dict(os.environ, RS="1000", CS="1000", COO="0", THREADS="2")
    out = subprocess.run([sys.executable, PEERS], env=env, capture_output=True, text=True, check=True).stdout
    res = {}
    for line in out.splitlines():
        d = json.loads(line)
        if "s" in d:
            res[(d["peer"], d["work"])] = d["s"]
    return res

def ours():
    out = subprocess.run([MASKED, "bench", "--op", ",".join(OPS), "--threads", "2", "--repeat", "15", "--json"],
                         capture_output=True, text=True, check=True).stdout
    return {json.loads(l)["op"]: json.loads(l)["seconds"] for l in out.splitlines()}

rows = []
for r in range(rounds):
    p = peers(); o = ours()
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
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)

print("median over rounds:")
for k in rows[0]:
    if k != "round":
        print(f"  {k:28s} {statistics.median(r[k] for r in rows):8.3f}")
