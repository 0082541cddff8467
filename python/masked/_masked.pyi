"""Type stubs of the extension module `masked._masked` (crates/python/src/lib.rs)."""

from typing import Any, Optional, Sequence

import numpy as np

class MaskedError(ValueError):
    """A masked-engine error: a bad shape, dim, mask, option or value."""

class Handle:
    """A masked array of any layout and dtype over buffers Python owns."""

    @staticmethod
    def dense(data: np.ndarray, dtype: str, valid: Optional[np.ndarray] = None, invert: bool = False) -> Handle: ...
    @staticmethod
    def bools(data: np.ndarray, valid: np.ndarray) -> Handle: ...
    @staticmethod
    def csr(
        shape: tuple[int, int],
        indptr: np.ndarray,
        indices: np.ndarray,
        data: np.ndarray,
        dtype: str,
        mask_kind: str,
        mask_indptr: Optional[np.ndarray] = None,
        mask_indices: Optional[np.ndarray] = None,
    ) -> Handle: ...
    @staticmethod
    def coo(
        shape: Sequence[int],
        coords: np.ndarray,
        values: np.ndarray,
        dtype: str,
        mask_kind: str,
        mask: Optional[np.ndarray] = None,
    ) -> Handle: ...
    @property
    def dtype(self) -> str: ...
    @property
    def layout(self) -> str: ...
    @property
    def shape(self) -> list[int]: ...
    @property
    def nnz(self) -> int: ...
    def data(self) -> np.ndarray: ...
    def valid(self) -> Optional[np.ndarray]: ...
    def valid_into(self, buf: np.ndarray) -> None: ...
    def valid_entries(self) -> tuple[np.ndarray, np.ndarray]: ...
    def compressed(self) -> np.ndarray: ...
    def csr_parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]: ...
    def apply(
        self,
        op: str,
        dims: Optional[list[int]] = None,
        keepdim: bool = False,
        options: list[tuple[str, str]] = ...,
        dtype: Optional[str] = None,
    ) -> Handle: ...
    def apply_into(
        self,
        op: str,
        out: Handle,
        dims: Optional[list[int]] = None,
        keepdim: bool = False,
        options: list[tuple[str, str]] = ...,
    ) -> Handle: ...
    def moments(
        self, dims: Optional[list[int]] = None, keepdim: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each lane's (valid count int64, mean float64, sum of squared deviations from
        the mean float64) in one pass: var's mergeable state. Dense only."""
        ...
    def vjp(
        self,
        op: str,
        g: Handle,
        dims: Optional[list[int]] = None,
        keepdim: bool = False,
        options: list[tuple[str, str]] = ...,
        saved: Optional[Handle] = None,
    ) -> Handle: ...
    def binary(self, other: Any, op: str, rule: str = "strict", swapped: bool = False) -> Handle: ...
    def vjp_binary(self, other: Handle, op: str, g: Handle, rule: str = "strict") -> tuple[Handle, Handle]: ...
    def cast(self, dtype: str) -> Handle: ...
    def filled(self, value: Any) -> Handle: ...
    def select(self, cond: np.ndarray, other: Handle) -> Handle: ...

def ops() -> list[tuple[str, str, list[str], bool, str]]: ...
def options() -> list[tuple[str, str]]: ...
def _panic_for_test() -> None: ...
def _probe_wait(timeout_s: float) -> bool: ...
def _probe_release() -> None: ...


class AttentionPlan:
    """A sparse attention pattern, validated once, with the plan its gradient reuses."""

    def __init__(self, shape: tuple[int, int], indptr: np.ndarray, indices: np.ndarray) -> None: ...
    @staticmethod
    def generate(spec: str, n: int, m: int, seed: int = 0) -> AttentionPlan: ...
    @property
    def shape(self) -> tuple[int, int]: ...
    @property
    def nnz(self) -> int: ...
    def indptr(self) -> np.ndarray: ...
    def indices(self) -> np.ndarray: ...

def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    plan: AttentionPlan,
    scale: Optional[float] = None,
    bias: Optional[np.ndarray] = None,
    bf16: bool = False,
) -> np.ndarray: ...
def attention_vjp(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    plan: AttentionPlan,
    grad: np.ndarray,
    scale: Optional[float] = None,
    bias: Optional[np.ndarray] = None,
    bf16: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Optional[np.ndarray]]: ...
def sddmm(a: np.ndarray, b: np.ndarray, plan: AttentionPlan, scale: float, bf16: bool = False) -> np.ndarray: ...
def sddmm_vjp(
    a: np.ndarray, b: np.ndarray, plan: AttentionPlan, scale: float, grad: np.ndarray, bf16: bool = False
) -> tuple[np.ndarray, np.ndarray]: ...
def spmm(values: np.ndarray, plan: AttentionPlan, x: np.ndarray, bf16: bool = False) -> np.ndarray: ...
def spmm_vjp(
    values: np.ndarray, plan: AttentionPlan, x: np.ndarray, grad: np.ndarray, bf16: bool = False
) -> tuple[np.ndarray, np.ndarray]: ...
