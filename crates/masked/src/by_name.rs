//! Ops by name: the op table of the `masked` command line and a dispatcher that runs a
//! named op on a masked array. Code that picks the op at run time (the CLI, the bench,
//! the golden tests, a config-driven pipeline) goes through here.
//!
//! ```
//! use masked::by_name::{apply_dense, OpRequest};
//! use masked::{DynVec, MaskedArray};
//! use ndarray::array;
//!
//! let x = array![[1.0f64, 2.0], [3.0, 4.0]].into_dyn();
//! let a = MaskedArray::unmasked(x.view());
//! let out = apply_dense(&a, &OpRequest::new("sum")?.dims(0).keepdim(true))?;
//! assert_eq!(out.shape, vec![1, 2]);
//! assert_eq!(out.values, DynVec::F64(vec![4.0, 6.0]));
//! # Ok::<(), masked::MaskedError>(())
//! ```

use crate::{
    BitMask, CsrMapped, Dims, DynVec, Element, Interpolation, MaskedArrayD, MaskedCoo, MaskedCsr,
    MaskedError, MaskedReduce, MaskedView, MedianMode, SparseArray,
};
use ndarray::IxDyn;
use sprs::SpIndex;

/// How an op uses its dims and options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Reduces any set of dims; takes `--keepdim`.
    Reduce,
    /// Reduces at most one dim (argmax, argmin).
    ReduceOne,
    /// Shape-preserving along exactly one dim; no `--keepdim`.
    Normalize,
}

/// One row of the op table.
#[derive(Debug, Clone, Copy)]
pub struct OpSpec {
    /// Name on the command line.
    pub name: &'static str,
    /// Dims/keepdim behaviour.
    pub kind: Kind,
    /// Options it accepts, besides `--dim`, `--keepdim` and `--mask`.
    pub options: &'static [&'static str],
}

const fn spec(name: &'static str, kind: Kind, options: &'static [&'static str]) -> OpSpec {
    OpSpec {
        name,
        kind,
        options,
    }
}

/// Every op of the contract, whether or not this build implements it yet.
pub const OPS: &[OpSpec] = &[
    spec("sum", Kind::Reduce, &[]),
    spec("prod", Kind::Reduce, &[]),
    spec("amax", Kind::Reduce, &[]),
    spec("amin", Kind::Reduce, &[]),
    spec("argmax", Kind::ReduceOne, &[]),
    spec("argmin", Kind::ReduceOne, &[]),
    spec("mean", Kind::Reduce, &[]),
    spec("count", Kind::Reduce, &[]),
    spec("var", Kind::Reduce, &["correction"]),
    spec("std", Kind::Reduce, &["correction"]),
    spec("norm", Kind::Reduce, &["ord"]),
    spec("logsumexp", Kind::Reduce, &[]),
    spec("median", Kind::Reduce, &["mode"]),
    spec("quantile", Kind::Reduce, &["q", "interpolation"]),
    spec("softmax", Kind::Normalize, &[]),
    spec("log_softmax", Kind::Normalize, &[]),
    spec("softmin", Kind::Normalize, &[]),
    spec("normalize", Kind::Normalize, &["ord", "eps"]),
    spec("cumsum", Kind::Normalize, &[]),
    spec("cumprod", Kind::Normalize, &[]),
    spec("nansum", Kind::Reduce, &[]),
    spec("nanmean", Kind::Reduce, &[]),
    spec("nanvar", Kind::Reduce, &["correction"]),
    spec("nanstd", Kind::Reduce, &["correction"]),
    spec("nanmax", Kind::Reduce, &[]),
    spec("nanmin", Kind::Reduce, &[]),
    spec("nanmedian", Kind::Reduce, &["mode"]),
    spec("nanquantile", Kind::Reduce, &["q", "interpolation"]),
];

/// Looks an op up by name.
///
/// # Errors
/// [`MaskedError::UnknownOp`].
pub fn lookup(name: &str) -> Result<&'static OpSpec, MaskedError> {
    OPS.iter()
        .find(|s| s.name == name)
        .ok_or_else(|| MaskedError::UnknownOp(name.to_string()))
}

