"""Dense masked arrays against numpy.ma (an independent implementation) and by hand."""

import numpy as np
import pytest
import scipy.sparse as sp

import masked as mk

RNG = np.random.default_rng(7)


def data(shape=(5, 7), dtype=np.float64, p=0.6):
    x = RNG.standard_normal(shape).astype(dtype)
    valid = RNG.random(shape) < p
    return x, valid


def ma(x, valid):
    return np.ma.MaskedArray(x, mask=~valid)


@pytest.mark.parametrize("dim", [0, 1, None, (0, 1)])
@pytest.mark.parametrize(
    "op, ref",
    [
        ("sum", lambda m, ax: m.sum(axis=ax)),
        ("prod", lambda m, ax: m.prod(axis=ax)),
        ("amax", lambda m, ax: m.max(axis=ax)),
        ("amin", lambda m, ax: m.min(axis=ax)),
        ("mean", lambda m, ax: m.mean(axis=ax)),
        ("var", lambda m, ax: m.var(axis=ax, ddof=1)),
        ("std", lambda m, ax: m.std(axis=ax, ddof=1)),
        ("count", lambda m, ax: m.count(axis=ax)),
    ],
)
def test_reductions_equal_numpy_ma(op, ref, dim):
    x, valid = data()
    valid[2] = False  # a fully masked row
    got = getattr(mk, op)(x, dim, mask=valid)
    want = ref(ma(x, valid), dim if not isinstance(dim, tuple) else None)
    want = np.ma.asarray(want)
    gv = got.valid
    wv = ~np.ma.getmaskarray(want)
    if op == "count":
        np.testing.assert_array_equal(got.data, want.data)
        return
    if op in ("var", "std"):
        # numpy.ma masks a lane with one valid element for ddof=1; the engine gives NaN there
        # as a valid output? compare where both say valid
        both = gv & wv
        np.testing.assert_allclose(got.data[both], np.ma.getdata(want)[both], rtol=1e-12)
        return
    np.testing.assert_array_equal(gv, wv)
    np.testing.assert_allclose(got.data[gv], np.ma.getdata(want)[gv], rtol=1e-12)


def test_conventions_never_confused():
    x, valid = data()
    torch_style = mk.sum(x, 1, mask=valid)
    numpy_style = mk.MaskedArray(x, mask=~valid).sum(1)
    explicit = mk.MaskedArray(x, valid=valid).sum(1)
    np.testing.assert_array_equal(torch_style.data, numpy_style.data)
    np.testing.assert_array_equal(torch_style.data, explicit.data)
    with pytest.raises(ValueError, match="not both"):
        mk.MaskedArray(x, valid=valid, mask=~valid)
    with pytest.raises(ValueError, match="MaskedArray carries its own mask"):
        mk.sum(mk.MaskedArray(x), 1, mask=valid)


def test_hand_checked_values():
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
    valid = np.array([[True, True, False], [False, True, True]])
    s = mk.sum(x, 1, mask=valid)
    assert s.dtype == "float32"
    np.testing.assert_array_equal(s.data, [3.0, 11.0])
    m = mk.mean(x, 0, mask=valid, keepdim=True)
    assert m.shape == (1, 3)
    np.testing.assert_array_equal(m.data, [[1.0, 3.5, 6.0]])
    sm = mk.softmax(x, 1, mask=valid)
    e = np.exp([1.0, 2.0])
    np.testing.assert_allclose(sm.data[0, :2], e / e.sum(), rtol=1e-6)
    assert not sm.valid[0, 2]
    np.testing.assert_array_equal(sm.filled(0)[0, 2], 0.0)
    am = mk.argmax(x, 1, mask=valid)
    np.testing.assert_array_equal(am.data, [1, 2])
    med = mk.median(np.array([[1.0, 5.0, 2.0, 8.0]]), mask=np.array([[True, True, True, False]]))
    np.testing.assert_array_equal(med.data, [2.0])
    q = mk.quantile(np.array([1.0, 2.0, 3.0, 4.0]), 0.25)
    np.testing.assert_allclose(q.data, np.quantile([1.0, 2.0, 3.0, 4.0], 0.25))
    n = mk.norm(np.array([3.0, 4.0]), 2)
    np.testing.assert_allclose(n.data, 5.0)
    v = mk.var(np.array([1.0, 2.0, 3.0, 4.0]), unbiased=False)
    np.testing.assert_allclose(v.data, 1.25)
    v = mk.var(np.array([1.0, 2.0, 3.0, 4.0]), correction=0)
    np.testing.assert_allclose(v.data, 1.25)


