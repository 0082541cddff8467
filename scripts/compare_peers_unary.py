"""Unary elementwise ops (masked algebra) against the peers, measured in the same run.

On 4096 x 4096 f32 (or f64 or f16) with a 50% random mask, per round: numpy's plain
(unmasked, one thread) op, torch's plain op (2 threads), MaskedTensor's op and numpy.ma's
op, then `masked bench --op ...` on the same shape and mask density (2 threads; the
output is a fresh masked array, as the peers'). Prints per round and the medians, with
the ratios the issue asks for (ours / numpy plain; MaskedTensor / ours; numpy.ma / ours).
Needs numpy (a venv outside the repo) and a release build; torch's columns where torch is
installed.

  python scripts/compare_peers_unary.py [ROUNDS] [f16|f32|f64] [OP,OP...]

erf, erfc and gelu need scipy (scipy.special is their plain peer).
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
if torch:
    torch.set_num_threads(2)
try:  # erf / erfc: numpy has none; scipy's are the plain peer
    from scipy import special
except ImportError:
    special = None
SQRT1_2 = np.float32(np.sqrt(0.5))


def gelu(a):
    return a * (0.5 * (1.0 + special.erf(a * a.dtype.type(SQRT1_2))))


# ours -> (numpy plain op, torch op name, value distribution, further bench arguments);
# each op computes on values of its domain (the bench's --values, the same map of a
# standard normal draw here), so that no side times NaN paths
OPS = {
    "exp": (np.exp, "exp", "normal", ()),
    "abs": (np.abs, "abs", "normal", ()),
    "sqrt": (np.sqrt, "sqrt", "positive", ()),
    "sigmoid": (lambda a: 1.0 / (1.0 + np.exp(-a)), "sigmoid", "normal", ()),
    "tanh": (np.tanh, "tanh", "normal", ()),
    "log": (np.log, "log", "positive", ()),
    "log2": (np.log2, "log2", "positive", ()),
    "log10": (np.log10, "log10", "positive", ()),
    "log1p": (np.log1p, "log1p", "positive", ()),
    "expm1": (np.expm1, "expm1", "normal", ()),
    "sin": (np.sin, "sin", "normal", ()),
    "cos": (np.cos, "cos", "normal", ()),
    "tan": (np.tan, "tan", "normal", ()),
    "atan": (np.arctan, "atan", "normal", ()),
    "asin": (np.arcsin, "asin", "unit", ()),
    "acos": (np.arccos, "acos", "unit", ()),
    "sinh": (np.sinh, "sinh", "normal", ()),
    "cosh": (np.cosh, "cosh", "normal", ()),
    "asinh": (np.arcsinh, "asinh", "normal", ()),
    "acosh": (np.arccosh, "acosh", "above-one", ()),
    "atanh": (np.arctanh, "atanh", "unit", ()),
    "softplus": (lambda a: np.logaddexp(a.dtype.type(0), a), None, "normal", ()),
    "pow": (lambda a: np.power(a, a.dtype.type(1.5)), None, "positive", ("--exponent", "1.5")),
}
if special is not None:
    OPS.update({
        "erf": (special.erf, "erf", "normal", ()),
        "erfc": (special.erfc, "erfc", "normal", ()),
        "gelu": (gelu, None, "normal", ()),
    })
VALUES = {
    "normal": lambda z: z,
    "positive": lambda z: np.abs(z) + 0.01,
    "unit": np.tanh,
    "above-one": lambda z: 1.0 + np.abs(z),
}
only = sys.argv[3].split(",") if len(sys.argv) > 3 else None
if only:
    OPS = {k: v for k, v in OPS.items() if k in only}

dtype = sys.argv[2] if len(sys.argv) > 2 else "f32"
npdt = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[dtype]
rng = np.random.default_rng(0)
z = rng.standard_normal((4096, 4096))
m = rng.random((4096, 4096)) < 0.5
xs = {v: f(z).astype(npdt) for v, f in VALUES.items() if any(o[2] == v for o in OPS.values())}
mxs = {v: np.ma.masked_array(x, ~m) for v, x in xs.items()}
if torch:
    tm = torch.from_numpy(m)
    txs = {v: torch.from_numpy(x) for v, x in xs.items()}
    mts = {v: masked_tensor(t, tm) for v, t in txs.items()}

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
rows = []
for r in range(rounds):
    row = {"round": r + 1}
    o = {}
    groups = sorted({(v, extra) for _, _, v, extra in OPS.values()})
    for v, extra in groups:
        names = [k for k, op in OPS.items() if (op[2], op[3]) == (v, extra)]
        o.update({op: rec["seconds"] for op, rec in ours(names, "--repeat", "15", "--dtype", dtype,
                                                        "--mask-density", "0.5", "--values", v,
                                                        *extra).items()})
    for op, (npf, tname, v, _) in OPS.items():
        x, mx = xs[v], mxs[v]
        np_plain = tmed(lambda: npf(x))
        ma_op = tmed(lambda: npf(mx), reps=3)
        row[f"{op}_ours_ms"] = o[op] * 1e3
        row[f"{op}_numpy_plain_ms"] = np_plain * 1e3
        row[f"{op}_ours/numpy_plain"] = o[op] / np_plain
        row[f"{op}_numpy.ma/ours"] = ma_op / o[op]
        if torch and tname:
            tf = getattr(torch, tname)
            t_plain = tmed(lambda: tf(txs[v]))
            mt_op = tmed(lambda: tf(mts[v]), reps=3)
            row[f"{op}_ours/torch_plain"] = o[op] / t_plain
            row[f"{op}_MaskedTensor/ours"] = mt_op / o[op]
    rows.append(row)
    show(row)
medians(rows)
