#!/usr/bin/env bash
# Thread scaling on a many-core machine, in one run: `masked bench --scaling` (1, 2, 4 ...
# all cores) for each binary given (say an old and a new build, alternating), then
# torch's plain sum and softmax at the same thread counts (scripts/scaling_torch.py).
#
# usage: scripts/scaling.sh BIN [BIN ...]      (PYTHON: a python with torch; default python3)
#
# The workloads are the thread-scaling table's in docs/benchmarks.md: a 16384^2 float32
# array (1 GiB, DRAM-resident on most machines) with a 50% mask, and CSR 100000^2 with
# 10M stored entries (mask = pattern), its softmax also into a reused buffer; two more CSR shapes of 10M entries split the row
# ops' cost into what grows with the rows (1M rows of 10) and with the entries (10k
# rows of 1000).
set -u
here=$(cd "$(dirname "$0")" && pwd)
for bin in "$@"; do
    echo "== $bin"
    "$bin" bench --shape 16384,16384 --op sum,softmax --dim 1 --scaling
    "$bin" bench --shape 16384,16384 --op softmax,exp --dim 1 --scaling --into
    "$bin" bench --layout csr --shape 100000,100000 --op sum,softmax --dim 1 --scaling
    "$bin" bench --layout csr --shape 100000,100000 --op softmax --dim 1 --scaling --into
    "$bin" bench --layout csr --shape 1000000,1000000 --density 0.00001 --op sum --dim 1 --scaling
    "$bin" bench --layout csr --shape 10000,10000 --density 0.1 --op sum --dim 1 --scaling
    "$bin" bench --layout coo --shape 1000,1000,100 --density 0.01 --op sum,softmax --dim 2 --scaling
    "$bin" bench --layout coo --shape 1000,1000,100 --density 0.01 --op softmax --dim 2 --scaling --into
done
"${PYTHON:-python3}" "$here/scaling_torch.py"
