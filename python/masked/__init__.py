"""masked: masked reductions, normalizations and algebra, sparse-first, on numpy,
scipy.sparse and torch buffers without copying them.

    import masked as mk
    import numpy as np

    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
    valid = np.array([[True, True, False], [False, True, True]])
    mk.sum(x, 1, mask=valid).compressed()     # torch.masked's convention: True = valid
    a = mk.MaskedArray(x, valid)               # no copy of x
    a.softmax(1).filled(0)

Two mask conventions, never confused: the module functions take torch.masked's
`mask=` (True = valid); `MaskedArray(data, valid=...)` says `valid=` and
`MaskedArray(data, mask=...)` is numpy.ma's (True = masked out). See docs/python.md.
"""

from __future__ import annotations

from typing import Any

from . import _masked
from ._api import compress, vjp, where
from .attention import (
    AttentionPattern,
    attention,
    attention_vjp,
    sddmm,
    segment_amax,
    segment_mean,
    segment_softmax,
    segment_sum,
    spmm,
)
from ._array import MaskedArray, MaskedError, as_masked, coo, csr, from_numpy_ma
from ._ops import *  # noqa: F401,F403  (every op of the registry)
from ._ops import __all__ as _op_names

__version__ = "0.1.0"

__all__ = [
    "AttentionPattern",
    "MaskedArray",
    "attention",
    "attention_vjp",
    "sddmm",
    "segment_amax",
    "segment_mean",
    "segment_softmax",
    "segment_sum",
    "spmm",
    "MaskedError",
    "as_masked",
    "compress",
    "dask",
    "coo",
    "csr",
    "from_numpy_ma",
    "get_num_threads",
    "ops",
    "set_num_threads",
    "shared",
    "torch",
    "vjp",
    "where",
    *_op_names,
]


def ops() -> list[tuple[str, str, tuple[str, ...], bool, str]]:
    """The engine's registry: `(name, kind, options, differentiable, summary)` per op,
    kind one of reduce, reduce_one, normalize, unary, binary."""
    return [(n, k, tuple(o), d, s) for n, k, o, d, s in _masked.ops()]


def set_num_threads(n: int) -> None:
    """Sets how many threads each engine call runs on from now on, for the whole process
    (as `torch.set_num_threads`): `1` puts every call on one core, so that `k` Python
    threads (a server's, a data loader's) compute on `k` cores side by side; `0` restores
    the default (`RAYON_NUM_THREADS` threads, else one per core). Calls already running
    keep theirs. `ValueError` for a negative count."""
    _masked.set_num_threads(int(n))


def get_num_threads() -> int:
    """How many threads an engine call runs on (see `set_num_threads`)."""
    return _masked.get_num_threads()


def __getattr__(name: str) -> Any:
    # mk.torch, mk.dask and mk.shared import their optional dependencies on first use
    if name in ("torch", "shared", "dask"):
        import importlib

        return importlib.import_module(f"masked.{name}")
    raise AttributeError(f"module 'masked' has no attribute {name!r}")
