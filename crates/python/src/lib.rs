//! `masked._masked`: the Python extension of the masked engine.
//!
//! One class, `Handle`, holds a masked array of any layout and dtype as the Python
//! objects that own its buffers (numpy arrays, possibly views of scipy or torch memory)
//! plus the engine-side mask; every op builds the engine's borrowed
//! [`ArrayRef`] over those buffers (no copy), releases the GIL,
//! and runs the dtype-erased boundary ([`masked_engine`]), which is where every generic
//! instantiation is compiled. Results come back as numpy arrays that own the engine's
//! output vectors (no copy). The Python package (`python/masked`) builds the user's API
//! (`MaskedArray`, the functions, `mk.torch`) on top.
#![allow(clippy::too_many_arguments)]

mod attention;

use half::{bf16, f16};
use layout_coo::{CooMask, CooPattern, MaskedCoo};
use layout_csr::{CsrIndex, CsrMask, MaskedCsr, PatternI};
use layout_dense::{MaskedArray, MaskedView};
use masked_core::{
    BitMask, ByDType, DType, DynVec, MaskRule, MaskedError as Error, Op, Scalar, SliceMutOf,
    SliceOf, Values,
};
use masked_engine::{
    promote, promote_scalar, Array, ArrayRef, CsrCols, CsrOutcome, Kind, OpRequest, Operand,
    Output, SparseOutcome, ZipOutput,
};
use ndarray::{ArrayViewD, IxDyn};
use numpy::{
    PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArray1, PyReadonlyArrayDyn,
    PyReadwriteArrayDyn, PyUntypedArrayMethods,
};
use pyo3::create_exception;
use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;
use sprs::{CompressedStorage, CsMatViewI};
use std::panic::{catch_unwind, AssertUnwindSafe};

create_exception!(
    _masked,
    MaskedError,
    PyValueError,
    "A masked-engine error: a bad shape, dim, mask, option or value (a ValueError)."
);

/// The engine's error as a Python exception: resource limits are `MemoryError`, an
/// unsupported dtype or operand a `TypeError`, everything else `MaskedError`.
fn py_err(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::TooLarge { .. } => PyMemoryError::new_err(msg),
        Error::Unsupported { .. } => PyTypeError::new_err(msg),
        _ => MaskedError::new_err(msg),
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// Runs an engine call with the GIL released (two Python threads compute side by side:
/// a parallel loop that finds the global pool busy runs on its thread's own, see
/// `masked_kernels::par::on_free_pool`); a panic inside becomes `MaskedError("internal
/// error: ...")`, never an abort.
fn engine<R: Send>(py: Python<'_>, f: impl FnOnce() -> Result<R, Error> + Send) -> PyResult<R> {
    let team = torch_team();
    py.detach(|| catch_unwind(AssertUnwindSafe(|| masked_core::with_team(team, f))))
        .map_err(|p| MaskedError::new_err(format!("internal error: {}", panic_text(&*p))))?
        .map_err(py_err)
}

fn dtype_of(name: &str) -> PyResult<DType> {
    name.parse::<DType>().map_err(|_| {
        PyTypeError::new_err(format!(
            "unsupported dtype {name:?}: expected one of f32, f64, f16, bf16, i32, i64"
        ))
    })
}

/// A CSR input's mask.
#[derive(Clone)]
enum CsrMaskSpec {
    Stored,
    All,
    Pattern(PatternI<usize>),
    Pattern32(PatternI<u32>),
}

/// `(indptr, indices, data, mask kind)` of a CSR handle.
type CsrPartsPy = (Py<PyAny>, Py<PyAny>, Py<PyAny>, &'static str);

/// What a [`Handle`] holds.
enum Store {
    /// A numpy array (bf16 as its `uint16` bits) and the mask broadcast to its shape.
    Dense {
        data: Py<PyAny>,
        dtype: DType,
        mask: Option<BitMask>,
    },
    /// A bool result (comparisons): numpy bools and the mask; no op runs on it.
    Bool { data: Py<PyAny>, mask: BitMask },
    /// A CSR matrix over numpy buffers: `indices` int64 (`wide`) or int32, `data` 1-D.
    /// The structure was validated once when the handle was made.
    Csr {
        shape: (usize, usize),
        indptr: Vec<usize>,
        indptr_obj: Py<PyAny>,
        indices: Py<PyAny>,
        wide: bool,
        data: Py<PyAny>,
        dtype: DType,
        mask: CsrMaskSpec,
    },
    /// An n-D COO array, owned by the engine (stored sorted).
    Coo(Array),
    /// A sparse bool result: shape, coordinates `[ndim, nnz]` (int64) and values.
    BoolSparse {
        shape: Vec<usize>,
        coords: Py<PyAny>,
        values: Py<PyAny>,
    },
}

/// A masked array of any layout and dtype, over buffers Python owns (see the module
/// docs). Made by `Handle.dense`, `Handle.csr`, `Handle.coo`, or returned by an op.
#[pyclass(frozen, module = "masked._masked")]
struct Handle {
    store: Store,
}

/// Signed indices (`i64`, `i32`) as the unsigned type of their width (`usize`, `u32`:
/// the same bits), after checking that none is negative.
fn as_unsigned<S: Copy + Default + PartialOrd + std::fmt::Display, U>(
    v: &[S],
) -> Result<&[U], Error> {
    if let Some(p) = v.iter().position(|&x| x < S::default()) {
        return Err(Error::InvalidData(format!(
            "negative index {} at entry {p}",
            v[p]
        )));
    }
    // SAFETY: `recast_slice` asserts one size and alignment; every value is
    // non-negative, so it means the same number unsigned
    Ok(unsafe { recast_slice(v) })
}

const _: () = assert!(std::mem::size_of::<usize>() == 8, "a 64-bit target");

/// A slice of `A` read as `B` (same size and alignment), without a check.
///
/// # Safety
/// Every value must be a valid `B` meaning the same number (non-negative indices).
unsafe fn recast_slice<A, B>(v: &[A]) -> &[B] {
    assert!(std::mem::size_of::<A>() == std::mem::size_of::<B>());
    assert!(std::mem::align_of::<A>() == std::mem::align_of::<B>());
    // SAFETY: same layout (asserted); the caller vouches for the values
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<B>(), v.len()) }
}

/// A `Vec<A>` as a `Vec<B>` of the same size and alignment, without a copy.
///
/// # Safety
/// Every bit pattern of `A` must be a valid `B`.
unsafe fn recast_vec<A, B>(v: Vec<A>) -> Vec<B> {
    assert!(std::mem::size_of::<A>() == std::mem::size_of::<B>());
    assert!(std::mem::align_of::<A>() == std::mem::align_of::<B>());
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: same layout (asserted); the caller vouches for the bit patterns
    unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<B>(), v.len(), v.capacity()) }
}

/// A view of `A` values as `B` values (same shape and strides, no copy).
///
/// # Safety
/// `A` and `B` have one size and alignment, and every bit pattern of `A` is a `B`.
unsafe fn recast_view<'a, A, B>(v: ArrayViewD<'a, A>) -> ArrayViewD<'a, B> {
    assert!(std::mem::size_of::<A>() == std::mem::size_of::<B>());
    assert!(std::mem::align_of::<A>() == std::mem::align_of::<B>());
    use ndarray::ShapeBuilder;
    let strides: Vec<usize> = v.strides().iter().map(|&s| s as usize).collect();
    let shape = IxDyn(v.shape()).strides(IxDyn(&strides));
    // SAFETY: the same memory, shape and strides as `v`, read as `B` (the caller's
    // guarantee); the lifetime is `v`'s
    unsafe { ArrayViewD::from_shape_ptr(shape, v.as_ptr().cast::<B>()) }
}

/// A numpy array that owns `v` (no copy), bf16 as its `uint16` bits, reshaped.
fn dyn_to_numpy(py: Python<'_>, v: DynVec, shape: &[usize]) -> PyResult<Py<PyAny>> {
    fn mk<T: numpy::Element>(py: Python<'_>, v: Vec<T>, shape: &[usize]) -> PyResult<Py<PyAny>> {
        let a = PyArray1::from_vec(py, v);
        Ok(a.reshape(shape)?.into_any().unbind())
    }
    match v {
        DynVec::F32(v) => mk(py, v, shape),
        DynVec::F64(v) => mk(py, v, shape),
        DynVec::F16(v) => mk(py, v, shape),
        // SAFETY: every u16 is a bf16 and back
        DynVec::BF16(v) => mk(py, unsafe { recast_vec::<bf16, u16>(v) }, shape),
        DynVec::I32(v) => mk(py, v, shape),
        DynVec::I64(v) => mk(py, v, shape),
    }
}

