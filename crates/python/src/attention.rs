//! Sparse attention for Python: `AttentionPlan` (a validated pattern, built once) and
//! the forward and gradient functions over numpy buffers, borrowed without a copy, run
//! with the GIL released through the attention crate's dtype-erased boundary.

use crate::{dyn_to_numpy, engine, py_err, recast_view, usize_to_numpy, usize_vec};
use half::{bf16, f16};
use masked_attention::erased::{self, FloatArray, FloatView};
use masked_attention::patterns::PatternSpec;
use masked_attention::{AttentionPlan, Pattern};
use numpy::PyReadonlyArrayDyn;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

/// A sparse attention pattern (which keys each query sees), validated once, with the
/// transpose its gradients need (built on first use). Reuse one across calls.
#[pyclass(frozen, name = "AttentionPlan", module = "masked._masked")]
pub(crate) struct PlanPy {
    plan: AttentionPlan,
}

#[pymethods]
impl PlanPy {
    /// A pattern from CSR arrays: `indptr` (n + 1 entries) and `indices` (the keys of
    /// each query, strictly increasing), for `shape = (n, m)`.
    #[new]
    fn new(
        py: Python<'_>, shape: (usize, usize), indptr: Bound<'_, PyAny>, indices: Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let (ip, ix) = (
            usize_vec(&indptr, "indptr")?,
            usize_vec(&indices, "indices")?,
        );
        let p = engine(py, move || Pattern::try_from_parts(shape, ip, ix))?;
        Ok(PlanPy {
            plan: AttentionPlan::new(p),
        })
    }

    /// A generated `n × m` pattern: `causal`, `band:W`, `random:P`, `lengths:L`.
    #[staticmethod]
    #[pyo3(signature = (spec, n, m, seed = 0))]
    fn generate(py: Python<'_>, spec: &str, n: usize, m: usize, seed: u64) -> PyResult<Self> {
        let kind: PatternSpec = spec.parse().map_err(py_err)?;
        let p = engine(py, move || kind.generate(n, m, seed))?;
        Ok(PlanPy {
            plan: AttentionPlan::new(p),
        })
    }

    /// `(queries, keys)`.
    #[getter]
    fn shape(&self) -> (usize, usize) {
        self.plan.shape()
    }

    /// The number of valid (query, key) pairs.
    #[getter]
    fn nnz(&self) -> usize {
        self.plan.nnz()
    }

    /// The row pointer (int64).
    fn indptr(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let p = &self.plan.patterns()[0];
        usize_to_numpy(py, p.indptr().to_vec(), &[p.indptr().len()])
    }

    /// The key of every pair, query by query (int64).
    fn indices(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let p = &self.plan.patterns()[0];
        usize_to_numpy(py, p.indices().to_vec(), &[p.nnz()])
    }
}

