"""`MaskedArray` and the conversions in and out (numpy, numpy.ma, scipy.sparse, torch)."""

from __future__ import annotations

import numbers
from typing import Any, Optional, Sequence, Union

import numpy as np
import numpy.ma as _npma  # once: `np.ma` is looked up lazily on every access in numpy 2

from . import _masked
from ._masked import Handle, MaskedError
from ._methods import _Ops

__all__ = ["MaskedArray", "csr", "coo", "from_numpy_ma", "MaskedError"]

# numpy dtype name -> the engine's name, and back
_ENGINE = {
    "float32": "f32",
    "float64": "f64",
    "float16": "f16",
    "bfloat16": "bf16",
    "int32": "i32",
    "int64": "i64",
}
_PUBLIC = {v: k for k, v in _ENGINE.items()}
_PUBLIC["bool"] = "bool"
# native-order numpy dtypes -> the engine's name (a dict lookup per call, not dtype.name)
_BY_DTYPE = {np.dtype(k): v for k, v in _ENGINE.items() if k != "bfloat16"}

DTypeLike = Any


def _engine_dtype(dtype: DTypeLike) -> str:
    """The engine's name of a dtype given as a string, a numpy dtype or a torch dtype."""
    if isinstance(dtype, str) and dtype in _PUBLIC and dtype != "bool":
        return dtype
    name = str(dtype)
    if name.startswith("torch."):
        name = name[len("torch.") :]
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            pass
    if name in _ENGINE:
        return _ENGINE[name]
    raise TypeError(
        f"unsupported dtype {dtype!r}: expected float32, float64, float16, bfloat16, int32 or int64"
    )


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _as_numpy(x: Any) -> tuple[np.ndarray, str]:
    """`x` as a numpy array over the same memory where it can be (numpy arrays, CPU
    tensors, DLPack producers), with the engine's dtype name (bf16 as `uint16` bits)."""
    if isinstance(x, np.ndarray):
        arr = x
    elif _is_torch(x):
        import torch

        t = x.detach()
        if t.device.type != "cpu":
            raise TypeError(f"a tensor on {t.device} (move it to the CPU first: .cpu())")
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16), "bf16"
        if t.is_sparse or t.layout != torch.strided:
            raise TypeError("a torch sparse tensor: pass its indices and values to mk.coo")
        arr = t.numpy()
    elif hasattr(x, "__dlpack__") and not isinstance(x, (numbers.Number, list, tuple)):
        arr = np.from_dlpack(x)
    else:
        arr = np.asarray(x)
    name = _BY_DTYPE.get(arr.dtype)
    if name is not None and type(arr) is np.ndarray and arr.flags.aligned:
        return arr, name  # the common case, checked in one lookup
    if isinstance(arr, _npma.MaskedArray):
        raise TypeError("a numpy.ma array: use mk.from_numpy_ma(x) (its mask means hidden)")
    if not arr.flags.aligned:
        # numpy allows unaligned buffers (a pickle's, a byte offset into another array);
        # the engine reads typed values: one aligned copy
        arr = arr.copy()
    if arr.dtype.name == "bfloat16":  # ml_dtypes
        return arr.view(np.uint16), "bf16"
    if not arr.dtype.isnative:
        raise TypeError(f"non-native byte order {arr.dtype}: convert with .astype(dtype.newbyteorder('='))")
    name = arr.dtype.name
    if name not in _ENGINE:
        raise TypeError(
            f"unsupported dtype {arr.dtype}: expected float32, float64, float16, bfloat16, int32 or int64"
        )
    return arr, _ENGINE[name]


def _bool_array(m: Any, what: str) -> np.ndarray:
    if type(m) is np.ndarray and m.dtype == np.bool_:
        return m
    if _is_torch(m):
        m = m.detach().cpu().numpy()
    a = np.asarray(m)
    if a.dtype != np.bool_:
        raise TypeError(f"{what} must be a bool array, got dtype {a.dtype}")
    return a


def _is_scipy_sparse(x: Any) -> bool:
    return type(x).__module__.startswith("scipy.sparse")