def test_fully_masked_lane_fill_values_and_validity():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    valid = np.array([[True, True], [False, False]])
    s = mk.sum(x, 1, mask=valid)
    assert s.valid.tolist() == [True, False]
    assert s.filled(-7).tolist() == [3.0, -7.0]
    mean = mk.mean(x, 1, mask=valid)
    assert np.isnan(mean.data[1])  # torch.masked's fill value, under a false bit
    assert mean.filled(0).tolist() == [1.5, 0.0]


def test_integers_widen_and_every_dtype():
    x = np.array([[2**31 - 1, 5], [1, 1]], dtype=np.int32)
    s = mk.sum(x, 1)
    assert s.dtype == "int64"
    assert s.data.tolist() == [2**31 + 4, 2]
    for dt in (np.float16, np.float32, np.float64, np.int32, np.int64):
        y = np.arange(6, dtype=dt).reshape(2, 3)
        r = mk.amax(y, 1, mask=np.array([True, True, False]))
        assert r.data.tolist() == [1, 4]


def test_normalizations_need_a_dim():
    with pytest.raises(mk.MaskedError, match="dim"):
        mk.softmax(np.ones((2, 2)), None)
    with pytest.raises(TypeError):
        mk.softmax(np.ones((2, 2)))  # dim is required, as torch.masked's


def test_elementwise_keep_the_mask_and_never_leak_nan():
    x = np.array([-1.5, 0.25, np.nan, 4.0], dtype=np.float32)
    valid = np.array([True, True, False, True])
    r = mk.sqrt(x, mask=valid)
    assert np.isnan(r.data[0])  # a valid sqrt(-1.5) is a valid NaN
    assert r.valid.tolist() == valid.tolist()
    assert r.filled(0)[2] == 0.0
    c = mk.clamp(x, 0.0, 1.0, mask=valid)
    assert c.compressed().tolist() == [0.0, 0.25, 1.0]


def test_operators_and_rules():
    x = np.array([1.0, 2.0, 3.0])
    a = mk.MaskedArray(x, valid=np.array([True, False, True]))
    b = mk.MaskedArray(np.array([10.0, 20.0, 30.0]), valid=np.array([True, True, False]))
    assert (a + 1).compressed().tolist() == [2.0, 4.0]
    assert (1 - a).compressed().tolist() == [0.0, -2.0]
    assert (2 ** a).compressed().tolist() == [2.0, 8.0]
    assert (a * a).compressed().tolist() == [1.0, 9.0]
    assert (-a).compressed().tolist() == [-1.0, -3.0]
    with pytest.raises(mk.MaskedError, match="mask"):
        a + b  # the strict rule: masks differ
    r = mk.add(a, b, rule="and")
    assert r.valid.tolist() == [True, False, False]
    assert r.compressed().tolist() == [11.0]
    with pytest.raises(ValueError, match="expected strict or and"):
        mk.add(a, b, rule="or")
    cmp = a > 1.5
    assert cmp.dtype == "bool"
    assert cmp.compressed().tolist() == [False, True]
    both = (a > 0.5) & (a < 2.5)
    assert both.compressed().tolist() == [True, False]
    assert (~cmp).compressed().tolist() == [True, False]
    # promotion: int32 + float scalar gives a float
    i = mk.MaskedArray(np.array([1, 2], dtype=np.int32))
    assert (i + 0.5).dtype == "float64"
    # broadcasting a row over a matrix
    m = mk.MaskedArray(np.ones((2, 3)))
    w = mk.MaskedArray(np.array([1.0, 2.0, 3.0]))
    assert (m * w).data.tolist() == [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]


def test_where_fill_compress():
    a = mk.MaskedArray(np.array([1.0, 2.0, 3.0]), valid=np.array([True, False, True]))
    b = mk.MaskedArray(np.array([7.0, 8.0, 9.0]))
    w = mk.where(np.array([True, False, False]), a, b)
    assert w.compressed().tolist() == [1.0, 8.0, 9.0]
    f = a.fill(0.0)
    assert f.valid.all() and f.data.tolist() == [1.0, 0.0, 3.0]
    assert mk.compress(a).tolist() == [1.0, 3.0]


