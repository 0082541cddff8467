"""Golden fixtures for the half-precision dtypes (f16, bf16) on the dense layout.

  python scripts/gen_fixtures_half.py  -> tests/fixtures/dense_half.json

Needs numpy and ml_dtypes (numpy's bfloat16). The reference is independent of the engine:
each lane's valid values (exact in float64) are reduced with numpy in float64 and the
result is rounded ONCE to the input's half type, which is the contract (semantics.md,
"Dtypes": stored as halves, computed in at least f32, rounded once to the output type).
The engine computes in f32 and may differ by one half ulp where f64 -> f32 -> half rounds
twice or the order of addition differs; the test allows two half ulps.

Fully masked lanes and masked-out positions follow the semantics table (sum 0, prod 1,
amax -inf, amin +inf, ptp 0, argmax 0, mean/var/median NaN, logsumexp -inf, count n;
softmax 0 / log_softmax -inf / normalize 0 at masked-out positions; cumsum/cumprod carry
the running value).
"""
import itertools
import json
import math
import os
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_json import enc  # noqa: E402

np.seterr(all="ignore")

rng = np.random.default_rng(1616)
HALF = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def first_arg(v, better):
    if len(v) == 0:
        return 0
    nan = np.flatnonzero(np.isnan(v))
    if len(nan):
        return int(nan[0])
    return int(better(v))


def quantile(v, q, method):
    """numpy's quantile methods on the sorted valid values, except where numpy's own
    arithmetic turns an infinite order statistic into NaN (a lane of one -inf, lerp
    towards an infinity): there the limit, as semantics.md says."""
    if len(v) == 0 or np.isnan(v).any():
        return np.nan
    s = np.sort(v)
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    frac = pos - lo
    a = float(s[lo])
    b = float(s[min(lo + 1, len(s) - 1)])
    if frac == 0.0 or method == "lower":
        return a
    if method == "higher":
        return b
    if method == "nearest":
        up = frac > 0.5 or (frac == 0.5 and lo % 2 == 1)
        return b if up else a
    if method == "midpoint":
        return (a + b) / 2
    if a == b:
        return a
    if math.isinf(a) or math.isinf(b):
        return a + b
    return float(np.quantile(v, q, method="linear"))


def var(v, c):
    """torch's formula: m2 / max(n - c, 0) (inf or NaN when n <= c); NaN when empty."""
    if len(v) == 0:
        return np.nan
    with np.errstate(all="ignore"):
        m2 = np.float64(np.sum((v - np.mean(v)) ** 2))
        return float(m2 / np.float64(max(len(v) - c, 0.0)))


# reductions: lane values (f64, valid only) and the lane's positions -> value
REDUCE = {
    "sum": lambda v, p, o: float(np.sum(v)) if len(v) else 0.0,
    "prod": lambda v, p, o: float(np.prod(v)) if len(v) else 1.0,
    "amax": lambda v, p, o: (np.nan if np.isnan(v).any() else float(np.max(v))) if len(v) else -np.inf,
    "amin": lambda v, p, o: (np.nan if np.isnan(v).any() else float(np.min(v))) if len(v) else np.inf,
    "ptp": lambda v, p, o: (np.nan if np.isnan(v).any() else float(np.max(v) - np.min(v))) if len(v) else 0.0,
    "mean": lambda v, p, o: float(np.mean(v)) if len(v) else np.nan,
    "var": lambda v, p, o: var(v, o["correction"]),
    "std": lambda v, p, o: float(np.sqrt(var(v, o["correction"]))),
    "norm": lambda v, p, o: float(np.sqrt(np.sum(v * v))),
    "logsumexp": lambda v, p, o: (float(np.log(np.sum(np.exp(v - np.max(v)))) + np.max(v))
                                  if len(v) and np.isfinite(np.max(v)) else
                                  (float(np.max(v)) if len(v) else -np.inf)),
    "median": lambda v, p, o: quantile(v, 0.5, "midpoint" if o["mode"] == "avg" else "lower"),
    "quantile": lambda v, p, o: quantile(v, o["q"], o["interpolation"]),
    "argmax": lambda v, p, o: p[first_arg(v, np.argmax)] if len(v) else 0,
    "argmin": lambda v, p, o: p[first_arg(v, np.argmin)] if len(v) else 0,
    "count": lambda v, p, o: len(v),
}
NAN_OF = {"nansum": "sum", "nanmean": "mean", "nanmax": "amax", "nanmin": "amin", "nanvar": "var",
          "nanstd": "std", "nanmedian": "median", "nanquantile": "quantile"}
INT_OUT = {"argmax", "argmin", "count"}
NORMALIZE = ["softmax", "log_softmax", "softmin", "normalize", "cumsum", "cumprod"]


def lanes(shape, dims):
    """For each output position (row-major over the kept dims): the flat input indices of its
    lane in row-major order, and each one's position along the lane."""
    nd = len(shape)
    kept = [d for d in range(nd) if d not in dims]
    red = [d for d in range(nd) if d in dims]
    out = []
    for kidx in itertools.product(*[range(shape[d]) for d in kept]):
        flat = []
        for ridx in itertools.product(*[range(shape[d]) for d in red]):
            full = [0] * nd
            for d, i in zip(kept, kidx):
                full[d] = i
            for d, i in zip(red, ridx):
                full[d] = i
            flat.append(int(np.ravel_multi_index(full, shape)) if nd else 0)
        out.append(flat)
    return out, kept


