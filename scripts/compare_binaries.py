"""Old vs new binary, alternating in the same run: the regression check of a refactor.

  python scripts/compare_binaries.py OLD_MASKED NEW_MASKED [ROUNDS] [JOB,JOB...]

Runs the same `masked bench --json` commands (dense, CSR and COO, the README's main job
ops; f16 and f64; the elementwise math; sparse attention) with the two binaries in turn,
ROUNDS times (default 5; only the named jobs when a list follows), and prints per op and layout the median of new/old time
ratios over the rounds, and each round's ratio. A ratio above 1.05 whose rounds mostly
agree is a regression. Standard library only.
"""
import json
import statistics
import subprocess
import sys

JOBS = [
    ("dense", ["--layout", "dense", "--op",
               "sum,mean,amax,argmax,var,logsumexp,softmax,median", "--repeat", "7"]),
    # along a leading dim: strided lanes (forward tiles, the VJPs' tiled lanes)
    ("dense-dim0", ["--layout", "dense", "--dim", "0", "--op",
                    "softmax,median,vjp-softmax,vjp-sum,vjp-var,vjp-median", "--repeat", "5"]),
    # column statistics: a square matrix and a tall feature matrix over dim 0 (the
    # column sweep, cut into blocks of rows)
    ("dense-cols", ["--layout", "dense", "--dim", "0", "--shape", "1024,1024", "--op",
                    "sum,mean,count,var,argmax,logsumexp,norm", "--repeat", "20"]),
    # lane maps down columns (softmax family, normalize, cumsum), and a padded batch
    # [B, T, D] over its sequence dim (a middle dim)
    ("dense-maps-cols", ["--layout", "dense", "--dim", "0", "--shape", "1024,1024", "--op",
                         "softmax,softmin,log_softmax,normalize,cumsum", "--repeat", "20"]),
    ("dense-batch", ["--layout", "dense", "--dim", "1", "--shape", "32,512,768", "--op",
                     "sum,mean,var,softmax,log_softmax", "--repeat", "7"]),
    ("dense-features", ["--layout", "dense", "--dim", "0", "--shape", "100000,256", "--op",
                        "sum,mean,var,argmax", "--repeat", "7"]),
    # short masked rows (100 elements): each row's last partial step
    ("dense-rows", ["--layout", "dense", "--shape", "100000,100", "--op", "sum,mean,amax",
                    "--repeat", "7"]),
    ("csr", ["--layout", "csr", "--shape", "100000,100000", "--density", "0.001", "--op",
             "sum,mean,amax,var,softmax,median", "--repeat", "7"]),
    ("csr-dim0", ["--layout", "csr", "--shape", "100000,100000", "--density", "0.001",
                  "--op", "sum", "--dim", "0", "--repeat", "7"]),
    # a separate random mask: validity bits, the output's indices packed by them
    ("csr-mask", ["--layout", "csr", "--shape", "100000,100000", "--density", "0.001",
                  "--mask-source", "random", "--op", "sum,softmax,median", "--repeat", "7"]),
    # the algebra and the VJPs on CSR (two structures merged under `and`; fused)
    ("csr-alg", ["--layout", "csr", "--shape", "100000,100000", "--density", "0.001",
                 "--masks", "and", "--op", "add,exp,sum-of-mul,vjp-softmax,vjp-median",
                 "--repeat", "7"]),
    ("coo", ["--layout", "coo", "--shape", "1000,1000,100", "--density", "0.01", "--dim", "2",
             "--op", "sum,amax,argmax,count,median,softmax", "--repeat", "7"]),
    # the algebra on COO: fused elementwise-then-reduce (sum-of-mul) and a binary VJP
    ("coo-alg", ["--layout", "coo", "--shape", "1000,1000,100", "--density", "0.01",
                 "--dim", "2", "--op", "add,exp,sum-of-mul,vjp-mul", "--repeat", "7"]),
    # statistics of short sparse lanes (about a value a lane)
    ("coo-short", ["--layout", "coo", "--shape", "1000,1000,100", "--density", "0.01",
                   "--dim", "2", "--op", "median,quantile", "--repeat", "7"]),
    # lane maps and the softmax VJP along COO's leading dim (the lanes across the entries)
    ("coo-lead", ["--layout", "coo", "--shape", "1000,1000,100", "--density", "0.01",
                  "--dim", "0", "--op", "softmax,log_softmax,normalize,cumsum,vjp-softmax",
                  "--repeat", "7"]),
    # validity bits on COO: the trailing-dim fold's group-by-group path
    ("coo-mask", ["--layout", "coo", "--shape", "1000,1000,100", "--density", "0.01",
                  "--dim", "2", "--mask-source", "random", "--op", "sum,argmax",
                  "--repeat", "7"]),
    # the halves (their kernels are not the f32 ones), f64, the elementwise math
    ("dense-f16", ["--layout", "dense", "--dtype", "f16", "--op", "sum,var,softmax,median",
                   "--repeat", "7"]),
    ("dense-f64", ["--layout", "dense", "--dtype", "f64", "--op", "sum,var,softmax",
                   "--repeat", "7"]),
    # 8-byte values under a mask: the folds that pack the valid elements first (exp
    # sums), the lane gathers and spreads (VJPs), half and 90% valid, dense and CSR
    ("f64-mask", ["--layout", "dense", "--dtype", "f64", "--op",
                  "logsumexp,softmax,log_softmax,var,norm,median,vjp-median,vjp-softmax",
                  "--repeat", "7"]),
    ("f64-mask90", ["--layout", "dense", "--dtype", "f64", "--mask-density", "0.9", "--op",
                    "logsumexp,softmax,log_softmax,var,norm,median,vjp-median",
                    "--repeat", "7"]),
    ("csr-f64-mask", ["--layout", "csr", "--dtype", "f64", "--shape", "100000,100000",
                      "--density", "0.001", "--mask-source", "random", "--op",
                      "logsumexp,softmax,median,vjp-log_softmax", "--repeat", "7"]),
    ("unary", ["--layout", "dense", "--values", "positive", "--op",
               "exp,log,tanh,sigmoid,add,vjp-softmax", "--repeat", "7"]),
    # the float functions of the dtypes that compute in another type (halves: f32;
    # integers: f64), a cheap one and costly ones
    ("unary-f16", ["--layout", "dense", "--dtype", "f16", "--values", "positive", "--op",
                   "sqrt,exp,tanh,sin", "--repeat", "7"]),
    ("unary-bf16", ["--layout", "csr", "--dtype", "bf16", "--shape", "100000,100000",
                    "--density", "0.001", "--values", "positive", "--op", "sqrt,exp",
                    "--repeat", "7"]),
    ("unary-i32", ["--layout", "dense", "--dtype", "i32", "--op", "sqrt,exp",
                   "--repeat", "7"]),
    # the binary ops and their VJPs at each kind of dtype: f32 and f64 (their own loops),
    # the halves (blocks widened to f32; the VJPs' partials in f64), the integers' float
    # functions (f64 blocks) and comparisons (their own loops)
    ("alg", ["--layout", "dense", "--op", "mul,div,gt,maximum,vjp-mul,vjp-div",
             "--repeat", "7"]),
    ("alg-f16", ["--layout", "dense", "--dtype", "f16", "--op",
                 "add,mul,div,gt,maximum,vjp-mul,vjp-div", "--repeat", "7"]),
    ("alg-bf16", ["--layout", "csr", "--dtype", "bf16", "--shape", "100000,100000",
                  "--density", "0.001", "--op", "mul,div,vjp-mul", "--repeat", "7"]),
    ("alg-i32", ["--layout", "dense", "--dtype", "i32", "--op", "add,div,gt",
                 "--repeat", "7"]),
    # the unary ops' VJPs (`g · f'(x)`): dense f32, f64 and f16 (whole-array runs), CSR
    # with a random mask (packed lanes) and COO
    ("uvjp", ["--layout", "dense", "--values", "positive", "--op",
              "vjp-exp,vjp-log,vjp-tanh,vjp-sigmoid,vjp-sin,vjp-gelu,vjp-abs", "--repeat", "7"]),
    ("uvjp-f64", ["--layout", "dense", "--dtype", "f64", "--values", "positive", "--op",
                  "vjp-exp,vjp-tanh,vjp-sin", "--repeat", "7"]),
    ("uvjp-f16", ["--layout", "dense", "--dtype", "f16", "--values", "positive", "--op",
                  "vjp-exp,vjp-tanh", "--repeat", "7"]),
    ("uvjp-csr", ["--layout", "csr", "--shape", "100000,100000", "--density", "0.001",
                  "--mask-source", "random", "--values", "positive", "--op",
                  "vjp-exp,vjp-tanh", "--repeat", "7"]),
    ("uvjp-coo", ["--layout", "coo", "--shape", "1000,1000,100", "--density", "0.01",
                  "--values", "positive", "--op", "vjp-exp,vjp-tanh", "--repeat", "7"]),
    # the lane VJPs of reductions and maps: dense f32 and f16 (contiguous lanes), CSR
    # with a random mask (packed lanes), COO along its last dim
    ("lvjp", ["--layout", "dense", "--op",
              "vjp-norm,vjp-logsumexp,vjp-var,vjp-amax,vjp-normalize,vjp-log_softmax,vjp-prod",
              "--repeat", "7"]),
    ("lvjp-f16", ["--layout", "dense", "--dtype", "f16", "--op",
                  "vjp-norm,vjp-logsumexp,vjp-log_softmax", "--repeat", "7"]),
    ("lvjp-csr", ["--layout", "csr", "--shape", "100000,100000", "--density", "0.001",
                  "--mask-source", "random", "--op",
                  "vjp-norm,vjp-logsumexp,vjp-normalize,vjp-log_softmax", "--repeat", "7"]),
    ("lvjp-coo", ["--layout", "coo", "--shape", "1000,1000,100", "--density", "0.01",
                  "--op", "vjp-norm,vjp-logsumexp,vjp-normalize,vjp-log_softmax",
                  "--repeat", "7"]),
    # statistics down CSR columns (each column's values sorted into place): 100 a
    # column over 100k columns, and 10 a column over 1M (the sort through blocks)
    ("csr-cols-stats", ["--layout", "csr", "--shape", "100000,100000", "--density", "0.001",
                        "--dim", "0", "--op", "median,quantile", "--repeat", "5"]),
    ("csr-wide-stats", ["--layout", "csr", "--shape", "10000,1000000", "--density", "0.001",
                        "--dim", "0", "--op", "median", "--repeat", "5"]),
    # reductions' VJPs across the entries: down CSR columns (10M stored, 100 a column)
    # and along a COO leading dim (1M stored over 100k lanes: the grouping plan kept)
    ("csr-cols-vjp", ["--layout", "csr", "--shape", "100000,100000", "--density", "0.001",
                      "--dim", "0", "--op",
                      "vjp-sum,vjp-mean,vjp-amax,vjp-var,vjp-norm,vjp-logsumexp,vjp-median",
                      "--repeat", "3"]),
    ("coo-lead-vjp", ["--layout", "coo", "--shape", "1000,1000,100", "--density", "0.01",
                      "--dim", "0", "--op",
                      "vjp-sum,vjp-amax,vjp-var,vjp-norm,vjp-logsumexp,vjp-softmax",
                      "--repeat", "7"]),
    # sparse attention: a band (row traversal) and a random pattern (key slices)
    ("attn-band", ["--op", "attention,attention-vjp", "--shape", "8192,64", "--pattern",
                   "band:256", "--repeat", "5"]),
    ("attn-rand", ["--op", "attention,sddmm,spmm", "--shape", "16384,64", "--pattern",
                   "random:0.01", "--repeat", "5"]),
]


def run(binary, args):
    out = subprocess.run([binary, "bench", "--json", *args], check=True, capture_output=True,
                         text=True).stdout
    return {json.loads(l)["op"]: json.loads(l)["seconds"] for l in out.splitlines() if l.strip()}


def main():
    old, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    only = set(sys.argv[4].split(",")) if len(sys.argv) > 4 else None
    jobs = [(name, args) for name, args in JOBS if only is None or name in only]
    ratios = {}
    for r in range(rounds):
        for name, args in jobs:
            # alternate which binary goes first, so drift does not favour one
            first, second = (old, new) if r % 2 == 0 else (new, old)
            a = run(first, args)
            b = run(second, args)
            o, n = (a, b) if first == old else (b, a)
            for op in o:
                ratios.setdefault((name, op), []).append(n[op] / o[op])
        print(f"round {r + 1} done", file=sys.stderr)
    print(f"{'job':<10} {'op':<10} {'median new/old':>15}  rounds")
    for (name, op), v in ratios.items():
        rs = " ".join(f"{x:.2f}" for x in v)
        print(f"{name:<10} {op:<10} {statistics.median(v):>15.3f}  {rs}")


if __name__ == "__main__":
    main()
