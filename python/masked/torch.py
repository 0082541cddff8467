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

Threads: these functions run the engine's parallel loops on torch's own intra-op
threads (its OpenMP team, `torch.get_num_threads()` of them), as torch's ops do, where
torch's parallel backend is OpenMP (Linux builds): after each of its ops torch's OpenMP
workers keep spinning for a while on the other cores, where loops on the engine's own
pool found those cores taken. `use_torch_threads(False)` puts them back on the engine's
pool (`mk.set_num_threads`); docs/python.md, "Threads".
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import os
import sys
from typing import Any, Callable, Optional

import numpy as np
import torch

from . import _masked, _ops
from ._api import vjp
from ._array import MaskedArray

__all__: list[str] = ["use_torch_threads"]


def _openmp_entry() -> tuple[int, int]:
    """The addresses of `GOMP_parallel` and `omp_get_max_threads` of the OpenMP runtime
    torch's kernels run on, or `(0, 0)`: torch's parallel backend is not OpenMP, the
    platform has no `/proc/self/maps`, or which loaded runtime is torch's is not clear."""
    if not sys.platform.startswith("linux") or "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return 0, 0
    found: set[str] = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(None, 5)[-1].strip() if line.count(" ") >= 5 else ""
                base = os.path.basename(path)
                if base.startswith(("libgomp", "libiomp5", "libomp")) and ".so" in base:
                    found.add(path)
    except OSError:
        return 0, 0
    if len(found) > 1:  # several runtimes: the one shipped with torch
        here = os.path.dirname(os.path.abspath(torch.__file__))
        found = {p for p in found if p.startswith(here + os.sep)}
    if len(found) != 1:
        return 0, 0
    try:
        lib = ctypes.CDLL(found.pop(), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        run = ctypes.cast(lib.GOMP_parallel, ctypes.c_void_p).value
        size = ctypes.cast(lib.omp_get_max_threads, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return 0, 0
    return (run, size) if run and size else (0, 0)


# registered once per process (the runtime stays loaded as long as torch is)
_ON_TORCH_THREADS = _masked._set_openmp(*_openmp_entry())


def use_torch_threads(on: bool) -> bool:
    """Whether `mk.torch`'s functions run the engine's parallel loops on torch's intra-op
    OpenMP threads (`True`, the default where torch's backend is OpenMP: they follow
    `torch.set_num_threads`) or on the engine's own pool (`False`: `mk.set_num_threads`).
    Returns whether they did before; where torch's runtime was not found, stays False."""
    global _ON_TORCH_THREADS
    before = _ON_TORCH_THREADS
    # (0, 0) registers nothing: the answer is whether the import registered torch's
    _ON_TORCH_THREADS = bool(on) and _masked._set_openmp(0, 0)
    return before


def _on_team(f: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """`f(*args, **kw)` with this thread's engine calls on torch's threads (if chosen)."""
    if not _ON_TORCH_THREADS:
        return f(*args, **kw)
    before = _masked._on_openmp(True)
    try:
        return f(*args, **kw)
    finally:
        _masked._on_openmp(before)


def _teamed(f: Callable[..., Any]) -> Callable[..., Any]:
    """`f` with its engine calls on torch's threads (`_on_team`): an autograd
    Function's `forward` and `backward`."""

    @functools.wraps(f)
    def run(*args: Any, **kw: Any) -> Any:
        return _on_team(f, *args, **kw)

    return run


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
    @_teamed
    def forward(ctx: Any, x: torch.Tensor, name: str, call: dict, grad: dict, mask: Any) -> torch.Tensor:  # type: ignore[override]
        a = _wrap_input(x, mask)
        out = getattr(_ops, name)(a, **call)
        # the output is kept for the backward (as torch keeps softmax's): the ops whose
        # gradient reads it do not run the forward again. A dtype= output (another
        # dtype than the gradient's) is not: the engine recomputes in the input's dtype
        keep = out if out.dtype == a.dtype else None
        ctx.saved = (a, name, grad, x.dtype, keep)
        return _to_tensor(out)

    @staticmethod
    @_teamed
    def backward(ctx: Any, g: torch.Tensor) -> Any:  # type: ignore[override]
        a, name, grad, dtype, out = ctx.saved
        # torch hands a reduction's upstream as an expanded (stride 0) view: the engine
        # fills its rows (torch's `contiguous` copy was 16 ms of a 4096^2 backward)
        gm = MaskedArray(g.detach().to(dtype))
        dx = vjp(name, a, gm, grad["dim"], keepdim=grad["keepdim"], saved=out, **grad["options"])
        return _to_tensor(dx), None, None, None, None


def _with_signature(name: str, sig: inspect.Signature, call: Callable[[dict], Any]) -> Callable[..., Any]:
    """A function `name` with the parameters of `sig` (their defaults included) whose
    body hands them to `call` as one dict: Python binds the arguments itself, with its
    own errors, where `sig.bind` took half of a small tensor's call (11 of 22 us)."""
    parts: list[str] = []
    for p in sig.parameters.values():
        if not p.name.isidentifier() or p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            raise TypeError(f"{name}: parameter {p.name!r} ({p.kind}) cannot be generated")
        if p.kind is p.KEYWORD_ONLY and "*" not in parts:
            parts.append("*")
        parts.append(p.name if p.default is p.empty else f"{p.name}=_defaults[{p.name!r}]")
    if not name.isidentifier():
        raise TypeError(f"{name!r} is not a function name")
    names = ", ".join(f"{n!r}: {n}" for n in sig.parameters)
    src = f"def {name}({', '.join(parts)}):\n    return _call({{{names}}})\n"
    scope = {
        "__name__": __name__,
        "_defaults": {n: p.default for n, p in sig.parameters.items()},
        "_call": call,
    }
    exec(src, scope)  # noqa: S102 (identifiers only, checked above)
    return scope[name]


def _make(name: str, kind: str, options: tuple[str, ...], differentiable: bool) -> Callable[..., torch.Tensor]:
    base = getattr(_ops, name)
    sig = inspect.signature(base)
    params = [p for p in sig.parameters.values() if p.name != "out"]
    sig = sig.replace(parameters=params)

    def call(kw: dict) -> torch.Tensor:
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
            # (the mask packed on torch's threads too)
            y = _to_tensor(_on_team(lambda: getattr(_ops, name)(_wrap_input(x, mask), **kw)))
        # torch.masked returns the input's dtype (or dtype=) for float outputs
        if y.is_floating_point() and x.is_floating_point() and y.dtype != x.dtype:
            y = y.to(x.dtype)
        return y

    fn = _with_signature(name, sig, call)
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


class _Attention(torch.autograd.Function):
    """Sparse attention with the engine's VJP as its backward (nothing but the inputs
    saved: the backward computes each row's probabilities again)."""

    @staticmethod
    @_teamed
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: Any, pattern: Any, scale: Any) -> torch.Tensor:  # type: ignore[override]
        ins = [_np_of(x) for x in (q, k, v)]
        b = None if bias is None else _np_of(bias).reshape(-1)
        bf = q.dtype == torch.bfloat16
        out = _masked.attention(*ins, pattern._plan, scale, b, bf)
        ctx.saved = (ins, b, pattern, scale, bf, q.dtype, bias is not None)
        return _tensor_of(out, q.dtype)

    @staticmethod
    @_teamed
    def backward(ctx: Any, g: torch.Tensor) -> Any:  # type: ignore[override]
        ins, b, pattern, scale, bf, dtype, has_bias = ctx.saved
        gn = _np_of(g.to(dtype).contiguous())
        dq, dk, dv, db = _masked.attention_vjp(*ins, pattern._plan, gn, scale, b, bf)
        dbias = _tensor_of(db, dtype) if has_bias and ctx.needs_input_grad[3] else None
        return _tensor_of(dq, dtype), _tensor_of(dk, dtype), _tensor_of(dv, dtype), dbias, None, None


def _np_of(x: torch.Tensor) -> np.ndarray:
    """A CPU tensor's memory as numpy (no copy where contiguous; bf16 as its uint16 bits)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"mk.torch.attention takes torch.Tensors, got {type(x).__name__}")
    x = x.detach()
    if x.device.type != "cpu":
        raise TypeError(f"mk.torch.attention runs on CPU tensors, got one on {x.device}")
    if x.dtype == torch.bfloat16:
        return x.contiguous().view(torch.int16).numpy().view(np.uint16)
    return x.numpy()


def _tensor_of(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pattern: Any,
    scale: Optional[float] = None,
    bias: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Sparse attention on CPU tensors, differentiable by autograd: `softmax(scale * q @
    k.transpose(-1, -2) + bias) @ v` over the valid pairs of `pattern` (a
    `mk.AttentionPattern`), the replacement of `F.scaled_dot_product_attention(q, k, v,
    attn_mask=mask)` for a sparse `mask`. q `[..., n, d]`, k `[..., m, d]`, v `[..., m,
    dv]`; float32, float64, float16, bfloat16. `bias`: one value per valid pair, in
    pattern order. A query with no valid key gives zeros (SDPA gives NaN)."""
    return _Attention.apply(q, k, v, bias, pattern, scale)


__all__.append("attention")


class _Spmm(torch.autograd.Function):
    @staticmethod
    @_teamed
    def forward(ctx: Any, values: torch.Tensor, x: torch.Tensor, pattern: Any) -> torch.Tensor:  # type: ignore[override]
        w, xn = _np_of(values), _np_of(x)
        bf = x.dtype == torch.bfloat16
        ctx.saved = (w, xn, pattern, bf, x.dtype)
        return _tensor_of(_masked.spmm(w, pattern._plan, xn, bf), x.dtype)

    @staticmethod
    @_teamed
    def backward(ctx: Any, g: torch.Tensor) -> Any:  # type: ignore[override]
        w, xn, pattern, bf, dtype = ctx.saved
        dw, dx = _masked.spmm_vjp(w, pattern._plan, xn, _np_of(g.to(dtype).contiguous()), bf)
        return _tensor_of(dw, dtype), _tensor_of(dx, dtype), None


class _Sddmm(torch.autograd.Function):
    @staticmethod
    @_teamed
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, pattern: Any, scale: float) -> torch.Tensor:  # type: ignore[override]
        an, bn = _np_of(a), _np_of(b)
        bf = a.dtype == torch.bfloat16
        ctx.saved = (an, bn, pattern, scale, bf, a.dtype)
        return _tensor_of(_masked.sddmm(an, bn, pattern._plan, scale, bf), a.dtype)

    @staticmethod
    @_teamed
    def backward(ctx: Any, g: torch.Tensor) -> Any:  # type: ignore[override]
        an, bn, pattern, scale, bf, dtype = ctx.saved
        da, db = _masked.sddmm_vjp(an, bn, pattern._plan, scale, _np_of(g.to(dtype).contiguous()), bf)
        return _tensor_of(da, dtype), _tensor_of(db, dtype), None, None


def spmm(values: torch.Tensor, pattern: Any, x: torch.Tensor) -> torch.Tensor:
    """`P @ x` for `P` the `mk.AttentionPattern` with `values` (`[nnz]` or `[..., nnz]`)
    and x `[..., m, dv]`, differentiable in both (message passing: a graph's weighted
    adjacency times node features)."""
    return _Spmm.apply(values, x, pattern)


def sddmm(a: torch.Tensor, b: torch.Tensor, pattern: Any, scale: float = 1.0) -> torch.Tensor:
    """`scale * a @ b.transpose(-1, -2)` at the pattern's pairs only (`[..., nnz]`),
    differentiable in both."""
    return _Sddmm.apply(a, b, pattern, float(scale))


_SEG_DT = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16"}


class _Segment(torch.autograd.Function):
    """A CSR row reduction or softmax of per-pair values, with the engine's VJP."""

    @staticmethod
    @_teamed
    def forward(ctx: Any, values: torch.Tensor, pattern: Any, op: str) -> torch.Tensor:  # type: ignore[override]
        if values.dtype not in _SEG_DT:
            raise TypeError(f"segment values must be float32, float64 or float16, got {values.dtype}")
        v = _np_of(values)
        rows = v.reshape(-1, v.shape[-1]) if v.ndim > 1 else v[None]
        from .attention import _edge_handle

        hs = [_edge_handle(r, pattern) for r in rows]
        outs = []
        for h in hs:
            y = h.apply(op, [1])
            outs.append(y.data() if op == "softmax" else y.filled(0).data())
        ctx.saved = (hs, pattern, op, v.shape, values.dtype)
        out = np.stack(outs)
        return torch.from_numpy(out.reshape(v.shape[:-1] + out.shape[1:]))

    @staticmethod
    @_teamed
    def backward(ctx: Any, g: torch.Tensor) -> Any:  # type: ignore[override]
        hs, pattern, op, shape, dtype = ctx.saved
        gn = _np_of(g.to(dtype).contiguous())
        gn = gn.reshape(len(hs), -1)
        dt = _SEG_DT[dtype]
        n = pattern.shape[0]
        counts = np.diff(pattern.indptr)
        dx = []
        for h, gr in zip(hs, gn):
            if op == "softmax":
                gh = _masked.Handle.csr(pattern.shape, pattern.indptr, pattern.indices, np.ascontiguousarray(gr), dt, "pattern")
            else:
                # the forward output is valid at the rows with a pair: the gradient there
                rows = np.flatnonzero(counts > 0)
                gh = _masked.Handle.coo([n], rows[None].astype(np.int64), np.ascontiguousarray(gr[rows]), dt, "pattern")
            dx.append(h.vjp(op, gh, [1]).data())
        return torch.from_numpy(np.stack(dx).reshape(shape)), None, None


def segment_softmax(values: torch.Tensor, pattern: Any) -> torch.Tensor:
    """The softmax of each query's (node's) pair values (`[..., nnz]`, pattern order) over
    its pairs, differentiable: GAT's attention coefficients over a node's incoming edges."""
    return _Segment.apply(values, pattern, "softmax")


def segment_sum(values: torch.Tensor, pattern: Any) -> torch.Tensor:
    """The sum of each query's (node's) pair values: `[..., n]`, 0 for none; differentiable."""
    return _Segment.apply(values, pattern, "sum")


def segment_mean(values: torch.Tensor, pattern: Any) -> torch.Tensor:
    """The mean of each query's (node's) pair values: `[..., n]`, 0 for none; differentiable."""
    return _Segment.apply(values, pattern, "mean")


def segment_amax(values: torch.Tensor, pattern: Any) -> torch.Tensor:
    """The largest of each query's (node's) pair values: `[..., n]`, 0 for none;
    differentiable (the engine's amax VJP)."""
    return _Segment.apply(values, pattern, "amax")


__all__ += ["spmm", "sddmm", "segment_softmax", "segment_sum", "segment_mean", "segment_amax"]
