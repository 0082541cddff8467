"""Every op of the engine's registry is a module function and a method; the generated
files are up to date."""

import inspect
import pathlib
import subprocess
import sys

import numpy as np

import masked as mk

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_op_is_a_function_and_a_method():
    names = [o[0] for o in mk.ops()]
    assert len(names) > 90
    for name in names:
        fn = getattr(mk, name)
        assert fn.__doc__, name
        assert "input" in inspect.signature(fn).parameters
        assert callable(getattr(mk.MaskedArray, name)), name


def test_torch_masked_signatures():
    sig = lambda f: list(inspect.signature(f).parameters)  # noqa: E731
    assert sig(mk.sum) == ["input", "dim", "keepdim", "dtype", "mask"]
    assert sig(mk.var) == ["input", "dim", "unbiased", "correction", "keepdim", "dtype", "mask"]
    assert sig(mk.norm) == ["input", "ord", "dim", "keepdim", "dtype", "mask"]
    assert sig(mk.softmax) == ["input", "dim", "dtype", "mask", "out"]
    assert sig(mk.normalize)[:3] == ["input", "ord", "dim"]
    assert sig(mk.median)[:2] == ["input", "dim"]
    assert inspect.signature(mk.median).parameters["dim"].default == -1


def test_every_unary_op_runs_and_keeps_the_mask():
    x = np.array([[0.25, 0.5], [0.75, 0.125]])
    valid = np.array([[True, False], [True, True]])
    for name, kind, options, *_ in mk.ops():
        if kind != "unary" or name in ("pow",):
            continue
        kw = {"min": 0.3} if name == "clamp" else {}
        r = getattr(mk, name)(x, **kw, mask=valid)
        assert r.valid.tolist() == valid.tolist(), name
        assert r.shape == (2, 2)


def test_every_reduction_runs_on_every_layout():
    import scipy.sparse as sp

    x = np.array([[1.0, 0.0, 3.0], [0.0, 5.0, 6.0]])
    A = sp.csr_array(x)
    for name, kind, *_ in mk.ops():
        if kind not in ("reduce", "reduce_one"):
            continue
        d = getattr(mk, name)(x, 1, mask=x != 0)
        c = getattr(mk, name)(A, 1, mask=A)
        o = getattr(mk, name)(mk.coo(sp.coo_array(x)), 1)
        assert np.allclose(d.compressed(), c.compressed(), equal_nan=True), name
        assert np.allclose(d.compressed(), o.compressed(), equal_nan=True), name


def test_generated_files_are_current():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_python_ops.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