/// A parsed request: the op and its arguments.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OpRequest {
    /// The op.
    pub spec: &'static OpSpec,
    /// Dims.
    pub dims: Dims,
    /// Keep reduced dims.
    pub keepdim: bool,
    /// var/std correction (default 1).
    pub correction: f64,
    /// norm/normalize order (default 2).
    pub ord: f64,
    /// normalize epsilon (default 1e-12).
    pub eps: f64,
    /// quantile q (default 0.5).
    pub q: f64,
    /// quantile interpolation (default linear).
    pub interpolation: Interpolation,
    /// median mode (default avg).
    pub mode: MedianMode,
}

impl OpRequest {
    /// A request for the named op over all dims, without keepdim.
    ///
    /// # Errors
    /// [`MaskedError::UnknownOp`].
    pub fn new(name: &str) -> Result<Self, MaskedError> {
        Ok(Self::from_spec(lookup(name)?))
    }
    /// A request for the op of a table row, over all dims, without keepdim.
    pub fn from_spec(spec: &'static OpSpec) -> Self {
        OpRequest {
            spec,
            dims: Dims::All,
            keepdim: false,
            correction: 1.0,
            ord: 2.0,
            eps: 1e-12,
            q: 0.5,
            interpolation: Interpolation::Linear,
            mode: MedianMode::Avg,
        }
    }
    /// The same request with a var/std `correction`.
    pub fn correction(mut self, c: f64) -> Self {
        self.correction = c;
        self
    }
    /// The same request with a norm `ord`.
    pub fn ord(mut self, ord: f64) -> Self {
        self.ord = ord;
        self
    }
    /// The same request with a normalize `eps`.
    pub fn eps(mut self, eps: f64) -> Self {
        self.eps = eps;
        self
    }
    /// The same request with a quantile `q`.
    pub fn q(mut self, q: f64) -> Self {
        self.q = q;
        self
    }
    /// The same request with a quantile interpolation.
    pub fn interpolation(mut self, i: Interpolation) -> Self {
        self.interpolation = i;
        self
    }
    /// The same request with a median mode.
    pub fn mode(mut self, m: MedianMode) -> Self {
        self.mode = m;
        self
    }
    /// The same request over `dims`.
    pub fn dims(mut self, dims: impl Into<Dims>) -> Self {
        self.dims = dims.into();
        self
    }
    /// The same request with `keepdim`.
    pub fn keepdim(mut self, keepdim: bool) -> Self {
        self.keepdim = keepdim;
        self
    }
}

/// The result of an op on the dense layout: output shape, values, output mask.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Output shape.
    pub shape: Vec<usize>,
    /// Output values (row-major).
    pub values: DynVec,
    /// Output mask, same shape.
    pub mask: BitMask,
}

/// The result of an op on a sparse layout: exactly the valid outputs are stored.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseOutcome {
    /// Output shape.
    pub shape: Vec<usize>,
    /// Stored (valid) positions as row-major flat indices, increasing.
    pub indices: Vec<usize>,
    /// Values at the stored positions.
    pub values: DynVec,
}

impl SparseOutcome {
    /// The stored positions as coordinates, one vector per dim.
    pub fn coords(&self) -> Vec<Vec<usize>> {
        crate::core::sparse::unravel(&self.shape, &self.indices)
    }
}

/// A layout whose results the dispatcher can hand back in one type: the op table runs
/// on any layout that implements this.
pub trait ByName<T: Element>: MaskedReduce<T> {
    /// What a named op returns on this layout.
    type Out;
    /// Converts a reduction result.
    fn reduced<O: Element>(r: Self::Reduced<O>) -> Self::Out;
    /// Converts a normalization result.
    fn mapped<O: Element>(m: Self::Mapped<O>) -> Self::Out;
}

