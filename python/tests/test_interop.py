"""Zero-copy inputs and outputs (proved by pointers), scipy.sparse, COO, errors, the GIL."""

import multiprocessing
import threading

import numpy as np
import pytest

import masked as mk
from masked import _masked

sp = pytest.importorskip("scipy.sparse", reason="scipy is installed by the test command")


def engine_owned(a: np.ndarray) -> bool:
    """True when the array's memory is a Rust vector handed over by the engine (numpy's
    base object is rust-numpy's container), not a numpy allocation."""
    base = a
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return type(base).__name__ == "PySliceContainer"


def test_dense_inputs_without_copy():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    a = mk.MaskedArray(x)
    assert a.data is x
    s = x[:, ::2]  # strided
    b = mk.MaskedArray(s, valid=np.ones(3, dtype=bool))
    assert np.shares_memory(b.data, x)
    assert b.sum(1).data.tolist() == s.sum(1).tolist()
    t = x.T  # transposed (F order)
    assert mk.sum(t, 1).data.tolist() == t.sum(1).tolist()
    neg = x[::-1, ::-1]  # negative strides
    assert mk.amax(neg, 1).data.tolist() == neg.max(1).tolist()


def test_strided_inputs_compute_as_their_contiguous_copies():
    # transposes, broadcasts, steps and reversals (of values, masks and upstreams) are
    # read in place and gathered lane by lane: the results equal the contiguous copy's
    rng = np.random.default_rng(7)
    base = rng.standard_normal((40, 70)).astype(np.float32)
    bools = rng.random((70, 70)) < 0.6
    views = {
        "transpose": base.T,
        "broadcast row": np.broadcast_to(base[3], (33, 70)),
        "broadcast column": np.broadcast_to(base[:, 5:6], (40, 70)),
        "step": base[::2, 1::3],
        "reversed": base[::-1, ::-2],
    }
    for name, v in views.items():
        c = np.ascontiguousarray(v)
        m = np.ascontiguousarray(bools[: v.shape[0], : v.shape[1]])
        for valid in (m, m.T.copy().T, np.broadcast_to(m[0], m.shape)):
            a, b = mk.MaskedArray(v, valid=valid), mk.MaskedArray(c, valid=np.ascontiguousarray(valid))
            ops = (
                lambda x: mk.softmax(x, 1),
                lambda x: mk.sum(x, 0),
                lambda x: mk.var(x, 1),
                # lane statistics of an F-ordered view read its memory as it lies
                lambda x: mk.median(x, 0, mode="lower"),
                lambda x: mk.quantile(x, 0.3, 1),
                mk.exp,
                lambda x: x + x,
            )
            for f in ops:
                r, w = f(a), f(b)
                assert np.array_equal(r.valid, w.valid), name
                assert np.array_equal(r.data[r.valid], w.data[w.valid]), name
            y = mk.softmax(b, 1)
            gb = np.broadcast_to(rng.standard_normal(v.shape[1]).astype(np.float32), v.shape)
            dx = mk.vjp("softmax", a, mk.MaskedArray(gb), 1, saved=y)
            want = mk.vjp("softmax", b, mk.MaskedArray(np.ascontiguousarray(gb)), 1, saved=y)
            assert np.array_equal(dx.data, want.data), name


def test_unaligned_input_is_copied_not_a_crash():
    raw = np.zeros(8 * 6 + 1, dtype=np.uint8)
    x = np.frombuffer(raw.data, dtype=np.float64, count=6, offset=1).reshape(2, 3)
    assert not x.flags.aligned
    assert mk.sum(x, 1).data.tolist() == [0.0, 0.0]


def test_results_own_the_engine_buffers():
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    r = mk.softmax(x, 1)
    assert engine_owned(r.data)
    assert engine_owned(mk.sum(x, 0).data)
    A = sp.random(50, 40, density=0.2, format="csr", random_state=1)
    assert engine_owned(mk.csr(A).softmax(1).data)


