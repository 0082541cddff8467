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
    BitMask, Dims, DynVec, Element, Interpolation, MaskedArrayD, MaskedError, MaskedReduce,
    MaskedView, MedianMode,
};
use ndarray::IxDyn;

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

/// The result of an op: output shape, values, output mask.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Output shape.
    pub shape: Vec<usize>,
    /// Output values (row-major).
    pub values: DynVec,
    /// Output mask, same shape.
    pub mask: BitMask,
}

fn outcome<O: Element>(r: MaskedArrayD<O>) -> Outcome {
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
pub fn apply_dense<'a, T: Element>(
    a: &'a MaskedView<'a, T, IxDyn>,
    req: &OpRequest,
) -> Result<Outcome, MaskedError> {
    let (d, k) = (req.dims.clone(), req.keepdim);
    let (c, ord, q, it, mode) = (req.correction, req.ord, req.q, req.interpolation, req.mode);
    Ok(match req.spec.name {
        "sum" => outcome(a.sum(d, k)?),
        "prod" => outcome(a.prod(d, k)?),
        "amax" => outcome(a.amax(d, k)?),
        "amin" => outcome(a.amin(d, k)?),
        "argmax" => outcome(a.argmax(d, k)?),
        "argmin" => outcome(a.argmin(d, k)?),
        "mean" => outcome(a.mean(d, k)?),
        "count" => outcome(a.count(d, k)?),
        "var" => outcome(a.var(d, k, c)?),
        "std" => outcome(a.std(d, k, c)?),
        "norm" => outcome(a.norm(d, k, ord)?),
        "logsumexp" => outcome(a.logsumexp(d, k)?),
        "median" => outcome(a.median(d, k, mode)?),
        "quantile" => outcome(a.quantile(d, k, q, it)?),
        "softmax" => outcome(a.softmax(one_dim(req)?)?),
        "log_softmax" => outcome(a.log_softmax(one_dim(req)?)?),
        "softmin" => outcome(a.softmin(one_dim(req)?)?),
        "normalize" => outcome(a.normalize(one_dim(req)?, ord, req.eps)?),
        "cumsum" => outcome(a.cumsum(one_dim(req)?)?),
        "cumprod" => outcome(a.cumprod(one_dim(req)?)?),
        "nansum" => outcome(a.nansum(d, k)?),
        "nanmean" => outcome(a.nanmean(d, k)?),
        "nanvar" => outcome(a.nanvar(d, k, c)?),
        "nanstd" => outcome(a.nanstd(d, k, c)?),
        "nanmax" => outcome(a.nanmax(d, k)?),
        "nanmin" => outcome(a.nanmin(d, k)?),
        "nanmedian" => outcome(a.nanmedian(d, k, mode)?),
        "nanquantile" => outcome(a.nanquantile(d, k, q, it)?),
        other => return Err(MaskedError::UnknownOp(other.to_string())),
    })
}