class MaskedArray(_Ops):
    """A masked array of any layout (`"dense"`, `"csr"`, `"coo"`) and dtype.

    `MaskedArray(data, valid=None, *, mask=None)` wraps `data` (a numpy array, a CPU
    torch tensor, anything with `__dlpack__` or `__array__`) without copying it. The mask
    is a bool array broadcastable to `data`: `valid=` with torch's convention (True = the
    element takes part) or `mask=` with numpy.ma's (True = masked out), never both;
    neither means every element is valid. Sparse arrays come from `mk.csr` and `mk.coo`.
    Every op of the engine is a method (`a.sum(1)`, `a.softmax(-1)`) and a module
    function (`mk.sum(a, 1)`); results are `MaskedArray`s of the input's layout.
    """

    __slots__ = ("_h", "_valid_buf", "_keep", "__weakref__")

    def __init__(self, data: Any, valid: Any = None, *, mask: Any = None) -> None:
        if valid is not None and mask is not None:
            raise ValueError("give valid= (True = valid) or mask= (True = masked out), not both")
        if isinstance(data, MaskedArray):
            raise TypeError("data is a MaskedArray already")
        if _is_scipy_sparse(data):
            raise TypeError("a scipy sparse matrix: use mk.csr(x) or mk.coo(x)")
        arr, dt = _as_numpy(data)
        m = valid if valid is not None else mask
        bools = None if m is None else _bool_array(m, "valid" if valid is not None else "mask")
        self._h = Handle.dense(arr, dt, bools, mask is not None)
        self._keep: Any = None
        # a full-shape valid buffer the caller gave: out= keeps it up to date
        self._valid_buf = (
            bools
            if valid is not None and bools is not None and bools.shape == arr.shape and bools.flags.writeable
            else None
        )

    @classmethod
    def _wrap(cls, h: Handle) -> "MaskedArray":
        a = cls.__new__(cls)
        a._h = h
        a._valid_buf = None
        a._keep = None
        return a

    # ---- attributes -------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The shape."""
        return tuple(self._h.shape)

    @property
    def ndim(self) -> int:
        """The number of dims."""
        return len(self._h.shape)

    @property
    def dtype(self) -> str:
        """The dtype's name: float32, float64, float16, bfloat16, int32, int64 (bool for a
        comparison's result)."""
        return _PUBLIC[self._h.dtype]

    @property
    def layout(self) -> str:
        """`"dense"`, `"csr"` or `"coo"`."""
        return self._h.layout

    @property
    def nnz(self) -> int:
        """Stored entries (dense: every element)."""
        return self._h.nnz

    @property
    def data(self) -> np.ndarray:
        """The values as the engine computes on them: dense, the caller's array or the
        engine's output buffer (no copy); CSR, the stored values (no copy); COO, the
        stored values in sorted order. Values at masked-out positions mean nothing.
        bfloat16 values are returned as their `uint16` bits (`to_torch()` gives a
        bfloat16 tensor)."""
        return self._h.data()

    @property
    def valid(self) -> np.ndarray:
        """Dense: the validity, numpy bools of the shape (True = takes part). Sparse: use
        `coords`."""
        if self.layout != "dense":
            raise TypeError(
                "a sparse array's valid positions are its coords (dense bools would densify it: "
                "use to_dense_valid())"
            )
        v = self._h.valid()
        return np.ones(self.shape, dtype=bool) if v is None else v

    @property
    def mask(self) -> np.ndarray:
        """Dense: numpy.ma's mask (True = masked out), the negation of `valid`."""
        return ~self.valid

    @property
    def coords(self) -> np.ndarray:
        """Sparse: the valid positions, int64 `[ndim, k]` in row-major order (the order of
        `compressed()`)."""
        if self.layout == "dense":
            return np.stack(np.nonzero(self.valid)).astype(np.int64)
        return self._h.valid_entries()[0]

    def to_dense_valid(self) -> np.ndarray:
        """The validity as dense numpy bools of the shape (densifies a sparse array)."""
        if self.layout == "dense":
            return self.valid
        out = np.zeros(self.shape, dtype=bool)
        out[tuple(self.coords)] = True
        return out

    def compressed(self) -> np.ndarray:
        """The valid values, 1-D, in row-major order."""
        if self.layout == "dense" and self.dtype == "bool":
            d = self.data
            v = self._h.valid()
            return d.reshape(-1).copy() if v is None else d[v]
        if self.layout == "dense":
            # packed by the mask bits in the engine (numpy's boolean indexing is 4x slower)
            return self._public_values(self._h.compressed())
        return self._public_values(self._h.valid_entries()[1])

    def _public_values(self, d: np.ndarray) -> np.ndarray:
        return d

    def filled(self, value: Union[int, float, bool] = 0) -> np.ndarray:
        """A dense numpy array with `value` at every masked-out position (a sparse array is
        densified: explicit, size-checked)."""
        if self.dtype == "bool":
            if self.layout == "dense":
                return np.where(self.valid, self.data, bool(value))
            out = np.full(self.shape, bool(value))
            c, v = self._h.valid_entries()
            out[tuple(c)] = v
            return out
        return self._h.filled(value).data()

    def to_numpy(self) -> np.ndarray:
        """`filled(0)`."""
        return self.filled(0)

    def to_numpy_ma(self) -> np.ma.MaskedArray:
        """A numpy.ma array (dense; its mask True where this one is invalid). bfloat16 is
        widened to float32 (numpy has no bfloat16)."""
        if self.layout != "dense":
            d = self.filled(0)
            return _npma.MaskedArray(d, mask=~self.to_dense_valid())
        d = self.data
        if self.dtype == "bfloat16":
            d = self._h.cast("f32").data()
        return _npma.MaskedArray(d, mask=self.mask)

    def to_torch(self) -> Any:
        """The values as a torch tensor over the same memory (dense: `data`; sparse: a
        sparse COO tensor of the valid entries). Masked-out positions hold the op's fill
        value; pair it with `torch.from_numpy(a.valid)` for the mask."""
        import torch

        if self.layout == "dense":
            d = self.data
            if self.dtype == "bfloat16":
                return torch.from_numpy(d.view(np.int16)).view(torch.bfloat16)
            return torch.from_numpy(d)
        c, v = self._h.valid_entries()
        vt = torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) if self.dtype == "bfloat16" else torch.from_numpy(v)
        return torch.sparse_coo_tensor(torch.from_numpy(c), vt, self.shape, is_coalesced=True)

    def to_scipy(self) -> Any:
        """Sparse layouts: a scipy `csr_array` (CSR) or `coo_array` of the valid entries
        (CSR masked by its own pattern: over the same buffers, no copy)."""
        import scipy.sparse as sp

        if self.layout == "csr":
            indptr, indices, data, kind = self._h.csr_parts()
            if kind == "pattern":
                return sp.csr_array((data, indices, indptr), shape=self.shape)
        if self.layout == "dense":
            raise TypeError("to_scipy() is for sparse layouts")
        c, v = self._h.valid_entries()
        if self.layout == "csr":
            return sp.csr_array(sp.coo_array((v, tuple(c)), shape=self.shape))
        return sp.coo_array((v, tuple(c)), shape=self.shape)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(
            "a MaskedArray is not a plain array (that would drop its mask): use .filled(value), "
            ".to_numpy_ma() or .compressed()"
        )

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        raise TypeError(
            f"numpy.{func.__name__} on a MaskedArray would drop its mask: use the mk function "
            "of the same name, or .filled(value) / .to_numpy_ma() first"
        )

    __array_ufunc__ = None  # numpy defers to our operators

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        if self.layout == "dense":
            body = str(self.to_numpy_ma()) if self.dtype != "bool" else str(_npma.MaskedArray(self.data, mask=self.mask))
        else:
            c = self.coords
            body = f"nnz={c.shape[1]}, coords={c.tolist() if c.shape[1] <= 8 else '...'}"
        return f"MaskedArray({body}, dtype={self.dtype}, layout={self.layout})"

    # ---- engine calls -----------------------------------------------------------------
    def _apply(self, op: str, dims: Optional[Sequence[int]], keepdim: bool, options: dict, dtype: Any) -> "MaskedArray":
        opts = [(k, _opt_text(v)) for k, v in options.items() if v is not None]
        dt = None if dtype is None else _engine_dtype(dtype)
        return MaskedArray._wrap(self._h.apply(op, None if dims is None else list(dims), keepdim, opts, dt))

    def _binary(self, other: Any, op: str, rule: str = "strict", swapped: bool = False) -> "MaskedArray":
        o = other._h if isinstance(other, MaskedArray) else _operand(other)
        return MaskedArray._wrap(self._h.binary(o, op, rule, swapped))

    def astype(self, dtype: DTypeLike) -> "MaskedArray":
        """The values cast to `dtype` (mask and positions kept)."""
        return MaskedArray._wrap(self._h.cast(_engine_dtype(dtype)))

    def fill(self, value: Union[int, float], where: Any = None) -> "MaskedArray":
        """A valid array with `value` at the masked-out positions (or where `where` is
        True: `where(cond, value, self)`)."""
        if where is None:
            return MaskedArray._wrap(self._h.filled(value))
        cond = _bool_array(where, "where")
        full = MaskedArray(np.full(self.shape, value, dtype=_np_dtype(self.dtype)))
        return MaskedArray._wrap(full._h.select(cond, self._h))

    # operators (the strict rule, NumPy broadcasting, Python scalars on either side)
    def __add__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "add")

    def __radd__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "add", swapped=True)

    def __sub__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "sub")

    def __rsub__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "sub", swapped=True)

    def __mul__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "mul")

    def __rmul__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "mul", swapped=True)

    def __truediv__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "div")

    def __rtruediv__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "div", swapped=True)

    def __floordiv__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "floor_divide")

    def __rfloordiv__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "floor_divide", swapped=True)

    def __mod__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "remainder")

    def __rmod__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "remainder", swapped=True)

    def __pow__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "pow")

    def __rpow__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "pow", swapped=True)

    def __lt__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "lt")

    def __le__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "le")

    def __gt__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "gt")

    def __ge__(self, o: Any) -> "MaskedArray":
        return self._binary(o, "ge")

    def __eq__(self, o: Any) -> "MaskedArray":  # type: ignore[override]
        return self._binary(o, "eq")

    def __ne__(self, o: Any) -> "MaskedArray":  # type: ignore[override]
        return self._binary(o, "ne")

    __hash__ = None  # type: ignore[assignment]

    def __neg__(self) -> "MaskedArray":
        return self._apply("neg", None, False, {}, None)

    def __abs__(self) -> "MaskedArray":
        return self._apply("abs", None, False, {}, None)

    def _bool_logic(self, o: Any, fn: Any) -> "MaskedArray":
        if self.dtype != "bool" or self.layout != "dense":
            raise TypeError("& | ^ ~ take dense bool MaskedArrays (a comparison's result)")
        if isinstance(o, MaskedArray):
            if o.dtype != "bool" or o.layout != "dense":
                raise TypeError("& | ^ take dense bool MaskedArrays")
            ov, ovalid = o.data, o.valid
        else:
            ov, ovalid = np.asarray(o, dtype=bool), np.ones((), dtype=bool)
        sv, svalid = self.data, self.valid
        if not np.array_equal(np.broadcast_to(svalid, np.broadcast_shapes(svalid.shape, np.shape(ovalid))),
                              np.broadcast_to(ovalid, np.broadcast_shapes(svalid.shape, np.shape(ovalid)))) and isinstance(o, MaskedArray):
            raise MaskedError("the strict rule: the operands' masks differ (use mk.logical_* with rule='and')")
        vals = fn(sv, ov)
        valid = np.broadcast_to(svalid, vals.shape)
        return _bool_result(vals, valid)

    def __and__(self, o: Any) -> "MaskedArray":
        return self._bool_logic(o, np.logical_and)

    def __or__(self, o: Any) -> "MaskedArray":
        return self._bool_logic(o, np.logical_or)

    def __xor__(self, o: Any) -> "MaskedArray":
        return self._bool_logic(o, np.logical_xor)

    def __invert__(self) -> "MaskedArray":
        if self.dtype != "bool" or self.layout != "dense":
            raise TypeError("~ takes a dense bool MaskedArray (a comparison's result)")
        return _bool_result(~self.data, self.valid)


