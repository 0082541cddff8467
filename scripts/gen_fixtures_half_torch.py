"""Golden fixtures for f16 and bf16 from torch.masked (the issue asks for torch's values).

  python scripts/gen_fixtures_half.py        # first: the cases and the numpy reference
  python scripts/gen_fixtures_half_torch.py  -> tests/fixtures/dense_half_torch.json

Needs torch (a venv outside the repo). It takes the inputs of tests/fixtures/dense_half.json
(the same half values and masks), runs every op torch.masked has on them as f16 / bf16
tensors (torch computes half reductions in f32 and returns the half type, as the contract
asks), and writes torch's value at every VALID output position. Positions that are not valid
keep the contract's value from the numpy fixture (torch's values there are unspecified or
differ by design; semantics.md's table defines them), so every case still checks every
output position and the output mask.

Where torch and the numpy reference (f64 rounded once) differ by more than two half ulps at
a valid position, the torch value would test torch's own rounding of intermediates rather
than the contract; such positions keep the numpy value and the case is marked with
"torch_differs": the count per op is printed, so a reader sees how often that happens.
With torch 2.15 that is 14 of about 20,000 valid positions: log_softmax (torch subtracts
the max and the log-sum in half precision, so near-zero outputs lose bits), var/std of
nearly equal bf16 values (the same cancellation), and argmax where torch's masked fill
(-inf) ties a valid -inf or a NaN lane and torch names a masked-out index.
torch.masked has no median, quantile, ptp, count or nan-family; those stay with numpy.
"""
import json
import math
import os
import sys
import warnings

import numpy as np
import torch
import torch.masked as M

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_json import enc  # noqa: E402

warnings.filterwarnings("ignore")
HERE = os.path.dirname(__file__)
FIX = os.path.join(HERE, "..", "tests", "fixtures")
TDT = {"f16": torch.float16, "bf16": torch.bfloat16}
ULP_BITS = {"f16": 10, "bf16": 7}


def dec(v):
    return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}.get(v, v) if isinstance(v, str) else float(v)


def close(a, b, dt):
    """Within two half ulps (the tolerance the Rust test applies), NaN = NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    scale = max(abs(a), abs(b), 2.0 ** -14)
    ulp = 2.0 ** (math.floor(math.log2(scale)) - ULP_BITS[dt])
    return abs(a - b) <= 2 * ulp


def torch_op(op, x, m, dim, keepdim, params):
    d = None if dim is None else (tuple(dim) if len(dim) > 1 else dim[0])
    p = params or {}
    if op in ("sum", "prod", "amax", "amin", "mean", "logsumexp"):
        return getattr(M, op)(x, dim=d, keepdim=keepdim, mask=m)
    if op in ("argmax", "argmin"):
        if dim is None:
            return None  # torch.masked's argmax needs one dim
        return getattr(M, op)(x, dim=d, keepdim=keepdim, mask=m)
    if op in ("var", "std"):
        return getattr(M, op)(x, dim=d, keepdim=keepdim, mask=m, unbiased=p.get("correction", 1.0) == 1.0)
    if op == "norm":
        return M.norm(x, 2.0, dim=d, keepdim=keepdim, mask=m)
    if op in ("softmax", "log_softmax", "softmin", "cumsum", "cumprod"):
        return getattr(M, op)(x, d, mask=m)
    if op == "normalize":
        return M.normalize(x, 2.0, d, mask=m, eps=1e-12)
    return None


# torch's dtype= argument: the half input is cast to f32 first, so the result is f32
# (not rounded to half). Masked-out outputs take the contract's value for the op.
DTYPE_OPS = {"sum": 0.0, "prod": 1.0, "mean": math.nan, "softmax": 0.0, "log_softmax": -math.inf}


def dtype_cases(cases):
    out = []
    for c in cases:
        if c["op"] not in DTYPE_OPS or int(np.prod(c["shape"])) == 0 or c["keepdim"]:
            continue
        x = torch.tensor([dec(v) for v in c["x"]], dtype=torch.float64).to(TDT[c["dtype"]]).reshape(c["shape"])
        m = torch.tensor([b == 1 for b in c["mask"]], dtype=torch.bool).reshape(c["mask_shape"])
        d = c["dim"]
        if c["op"] in ("softmax", "log_softmax"):
            r = getattr(M, c["op"])(x, d[0], mask=m, dtype=torch.float32)
        else:
            dd = None if d is None else (tuple(d) if len(d) > 1 else d[0])
            r = getattr(M, c["op"])(x, dim=dd, mask=m, dtype=torch.float32)
        assert r.dtype == torch.float32
        r = r.to(torch.float64).reshape(-1).tolist()
        exp = [enc(v) if ok else enc(DTYPE_OPS[c["op"]]) for v, ok in zip(r, c["expected_mask"])]
        out.append(dict(c, expected=exp, out_dtype="f32", dtype_arg="f32", source="torch.masked dtype=float32"))
    print(f"{len(out)} dtype=float32 cases")
    return out


def main():
    with open(os.path.join(FIX, "dense_half.json")) as f:
        src = json.load(f)
    out, differs, used = [], {}, {}
    for c in src["cases"]:
        shape = c["shape"]
        if int(np.prod(shape)) == 0:
            continue
        dt = c["dtype"]
        x = torch.tensor([dec(v) for v in c["x"]], dtype=torch.float64).to(TDT[dt]).reshape(shape)
        m = torch.tensor([b == 1 for b in c["mask"]], dtype=torch.bool).reshape(c["mask_shape"])
        try:
            r = torch_op(c["op"], x, m, c["dim"], c["keepdim"], c["params"])
        except (RuntimeError, TypeError, NotImplementedError):
            r = None
        if r is None:
            continue
        r = r.to(torch.float64).reshape(-1).tolist()
        if len(r) != len(c["expected"]):
            raise SystemExit(f"{c['op']} {shape} {c['dim']}: torch gave {len(r)} values, want {len(c['expected'])}")
        exp, bad = [], 0
        for k, (want, valid) in enumerate(zip(c["expected"], c["expected_mask"])):
            if not valid:
                exp.append(want)
                continue
            if c["out_dtype"] == "i64":
                exp.append(int(r[k]) if int(r[k]) == want else want)
                bad += int(r[k]) != want
            elif close(r[k], dec(want), dt):
                exp.append(enc(r[k]))
            else:
                exp.append(want)
                bad += 1
        case = dict(c, expected=exp, source="torch.masked")
        if bad:
            case["torch_differs"] = bad
            differs[c["op"]] = differs.get(c["op"], 0) + bad
        used[c["op"]] = used.get(c["op"], 0) + 1
        out.append(case)
    out += dtype_cases(src["cases"])
    path = os.path.join(FIX, "dense_half_torch.json")
    with open(path, "w") as f:
        json.dump({"generator": "scripts/gen_fixtures_half_torch.py", "torch": torch.__version__,
                   "from": "dense_half.json", "cases": out}, f, separators=(",", ":"))
    print(f"{len(out)} cases -> {path}")
    print("cases per op:", used)
    print("valid positions where torch differs from f64-rounded-once by > 2 half ulps:", differs or "none")


if __name__ == "__main__":
    main()