def test_unsupported_dtypes_are_type_errors():
    with pytest.raises(TypeError, match="unsupported dtype"):
        mk.MaskedArray(np.zeros(3, dtype=np.uint8))
    with pytest.raises(TypeError, match="bool array"):
        mk.MaskedArray(np.zeros(3), valid=np.zeros(3, dtype=np.int8))
    with pytest.raises(TypeError):
        mk.sum("not an array")


def test_errors_are_typed():
    with pytest.raises(mk.MaskedError, match="dim"):
        mk.sum(np.ones((2, 2)), 5)
    assert issubclass(mk.MaskedError, ValueError)
    with pytest.raises(mk.MaskedError, match="broadcast"):
        mk.MaskedArray(np.ones((2, 3)), valid=np.ones((4,), dtype=bool))
    with pytest.raises(mk.MaskedError, match="unknown|expected"):
        mk.quantile(np.ones(3), 0.5, interpolation="sideways")
    # a dense result larger than the resource limits: MemoryError before any allocation
    big = sp.csr_array((np.array([1.0]), np.array([0]), np.array([0, 1] + [1] * 0)), shape=(1, 2**62))
    with pytest.raises(MemoryError):
        mk.csr(big).filled(0)


def test_a_panic_becomes_an_exception():
    with pytest.raises(mk.MaskedError, match="internal error: a deliberate panic"):
        _masked._panic_for_test()
    # and the module still works afterwards
    assert mk.sum(np.ones(3)).data.tolist() == 3.0


def test_the_gil_is_released_during_engine_calls():
    # a thread waits inside an engine call until this thread releases it; were the GIL
    # held during the call, this thread could not run and the wait would time out
    seen = []
    t = threading.Thread(target=lambda: seen.append(_masked._probe_wait(30.0)))
    t.start()
    while t.is_alive() and not seen:
        _masked._probe_release()
        t.join(0.01)
    t.join()
    assert seen == [True]


def _softmax_in_two_threads(x):
    # two Python threads computing at once: each result equals one thread's
    want = mk.softmax(x, 1).data
    out = [None, None]

    def run(k):
        out[k] = mk.softmax(x, 1).data

    ts = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    np.testing.assert_array_equal(out[0], want)
    np.testing.assert_array_equal(out[1], want)


def test_two_threads_compute_at_once():
    _softmax_in_two_threads(np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32))


