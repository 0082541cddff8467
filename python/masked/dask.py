"""`mk.dask`: every masked reduction of the registry on Dask arrays, and the
normalizations.

    import dask.array as da, masked as mk
    x = da.random.random((20_000, 20_000), chunks=(5_000, 5_000))
    valid = x > 0.2                                   # torch.masked's convention
    mk.dask.var(x, axis=1, mask=valid).compute()      # numpy.ma out

Inputs: a dask array with `mask=` a dask (or numpy) bool array, True = valid, chunked
like `x` or broadcastable to it; or a dask array of numpy.ma chunks (`dask.array.ma`,
numpy.ma's convention: True = masked out) with `mask=None`. Results are dask arrays of
numpy.ma chunks (`dask.array.ma.getmaskarray` works on them): masked where the engine's
output is invalid.

How it runs: each chunk is reduced by the engine to a **partial state**, a numpy
structured array with the reduced axes of size 1 (for example `n`, `mean`, `m2` for
var); `dask.array.reduction` merges them in a tree (`split_every`) and finishes them.
The state format is plain numpy (fields below), so it does not depend on the Rust build:

| op | fields of the partial state |
|---|---|
| sum, nansum, prod | `v` (the engine's partial, its output dtype), `n` (valid count, int64) |
| amax, amin, nanmax, nanmin | `v`, `n` |
| ptp | `hi`, `lo`, `n` |
| mean, nanmean | `s` (float64 sum; for floats the chunk's mean times `n`), `n` |
| var, std, nanvar, nanstd | `n`, `mean`, `m2` (float64; Chan's merge) |
| norm | `r` (the chunk's norm, float64), `n` |
| logsumexp, logmeanexp | `lse` (float64), `n` |
| argmax, argmin and nan- | `v`, `i` (global index, int64), `n` |
| count | `n` |

The tasks' keys read `masked-<op>-<token>` (the dashboard shows them so), the token
computed from the op's parameters, not by pickling its functions: building a graph takes
about a millisecond, as dask.array.ma's own reductions do.

Median and quantile (and their nan- forms) are exact: the reduced axes are rechunked
whole (as dask's own median does) and each block runs the engine once. Normalizations
(`softmax`, ...) rechunk their axis whole and run blockwise. Integer sums, counts,
amax/amin, argmax/argmin, median and quantile equal the one-machine engine bit for bit;
float sums and moments within the contract's accuracy (a different summation order).

Workers: each process imports `masked`; the engine's thread pool (rayon) sizes itself to
the machine's cores, so on `n` workers per machine set `RAYON_NUM_THREADS` to
cores / n in the workers' environment (`LocalCluster(..., env={"RAYON_NUM_THREADS": "1"})`
or the variable exported before `dask worker` starts).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

try:
    import dask.array as da
except ImportError as e:  # pragma: no cover
    raise ImportError("mk.dask needs dask: pip install 'dask[array]'") from e

from . import _masked
from . import _ops as _engine_ops

__all__: list[str] = []


# ---- inputs --------------------------------------------------------------------------
def _split(x: Any, mask: Any) -> tuple[Any, Any]:
    """(data, valid) as dask arrays chunked alike; `valid` None when every element is."""
    if not isinstance(x, da.Array):
        x = da.asarray(x)
    if isinstance(x._meta, np.ma.MaskedArray):
        if mask is not None:
            raise ValueError("mask= is for plain dask arrays: a dask.array.ma array carries its own mask")
        data = da.ma.getdata(x)
        valid = ~da.ma.getmaskarray(x)
        return data, valid
    if mask is None:
        return x, None
    m = mask if isinstance(mask, da.Array) else da.asarray(np.asarray(mask))
    if m.dtype != bool:
        raise TypeError(f"mask must be a bool array (True = valid), got {m.dtype}")
    if m.shape != x.shape:
        m = da.broadcast_to(m, x.shape)
    if m.chunks != x.chunks:
        m = m.rechunk(x.chunks)
    return x, m


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (int(axis),)
    out = []
    for a in axis:
        a = int(a)
        if not -ndim <= a < ndim:
            raise _masked.MaskedError(f"axis {a} is out of range for {ndim} dims")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise _masked.MaskedError(f"axis {axis} names a dim twice")
    return tuple(sorted(out))


def _engine(op: str, v: Any, ok: Optional[np.ndarray], axes: tuple[int, ...], **kw: Any) -> Any:
    """The engine's `op` over `axes` of one chunk, keepdim: `v` the chunk's MaskedArray
    (made once per chunk: its mask is packed once), `ok` then unused."""
    return getattr(_engine_ops, op)(v, dim=list(axes), keepdim=True, **kw)


def _count(ok: Optional[np.ndarray], v: Any, axes: tuple[int, ...], nan: bool) -> np.ndarray:
    """Valid elements per lane (the nan-family: valid and not NaN), int64, keepdim."""
    data = v.data
    if nan and data.dtype.kind == "f":
        ok = ~np.isnan(data) if ok is None else ok & ~np.isnan(data)
        return ok.sum(axis=axes, keepdims=True, dtype=np.int64)
    return _engine_ops.count(v, dim=list(axes), keepdim=True).data.astype(np.int64, copy=False)


def _lane_moments(v: Any, ok: Optional[np.ndarray], axes: tuple[int, ...], nan: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each lane's valid count, mean and sum of squared deviations (keepdim), in one
    pass of the engine (var's unfinished state); the nan-family also leaves NaN out."""
    data = v.data
    if nan and data.dtype.kind == "f":
        keep = ~np.isnan(data) if ok is None else ok & ~np.isnan(data)
        v = _ma(data, keep)
    return v._h.moments(list(axes), True)


