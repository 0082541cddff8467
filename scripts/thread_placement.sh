#!/usr/bin/env bash
# Whether the dense sum's 1 -> 2 (and 4) thread step on a many-core machine depends on
# where its threads land: the CPU topology (which logical CPUs share a core), then
# `masked bench` at 1, 2, 4 threads left to the scheduler and pinned with taskset to
# CPUs of distinct cores and to one core's hyperthreads, then torch's plain sum at the
# same counts (its peer in docs/benchmarks.md). On the 16-core machine the sum stepped
# 1.6x from 1 to 2 threads where torch stepped 2.1x; here (2 cores) it steps 1.95x.
#
# usage: scripts/thread_placement.sh BIN    (PYTHON: a python with torch; default python3)
set -u
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
lscpu | grep -E "Model name|Thread|Core|Socket|NUMA|L3"
lscpu -e=CPU,CORE,SOCKET,NODE | head -40
# a sibling of CPU 0 (same core) and a CPU of another core, from the topology
core0=$(lscpu -p=CPU,CORE | grep -v '^#' | awk -F, '$1 == 0 {print $2}')
sib=$(lscpu -p=CPU,CORE | grep -v '^#' | awk -F, -v c="$core0" '$2 == c && $1 != 0 {print $1; exit}')
other=$(lscpu -p=CPU,CORE | grep -v '^#' | awk -F, -v c="$core0" '$2 != c {print $1; exit}')
four=$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -u | head -4 | cut -d, -f1 | paste -sd,)
sum=(bench --shape 16384,16384 --op sum --dim 1 --repeat 9)
for round in 1 2; do
    echo "== round $round"
    for t in 1 2 4; do
        echo "scheduler, $t threads"; "$bin" "${sum[@]}" --threads "$t" | tail -1
    done
    echo "pinned 0,$other (two cores)"; taskset -c "0,$other" "$bin" "${sum[@]}" --threads 2 | tail -1
    if [ -n "$sib" ]; then
        echo "pinned 0,$sib (one core's hyperthreads)"; taskset -c "0,$sib" "$bin" "${sum[@]}" --threads 2 | tail -1
    fi
    echo "pinned $four (four cores)"; taskset -c "$four" "$bin" "${sum[@]}" --threads 4 | tail -1
done
cd "$here" && "${PYTHON:-python3}" - <<'PY'
import torch
from peers_common import tmed
x = torch.randn(16384, 16384)
for t in (1, 2, 4):
    torch.set_num_threads(t)
    print(f"torch plain sum, {t} threads: {tmed(lambda: x.sum(dim=1)) * 1e3:.2f} ms", flush=True)
PY
