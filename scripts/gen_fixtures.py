"""Generate the golden fixtures of the dense reductions from torch.masked.

Run once per change of the fixture set (torch is a large download; use a venv outside
the repo):  python scripts/gen_fixtures.py  -> tests/fixtures/dense_reductions.json

Expectations come from torch.masked 2.x, except where semantics.md deliberately defines
what torch does not (each such case is marked with "source"):
  - empty lanes (a reduced dim of size 0): torch raises for amax/amin/argmax/argmin;
    we define them as fully masked -> the identity table, output mask False ("hand");
  - argmax/argmin: torch returns float indices (cast to int64 here), and fills masked-out
    slots with the identity, so a tie between a valid value equal to the identity
    (-inf / int MIN) and a masked-out slot can point at the masked slot; those lanes are
    recomputed over the valid values only with numpy ("numpy");
  - mean of integers: torch needs dtype=float64, which is what we compute ("torch").
"""
import json, math, itertools, os, sys
import numpy as np
import torch
import torch.masked as M
import warnings
warnings.filterwarnings("ignore")

rng = np.random.default_rng(12345)
OPS = ["sum", "prod", "amax", "amin", "argmax", "argmin", "mean", "count"]
DTYPES = {"f32": (np.float32, torch.float32), "f64": (np.float64, torch.float64),
          "i32": (np.int32, torch.int32), "i64": (np.int64, torch.int64)}

def enc(v):
    v = float(v) if isinstance(v, (float, np.floating)) else int(v)
    if isinstance(v, float):
        if math.isnan(v): return "nan"
        if math.isinf(v): return "inf" if v > 0 else "-inf"
    return v

def make_values(shape, dt, extremal):
    n = int(np.prod(shape)) if shape else 1
    if dt.startswith("f"):
        x = rng.uniform(-4, 4, n).round(3)
        # small-integer ties so first-index rules are exercised
        x[rng.random(n) < 0.25] = 2.0
        if extremal and n >= 4:
            pos = rng.choice(n, size=min(n, 4), replace=False)
            for p, v in zip(pos, [np.inf, -np.inf, np.nan, np.nan]):
                x[p] = v
    else:
        x = rng.integers(-9, 10, n)
        if extremal and n >= 2:
            big = np.iinfo(DTYPES[dt][0])
            x[rng.choice(n)] = big.max
            x[rng.choice(n)] = big.min
    return x.astype(DTYPES[dt][0]).reshape(shape)

def mask_shapes(shape):
    out = [None, tuple(shape)]
    if len(shape) >= 1:
        out.append(tuple(shape[:-1]) + (1,))
        out.append(tuple(shape[-1:]))
    if len(shape) >= 2:
        out.append(tuple(shape[1:]))
    seen, res = set(), []
    for s in out:
        if s not in seen:
            seen.add(s); res.append(s)
    return res

def dim_sets(ndim):
    if ndim == 0:
        return [None, (0,), (-1,)]
    ds = [None, (0,), (-1,)]
    if ndim >= 2:
        ds += [(0, -1), tuple(range(ndim))]
    if ndim >= 3:
        ds += [(2, 0)]
    if ndim >= 4:
        ds += [(3, 1, 0)]
    return ds

def identity(op, dt):
    f = dt.startswith("f")
    info = None if f else np.iinfo(DTYPES[dt][0])
    return {"sum": 0, "prod": 1, "amax": -np.inf if f else info.min,
            "amin": np.inf if f else info.max, "argmax": 0, "argmin": 0,
            "mean": np.nan, "count": 0}[op]

def canon(dims, ndim):
    if dims is None:
        return tuple(range(ndim))
    return tuple(sorted(set(d % max(ndim, 1) for d in dims))) if ndim else ()

def arg_valid(xs, ms, op):
    """first index of the max/min over the valid values (NaN first), numpy-based"""
    idx = np.nonzero(ms)[0]
    if idx.size == 0:
        return 0
    v = xs[idx]
    if v.dtype.kind == "f" and np.isnan(v).any():
        return int(idx[np.argmax(np.isnan(v))])
    return int(idx[np.argmax(v) if op == "argmax" else np.argmin(v)])

