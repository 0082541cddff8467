//! The op table of the CLI contract and the dispatch of one op on a dense masked array.

use crate::error::CliError;
use masked::{BitMask, Dims, DynVec, Element, MaskedArrayD, MaskedReduce, MaskedView};
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
    OpSpec { name, kind, options }
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
pub fn lookup(name: &str) -> Result<&'static OpSpec, CliError> {
    OPS.iter().find(|s| s.name == name).ok_or_else(|| {
        CliError::Usage(format!(
            "unknown op '{name}' (expected one of: {})",
            OPS.iter().map(|s| s.name).collect::<Vec<_>>().join(" ")
        ))
    })
}

/// A parsed request: the op and its arguments.
#[derive(Debug, Clone)]
pub struct OpRequest {
    /// The op.
    pub spec: &'static OpSpec,
    /// Dims.
    pub dims: Dims,
    /// Keep reduced dims.
    pub keepdim: bool,
}

/// The result of an op: output shape, values, output mask.
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

/// Runs the request on a dense masked array.
pub fn apply_dense<'a, T: Element>(
    a: &'a MaskedView<'a, T, IxDyn>,
    req: &OpRequest,
) -> Result<Outcome, CliError> {
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
            return Err(CliError::Usage(format!(
                "op '{other}' is not implemented on the dense layout in this build"
            )))
        }
    })
}
