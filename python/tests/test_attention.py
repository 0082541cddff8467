"""Sparse attention from Python against references written here in numpy and torch:
forward values, gradients (torch autograd on the dense masked formula), empty rows,
batch broadcasting, bias, dtypes, errors."""

import numpy as np
import pytest

import masked as mk


def dense_reference(q, k, v, valid, scale, bias_dense=None):
    """softmax over the valid keys of scale * q k^T (+ bias), times v; zero rows where no
    key is valid (float64)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    s = scale * q @ np.swapaxes(k, -1, -2)
    if bias_dense is not None:
        s = s + bias_dense
    s = np.where(valid, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(valid, np.exp(s - m), 0.0)
    z = e.sum(axis=-1, keepdims=True)
    p = np.divide(e, z, out=np.zeros_like(e), where=z > 0)
    return p @ v


def random_mask(rng, n, m, p):
    return rng.random((n, m)) < p


@pytest.mark.parametrize("kind", ["causal", "band", "random", "lengths", "mask"])
def test_forward_equals_the_dense_reference(kind):
    rng = np.random.default_rng(0)
    n, d, dv = 37, 16, 8
    if kind == "causal":
        p = mk.AttentionPattern.causal(n)
        valid = np.tril(np.ones((n, n), bool))
    elif kind == "band":
        p = mk.AttentionPattern.band(n, 5)
        valid = np.tril(np.ones((n, n), bool)) & ~np.tril(np.ones((n, n), bool), -5)
    elif kind == "random":
        p = mk.AttentionPattern.random(n, 0.2, seed=3)
        valid = np.zeros((n, n), bool)
        for i in range(n):
            valid[i, p.indices[p.indptr[i]:p.indptr[i + 1]]] = True
        assert valid.diagonal().all()
    elif kind == "lengths":
        p = mk.AttentionPattern.lengths(n, 20)
        valid = np.zeros((n, n), bool)
        valid[:20, :20] = True
    else:
        valid = random_mask(rng, n, n, 0.3)
        valid[5] = False  # a query with no key
        p = mk.AttentionPattern.from_mask(valid)
    assert p.nnz == valid.sum()
    q, k, v = rng.standard_normal((n, d)), rng.standard_normal((n, d)), rng.standard_normal((n, dv))
    o = mk.attention(q, k, v, p)
    np.testing.assert_allclose(o, dense_reference(q, k, v, valid, 1 / np.sqrt(d)), rtol=1e-12, atol=1e-12)
    o32 = mk.attention(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), p)
    assert o32.dtype == np.float32
    np.testing.assert_allclose(o32, dense_reference(q, k, v, valid, 1 / np.sqrt(d)), rtol=1e-4, atol=1e-5)


def test_batches_broadcast_bias_and_scipy_patterns():
    sp = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(1)
    n, d = 12, 6
    valid = random_mask(rng, n, n, 0.4)
    p = mk.AttentionPattern.from_scipy(sp.csr_matrix(valid.astype(np.float64)))
    q = rng.standard_normal((2, 3, n, d))
    k = rng.standard_normal((1, 3, n, d))
    v = rng.standard_normal((3, n, 4))
    bias = rng.standard_normal(p.nnz)
    bias_dense = np.zeros((n, n))
    bias_dense[valid] = bias  # row-major order of the valid pairs = pattern order
    o = mk.attention(q, k, v, p, scale=0.3, bias=bias)
    assert o.shape == (2, 3, n, 4)
    np.testing.assert_allclose(o, dense_reference(q, k, v, valid, 0.3, bias_dense), rtol=1e-12, atol=1e-12)


def test_gradients_equal_torch_autograd_of_the_dense_masked_formula():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    n, m, d, dv = 9, 11, 5, 3
    valid = random_mask(rng, n, m, 0.4)
    valid[2] = False
    p = mk.AttentionPattern.from_mask(valid)
    q, k, v = (torch.tensor(rng.standard_normal(s), requires_grad=True) for s in ((2, n, d), (2, m, d), (2, m, dv)))
    bias = torch.tensor(rng.standard_normal(p.nnz), requires_grad=True)
    o = mk.torch.attention(q, k, v, p, scale=0.7, bias=bias)
    g = torch.tensor(rng.standard_normal((2, n, dv)))
    (o * g).sum().backward()
    # torch reference: dense scores, masked softmax written so that fully masked rows
    # have zero gradient, not NaN
    q2, k2, v2, b2 = (x.detach().clone().requires_grad_(True) for x in (q, k, v, bias))
    vt = torch.tensor(valid)
    bd = torch.zeros(n, m, dtype=torch.float64).masked_scatter(vt, b2)
    s = 0.7 * q2 @ k2.transpose(-1, -2) + bd
    s = s.masked_fill(~vt, float("-inf"))
    pr = torch.softmax(s.masked_fill(~vt.any(-1, keepdim=True), 0.0), -1).masked_fill(~vt, 0.0)
    ref = pr @ v2
    (ref * g).sum().backward()
    torch.testing.assert_close(o, ref, rtol=1e-12, atol=1e-12)
    for ours, theirs in ((q, q2), (k, k2), (v, v2), (bias, b2)):
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-10, atol=1e-12)
    assert torch.all(q.grad[:, 2] == 0)


def test_numpy_vjp_and_half_dtypes():
    rng = np.random.default_rng(3)
    n, d = 16, 8
    p = mk.AttentionPattern.causal(n)
    q, k, v = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))
    g = rng.standard_normal((n, d)).astype(np.float32)
    dq, dk, dv, db = mk.attention_vjp(q, k, v, p, g)
    assert db is None and dq.dtype == np.float32 and dk.shape == (n, d)
    # the value gradient is P^T g: check it against the dense probabilities
    valid = np.tril(np.ones((n, n), bool))
    s = np.where(valid, q.astype(np.float64) @ k.T.astype(np.float64) / np.sqrt(d), -np.inf)
    pr = np.exp(s - s.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    np.testing.assert_allclose(dv, pr.T @ g, rtol=1e-4, atol=1e-5)
    oh = mk.attention(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16), p)
    assert oh.dtype == np.float16
    np.testing.assert_allclose(oh.astype(np.float64), pr @ v, rtol=1e-2, atol=1e-2)


def test_torch_bfloat16_and_float32_run_and_match_float64():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    n, d = 20, 16
    p = mk.AttentionPattern.band(n, 4)
    x = [torch.tensor(rng.standard_normal((n, d))) for _ in range(3)]
    ref = mk.torch.attention(*x, p)
    for dt, tol in ((torch.float32, 1e-5), (torch.bfloat16, 3e-2)):
        xs = [t.to(dt).requires_grad_(True) for t in x]
        o = mk.torch.attention(*xs, p)
        assert o.dtype == dt
        torch.testing.assert_close(o.double(), ref, rtol=tol, atol=tol)
        o.sum().backward()
        assert all(t.grad is not None and t.grad.dtype == dt for t in xs)


def test_bad_inputs_raise_python_exceptions():
    p = mk.AttentionPattern.causal(4)
    z = np.zeros((4, 3), np.float32)
    with pytest.raises(mk.MaskedError, match="shape mismatch"):
        mk.attention(np.zeros((5, 3), np.float32), z, z, p)
    with pytest.raises(mk.MaskedError, match="dtype"):
        mk.attention(z, z.astype(np.float64), z, p)
    with pytest.raises(TypeError):
        mk.attention(z.astype(np.int32), z, z, p)
    with pytest.raises(mk.MaskedError, match="values"):
        mk.attention(z, z, z, p, bias=np.zeros(3, np.float32))
    with pytest.raises(mk.MaskedError):
        mk.AttentionPattern([0, 1, 1], [5], (2, 3))  # an index out of range
    with pytest.raises(mk.MaskedError):
        mk.AttentionPattern.band(4, 0)


def test_sddmm_spmm_and_segments_match_numpy():
    sp = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(5)
    n, m = 8, 10
    valid = random_mask(rng, n, m, 0.4)
    valid[3] = False
    p = mk.AttentionPattern.from_mask(valid)
    a, b = rng.standard_normal((n, 4)), rng.standard_normal((m, 4))
    s = mk.sddmm(a, b, p, scale=0.5)
    np.testing.assert_allclose(s, (0.5 * a @ b.T)[valid], rtol=1e-13)
    x = rng.standard_normal((m, 3))
    mat = sp.csr_matrix((s, p.indices, p.indptr), shape=(n, m))
    np.testing.assert_allclose(mk.spmm(s, p, x), mat @ x, rtol=1e-13)
    dense = np.where(valid, (0.5 * a @ b.T), np.nan)
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(mk.segment_sum(s, p), np.nansum(dense, 1), rtol=1e-13)
        mean = np.where(valid.any(1), np.nanmean(np.where(valid.any(1)[:, None], dense, 0), 1), 0)
        np.testing.assert_allclose(mk.segment_mean(s, p), mean, rtol=1e-13)
        amax = np.where(valid.any(1), np.nanmax(np.where(valid.any(1)[:, None], dense, 0), 1), 0)
        np.testing.assert_allclose(mk.segment_amax(s, p), amax, rtol=1e-13)
    soft = mk.segment_softmax(s, p)
    e = np.where(valid, np.exp(dense - np.nanmax(np.where(valid.any(1)[:, None], dense, 0), 1)[:, None]), 0)
    z = e.sum(1, keepdims=True)
    np.testing.assert_allclose(soft, (e / np.where(z > 0, z, 1))[valid], rtol=1e-12)
    # per batch element values [2, nnz]
    assert mk.segment_sum(np.stack([s, 2 * s]), p).shape == (2, n)


def test_torch_message_passing_gradients_equal_autograd_on_dense():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    n = 7
    valid = random_mask(rng, n, n, 0.5)
    valid[2] = False
    p = mk.AttentionPattern.from_mask(valid)
    vt = torch.tensor(valid)
    e = torch.tensor(rng.standard_normal(p.nnz), requires_grad=True)
    x = torch.tensor(rng.standard_normal((n, 3)), requires_grad=True)
    a = torch.tensor(rng.standard_normal((n, 4)), requires_grad=True)
    b = torch.tensor(rng.standard_normal((n, 4)), requires_grad=True)
    for op in ("softmax", "sum", "mean", "amax"):
        e.grad = None
        y = getattr(mk.torch, f"segment_{op}")(e, p)
        w = torch.tensor(rng.standard_normal(y.shape))
        (y * w).sum().backward()
        e2 = e.detach().clone().requires_grad_(True)
        dense = torch.full((n, n), float("-inf"), dtype=torch.float64).masked_scatter(vt, e2)
        rows = vt.any(1)
        if op == "softmax":
            ref = torch.softmax(dense[rows], -1)[vt[rows]]
        elif op == "sum":
            ref = torch.where(vt, dense, 0.0).sum(1)
        elif op == "mean":
            ref = torch.where(vt, dense, 0.0).sum(1) / vt.sum(1).clamp(min=1)
        else:
            ref = torch.where(rows, dense.amax(1), 0.0)
        (ref * w).sum().backward()
        torch.testing.assert_close(y, ref.detach(), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(e.grad, e2.grad, rtol=1e-12, atol=1e-12)
    # spmm and sddmm against dense products
    vals = torch.tensor(rng.standard_normal(p.nnz), requires_grad=True)
    o = mk.torch.spmm(vals, p, x)
    g = torch.tensor(rng.standard_normal((n, 3)))
    (o * g).sum().backward()
    v2, x2 = vals.detach().clone().requires_grad_(True), x.detach().clone().requires_grad_(True)
    ref = torch.zeros(n, n, dtype=torch.float64).masked_scatter(vt, v2) @ x2
    (ref * g).sum().backward()
    torch.testing.assert_close(o, ref.detach())
    torch.testing.assert_close(vals.grad, v2.grad)
    torch.testing.assert_close(x.grad, x2.grad)
    s = mk.torch.sddmm(a, b, p, 0.5)
    gs = torch.tensor(rng.standard_normal(p.nnz))
    (s * gs).sum().backward()
    a2, b2 = a.detach().clone().requires_grad_(True), b.detach().clone().requires_grad_(True)
    ((0.5 * a2 @ b2.T)[vt] * gs).sum().backward()
    torch.testing.assert_close(a.grad, a2.grad)
    torch.testing.assert_close(b.grad, b2.grad)


def test_the_gat_example_trains_as_the_dense_layer():
    pytest.importorskip("torch")
    import pathlib
    import runpy

    root = pathlib.Path(__file__).resolve().parents[2]
    ex = runpy.run_path(str(root / "examples" / "python" / "gat.py"))
    ours, dense = ex["train"](dense=False), ex["train"](dense=True)
    np.testing.assert_allclose(ours, dense, rtol=1e-10)
    assert ours[-1] < ours[0]


def test_a_scattered_pattern_swept_in_key_slices_equals_a_row_by_row_reference():
    # rows spanning ~5000 keys at 1%: the engine sweeps the keys in slices (its
    # default for scattered patterns); the reference goes a query row at a time
    rng = np.random.default_rng(7)
    n, d = 5000, 16
    p = mk.AttentionPattern.random(n, 0.01, seed=3)
    ip, ix = np.asarray(p.indptr), np.asarray(p.indices)
    q, k, v, g = (rng.standard_normal((n, d)) for _ in range(4))
    scale = 1 / np.sqrt(d)
    o_ref, dq_ref = np.zeros((n, d)), np.zeros((n, d))
    dk_ref, dv_ref = np.zeros((n, d)), np.zeros((n, d))
    for i in range(n):
        keys = ix[ip[i] : ip[i + 1]]
        s = scale * (k[keys] @ q[i])
        pr = np.exp(s - s.max())
        pr /= pr.sum()
        o_ref[i] = pr @ v[keys]
        dp = v[keys] @ g[i]
        ds = pr * (dp - pr @ dp)
        dq_ref[i] = scale * ds @ k[keys]
        np.add.at(dk_ref, keys, scale * ds[:, None] * q[i])
        np.add.at(dv_ref, keys, pr[:, None] * g[i])
    np.testing.assert_allclose(mk.attention(q, k, v, p), o_ref, rtol=1e-11, atol=1e-12)
    dq, dk, dv, _ = mk.attention_vjp(q, k, v, p, g)
    for ours, ref in ((dq, dq_ref), (dk, dk_ref), (dv, dv_ref)):
        np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=1e-11)
    # message passing on the same graph: sddmm, then spmm with the scores as weights
    rows = np.repeat(np.arange(n), np.diff(ip))
    sc = mk.sddmm(q, k, p, 0.5)
    np.testing.assert_allclose(sc, 0.5 * np.einsum("ij,ij->i", q[rows], k[ix]), rtol=1e-12, atol=1e-12)
    y = mk.spmm(sc, p, v)
    y_ref = np.zeros((n, d))
    np.add.at(y_ref, rows, sc[:, None] * v[ix])
    np.testing.assert_allclose(y, y_ref, rtol=1e-11, atol=1e-11)
