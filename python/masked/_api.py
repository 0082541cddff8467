"""The helpers every generated op function calls, `mk.vjp`, `mk.where`, `mk.compress`."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ._array import MaskedArray, MaskedError, _bool_array, as_masked
from ._masked import Handle
from ._masked import ops as _masked_ops

__all__ = ["vjp", "where", "compress"]


def _dims(dim: Any) -> Optional[list[int]]:
    if dim is None:
        return None
    if isinstance(dim, (int, np.integer)):
        return [int(dim)]
    return [int(d) for d in dim]


def _correction(unbiased: Optional[bool], correction: Optional[float]) -> Optional[float]:
    if unbiased is not None and correction is not None:
        raise ValueError("give unbiased= or correction=, not both")
    if unbiased is not None:
        return 1.0 if unbiased else 0.0
    return correction


def _into(res: MaskedArray, out: Optional[MaskedArray]) -> MaskedArray:
    """Writes `res` into the caller's `out` (same shape and dtype, dense): its data
    buffer keeps its identity, and a full-shape valid buffer it was made with is
    updated too."""
    if out is None:
        return res
    if res.layout != "dense":
        if isinstance(out, MaskedArray) and out.layout == "csr" and not out.data.flags.writeable:
            raise MaskedError("out= has a read-only data buffer")
        raise TypeError(
            "out= of a sparse result takes a CSR array of the input's structure, not "
            'overlapping it (mask="pattern"; an elementwise op or normalization of a CSR input)'
        )
    if not isinstance(out, MaskedArray) or out.layout != "dense":
        raise TypeError("out= takes a dense MaskedArray")
    if out.shape != res.shape or out.dtype != res.dtype:
        raise MaskedError(
            f"out= has shape {out.shape} and dtype {out.dtype}; the result has {res.shape} and {res.dtype}"
        )
    dst = out.data
    if not dst.flags.writeable:
        raise MaskedError("out= has a read-only data buffer")
    np.copyto(dst, res.data)
    if out._valid_buf is not None:
        res._h.valid_into(out._valid_buf)
        out._h = Handle.dense(dst, out._h.dtype, out._valid_buf, False)
    else:
        out._h = Handle.dense(dst, out._h.dtype, res._h.valid(), False)
    return out


def _reduce(op: str, input: Any, dim: Any, keepdim: bool, dtype: Any, mask: Any, options: dict) -> MaskedArray:
    return as_masked(input, mask)._apply(op, _dims(dim), keepdim, options, dtype)


def _normalize(op: str, input: Any, dim: Any, dtype: Any, mask: Any, out: Any, options: dict) -> MaskedArray:
    if dim is None:
        raise MaskedError(f"{op} is a normalization along one dim: give dim=")
    if not isinstance(dim, (int, np.integer)):
        raise TypeError(f"{op} takes one dim (an int), got {dim!r}")
    a = as_masked(input, mask)
    if dtype is None and _writes_into(a, out):
        return _write_into(a, op, [int(dim)], options, out)
    return _into(a._apply(op, [int(dim)], False, options, dtype), out)


def _unary(op: str, input: Any, mask: Any, out: Any, options: dict) -> MaskedArray:
    a = as_masked(input, mask)
    if _writes_into(a, out):
        return _write_into(a, op, None, options, out)
    return _into(a._apply(op, None, False, options, None), out)


def _writes_into(a: MaskedArray, out: Any) -> bool:
    """Whether the engine can write `a`'s map straight into `out`'s buffer: dense, one
    shape, C-contiguous and writable, not overlapping the input (else `_into` copies);
    or both CSR, `out` a writable data buffer (the engine checks that `out` has the
    input's structure)."""
    if not isinstance(out, MaskedArray) or out.layout != a.layout or a.layout == "coo":
        return False
    d = out.data
    if not d.flags.writeable or np.shares_memory(d, a.data):
        return False
    return a.layout == "csr" or (out.shape == a.shape and d.flags.c_contiguous)


def _write_into(a: MaskedArray, op: str, dims: Optional[list[int]], options: dict, out: MaskedArray) -> MaskedArray:
    """The op's values written by the engine into `out`'s data buffer (no copy); `out`'s
    mask becomes the result's (a full-shape valid buffer it was made with is updated)."""
    opts = [(k, _opt_text(v)) for k, v in options.items() if v is not None]
    h = a._h.apply_into(op, out._h, dims, False, opts)
    if out._valid_buf is not None:
        h.valid_into(out._valid_buf)
    out._h = h
    return out


def _pow(input: Any, exponent: Any, mask: Any, out: Any) -> MaskedArray:
    a = as_masked(input, mask)
    if isinstance(exponent, (int, float, np.integer, np.floating)) and np.ndim(exponent) == 0:
        return _into(a._apply("pow", None, False, {"exponent": float(exponent)}, None), out)
    return _into(a._binary(exponent, "pow"), out)


def _binary(op: str, input: Any, other: Any, rule: str, mask: Any, out: Any) -> MaskedArray:
    if isinstance(input, (int, float, bool)) and not isinstance(other, (int, float, bool)):
        return _into(as_masked(other)._binary(input, op, rule, swapped=True), out)
    return _into(as_masked(input, mask)._binary(other, op, rule), out)


def vjp(
    op: str,
    input: Any,
    grad: Any,
    dim: Any = None,
    *,
    keepdim: bool = False,
    mask: Any = None,
    saved: Optional[MaskedArray] = None,
    **options: Any,
) -> MaskedArray:
    """The gradient of `op` (a registry name) at `input` with respect to its values, given
    the upstream gradient `grad` shaped as the op's output: a dense input takes a dense
    `grad` of the forward output's shape (an array or a MaskedArray; its mask is not
    read) and gives a dense gradient of the input's shape; a sparse input takes a sparse
    `grad` stored at exactly the forward output's valid positions (as the forward op
    returns them) and gives a gradient stored at the input's valid positions. Never NaN
    from masked-out positions or fully masked lanes (semantics.md, "Gradients").

    `saved`: the forward output of the same call, when the caller kept it (an autograd
    function's forward does): the ops whose gradient reads their output (softmax and
    its family, logsumexp, norm, ...) then do not run the forward pass again. It must be
    that output (its shape and count are checked, not its values).

    A binary op (`mul`, `div`, `atan2`, ...) takes `input=(a, b)` and returns both
    gradients `(da, db)`, each of its operand's shape (broadcast dims summed back);
    `rule="strict"` or `"and"` as the forward call's. Dense operands."""
    if isinstance(input, tuple):
        if len(input) != 2:
            raise TypeError("a binary op's vjp takes input=(a, b)")
        rule = options.pop("rule", "strict")
        if options or dim is not None:
            raise TypeError(f"a binary op's vjp takes no dim or options, got {sorted(options)}")
        x, y = (as_masked(v) for v in input)
        g = grad if isinstance(grad, MaskedArray) else MaskedArray(grad)
        if x.dtype != y.dtype:
            raise MaskedError(f"the operands' dtypes differ ({x.dtype}, {y.dtype}): cast one with astype")
        dx, dy = x._h.vjp_binary(y._h, op, g._h, rule)
        return MaskedArray._wrap(dx), MaskedArray._wrap(dy)
    a = as_masked(input, mask)
    if isinstance(grad, MaskedArray):
        g = grad
    else:
        g = MaskedArray(grad)
    dims = _dims(dim)
    if op in _NORMALIZE and dims is None:
        raise MaskedError(f"{op} is a normalization along one dim: give dim=")
    opts = [(k, _opt_text(v)) for k, v in options.items() if v is not None]
    y = None if saved is None else saved._h
    return MaskedArray._wrap(a._h.vjp(op, g._h, dims, keepdim, opts, y))


def _opt_text(v: Any) -> str:
    return repr(v) if isinstance(v, float) else str(v)


_NORMALIZE = {name for name, kind, *_ in _masked_ops() if kind == "normalize"}


def where(cond: Any, input: Any, other: Any) -> MaskedArray:
    """`input`'s value and validity where `cond` is True, `other`'s elsewhere (`cond`
    broadcasts; both operands of one layout and dtype: Python scalars and plain arrays
    are wrapped as valid)."""
    c = _bool_array(cond, "cond")
    a = input if isinstance(input, MaskedArray) else None
    b = other if isinstance(other, MaskedArray) else None
    if a is None and b is None:
        raise TypeError("where takes at least one MaskedArray")
    like = a if a is not None else b
    assert like is not None

    def wrap(x: Any) -> MaskedArray:
        if isinstance(x, MaskedArray):
            return x
        arr = np.broadcast_to(np.asarray(x, dtype=like.data.dtype), like.shape)
        return MaskedArray(np.ascontiguousarray(arr))

    return MaskedArray._wrap(wrap(input)._h.select(c, wrap(other)._h))


def compress(input: Any, mask: Any = None) -> np.ndarray:
    """The valid values of `input`, 1-D in row-major order (`mask` torch's, for plain
    inputs)."""
    return as_masked(input, mask).compressed()

