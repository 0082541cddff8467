"""Sparse attention: `softmax(scale * q @ k.T + bias) @ v` at a pattern's (query, key)
pairs only, in O(nnz + n*d) memory, with its gradients.

    import numpy as np, masked as mk
    p = mk.AttentionPattern.band(1024, 128)          # a sliding window of 128 keys
    q, k, v = (np.random.randn(8, 1024, 64).astype(np.float32) for _ in range(3))
    o = mk.attention(q, k, v, p)                      # [8, 1024, 64]
    dq, dk, dv, _ = mk.attention_vjp(q, k, v, p, grad=np.ones_like(o))

Operands are `[..., n, d]` arrays (leading batch and head dims broadcast as numpy's);
float32, float64, float16 (computed in float32). A query with no valid key gives a zero
row, never NaN. Torch users: `mk.torch.attention` is differentiable by autograd.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from . import _masked

__all__ = [
    "AttentionPattern",
    "attention",
    "attention_vjp",
    "sddmm",
    "spmm",
    "segment_amax",
    "segment_mean",
    "segment_softmax",
    "segment_sum",
]


class AttentionPattern:
    """Which keys each query sees: an `(n, m)` sparse pattern, validated once. Reuse one
    across calls (the gradient's transpose, where it needs one, is built on first use
    and kept).

    Build from CSR arrays, a bool mask, a scipy.sparse matrix, or by name:
    `causal(n)`, `band(n, window)`, `random(n, p, seed)`, `lengths(n, length)`.
    """

    __slots__ = ("_plan",)

    def __init__(self, indptr: Any, indices: Any, shape: tuple[int, int]) -> None:
        self._plan = _masked.AttentionPlan(
            (int(shape[0]), int(shape[1])),
            np.ascontiguousarray(indptr, dtype=np.int64),
            np.ascontiguousarray(indices, dtype=np.int64),
        )

    @classmethod
    def _of(cls, plan: Any) -> "AttentionPattern":
        p = cls.__new__(cls)
        p._plan = plan
        return p

    @classmethod
    def causal(cls, n: int) -> "AttentionPattern":
        """Each query sees itself and every key before it."""
        return cls._of(_masked.AttentionPlan.generate("causal", n, n))

    @classmethod
    def band(cls, n: int, window: int) -> "AttentionPattern":
        """Each query sees itself and the `window - 1` keys before it."""
        return cls._of(_masked.AttentionPlan.generate(f"band:{int(window)}", n, n))

    @classmethod
    def random(cls, n: int, p: float, seed: int = 0) -> "AttentionPattern":
        """Each pair valid with probability `p`, plus the diagonal."""
        return cls._of(_masked.AttentionPlan.generate(f"random:{float(p)!r}", n, n, seed))

    @classmethod
    def lengths(cls, n: int, length: int) -> "AttentionPattern":
        """Padding: the first `length` queries see the first `length` keys."""
        return cls._of(_masked.AttentionPlan.generate(f"lengths:{int(length)}", n, n))

    @classmethod
    def from_mask(cls, valid: Any) -> "AttentionPattern":
        """From a 2-D bool array, True = the query (row) sees the key (column)."""
        m = np.asarray(valid)
        if m.dtype != np.bool_ or m.ndim != 2:
            raise TypeError(f"from_mask takes a 2-D bool array, got {m.dtype} of {m.ndim} dims")
        indptr = np.concatenate([[0], np.cumsum(m.sum(axis=1))])
        return cls(indptr, np.nonzero(m)[1], m.shape)

    @classmethod
    def from_scipy(cls, a: Any) -> "AttentionPattern":
        """The stored positions of a scipy.sparse matrix (values ignored)."""
        c = a.tocsr()
        c.sort_indices()
        return cls(c.indptr, c.indices, c.shape)

    @property
    def shape(self) -> tuple[int, int]:
        """`(queries, keys)`."""
        return tuple(self._plan.shape)  # type: ignore[return-value]

    @property
    def nnz(self) -> int:
        """The number of valid pairs."""
        return int(self._plan.nnz)

    @property
    def indptr(self) -> np.ndarray:
        """The CSR row pointer."""
        return self._plan.indptr()

    @property
    def indices(self) -> np.ndarray:
        """The key of every pair, query by query."""
        return self._plan.indices()

    def __repr__(self) -> str:
        return f"AttentionPattern(shape={self.shape}, nnz={self.nnz})"


def _prep(x: Any, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind != "f":
        raise TypeError(f"{name} must be a float32, float64 or float16 array, got {a.dtype}")
    return a


def attention(
    q: Any,
    k: Any,
    v: Any,
    pattern: AttentionPattern,
    *,
    scale: Optional[float] = None,
    bias: Any = None,
) -> np.ndarray:
    """`softmax(scale * q @ k.T + bias) @ v` over each query's valid keys.

    q `[..., n, d]`, k `[..., m, d]`, v `[..., m, dv]` (one dtype); `scale` defaults to
    `1/sqrt(d)`; `bias` holds one value per valid pair, in `pattern` order (query by
    query). Returns `[..., n, dv]`, zero rows for queries with no valid key.
    """
    q, k, v = (_prep(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    b = None if bias is None else np.asarray(bias, dtype=q.dtype).reshape(-1)
    return _masked.attention(q, k, v, pattern._plan, scale, b)


def attention_vjp(
    q: Any,
    k: Any,
    v: Any,
    pattern: AttentionPattern,
    grad: Any,
    *,
    scale: Optional[float] = None,
    bias: Any = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """The gradients of `sum(attention(q, k, v, pattern) * grad)`: `(dq, dk, dv,
    dbias)`, each shaped as its input (summed over broadcast dims); `dbias` is None
    without a bias. Nothing is saved from a forward pass: each row's probabilities are
    computed again."""
    q, k, v, g = (_prep(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v"), (grad, "grad")))
    b = None if bias is None else np.asarray(bias, dtype=q.dtype).reshape(-1)
    return _masked.attention_vjp(q, k, v, pattern._plan, g, scale, b)


def sddmm(a: Any, b: Any, pattern: AttentionPattern, scale: float = 1.0) -> np.ndarray:
    """`scale * (a @ b.T)` at the pattern's pairs only: a `[..., n, d]`, b `[..., m, d]`;
    returns `[..., nnz]`, the values in pattern order (query by query)."""
    return _masked.sddmm(_prep(a, "a"), _prep(b, "b"), pattern._plan, float(scale))


def spmm(values: Any, pattern: AttentionPattern, x: Any) -> np.ndarray:
    """`P @ x` for `P` the pattern with `values` (`[nnz]`, or `[..., nnz]` per batch
    element) and x `[..., m, dv]`: message passing, a graph's weighted adjacency times node
    features. Returns `[..., n, dv]`."""
    return _masked.spmm(_prep(values, "values"), pattern._plan, _prep(x, "x"))


# Segment reductions: each query's (node's) stored pairs (incoming edges) form a segment;
# these are the engine's CSR row reductions (the registry's sum, mean, amax, softmax over
# dim 1, with their VJPs) on the pattern holding the per-pair values.

_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.float16): "f16"}


def _edge_handle(values: np.ndarray, pattern: AttentionPattern) -> Any:
    v = np.ascontiguousarray(values)
    if v.ndim != 1 or v.shape[0] != pattern.nnz:
        raise _masked.MaskedError(f"{v.shape} values for a pattern of {pattern.nnz} pairs: one per pair, 1-D")
    dt = _DTYPES.get(v.dtype)
    if dt is None:
        raise TypeError(f"segment values must be float32, float64 or float16, got {v.dtype}")
    return _masked.Handle.csr(pattern.shape, pattern.indptr, pattern.indices, v, dt, "pattern")


def _per_row(values: Any, pattern: AttentionPattern, f: Any) -> np.ndarray:
    """`f` on each 1-D slice of `values` `[..., nnz]`, stacked."""
    v = _prep(values, "values")
    flat = v.reshape(-1, v.shape[-1]) if v.ndim > 1 else v[None]
    out = np.stack([f(_edge_handle(r, pattern)) for r in flat])
    return out.reshape(v.shape[:-1] + out.shape[1:])


def _segment(op: str) -> Any:
    def fn(values: Any, pattern: AttentionPattern) -> np.ndarray:
        return _per_row(values, pattern, lambda h: h.apply(op, [1]).filled(0).data())

    fn.__name__ = f"segment_{op}"
    fn.__qualname__ = fn.__name__
    fn.__doc__ = (
        f"The {op} of each query's (node's) pair values (`[..., nnz]` in pattern order): "
        f"`[..., n]`, 0 for a query with no pair. The CSR layout's row {op}."
    )
    return fn


segment_sum = _segment("sum")
segment_mean = _segment("mean")
segment_amax = _segment("amax")


def segment_softmax(values: Any, pattern: AttentionPattern) -> np.ndarray:
    """The softmax of each query's (node's) pair values over its pairs (GAT's attention
    coefficients over a node's incoming edges): `[..., nnz]`, in pattern order."""
    return _per_row(values, pattern, lambda h: h.apply("softmax", [1]).data())