# ---- block functions named by what they compute --------------------------------------
class _Named:
    """A block function and the parameters that decide what it computes (`key`): dask
    tokenizes it by the key instead of pickling the closure, which took about 1.5 ms a
    function (most of a graph's construction, for a handful of chunks). The key must name
    every free parameter of `fn`: two graphs with one key and one input share results."""

    __slots__ = ("fn", "key", "__name__", "__wrapped__")

    def __init__(self, fn: Callable, *key: Any):
        self.fn, self.key, self.__name__ = fn, key, f"masked-{key[0]}"
        self.__wrapped__ = fn  # fn's signature (dask passes `block_info` if fn takes it)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __dask_tokenize__(self) -> tuple:
        return ("masked.dask", *self.key)


# ---- partial states: chunk -> state, merge, finish -----------------------------------
class _Family:
    """How one reduction becomes a partial state, merges and finishes."""

    def __init__(self, fields: Callable[[np.dtype], list], chunk: Callable, merge: Callable, finish: Callable):
        self.fields, self.chunk, self.merge, self.finish = fields, chunk, merge, finish


def _rec(shape: tuple[int, ...], fields: list, **cols: np.ndarray) -> np.ndarray:
    out = np.empty(shape, dtype=fields)
    for k, c in cols.items():
        out[k] = c
    return out


def _sum_like(op: str) -> _Family:
    nan = op.startswith("nan")
    combine = np.prod if op == "prod" else np.sum

    def fields(out: np.dtype) -> list:
        return [("v", out), ("n", np.int64)]

    def chunk(v, ok, axes, out, kw):
        r = _engine(op, v, ok, axes)
        return _rec(r.shape, fields(out), v=r.filled(1 if op == "prod" else 0), n=_count(ok, v, axes, nan))

    def merge(s, axes):
        return _rec(
            _kshape(s, axes), s.dtype.descr, v=combine(s["v"], axis=axes, keepdims=True), n=s["n"].sum(axis=axes, keepdims=True)
        )

    def finish(s, out):
        return s["v"].astype(out), s["n"] > 0

    return _Family(fields, chunk, merge, finish)