/// Where the dispatcher sends the typed result of an op on layout `L`.
pub trait Sink<T: Element, L: MaskedReduce<T>> {
    /// What the sink makes of a result.
    type Out;
    /// Takes a reduction result.
    fn reduced<O: Element>(&self, r: L::Reduced<O>) -> Self::Out;
    /// Takes a normalization result.
    fn mapped<O: Element>(&self, m: L::Mapped<O>) -> Self::Out;
}

/// The sink of [`apply`]: the layout's [`ByName`] conversion.
#[derive(Debug, Clone, Copy, Default)]
pub struct Convert;

impl<T: Element, L: ByName<T>> Sink<T, L> for Convert {
    type Out = L::Out;
    fn reduced<O: Element>(&self, r: L::Reduced<O>) -> L::Out {
        L::reduced(r)
    }
    fn mapped<O: Element>(&self, m: L::Mapped<O>) -> L::Out {
        L::mapped(m)
    }
}

/// A sink that drops the typed result unconverted (benchmarks time the op alone).
#[derive(Debug, Clone, Copy, Default)]
pub struct Discard;

impl<T: Element, L: MaskedReduce<T>> Sink<T, L> for Discard {
    type Out = ();
    fn reduced<O: Element>(&self, r: L::Reduced<O>) {
        drop(std::hint::black_box(r));
    }
    fn mapped<O: Element>(&self, m: L::Mapped<O>) {
        drop(std::hint::black_box(m));
    }
}

impl<T: Element> ByName<T> for MaskedView<'_, T, IxDyn> {
    type Out = Outcome;
    fn reduced<O: Element>(r: MaskedArrayD<O>) -> Outcome {
        let shape = r.shape().to_vec();
        let (vals, mask) = r.into_parts();
        let mask = mask.unwrap_or_else(|| BitMask::filled(&shape, true));
        let (v, _) = vals.into_raw_vec_and_offset();
        Outcome {
            shape,
            values: O::into_dyn(v),
            mask,
        }
    }
    fn mapped<O: Element>(m: MaskedArrayD<O>) -> Outcome {
        Self::reduced(m)
    }
}

fn sparse_reduced<O: Element>(r: SparseArray<O>) -> SparseOutcome {
    let (shape, indices, values) = r.into_parts();
    SparseOutcome {
        shape,
        indices,
        values: O::into_dyn(values),
    }
}

fn sparse_mapped<O: Element, I: SpIndex>(m: CsrMapped<'_, O, I>) -> SparseOutcome {
    let ncols = m.cols();
    let mut indices = Vec::with_capacity(m.nnz());
    for (r, row) in m.outer_iterator().enumerate() {
        indices.extend(row.indices().iter().map(|c| r * ncols + c.index()));
    }
    SparseOutcome {
        shape: vec![m.rows(), ncols],
        indices,
        values: O::into_dyn(m.data().to_vec()),
    }
}

impl<T: Element, I: SpIndex, Iptr: SpIndex> ByName<T> for MaskedCsr<'_, T, I, Iptr> {
    type Out = SparseOutcome;
    fn reduced<O: Element>(r: SparseArray<O>) -> SparseOutcome {
        sparse_reduced(r)
    }
    fn mapped<O: Element>(m: CsrMapped<'_, O, I>) -> SparseOutcome {
        sparse_mapped(m)
    }
}

impl<T: Element> ByName<T> for MaskedCoo<T> {
    type Out = SparseOutcome;
    fn reduced<O: Element>(r: SparseArray<O>) -> SparseOutcome {
        sparse_reduced(r)
    }
    fn mapped<O: Element>(m: SparseArray<O>) -> SparseOutcome {
        sparse_reduced(m)
    }
}

