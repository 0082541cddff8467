"""Unary elementwise ops (masked algebra) against the peers, measured in the same run.

On 4096 x 4096 f32 (or f64) with a 50% random mask, per round: numpy's plain (unmasked,
one thread) op, torch's plain op (2 threads), MaskedTensor's op and numpy.ma's op, then
`masked bench --op ...` on the same shape and mask density (2 threads; the output is a
fresh masked array, as the peers'). Prints per round and the medians, with the ratios the
issue asks for (ours / numpy plain; MaskedTensor / ours; numpy.ma / ours). Needs numpy
(a venv outside the repo) and a release build; torch's columns where torch is installed.

  python scripts/compare_peers_unary.py [ROUNDS] [f32|f64]
"""
import os
import sys
import warnings

import numpy as np

try:
    import torch
    from torch.masked import masked_tensor
except ImportError:  # numpy's columns only
    torch = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_common import ours, show, medians, tmed  # noqa: E402

warnings.filterwarnings("ignore")
T = (lambda name: getattr(torch, name)) if torch else (lambda name: None)
if torch:
    torch.set_num_threads(2)
OPS = {  # ours -> (numpy, torch)
    "exp": (np.exp, T("exp")),
    "abs": (np.abs, T("abs")),
    "sqrt": (np.sqrt, T("sqrt")),
    "sigmoid": (lambda a: 1.0 / (1.0 + np.exp(-a)), T("sigmoid")),
    "tanh": (np.tanh, T("tanh")),
    "log": (np.log, T("log")),
    "log2": (np.log2, T("log2")),
    "log10": (np.log10, T("log10")),
    "log1p": (np.log1p, T("log1p")),
    "expm1": (np.expm1, T("expm1")),
    "sin": (np.sin, T("sin")),
    "cos": (np.cos, T("cos")),
    "tan": (np.tan, T("tan")),
    "atan": (np.arctan, T("atan")),
}

dtype = sys.argv[2] if len(sys.argv) > 2 else "f32"
rng = np.random.default_rng(0)
# |normal| + 0.01: every op's domain (log of a negative is NaN, fast in every library)
x = (np.abs(rng.standard_normal((4096, 4096))) + 0.01).astype({"f32": np.float32, "f64": np.float64}[dtype])
m = rng.random((4096, 4096)) < 0.5
mx = np.ma.masked_array(x, ~m)
if torch:
    tx, tm = torch.from_numpy(x), torch.from_numpy(m)
    mt = masked_tensor(tx, tm)

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
rows = []
for r in range(rounds):
    row = {"round": r + 1}
    o = {op: rec["seconds"] for op, rec in ours(list(OPS), "--repeat", "15", "--dtype", dtype,
                                                "--mask-density", "0.5").items()}
    for op, (npf, tf) in OPS.items():
        np_plain = tmed(lambda: npf(x))
        ma_op = tmed(lambda: npf(mx), reps=3)
        row[f"{op}_ours_ms"] = o[op] * 1e3
        row[f"{op}_numpy_plain_ms"] = np_plain * 1e3
        row[f"{op}_ours/numpy_plain"] = o[op] / np_plain
        row[f"{op}_numpy.ma/ours"] = ma_op / o[op]
        if torch:
            t_plain = tmed(lambda: tf(tx))
            mt_op = tmed(lambda: tf(mt), reps=3)
            row[f"{op}_ours/torch_plain"] = o[op] / t_plain
            row[f"{op}_MaskedTensor/ours"] = mt_op / o[op]
    rows.append(row)
    show(row)
medians(rows)
