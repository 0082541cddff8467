"""mk.torch against torch.masked and torch autograd; torch tensors in without a copy."""

import inspect

import numpy as np
import pytest

import masked as mk

torch = pytest.importorskip(
    "torch", reason="torch is optional and not installed by the test command (pip install torch into .venv)"
)
import torch.masked  # noqa: E402

torch.manual_seed(0)


def batch(shape=(4, 6), dtype=torch.float64):
    x = torch.randn(shape, dtype=dtype)
    valid = torch.rand(shape) < 0.6
    valid[1] = False  # a fully masked row
    valid[0, 0] = True
    return x, valid


def test_tensors_in_without_copy():
    x = torch.randn(3, 4)
    a = mk.MaskedArray(x)
    assert a.data.ctypes.data == x.data_ptr()
    y = torch.randn(3, 4, requires_grad=True)
    assert mk.MaskedArray(y).data.ctypes.data == y.data_ptr()
    b = torch.randn(3, 4).to(torch.bfloat16)
    ab = mk.MaskedArray(b)
    assert ab.dtype == "bfloat16" and ab.data.ctypes.data == b.data_ptr()
    s = mk.sum(b, 1, dtype=torch.float32)
    torch.testing.assert_close(torch.from_numpy(s.data), b.float().sum(1))
    t = ab.softmax(1).to_torch()
    assert t.dtype == torch.bfloat16
    torch.testing.assert_close(t.float(), torch.softmax(b.float(), 1), atol=1e-2, rtol=1e-2)
    # out: a result's tensor shares the engine's buffer
    r = mk.softmax(x, 1)
    assert r.to_torch().data_ptr() == r.data.ctypes.data


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin", "prod", "logsumexp", "norm"])
def test_reductions_forward_and_gradients(op):
    x, valid = batch()
    x1 = x.clone().requires_grad_(True)
    x2 = x.clone().requires_grad_(True)
    ours = getattr(mk.torch, op)(x1, dim=1, mask=valid)
    theirs = getattr(torch.masked, op)(x2, dim=1, mask=valid)
    rows = valid.any(1)
    torch.testing.assert_close(ours[rows], theirs[rows])
    g = torch.randn(ours.shape, dtype=x.dtype)
    ours.backward(g)
    (theirs[rows] * g[rows]).sum().backward()
    assert not torch.isnan(x1.grad).any()
    finite = torch.isfinite(x2.grad)
    torch.testing.assert_close(x1.grad[finite & valid], x2.grad[finite & valid])
    assert (x1.grad[~valid] == 0).all()


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmin"])
def test_normalizations_never_nan(op):
    x, valid = batch()
    x1 = x.clone().requires_grad_(True)
    x2 = x.clone().requires_grad_(True)
    ours = getattr(mk.torch, op)(x1, 1, mask=valid)
    theirs = getattr(torch.masked, op)(x2, 1, mask=valid)
    torch.testing.assert_close(ours[valid], theirs[valid])
    g = torch.randn(x.shape, dtype=x.dtype)
    (ours * g * valid).sum().backward()
    (theirs * g * valid).sum().backward()
    assert not torch.isnan(x1.grad).any()
    assert (x1.grad[~valid] == 0).all()
    ok = torch.isfinite(x2.grad) & valid
    torch.testing.assert_close(x1.grad[ok], x2.grad[ok])


def test_var_std_no_nan_gradient_where_torch_masked_has_one():
    x, valid = batch()
    for op in ("var", "std"):
        x1 = x.clone().requires_grad_(True)
        x2 = x.clone().requires_grad_(True)
        getattr(mk.torch, op)(x1, 1, mask=valid).nan_to_num().sum().backward()
        getattr(torch.masked, op)(x2, 1, mask=valid).nan_to_num().sum().backward()
        # torch.masked's gradient is NaN over the fully masked row, even after nan_to_num
        assert torch.isnan(x2.grad[1]).all()
        assert (x1.grad[1] == 0).all()
        ok = torch.isfinite(x2.grad)
        torch.testing.assert_close(x1.grad[ok], x2.grad[ok])


def test_var_std_and_signature():
    x, valid = batch()
    for op in ("var", "std"):
        x1 = x.clone().requires_grad_(True)
        ours = getattr(mk.torch, op)(x1, 1, unbiased=False, mask=valid)
        theirs = getattr(torch.masked, op)(x, 1, unbiased=False, mask=valid)
        rows = valid.any(1)
        torch.testing.assert_close(ours[rows], theirs[rows])
        ours.sum().backward()
        assert not torch.isnan(x1.grad).any()
        # against torch autograd on the valid rows (the plain op on the valid values)
        r = 0
        xr = x[r, valid[r]].clone().requires_grad_(True)
        getattr(torch, op)(xr, unbiased=False).backward()
        torch.testing.assert_close(x1.grad[r, valid[r]], xr.grad)


