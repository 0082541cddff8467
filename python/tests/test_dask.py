"""mk.dask against the one-machine engine across random chunkings, dtypes and axes, and
on a real cluster (separate worker processes on the loopback interface)."""

import numpy as np
import pytest

import masked as mk

da = pytest.importorskip("dask.array", reason="dask is optional (pip install 'dask[array,distributed]')")
import dask  # noqa: E402  (present once dask.array is)

EXACT = {"count", "amax", "amin", "nanmax", "nanmin", "ptp", "argmax", "argmin", "nanargmax", "nanargmin", "median", "nanmedian", "quantile", "nanquantile"}
FLOAT_ONLY = {"logsumexp", "logmeanexp", "nanmean", "nanvar", "nanstd", "nansum", "nanmax", "nanmin", "nanargmax", "nanargmin", "nanmedian", "nanquantile"}
REDUCTIONS = [o[0] for o in mk.ops() if o[1] in ("reduce", "reduce_one")]


def random_chunks(rng, n):
    """Uneven chunks of a dim of length n, sometimes with an empty chunk."""
    cuts = sorted(rng.choice(np.arange(1, n), size=rng.integers(0, min(4, n - 1) + 1), replace=False)) if n > 1 else []
    sizes = np.diff([0, *cuts, n]).tolist()
    if rng.random() < 0.3:
        sizes.insert(int(rng.integers(0, len(sizes) + 1)), 0)
    return tuple(sizes)


def case(rng, dtype):
    shape = (int(rng.integers(3, 9)), int(rng.integers(3, 10)))
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal(shape).astype(dtype)
        x[rng.random(shape) < 0.1] = np.nan if rng.random() < 0.5 else x[0, 0]
    else:
        x = rng.integers(-50, 50, shape).astype(dtype)
    valid = rng.random(shape) < 0.6
    valid[int(rng.integers(0, shape[0]))] = False  # a fully masked row
    chunks = tuple(random_chunks(rng, n) for n in shape)
    valid[: chunks[0][0], : chunks[1][0]] = False  # a fully masked chunk
    return x, valid, chunks


def lazy_and_want(op, x, valid, chunks, axis, keepdims, **kw):
    """mk.dask's lazy `op` over x in `chunks`, and the engine's result on the whole."""
    dx = da.from_array(x, chunks=chunks)
    dv = da.from_array(valid, chunks=chunks)
    lazy = getattr(mk.dask, op)(dx, axis=axis, keepdims=keepdims, mask=dv, **kw)
    want = getattr(mk, op)(x, dim=axis, keepdim=keepdims, mask=valid, **kw)
    return lazy, want


def verify(op, x, lazy, got, want):
    """`got` (the computed `lazy`) equals `want`: the mask exactly, the values exactly or
    within the dtype's tolerance."""
    assert isinstance(got, np.ma.MaskedArray)
    assert got.shape == want.shape and lazy.dtype == want.data.dtype, (op, got.shape, want.shape)
    ok = want.valid
    np.testing.assert_array_equal(~np.ma.getmaskarray(got), ok, err_msg=op)
    g, w = np.ma.getdata(got)[ok], want.data[ok]
    if op in EXACT or x.dtype.kind == "i":
        np.testing.assert_array_equal(g, w, err_msg=op)
    else:
        tol = {np.float64: 1e-9, np.float32: 2e-4}[x.dtype.type]
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True, err_msg=op)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
def test_every_reduction_equals_the_engine(seed, dtype):
    rng = np.random.default_rng(seed)
    x, valid, chunks = case(rng, dtype)
    cases = []
    for op in REDUCTIONS:
        if np.dtype(dtype).kind == "i" and op in FLOAT_ONLY | {"var", "std", "norm", "mean", "prod"}:
            continue
        one = op.startswith("arg") or op.startswith("nanarg")
        for axis in ([0, 1, None] if one else [0, 1, None, (0, 1)]):
            # keepdims by the seed's parity: each (dtype, op, axis) meets both over the
            # six seeds
            keepdims = seed % 2 == 1
            kw = {}
            if op in ("quantile", "nanquantile"):
                kw = {"q": 0.3}
            cases.append((op, *lazy_and_want(op, x, valid, chunks, axis, keepdims, **kw)))
    # every graph computed in one call (dask's per-call overhead was this file's time);
    # each result checked on its own
    got = dask.compute(*[lazy for _, lazy, _ in cases])
    assert len(got) == len(cases) > 30
    for (op, lazy, want), g in zip(cases, got):
        verify(op, x, lazy, g, want)


def test_options_and_split_every():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((40, 30))
    valid = rng.random((40, 30)) < 0.7
    dx = da.from_array(x, chunks=(5, 7))
    dv = da.from_array(valid, chunks=(5, 7))
    for ord_ in (1.0, 2.0, 3.0, np.inf, -np.inf):
        got = mk.dask.norm(dx, axis=0, mask=dv, ord=ord_, split_every=2).compute()
        want = mk.norm(x, ord_, 0, mask=valid)
        np.testing.assert_allclose(np.ma.getdata(got), want.data, rtol=1e-12)
    got = mk.dask.var(dx, axis=1, mask=dv, correction=0, split_every=3).compute()
    np.testing.assert_allclose(np.ma.getdata(got), mk.var(x, 1, correction=0, mask=valid).data, rtol=1e-10)
    with pytest.raises(TypeError, match="unexpected options"):
        mk.dask.sum(dx, axis=0, q=0.5)