def _extreme(op: str) -> _Family:
    nan = op.startswith("nan")
    hi = op in ("amax", "nanmax")

    def fields(out: np.dtype) -> list:
        return [("v", out), ("n", np.int64)]

    def chunk(v, ok, axes, out, kw):
        r = _engine(op, v, ok, axes)
        return _rec(r.shape, fields(out), v=r.data, n=_count(ok, v, axes, nan))

    def merge(s, axes):
        vals = np.where(s["n"] > 0, s["v"], _ident(s["v"].dtype, hi))
        f = (np.max if hi else np.min) if nan else (np.max if hi else np.min)
        return _rec(_kshape(s, axes), s.dtype.descr, v=f(vals, axis=axes, keepdims=True), n=s["n"].sum(axis=axes, keepdims=True))

    def finish(s, out):
        return s["v"], s["n"] > 0

    return _Family(fields, chunk, merge, finish)


def _ident(dt: np.dtype, hi: bool) -> Any:
    if dt.kind == "f":
        return -np.inf if hi else np.inf
    info = np.iinfo(dt)
    return info.min if hi else info.max


def _ptp() -> _Family:
    def fields(out: np.dtype) -> list:
        return [("hi", out), ("lo", out), ("n", np.int64)]

    def chunk(v, ok, axes, out, kw):
        a = _engine("amax", v, ok, axes)
        b = _engine("amin", v, ok, axes)
        return _rec(a.shape, fields(out), hi=a.data, lo=b.data, n=_count(ok, v, axes, False))

    def merge(s, axes):
        hi = np.where(s["n"] > 0, s["hi"], _ident(s["hi"].dtype, True)).max(axis=axes, keepdims=True)
        lo = np.where(s["n"] > 0, s["lo"], _ident(s["lo"].dtype, False)).min(axis=axes, keepdims=True)
        return _rec(_kshape(s, axes), s.dtype.descr, hi=hi, lo=lo, n=s["n"].sum(axis=axes, keepdims=True))

    def finish(s, out):
        return (s["hi"] - s["lo"]).astype(out), s["n"] > 0

    return _Family(fields, chunk, merge, finish)


def _mean(op: str) -> _Family:
    nan = op.startswith("nan")

    def fields(out: np.dtype) -> list:
        return [("s", np.float64), ("n", np.int64)]

    def chunk(v, ok, axes, out, kw):
        if v.data.dtype.kind != "f":
            # integers: an exact float64 sum (the one-machine mean divides that sum)
            r = _engine("sum", v, ok, axes, dtype=np.float64)
            return _rec(r.shape, fields(out), s=r.filled(0), n=_count(ok, v, axes, nan))
        n, mean, _ = _lane_moments(v, ok, axes, nan)
        return _rec(n.shape, fields(out), s=mean * n, n=n)

    def merge(s, axes):
        return _rec(_kshape(s, axes), s.dtype.descr, s=s["s"].sum(axis=axes, keepdims=True), n=s["n"].sum(axis=axes, keepdims=True))

    def finish(s, out):
        with np.errstate(invalid="ignore", divide="ignore"):
            return (s["s"] / s["n"]).astype(out), s["n"] > 0

    return _Family(fields, chunk, merge, finish)


def _moments(op: str) -> _Family:
    nan = op.startswith("nan")
    is_std = op.endswith("std")

    def fields(out: np.dtype) -> list:
        return [("n", np.int64), ("mean", np.float64), ("m2", np.float64)]

    def chunk(v, ok, axes, out, kw):
        n, mean, m2 = _lane_moments(v, ok, axes, nan)
        return _rec(n.shape, fields(out), n=n, mean=mean, m2=m2)

    def merge(s, axes):
        # Chan et al.: pairwise-exact merge of (n, mean, M2), here over all entries at once
        n = s["n"].sum(axis=axes, keepdims=True)
        safe = np.where(n > 0, n, 1)
        mean = (s["mean"] * s["n"]).sum(axis=axes, keepdims=True) / safe
        m2 = (s["m2"] + s["n"] * (s["mean"] - mean) ** 2).sum(axis=axes, keepdims=True)
        return _rec(_kshape(s, axes), s.dtype.descr, n=n, mean=mean, m2=m2)

    def finish(s, out, correction=1.0):
        dof = s["n"] - correction
        with np.errstate(invalid="ignore", divide="ignore"):
            var = np.where(dof > 0, s["m2"] / np.where(dof > 0, dof, 1), np.nan)
        r = np.sqrt(var) if is_std else var
        return r.astype(out), s["n"] > 0

    return _Family(fields, chunk, merge, finish)