/// A float numpy array, borrowed (bf16 arrives as its uint16 bits with `bf16`).
enum Ro<'py> {
    F32(PyReadonlyArrayDyn<'py, f32>),
    F64(PyReadonlyArrayDyn<'py, f64>),
    F16(PyReadonlyArrayDyn<'py, f16>),
    BF16(PyReadonlyArrayDyn<'py, u16>),
}

impl<'py> Ro<'py> {
    fn of(a: &Bound<'py, PyAny>, what: &str, bf16: bool) -> PyResult<Ro<'py>> {
        if bf16 {
            if let Ok(x) = a.extract() {
                return Ok(Ro::BF16(x));
            }
        } else if let Ok(x) = a.extract() {
            return Ok(Ro::F32(x));
        } else if let Ok(x) = a.extract() {
            return Ok(Ro::F64(x));
        } else if let Ok(x) = a.extract() {
            return Ok(Ro::F16(x));
        }
        Err(PyTypeError::new_err(format!(
            "{what} must be a float32, float64, float16 or bfloat16 array"
        )))
    }

    /// Each of `arrays` (with its name for messages) read as [`Ro::of`] reads it.
    fn all<const N: usize>(
        arrays: [(&Bound<'py, PyAny>, &str); N], bf16: bool,
    ) -> PyResult<[Ro<'py>; N]> {
        let read = arrays.into_iter().map(|(a, what)| Ro::of(a, what, bf16));
        match read.collect::<PyResult<Vec<_>>>()?.try_into() {
            Ok(all) => Ok(all),
            Err(_) => unreachable!("one array read for each given"),
        }
    }

    fn view(&self) -> FloatView<'_> {
        match self {
            Ro::F32(x) => FloatView::F32(x.as_array()),
            Ro::F64(x) => FloatView::F64(x.as_array()),
            Ro::F16(x) => FloatView::F16(x.as_array()),
            // SAFETY: every u16 is a bf16, same size and alignment
            Ro::BF16(x) => FloatView::BF16(unsafe { recast_view::<u16, bf16>(x.as_array()) }),
        }
    }
}

fn to_numpy(py: Python<'_>, a: FloatArray) -> PyResult<Py<PyAny>> {
    let (shape, values) = a.into_dyn();
    dyn_to_numpy(py, values, &shape)
}

/// `softmax(scale · q kᵀ + bias) v` over the plan's pairs (see `masked.attention`).
#[pyfunction]
#[pyo3(signature = (q, k, v, plan, scale = None, bias = None, bf16 = false))]
pub(crate) fn attention(
    py: Python<'_>, q: Bound<'_, PyAny>, k: Bound<'_, PyAny>, v: Bound<'_, PyAny>, plan: &PlanPy,
    scale: Option<f64>, bias: Option<Bound<'_, PyAny>>, bf16: bool,
) -> PyResult<Py<PyAny>> {
    let [q, k, v] = Ro::all([(&q, "q"), (&k, "k"), (&v, "v")], bf16)?;
    let bias = bias.map(|b| Ro::of(&b, "bias", bf16)).transpose()?;
    let (qv, kv, vv) = (q.view(), k.view(), v.view());
    let bv = bias.as_ref().map(Ro::view);
    let out = engine(py, || {
        erased::attention(&qv, &kv, &vv, &plan.plan, scale, bv.as_ref())
    })?;
    to_numpy(py, out)
}

/// `(dq, dk, dv, dbias or None)` as numpy arrays.
type Grads = (Py<PyAny>, Py<PyAny>, Py<PyAny>, Option<Py<PyAny>>);

/// The gradients of `sum(attention(q, k, v) * grad)`: `(dq, dk, dv, dbias or None)`.
#[pyfunction]
#[pyo3(signature = (q, k, v, plan, grad, scale = None, bias = None, bf16 = false))]
pub(crate) fn attention_vjp(
    py: Python<'_>, q: Bound<'_, PyAny>, k: Bound<'_, PyAny>, v: Bound<'_, PyAny>, plan: &PlanPy,
    grad: Bound<'_, PyAny>, scale: Option<f64>, bias: Option<Bound<'_, PyAny>>, bf16: bool,
) -> PyResult<Grads> {
    let [q, k, v, g] = Ro::all([(&q, "q"), (&k, "k"), (&v, "v"), (&grad, "grad")], bf16)?;
    let bias = bias.map(|b| Ro::of(&b, "bias", bf16)).transpose()?;
    let (qv, kv, vv, gv) = (q.view(), k.view(), v.view(), g.view());
    let bv = bias.as_ref().map(Ro::view);
    let gr = engine(py, || {
        erased::attention_vjp(&qv, &kv, &vv, &plan.plan, scale, bv.as_ref(), &gv)
    })?;
    let db = gr.dbias.map(|d| to_numpy(py, d)).transpose()?;
    Ok((
        to_numpy(py, gr.dq)?,
        to_numpy(py, gr.dk)?,
        to_numpy(py, gr.dv)?,
        db,
    ))
}

/// SDDMM: `scale · (a bᵀ)` at the plan's pairs (see `masked.sddmm`).
#[pyfunction]
#[pyo3(signature = (a, b, plan, scale, bf16 = false))]
pub(crate) fn sddmm(
    py: Python<'_>, a: Bound<'_, PyAny>, b: Bound<'_, PyAny>, plan: &PlanPy, scale: f64, bf16: bool,
) -> PyResult<Py<PyAny>> {
    let [a, b] = Ro::all([(&a, "a"), (&b, "b")], bf16)?;
    let (av, bv) = (a.view(), b.view());
    let out = engine(py, || erased::sddmm(&av, &bv, &plan.plan, scale))?;
    to_numpy(py, out)
}

/// The gradients of `sum(sddmm(a, b) * grad)`: `(da, db)`.
#[pyfunction]
#[pyo3(signature = (a, b, plan, scale, grad, bf16 = false))]
pub(crate) fn sddmm_vjp(
    py: Python<'_>, a: Bound<'_, PyAny>, b: Bound<'_, PyAny>, plan: &PlanPy, scale: f64,
    grad: Bound<'_, PyAny>, bf16: bool,
) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
    let [a, b, g] = Ro::all([(&a, "a"), (&b, "b"), (&grad, "grad")], bf16)?;
    let (av, bv, gv) = (a.view(), b.view(), g.view());
    let (da, db) = engine(py, || erased::sddmm_vjp(&av, &bv, &plan.plan, scale, &gv))?;
    Ok((to_numpy(py, da)?, to_numpy(py, db)?))
}

/// SpMM: `P x` for values `P` on the plan's pairs (see `masked.spmm`).
#[pyfunction]
#[pyo3(signature = (values, plan, x, bf16 = false))]
pub(crate) fn spmm(
    py: Python<'_>, values: Bound<'_, PyAny>, plan: &PlanPy, x: Bound<'_, PyAny>, bf16: bool,
) -> PyResult<Py<PyAny>> {
    let [w, x] = Ro::all([(&values, "values"), (&x, "x")], bf16)?;
    let (wv, xv) = (w.view(), x.view());
    let out = engine(py, || erased::spmm(&wv, &plan.plan, &xv))?;
    to_numpy(py, out)
}

/// The gradients of `sum(spmm(values, x) * grad)`: `(dvalues, dx)`.
#[pyfunction]
#[pyo3(signature = (values, plan, x, grad, bf16 = false))]
pub(crate) fn spmm_vjp(
    py: Python<'_>, values: Bound<'_, PyAny>, plan: &PlanPy, x: Bound<'_, PyAny>,
    grad: Bound<'_, PyAny>, bf16: bool,
) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
    let [w, x, g] = Ro::all([(&values, "values"), (&x, "x"), (&grad, "grad")], bf16)?;
    let (wv, xv, gv) = (w.view(), x.view(), g.view());
    let (dw, dx) = engine(py, || erased::spmm_vjp(&wv, &plan.plan, &xv, &gv))?;
    Ok((to_numpy(py, dw)?, to_numpy(py, dx)?))
}