fn usize_to_numpy(py: Python<'_>, v: Vec<usize>, shape: &[usize]) -> PyResult<Py<PyAny>> {
    // SAFETY: indices and shapes are far below i64::MAX
    let v: Vec<i64> = unsafe { recast_vec(v) };
    Ok(PyArray1::from_vec(py, v)
        .reshape(shape)?
        .into_any()
        .unbind())
}

/// A bool mask as numpy bools of its shape (unpacked: one byte per element).
fn bits_to_numpy(py: Python<'_>, m: &BitMask) -> PyResult<Py<PyAny>> {
    dense_bools(py, m.to_vec(), m.shape())
}

fn dense_bools(py: Python<'_>, v: Vec<bool>, shape: &[usize]) -> PyResult<Py<PyAny>> {
    Ok(PyArray1::from_vec(py, v)
        .reshape(shape)?
        .into_any()
        .unbind())
}

/// A numpy bool array (any shape) as a bit mask.
fn bits_from(a: &Bound<'_, PyAny>) -> PyResult<BitMask> {
    let b: PyReadonlyArrayDyn<'_, bool> = a
        .extract()
        .map_err(|_| PyTypeError::new_err("a mask must be a numpy bool array"))?;
    BitMask::from_array(b.as_array()).map_err(py_err)
}

/// A numpy integer array `[ndim, nnz]` as one `usize` vector per dim.
fn coords_from(a: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<usize>>> {
    let c: PyReadonlyArrayDyn<'_, i64> = a
        .extract()
        .map_err(|_| PyTypeError::new_err("coordinates must be an int64 array [ndim, nnz]"))?;
    let c = c.as_array();
    if c.ndim() != 2 {
        return Err(MaskedError::new_err(format!(
            "coordinates must be 2-D [ndim, nnz], got {} dims",
            c.ndim()
        )));
    }
    c.outer_iter()
        .map(|row| {
            row.iter()
                .enumerate()
                .map(|(k, &x)| {
                    usize::try_from(x).map_err(|_| {
                        MaskedError::new_err(format!("negative coordinate {x} at entry {k}"))
                    })
                })
                .collect()
        })
        .collect()
}

/// Runs `f` on the dense view of `T` over `data` (no copy).
fn dense_ref<T, R>(
    py: Python<'_>, data: &Py<PyAny>, mask: &Option<BitMask>,
    f: impl FnOnce(ArrayRef<'_>) -> PyResult<R>,
) -> PyResult<R>
where
    T: masked_core::Element + numpy::Element,
{
    let arr: PyReadonlyArrayDyn<'_, T> = data.bind(py).extract()?;
    with_mask(arr.as_array(), mask, f)
}

fn with_mask<T: masked_core::Element, R>(
    v: ArrayViewD<'_, T>, mask: &Option<BitMask>, f: impl FnOnce(ArrayRef<'_>) -> PyResult<R>,
) -> PyResult<R> {
    let m: MaskedView<'_, T, IxDyn> = match mask {
        Some(b) => MaskedArray::new(v, b.clone()).map_err(py_err)?,
        None => MaskedArray::unmasked(v),
    };
    f(ArrayRef::from_dense(m))
}

fn csr_ref<T, R>(
    py: Python<'_>, s: &Store, f: impl FnOnce(ArrayRef<'_>) -> PyResult<R>,
) -> PyResult<R>
where
    T: masked_core::Element + numpy::Element,
{
    let Store::Csr { data, .. } = s else {
        unreachable!("csr_ref on a CSR store")
    };
    let d: PyReadonlyArray1<'_, T> = data.bind(py).extract()?;
    csr_over(py, s, d.as_slice()?, f)
}

/// The CSR view of bf16 values held as numpy `uint16` bits.
fn bf16_csr<R>(
    py: Python<'_>, s: &Store, f: impl FnOnce(ArrayRef<'_>) -> PyResult<R>,
) -> PyResult<R> {
    let Store::Csr { data, .. } = s else {
        unreachable!("bf16_csr on a CSR store")
    };
    let bits: PyReadonlyArray1<'_, u16> = data.bind(py).extract()?;
    let slice = bits.as_slice()?;
    // SAFETY: same size and alignment, every bit pattern a bf16
    let vals: &[bf16] = unsafe { std::slice::from_raw_parts(slice.as_ptr().cast(), slice.len()) };
    csr_over(py, s, vals, f)
}

/// The masked CSR view over `vals` and the store's indices (int64 as `usize`, int32 as
/// `u32`: no copy) and mask.
fn csr_over<T: masked_core::Element, R>(
    py: Python<'_>, s: &Store, vals: &[T], f: impl FnOnce(ArrayRef<'_>) -> PyResult<R>,
) -> PyResult<R> {
    let Store::Csr {
        shape,
        indptr,
        indices,
        wide,
        mask,
        ..
    } = s
    else {
        unreachable!("csr_over on a CSR store")
    };
    // one index width: the numpy type `N`, the engine's `I`, the mask spec's pattern of
    // that width and the erased view's constructor
    macro_rules! view {
        ($n:ty, $i:ty, $pattern:ident, $erase:ident) => {{
            let mask = mask.of_width(|m| match m {
                CsrMaskSpec::$pattern(p) => Some(p),
                _ => None,
            });
            // SAFETY: the indices were checked non-negative and in range when the handle
            // was made (`Handle::csr`), the structure validated there too; no scan per call
            unsafe {
                csr_view::<T, $n, $i, R>(py, *shape, indptr, indices, vals, mask, |m| {
                    f(ArrayRef::$erase(m))
                })
            }
        }};
    }
    if *wide {
        view!(i64, usize, Pattern, from_csr)
    } else {
        view!(i32, u32, Pattern32, from_csr32)
    }
}

impl CsrMaskSpec {
    /// The mask for indices of type `I`: `pattern` picks this spec's pattern of that
    /// width (a handle's pattern always has its indices' width).
    fn of_width<I: sprs::SpIndex>(
        &self, pattern: impl Fn(&Self) -> Option<&PatternI<I>>,
    ) -> CsrMask<I> {
        match self {
            CsrMaskSpec::Stored => CsrMask::Stored,
            CsrMaskSpec::All => CsrMask::All,
            other => CsrMask::Pattern(
                pattern(other)
                    .expect("a handle's pattern has its indices' width")
                    .clone(),
            ),
        }
    }
}

/// The CSR view of `vals` on the structure `shape`, `indptr`, `indices` (a numpy array of
/// `N`, read as `I` of the same width), with `mask`, handed to `f`.
///
/// # Safety
/// The indices are non-negative and in range, the structure valid (checked when the
/// handle was made).
unsafe fn csr_view<T: masked_core::Element, N: numpy::Element, I: CsrIndex, R>(
    py: Python<'_>, shape: (usize, usize), indptr: &[usize], indices: &Py<PyAny>, vals: &[T],
    mask: CsrMask<I>, f: impl FnOnce(MaskedCsr<'_, T, I, usize>) -> PyResult<R>,
) -> PyResult<R> {
    let ix: PyReadonlyArray1<'_, N> = indices.bind(py).extract()?;
    // SAFETY: by the caller
    let ix = unsafe { recast_slice::<N, I>(ix.as_slice()?) };
    // SAFETY: by the caller
    let m = unsafe { CsMatViewI::new_unchecked(CompressedStorage::CSR, shape, indptr, ix, vals) };
    f(MaskedCsr::new(m, mask).map_err(py_err)?)
}

/// Dispatches on the run-time dtype to a function generic over the value type (the
/// numpy element type; bf16 handled by the callers).
macro_rules! by_dtype {
    ($dt:expr, $f:ident :: <T> ($($arg:expr),*), bf16 => $bf:expr) => {
        match $dt {
            DType::F32 => $f::<f32, _>($($arg),*),
            DType::F64 => $f::<f64, _>($($arg),*),
            DType::F16 => $f::<f16, _>($($arg),*),
            DType::I32 => $f::<i32, _>($($arg),*),
            DType::I64 => $f::<i64, _>($($arg),*),
            DType::BF16 => $bf,
        }
    };
}

impl Store {
    /// Runs `f` on the engine's borrowed view of this array (no copy of the values).
    fn with_ref<R>(
        &self, py: Python<'_>, f: impl FnOnce(ArrayRef<'_>) -> PyResult<R>,
    ) -> PyResult<R> {
        match self {
            Store::Dense { data, dtype, mask } => {
                by_dtype!(*dtype, dense_ref::<T>(py, data, mask, f), bf16 => {
                    let arr: PyReadonlyArrayDyn<'_, u16> = data.bind(py).extract()?;
                    // SAFETY: bf16 and u16 have one size and alignment; every bit pattern is
                    // a bf16
                    let v = unsafe { recast_view::<u16, bf16>(arr.as_array()) };
                    with_mask(v, mask, f)
                })
            }
            Store::Csr { dtype, .. } => by_dtype!(*dtype, csr_ref::<T>(py, self, f), bf16 => {
                bf16_csr(py, self, f)
            }),
            Store::Coo(a) => f(a.view().map_err(py_err)?),
            Store::Bool { .. } | Store::BoolSparse { .. } => Err(PyTypeError::new_err(
                "a bool array (a comparison's result) takes no engine op: use its values, \
                 valid, filled() or compressed()",
            )),
        }
    }

    fn dtype_name(&self) -> &'static str {
        match self {
            Store::Dense { dtype, .. } | Store::Csr { dtype, .. } => dtype.name(),
            Store::Coo(a) => a.dtype().name(),
            Store::Bool { .. } | Store::BoolSparse { .. } => "bool",
        }
    }

    fn layout(&self) -> &'static str {
        match self {
            Store::Dense { .. } | Store::Bool { .. } => "dense",
            Store::Csr { .. } => "csr",
            Store::Coo(_) | Store::BoolSparse { .. } => "coo",
        }
    }
}

