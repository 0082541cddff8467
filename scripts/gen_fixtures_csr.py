"""Golden cases for the CSR layout from torch.masked on sparse CSR tensors.

torch.masked supports sum, prod, amax, amin and mean on CSR, with keepdim=True only
(prod and mean need a mask). For random small matrices (empty rows, explicit zeros,
mask = input pattern, a mask with positions the input does not store, explicit False
entries in the mask, no mask for sum) this records torch's result at the output mask
`any(mask over the reduced dims)`, which numpy computes independently.

torch emits an inconsistent CSR for amax/amin/mean along dim 1 when a row is fully
masked (one value per row, indices only for the non-empty ones): the values are then
read per row, which is what torch computed.

  python scripts/gen_fixtures_csr.py > tests/fixtures/csr_torch.json
"""
import json, sys
import numpy as np
import torch
import torch.masked as M

rng = np.random.default_rng(7)
cases = []

def csr_parts(dense_vals, stored):
    indptr, indices, data = [0], [], []
    for r in range(stored.shape[0]):
        for c in range(stored.shape[1]):
            if stored[r, c]:
                indices.append(c)
                data.append(dense_vals[r, c])
        indptr.append(len(indices))
    return indptr, indices, data

def torch_csr(indptr, indices, data, shape, dtype):
    return torch.sparse_csr_tensor(torch.tensor(indptr, dtype=torch.int64), torch.tensor(indices, dtype=torch.int64),
                                   torch.tensor(data, dtype=dtype), size=shape)

def result_at(res, dims, shape, valid_out):
    """torch's result values at the valid output positions (row-major)."""
    out_shape = [1 if d in dims else s for d, s in enumerate(shape)]
    if res.layout == torch.sparse_csr:
        vals = res.values()
        nrow = out_shape[0]
        if dims == [1] and vals.numel() == nrow and res.col_indices().numel() != nrow:
            dense = vals.reshape(nrow, 1).numpy()  # the inconsistent CSR: one value per row
        else:
            try:
                dense = res.to_dense().numpy()
            except Exception as e:
                raise ValueError(f"unreadable CSR result: crow {res.crow_indices().tolist()} "
                                 f"col {res.col_indices().tolist()} values {vals.tolist()}: {e}")
    elif res.layout == torch.sparse_coo:
        dense = res.to_dense().numpy()
    else:
        dense = res.numpy()
    dense = np.asarray(dense).reshape(out_shape)
    flat = [int(i) for i in np.flatnonzero(valid_out.reshape(-1))]
    return flat, [dense.reshape(-1)[i].item() for i in flat]

def jnum(v):
    if isinstance(v, float):
        if np.isnan(v): return "nan"
        if np.isinf(v): return "inf" if v > 0 else "-inf"
    return v

for n in range(160):
    nr, nc = int(rng.integers(0, 6)), int(rng.integers(1, 7))
    if n % 10 == 0:
        nr = max(nr, 1)
    dtype_name = ["float64", "float32", "int64"][n % 3]
    tdt = {"float64": torch.float64, "float32": torch.float32, "int64": torch.int64}[dtype_name]
    if dtype_name == "int64":
        vals = rng.integers(-5, 6, size=(nr, nc)).astype(np.int64)
    else:
        vals = (rng.integers(-8, 9, size=(nr, nc)) / 2.0).astype(dtype_name)
    stored = rng.random((nr, nc)) < rng.uniform(0.2, 0.9)
    if nr > 1:
        stored[rng.integers(0, nr)] = False  # an empty row
    vals = np.where(stored, vals, 0).astype(vals.dtype)
    if stored.any() and n % 4 == 0:
        r, c = np.argwhere(stored)[0]
        vals[r, c] = 0  # an explicit stored zero
    indptr, indices, data = csr_parts(vals, stored)
    kind = ["pattern", "own", "own", "none"][n % 4]
    if kind == "pattern":
        mstored, mvals = stored.copy(), stored.copy()
    else:
        mstored = rng.random((nr, nc)) < 0.6
        mvals = mstored & (rng.random((nr, nc)) < 0.8)  # some explicit False entries
    valid = mvals if kind != "none" else np.ones((nr, nc), dtype=bool)
    mptr, mind, mdat = csr_parts(mvals, mstored)
    tA = torch_csr(indptr, indices, [x.item() for x in data], (nr, nc), tdt)
    tmask = torch_csr(mptr, mind, [bool(x) for x in mdat], (nr, nc), torch.bool) if kind != "none" else None
    for op in ["sum", "prod", "amax", "amin", "mean"]:
        if tmask is None and op != "sum":
            continue
        if op == "mean" and dtype_name == "int64":
            continue
        for dims in [[1], [0], [0, 1]]:
            fn = getattr(M, op)
            dim_arg = dims[0] if len(dims) == 1 else tuple(dims)
            try:
                res = fn(tA, dim_arg, keepdim=True, mask=tmask)
            except Exception as e:  # record what torch cannot do, but keep going
                print(f"# torch {op} {dims} {dtype_name}: {type(e).__name__}: {str(e)[:80]}", file=sys.stderr)
                continue
            valid_out = valid.any(axis=tuple(dims), keepdims=True)
            if valid.size == 0:
                valid_out = np.zeros([1 if d in dims else s for d, s in enumerate((nr, nc))], dtype=bool)
            try:
                flat, got = result_at(res, dims, (nr, nc), valid_out)
            except ValueError as e:
                print(f"# skipped {op} {dims} {dtype_name} shape {(nr, nc)}: {e}", file=sys.stderr)
                continue
            cases.append({
                "op": op, "dims": dims, "dtype": dtype_name, "shape": [nr, nc],
                "indptr": indptr, "indices": indices, "data": [jnum(x.item()) for x in data],
                "mask": None if kind == "none" else {"kind": kind, "indptr": mptr, "indices": mind,
                                                     "values": [bool(x) for x in mdat]},
                "expect_indices": flat, "expect_values": [jnum(v) for v in got],
            })

json.dump({"generator": "scripts/gen_fixtures_csr.py", "torch": torch.__version__, "cases": cases}, sys.stdout)