def test_where_filled_compressed_on_large_broadcast_operands_equal_numpy_ma():
    # several parallel chunks (300 x 500 elements), a broadcast condition, a broadcast
    # operand and a strided one: numpy.ma's where and filled on the same data
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 500))
    vx = rng.random((300, 500)) < 0.7
    y = rng.standard_normal(500)
    vy = rng.random(500) < 0.5
    cond = rng.random((1, 500)) < 0.5
    a = mk.MaskedArray(x[:, ::-1], valid=vx)
    b = mk.MaskedArray(y, valid=vy)
    w = mk.where(cond, a, b)
    want = np.ma.where(cond, ma(x[:, ::-1], vx), ma(y, vy))
    np.testing.assert_array_equal(w.valid, ~np.ma.getmaskarray(want))
    np.testing.assert_array_equal(w.data[w.valid], want.data[w.valid])
    assert (w.data[~w.valid] == 0).all()
    np.testing.assert_array_equal(a.filled(-3.5), ma(x[:, ::-1], vx).filled(-3.5))
    np.testing.assert_array_equal(a.compressed(), ma(x[:, ::-1], vx).compressed())
    np.testing.assert_array_equal(w.compressed(), want.compressed())
    # x ** 2 as x * x: numpy's values
    np.testing.assert_array_equal((a**2).compressed(), (ma(x[:, ::-1], vx) ** 2).compressed())
    assert (a**2).dtype == "float64" and (mk.MaskedArray(np.arange(3, dtype=np.int32)) ** 2).dtype == "int32"


def test_numpy_ma_round_trip():
    x, valid = data()
    m = ma(x, valid)
    a = mk.from_numpy_ma(m)
    assert np.shares_memory(a.data, x)
    back = a.to_numpy_ma()
    np.testing.assert_array_equal(np.ma.getmaskarray(back), ~valid)
    assert mk.sum(m, 1).data.tolist() == mk.sum(x, 1, mask=valid).data.tolist()


def test_repr_shows_masked_entries():
    a = mk.MaskedArray(np.array([1.0, 2.0]), valid=np.array([True, False]))
    assert "--" in repr(a)


def test_numpy_functions_refuse_to_drop_the_mask():
    a = mk.MaskedArray(np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match="filled"):
        np.asarray(a)
    with pytest.raises(TypeError, match="drop its mask"):
        np.sum(a)


def test_out_writes_into_the_callers_buffer():
    x, valid = data((3, 4), np.float32)
    buf = np.zeros((3, 4), dtype=np.float32)
    vbuf = np.zeros((3, 4), dtype=bool)
    out = mk.MaskedArray(buf, valid=vbuf)
    r = mk.softmax(x, 1, mask=valid, out=out)
    assert r is out
    assert out.data is buf or np.shares_memory(out.data, buf)
    want = mk.softmax(x, 1, mask=valid)
    np.testing.assert_array_equal(buf, want.data)
    np.testing.assert_array_equal(vbuf, want.valid)
    e = mk.exp(x, mask=valid, out=out)
    assert e is out and np.shares_memory(out.data, buf)
    with pytest.raises(mk.MaskedError, match="shape"):
        mk.softmax(np.ones((2, 2), dtype=np.float32), 1, out=out)


def test_out_updates_a_valid_buffer_of_many_words():
    # 3 x 150 bits: whole 64-bit words and a partial last one, unpacked into the caller's
    # valid buffer by the engine
    x, valid = data((3, 150), np.float32)
    vbuf = np.zeros((3, 150), dtype=bool)
    out = mk.MaskedArray(np.zeros((3, 150), np.float32), valid=vbuf)
    mk.softmax(x, 1, mask=valid, out=out)
    np.testing.assert_array_equal(vbuf, valid)
    np.testing.assert_array_equal(out.valid, valid)
    # out= the input itself: computed, then copied in, the valid buffer filled the same way
    vin = valid.copy()
    inplace = mk.MaskedArray(x.copy(), valid=vin)
    want = mk.softmax(x, 1, mask=valid)
    mk.softmax(inplace, 1, out=inplace)
    np.testing.assert_array_equal(inplace.data, want.data)
    np.testing.assert_array_equal(vin, want.valid)
    with pytest.raises(mk.MaskedError, match="bits"):
        out._h.valid_into(np.zeros(7, dtype=bool))