def test_gradcheck_softmax():
    x, valid = batch((3, 5))
    valid[1, 2:] = True  # no fully masked row: its outputs are NaN fill values
    x = x.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: mk.torch.softmax(t, 1, mask=valid), (x,))
    assert torch.autograd.gradcheck(lambda t: mk.torch.var(t, 1, mask=valid), (x,))


def test_keepdim_dtype_and_no_grad_paths():
    x, valid = batch()
    y = mk.torch.sum(x, 1, keepdim=True, mask=valid)
    assert y.shape == (4, 1)
    h = x.to(torch.float16)
    s = mk.torch.sum(h, 1, dtype=torch.float32, mask=valid)
    assert s.dtype == torch.float32
    a = mk.torch.argmax(x, 1, mask=valid)
    assert a.dtype == torch.int64
    rows = valid.any(1)
    # torch.masked.argmax returns the input's float dtype; the engine's index is int64
    torch.testing.assert_close(a[rows], torch.masked.argmax(x, 1, mask=valid)[rows].to(torch.int64))


def test_the_training_example():
    import runpy

    ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
    ex = runpy.run_path(str(ROOT / "examples" / "python" / "train_masked_attention.py"))
    theirs = ex["run"](torch.masked)
    ours = ex["run"](mk.torch)
    assert theirs[-1] == 0.0  # torch.masked's NaN gradients reached the parameters
    assert ours[-1] == 1.0
    assert ours[0] == pytest.approx(theirs[0], rel=1e-12)  # the same forward loss
    assert all(b < a for a, b in zip(ours[:-2], ours[1:-1]))  # and it trains


def test_functions_bind_arguments_as_their_signature_says():
    x, valid = batch()
    f = mk.torch.softmax
    assert f.__name__ == "softmax" and f.__module__ == "masked.torch"
    assert list(inspect.signature(f).parameters) == list(inspect.signature(torch.masked.softmax).parameters)
    want = f(x, 1, mask=valid)
    # positional, keyword and defaulted arguments bind alike
    torch.testing.assert_close(f(input=x, dim=1, mask=valid), want, equal_nan=True)
    torch.testing.assert_close(f(x, mask=valid, dim=1), want, equal_nan=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'axis'"):
        f(x, axis=1)
    with pytest.raises(TypeError, match="multiple values for argument 'dim'"):
        f(x, 1, dim=1)
    with pytest.raises(TypeError, match="missing 2 required positional arguments: 'input' and 'dim'"):
        f()
    with pytest.raises(TypeError, match="positional argument"):
        f(x, 1, torch.float32, valid, 5)


def _openmp_backend() -> bool:
    return "parallel backend: OpenMP" in torch.__config__.parallel_info()


@pytest.mark.skipif(not _openmp_backend(), reason="torch's parallel backend is not OpenMP here")
def test_calls_run_on_torchs_own_threads():
    import masked.torch as mt

    assert mt._ON_TORCH_THREADS, "torch's OpenMP runtime was not found"
    k = torch.get_num_threads()
    # each task waits until k threads have run one: all of torch's team takes part, and
    # none of them is one of the engine's pool threads
    assert mt._on_team(mk._masked._probe_team, k, 30.0) == (k, False)
    # the team follows torch.set_num_threads
    torch.set_num_threads(1)
    try:
        assert mt._on_team(mk._masked._probe_team, 4, 0.2) == (1, False)
    finally:
        torch.set_num_threads(k)
    # outside mk.torch the engine's own pool (when it has helpers)
    if mk.get_num_threads() > 1:
        assert mk._masked._probe_team(2, 30.0) == (2, True)
    # switched off: mk.torch's calls on the engine's pool, with the same values
    x = torch.randn(64, 300, dtype=torch.float64)
    valid = torch.rand(64, 300) < 0.6

    def step():
        y = x.clone().requires_grad_(True)
        out = mk.torch.softmax(y, 1, mask=valid)
        (out * torch.arange(300.0, dtype=torch.float64)).sum().backward()
        return out.detach(), y.grad

    on = step()
    assert mt.use_torch_threads(False) is True
    try:
        if mk.get_num_threads() > 1:
            assert mt._on_team(mk._masked._probe_team, 2, 30.0) == (2, True)
        off = step()
    finally:
        assert mt.use_torch_threads(True) is False
    assert torch.equal(on[0], off[0]) and torch.equal(on[1], off[1])
