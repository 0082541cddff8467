"""Golden fixtures of the unary elementwise ops from torch (MaskedTensor where it has the op).

  python scripts/gen_fixtures_unary.py  -> tests/fixtures/unary.json

Needs torch and numpy (a venv outside the repo). For every op, dtype (f32, f64, f16, i32,
i64) and input (random values with NaN, +-inf, +-0 and domain edges at valid positions,
and NaN / inf / garbage under the mask, which must not leak), the case holds:
  - expected values at every position: at a valid position torch's result computed in
    float64 (a MaskedTensor of the float64 values, or the plain torch op on the data where
    MaskedTensor has no such op: relu, softplus, gelu, silu), rounded once to the output
    type, which is the contract's reference ("within 4 ulp of the correctly rounded value
    computed in f64"; halves within one half ulp); at an invalid position 0;
  - the output dtype by the contract: type-keeping ops (abs neg sign square relu clamp
    floor ceil round trunc nan_to_num, integer pow with a non-negative integer exponent)
    keep the input type (integers wrap, as torch's integer ops); every other function of
    an integer input is float64 (torch would give float32: the contract differs on purpose);
  - the output mask: the input mask (MaskedTensor's rule for unary ops);
  - "error": true where the contract wants an error (an integer to a negative integer
    power).
gelu's reference is mpmath at 50 digits instead: torch computes `x (1 + erf(x/√2)) / 2`
even in float64, which cancels for negative x (at x = -5 torch's float64 gelu is off by
4e-11 relative, 10^5 ulp); the contract's accuracy needs the exact value.
Deliberate differences from torch, applied here: an integer clamp rounds float bounds
inward and keeps the integer type (torch promotes to float); sign(NaN) = 0 is torch's own.
"""
import json
import math
import os
import sys
import warnings

import mpmath
import numpy as np
import torch
from torch.masked import masked_tensor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_json import enc  # noqa: E402

warnings.filterwarnings("ignore")
rng = np.random.default_rng(2718)
mpmath.mp.dps = 50
F = torch.nn.functional

KEEP = ["abs", "neg", "sign", "square", "relu", "floor", "ceil", "round", "trunc"]
FLOAT = ["sqrt", "rsqrt", "reciprocal", "exp", "exp2", "expm1", "log", "log2", "log10",
         "log1p", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
         "asinh", "acosh", "atanh", "sigmoid", "logit", "erf", "erfc", "frac", "softplus",
         "gelu", "silu"]
PLAIN = {"relu": torch.relu, "softplus": F.softplus, "gelu": F.gelu, "silu": F.silu}
NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32, "i64": np.int64}
TT = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "i32": torch.int32,
      "i64": torch.int64}


def inputs(dt, shape):
    n = int(np.prod(shape))
    if dt.startswith("f"):
        x = rng.uniform(-3, 3, n).round(2)
        edges = [0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -2.5, np.nan, np.inf, -np.inf, 25.0, -25.0]
        pos = rng.choice(n, size=min(n, len(edges)), replace=False)
        for p, e in zip(pos, edges):
            x[p] = e
    else:
        x = rng.integers(-9, 10, n).astype(np.int64)
        info = np.iinfo(NP[dt])
        pos = rng.choice(n, size=min(n, 3), replace=False)
        for p, e in zip(pos, [info.min, info.max, 0]):
            x[p] = e
    m = rng.random(n) < 0.7
    x = x.astype(NP[dt])
    # garbage under the mask must not leak
    if dt.startswith("f"):
        hidden = np.flatnonzero(~m)[:2]
        for p, e in zip(hidden, [np.nan, np.inf]):
            x[p] = e
    return x.reshape(shape), m.reshape(shape)


def torch_f64(op, x64, m, params):
    """The op on the float64 values: MaskedTensor where it has the op, else plain."""
    mt = masked_tensor(x64, m)
    p = params or {}
    if op in PLAIN:
        return PLAIN[op](x64)
    if op == "clamp":
        return torch.clamp(mt, min=p.get("min"), max=p.get("max")).get_data()
    if op == "pow":
        e = p["exponent"]
        if e < 0 or e != int(e):  # masked pow with a float exponent: the plain op
            return torch.pow(x64, e)
        return torch.pow(mt, e).get_data()
    if op == "nan_to_num":
        return torch.nan_to_num(mt, nan=p.get("nan", 0.0), posinf=p.get("posinf"),
                                neginf=p.get("neginf")).get_data()
    return getattr(torch, op)(mt).get_data()