def _bool_result(vals: np.ndarray, valid: np.ndarray) -> MaskedArray:
    return MaskedArray._wrap(Handle.bools(np.ascontiguousarray(vals), np.ascontiguousarray(valid)))


def _np_dtype(name: str) -> Any:
    return np.uint16 if name == "bfloat16" else np.dtype(name)


def _opt_text(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _operand(x: Any) -> Any:
    """A binary op's other operand: a Python scalar as it is, anything else wrapped."""
    if isinstance(x, (bool, int, float, np.integer, np.floating)) and np.ndim(x) == 0:
        return x.item() if hasattr(x, "item") else x
    if _is_scipy_sparse(x):
        return csr(x)._h if x.format == "csr" else coo(x)._h
    return MaskedArray(x)._h


def _index_array(a: Any) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype not in (np.int32, np.int64):
        a = a.astype(np.int64)
    return np.ascontiguousarray(a)


def csr(matrix: Any, valid: Any = "pattern") -> MaskedArray:
    """A CSR masked array over a scipy `csr_array`/`csr_matrix` (no copy of its indices or
    values; int32 and int64 indices as they are).

    `valid="pattern"` (default): the stored entries are the valid ones (explicit zeros
    included); `"all"`: every position is valid, unstored ones as zeros; a second scipy
    sparse matrix: its pattern; a dense bool array: its True positions. A matrix that is
    not canonical (unsorted or duplicate indices) is a `MaskedError` naming the fix.
    """
    if not (_is_scipy_sparse(matrix) and getattr(matrix, "format", None) == "csr"):
        raise TypeError(f"mk.csr takes a scipy csr_array or csr_matrix, got {type(matrix).__name__}")
    if not matrix.has_canonical_format:
        raise MaskedError(
            "the CSR matrix has unsorted or duplicate column indices: call "
            "matrix.sort_indices() and matrix.sum_duplicates() first"
        )
    data, dt = _as_numpy(matrix.data)
    indices = matrix.indices
    indptr = matrix.indptr
    if indices.dtype not in (np.int32, np.int64):
        raise TypeError(f"CSR indices of dtype {indices.dtype}: int32 or int64 expected")
    if indptr.dtype != indices.dtype:
        indptr = indptr.astype(indices.dtype)
    args: tuple = ()
    if isinstance(valid, str):
        if valid not in ("pattern", "all"):
            raise ValueError(f"valid={valid!r}: 'pattern', 'all', a scipy sparse matrix or a bool array")
        kind = valid
    else:
        kind = "other"
        if _is_scipy_sparse(valid):
            p = valid.tocsr()
            p.sum_duplicates()
            p.sort_indices()
        else:
            import scipy.sparse as sp

            p = sp.csr_array(_bool_array(valid, "valid"))
        if tuple(p.shape) != tuple(matrix.shape):
            raise MaskedError(f"the mask pattern's shape {tuple(p.shape)} differs from the matrix's {tuple(matrix.shape)}")
        args = (_index_array(p.indptr), _index_array(p.indices))
    return MaskedArray._wrap(
        Handle.csr(tuple(matrix.shape), indptr, indices, data, dt, kind, *args)
    )


def coo(coords: Any, values: Any = None, shape: Optional[Sequence[int]] = None, valid: Any = "pattern") -> MaskedArray:
    """An n-D COO masked array: `coords` an integer array `[ndim, nnz]` (any order, no
    repeated position), `values` 1-D, `shape`; or `mk.coo(x)` for a scipy `coo_array` /
    `coo_matrix` (or any scipy sparse matrix, converted) or a pydata `sparse.COO`.

    `valid`: `"pattern"` (the stored entries, default), `"all"` (every position, unstored
    ones as zeros), an integer array `[ndim, k]` of the valid positions, a dense bool
    array, or another COO `MaskedArray` (its pattern). The engine stores the entries
    sorted: a copy.
    """
    if values is None:
        x = coords
        if _is_scipy_sparse(x):
            x = x.tocoo()
            c = np.stack([np.asarray(x.row), np.asarray(x.col)]) if hasattr(x, "row") else np.asarray(x.coords)
            values, shape = x.data, x.shape
            if getattr(x, "has_canonical_format", True) is False:
                x.sum_duplicates()
                c = np.stack([np.asarray(x.row), np.asarray(x.col)])
                values = x.data
            coords = c
        elif type(x).__module__.startswith("sparse"):
            coords, values, shape = x.coords, x.data, x.shape
        else:
            raise TypeError("mk.coo(x) takes a scipy sparse matrix or a sparse.COO; else coords, values, shape")
    if shape is None:
        raise ValueError("mk.coo needs shape= with coords and values")
    vals, dt = _as_numpy(values)
    c = np.ascontiguousarray(np.asarray(coords), dtype=np.int64)
    if isinstance(valid, str):
        if valid not in ("pattern", "all"):
            raise ValueError(f"valid={valid!r}: 'pattern', 'all', coordinates, a bool array or a COO MaskedArray")
        return MaskedArray._wrap(Handle.coo(list(shape), c, np.ascontiguousarray(vals), dt, valid))
    if isinstance(valid, MaskedArray):
        m = np.ascontiguousarray(valid.coords, dtype=np.int64)
        return MaskedArray._wrap(Handle.coo(list(shape), c, np.ascontiguousarray(vals), dt, "coords", m))
    v = np.asarray(valid)
    if v.dtype == np.bool_:
        return MaskedArray._wrap(Handle.coo(list(shape), c, np.ascontiguousarray(vals), dt, "dense", v))
    return MaskedArray._wrap(
        Handle.coo(list(shape), c, np.ascontiguousarray(vals), dt, "coords", np.ascontiguousarray(v, dtype=np.int64))
    )


def from_numpy_ma(x: np.ma.MaskedArray) -> MaskedArray:
    """A dense `MaskedArray` over a numpy.ma array's data (no copy) with its mask
    inverted (numpy.ma's True = masked out)."""
    if not isinstance(x, _npma.MaskedArray):
        raise TypeError("from_numpy_ma takes a numpy.ma.MaskedArray")
    m = _npma.getmask(x)
    return MaskedArray(x.data, mask=None if m is _npma.nomask else m)


def as_masked(x: Any, mask: Any = None) -> MaskedArray:
    """`x` as a `MaskedArray` under torch.masked's convention (`mask` True = valid): a
    `MaskedArray` as it is (then `mask` must be None), a scipy CSR or COO matrix (`mask`
    None: every position valid, unstored ones as zeros; a sparse matrix: its pattern; the
    same matrix: its stored entries), a numpy.ma array, or anything `MaskedArray` takes."""
    if isinstance(x, MaskedArray):
        if mask is not None:
            raise ValueError("mask= is for plain inputs: a MaskedArray carries its own mask")
        return x
    if isinstance(x, _npma.MaskedArray):
        if mask is not None:
            raise ValueError("mask= is for plain inputs: a numpy.ma array carries its own mask")
        return from_numpy_ma(x)
    if _is_scipy_sparse(x):
        if mask is None:
            kind: Any = "all"
        elif mask is x:
            kind = "pattern"
        else:
            kind = mask
        if x.format == "csr":
            return csr(x, kind)
        return coo(x, valid=_coo_valid(kind))
    return MaskedArray(x, valid=mask)


def _coo_valid(kind: Any) -> Any:
    if isinstance(kind, str):
        return kind
    if _is_scipy_sparse(kind):
        k = kind.tocoo()
        return np.stack([k.row, k.col]).astype(np.int64)
    return kind