def test_out_is_written_by_the_kernel_not_copied(monkeypatch):
    x, valid = data((6, 9), np.float64)
    a = mk.MaskedArray(x, valid)
    want = {op: getattr(mk, op)(a, 1) for op in ("softmax", "log_softmax", "cumsum")}
    want_exp = mk.exp(a)
    buf = np.full((6, 9), np.nan)
    out = mk.MaskedArray(buf)

    # the engine writes into the buffer itself: the allocating path is never taken
    def no_alloc(*args, **kwargs):
        raise AssertionError("the result was computed into a fresh buffer")

    monkeypatch.setattr(mk.MaskedArray, "_apply", no_alloc)
    for op, w in want.items():
        buf[:] = np.nan
        r = getattr(mk, op)(a, 1, out=out)
        assert r is out and np.shares_memory(out.data, buf), op
        np.testing.assert_array_equal(buf, w.data, err_msg=op)
        np.testing.assert_array_equal(out.valid, w.valid, err_msg=op)
    buf[:] = np.nan
    mk.exp(a, out=out)
    np.testing.assert_array_equal(buf, want_exp.data)
    # a buffer of another dtype is refused by the engine, naming it
    with pytest.raises(mk.MaskedError, match="dtype"):
        mk.softmax(a, 1, out=mk.MaskedArray(np.zeros((6, 9), np.float32)))
    monkeypatch.undo()
    # out= the input itself (overlapping memory): computed, then copied in
    inplace = mk.MaskedArray(x.copy(), valid)
    mk.softmax(inplace, 1, out=inplace)
    np.testing.assert_array_equal(inplace.data, want["softmax"].data)


def test_vjp_matches_finite_differences_and_no_nan():
    x, valid = data((3, 5), np.float64)
    valid[1] = False  # a fully masked row
    g = RNG.standard_normal((3, 5))
    dx = mk.vjp("softmax", x, g, 1, mask=valid)
    assert not np.isnan(dx.data).any()
    assert (dx.data[1] == 0).all()
    eps = 1e-6
    for i, j in [(0, 0), (2, 3), (0, 4)]:
        if not valid[i, j]:
            continue
        xp, xm = x.copy(), x.copy()
        xp[i, j] += eps
        xm[i, j] -= eps
        fp = (mk.softmax(xp, 1, mask=valid).filled(0) * g).sum()
        fm = (mk.softmax(xm, 1, mask=valid).filled(0) * g).sum()
        np.testing.assert_allclose(dx.data[i, j], (fp - fm) / (2 * eps), rtol=1e-5, atol=1e-8)
    gs = RNG.standard_normal(3)
    dv = mk.vjp("var", x, gs, 1, mask=valid)
    assert not np.isnan(dv.data).any()
    with pytest.raises(mk.MaskedError, match="gradient|differentiable"):
        mk.vjp("sum", np.array([1, 2], dtype=np.int64), np.array(1, dtype=np.int64))


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 2e-6), (np.float64, 1e-12)])
@pytest.mark.parametrize(
    "op, deriv, opts",
    [
        ("exp", np.exp, {}),
        ("log", lambda x: 1 / x, {}),
        ("tanh", lambda x: 1 / np.cosh(x) ** 2, {}),
        ("sigmoid", lambda x: np.exp(-x) / (1 + np.exp(-x)) ** 2, {}),
        ("sin", np.cos, {}),
        ("sqrt", lambda x: 0.5 / np.sqrt(x), {}),
        ("pow", lambda x: 2.5 * x**1.5, {"exponent": 2.5}),
        ("pow", lambda x: 2 * x, {"exponent": 2.0}),
    ],
)
def test_unary_vjps_equal_numpys_derivatives(op, deriv, opts, dtype, rtol):
    # positive values (every function's domain), large ones included (tanh', σ' far out)
    x = (np.abs(RNG.standard_normal((6, 33))) * 3 + 0.05).astype(dtype)
    x[0, :4] = [15.0, 30.0, 1e-3, 8.0]
    valid = RNG.random(x.shape) < 0.6
    x[~valid] = np.nan  # masked-out values never reach the gradient
    g = RNG.standard_normal(x.shape).astype(dtype)
    dx = mk.vjp(op, x, g, mask=valid, **opts)
    assert dx.dtype == np.dtype(dtype).name
    want = np.where(valid, g.astype(np.float64) * deriv(x.astype(np.float64)), 0.0)
    np.testing.assert_allclose(dx.data, want, rtol=rtol, atol=0)
    assert (dx.data[~valid] == 0).all()
    # on CSR with its pattern as the mask: the same values at the stored entries
    A = sp.csr_array(np.where(valid, x, 0.0))
    a = mk.csr(A)
    y = getattr(a, op)(**opts) if opts else getattr(a, op)()
    gs = mk.coo(y.coords, g[valid], y.shape)
    ds = mk.vjp(op, a, gs, **opts)
    assert ds.layout == "csr"
    np.testing.assert_allclose(ds.compressed(), want[valid], rtol=rtol, atol=0)


