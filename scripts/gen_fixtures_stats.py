"""Golden fixtures for the dense statistics and normalizations.

  python scripts/gen_fixtures_stats.py  -> tests/fixtures/dense_stats.json

Sources ("source" field of each case):
  torch   : torch.masked 2.x (var/std with correction, norm ord 2/1/0/inf/-inf/3/0.5,
            logsumexp, softmax, log_softmax, softmin, normalize, cumsum, cumprod);
            integer inputs are given to torch as float64 (we compute them in f64).
  numpy   : np.nanmedian / np.nanquantile(method=...) on the input with masked-out
            positions set to NaN (median, quantile, nanmedian, nanquantile), and
            (sum |x|^p)^(1/p) over the valid values for negative finite ord (torch
            returns 0 there: masked-out zeros take part, a bug we do not copy).
  Deliberate differences applied on top of the source ("+rule"):
   - fully masked lanes of softmax/softmin -> 0 and log_softmax -> -inf (torch: NaN);
   - median/quantile (not nan-): a valid NaN in a lane gives NaN (numpy's nan* ignore it);
   - median lower = numpy method 'lower'.
"""
import json, math, os, sys, warnings
import numpy as np
import torch
import torch.masked as M
warnings.filterwarnings("ignore")

rng = np.random.default_rng(777)
NP = {"f32": np.float32, "f64": np.float64, "i32": np.int32}

def enc(v):
    v = float(v)
    if math.isnan(v): return "nan"
    if math.isinf(v): return "inf" if v > 0 else "-inf"
    return v

def values(shape, dt, extremal):
    n = int(np.prod(shape)) if shape else 1
    if dt.startswith("f"):
        x = rng.uniform(-3, 3, n).round(2)
        x[rng.random(n) < 0.2] = 1.0  # ties
        if extremal and n >= 6:
            p = rng.choice(n, size=3, replace=False)
            x[p[0]] = np.nan; x[p[1]] = np.inf; x[p[2]] = -np.inf
    else:
        x = rng.integers(-5, 6, n)
    return x.astype(NP[dt]).reshape(shape)

def canon(dims, nd):
    if dims is None or nd == 0: return tuple(range(nd))
    return tuple(sorted(set(d % nd for d in dims)))

def per_lane(x, full, dims, keepdim, f):
    """f(valid values) for every lane of the reduced dims, numpy-shaped output."""
    nd = x.ndim
    cd = canon(dims, nd)
    kept = [d for d in range(nd) if d not in cd]
    lane = int(np.prod([x.shape[d] for d in cd])) if cd else 1
    xt = np.transpose(x, kept + list(cd)).reshape([x.shape[d] for d in kept] + [lane])
    mt = np.transpose(full, kept + list(cd)).reshape(xt.shape)
    out = np.empty(xt.shape[:-1], dtype=np.float64)
    for ix in np.ndindex(*xt.shape[:-1]):
        out[ix] = f(xt[ix][mt[ix]].astype(np.float64))
    if keepdim:
        for d in cd:
            out = np.expand_dims(out, d)
    return out

def qf(q, method, propagate):
    def f(v):
        if v.size == 0: return np.nan
        if propagate and np.isnan(v).any(): return np.nan
        v = v[~np.isnan(v)]
        if v.size == 0: return np.nan
        return float(np.quantile(v, q, method=method))
    return f

