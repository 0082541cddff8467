"""Golden fixtures of the binary elementwise ops from torch, with the mask rules checked
against MaskedTensor (strict) and numpy.ma (and).

  python scripts/gen_fixtures_binary.py  -> tests/fixtures/binary.json

Needs torch and numpy (a venv outside the repo). Each case: op, the two operands (dtype,
shape, values, mask or none; or a scalar, on either side), the rule, and
  - the output dtype by the contract (torch's result_type; an integer array with a float
    scalar, and integers in a float function (div atan2 hypot logaddexp xlogy), give f64);
  - the output mask: strict = the masked operand's mask (the masks are equal, or one
    operand is plain / a scalar), and = valid where both operands are valid;
  - the values: at a valid position torch's op on the operands promoted to the output's
    compute type in float64 (integers: torch's integer op, wrapping), rounded once to the
    output dtype; at an invalid position 0 / false;
  - "error": the error the contract wants ("mask" for differing masks under strict,
    "domain" for an integer division by 0 or a negative integer power at a valid
    position, "shape" for operands that do not broadcast).
Checks against the peers, asserted here: numpy.ma's result mask of every `and` case is
the case's (numpy.ma's rule is `and`); MaskedTensor's `a + b` and `a * b` with equal
masks give the case's values and mask, and MaskedTensor refuses differing masks (its
strict rule). Deliberate difference from torch: pow(-inf, y) for a positive non-integer
y is NaN (as the unary pow; torch's tensor pow gives inf).
"""
import json
import os
import sys
import warnings

import numpy as np
import torch
from torch.masked import masked_tensor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_json import enc  # noqa: E402

warnings.filterwarnings("ignore")
rng = np.random.default_rng(31415)

KEEP = ["add", "sub", "mul", "floor_divide", "pow", "maximum", "minimum", "fmax", "fmin",
        "fmod", "remainder"]
FLOAT = ["div", "atan2", "hypot", "logaddexp", "xlogy"]
CMP = ["eq", "ne", "lt", "le", "gt", "ge"]
NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32, "i64": np.int64}
TT = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "i32": torch.int32,
      "i64": torch.int64}


def is_float(dt):
    return dt.startswith("f")


def promote(a, b):
    if a == b:
        return a
    if not is_float(a) and not is_float(b):
        return "i64"
    if is_float(a) and not is_float(b):
        return a
    if is_float(b) and not is_float(a):
        return b
    return "f64" if "f64" in (a, b) else "f32"