/// A 1-D numpy array's values as a `DynVec` of `dtype` (one copy).
fn dynvec_from(py: Python<'_>, a: &Bound<'_, PyAny>, dtype: DType) -> PyResult<DynVec> {
    fn get<T: numpy::Element + masked_core::gather::ZeroBits + Sync>(
        a: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<T>> {
        let r: PyReadonlyArrayDyn<'_, T> = a.extract()?;
        // one copy (a strided view gathered row by row)
        Ok(masked_core::gather::row_major_values(&r.as_array()).into_owned())
    }
    let _ = py;
    Ok(match dtype {
        DType::F32 => DynVec::F32(get(a)?),
        DType::F64 => DynVec::F64(get(a)?),
        DType::F16 => DynVec::F16(get(a)?),
        // SAFETY: every u16 is a bf16
        DType::BF16 => DynVec::BF16(unsafe { recast_vec::<u16, bf16>(get(a)?) }),
        DType::I32 => DynVec::I32(get(a)?),
        DType::I64 => DynVec::I64(get(a)?),
    })
}

/// A map VJP's upstream values and saved output values, each a 1-D numpy array and its
/// dtype.
type UpstreamArrays<'h> = ((&'h Py<PyAny>, DType), Option<(&'h Py<PyAny>, DType)>);

/// `f` on a 1-D numpy array's values of `dtype`, borrowed in place (a strided view
/// gathered first).
fn with_values<R>(
    py: Python<'_>, (a, dtype): (&Py<PyAny>, DType),
    f: impl FnOnce(ByDType<SliceOf<'_>>) -> PyResult<R>,
) -> PyResult<R> {
    fn on<T: numpy::Element + masked_core::gather::ZeroBits + Sync, R>(
        a: &Bound<'_, PyAny>, f: impl FnOnce(&[T]) -> PyResult<R>,
    ) -> PyResult<R> {
        let r: PyReadonlyArrayDyn<'_, T> = a.extract()?;
        let v = r.as_array();
        f(&masked_core::gather::row_major_values(&v))
    }
    let a = a.bind(py);
    match dtype {
        DType::F32 => on(a, |s| f(ByDType::F32(s))),
        DType::F64 => on(a, |s| f(ByDType::F64(s))),
        DType::F16 => on(a, |s| f(ByDType::F16(s))),
        DType::BF16 => on(a, |s: &[u16]| {
            // SAFETY: same size and alignment, every bit pattern a bf16
            let s: &[bf16] = unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), s.len()) };
            f(ByDType::BF16(s))
        }),
        DType::I32 => on(a, |s| f(ByDType::I32(s))),
        DType::I64 => on(a, |s| f(ByDType::I64(s))),
    }
}

/// The CSR structure of a sparse 2-D outcome (flat row-major positions, increasing):
/// one walk over the positions and the rows, no division per entry.
fn csr_structure(shape: (usize, usize), flat: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let (nrows, ncols) = shape;
    let mut indptr = Vec::with_capacity(nrows + 1);
    let mut indices = Vec::with_capacity(flat.len());
    indptr.push(0);
    let (mut row, mut start) = (0usize, 0usize);
    for &p in flat {
        while p >= start + ncols {
            indptr.push(indices.len());
            row += 1;
            start += ncols;
        }
        indices.push(p - start);
    }
    while row < nrows {
        indptr.push(indices.len());
        row += 1;
    }
    (indptr, indices)
}

fn sparse_handle(py: Python<'_>, s: SparseOutcome, as_csr: bool) -> PyResult<Handle> {
    if as_csr && s.shape.len() == 2 {
        let shape = (s.shape[0], s.shape[1]);
        let dtype = s.values.dtype();
        let (indptr, indices) = if shape.1 == 0 {
            (vec![0; shape.0 + 1], vec![])
        } else {
            csr_structure(shape, &s.indices)
        };
        let n = indices.len();
        return Ok(Handle {
            store: Store::Csr {
                shape,
                indptr_obj: usize_to_numpy(py, indptr.clone(), &[shape.0 + 1])?,
                indptr,
                indices: usize_to_numpy(py, indices, &[n])?,
                wide: true,
                data: dyn_to_numpy(py, s.values, &[n])?,
                dtype,
                mask: CsrMaskSpec::Stored,
            },
        });
    }
    // the positions come sorted and distinct: a pattern from them as they are (no
    // coordinate arrays, no canonical sort)
    let a = engine(py, move || {
        let p = CooPattern::from_flat(&s.shape[..], &s.indices)?;
        coo_array(p, s.values)
    })?;
    Ok(Handle {
        store: Store::Coo(a),
    })
}

/// A COO array of `values` stored at `p`, masked by its stored entries.
fn coo_array(p: CooPattern, values: DynVec) -> Result<Array, Error> {
    fn coo<T: masked_core::Element>(p: CooPattern, v: Vec<T>) -> Result<Array, Error> {
        Ok(Array::from_coo(MaskedCoo::from_parts(
            p,
            v,
            CooMask::Stored,
        )?))
    }
    match values {
        DynVec::F32(v) => coo(p, v),
        DynVec::F64(v) => coo(p, v),
        DynVec::F16(v) => coo(p, v),
        DynVec::BF16(v) => coo(p, v),
        DynVec::I32(v) => coo(p, v),
        DynVec::I64(v) => coo(p, v),
    }
}

fn output_handle(py: Python<'_>, out: Output, csr: bool) -> PyResult<Handle> {
    match out {
        Output::Dense(o) => Ok(Handle {
            store: Store::Dense {
                dtype: o.values.dtype(),
                data: dyn_to_numpy(py, o.values, &o.shape)?,
                mask: Some(o.mask),
            },
        }),
        Output::Sparse(s) => sparse_handle(py, s, csr),
        Output::Csr(r) => csr_handle(py, r),
        // on its pattern as it is (a map's shares its input's coordinates)
        Output::Coo(c) => Ok(Handle {
            store: Store::Coo(engine(py, move || coo_array(c.pattern, c.values))?),
        }),
    }
}

/// Whether two CSR handles' column index arrays (int64 when `wide`, else int32) hold the
/// same indices: the same array (a forward result shares its input's), or equal ones.
fn same_indices(py: Python<'_>, a: &Py<PyAny>, b: &Py<PyAny>, wide: bool) -> PyResult<bool> {
    fn equal<N: numpy::Element + PartialEq>(
        py: Python<'_>, a: &Py<PyAny>, b: &Py<PyAny>,
    ) -> PyResult<bool> {
        let (x, y): (PyReadonlyArray1<'_, N>, PyReadonlyArray1<'_, N>) =
            (a.bind(py).extract()?, b.bind(py).extract()?);
        Ok(x.as_array() == y.as_array())
    }
    if a.is(b) {
        return Ok(true);
    }
    if wide {
        equal::<i64>(py, a, b)
    } else {
        equal::<i32>(py, a, b)
    }
}

/// A CSR map's result as rows, on its own index arrays (moved into numpy, not copied).
fn csr_handle(py: Python<'_>, r: CsrOutcome) -> PyResult<Handle> {
    let (shape, n, dtype) = ((r.shape[0], r.shape[1]), r.values.len(), r.values.dtype());
    let (indices, wide) = match r.cols {
        CsrCols::Usize(c) => (usize_to_numpy(py, c, &[n])?, true),
        // SAFETY: column indices are far below i32::MAX (they fit the u32 they came as,
        // and the matrix they came from held them as int32)
        CsrCols::U32(c) => (
            PyArray1::from_vec(py, unsafe { recast_vec::<u32, i32>(c) })
                .into_any()
                .unbind(),
            false,
        ),
        CsrCols::Input => {
            return Err(PyRuntimeError::new_err(
                "a CSR result on its input's structure without the input",
            ))
        }
    };
    Ok(Handle {
        store: Store::Csr {
            shape,
            indptr_obj: usize_to_numpy(py, r.indptr.clone(), &[shape.0 + 1])?,
            indptr: r.indptr,
            indices,
            wide,
            data: dyn_to_numpy(py, r.values, &[n])?,
            dtype,
            mask: CsrMaskSpec::Stored,
        },
    })
}