def reduce_case(op, x, m, shape, dim, keepdim, o):
    nd = len(shape)
    dims = list(range(nd)) if dim is None else [d % nd for d in dim]
    base = NAN_OF.get(op, op)
    valid = m & ~np.isnan(x) if op in NAN_OF else m
    ls, kept = lanes(shape, dims)
    vals, mask = [], []
    for flat in ls:
        sel = [k for k, f in enumerate(flat) if valid[f]]
        v = np.array([x[flat[k]] for k in sel], dtype=np.float64)
        pos = sel
        if base in ("argmax", "argmin") and dim is None:
            pos = [flat[k] for k in sel]
        vals.append(REDUCE[base](v, pos, o))
        mask.append(1 if (base == "count" or len(v)) else 0)
    if keepdim:
        out_shape = [1 if d in dims else shape[d] for d in range(nd)]
    else:
        out_shape = [shape[d] for d in kept]
    return vals, mask, out_shape


def normalize_case(op, x, m, shape, d):
    nd = len(shape)
    d = d % nd
    ls, _ = lanes(shape, [d])
    out = np.zeros(len(x))
    for flat in ls:
        v = np.array([x[f] for f in flat], dtype=np.float64)
        ok = np.array([m[f] for f in flat], dtype=bool)
        r = np.zeros(len(v))
        if op in ("softmax", "softmin", "log_softmax"):
            s = -v if op == "softmin" else v
            if ok.any():
                mx = np.max(s[ok])
                e = np.where(ok, np.exp(np.where(ok, s - mx, 0.0)), 0.0)
                tot = np.sum(e)
                if op == "log_softmax":
                    r = np.where(ok, s - mx - np.log(tot), -np.inf)
                else:
                    r = np.where(ok, e / tot, 0.0)
            else:
                r[:] = -np.inf if op == "log_softmax" else 0.0
        elif op == "normalize":
            nrm = math.sqrt(float(np.sum(np.where(ok, v, 0.0) ** 2)))
            r = np.where(ok, v / max(nrm, 1e-12), 0.0)
        else:
            run = 0.0 if op == "cumsum" else 1.0
            for k in range(len(v)):
                if ok[k]:
                    run = run + v[k] if op == "cumsum" else run * v[k]
                r[k] = run
        for k, f in enumerate(flat):
            out[f] = r[k]
    return list(out), [int(b) for b in m], list(shape)


def main():
    cases = []
    shapes = [[7], [3, 5], [4, 1], [2, 3, 4], [0, 3]]
    for dt, shape in itertools.product(["f16", "bf16"], shapes):
        half = HALF[dt]
        n = int(np.prod(shape))
        for trial in range(3):
            x = rng.uniform(-3, 3, n).round(2)
            x[rng.random(n) < 0.2] = 1.0  # ties
            if trial == 2 and n >= 6:
                p = rng.choice(n, size=3, replace=False)
                x[p[0]], x[p[1]], x[p[2]] = np.nan, np.inf, -np.inf
            xh = x.astype(half).astype(np.float64)  # the half values, exactly
            m = rng.random(n) < 0.7
            if n >= 3:
                m[: shape[-1]] = False  # a fully masked lane
            nd = len(shape)
            dim_choices = [None] + [[d] for d in range(nd)] + ([[0, nd - 1]] if nd >= 2 else [])
            ops = list(REDUCE) + ["ptp"] + list(NAN_OF)
            for op in dict.fromkeys(ops):
                for dim in dim_choices:
                    if op in ("argmax", "argmin") and dim is not None and len(dim) != 1:
                        continue
                    for keepdim in (False, True):
                        o = {"correction": 1.0, "mode": "avg", "q": 0.3, "interpolation": "linear"}
                        params = {}
                        if NAN_OF.get(op, op) in ("var", "std"):
                            o["correction"] = params["correction"] = [0.0, 1.0][trial % 2]
                        if NAN_OF.get(op, op) == "median":
                            o["mode"] = params["mode"] = ["avg", "lower"][trial % 2]
                        if NAN_OF.get(op, op) == "quantile":
                            params["q"] = 0.3
                            o["interpolation"] = params["interpolation"] = ["linear", "nearest", "midpoint"][trial]
                        vals, mask, out_shape = reduce_case(op, xh, m, shape, dim, keepdim, o)
                        int_out = NAN_OF.get(op, op) in INT_OUT
                        exp = [int(v) for v in vals] if int_out else \
                            [enc(np.float64(v).astype(half).astype(np.float64)) for v in vals]
                        cases.append({
                            "op": op, "dtype": dt, "shape": shape, "x": [enc(v) for v in xh],
                            "mask_shape": shape, "mask": [int(b) for b in m], "dim": dim,
                            "keepdim": keepdim, "params": params or None, "out_shape": out_shape,
                            "out_dtype": "i64" if int_out else dt, "expected": exp,
                            "expected_mask": mask, "source": "numpy",
                        })
            if n == 0:
                continue
            for op in NORMALIZE:
                for d in range(nd):
                    vals, mask, out_shape = normalize_case(op, xh, m, shape, d)
                    cases.append({
                        "op": op, "dtype": dt, "shape": shape, "x": [enc(v) for v in xh],
                        "mask_shape": shape, "mask": [int(b) for b in m], "dim": [d],
                        "keepdim": False, "params": None, "out_shape": out_shape, "out_dtype": dt,
                        "expected": [enc(np.float64(v).astype(half).astype(np.float64)) for v in vals],
                        "expected_mask": mask, "source": "numpy",
                    })
    out = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "dense_half.json")
    with open(out, "w") as f:
        json.dump({"generator": "scripts/gen_fixtures_half.py", "numpy": np.__version__,
                   "ml_dtypes": ml_dtypes.__version__, "cases": cases}, f, separators=(",", ":"))
    print(f"{len(cases)} cases -> {out}")


if __name__ == "__main__":
    main()