def test_set_num_threads_sizes_each_call():
    x = np.random.default_rng(1).standard_normal((512, 512)).astype(np.float32)
    want = mk.softmax(x, 1).data
    default = mk.get_num_threads()
    try:
        mk.set_num_threads(1)
        assert mk.get_num_threads() == 1
        np.testing.assert_array_equal(mk.softmax(x, 1).data, want)
        mk.set_num_threads(3)
        assert mk.get_num_threads() == 3
        _softmax_in_two_threads(x)
        with pytest.raises(ValueError, match="-2 threads"):
            mk.set_num_threads(-2)
        assert mk.get_num_threads() == 3
    finally:
        mk.set_num_threads(0)
    assert mk.get_num_threads() == default


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_csr_without_copy_and_equal_to_scipy(index_dtype):
    A = sp.random(200, 150, density=0.05, format="csr", random_state=3, dtype=np.float64)
    A.indices = A.indices.astype(index_dtype)
    A.indptr = A.indptr.astype(index_dtype)
    a = mk.csr(A)
    indptr, indices, data, kind = a._h.csr_parts()
    assert kind == "pattern"
    assert indices is A.indices and data is A.data
    assert np.shares_memory(a.data, A.data)
    # row sums of the stored entries equal scipy's plain row sums
    s = a.sum(1)
    full = np.asarray(A.sum(1)).ravel()
    nonempty = np.diff(A.indptr) > 0
    assert s.layout == "coo"
    got = np.zeros(200)
    got[s.coords[0]] = s.compressed()
    np.testing.assert_allclose(got[nonempty], full[nonempty], rtol=1e-12)
    assert s.nnz == nonempty.sum()  # rows with no stored entry have no valid sum
    # mean of the stored entries vs by hand; valid="all" counts unstored zeros
    m = mk.mean(A, 1, mask=A)
    counts = np.diff(A.indptr)
    want = full[nonempty] / counts[nonempty]
    np.testing.assert_allclose(m.compressed(), want, rtol=1e-12)
    m_all = mk.mean(A, 1)  # torch.masked's convention: mask=None, every position valid
    np.testing.assert_allclose(m_all.compressed(), full / 150, rtol=1e-12)
    # softmax: sparse in, sparse out, over the same pattern
    sm = a.softmax(1)
    assert sm.layout == "csr" and sm.nnz == A.nnz
    d = A.toarray()
    r0 = np.nonzero(nonempty)[0][0]
    vals = d[r0, A.indices[A.indptr[r0] : A.indptr[r0 + 1]]]
    e = np.exp(vals - vals.max())
    np.testing.assert_allclose(sm.to_scipy().toarray()[r0, A.indices[A.indptr[r0] : A.indptr[r0 + 1]]], e / e.sum(), rtol=1e-12)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_csr_maps_and_binary_ops_share_the_inputs_structure(index_dtype):
    """A map or a binary op of a CSR matrix masked by its stored entries stores exactly
    those entries: its result shares the input's index arrays (pointers, no copy) and
    owns only new values, equal to numpy's on the data; with a separate mask pattern the
    result stores that pattern's positions (its own index arrays)."""
    A = sp.random(300, 200, density=0.05, format="csr", random_state=5, dtype=np.float64)
    A.indices = A.indices.astype(index_dtype)
    A.indptr = A.indptr.astype(index_dtype)
    a = mk.csr(A)
    B = sp.csr_array((np.cos(A.data), A.indices, A.indptr), shape=A.shape)
    b = mk.csr(B)
    for name, r, want in [
        ("exp", a.exp(), np.exp(A.data)),
        ("abs", a.abs(), np.abs(A.data)),
        ("x * 2", a * 2, A.data * 2),
        ("2 - x", 2 - a, 2 - A.data),
        ("x * y", a * b, A.data * B.data),
        ("x / y", a / b, A.data / B.data),
        ("astype", a.astype(np.float32), A.data.astype(np.float32)),
        ("x + 1 (int)", mk.csr(sp.csr_array((np.arange(A.nnz), A.indices, A.indptr), shape=A.shape)) + 1.5,
         np.arange(A.nnz) + 1.5),
    ]:
        S = r.to_scipy()
        assert r.layout == "csr" and r.nnz == A.nnz, name
        assert np.shares_memory(S.indices, A.indices), name
        assert np.shares_memory(S.indptr, A.indptr), name
        assert not np.shares_memory(S.data, A.data), name
        np.testing.assert_allclose(S.data, want, rtol=1e-15, err_msg=name)
    # a separate mask: the result's positions are the mask's (every third stored entry)
    P = A.copy()
    P.data = np.ones_like(P.data)
    P.data[::3] = 0
    P.eliminate_zeros()
    m = mk.csr(A, valid=P)
    for r, f in [(m.exp(), np.exp), (m * 3, lambda v: v * 3)]:
        S = r.to_scipy()
        assert not np.shares_memory(S.indices, A.indices)
        np.testing.assert_array_equal(S.indptr, P.indptr)
        np.testing.assert_array_equal(S.indices, P.indices)
        np.testing.assert_allclose(S.data, f(A.toarray()[P.toarray() != 0]), rtol=1e-15)


def test_csr_non_canonical_is_refused_with_the_fix():
    A = sp.csr_array((np.array([1.0, 2.0]), np.array([1, 0]), np.array([0, 2])), shape=(1, 2))
    A.has_sorted_indices = False
    with pytest.raises(mk.MaskedError, match="sort_indices"):
        mk.csr(A)