def values(dt, shape, op, divisor=False):
    n = int(np.prod(shape))
    if is_float(dt):
        x = rng.uniform(-3, 3, n).round(2)
        edges = [0.0, -0.0, 1.0, -1.0, 0.5, 2.5, np.nan, np.inf, -np.inf]
        k = min(n // 3, len(edges))
        pos = rng.choice(n, k, replace=False)
        x[pos] = rng.choice(edges, k)
        return x.astype(NP[dt]).reshape(shape)
    lo, hi = (-9, 10)
    x = rng.integers(lo, hi, n)
    if op == "pow" and divisor:
        x = rng.integers(0, 5, n)
    if op in ("floor_divide", "fmod", "remainder") and divisor:
        x[x == 0] = 3
    return x.astype(NP[dt]).reshape(shape)


def reference(op, a, b, out_dt, calc_float):
    """torch's op on float64 (floats, float functions) or int64 (integer keep ops)."""
    if calc_float:
        ta, tb = torch.tensor(a.astype(np.float64)), torch.tensor(b.astype(np.float64))
    else:
        ta, tb = torch.tensor(a.astype(np.int64)), torch.tensor(b.astype(np.int64))
    f = getattr(torch, op)
    r = f(ta, tb)
    if op == "pow" and calc_float:
        bad = torch.isneginf(ta) & (tb > 0) & (tb != torch.trunc(tb))
        r = torch.where(bad, torch.tensor(float("nan"), dtype=torch.float64), r)
    if op in CMP:
        return r.numpy()
    if out_dt.startswith("i"):
        return r.to(TT[out_dt]).numpy()
    return r.to(TT[out_dt]).numpy()


def out_dtype(op, dt):
    if op in CMP:
        return "bool"
    if op in FLOAT and not is_float(dt):
        return "f64"
    return dt


def mask_of(shape):
    return rng.random(shape) < 0.7


def enc_vals(dt, x):
    if dt == "bool":
        return [int(bool(v)) for v in x.ravel()]
    if is_float(dt):
        return [enc(v) for v in x.ravel().astype(np.float64)]
    return [int(v) for v in x.ravel()]


def case(op, da, db, sa, sb, rule, masked_b=True, scalar=None, scalar_first=False):
    a = values(da, sa, op, divisor=scalar_first)
    ma = mask_of(sa)
    if scalar is None:
        b = values(db, sb, op, divisor=True)
        shape = np.broadcast_shapes(sa, sb)
        if rule == "strict" and masked_b:
            mb = np.broadcast_to(ma, shape).copy() if tuple(sb) == tuple(shape) else None
            if mb is None:
                masked_b = False
        else:
            mb = mask_of(sb) if masked_b else None
        r = promote(da, db)
    else:
        b = np.array(scalar)
        shape = tuple(sa)
        mb = None
        r = da if (is_float(da) or isinstance(scalar, int)) else "f64"
    # garbage under the masks that must not leak
    if is_float(da):
        a = a.copy()
        a[~ma] = np.nan
    ma_b = np.broadcast_to(ma, shape)
    mb_b = np.ones(shape, bool) if mb is None else np.broadcast_to(mb, shape)
    valid = ma_b & mb_b
    out_dt = out_dtype(op, r)
    calc_float = is_float(r) or op in FLOAT
    x, y = (np.broadcast_to(b, shape), np.broadcast_to(a, shape)) if scalar_first else (
        np.broadcast_to(a, shape), np.broadcast_to(b, shape))
    err = None
    if not calc_float and op in ("floor_divide", "fmod", "remainder", "pow"):
        bad = (y == 0) if op != "pow" else (y < 0)
        if (bad & valid).any():
            err = "domain"
    ref = None
    if err is None:
        with np.errstate(all="ignore"):
            ref = reference(op, x.astype(NP[r]) if r in NP else x, y.astype(NP[r]) if r in NP else y,
                            out_dt, calc_float)
        ref = np.where(valid, ref, False if out_dt == "bool" else 0)
    c = {
        "op": op, "rule": rule, "out_dtype": out_dt,
        "a": {"dtype": da, "shape": list(sa), "values": enc_vals(da, a),
              "mask": [int(v) for v in ma.ravel()]},
    }
    if scalar is None:
        c["b"] = {"dtype": db, "shape": list(sb), "values": enc_vals(db, b),
                  "mask": None if mb is None else [int(v) for v in np.asarray(mb).ravel()]}
    else:
        c["scalar"] = scalar if isinstance(scalar, int) else enc(scalar)
        c["scalar_is_int"] = isinstance(scalar, int)
        c["scalar_first"] = scalar_first
    if err:
        c["error"] = err
    else:
        c["shape"] = list(shape)
        c["expected"] = enc_vals(out_dt, ref)
        c["expected_mask"] = [int(v) for v in valid.ravel()]
    # the peers' rules
    if rule == "and" and scalar is None and mb is not None and err is None:
        with np.errstate(all="ignore"):
            na = np.ma.array(a.astype(np.float64), mask=~ma)
            nb = np.ma.array(b.astype(np.float64), mask=~mb)
            got = np.ma.getmaskarray(na + nb)
        assert (got == ~valid).all(), "numpy.ma's mask differs from the and rule"
    return c


def masked_tensor_checks():
    """MaskedTensor's strict rule: equal masks work, differing masks are refused."""
    a = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = torch.tensor([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    m = torch.tensor([[True, False, True], [True, True, False]])
    s = masked_tensor(a, m) + masked_tensor(b, m)
    assert torch.equal(s.get_mask(), m)
    assert torch.equal(s.get_data()[m], (a + b)[m])
    p = masked_tensor(a, m) * masked_tensor(b, m)
    assert torch.equal(p.get_data()[m], (a * b)[m])
    try:
        masked_tensor(a, m) + masked_tensor(b, ~m)
    except ValueError:
        pass
    else:
        raise AssertionError("MaskedTensor accepted differing masks")


def main():
    masked_tensor_checks()
    cases = []
    ops = KEEP + FLOAT + CMP
    for op in ops:
        for dt in ["f32", "f64", "f16", "i32", "i64"]:
            cases.append(case(op, dt, dt, (3, 5), (3, 5), "strict"))
            cases.append(case(op, dt, dt, (3, 5), (3, 5), "and"))
            cases.append(case(op, dt, dt, (3, 5), (5,), "strict", masked_b=False))
            cases.append(case(op, dt, dt, (3, 1), (1, 4), "and"))
        cases.append(case(op, "i32", "f32", (2, 4), (2, 4), "and"))
        cases.append(case(op, "i32", "i64", (2, 4), (4,), "and"))
        cases.append(case(op, "f16", "f32", (2, 4), (2, 4), "strict"))
        cases.append(case(op, "f32", None, (2, 5), None, "strict", scalar=1.5))
        cases.append(case(op, "f32", None, (2, 5), None, "strict", scalar=2.0, scalar_first=True))
        cases.append(case(op, "i32", None, (2, 5), None, "strict", scalar=3))
        cases.append(case(op, "i32", None, (2, 5), None, "strict", scalar=2.5))
        cases.append(case(op, "i64", None, (2, 5), None, "strict", scalar=2, scalar_first=True))
    # differing masks under strict, and shapes that do not broadcast
    a = case("add", "f32", "f32", (3, 5), (3, 5), "and")
    a["rule"] = "strict"
    a["error"] = "mask"
    for k in ("shape", "expected", "expected_mask"):
        a.pop(k)
    if a["a"]["mask"] != a["b"]["mask"]:
        cases.append(a)
    cases.append({"op": "add", "rule": "strict", "error": "shape",
                  "a": {"dtype": "f64", "shape": [2, 3], "values": [0.0] * 6, "mask": None},
                  "b": {"dtype": "f64", "shape": [2, 2], "values": [0.0] * 4, "mask": None}})
    # an integer division by 0 at a valid position, and at an invalid one (no error)
    z = {"dtype": "i32", "shape": [4], "values": [7, -7, 5, 1], "mask": [1, 1, 0, 1]}
    cases.append({"op": "floor_divide", "rule": "strict", "error": "domain", "a": z,
                  "b": {"dtype": "i32", "shape": [4], "values": [2, 2, 0, 0], "mask": None}})
    cases.append({"op": "floor_divide", "rule": "strict", "out_dtype": "i32", "a": z,
                  "b": {"dtype": "i32", "shape": [4], "values": [2, 2, 0, 3], "mask": None},
                  "shape": [4], "expected": [3, -4, 0, 0], "expected_mask": [1, 1, 0, 1]})
    out = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "binary.json")
    with open(out, "w") as f:
        json.dump({"generator": "scripts/gen_fixtures_binary.py", "torch": torch.__version__,
                   "numpy": np.__version__, "cases": cases}, f, separators=(",", ":"))
    print(f"{len(cases)} cases -> {out}")


if __name__ == "__main__":
    main()