/// The one dim of a shape-preserving op.
fn one_dim(req: &OpRequest) -> Result<isize, MaskedError> {
    match &req.dims {
        Dims::Set(v) if v.len() == 1 => Ok(v[0]),
        d => Err(MaskedError::DimCount {
            op: req.spec.name,
            expected: "exactly one dim",
            got: d.given_len().unwrap_or(0),
        }),
    }
}

/// Runs the request on a dense masked array. `nan*` ops AND the mask `!is_nan(x)` into
/// the array's mask first.
///
/// # Errors
/// The op's own errors (bad dims, bad option values).
pub fn apply_dense<T: Element>(
    a: &MaskedView<'_, T, IxDyn>,
    req: &OpRequest,
) -> Result<Outcome, MaskedError> {
    apply(a, req)
}

/// Runs the request on any layout (dense, CSR) and converts the result to the layout's
/// [`ByName::Out`].
///
/// # Errors
/// The op's own errors (bad dims, bad option values).
pub fn apply<T: Element, L: ByName<T>>(a: &L, req: &OpRequest) -> Result<L::Out, MaskedError> {
    apply_to(a, req, &Convert)
}

/// Runs the request on any layout and hands the typed result to `sink`: one match over
/// the op table for every layout and every use.
///
/// # Errors
/// The op's own errors (bad dims, bad option values).
pub fn apply_to<T: Element, L: MaskedReduce<T>, S: Sink<T, L>>(
    a: &L,
    req: &OpRequest,
    sink: &S,
) -> Result<S::Out, MaskedError> {
    let (d, k) = (req.dims.clone(), req.keepdim);
    let (c, ord, q, it, mode) = (req.correction, req.ord, req.q, req.interpolation, req.mode);
    Ok(match req.spec.name {
        "sum" => sink.reduced(a.sum(d, k)?),
        "prod" => sink.reduced(a.prod(d, k)?),
        "amax" => sink.reduced(a.amax(d, k)?),
        "amin" => sink.reduced(a.amin(d, k)?),
        "argmax" => sink.reduced(a.argmax(d, k)?),
        "argmin" => sink.reduced(a.argmin(d, k)?),
        "mean" => sink.reduced(a.mean(d, k)?),
        "count" => sink.reduced(a.count(d, k)?),
        "var" => sink.reduced(a.var(d, k, c)?),
        "std" => sink.reduced(a.std(d, k, c)?),
        "norm" => sink.reduced(a.norm(d, k, ord)?),
        "logsumexp" => sink.reduced(a.logsumexp(d, k)?),
        "median" => sink.reduced(a.median(d, k, mode)?),
        "quantile" => sink.reduced(a.quantile(d, k, q, it)?),
        "softmax" => sink.mapped(a.softmax(one_dim(req)?)?),
        "log_softmax" => sink.mapped(a.log_softmax(one_dim(req)?)?),
        "softmin" => sink.mapped(a.softmin(one_dim(req)?)?),
        "normalize" => sink.mapped(a.normalize(one_dim(req)?, ord, req.eps)?),
        "cumsum" => sink.mapped(a.cumsum(one_dim(req)?)?),
        "cumprod" => sink.mapped(a.cumprod(one_dim(req)?)?),
        "nansum" => sink.reduced(a.nansum(d, k)?),
        "nanmean" => sink.reduced(a.nanmean(d, k)?),
        "nanvar" => sink.reduced(a.nanvar(d, k, c)?),
        "nanstd" => sink.reduced(a.nanstd(d, k, c)?),
        "nanmax" => sink.reduced(a.nanmax(d, k)?),
        "nanmin" => sink.reduced(a.nanmin(d, k)?),
        "nanmedian" => sink.reduced(a.nanmedian(d, k, mode)?),
        "nanquantile" => sink.reduced(a.nanquantile(d, k, q, it)?),
        other => return Err(MaskedError::UnknownOp(other.to_string())),
    })
}
