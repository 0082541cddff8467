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

use crate::{BitMask, Dims, DynVec, Element, MaskedArrayD, MaskedError, MaskedReduce, MaskedView};
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
        }
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

/// Runs the request on a dense masked array. `nan*` ops AND the mask `!is_nan(x)` into
/// the array's mask first.
///
/// # Errors
/// The op's own errors, and [`MaskedError::Unsupported`] for an op this layout does not
/// provide yet.
pub fn apply_dense<'a, T: Element>(
    a: &'a MaskedView<'a, T, IxDyn>,
    req: &OpRequest,
) -> Result<Outcome, MaskedError> {
    let (d, k) = (req.dims.clone(), req.keepdim);
    let nan;
    let src = if req.spec.name.starts_with("nan") {
        nan = a.and_not_nan();
        &nan
    } else {
        a
    };
    Ok(match req.spec.name {
        "sum" | "nansum" => outcome(src.sum(d, k)?),
        "prod" => outcome(src.prod(d, k)?),
        "amax" | "nanmax" => outcome(src.amax(d, k)?),
        "amin" | "nanmin" => outcome(src.amin(d, k)?),
        "argmax" => outcome(src.argmax(d, k)?),
        "argmin" => outcome(src.argmin(d, k)?),
        "mean" | "nanmean" => outcome(src.mean(d, k)?),
        "count" => outcome(src.count(d, k)?),
        other => {
            return Err(MaskedError::Unsupported {
                op: req.spec.name,
                context: format!("on the dense layout in this build ({other})"),
            })
        }
    })
}