def test_csr_other_masks():
    A = sp.csr_array(np.array([[1.0, 0.0, 3.0], [0.0, 5.0, 6.0]]))
    P = sp.csr_array(np.array([[1, 1, 0], [0, 0, 1]]))
    r = mk.csr(A, valid=P).sum(1)
    assert r.compressed().tolist() == [1.0, 6.0]
    r = mk.csr(A, valid=np.array([[True, True, False], [False, False, True]])).sum(1)
    assert r.compressed().tolist() == [1.0, 6.0]
    r = mk.csr(A, valid="all").mean(1)
    np.testing.assert_allclose(r.compressed(), [4 / 3, 11 / 3])


def test_coo_n_d_and_scipy():
    rng = np.random.default_rng(5)
    shape = (6, 5, 4)
    flat = rng.choice(np.prod(shape), 40, replace=False)
    coords = np.stack(np.unravel_index(flat, shape)).astype(np.int64)
    vals = rng.standard_normal(40)
    a = mk.coo(coords, vals, shape)
    dense = np.zeros(shape)
    dense[tuple(coords)] = vals
    present = np.zeros(shape, dtype=bool)
    present[tuple(coords)] = True
    for dims in [0, 2, (0, 2)]:
        got = a.sum(dims)
        ref = np.ma.MaskedArray(dense, mask=~present).sum(axis=dims)
        want = np.ma.getdata(ref)[~np.ma.getmaskarray(ref)]
        np.testing.assert_allclose(got.compressed(), want, rtol=1e-12)
    sm = a.softmax(2)
    assert sm.layout == "coo" and sm.nnz == 40
    C = sp.coo_array(np.array([[0.0, 2.0], [3.0, 0.0]]))
    c = mk.coo(C)
    assert c.sum(0).compressed().tolist() == [3.0, 2.0]
    assert mk.sum(C, 1, mask=C).compressed().tolist() == [2.0, 3.0]
    with pytest.raises(mk.MaskedError):
        mk.coo(np.array([[0, 0], [1, 1]]), np.array([1.0, 2.0]), (2, 2))  # a repeated position


def _worker(name, shape):
    x = mk.shared.attach(name, shape, "float32")
    rng = np.random.default_rng(11)
    src = rng.standard_normal(shape).astype(np.float32)
    valid = rng.random(shape) < 0.7
    mk.softmax(src, 1, mask=valid, out=x)


def test_shared_memory_between_processes():
    shape = (4, 8)
    shm, x = mk.shared.empty(shape, "float32")
    try:
        ctx = multiprocessing.get_context("spawn")
        p = ctx.Process(target=_worker, args=(shm.name, shape))
        p.start()
        p.join(120)
        assert p.exitcode == 0
        # the parent reads the worker's result from the same buffer, without a copy
        y = mk.shared.refresh(x)
        assert np.shares_memory(y.data, x.data)
        rng = np.random.default_rng(11)
        src = rng.standard_normal(shape).astype(np.float32)
        valid = rng.random(shape) < 0.7
        want = mk.softmax(src, 1, mask=valid)
        np.testing.assert_array_equal(y.data, want.data)
        np.testing.assert_array_equal(y.valid, want.valid)
        del y, want
    finally:
        del x
        import gc

        gc.collect()
        shm.close()
        shm.unlink()