def case(op, dt, shape, mshape, dims, keepdim, extremal, allfalse=False):
    x = make_values(shape, dt, extremal)
    nd = len(shape)
    if mshape is None:
        m = None
        full = np.ones(shape, dtype=bool)
    else:
        m = rng.random(mshape) < 0.6 if not allfalse else np.zeros(mshape, dtype=bool)
        full = np.broadcast_to(m, shape)
    if op in ("argmax", "argmin") and dims is not None and len(dims) > 1:
        return None
    cd = canon(dims, nd)
    empty_lane = any(shape[d] == 0 for d in cd)
    tx = torch.from_numpy(np.array(x, copy=True, order="C"))
    tm = None if m is None else torch.from_numpy(np.array(m, copy=True, order="C"))
    tfull = torch.from_numpy(np.array(full, copy=True, order="C"))
    kw = {}
    tdim = None if dims is None else (dims[0] if op in ("argmax", "argmin") else tuple(dims))
    # output mask and count from torch on the broadcast mask
    if nd == 0:
        omask = tfull.clone()
        cnt = tfull.to(torch.int64)
    else:
        rd = tuple(range(nd)) if dims is None else tuple(dims)
        omask = tfull.any(dim=rd, keepdim=keepdim) if len(cd) else tfull.clone()
        cnt = tfull.to(torch.int64).sum(dim=rd, keepdim=keepdim) if len(cd) else tfull.to(torch.int64)
    if op in ("argmax", "argmin") and dims is None and keepdim:
        # torch.argmax(dim=None, keepdim=True) keeps every dim with size 1
        omask = tfull.any().reshape([1] * nd) if nd else tfull.any()
    out_shape = list(omask.shape)
    source = "torch"
    if op == "count":
        val = cnt.numpy()
        omask = torch.ones_like(omask)
    elif empty_lane and op in ("amax", "amin", "argmax", "argmin"):
        val = np.full(out_shape, identity(op, dt))
        source = "hand"
    else:
        fn = getattr(M, op)
        if op == "mean" and not dt.startswith("f"):
            kw["dtype"] = torch.float64
        if op in ("argmax", "argmin"):
            r = fn(tx, tdim, keepdim=keepdim, mask=tm)
        else:
            r = fn(tx, tdim, keepdim=keepdim, mask=tm, **kw)
        val = r.numpy()
        if op in ("argmax", "argmin"):
            val = val.astype(np.int64)
            # recompute lanes whose torch index is not a valid element (identity ties)
            if dims is None or not cd:
                flat = x.reshape(-1); fm = full.reshape(-1)
                want = arg_valid(flat, fm, op)
                if int(val.reshape(-1)[0]) != want:
                    val = np.full(val.shape, want); source = "numpy"
            else:
                d = cd[0]
                xm = np.moveaxis(x, d, -1); mm = np.moveaxis(full, d, -1)
                want = np.zeros(xm.shape[:-1], dtype=np.int64)
                for ix in itertools.product(*[range(s) for s in xm.shape[:-1]]):
                    want[ix] = arg_valid(xm[ix], mm[ix], op)
                if keepdim:
                    want = np.expand_dims(want, d)
                if not np.array_equal(want, val):
                    val = want; source = "numpy"
    if op == "mean" and not dt.startswith("f"):
        # torch sums integers in f64 and loses small terms beside huge ones; the contract
        # is the exact mean, computed here with Python integers
        source = "python-exact"
        nd_full = np.broadcast_to(full, shape)
        xo = x.astype(object)
        if nd == 0 or not cd:
            sums = np.where(nd_full, xo, 0); cnts = nd_full.astype(np.int64)
        else:
            sums = np.where(nd_full, xo, 0).sum(axis=cd, keepdims=keepdim)
            cnts = nd_full.sum(axis=cd, keepdims=keepdim)
        val = np.array([float("nan") if c == 0 else int(sv) / int(c)
                        for sv, c in zip(np.ravel(sums), np.ravel(cnts))]).reshape(out_shape)
    out_dtype = {"sum": "i64", "prod": "i64", "count": "i64", "argmax": "i64", "argmin": "i64",
                 "mean": "f64", "amax": dt, "amin": dt}[op]
    if dt.startswith("f") and op in ("sum", "prod", "mean"):
        out_dtype = dt
    val = np.asarray(val).reshape(out_shape)
    return {
        "op": op, "dtype": dt, "shape": list(shape),
        "x": [enc(v) for v in x.reshape(-1)],
        "mask_shape": None if m is None else list(m.shape),
        "mask": None if m is None else [int(b) for b in np.asarray(m).reshape(-1)],
        "dim": None if dims is None else list(dims), "keepdim": keepdim,
        "out_shape": out_shape, "out_dtype": out_dtype,
        "expected": [enc(v) for v in val.reshape(-1)],
        "expected_mask": [int(b) for b in omask.numpy().reshape(-1)],
        "source": source,
    }

cases = []
SHAPES = [(), (7,), (4, 6), (3, 2, 1, 4), (0, 3), (2, 0, 4)]
for dt in DTYPES:
    for shape in SHAPES:
        for mshape in mask_shapes(shape):
            for dims in dim_sets(len(shape)):
                for keepdim in (False, True):
                    for op in OPS:
                        extremal = (dt.startswith("f") and len(shape) >= 1 and mshape is not None) or (not dt.startswith("f") and len(shape) == 2)
                        c = case(op, dt, shape, mshape, dims, keepdim, extremal)
                        if c: cases.append(c)
    # fully masked everything
    for op in OPS:
        for dims in [None, (1,)]:
            c = case(op, dt, (3, 5), (3, 5), dims, False, False, allfalse=True)
            if c: cases.append(c)

out = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "dense_reductions.json")
with open(out, "w") as f:
    json.dump({"generator": "scripts/gen_fixtures.py", "torch": torch.__version__, "cases": cases}, f, separators=(",", ":"))
print(len(cases), "cases;", sum(c["source"] != "torch" for c in cases), "not from torch ->", out, file=sys.stderr)