def _norm() -> _Family:
    def fields(out: np.dtype) -> list:
        return [("r", np.float64), ("n", np.int64), ("ord", np.float64)]

    def chunk(v, ok, axes, out, kw):
        o = float(kw.get("ord", 2.0))
        r = _engine("norm", v, ok, axes, dtype=np.float64, ord=o)
        return _rec(r.shape, fields(out), r=r.filled(0), n=_count(ok, v, axes, False), ord=o)

    def merge(s, axes):
        o = float(s["ord"].flat[0]) if s.size else 2.0
        r, n = s["r"], s["n"]
        if o == np.inf:
            v = np.where(n > 0, r, -np.inf).max(axis=axes, keepdims=True)
        elif o == -np.inf:
            v = np.where(n > 0, r, np.inf).min(axis=axes, keepdims=True)
        elif o == 0:
            v = r.sum(axis=axes, keepdims=True)
        else:
            big = np.where(n > 0, r, 0).max(axis=axes, keepdims=True)
            scale = np.where(big > 0, big, 1)
            v = scale * ((np.where(n > 0, r, 0) / scale) ** o).sum(axis=axes, keepdims=True) ** (1 / o)
        nn = n.sum(axis=axes, keepdims=True)
        return _rec(_kshape(s, axes), s.dtype.descr, r=v, n=nn, ord=o)

    def finish(s, out):
        return np.where(s["n"] > 0, s["r"], 0).astype(out), s["n"] > 0

    return _Family(fields, chunk, merge, finish)


def _lse(op: str) -> _Family:
    def fields(out: np.dtype) -> list:
        return [("lse", np.float64), ("n", np.int64)]

    def chunk(v, ok, axes, out, kw):
        r = _engine("logsumexp", v, ok, axes, dtype=np.float64)
        return _rec(r.shape, fields(out), lse=r.filled(-np.inf), n=_count(ok, v, axes, False))

    def merge(s, axes):
        lse = np.logaddexp.reduce(s["lse"], axis=axes, keepdims=True)
        return _rec(_kshape(s, axes), s.dtype.descr, lse=lse, n=s["n"].sum(axis=axes, keepdims=True))

    def finish(s, out):
        r = s["lse"]
        if op == "logmeanexp":
            with np.errstate(divide="ignore"):
                r = r - np.log(np.where(s["n"] > 0, s["n"], 1))
        return r.astype(out), s["n"] > 0

    return _Family(fields, chunk, merge, finish)


def _count_family() -> _Family:
    def fields(out: np.dtype) -> list:
        return [("n", np.int64)]

    def chunk(v, ok, axes, out, kw):
        n = _count(ok, v, axes, False)
        return _rec(n.shape, fields(out), n=n)

    def merge(s, axes):
        return _rec(_kshape(s, axes), s.dtype.descr, n=s["n"].sum(axis=axes, keepdims=True))

    def finish(s, out):
        return s["n"].astype(out), np.ones(s.shape, dtype=bool)

    return _Family(fields, chunk, merge, finish)


def _kshape(s: np.ndarray, axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if i in axes else d for i, d in enumerate(s.shape))


FAMILIES: dict[str, Callable[[], _Family]] = {
    "sum": lambda: _sum_like("sum"),
    "nansum": lambda: _sum_like("nansum"),
    "prod": lambda: _sum_like("prod"),
    "amax": lambda: _extreme("amax"),
    "amin": lambda: _extreme("amin"),
    "nanmax": lambda: _extreme("nanmax"),
    "nanmin": lambda: _extreme("nanmin"),
    "ptp": _ptp,
    "mean": lambda: _mean("mean"),
    "nanmean": lambda: _mean("nanmean"),
    "var": lambda: _moments("var"),
    "std": lambda: _moments("std"),
    "nanvar": lambda: _moments("nanvar"),
    "nanstd": lambda: _moments("nanstd"),
    "norm": _norm,
    "logsumexp": lambda: _lse("logsumexp"),
    "logmeanexp": lambda: _lse("logmeanexp"),
    "count": _count_family,
}
ARG = {"argmax", "argmin", "nanargmax", "nanargmin"}
WHOLE = {"median", "nanmedian", "quantile", "nanquantile"}