/// A binary op's result; `left`, the left operand the engine ran on (whose structure a
/// CSR result on its input's entries shares).
fn zip_handle(py: Python<'_>, out: ZipOutput, csr: bool, left: &Handle) -> PyResult<Handle> {
    match out {
        ZipOutput::Csr(r) => match r.values {
            Values::Num(v) if r.cols == CsrCols::Input => {
                let (n, dtype) = (v.len(), v.dtype());
                left.on_structure(py, dyn_to_numpy(py, v, &[n])?, dtype)
            }
            Values::Num(v) => csr_handle(
                py,
                CsrOutcome {
                    shape: r.shape,
                    indptr: r.indptr,
                    cols: r.cols,
                    values: v,
                },
            ),
            Values::Bool(_) => Err(PyRuntimeError::new_err(
                "a bool CSR result as rows (the engine hands bools as positions)",
            )),
        },
        ZipOutput::Dense(o) => match o.values {
            Values::Num(v) => output_handle(
                py,
                Output::Dense(masked_engine::Outcome {
                    shape: o.shape,
                    values: v,
                    mask: o.mask,
                }),
                csr,
            ),
            Values::Bool(b) => Ok(Handle {
                store: Store::Bool {
                    data: dense_bools(py, b, &o.shape)?,
                    mask: o.mask,
                },
            }),
        },
        ZipOutput::Sparse(s) => match s.values {
            Values::Num(v) => sparse_handle(
                py,
                SparseOutcome {
                    shape: s.shape,
                    indices: s.indices,
                    values: v,
                },
                csr,
            ),
            Values::Bool(b) => {
                let n = b.len();
                let coords = masked_core::sparse::unravel(&s.shape, &s.indices);
                let ndim = s.shape.len();
                let flat: Vec<usize> = coords.into_iter().flatten().collect();
                Ok(Handle {
                    store: Store::BoolSparse {
                        coords: usize_to_numpy(py, flat, &[ndim, n])?,
                        values: dense_bools(py, b, &[n])?,
                        shape: s.shape,
                    },
                })
            }
        },
    }
}

/// A request from the Python call's pieces.
fn request(
    op: &str, dims: Option<Vec<isize>>, keepdim: bool, options: Vec<(String, String)>,
    dtype: Option<&str>,
) -> PyResult<OpRequest> {
    let mut req = OpRequest::new(op).map_err(py_err)?;
    if let Some(d) = dims {
        req = req.dims(d);
    }
    req = req.keepdim(keepdim);
    for (k, v) in options {
        req.set_option(&k, &v).map_err(py_err)?;
    }
    if let Some(d) = dtype {
        req = req.dtype(dtype_of(d)?);
    }
    Ok(req)
}

/// A mask rule's name (`strict`, `and`) as the rule (`MaskedError`, a `ValueError`, for
/// any other).
fn mask_rule(rule: &str) -> PyResult<MaskRule> {
    rule.parse().map_err(py_err)
}

/// A Python scalar (bool, int or float) as the engine's scalar.
fn scalar_of(x: &Bound<'_, PyAny>) -> PyResult<Scalar> {
    if let Ok(b) = x.extract::<bool>() {
        return Ok(Scalar::Int(b as i64));
    }
    if let Ok(i) = x.extract::<i64>() {
        return Ok(Scalar::Int(i));
    }
    if let Ok(f) = x.extract::<f64>() {
        return Ok(Scalar::Float(f));
    }
    Err(PyTypeError::new_err(format!(
        "expected a MaskedArray or a Python scalar, got {}",
        x.get_type().name()?
    )))
}

#[pymethods]
impl Handle {
    /// A dense masked array over the numpy array `data` (no copy; bf16 as `uint16`
    /// bits with `dtype="bf16"`), with `valid` a numpy bool array broadcastable to it
    /// (`invert=True`: True means masked out, numpy.ma's convention) or None.
    #[staticmethod]
    #[pyo3(signature = (data, dtype, valid=None, invert=false))]
    fn dense(
        py: Python<'_>, data: Bound<'_, PyAny>, dtype: &str, valid: Option<Bound<'_, PyAny>>,
        invert: bool,
    ) -> PyResult<Handle> {
        let dtype = dtype_of(dtype)?;
        let shape: Vec<usize> = {
            let a = data
                .cast::<numpy::PyUntypedArray>()
                .map_err(|_| PyTypeError::new_err("data must be a numpy array"))?;
            a.shape().to_vec()
        };
        let mask = match valid {
            None => None,
            Some(v) => {
                let b = bits_from(&v)?;
                let b = engine(py, move || {
                    let b = b.broadcast_to(&shape)?;
                    Ok(if invert { b.not() } else { b })
                })?;
                Some(b)
            }
        };
        let h = Handle {
            store: Store::Dense {
                data: data.unbind(),
                dtype,
                mask,
            },
        };
        // the data has the dtype it claims (a typed view is taken once here)
        h.store.with_ref(py, |_| Ok(()))?;
        Ok(h)
    }

