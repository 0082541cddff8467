"""`mk.torch`: drop-in replacements of torch.masked's functions whose backward runs the
engine's VJPs.

    import torch, masked as mk
    y = mk.torch.softmax(scores, -1, mask=valid)     # as torch.masked.softmax
    loss = mk.torch.var(x, 1, mask=valid).sum()        # as torch.masked.var
    loss.backward()                                    # never NaN from masked positions

Each function takes torch.masked's signature (`mask=` True = valid, a bool tensor
broadcastable to the input, None = all valid) and returns a plain `torch.Tensor` (CPU).
The input is handed to the engine without a copy (a detached view); the output tensor
owns the engine's buffer. Forward values equal torch.masked's wherever an output has a
valid input; elsewhere they are the engine's fill values (docs/semantics.md). Gradients
equal torch's autograd wherever torch's are finite and are never NaN from masked-out
positions or fully masked lanes.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np
import torch

from . import _masked, _ops
from ._api import vjp
from ._array import MaskedArray

__all__: list[str] = []


def _to_tensor(a: MaskedArray) -> torch.Tensor:
    d = a.data
    if a.dtype == "bfloat16":
        return torch.from_numpy(d.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(d)


def _wrap_input(x: torch.Tensor, mask: Any) -> MaskedArray:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"mk.torch functions take a torch.Tensor, got {type(x).__name__}")
    m = None
    if mask is not None:
        m = mask.detach().cpu().numpy() if isinstance(mask, torch.Tensor) else np.asarray(mask)
        if m.dtype != np.bool_:
            raise TypeError(f"mask must be a bool tensor, got {m.dtype}")
    return MaskedArray(x.detach(), valid=m)


class _EngineOp(torch.autograd.Function):
    """One engine op with the engine's VJP as its backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, name: str, call: dict, grad: dict, mask: Any) -> torch.Tensor:  # type: ignore[override]
        a = _wrap_input(x, mask)
        out = getattr(_ops, name)(a, **call)
        ctx.saved = (a, name, grad, x.dtype)
        return _to_tensor(out)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:  # type: ignore[override]
        a, name, grad, dtype = ctx.saved
        # torch hands a reduction's upstream as an expanded (stride 0) view: one
        # contiguous copy here is cheaper than a strided walk in the engine
        gm = MaskedArray(g.detach().to(dtype).contiguous())
        dx = vjp(name, a, gm, grad["dim"], keepdim=grad["keepdim"], **grad["options"])
        return _to_tensor(dx), None, None, None, None


def _make(name: str, kind: str, options: tuple[str, ...], differentiable: bool) -> Callable[..., torch.Tensor]:
    base = getattr(_ops, name)
    sig = inspect.signature(base)
    params = [p for p in sig.parameters.values() if p.name != "out"]
    sig = sig.replace(parameters=params)

    def fn(*args: Any, **kwargs: Any) -> torch.Tensor:
        b = sig.bind(*args, **kwargs)
        b.apply_defaults()
        kw = dict(b.arguments)
        x = kw.pop("input")
        mask = kw.pop("mask")
        dtype = kw.pop("dtype", None)
        if dtype is not None and x.dtype != dtype:
            x = x.to(dtype)  # torch's dtype=: the cast is differentiable by torch
        dim = kw.get("dim")
        opts = {o: kw[o] for o in options if o in kw and kw[o] is not None}
        if "unbiased" in kw:
            u, c = kw.pop("unbiased"), kw.get("correction")
            if u is not None:
                if c is not None:
                    raise ValueError("give unbiased= or correction=, not both")
                kw["correction"] = 1.0 if u else 0.0
            if kw.get("correction") is not None:
                opts["correction"] = kw["correction"]
        grad = {
            "dim": None if dim is None else ([dim] if isinstance(dim, int) else list(dim)),
            "keepdim": kw.get("keepdim", False),
            "options": opts,
        }
        if differentiable and x.is_floating_point() and torch.is_grad_enabled() and x.requires_grad:
            y = _EngineOp.apply(x, name, kw, grad, mask)
        else:
            y = _to_tensor(getattr(_ops, name)(_wrap_input(x, mask), **kw))
        # torch.masked returns the input's dtype (or dtype=) for float outputs
        if y.is_floating_point() and x.is_floating_point() and y.dtype != x.dtype:
            y = y.to(x.dtype)
        return y

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__signature__ = sig  # type: ignore[attr-defined]
    fn.__doc__ = (
        f"torch.masked-style `{name}`: a plain tensor out, differentiable through the "
        f"engine's VJP.\n\n{(base.__doc__ or '').strip()}"
    )
    return fn


for _name, _kind, _options, _diff, _summary in _masked.ops():
    if _kind in ("reduce", "reduce_one", "normalize"):
        globals()[_name] = _make(_name, _kind, tuple(_options), _diff)
        __all__.append(_name)
del _name, _kind, _options, _diff, _summary