def _out_dtype(op: str, dtype: np.dtype, kw: dict) -> np.dtype:
    """The engine's output dtype of `op` on `dtype`, asked of the engine on one element."""
    r = getattr(_engine_ops, op)(np.zeros((1,), dtype=dtype), dim=0, **kw)
    return np.dtype(r.data.dtype)


def _ma(v: np.ndarray, ok: Optional[np.ndarray]) -> Any:
    from ._array import MaskedArray

    return MaskedArray(v, valid=ok)


def _masked_result(values: np.ndarray, valid: np.ndarray) -> np.ma.MaskedArray:
    return np.ma.MaskedArray(values, mask=~np.asarray(valid, dtype=bool))


def _reduce(op: str, x: Any, axis: Any, keepdims: bool, mask: Any, split_every: Any, kw: dict) -> Any:
    data, valid = _split(x, mask)
    axes = _axes(axis, data.ndim)
    if op in WHOLE:
        return _whole(op, data, valid, axes, keepdims, kw)
    if op in ARG:
        return _arg(op, data, valid, axes, keepdims, split_every)
    fam = FAMILIES[op]()
    fin_kw = {}
    if op in ("var", "std", "nanvar", "nanstd"):
        c = kw.get("correction")
        fin_kw["correction"] = 1.0 if c is None else float(c)
    chunk_kw = {k: v for k, v in kw.items() if v is not None and k != "correction"}
    out = _out_dtype(op, data.dtype, {k: v for k, v in kw.items() if v is not None})
    sdt = np.dtype(fam.fields(out))
    chunks = tuple(tuple(1 for _ in c) if i in axes else c for i, c in enumerate(data.chunks))

    def state(v, ok=None):
        return fam.chunk(_ma(v, ok), ok, axes, out, chunk_kw)

    key = (op, axes, out.str, sorted(chunk_kw.items()), sorted(fin_kw.items()))
    args = (data,) if valid is None else (data, valid)
    partial = da.map_blocks(_Named(state, *key), *args, chunks=chunks, dtype=sdt, meta=np.empty((0,) * data.ndim, dtype=sdt))

    def merge(st):
        with np.errstate(all="ignore"):  # empty lanes and NaN states are masked out
            return fam.merge(st, axes)

    def finish(st):
        with np.errstate(all="ignore"):
            return fam.finish(fam.merge(st, axes), out, **fin_kw)

    return _tree(partial, merge, finish, axes, keepdims, sdt, out, split_every, key)


def _as_is(st: Any, axis: Any = None, keepdims: bool = True) -> Any:
    return st


def _tree(partial: Any, merge: Callable, finish: Callable, axes: tuple[int, ...], keepdims: bool, sdt: np.dtype, out: np.dtype, split_every: Any, key: tuple) -> Any:
    """`dask.array.reduction` over partial states: `merge` (states -> a state, the
    reduced axes of size 1) in the tree, `finish` (states -> values, validity) at the
    root, a dask array of numpy.ma chunks out. `key` names what `merge` and `finish`
    compute (`_Named`)."""
    ndim = partial.ndim

    def combine(st, axis=None, keepdims=True):
        return merge(st)

    def aggregate(st, axis=None, keepdims=False):
        v, ok = finish(st)
        r = _masked_result(v, ok)
        if not keepdims:
            r = r.reshape(tuple(d for i, d in enumerate(r.shape) if i not in axes))
        return r

    return da.reduction(
        partial,
        _as_is,
        _Named(aggregate, *key, "aggregate"),
        combine=_Named(combine, *key, "combine"),
        axis=axes,
        keepdims=keepdims,
        dtype=sdt,  # the partial states' (the result's comes from meta)
        split_every=split_every,
        concatenate=True,
        meta=np.ma.MaskedArray(np.empty((0,) * (ndim if keepdims else ndim - len(axes)), dtype=out)),
    )