def case(op, dt, shape, mshape, dims, keepdim, params, kind):
    extremal = dt.startswith("f") and len(shape) >= 1 and mshape is not None
    x = values(shape, dt, extremal)
    if mshape is None:
        m = None; full = np.ones(shape, dtype=bool)
    else:
        m = rng.random(mshape) < 0.6
        if len(mshape) >= 1 and mshape[0] > 1:
            m[0] = False  # a fully masked slice in every masked case
        full = np.broadcast_to(m, shape)
    xf = x.astype(np.float64) if not dt.startswith("f") else x
    tx = torch.from_numpy(np.array(xf, copy=True, order="C"))
    tm = None if m is None else torch.from_numpy(np.array(full, copy=True, order="C"))
    source = "torch"
    if kind == "reduce":
        tdim = None if dims is None else tuple(dims)
        cd = canon(dims, len(shape))
        if op in ("var", "std"):
            val = getattr(M, op)(tx, tdim, correction=params["correction"], keepdim=keepdim, mask=tm).numpy()
        elif op == "norm":
            p = params["ord"]
            if p < 0 and math.isfinite(p):
                val = per_lane(xf, full, dims, keepdim, lambda v: np.sum(np.abs(v) ** p) ** (1 / p) if v.size else np.inf)
                source = "numpy"
            else:
                try:
                    val = M.norm(tx, p, tdim, keepdim=keepdim, mask=tm).numpy()
                except RuntimeError:
                    # torch has no identity for +-inf norms over an empty dim: the
                    # contract's values (0 / +inf), computed per lane
                    def nf(v):
                        if p == np.inf: return np.max(np.abs(v)) if v.size else 0.0
                        if p == -np.inf: return np.min(np.abs(v)) if v.size else np.inf
                        return np.sum(np.abs(v) ** p) ** (1 / p) if v.size else 0.0
                    val = per_lane(xf, full, dims, keepdim, nf)
                    source = "numpy"
        elif op == "logsumexp":
            val = M.logsumexp(tx, tdim, keepdim=keepdim, mask=tm).numpy()
        elif op in ("median", "quantile", "nanmedian", "nanquantile"):
            nan_op = op.startswith("nan")
            if op.endswith("median"):
                method = "midpoint" if params["mode"] == "avg" else "lower"; q = 0.5
            else:
                method = params["interpolation"]; q = params["q"]
            # numpy: masked-out -> NaN, then nanquantile
            xm = np.where(full, xf.astype(np.float64), np.nan)
            avg = op.endswith("median") and params["mode"] == "avg"
            if len(shape) == 0 or not cd:
                flat = xm.reshape(-1)
                if not np.any(~np.isnan(flat)):
                    ref = np.nan
                else:
                    ref = np.nanmedian(flat) if avg else np.nanquantile(flat, q, method=method)
                ref = np.asarray(ref).reshape([1] * len(shape) if keepdim else [])
            else:
                ref = np.nanmedian(xm, axis=cd, keepdims=keepdim) if avg else np.nanquantile(xm, q, axis=cd, keepdims=keepdim, method=method)
            source = "numpy"
            if not avg and dt.startswith("f"):
                # numpy's lerp gives NaN next to an infinity; the contract takes the exact
                # order statistic at an integral position and the IEEE limit otherwise
                def inf_rule(v):
                    v = np.sort(v[~np.isnan(v)])
                    if not np.isinf(v).any():
                        return np.nan  # marker: keep numpy's value
                    n = v.size; pos = q * (n - 1); lo = int(np.floor(pos)); fr = pos - lo
                    a = v[lo]; b = v[min(lo + 1, n - 1)]
                    if method == "lower" or fr == 0: return a
                    if method == "higher": return b
                    if method == "midpoint": return (a + b) / 2
                    if method == "nearest": return b if (fr > 0.5 or (fr == 0.5 and lo % 2 == 1)) else a
                    if a == b: return a
                    if np.isinf(a) or np.isinf(b): return a + b
                    d = b - a
                    return b - d * (1 - fr) if fr >= 0.5 else a + d * fr
                fix = per_lane(xf, full, dims, keepdim, lambda v: inf_rule(v) if v[~np.isnan(v)].size else np.nan)
                has_inf = per_lane(xf, full, dims, keepdim, lambda v: 1.0 if np.isinf(v).any() else 0.0)
                if np.any(has_inf == 1.0):
                    ref = np.where(has_inf == 1.0, fix, ref)
                    source = "numpy+rule"
            if not nan_op:
                prop = per_lane(xf, full, dims, keepdim, lambda v: 1.0 if np.isnan(v).any() else 0.0)
                ref = np.where(prop == 1.0, np.nan, ref)
                source = "numpy+rule"
            val = ref
        if len(shape) == 0:
            omask = full.copy()
        else:
            omask = np.any(full, axis=cd, keepdims=keepdim) if cd else full.copy()
        if op in ("nanmedian", "nanquantile"):
            okv = full & ~np.isnan(xf) if dt.startswith("f") else full
            omask = (np.any(okv, axis=cd, keepdims=keepdim) if cd else okv.copy()) if len(shape) else okv.copy()
        val = np.asarray(val, dtype=np.float64).reshape(np.shape(omask))
    else:
        d = dims[0]
        if op in ("softmax", "log_softmax", "softmin"):
            val = getattr(M, op)(tx, d, mask=tm).numpy().astype(np.float64)
            if m is not None:
                # the contract: masked-out positions (and fully masked lanes) always get
                # the safe value; torch gives NaN rows and leaks a valid NaN into them
                fill = -np.inf if op == "log_softmax" else 0.0
                fixed = np.where(full, val, fill)
                if not np.array_equal(fixed, val, equal_nan=True):
                    val = fixed
                    source = "torch+rule"
        elif op == "normalize":
            val = M.normalize(tx, params["ord"], d, eps=params["eps"], mask=tm).numpy().astype(np.float64)
            fixed = np.where(full, val, 0.0)
            if not np.array_equal(fixed, val, equal_nan=True):
                val = fixed
                source = "torch+rule"
        else:
            tin = torch.from_numpy(np.array(x, copy=True, order="C"))
            val = getattr(M, op)(tin, d, mask=tm).numpy()
        omask = full.copy()
        val = np.asarray(val).reshape(shape)
    out_dtype = dt if (kind == "map" and op in ("cumsum", "cumprod")) else ("f32" if dt == "f32" else "f64")
    return {
        "op": op, "dtype": dt, "shape": list(shape), "x": [enc(v) if dt.startswith("f") else int(v) for v in np.ravel(x)],
        "mask_shape": None if m is None else list(m.shape),
        "mask": None if m is None else [int(b) for b in np.ravel(m)],
        "dim": None if dims is None else list(dims), "keepdim": keepdim, "params": params,
        "out_shape": list(np.shape(omask)), "out_dtype": out_dtype,
        "expected": [enc(v) if out_dtype.startswith("f") else int(v) for v in np.ravel(val)],
        "expected_mask": [int(b) for b in np.ravel(omask)], "source": source,
    }

