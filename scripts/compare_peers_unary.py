"""Unary elementwise ops (masked algebra) against the peers, measured in the same run.

On 4096 x 4096 f32 with a 50% random mask, per round: numpy's plain (unmasked, one
thread) op, torch's plain op (2 threads), MaskedTensor's op and numpy.ma's op, then
`masked bench --op ...` on the same shape and mask density (2 threads; the output is a
fresh masked array, as the peers'). Prints per round and the medians, with the ratios the
issue asks for (ours / numpy plain; MaskedTensor / ours; numpy.ma / ours). Needs torch and
numpy (a venv outside the repo) and a release build.

  python scripts/compare_peers_unary.py [ROUNDS]
"""
import os
import sys
import warnings

import numpy as np
import torch
from torch.masked import masked_tensor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_common import ours, show, medians, tmed  # noqa: E402

warnings.filterwarnings("ignore")
torch.set_num_threads(2)
OPS = {  # ours -> (numpy, torch)
    "exp": (np.exp, torch.exp),
    "abs": (np.abs, torch.abs),
    "sqrt": (np.sqrt, torch.sqrt),
    "sigmoid": (lambda a: 1.0 / (1.0 + np.exp(-a)), torch.sigmoid),
    "tanh": (np.tanh, torch.tanh),
}




rng = np.random.default_rng(0)
x = rng.standard_normal((4096, 4096), dtype=np.float32)
m = rng.random((4096, 4096)) < 0.5
tx, tm = torch.from_numpy(x), torch.from_numpy(m)
mt = masked_tensor(tx, tm)
mx = np.ma.masked_array(x, ~m)

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
rows = []
for r in range(rounds):
    row = {"round": r + 1}
    o = {op: rec["seconds"] for op, rec in ours(list(OPS), "--repeat", "15",
                                                "--mask-density", "0.5").items()}
    for op, (npf, tf) in OPS.items():
        np_plain = tmed(lambda: npf(x))
        t_plain = tmed(lambda: tf(tx))
        mt_op = tmed(lambda: tf(mt), reps=3) if op != "sigmoid" else tmed(lambda: torch.sigmoid(mt), reps=3)
        ma_op = tmed(lambda: npf(mx), reps=3)
        row[f"{op}_ours_ms"] = o[op] * 1e3
        row[f"{op}_numpy_plain_ms"] = np_plain * 1e3
        row[f"{op}_ours/numpy_plain"] = o[op] / np_plain
        row[f"{op}_ours/torch_plain"] = o[op] / t_plain
        row[f"{op}_MaskedTensor/ours"] = mt_op / o[op]
        row[f"{op}_numpy.ma/ours"] = ma_op / o[op]
    rows.append(row)
    show(row)
medians(rows)