def _arg(op: str, data: Any, valid: Any, axes: tuple[int, ...], keepdims: bool, split_every: Any) -> Any:
    """argmax / argmin: one axis (the index along it) or every axis (the flat index)."""
    ndim = data.ndim
    if len(axes) not in (1, ndim):
        raise _masked.MaskedError(f"{op} reduces one dim or all of them, got {axes}")
    flat = len(axes) == ndim and ndim != 1
    shape = data.shape
    hi = "max" in op
    nan = op.startswith("nan")
    vdt = data.dtype
    sdt = np.dtype([("v", vdt), ("i", np.int64), ("n", np.int64)])
    chunks = tuple(tuple(1 for _ in c) if i in axes else c for i, c in enumerate(data.chunks))

    def state(v, ok=None, block_info=None):
        loc = block_info[0]["array-location"]
        if flat:
            kshape = (1,) * ndim
            r = getattr(_engine_ops, op)(v, dim=None, keepdim=False, mask=ok) if v.size else None
            if r is not None and r.valid.all():
                local = np.unravel_index(int(r.data), v.shape)
                glob = np.ravel_multi_index(tuple(int(li) + s for li, (s, _) in zip(local, loc)), shape)
                iv = np.full(kshape, glob, dtype=np.int64)
                vv = v[local].reshape(kshape)
            else:  # no valid element here (n = 0): never picked
                iv, vv = np.zeros(kshape, dtype=np.int64), np.zeros(kshape, dtype=vdt)
        else:
            (ax,) = axes
            if v.shape[ax] == 0:  # an empty chunk: no candidate (n = 0)
                kshape = tuple(1 if d == ax else s for d, s in enumerate(v.shape))
                iv, vv = np.zeros(kshape, dtype=np.int64), np.zeros(kshape, dtype=vdt)
            else:
                r = getattr(_engine_ops, op)(v, dim=ax, keepdim=True, mask=ok)
                li = r.data.astype(np.int64)
                iv = li + loc[ax][0]
                vv = np.take_along_axis(v, np.clip(li, 0, v.shape[ax] - 1), axis=ax)
        n = _count(ok, _ma(v, ok), axes, nan)
        return _rec(iv.shape, sdt.descr, v=vv, i=iv, n=n)

    key = (op, axes, shape, flat, vdt.str)
    args = (data,) if valid is None else (data, valid)
    partial = da.map_blocks(_Named(state, *key), *args, chunks=chunks, dtype=sdt, meta=np.empty((0,) * ndim, dtype=sdt))

    def pick(s, axis):
        # the winning entry along the reduced axes: the largest (smallest) value, NaN
        # first unless the op ignores NaN (its states hold no NaN), ties to the lowest index
        k = len(axes)
        tail = tuple(range(ndim - k, ndim))
        moved = np.moveaxis(s, axes, tail)
        lead = moved.shape[: ndim - k]
        m = moved.reshape(lead + (int(np.prod(moved.shape[ndim - k :])),))
        v, i, n = m["v"], m["i"], m["n"]
        if v.dtype.kind == "f":
            score = np.where(np.isnan(v), np.inf, v if hi else -v).astype(np.float64)
        else:
            score = (v if hi else -v.astype(np.int64)).astype(np.float64) if v.dtype != np.int64 else None
        if score is None:  # int64: compare exactly, with the empty lanes below every value
            ok = n > 0
            best = np.where(ok, v, np.iinfo(np.int64).min if hi else np.iinfo(np.int64).max)
            target = best.max(axis=-1, keepdims=True) if hi else best.min(axis=-1, keepdims=True)
            win = ok & (v == target)
        else:
            score = np.where(n > 0, score, -np.inf)
            win = (n > 0) & (score == score.max(axis=-1, keepdims=True))
        cand = np.where(win, i, np.iinfo(np.int64).max)
        j = cand.argmin(axis=-1)[..., None]
        out = np.empty(lead + (1,), dtype=sdt)
        out["v"] = np.take_along_axis(v, j, axis=-1)
        out["i"] = np.take_along_axis(i, j, axis=-1)
        out["n"] = n.sum(axis=-1, keepdims=True)
        return np.moveaxis(out.reshape(lead + (1,) * k), tail, axes)

    def finish(st):
        m = pick(st, axes)
        return m["i"], m["n"] > 0

    return _tree(partial, lambda st: pick(st, axes), finish, axes, keepdims, sdt, np.dtype(np.int64), split_every, key)