    /// A CSR matrix over scipy's buffers (no copy of `indices` or `data`; an int32
    /// `indptr` is widened once): `mask_kind` is "pattern" (the stored entries are the
    /// valid ones), "all", or "other" with the valid pattern given by
    /// (`mask_indptr`, `mask_indices`). The structure is validated here, once.
    #[staticmethod]
    #[pyo3(signature = (shape, indptr, indices, data, dtype, mask_kind, mask_indptr=None, mask_indices=None))]
    fn csr(
        py: Python<'_>, shape: (usize, usize), indptr: Bound<'_, PyAny>, indices: Bound<'_, PyAny>,
        data: Bound<'_, PyAny>, dtype: &str, mask_kind: &str,
        mask_indptr: Option<Bound<'_, PyAny>>, mask_indices: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Handle> {
        let dtype = dtype_of(dtype)?;
        let ptr = usize_vec(&indptr, "indptr")?;
        let wide = if indices.extract::<PyReadonlyArray1<'_, i64>>().is_ok() {
            true
        } else if indices.extract::<PyReadonlyArray1<'_, i32>>().is_ok() {
            false
        } else {
            return Err(PyTypeError::new_err(
                "CSR indices must be a contiguous 1-D int32 or int64 array",
            ));
        };
        let mask = match mask_kind {
            "pattern" => CsrMaskSpec::Stored,
            "all" => CsrMaskSpec::All,
            "other" => {
                let (Some(mp), Some(mi)) = (mask_indptr, mask_indices) else {
                    return Err(PyValueError::new_err(
                        "mask_kind='other' needs mask_indptr and mask_indices",
                    ));
                };
                let mp = usize_vec(&mp, "mask indptr")?;
                let mi = usize_vec(&mi, "mask indices")?;
                if wide {
                    CsrMaskSpec::Pattern(engine(py, move || {
                        PatternI::try_from_parts(shape, mp, mi)
                    })?)
                } else {
                    let mi: Vec<u32> = mi
                        .into_iter()
                        .map(|x| {
                            u32::try_from(x)
                                .map_err(|_| MaskedError::new_err("mask index beyond u32"))
                        })
                        .collect::<PyResult<_>>()?;
                    CsrMaskSpec::Pattern32(engine(py, move || {
                        PatternI::try_from_parts(shape, mp, mi)
                    })?)
                }
            }
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown CSR mask kind {other:?}"
                )))
            }
        };
        let h = Handle {
            store: Store::Csr {
                shape,
                indptr: ptr,
                indptr_obj: indptr.unbind(),
                indices: indices.unbind(),
                wide,
                data: data.unbind(),
                dtype,
                mask,
            },
        };
        h.validate_csr(py)?;
        Ok(h)
    }

    /// An n-D COO array (copied into the engine, stored sorted): `coords` int64
    /// `[ndim, nnz]` in any order, `values` 1-D; `mask_kind` "pattern", "all", "coords"
    /// (`mask` an int64 `[ndim, k]` array of the valid positions) or "dense" (`mask` a
    /// numpy bool array of the shape).
    #[staticmethod]
    #[pyo3(signature = (shape, coords, values, dtype, mask_kind, mask=None))]
    fn coo(
        py: Python<'_>, shape: Vec<usize>, coords: Bound<'_, PyAny>, values: Bound<'_, PyAny>,
        dtype: &str, mask_kind: &str, mask: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Handle> {
        let dtype = dtype_of(dtype)?;
        let c = coords_from(&coords)?;
        let v = dynvec_from(py, &values, dtype)?;
        let mask = match (mask_kind, mask) {
            ("pattern", _) => CooMask::Stored,
            ("all", _) => CooMask::All,
            ("coords", Some(m)) => {
                let mc = coords_from(&m)?;
                let s = shape.clone();
                CooMask::Pattern(engine(py, move || CooPattern::from_coords(&s[..], &mc))?)
            }
            ("dense", Some(m)) => {
                let b: PyReadonlyArrayDyn<'_, bool> = m.extract()?;
                CooMask::Pattern(CooPattern::from_array(b.as_array()).map_err(py_err)?)
            }
            (k, _) => {
                return Err(PyValueError::new_err(format!(
                    "unknown COO mask kind {k:?} (or its mask missing)"
                )))
            }
        };
        let a = engine(py, move || Array::coo(&shape, &c, v, mask))?;
        Ok(Handle {
            store: Store::Coo(a),
        })
    }

    /// A dense bool array (mask logic on comparison results): `data` numpy bools, `valid`
    /// numpy bools broadcastable to it.
    #[staticmethod]
    fn bools(py: Python<'_>, data: Bound<'_, PyAny>, valid: Bound<'_, PyAny>) -> PyResult<Handle> {
        let shape = data
            .cast::<PyArrayDyn<bool>>()
            .map_err(|_| PyTypeError::new_err("data must be a numpy bool array"))?
            .shape()
            .to_vec();
        let b = bits_from(&valid)?;
        let mask = engine(py, move || b.broadcast_to(&shape))?;
        Ok(Handle {
            store: Store::Bool {
                data: data.unbind(),
                mask,
            },
        })
    }

    /// The dtype's name (`f32`, `bf16`, ..., `bool` for a comparison's result).
    #[getter]
    fn dtype(&self) -> &'static str {
        self.store.dtype_name()
    }

    /// `dense`, `csr` or `coo`.
    #[getter]
    fn layout(&self) -> &'static str {
        self.store.layout()
    }

    /// The shape.
    #[getter]
    fn shape(&self, py: Python<'_>) -> PyResult<Vec<usize>> {
        Ok(match &self.store {
            Store::Dense { data, .. } | Store::Bool { data, .. } => data
                .bind(py)
                .cast::<numpy::PyUntypedArray>()?
                .shape()
                .to_vec(),
            Store::Csr { shape, .. } => vec![shape.0, shape.1],
            Store::Coo(a) => a.shape(),
            Store::BoolSparse { shape, .. } => shape.clone(),
        })
    }

    /// The numpy array of values this handle computes on (dense: the caller's array, no
    /// copy; CSR: the stored values; COO: a copy of the sorted stored values).
    fn data(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &self.store {
            Store::Dense { data, .. } | Store::Bool { data, .. } | Store::Csr { data, .. } => {
                Ok(data.clone_ref(py))
            }
            Store::BoolSparse { values, .. } => Ok(values.clone_ref(py)),
            Store::Coo(a) => {
                let Output::Sparse(s) =
                    a.view().map_err(py_err)?.cast(a.dtype()).map_err(py_err)?
                else {
                    unreachable!("a COO cast is sparse")
                };
                let n = s.values.len();
                dyn_to_numpy(py, s.values, &[n])
            }
        }
    }

    /// Dense: the validity as numpy bools of the data's shape, or None (all valid).
    fn valid(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        match &self.store {
            Store::Dense { mask, .. } => mask.as_ref().map(|m| bits_to_numpy(py, m)).transpose(),
            Store::Bool { mask, .. } => Ok(Some(bits_to_numpy(py, mask)?)),
            _ => Err(PyTypeError::new_err("valid() is the dense layout's; a sparse array's valid positions are valid_coords()")),
        }
    }

    /// Dense: the validity written into `buf`, a writable C-contiguous numpy bool array
    /// of the data's size (no array allocated).
    fn valid_into(&self, buf: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut w: PyReadwriteArrayDyn<'_, bool> = buf
            .extract()
            .map_err(|_| PyTypeError::new_err("valid_into takes a writable numpy bool array"))?;
        let out = w
            .as_slice_mut()
            .map_err(|_| MaskedError::new_err("valid_into needs a C-contiguous bool array"))?;
        match &self.store {
            Store::Dense { mask: Some(m), .. } | Store::Bool { mask: m, .. } => {
                m.write_bools(out).map_err(py_err)
            }
            Store::Dense {
                mask: None, data, ..
            } => {
                let n: usize = data.bind(buf.py()).getattr("size")?.extract()?;
                if out.len() != n {
                    return Err(MaskedError::new_err(format!(
                        "valid_into: {} slots for {n} elements",
                        out.len()
                    )));
                }
                out.fill(true);
                Ok(())
            }
            _ => Err(PyTypeError::new_err("valid_into() is the dense layout's")),
        }
    }

    /// Sparse: the valid positions (int64 `[ndim, k]`, row-major order) and their values.
    fn valid_entries(&self, py: Python<'_>) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
        if let Store::BoolSparse { coords, values, .. } = &self.store {
            return Ok((coords.clone_ref(py), values.clone_ref(py)));
        }
        let out = self
            .store
            .with_ref(py, |r| engine(py, move || r.fill_zero()))?;
        let Output::Sparse(s) = out else {
            return Err(PyTypeError::new_err(
                "valid_entries() is the sparse layouts'",
            ));
        };
        let n = s.indices.len();
        let ndim = s.shape.len();
        let flat: Vec<usize> = s.coords().into_iter().flatten().collect();
        Ok((
            usize_to_numpy(py, flat, &[ndim, n])?,
            dyn_to_numpy(py, s.values, &[n])?,
        ))
    }

    /// The valid values, 1-D in row-major order (a dense array's packed by the mask
    /// bits in parallel; a numpy array owning the engine's buffer).
    fn compressed(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let v = self
            .store
            .with_ref(py, |r| engine(py, move || r.compressed()))?;
        let n = v.len();
        dyn_to_numpy(py, v, &[n])
    }

    /// CSR: `(indptr, indices, data)` as the handle holds them, and the mask kind.
    fn csr_parts(&self, py: Python<'_>) -> PyResult<CsrPartsPy> {
        match &self.store {
            Store::Csr {
                indptr_obj,
                indices,
                data,
                mask,
                ..
            } => Ok((
                indptr_obj.clone_ref(py),
                indices.clone_ref(py),
                data.clone_ref(py),
                match mask {
                    CsrMaskSpec::Stored => "pattern",
                    CsrMaskSpec::All => "all",
                    _ => "other",
                },
            )),
            _ => Err(PyTypeError::new_err("csr_parts() is the CSR layout's")),
        }
    }

    /// Stored entries (dense: every element).
    #[getter]
    fn nnz(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(match &self.store {
            Store::Csr { indptr, .. } => indptr[indptr.len() - 1],
            Store::Coo(a) => a.nnz(),
            Store::BoolSparse { shape, .. } => {
                let _ = shape;
                self.valid_entries(py)?.1.bind(py).len()?
            }
            _ => self.shape(py)?.iter().product(),
        })
    }

    /// Runs a reduction, normalization or unary op of the registry by name: `dims`
    /// None for every dim, `options` (name, text) pairs as the CLI takes them, `dtype`
    /// the dtype to compute in (torch's `dtype=`).
    #[pyo3(signature = (op, dims=None, keepdim=false, options=vec![], dtype=None))]
    fn apply(
        &self, py: Python<'_>, op: &str, dims: Option<Vec<isize>>, keepdim: bool,
        options: Vec<(String, String)>, dtype: Option<&str>,
    ) -> PyResult<Handle> {
        let req = request(op, dims, keepdim, options, dtype)?;
        let out = self
            .store
            .with_ref(py, |r| engine(py, || r.apply_rows(&req)))?;
        let out = match self.same_structure(py, out)? {
            Ok(h) => return Ok(h),
            Err(out) => out,
        };
        let csr = matches!(self.store, Store::Csr { .. });
        output_handle(py, out, csr)
    }

    /// The op of the request with its values written into `out`'s data buffer (a dense
    /// handle of the result's shape and dtype over a C-contiguous, writable array; or,
    /// for a normalization or elementwise op of a CSR handle whose mask is its pattern,
    /// a CSR handle of the same structure whose data has the result's dtype): the
    /// kernel writes there, no fresh buffer and no copy. Returns a handle over that same
    /// buffer with the result's mask. The buffer must not overlap the input (a borrow
    /// error otherwise).
    #[pyo3(signature = (op, out, dims=None, keepdim=false, options=vec![]))]
    fn apply_into(
        &self, py: Python<'_>, op: &str, out: &Handle, dims: Option<Vec<isize>>, keepdim: bool,
        options: Vec<(String, String)>,
    ) -> PyResult<Handle> {
        let req = request(op, dims, keepdim, options, None)?;
        let (data, dtype) = match &out.store {
            Store::Dense { data, dtype, .. } => {
                if !matches!(self.store, Store::Dense { .. }) {
                    return Err(PyTypeError::new_err(
                        "out= of a sparse input takes a CSR array of its structure",
                    ));
                }
                (data, dtype)
            }
            Store::Csr { data, dtype, .. } => {
                self.check_same_csr_structure(py, out)?;
                (data, dtype)
            }
            _ => return Err(PyTypeError::new_err("out= takes a dense or CSR array")),
        };
        let arr = data.bind(py);
        let run = |buf: ByDType<SliceMutOf<'_>>| {
            self.store
                .with_ref(py, |x| engine(py, move || x.apply_into(&req, buf)))
        };
        let contiguous = |_| MaskedError::new_err("out= needs a C-contiguous, writable buffer");
        macro_rules! into {
            ($t:ty, $var:ident) => {{
                let mut w: PyReadwriteArrayDyn<'_, $t> = arr.extract()?;
                run(ByDType::$var(w.as_slice_mut().map_err(contiguous)?))?
            }};
        }
        let mask = match dtype {
            DType::F32 => into!(f32, F32),
            DType::F64 => into!(f64, F64),
            DType::F16 => into!(f16, F16),
            DType::I32 => into!(i32, I32),
            DType::I64 => into!(i64, I64),
            DType::BF16 => {
                let mut w: PyReadwriteArrayDyn<'_, u16> = arr.extract()?;
                let s = w.as_slice_mut().map_err(contiguous)?;
                // SAFETY: bf16 is a u16 of the same size and alignment; every bit pattern
                // is a bf16 and the buffer is held as u16 (the store's bf16 form)
                let s = unsafe { &mut *(s as *mut [u16] as *mut [bf16]) };
                run(ByDType::BF16(s))?
            }
        };
        if let Store::Csr { .. } = &out.store {
            // the input's mask is its pattern: every slot is valid
            if mask.count_ones() != mask.len() {
                return Err(MaskedError::new_err(
                    "out=: a CSR result with masked-out entries",
                ));
            }
            return out.on_structure(py, data.clone_ref(py), *dtype);
        }
        Ok(Handle {
            store: Store::Dense {
                dtype: *dtype,
                data: data.clone_ref(py),
                mask: Some(mask),
            },
        })
    }

    /// Checks that `out` is a CSR handle of this CSR handle's structure (shape, row
    /// pointer and column indices: the same arrays, or equal ones) and that both have
    /// their pattern as their mask: a normalization's result on it is exactly one value
    /// per stored entry, all valid.
    fn check_same_csr_structure(&self, py: Python<'_>, out: &Handle) -> PyResult<()> {
        let (
            Store::Csr {
                shape,
                indptr,
                indices,
                mask: CsrMaskSpec::Stored,
                ..
            },
            Store::Csr {
                shape: oshape,
                indptr: optr,
                indices: oind,
                mask: CsrMaskSpec::Stored,
                ..
            },
        ) = (&self.store, &out.store)
        else {
            return Err(PyTypeError::new_err(
                "out= with a CSR array: the input and out are CSR arrays whose mask is their \
                 stored pattern (mask=\"pattern\")",
            ));
        };
        let same_indices = indices.bind(py).is(oind.bind(py)) || {
            let np = py.import("numpy")?;
            np.call_method1("array_equal", (indices.bind(py), oind.bind(py)))?
                .extract::<bool>()?
        };
        if shape != oshape || indptr != optr || !same_indices {
            return Err(MaskedError::new_err(
                "out= has another CSR structure than the input (its shape, indptr and \
                 indices must be the input's)",
            ));
        }
        Ok(())
    }

    /// Each lane's `(n, mean, m2)` over `dims` (None: every dim), in one pass: the valid
    /// count (int64), the mean and the sum of squared deviations from it (float64), as
    /// numpy arrays of the reduced shape (`keepdim`: the reduced dims kept as 1). The
    /// mergeable state of var, std and mean (a Dask chunk's partial state). Dense only.
    #[pyo3(signature = (dims=None, keepdim=false))]
    fn moments(
        &self, py: Python<'_>, dims: Option<Vec<isize>>, keepdim: bool,
    ) -> PyResult<(Py<PyAny>, Py<PyAny>, Py<PyAny>)> {
        let dims = dims.map_or(masked_core::Dims::All, masked_core::Dims::from);
        let m = self
            .store
            .with_ref(py, |r| engine(py, || r.moments(&dims, keepdim)))?;
        Ok((
            dyn_to_numpy(py, DynVec::I64(m.n), &m.shape)?,
            dyn_to_numpy(py, DynVec::F64(m.mean), &m.shape)?,
            dyn_to_numpy(py, DynVec::F64(m.m2), &m.shape)?,
        ))
    }

    /// The gradient with respect to this array's values of the op of the request, given
    /// the upstream gradient `g` shaped as the forward output (dense: an array of its
    /// shape; sparse: a sparse handle stored at exactly the forward output's valid
    /// positions) and, when kept, `saved`: the forward output itself (the ops whose
    /// gradient reads their output then do not run the forward pass again).
    #[pyo3(signature = (op, g, dims=None, keepdim=false, options=vec![], saved=None))]
    fn vjp(
        &self, py: Python<'_>, op: &str, g: &Handle, dims: Option<Vec<isize>>, keepdim: bool,
        options: Vec<(String, String)>, saved: Option<&Handle>,
    ) -> PyResult<Handle> {
        let req = request(op, dims, keepdim, options, None)?;
        let dense = |h: &Handle| matches!(h.store, Store::Dense { .. });
        if dense(self) && dense(g) && saved.is_none_or(dense) {
            // dense: the upstream and the saved output read in place (no copy)
            let out = self.store.with_ref(py, |x| {
                g.store.with_ref(py, |gr| match saved {
                    Some(h) => h
                        .store
                        .with_ref(py, |yr| engine(py, || x.vjp_dense(&req, Some(&yr), &gr))),
                    None => engine(py, || x.vjp_dense(&req, None, &gr)),
                })
            })?;
            return output_handle(py, out, false);
        }
        if let Some((gd, yd)) = self.map_upstream_values(py, &req, g, saved)? {
            // a CSR map: the upstream (and saved output) as values, read in place from
            // their numpy buffers; the gradient as rows
            let run = |yv: Option<ByDType<SliceOf<'_>>>, gv: ByDType<SliceOf<'_>>| {
                self.store
                    .with_ref(py, |r| engine(py, move || r.vjp_map_values(&req, yv, gv)))
            };
            let out = with_values(py, gd, |gv| match yd {
                Some(yd) => with_values(py, yd, |yv| run(Some(yv), gv)),
                None => run(None, gv),
            })?;
            return match self.same_structure(py, out)? {
                Ok(h) => Ok(h),
                Err(out) => output_handle(py, out, true),
            };
        }
        let up = g.as_output(py)?;
        let saved = saved.map(|h| h.as_output(py)).transpose()?;
        let out = self.store.with_ref(py, |r| {
            engine(py, || r.vjp_saved_rows(&req, saved.as_ref(), &up))
        })?;
        let out = match self.same_structure(py, out)? {
            Ok(h) => return Ok(h),
            Err(out) => out,
        };
        let csr = matches!(self.store, Store::Csr { .. });
        output_handle(py, out, csr)
    }

    /// The gradients of the binary op `op` with respect to this array's and `other`'s
    /// values (dense operands of one dtype), given the upstream gradient `g` of the
    /// forward output's shape, under `rule`.
    #[pyo3(signature = (other, op, g, rule="strict"))]
    fn vjp_binary(
        &self, py: Python<'_>, other: &Handle, op: &str, g: &Handle, rule: &str,
    ) -> PyResult<(Handle, Handle)> {
        let req = request(op, None, false, vec![], None)?;
        let rule = mask_rule(rule)?;
        let up = match &g.store {
            Store::Dense { .. } => g.as_output(py)?,
            _ => {
                return Err(PyTypeError::new_err(
                    "a binary VJP's upstream gradient is dense",
                ))
            }
        };
        let (dx, dy) = self.store.with_ref(py, |a| {
            other
                .store
                .with_ref(py, |b| engine(py, || a.vjp_binary(&b, &req, rule, &up)))
        })?;
        Ok((output_handle(py, dx, false)?, output_handle(py, dy, false)?))
    }

    /// The binary op `op` (a registry name) with `other` (a handle or a Python scalar)
    /// under `rule` ("strict" or "and"); `swapped` computes `op(other, self)`. Operands of
    /// two dtypes are promoted first (torch's rules).
    #[pyo3(signature = (other, op, rule="strict", swapped=false))]
    fn binary(
        &self, py: Python<'_>, other: Bound<'_, PyAny>, op: &str, rule: &str, swapped: bool,
    ) -> PyResult<Handle> {
        let bop = op
            .parse::<Op>()
            .map_err(py_err)?
            .binary()
            .ok_or_else(|| MaskedError::new_err(format!("{op} is not a binary op")))?;
        let rule = mask_rule(rule)?;
        let csr = matches!(self.store, Store::Csr { .. });
        let mine = dtype_of(self.store.dtype_name())?;
        if let Ok(h) = other.cast::<Handle>() {
            let h = h.get();
            let theirs = dtype_of(h.store.dtype_name())?;
            let to = promote(mine, theirs);
            let a = if to == mine {
                None
            } else {
                Some(self.cast(py, to.name())?)
            };
            let b = if to == theirs {
                None
            } else {
                Some(h.cast(py, to.name())?)
            };
            let a = a.as_ref().unwrap_or(self);
            let b = b.as_ref().unwrap_or(h);
            let out = a.store.with_ref(py, |ra| {
                b.store.with_ref(py, |rb| {
                    engine(py, || {
                        ra.binary_rows(Operand::Array(&rb), bop, rule, swapped)
                    })
                })
            })?;
            return zip_handle(py, out, csr || matches!(b.store, Store::Csr { .. }), a);
        }
        let s = scalar_of(&other)?;
        let to = promote_scalar(mine, s);
        let a = if to == mine {
            None
        } else {
            Some(self.cast(py, to.name())?)
        };
        let a = a.as_ref().unwrap_or(self);
        let out = a.store.with_ref(py, |r| {
            engine(py, || r.binary_rows(Operand::Scalar(s), bop, rule, swapped))
        })?;
        zip_handle(py, out, csr, a)
    }

    /// The values cast to `dtype` (mask and positions kept).
    fn cast(&self, py: Python<'_>, dtype: &str) -> PyResult<Handle> {
        let to = dtype_of(dtype)?;
        let out = self
            .store
            .with_ref(py, |r| engine(py, || r.cast_rows(to)))?;
        let out = match self.same_structure(py, out)? {
            Ok(h) => return Ok(h),
            Err(out) => out,
        };
        output_handle(py, out, matches!(self.store, Store::Csr { .. }))
    }

    /// A dense array with `value` at every invalid position (explicit densification).
    fn filled(&self, py: Python<'_>, value: Bound<'_, PyAny>) -> PyResult<Handle> {
        let s = scalar_of(&value)?;
        let out = self.store.with_ref(py, |r| engine(py, || r.filled(s)))?;
        output_handle(py, out, false)
    }

    /// `where(cond, self, other)`: `cond` a numpy bool array broadcastable to the shape.
    fn select(&self, py: Python<'_>, cond: Bound<'_, PyAny>, other: &Handle) -> PyResult<Handle> {
        let c = bits_from(&cond)?;
        let out = self.store.with_ref(py, |a| {
            other
                .store
                .with_ref(py, |b| engine(py, || a.select(&c, &b)))
        })?;
        output_handle(py, out, matches!(self.store, Store::Csr { .. }))
    }
}