def test_graph_keys_name_what_they_compute():
    """Block functions are tokenized by their parameters (no closure pickled): the same
    call gives the same keys, any other op, axis, option or input other keys."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((12, 10))
    valid = rng.random((12, 10)) < 0.6
    dx, dv = da.from_array(x, chunks=(5, 4)), da.from_array(valid, chunks=(5, 4))
    same = [mk.dask.var(dx, axis=0, mask=dv).name for _ in range(2)]
    assert same[0] == same[1] and same[0].startswith("masked-var")
    others = {
        mk.dask.var(dx, axis=1, mask=dv).name,
        mk.dask.var(dx, axis=0, mask=dv, correction=0).name,
        mk.dask.std(dx, axis=0, mask=dv).name,
        mk.dask.var(dx, axis=0, mask=~dv).name,
        mk.dask.var(dx, axis=0, mask=dv, keepdims=True).name,
        mk.dask.argmax(dx, axis=0, mask=dv).name,
        mk.dask.argmax(dx, axis=None, mask=dv).name,
        mk.dask.quantile(dx, axis=0, mask=dv, q=0.3).name,
        mk.dask.quantile(dx, axis=0, mask=dv, q=0.4).name,
        mk.dask.softmax(dx, 0, mask=dv).name,
        mk.dask.softmax(dx, 1, mask=dv).name,
    }
    assert same[0] not in others and len(others) == 11


def test_numpy_ma_chunks_and_normalizations():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((12, 10)).astype(np.float32)
    valid = rng.random((12, 10)) < 0.5
    m = da.ma.masked_array(da.from_array(x, chunks=(4, 3)), mask=da.from_array(~valid, chunks=(4, 3)))
    got = mk.dask.mean(m, axis=1).compute()
    want = mk.mean(x, 1, mask=valid)
    np.testing.assert_array_equal(~np.ma.getmaskarray(got), want.valid)
    np.testing.assert_allclose(np.ma.getdata(got)[want.valid], want.data[want.valid], rtol=1e-6)
    assert da.ma.getmaskarray(mk.dask.sum(m, axis=0)).compute().shape == (10,)
    sm = mk.dask.softmax(da.from_array(x, chunks=(4, 3)), 1, mask=da.from_array(valid, chunks=(4, 3))).compute()
    w = mk.softmax(x, 1, mask=valid)
    np.testing.assert_array_equal(np.ma.getdata(sm), w.data)
    np.testing.assert_array_equal(~np.ma.getmaskarray(sm), w.valid)
    with pytest.raises(ValueError, match="carries its own mask"):
        mk.dask.sum(m, axis=0, mask=da.ones((12, 10), dtype=bool))


@pytest.mark.parametrize("processes", [True, False])
def test_on_a_local_cluster(processes):
    distributed = pytest.importorskip("distributed", reason="distributed is optional")
    rng = np.random.default_rng(4)
    x = rng.integers(-1000, 1000, (200, 150)).astype(np.int64)
    valid = rng.random((200, 150)) < 0.5
    # worker processes on the loopback interface, one engine thread each; or threads of
    # this process (the in-process transport)
    where = {"host": "127.0.0.1", "env": {"RAYON_NUM_THREADS": "1"}} if processes else {}
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=None, **where
    ) as cluster, distributed.Client(cluster) as client:
        dx = da.from_array(x, chunks=(37, 41))
        dv = da.from_array(valid, chunks=(37, 41))
        s, am, med = client.compute(
            [
                mk.dask.sum(dx, axis=1, mask=dv),
                mk.dask.argmax(dx, axis=0, mask=dv),
                mk.dask.median(dx.astype(np.float64), axis=0, mask=dv),
            ],
            sync=True,
        )
        np.testing.assert_array_equal(np.ma.getdata(s), mk.sum(x, 1, mask=valid).data)
        np.testing.assert_array_equal(np.ma.getdata(am), mk.argmax(x, 0, mask=valid).data)
        np.testing.assert_array_equal(np.ma.getdata(med), mk.median(x.astype(np.float64), 0, mask=valid).data)
        v = client.compute(mk.dask.var(dx.astype(np.float64), axis=None, mask=dv), sync=True)
        np.testing.assert_allclose(np.ma.getdata(v), mk.var(x.astype(np.float64), mask=valid).data, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32])
def test_lane_moments_equal_numpy(dtype):
    # var's partial state in one engine pass (what each chunk of mk.dask.var / std /
    # mean computes): count, mean and sum of squared deviations per lane, numpy's in f64
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((5, 7)) * 10).astype(dtype)
    valid = rng.random((5, 7)) < 0.6
    valid[2] = False  # an empty lane: n 0, mean 0, m2 0
    a = mk.MaskedArray(x, valid=valid)
    for axes, keep in [([1], True), ([0], False), (None, False), ([0, 1], True)]:
        n, mean, m2 = a._h.moments(axes, keep)
        ax = tuple(axes) if axes is not None else None
        xs = np.where(valid, x.astype(np.float64), 0.0)
        cnt = valid.sum(axis=ax, keepdims=True)
        avg = np.divide(xs.sum(axis=ax, keepdims=True), cnt, out=np.zeros(cnt.shape), where=cnt > 0)
        dev2 = np.where(valid, (x - avg) ** 2, 0.0).sum(axis=ax, keepdims=True)
        wn, wmean, wm2 = (w if keep else w.reshape(valid.sum(axis=ax).shape) for w in (cnt, avg, dev2))
        assert n.dtype == np.int64 and mean.dtype == np.float64 and n.shape == wn.shape
        np.testing.assert_array_equal(n, wn)
        # float32 blocks are summed in float32 before the float64 merge (the contract's
        # float32 accuracy)
        tol = 1e-6 if x.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(mean, wmean, rtol=tol, atol=tol)
        np.testing.assert_allclose(m2, wm2, rtol=100 * tol, atol=100 * tol)
    with pytest.raises(mk.MaskedError):
        a._h.moments([2], True)