def _whole(op: str, data: Any, valid: Any, axes: tuple[int, ...], keepdims: bool, kw: dict) -> Any:
    """Median and quantile, exactly: the reduced axes rechunked whole, one engine call per
    block."""
    whole = {a: -1 for a in axes}
    data = data.rechunk(whole)
    valid = None if valid is None else valid.rechunk(whole)
    opts = {k: v for k, v in kw.items() if v is not None}
    out = _out_dtype(op, data.dtype, opts)

    def block(v, ok=None):
        r = getattr(_engine_ops, op)(v, dim=list(axes), keepdim=keepdims, mask=ok, **opts)
        return _masked_result(r.data, r.valid)

    if keepdims:
        chunks = tuple((1,) if i in axes else c for i, c in enumerate(data.chunks))
        drop: Any = None
    else:
        chunks = tuple(c for i, c in enumerate(data.chunks) if i not in axes)
        drop = axes
    args = (data,) if valid is None else (data, valid)
    return da.map_blocks(
        _Named(block, op, axes, keepdims, sorted(opts.items())),
        *args,
        chunks=chunks,
        drop_axis=drop,
        dtype=out,
        meta=np.ma.MaskedArray(np.empty((0,) * len(chunks), dtype=out)),
    )


def _normalize(op: str, x: Any, axis: int, mask: Any, kw: dict) -> Any:
    data, valid = _split(x, mask)
    (ax,) = _axes(axis, data.ndim)
    data = data.rechunk({ax: -1})
    valid = None if valid is None else valid.rechunk({ax: -1})
    opts = {k: v for k, v in kw.items() if v is not None}
    out = np.dtype(getattr(_engine_ops, op)(np.zeros((1,), dtype=data.dtype), dim=0, **opts).data.dtype)

    def block(v, ok=None):
        r = getattr(_engine_ops, op)(v, dim=ax, mask=ok, **opts)
        return _masked_result(r.data, r.valid)

    args = (data,) if valid is None else (data, valid)
    return da.map_blocks(_Named(block, op, ax, sorted(opts.items())), *args, dtype=out, meta=np.ma.MaskedArray(np.empty((0,) * data.ndim, dtype=out)))


def _make_reduction(name: str, options: Sequence[str]) -> Callable[..., Any]:
    def fn(x: Any, axis: Any = None, *, keepdims: bool = False, mask: Any = None, split_every: Any = None, **kw: Any) -> Any:
        unknown = set(kw) - set(options)
        if unknown:
            raise TypeError(f"{name}() got unexpected options {sorted(unknown)}; it takes {list(options)}")
        return _reduce(name, x, axis, keepdims, mask, split_every, kw)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (
        f"Masked `{name}` of a dask array over `axis` (None: all), a dask array of numpy.ma "
        f"chunks out. Options: {', '.join(options) or 'none'}. `mask=` True = valid (or a "
        "dask.array.ma input). See the module docs for how it runs."
    )
    return fn


def _make_normalization(name: str, options: Sequence[str]) -> Callable[..., Any]:
    def fn(x: Any, axis: int, *, mask: Any = None, **kw: Any) -> Any:
        unknown = set(kw) - set(options)
        if unknown:
            raise TypeError(f"{name}() got unexpected options {sorted(unknown)}; it takes {list(options)}")
        return _normalize(name, x, axis, mask, kw)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (
        f"Masked `{name}` along `axis` of a dask array (the axis is rechunked whole, then "
        "each block runs the engine), a dask array of numpy.ma chunks out."
    )
    return fn


for _name, _kind, _options, _diff, _summary in _masked.ops():
    if _kind in ("reduce", "reduce_one"):
        globals()[_name] = _make_reduction(_name, tuple(_options))
        __all__.append(_name)
    elif _kind == "normalize":
        globals()[_name] = _make_normalization(_name, tuple(_options))
        __all__.append(_name)
del _name, _kind, _options, _diff, _summary