impl Handle {
    /// This handle as an engine output of its layout kind, as a VJP reads an upstream
    /// gradient or a saved forward output: dense, its values (a dense upstream's mask is
    /// not read); sparse, its valid entries with their values.
    fn as_output(&self, py: Python<'_>) -> PyResult<Output> {
        match &self.store {
            Store::Dense { data, dtype, .. } => {
                let shape = self.shape(py)?;
                let values = dynvec_from(py, data.bind(py), *dtype)?;
                Ok(Output::Dense(masked_engine::Outcome {
                    mask: BitMask::filled(&shape[..], true).map_err(py_err)?,
                    shape,
                    values,
                }))
            }
            _ => self
                .store
                .with_ref(py, |r| engine(py, move || r.fill_zero())),
        }
    }

    /// For a map's VJP on this CSR matrix: the values of the upstream `g` and of the
    /// saved output, when each is a CSR handle masked by its stored entries on this
    /// matrix's row pointer (a forward map's result of this matrix is): its stored
    /// values are the valid ones, in the forward output's order. `None` where that does
    /// not hold (the positioned path then runs).
    fn map_upstream_values<'h>(
        &self, py: Python<'_>, req: &OpRequest, g: &'h Handle, saved: Option<&'h Handle>,
    ) -> PyResult<Option<UpstreamArrays<'h>>> {
        let Store::Csr {
            indptr: mine,
            indices: my_cols,
            wide: my_wide,
            mask: CsrMaskSpec::Stored,
            ..
        } = &self.store
        else {
            return Ok(None);
        };
        if !matches!(req.op.kind(), Kind::Normalize | Kind::Unary) {
            return Ok(None);
        }
        let values = |h: &'h Handle| -> PyResult<Option<(&'h Py<PyAny>, DType)>> {
            match &h.store {
                Store::Csr {
                    indptr,
                    indices,
                    wide,
                    data,
                    dtype,
                    mask: CsrMaskSpec::Stored,
                    ..
                } if indptr == mine
                    && wide == my_wide
                    && same_indices(py, indices, my_cols, *wide)? =>
                {
                    Ok(Some((data, *dtype)))
                }
                _ => Ok(None),
            }
        };
        let Some(gv) = values(g)? else {
            return Ok(None);
        };
        match saved {
            None => Ok(Some((gv, None))),
            Some(h) => Ok(values(h)?.map(|yv| (gv, Some(yv)))),
        }
    }

    /// A CSR input masked by its own stored entries and an output of its shape storing
    /// as many entries (a normalization, an elementwise op): the output's positions are
    /// the input's, so the result shares its `indptr` and `indices` arrays (no copy,
    /// no rebuilt structure) and owns only its new values.
    /// `Err(out)` hands the output back when it does not qualify.
    fn same_structure(&self, py: Python<'_>, out: Output) -> PyResult<Result<Handle, Output>> {
        let out = match out {
            // the engine's word: exactly this input's stored entries, in its order
            Output::Csr(r) if r.cols == CsrCols::Input => {
                let (n, dtype) = (r.values.len(), r.values.dtype());
                let data = dyn_to_numpy(py, r.values, &[n])?;
                return Ok(Ok(self.on_structure(py, data, dtype)?));
            }
            other => other,
        };
        let (
            Store::Csr {
                shape,
                indptr,
                mask: CsrMaskSpec::Stored,
                ..
            },
            Output::Sparse(o),
        ) = (&self.store, &out)
        else {
            return Ok(Err(out));
        };
        if o.shape != [shape.0, shape.1] || o.indices.len() != indptr[indptr.len() - 1] {
            return Ok(Err(out));
        }
        let Output::Sparse(o) = out else {
            unreachable!("matched above")
        };
        let (n, dtype) = (o.values.len(), o.values.dtype());
        Ok(Ok(self.on_structure(
            py,
            dyn_to_numpy(py, o.values, &[n])?,
            dtype,
        )?))
    }

    /// A CSR handle on this CSR handle's structure (the same index arrays) with `data`
    /// (one value per stored entry, of `dtype`) and its pattern as its mask.
    fn on_structure(&self, py: Python<'_>, data: Py<PyAny>, dtype: DType) -> PyResult<Handle> {
        let Store::Csr {
            shape,
            indptr,
            indptr_obj,
            indices,
            wide,
            ..
        } = &self.store
        else {
            return Err(PyTypeError::new_err("a CSR structure is the CSR layout's"));
        };
        Ok(Handle {
            store: Store::Csr {
                shape: *shape,
                indptr: indptr.clone(),
                indptr_obj: indptr_obj.clone_ref(py),
                indices: indices.clone_ref(py),
                wide: *wide,
                dtype,
                data,
                mask: CsrMaskSpec::Stored,
            },
        })
    }

    /// Checks a CSR handle's structure once (sorted, in range, no duplicate).
    fn validate_csr(&self, py: Python<'_>) -> PyResult<()> {
        let Store::Csr {
            shape,
            indptr,
            indices,
            wide,
            data,
            ..
        } = &self.store
        else {
            return Ok(());
        };
        let n = data.bind(py).cast::<numpy::PyUntypedArray>()?.len();
        if *wide {
            let ix: PyReadonlyArray1<'_, i64> = indices.bind(py).extract()?;
            check_structure(
                *shape,
                indptr,
                as_unsigned::<i64, usize>(ix.as_slice()?).map_err(py_err)?,
                n,
            )?;
        } else {
            let ix: PyReadonlyArray1<'_, i32> = indices.bind(py).extract()?;
            check_structure(
                *shape,
                indptr,
                as_unsigned::<i32, u32>(ix.as_slice()?).map_err(py_err)?,
                n,
            )?;
        }
        self.store.with_ref(py, |_| Ok(()))
    }
}