def test_sparse_vjp_is_stored_at_the_valid_entries():
    A = sp.csr_array(np.array([[1.0, 0.0, 3.0], [0.0, 0.0, 0.0], [4.0, 5.0, 0.0]]))
    a = mk.csr(A)
    r = a.sum(1)  # valid rows 0 and 2 (row 1 stores nothing)
    assert r.coords.tolist() == [[0, 2]]
    g = mk.coo(r.coords, np.array([2.0, -1.0]), r.shape)
    dx = mk.vjp("sum", a, g, 1)
    assert dx.layout == "csr"
    np.testing.assert_array_equal(dx.to_scipy().toarray(), [[2.0, 0.0, 2.0], [0, 0, 0], [-1.0, -1.0, 0.0]])
    # softmax: the upstream gradient is stored where the forward output is
    p = a.softmax(1)
    gp = mk.vjp("softmax", a, p, 1)  # g = p itself
    want = []
    for row in A.toarray():
        v = row[row != 0]
        if v.size:
            s = np.exp(v - v.max()) / np.exp(v - v.max()).sum()
            want.extend(s * (s - (s * s).sum()))
    np.testing.assert_allclose(gp.compressed(), want, rtol=1e-12)
    # with the forward output saved: the same gradient, stored alike
    gs = mk.vjp("softmax", a, p, 1, saved=p)
    assert gs.layout == "csr"
    np.testing.assert_allclose(gs.compressed(), want, rtol=1e-12)
    # a map's gradient on a matrix masked by its pattern: on the input's own index
    # arrays (pointers), the upstream read as values; an elementwise op's is g f'(x)
    for d in (gp, gs):
        S = d.to_scipy()
        assert np.shares_memory(S.indices, A.indices) and np.shares_memory(S.indptr, A.indptr)
    ge = mk.vjp("exp", a, p)
    np.testing.assert_allclose(ge.to_scipy().data, p.to_scipy().data * np.exp(A.data), rtol=1e-15)
    assert np.shares_memory(ge.to_scipy().indices, A.indices)
    # an upstream stored elsewhere (another row pointer) is the positioned path's: the
    # count is checked
    other = mk.csr(sp.csr_array(np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [0.0, 5.0, 0.0]])))
    with pytest.raises(mk.MaskedError):
        mk.vjp("exp", a, other.exp())


def test_out_on_csr_writes_into_the_callers_data_buffer(monkeypatch):
    rng = np.random.default_rng(3)
    A = sp.random_array((40, 30), density=0.2, format="csr", dtype=np.float64, rng=rng)
    a = mk.csr(A)
    want = {(op, d): getattr(mk, op)(a, d) for op in ("softmax", "log_softmax", "cumsum") for d in (0, 1)}
    want_exp = mk.exp(a)
    # out: the input's structure (the same index arrays), its own data buffer
    buf = np.full(A.nnz, np.nan)
    out = mk.csr(sp.csr_array((buf, A.indices, A.indptr), shape=A.shape))
    assert np.shares_memory(out.data, buf)

    def no_alloc(*args, **kwargs):
        raise AssertionError("the result was computed into a fresh buffer")

    monkeypatch.setattr(mk.MaskedArray, "_apply", no_alloc)
    for op in ("softmax", "log_softmax", "cumsum"):
        for d in (0, 1):
            buf[:] = np.nan
            r = getattr(mk, op)(a, d, out=out)
            assert r is out and np.shares_memory(out.data, buf), op
            np.testing.assert_array_equal(buf, want[op, d].data, err_msg=f"{op} {d}")
            np.testing.assert_array_equal(out.to_scipy().toarray(), want[op, d].to_scipy().toarray())
    buf[:] = np.nan
    mk.exp(a, out=out)
    np.testing.assert_array_equal(buf, want_exp.data)
    # hand-checked: a row's softmax
    r0 = A[[0]].toarray()[0]
    v = r0[A.indices[A.indptr[0] : A.indptr[1]]]
    mk.softmax(a, 1, out=out)
    np.testing.assert_allclose(buf[: A.indptr[1]], np.exp(v) / np.exp(v).sum(), rtol=1e-12)
    # another structure, another dtype, a reduction: typed errors naming the problem
    other = mk.csr(sp.random_array(A.shape, density=0.2, format="csr", rng=np.random.default_rng(4)))
    with pytest.raises(mk.MaskedError, match="structure"):
        mk.softmax(a, 1, out=other)
    f32 = mk.csr(sp.csr_array((np.zeros(A.nnz, np.float32), A.indices, A.indptr), shape=A.shape))
    with pytest.raises(mk.MaskedError, match="dtype"):
        mk.softmax(a, 1, out=f32)
    monkeypatch.undo()
    with pytest.raises(TypeError, match="CSR array of the input's structure"):
        mk.softmax(a, 1, out=a)
    ro = np.zeros(A.nnz)
    ro.flags.writeable = False
    with pytest.raises(mk.MaskedError, match="read-only"):
        mk.softmax(a, 1, out=mk.csr(sp.csr_array((ro, A.indices, A.indptr), shape=A.shape)))
