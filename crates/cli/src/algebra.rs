//! `masked where COND A B` and `masked fill INPUT --value V` (docs/cli.md).

use crate::binary::{self, read_dense, read_sparse};
use crate::error::CliError;
use crate::RunArgs;
use masked::by_name::promote;
use masked::engine::Output;
use masked::io::{extension, npy};
use masked::{DType, Scalar};

/// Flags `where` and `fill` take no part in.
fn no_op_flags(a: &RunArgs, what: &str) -> Result<(), CliError> {
    if a.dim.is_some() || a.keepdim || a.dtype.is_some() || a.masks.is_some() || a.scalar_first {
        return Err(CliError::Usage(format!(
            "{what} takes no --dim, --keepdim, --dtype, --masks or --scalar-first"
        )));
    }
    if let Some((name, _)) = a.options.0.first() {
        return Err(CliError::Usage(format!(
            "option --{name} has no meaning for {what}"
        )));
    }
    Ok(())
}

/// `masked where COND A B`.
pub(crate) fn run_where(a: &RunArgs) -> Result<(), CliError> {
    no_op_flags(a, "where")?;
    if a.value.is_some() || a.scalar.is_some() {
        return Err(CliError::Usage(
            "where takes COND A B: no --value or --scalar".into(),
        ));
    }
    let (Some(pa), Some(pb)) = (&a.b, &a.c) else {
        return Err(CliError::Usage("where needs three files: COND A B".into()));
    };
    if extension(&a.input) != "npy" {
        return Err(CliError::file(
            &a.input,
            "COND must be a bool .npy file".into(),
        ));
    }
    let cond = npy::read_mask(&a.input)?;
    match (extension(pa).as_str(), extension(pb).as_str()) {
        ("npy", "npy") => {
            crate::dense_output(a)?;
            let (x, y) = (
                read_dense(pa, a.mask.as_ref())?,
                read_dense(pb, a.mask_b.as_ref())?,
            );
            let dt = promote(x.values.dtype(), y.values.dtype());
            let (x, y) = (x.array(dt)?, y.array(dt)?);
            let Output::Dense(out) = x.view()?.select(&cond, &y.view()?)? else {
                unreachable!("dense in, dense out")
            };
            crate::write_dense(a, out)
        }
        ("mtx" | "npz", "mtx" | "npz") => {
            if a.out_mask.is_some() {
                return Err(CliError::Usage("--out-mask is for dense output: the stored positions of a sparse output are its mask".into()));
            }
            let x = read_sparse(pa, a.mask.as_ref(), a.mask_from_pattern, "--mask")?;
            let y = read_sparse(pb, a.mask_b.as_ref(), a.mask_from_pattern, "--mask-b")?;
            let dt = promote(x.file.values.dtype(), y.file.values.dtype());
            let layout = crate::sparse_layout(a.layout.as_deref(), pa);
            if !["csr", "coo"].contains(&layout.as_str()) {
                return Err(CliError::Usage(format!(
                    "invalid --layout '{layout}' for sparse operands: expected csr or coo"
                )));
            }
            let (x, y) = (x.array(&layout, dt)?, y.array(&layout, dt)?);
            let Output::Sparse(out) = x.view()?.select(&cond, &y.view()?)? else {
                unreachable!("sparse in, sparse out")
            };
            crate::write_sparse(&a.output, &out)
        }
        _ => Err(CliError::Usage(
            "where: A and B are both dense .npy files or both sparse files of one shape".into(),
        )),
    }
}

/// `masked fill INPUT --value V`.
pub(crate) fn run_fill(a: &RunArgs) -> Result<(), CliError> {
    no_op_flags(a, "fill")?;
    if a.b.is_some() || a.scalar.is_some() || a.mask_b.is_some() || a.out_mask.is_some() {
        return Err(CliError::Usage(
            "fill takes one INPUT and --value: a filled array has no mask (no --out-mask)".into(),
        ));
    }
    let Some(text) = &a.value else {
        return Err(CliError::Usage("fill needs --value V".into()));
    };
    let value = crate::binary::parse_scalar(text)
        .map_err(|_| CliError::Usage(format!("invalid --value '{text}': expected a number")))?;
    let cast_err = |dt: DType| {
        CliError::Usage(format!(
            "the fill value {text} does not fit in {}",
            dt.name()
        ))
    };
    match extension(&a.input).as_str() {
        "npy" => {
            crate::dense_output(a)?;
            let x = read_dense(&a.input, a.mask.as_ref())?;
            let dt = x.values.dtype();
            let x = x.array(dt)?;
            let out = x.view()?.filled(value).map_err(|_| cast_err(dt))?;
            Ok(npy::write_atomic(&a.output, |buf| {
                npy::encode_dyn(out.shape(), out.values().clone(), buf)
            })?)
        }
        "mtx" | "npz" => {
            let x = read_sparse(&a.input, a.mask.as_ref(), a.mask_from_pattern, "--mask")?;
            let dt = x.file.values.dtype();
            let zero =
                matches!(value, Scalar::Int(0)) || matches!(value, Scalar::Float(f) if f == 0.0);
            let layout = crate::sparse_layout(a.layout.as_deref(), &x.path);
            if zero {
                crate::sparse_output_path(
                    &a.output,
                    "fill --value 0 of a sparse input writes a sparse .npz or .mtx file",
                )?;
                let x = x.array(&layout, dt)?;
                let Output::Sparse(out) = x.view()?.fill_zero()? else {
                    unreachable!("sparse in, sparse out")
                };
                return crate::write_sparse(&a.output, &out);
            }
            if extension(&a.output) != "npy" {
                return Err(CliError::file(
                    &a.output,
                    "fill with a non-zero value densifies: the output is a .npy file".into(),
                ));
            }
            if !binary::scalar_fits(value, dt) {
                return Err(cast_err(dt));
            }
            let x = x.array("coo", dt)?;
            let out = x.view()?.filled(value)?;
            Ok(npy::write_atomic(&a.output, |buf| {
                npy::encode_dyn(out.shape(), out.values().clone(), buf)
            })?)
        }
        _ => Err(CliError::file(
            &a.input,
            "unknown input extension: expected .npy, .mtx or .npz".into(),
        )),
    }
}