/// Checks a CSR structure (sorted, in range, no duplicate, `n` values) once, naming the
/// fix for a non-canonical matrix.
fn check_structure<I: sprs::SpIndex>(
    shape: (usize, usize), indptr: &[usize], ix: &[I], n: usize,
) -> PyResult<()> {
    if ix.len() != n {
        return Err(MaskedError::new_err(format!(
            "{} indices for {n} values",
            ix.len()
        )));
    }
    let dummy = vec![(); n];
    CsMatViewI::try_new(shape, indptr, ix, &dummy[..])
        .map(drop)
        .map_err(|(.., e)| {
            MaskedError::new_err(format!(
                "not a canonical CSR matrix ({e}): call sort_indices() and sum_duplicates() \
                 on it first"
            ))
        })
}

/// A 1-D int32 or int64 numpy array as `usize`s (one copy), negatives refused.
fn usize_vec(a: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<usize>> {
    let conv = |v: Vec<i64>| {
        v.into_iter()
            .enumerate()
            .map(|(k, x)| {
                usize::try_from(x).map_err(|_| {
                    MaskedError::new_err(format!("{what}: negative value {x} at entry {k}"))
                })
            })
            .collect::<PyResult<Vec<usize>>>()
    };
    if let Ok(r) = a.extract::<PyReadonlyArray1<'_, i64>>() {
        return conv(r.as_array().to_vec());
    }
    if let Ok(r) = a.extract::<PyReadonlyArray1<'_, i32>>() {
        return conv(r.as_array().iter().map(|&x| x as i64).collect());
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be a 1-D int32 or int64 array"
    )))
}