def case(op, dt, x, m, params=None):
    shape = list(x.shape)
    intin = dt.startswith("i")
    keep = op in KEEP or op in ("clamp", "nan_to_num") or (
        op == "pow" and intin and params["exponent"] >= 0 and params["exponent"] == int(params["exponent"]))
    out_dt = dt if keep else ("f64" if intin else dt)
    c = {"op": op, "dtype": dt, "shape": shape, "x": [enc(v) if not intin else int(v) for v in x.ravel()],
         "mask": [int(b) for b in m.ravel()], "params": params, "out_dtype": out_dt,
         "expected_mask": [int(b) for b in m.ravel()]}
    if op == "pow" and intin and params["exponent"] < 0 and params["exponent"] == int(params["exponent"]):
        c["error"] = True
        return c
    xt = torch.tensor(x)
    mt = torch.tensor(m)
    if intin and keep:
        # integer arithmetic in the input type (torch wraps as the contract does)
        if op == "clamp":
            lo, hi = params.get("min"), params.get("max")
            r = xt
            if lo is not None:
                r = torch.maximum(r, torch.tensor(math.ceil(lo), dtype=xt.dtype))
            if hi is not None:
                r = torch.minimum(r, torch.tensor(math.floor(hi), dtype=xt.dtype))
        elif op == "pow":
            r = torch.pow(xt, int(params["exponent"]))
        elif op in ("floor", "ceil", "round", "trunc", "nan_to_num"):
            r = xt
        elif op == "square":
            r = xt * xt
        else:
            r = (PLAIN.get(op) or getattr(torch, op))(xt)
        vals = [int(v) if ok else 0 for v, ok in zip(r.ravel().tolist(), m.ravel())]
    else:
        r = torch_f64(op, xt.to(torch.float64), mt, params)
        if op == "nan_to_num" and dt != "f64":
            # the defaults are the input type's largest / lowest finite values
            info = np.finfo(NP[dt])
            p = params or {}
            r = torch.nan_to_num(xt.to(torch.float64), nan=p.get("nan", 0.0),
                                 posinf=p.get("posinf", float(info.max)),
                                 neginf=p.get("neginf", float(info.min)))
        if op == "gelu":
            ref = [float(0.5 * mpmath.mpf(v) * mpmath.erfc(-mpmath.mpf(v) / mpmath.sqrt(2)))
                   if math.isfinite(v) else float(r.ravel()[k])
                   for k, v in enumerate(xt.to(torch.float64).ravel().tolist())]
            r = torch.tensor(ref, dtype=torch.float64).reshape(r.shape)
        r = r.to(TT[out_dt]).to(torch.float64)
        vals = [enc(v) if ok else 0.0 for v, ok in zip(r.ravel().tolist(), m.ravel())]
    c["expected"] = vals
    return c


def main():
    cases = []
    for dt in ["f32", "f64", "f16", "i32", "i64"]:
        for shape in [[13], [3, 5], [2, 3, 4]]:
            x, m = inputs(dt, shape)
            for op in KEEP + FLOAT:
                cases.append(case(op, dt, x, m))
            for lo, hi in [(-0.5, 1.5), (None, 0.5), (1.0, None), (2.0, -1.0)]:
                p = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
                cases.append(case("clamp", dt, x, m, p))
            for e in [2.0, 3.0, 0.5, -1.0, 0.0]:
                cases.append(case("pow", dt, x, m, {"exponent": e}))
            cases.append(case("nan_to_num", dt, x, m))
            cases.append(case("nan_to_num", dt, x, m, {"nan": 1.5, "posinf": 7.0, "neginf": -7.0}))
    out = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "unary.json")
    with open(out, "w") as f:
        json.dump({"generator": "scripts/gen_fixtures_unary.py", "torch": torch.__version__,
                   "cases": cases}, f, separators=(",", ":"))
    print(f"{len(cases)} cases -> {out}")


if __name__ == "__main__":
    main()