def test_vjp_with_the_saved_output_equals_the_recomputed_one():
    x, valid = data((4, 6), np.float64)
    valid[2] = False  # a fully masked row
    a = mk.MaskedArray(x, valid)
    for op in ["softmax", "log_softmax", "logsumexp", "norm"]:
        y = getattr(mk, op)(a, dim=1)
        g = RNG.standard_normal(y.shape)
        want = mk.vjp(op, a, g, 1)
        got = mk.vjp(op, a, g, 1, saved=y)
        np.testing.assert_allclose(got.data, want.data, rtol=1e-12, atol=1e-15, err_msg=op)
        assert not np.isnan(got.data).any(), op
    # a saved output of the wrong shape is an error, not a wrong gradient
    y = mk.softmax(a, 1)
    with pytest.raises(mk.MaskedError, match="shape"):
        mk.vjp("softmax", a, np.ones((4, 6)), 1, saved=mk.MaskedArray(np.ones((6, 4))))


def test_halves():
    x = np.array([[1.0, 2.0, 3.0]], dtype=np.float16)
    r = mk.sum(x, 1, dtype=np.float32)
    assert r.dtype == "float32" and r.data.tolist() == [6.0]
    assert mk.softmax(x, 1).dtype == "float16"


def test_binary_vjp_returns_both_gradients():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4))
    w = rng.standard_normal((4,))  # broadcast over rows
    a = mk.MaskedArray(x, valid=rng.random((3, 4)) < 0.7)
    b = mk.MaskedArray(w)
    g = rng.standard_normal((3, 4))
    da_, db = mk.vjp("mul", (a, b), g, rule="and")
    valid = a.valid
    np.testing.assert_allclose(da_.data, np.where(valid, g * w, 0.0), rtol=1e-12)
    np.testing.assert_allclose(db.data, np.where(valid, g * x, 0.0).sum(0), rtol=1e-12)
    dq, dr = mk.vjp("div", (a, b), g, rule="and")
    np.testing.assert_allclose(dq.data, np.where(valid, g / w, 0.0), rtol=1e-12)
    np.testing.assert_allclose(dr.data, np.where(valid, -g * x / w**2, 0.0).sum(0), rtol=1e-12)
    assert not np.isnan(dr.data).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_by_one_exponent_equals_numpy_on_every_case(dtype):
    # x ** p runs the unary pow's loop: the short forms (2, 3, -1, -2, 0.5) and the
    # branch-free power elsewhere, the exact form at zeros, infinities and NaN
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(4000) * 3).astype(dtype)
    x[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5]
    valid = rng.random(4000) < 0.8
    valid[:8] = True
    a = mk.MaskedArray(x, valid=valid)
    tol = 4 * np.finfo(dtype).eps
    with np.errstate(all="ignore"):
        for p in (2, 3, -1, -2, 0.5, 1.7, -0.5, 0.0, 4):
            got = a**p
            assert got.dtype == np.dtype(dtype).name
            want = np.power(x.astype(np.float64), p)
            if p > 0 and p != int(p):
                want[3] = np.nan  # pow(-inf, 0.5) = NaN, as torch (numpy: inf)
            np.testing.assert_allclose(got.data[valid], want[valid].astype(dtype), rtol=tol, err_msg=f"p={p}")
            # signed zeros and infinities as numpy's ((-0) ** 0.5 = -0 too)
            num = ~np.isnan(want[:8])
            np.testing.assert_array_equal(np.signbit(got.data[:8][num]), np.signbit(want[:8][num]), err_msg=f"p={p}")
            assert (got.data[~valid] == 0).all()
