"""Golden cases for the COO layout from torch.masked on sparse COO tensors.

torch.masked supports sum, prod, amax and amin on COO (mean, var, ... raise), over any
dims with keepdim either way; the reductions other than sum need a mask. For random
tensors of rank 1 to 4 (explicit zeros, empty lanes, mask = input pattern, a mask with
positions the input does not store and explicit False entries, no mask for sum) this
records torch's result at the output mask `any(mask over the reduced dims)`, which numpy
computes independently. The entries are written in a shuffled order, so the test also
exercises canonicalisation.

  python scripts/gen_fixtures_coo.py > tests/fixtures/coo_torch.json
"""
import json, sys, itertools
import numpy as np
import torch
import torch.masked as M

rng = np.random.default_rng(11)
cases = []
tensors = []

def jnum(v):
    if isinstance(v, float):
        if np.isnan(v): return "nan"
        if np.isinf(v): return "inf" if v > 0 else "-inf"
    return v

def coo(shape, where, vals, dtype):
    idx = np.argwhere(where).T.astype(np.int64).reshape(len(shape), -1)
    data = vals[where] if vals is not None else None
    return idx, data

for n in range(160):
    ndim = int(rng.integers(1, 5))
    shape = [int(rng.integers(1, 5)) for _ in range(ndim)]
    dtype_name = ["float64", "float32", "int64"][n % 3]
    tdt = {"float64": torch.float64, "float32": torch.float32, "int64": torch.int64}[dtype_name]
    if dtype_name == "int64":
        vals = rng.integers(-5, 6, size=shape).astype(np.int64)
    else:
        vals = (rng.integers(-8, 9, size=shape) / 2.0).astype(dtype_name)
    stored = rng.random(shape) < rng.uniform(0.15, 0.8)
    vals = np.where(stored, vals, 0).astype(vals.dtype)
    if stored.any() and n % 4 == 0:
        first = tuple(np.argwhere(stored)[0])
        vals[first] = 0  # an explicit stored zero
    idx, data = coo(shape, stored, vals, dtype_name)
    kind = ["pattern", "own", "own", "none"][n % 4]
    if kind == "pattern":
        mstored, mvals = stored.copy(), stored.copy()
    else:
        mstored = rng.random(shape) < 0.6
        mvals = mstored & (rng.random(shape) < 0.8)  # some explicit False entries
    valid = mvals if kind != "none" else np.ones(shape, dtype=bool)
    midx = np.argwhere(mstored).T.astype(np.int64).reshape(ndim, -1)
    mdat = mvals[mstored]
    tA = torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(data, dtype=tdt), shape).coalesce()
    tmask = (torch.sparse_coo_tensor(torch.tensor(midx), torch.tensor(mdat, dtype=torch.bool), shape).coalesce()
             if kind != "none" else None)
    order = rng.permutation(idx.shape[1])
    tensors.append({
        "dtype": dtype_name, "shape": shape,
        "coords": idx[:, order].tolist(), "data": [jnum(x.item()) for x in data[order]],
        "mask": None if kind == "none" else {"kind": kind, "coords": midx.tolist(),
                                             "values": [bool(x) for x in mdat]},
    })
    dim_sets = [list(s) for r in range(1, ndim + 1) for s in itertools.combinations(range(ndim), r)]
    for op in ["sum", "prod", "amax", "amin"]:
        if tmask is None and op != "sum":
            continue
        for dims in dim_sets:
            for keepdim in [True, False]:
                fn = getattr(M, op)
                try:
                    res = fn(tA, tuple(dims), keepdim=keepdim, mask=tmask)
                except Exception as e:
                    print(f"# torch {op} {dims} {dtype_name}: {type(e).__name__}: {str(e)[:80]}", file=sys.stderr)
                    continue
                valid_out = valid.any(axis=tuple(dims), keepdims=keepdim)
                dense = res.to_dense().numpy() if res.layout != torch.strided else res.numpy()
                dense = np.asarray(dense).reshape(valid_out.shape)
                flat = [int(i) for i in np.flatnonzero(valid_out.reshape(-1))]
                got = [dense.reshape(-1)[i].item() for i in flat]
                cases.append({
                    "tensor": len(tensors) - 1, "op": op, "dims": dims, "keepdim": keepdim,
                    "out_shape": list(valid_out.shape),
                    "expect_indices": flat, "expect_values": [jnum(v) for v in got],
                })

json.dump({"generator": "scripts/gen_fixtures_coo.py", "torch": torch.__version__, "tensors": tensors, "cases": cases}, sys.stdout)
