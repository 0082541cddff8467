//! `masked where COND A B` and `masked fill INPUT --value V` (docs/cli.md).

use crate::binary::{read_dense, read_sparse, values_as, view_of, DenseIn, SparseIn};
use crate::error::CliError;
use crate::{extension, npy, sparse_io, RunArgs};
use masked::by_name::promote;
use masked::{with_dtype, BitMask, DType, DynVec, Element, MaskedError, Scalar};

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
            if extension(&a.output) != "npy" {
                return Err(CliError::file(
                    &a.output,
                    "dense output must be a .npy file".into(),
                ));
            }
            let (x, y) = (
                read_dense(pa, a.mask.as_ref())?,
                read_dense(pb, a.mask_b.as_ref())?,
            );
            let dt = promote(x.values.dtype(), y.values.dtype());
            let (shape, values, mask) = with_dtype!(dt, T => dense_where::<T>(&cond, &x, &y)?);
            npy::write_atomic(&a.output, |buf| npy::encode_dyn(&shape, values, buf))?;
            if let Some(m) = &a.out_mask {
                npy::write_atomic(m, |buf| npy::encode(&shape, mask.to_vec(), buf))?;
            }
            Ok(())
        }
        ("mtx" | "npz", "mtx" | "npz") => {
            if a.out_mask.is_some() {
                return Err(CliError::Usage("--out-mask is for dense output: the stored positions of a sparse output are its mask".into()));
            }
            let x = read_sparse(pa, a.mask.as_ref(), a.mask_from_pattern, "--mask")?;
            let y = read_sparse(pb, a.mask_b.as_ref(), a.mask_from_pattern, "--mask-b")?;
            let dt = promote(x.file.values.dtype(), y.file.values.dtype());
            let layout = a.layout.clone().unwrap_or_else(|| {
                if extension(pa) == "mtx" {
                    "csr".into()
                } else {
                    "coo".into()
                }
            });
            let (shape, indices, values) = match layout.as_str() {
                "csr" => with_dtype!(dt, T => csr_where::<T>(&cond, &x, &y)?),
                "coo" => with_dtype!(dt, T => coo_where::<T>(&cond, &x, &y)?),
                other => {
                    return Err(CliError::Usage(format!(
                        "invalid --layout '{other}' for sparse operands: expected csr or coo"
                    )))
                }
            };
            sparse_io::write_entries(&a.output, &shape, &indices, sparse_io::Data::Num(&values))
        }
        _ => Err(CliError::Usage(
            "where: A and B are both dense .npy files or both sparse files of one shape".into(),
        )),
    }
}

fn dense_where<T: Element>(
    cond: &BitMask,
    x: &DenseIn,
    y: &DenseIn,
) -> Result<(Vec<usize>, DynVec, BitMask), CliError> {
    let (xv, yv) = (values_as::<T>(&x.values)?, values_as::<T>(&y.values)?);
    let r = masked::dense::select(cond, None, &view_of(x, &xv)?, &view_of(y, &yv)?)?;
    let shape = r.shape().to_vec();
    let (v, m) = r.into_parts();
    let mask = m.map_or_else(|| BitMask::filled(&shape, true), Ok)?;
    Ok((shape, T::into_dyn(v.into_raw_vec_and_offset().0), mask))
}

fn csr_where<T: Element>(
    cond: &BitMask,
    x: &SparseIn,
    y: &SparseIn,
) -> Result<(Vec<usize>, Vec<usize>, DynVec), CliError> {
    let (mx, my) = (x.csr_parts::<T>()?, y.csr_parts::<T>()?);
    let r = masked::csr::select(cond, &x.csr(&mx)?, &y.csr(&my)?)?;
    let ncols = r.cols();
    let indices = r.iter().map(|(_, (i, j))| i * ncols + j).collect();
    Ok((
        vec![r.rows(), ncols],
        indices,
        T::into_dyn(r.data().to_vec()),
    ))
}

fn coo_where<T: Element>(
    cond: &BitMask,
    x: &SparseIn,
    y: &SparseIn,
) -> Result<(Vec<usize>, Vec<usize>, DynVec), CliError> {
    let r = masked::coo::select(cond, &x.coo::<T>()?, &y.coo::<T>()?)?;
    let (shape, indices, values) = r.into_parts();
    Ok((shape, indices, T::into_dyn(values)))
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
            if extension(&a.output) != "npy" {
                return Err(CliError::file(
                    &a.output,
                    "dense output must be a .npy file".into(),
                ));
            }
            let x = read_dense(&a.input, a.mask.as_ref())?;
            let dt = x.values.dtype();
            let out = with_dtype!(dt, T => {
                let v = T::from_scalar(value).ok_or_else(|| cast_err(dt))?;
                let xv = values_as::<T>(&x.values)?;
                T::into_dyn(view_of(&x, &xv)?.filled(v).into_raw_vec_and_offset().0)
            });
            npy::write_atomic(&a.output, |buf| npy::encode_dyn(&x.shape, out, buf))
        }
        "mtx" | "npz" => {
            let x = read_sparse(&a.input, a.mask.as_ref(), a.mask_from_pattern, "--mask")?;
            let dt = x.file.values.dtype();
            let zero =
                matches!(value, Scalar::Int(0)) || matches!(value, Scalar::Float(f) if f == 0.0);
            let ext = extension(&x.path);
            let layout = a.layout.clone().unwrap_or_else(|| {
                if ext == "mtx" {
                    "csr".into()
                } else {
                    "coo".into()
                }
            });
            if zero {
                let out_ext = extension(&a.output);
                if out_ext != "npz" && out_ext != "mtx" {
                    return Err(CliError::file(
                        &a.output,
                        "fill --value 0 of a sparse input writes a sparse .npz or .mtx file".into(),
                    ));
                }
                let (shape, indices, values) =
                    with_dtype!(dt, T => sparse_fill_zero::<T>(&x, &layout)?);
                return sparse_io::write_entries(
                    &a.output,
                    &shape,
                    &indices,
                    sparse_io::Data::Num(&values),
                );
            }
            if extension(&a.output) != "npy" {
                return Err(CliError::file(
                    &a.output,
                    "fill with a non-zero value densifies: the output is a .npy file".into(),
                ));
            }
            let (shape, values) = with_dtype!(dt, T => {
                let v = T::from_scalar(value).ok_or_else(|| cast_err(dt))?;
                let d = x.coo::<T>()?.filled(v)?;
                (d.shape().to_vec(), T::into_dyn(d.into_raw_vec_and_offset().0))
            });
            npy::write_atomic(&a.output, |buf| npy::encode_dyn(&shape, values, buf))
        }
        _ => Err(CliError::file(
            &a.input,
            "unknown input extension: expected .npy, .mtx or .npz".into(),
        )),
    }
}

fn sparse_fill_zero<T: Element>(
    x: &SparseIn,
    layout: &str,
) -> Result<(Vec<usize>, Vec<usize>, DynVec), CliError> {
    let to_cli = |e: MaskedError| CliError::Engine(e);
    if layout == "csr" {
        let m = x.csr_parts::<T>()?;
        let r = x.csr(&m)?.fill_zero().map_err(to_cli)?;
        let ncols = r.cols();
        let indices = r.iter().map(|(_, (i, j))| i * ncols + j).collect();
        return Ok((
            vec![r.rows(), ncols],
            indices,
            T::into_dyn(r.data().to_vec()),
        ));
    }
    let (pattern, values, _) = x.coo::<T>()?.fill_zero().map_err(to_cli)?.into_parts();
    Ok((
        pattern.shape().to_vec(),
        pattern.flat(),
        T::into_dyn(values),
    ))
}