/// The registry: `(name, kind, options, differentiable, summary)` for every op.
#[pyfunction]
fn ops(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let rows = Op::ALL.iter().map(|&op| {
        let kind = match op.kind() {
            Kind::Reduce => "reduce",
            Kind::ReduceOne => "reduce_one",
            Kind::Normalize => "normalize",
            Kind::Unary => "unary",
            Kind::Binary => "binary",
        };
        (
            op.name(),
            kind,
            op.options().to_vec(),
            op.differentiable(),
            op.summary(),
        )
    });
    PyList::new(py, rows)
}

/// Every option: `(name, help)`.
#[pyfunction]
fn options(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    PyList::new(
        py,
        masked_engine::by_name::OPTIONS
            .iter()
            .map(|o| (o.name, o.help)),
    )
}

/// Sets how many threads each engine call runs on (torch's `set_num_threads`); 0
/// restores the default (`RAYON_NUM_THREADS`, else one per core).
#[pyfunction]
fn set_num_threads(n: i64) -> PyResult<()> {
    let n = usize::try_from(n)
        .map_err(|_| PyValueError::new_err(format!("set_num_threads: {n} threads (at least 0)")))?;
    masked_core::set_threads(n)
        .map_err(|e| PyRuntimeError::new_err(format!("set_num_threads: {e}")))
}

/// How many threads an engine call runs on.
#[pyfunction]
fn get_num_threads() -> usize {
    masked_core::with_team(torch_team(), masked_core::threads)
}

/// The team this thread's engine calls run on: torch's, inside `masked.torch`'s calls
/// ([`_on_openmp`]) when its runtime was registered ([`_set_openmp`]).
fn torch_team() -> Option<masked_core::OpenMpTeam> {
    ON_TEAM.get().then(|| *TORCH_TEAM.get()?).flatten()
}

/// torch's OpenMP runtime ([`_set_openmp`]), once found.
static TORCH_TEAM: std::sync::OnceLock<Option<masked_core::OpenMpTeam>> =
    std::sync::OnceLock::new();

thread_local! {
    /// Whether this thread's engine calls run on [`TORCH_TEAM`] ([`_on_openmp`]).
    static ON_TEAM: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Registers the OpenMP runtime torch's kernels run on, by the addresses of its
/// `GOMP_parallel` and `omp_get_max_threads` (`masked.torch` finds them at import);
/// `0, 0` registers none. The first registration holds for the process; whether one is
/// registered is returned.
///
/// # Safety (of the caller, `masked.torch`)
/// The addresses are those two functions of the OpenMP runtime loaded in this process
/// (which stays loaded as torch does).
#[pyfunction]
fn _set_openmp(parallel: usize, max_threads: usize) -> bool {
    TORCH_TEAM
        .get_or_init(|| {
            if parallel == 0 || max_threads == 0 {
                return None;
            }
            // SAFETY: the caller's contract above: the runtime's own functions, with the
            // signatures `GOMP_parallel(void (*)(void *), void *, unsigned, unsigned)`
            // and `int omp_get_max_threads(void)`
            unsafe {
                let parallel: masked_core::OpenMpParallel = std::mem::transmute(parallel);
                let max_threads: masked_core::OpenMpMaxThreads = std::mem::transmute(max_threads);
                Some(masked_core::OpenMpTeam::new(parallel, max_threads))
            }
        })
        .is_some()
}

/// Sets whether this thread's engine calls run their parallel loops on torch's OpenMP
/// threads (registered by [`_set_openmp`]; without one, nothing changes); returns the
/// previous setting.
#[pyfunction]
fn _on_openmp(on: bool) -> bool {
    ON_TEAM.replace(on)
}

/// For the test suite: runs a parallel loop of `n` tasks in which each task waits (up to
/// `seconds`) until `n` threads have each run a task, and returns how many distinct
/// threads ran tasks and whether any of them was one of the engine's own pool threads.
#[pyfunction]
fn _probe_team(py: Python<'_>, n: usize, seconds: f64) -> PyResult<(usize, bool)> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    engine(py, || {
        let seen = std::sync::Mutex::new(Vec::new());
        let (started, pooled) = (AtomicUsize::new(0), AtomicBool::new(false));
        let limit = std::time::Duration::from_secs_f64(seconds.clamp(0.0, 60.0));
        masked_kernels::par::for_each_dyn(n, &|_| {
            let me = std::thread::current().id();
            pooled.fetch_or(masked_kernels::par::on_pool(), SeqCst);
            {
                let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                if !s.contains(&me) {
                    s.push(me);
                    started.fetch_add(1, SeqCst);
                }
            }
            let t0 = std::time::Instant::now();
            while started.load(SeqCst) < n && t0.elapsed() < limit {
                std::thread::yield_now();
            }
        });
        let distinct = seen.into_inner().unwrap_or_else(|e| e.into_inner()).len();
        Ok((distinct, pooled.load(SeqCst)))
    })
}

/// Runs a deliberately failing internal path (a panic inside an engine call), to test
/// that it surfaces as `MaskedError("internal error: ...")`.
#[pyfunction]
fn _panic_for_test(py: Python<'_>) -> PyResult<()> {
    engine(py, || -> Result<(), Error> {
        panic!("a deliberate panic for the test suite")
    })
}

static PROBE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Waits inside an engine call (the GIL released, as every op's) until another Python
/// thread calls `_probe_release()`, for at most `timeout_s`: True when released in time.
/// The GIL test's probe: were the GIL held here, no other thread could release it.
#[pyfunction]
fn _probe_wait(py: Python<'_>, timeout_s: f64) -> PyResult<bool> {
    use std::sync::atomic::Ordering;
    PROBE.store(false, Ordering::SeqCst);
    engine(py, move || {
        let t = std::time::Instant::now();
        while !PROBE.load(Ordering::SeqCst) {
            if t.elapsed().as_secs_f64() > timeout_s {
                return Ok(false);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        Ok(true)
    })
}

/// Releases `_probe_wait`.
#[pyfunction]
fn _probe_release() {
    PROBE.store(true, std::sync::atomic::Ordering::SeqCst);
}

#[pymodule]
fn _masked(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // a native build (MASKED_CPU=native) imported on a CPU without its tier
    masked_core::cpu::check().map_err(pyo3::exceptions::PyImportError::new_err)?;
    m.add_class::<Handle>()?;
    m.add_class::<attention::PlanPy>()?;
    m.add_function(wrap_pyfunction!(attention::attention, m)?)?;
    m.add_function(wrap_pyfunction!(attention::attention_vjp, m)?)?;
    m.add_function(wrap_pyfunction!(attention::sddmm, m)?)?;
    m.add_function(wrap_pyfunction!(attention::sddmm_vjp, m)?)?;
    m.add_function(wrap_pyfunction!(attention::spmm, m)?)?;
    m.add_function(wrap_pyfunction!(attention::spmm_vjp, m)?)?;
    m.add("MaskedError", m.py().get_type::<MaskedError>())?;
    m.add_function(wrap_pyfunction!(ops, m)?)?;
    m.add_function(wrap_pyfunction!(options, m)?)?;
    m.add_function(wrap_pyfunction!(set_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(get_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(_set_openmp, m)?)?;
    m.add_function(wrap_pyfunction!(_on_openmp, m)?)?;
    m.add_function(wrap_pyfunction!(_probe_team, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    m.add_function(wrap_pyfunction!(_probe_wait, m)?)?;
    m.add_function(wrap_pyfunction!(_probe_release, m)?)?;
    Ok(())
}