def masks(shape):
    out = [None, tuple(shape)]
    if len(shape) >= 2:
        out.append(tuple(shape[:-1]) + (1,))
    return out

def rdims(nd):
    if nd == 0: return [None, (0,)]
    ds = [None, (0,), (-1,)]
    if nd >= 2: ds.append((0, -1))
    return ds

REDUCE = [("var", {"correction": c}) for c in (0.0, 1.0, 1.5, 2.0)] + \
         [("std", {"correction": 1.0})] + \
         [("norm", {"ord": o}) for o in (2.0, 1.0, 0.0, float("inf"), float("-inf"), 3.0, 0.5, -1.0, -2.5)] + \
         [("logsumexp", {})] + \
         [("median", {"mode": md}) for md in ("avg", "lower")] + \
         [("quantile", {"q": q, "interpolation": it}) for q in (0.0, 0.3, 0.5, 1.0) for it in ("linear", "lower", "higher", "midpoint", "nearest")] + \
         [("nanmedian", {"mode": "avg"}), ("nanquantile", {"q": 0.25, "interpolation": "linear"})]
MAPS = [("softmax", {}), ("log_softmax", {}), ("softmin", {}), ("normalize", {"ord": 2.0, "eps": 1e-12}),
        ("normalize", {"ord": 1.0, "eps": 0.5}), ("cumsum", {}), ("cumprod", {})]
SHAPES = [(), (7,), (4, 6), (3, 2, 1, 4), (0, 3)]

def jsonable(p):
    return {k: (enc(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in p.items()}

cases = []
for dt in ("f32", "f64", "i32"):
    for shape in SHAPES:
        for ms in masks(shape):
            for op, params in REDUCE:
                if op.startswith("quantile") and params["q"] not in (0.3,) and len(shape) != 2:
                    continue  # all q values on the 2-D shape only
                for dims in rdims(len(shape)):
                    for keepdim in (False, True):
                        if keepdim and dims is not None and len(dims) == 1 and dims[0] == 0 and len(shape) > 1:
                            continue
                        c = case(op, dt, shape, ms, dims, keepdim, params, "reduce")
                        c["params"] = jsonable(params); cases.append(c)
            for op, params in MAPS:
                if 0 in shape:
                    continue
                for d in ([0] if len(shape) == 0 else sorted(set([0, len(shape) - 1] + ([2] if len(shape) == 4 else [])))):
                    c = case(op, dt, shape, ms, (d,), False, params, "map")
                    c["params"] = jsonable(params); cases.append(c)

out = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "dense_stats.json")
with open(out, "w") as f:
    json.dump({"generator": "scripts/gen_fixtures_stats.py", "torch": torch.__version__, "numpy": np.__version__, "cases": cases}, f, separators=(",", ":"))
from collections import Counter
print(len(cases), "cases", Counter(c["source"] for c in cases), file=sys.stderr)
