"""Masked arrays in `multiprocessing.shared_memory`, as torch's `share_memory_()` offers:
one process writes (for example a normalization with `out=`), another reads the same
buffer without a copy.

    # parent
    shm_x, x = mk.shared.empty((4, 8), "float32")         # data and validity shared
    ...fill x.data, x.valid_buffer...
    # worker (another process): attach by name, compute into the shared output
    x = mk.shared.attach(shm_x.name, (4, 8), "float32")
    mk.softmax(x, 1, out=y)

Each array is one shared block: the values, then one byte of validity per element.
Close every handle (`shm.close()`) in every process and `shm.unlink()` once in the owner.
"""

from __future__ import annotations

from multiprocessing import shared_memory
from typing import Any, Optional, Sequence

import numpy as np

from ._array import MaskedArray

__all__ = ["empty", "attach", "refresh", "valid_buffer"]


def _layout(shape: Sequence[int], dtype: Any) -> tuple[np.dtype, int, int]:
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    vals = n * dt.itemsize
    # validity after the values, aligned to 64 bytes
    off = (vals + 63) // 64 * 64
    return dt, off, off + max(n, 1)


def _view(shm: shared_memory.SharedMemory, shape: Sequence[int], dtype: Any) -> MaskedArray:
    dt, off, _ = _layout(shape, dtype)
    n = int(np.prod(shape, dtype=np.int64))
    data = np.ndarray(tuple(shape), dtype=dt, buffer=shm.buf, offset=0)
    valid = np.ndarray(tuple(shape), dtype=np.bool_, buffer=shm.buf, offset=off)
    del n
    a = MaskedArray(data, valid=valid)
    a._keep = shm  # the block lives as long as the array
    return a


def empty(shape: Sequence[int], dtype: Any = "float32", name: Optional[str] = None) -> tuple[shared_memory.SharedMemory, MaskedArray]:
    """A new shared block holding a dense `MaskedArray` of `shape` and `dtype` (values
    zero, every element valid): the block (pass `shm.name` to other processes) and the
    array over it (its `data` and `valid_buffer(a)` are views of the block)."""
    _, _, size = _layout(shape, dtype)
    shm = shared_memory.SharedMemory(create=True, size=size, name=name)
    buf = np.ndarray((size,), dtype=np.uint8, buffer=shm.buf)
    buf[:] = 0
    a = _view(shm, shape, dtype)
    valid_buffer(a)[...] = True
    return shm, _view(shm, shape, dtype)


def attach(name: str, shape: Sequence[int], dtype: Any = "float32") -> MaskedArray:
    """The `MaskedArray` of an existing block (made by `empty` in any process)."""
    try:
        # Python >= 3.13: an attaching process does not own the block
        shm = shared_memory.SharedMemory(name=name, track=False)  # type: ignore[call-arg]
    except TypeError:
        # before 3.13 the block is registered with this process's resource tracker: one
        # shared with the creator (multiprocessing's children) only forgets it at unlink;
        # an unrelated process's tracker would unlink it when that process exits
        shm = shared_memory.SharedMemory(name=name)
    return _view(shm, shape, dtype)


def valid_buffer(a: MaskedArray) -> np.ndarray:
    """The writable validity buffer a shared array was made with (True = valid); `out=`
    keeps it up to date."""
    if a._valid_buf is None:
        raise TypeError("this MaskedArray was not made with a writable full-shape valid buffer")
    return a._valid_buf


def refresh(a: MaskedArray) -> MaskedArray:
    """The array over the same shared buffers with the validity read again (after another
    process wrote it)."""
    b = MaskedArray(a.data, valid=valid_buffer(a))
    b._keep = a._keep
    return b
