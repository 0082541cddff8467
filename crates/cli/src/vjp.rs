//! `masked vjp OP INPUT ... --grad G -o OUT`: the gradient of an op with respect to the
//! input's values (docs/cli.md, "Gradients"). Dense input takes a dense `G` shaped like
//! the forward output; sparse input a `.npz` COO `G` stored at (some of) the forward
//! output's valid positions, and writes a sparse gradient stored exactly at the input's
//! valid positions.

use crate::binary;
use crate::{build_request, parse_dtype, RunArgs};
use masked::by_name::{Kind, Op, OpRequest, Outcome, SparseOutcome};
use masked::engine::{Array, CsrMask, Output};
use masked::io::{extension, npy, sparse};
use masked::{with_dyn_vec, BitMask, CooMask, DType, DynVec, Element, MaskedError};
use masked_cli::error::CliError;
use std::path::Path;

/// Runs `masked vjp`.
pub(crate) fn run(a: &RunArgs) -> Result<(), CliError> {
    let Some(grad) = &a.grad else {
        return Err(CliError::Usage(
            "vjp needs --grad G: the upstream gradient".into(),
        ));
    };
    if a.b.is_some() || a.c.is_some() || a.scalar.is_some() || a.value.is_some() {
        return Err(CliError::Usage(
            "vjp takes one input: binary elementwise VJPs are library-only".into(),
        ));
    }
    if a.out_mask.is_some() {
        return Err(CliError::Usage(
            "vjp takes no --out-mask: a gradient has the input's mask".into(),
        ));
    }
    let spec: Op = a.op.parse()?;
    if spec.kind() == Kind::Binary {
        return Err(CliError::Usage(format!(
            "vjp {spec}: binary elementwise VJPs are library-only"
        )));
    }
    if !spec.differentiable() {
        return Err(masked::MaskedError::NotDifferentiable {
            op: spec.name(),
            reason: "its output is an index, a count or a bool",
        }
        .into());
    }
    let dtype = a.dtype.as_deref().map(parse_dtype).transpose()?;
    let req = build_request(a, spec, dtype)?;
    match extension(&a.input).as_str() {
        "npy" => dense(a, &req, grad),
        "mtx" | "npz" => sparse(a, &req, grad),
        _ => Err(CliError::file(
            &a.input,
            "unknown input extension: expected .npy, .mtx or .npz".into(),
        )),
    }
}

/// Refuses integer and bool input (no gradient) before anything is read of `G`.
fn check_float(input: &Path, dtype: DType, op: Op) -> Result<(), CliError> {
    if dtype.is_float() {
        return Ok(());
    }
    Err(CliError::file(
        input,
        format!(
            "{op} is not differentiable on {dtype} input: integer and bool input have no gradient"
        ),
    ))
}

/// Checks that `G` has the gradient type of float input of `dtype` (its own).
fn check_grad_dtype(path: &Path, g: &DynVec, want: DType) -> Result<(), CliError> {
    if g.dtype() != want {
        return Err(CliError::file(
            path,
            format!(
                "the upstream gradient is {}, the input's gradient type is {want}",
                g.dtype()
            ),
        ));
    }
    Ok(())
}

fn dense(a: &RunArgs, req: &OpRequest, grad: &Path) -> Result<(), CliError> {
    if a.mask_from_pattern {
        return Err(CliError::Usage(
            "--mask-from-pattern needs a sparse (.mtx or .npz) input".into(),
        ));
    }
    crate::dense_output(a)?;
    let input = binary::read_dense(&a.input, a.mask.as_ref())?;
    check_float(&a.input, input.values.dtype(), req.op)?;
    let g = npy::read_values(grad)?;
    check_grad_dtype(grad, &g.values, input.values.dtype())?;
    let shape = input.shape.clone();
    let x = Array::dense(&input.shape, input.values, input.mask)?;
    let up = Output::Dense(Outcome {
        shape: g.shape,
        values: g.values,
        mask: BitMask::filled([0], true)?,
    });
    let dx = x.view()?.vjp(req, &up).map_err(|e| match e {
        // the upstream file's fault, named as such
        MaskedError::ShapeMismatch { left, right, .. } => CliError::file(
            grad,
            format!(
                "the upstream gradient has shape {left:?}, the output of {} has shape {right:?}",
                req.op
            ),
        ),
        e @ MaskedError::InvalidArgument { name: "g", .. } => CliError::file(grad, e.to_string()),
        e => e.into(),
    })?;
    Ok(npy::write_atomic(&a.output, |buf| {
        npy::encode_dyn(&shape, dx.values().clone(), buf)
    })?)
}

fn sparse(a: &RunArgs, req: &OpRequest, grad: &Path) -> Result<(), CliError> {
    if a.mask.is_none() && !a.mask_from_pattern {
        return Err(CliError::Usage(format!(
            "{}: vjp on a sparse file needs --mask or --mask-from-pattern (a gradient is \
             stored at the valid positions, which must be explicit)",
            a.input.display()
        )));
    }
    if a.mask.is_some() && a.mask_from_pattern {
        return Err(CliError::Usage(
            "--mask and --mask-from-pattern exclude each other".into(),
        ));
    }
    if extension(&a.output) != "npz" {
        return Err(CliError::file(
            &a.output,
            "the gradient of a sparse input is written as a .npz COO file".into(),
        ));
    }
    if extension(grad) != "npz" {
        return Err(CliError::file(
            grad,
            "the upstream gradient of a sparse input must be a .npz COO file".into(),
        ));
    }
    let layout = crate::sparse_layout(a.layout.as_deref(), &a.input);
    let input = sparse::read_sparse(&a.input)?;
    check_float(&a.input, input.values.dtype(), req.op)?;
    let g = sparse::read_sparse(grad)?;
    let mask = crate::read_sparse_mask(a, &input.shape)?;
    let x = match layout.as_str() {
        "coo" => {
            let cm = match mask {
                None => CooMask::Stored,
                Some((p, m)) => CooMask::Pattern(binary::coo_mask(p, &m)?),
            };
            Array::coo(&input.shape, &input.coords, input.values, cm)
                .map_err(|e| CliError::file(&a.input, e.to_string()))?
        }
        "csr" => {
            let (indptr, indices, values) = input.to_csr(&a.input)?;
            let shape = (input.shape[0], input.shape[1]);
            let cm = match mask {
                None => CsrMask::Stored,
                Some((p, m)) => CsrMask::Pattern(binary::csr_mask(p, &m)?),
            };
            Array::csr(shape, indptr, indices, values, cm)?
        }
        other => {
            return Err(CliError::Usage(format!(
                "invalid --layout '{other}' for a sparse file: expected csr or coo"
            )))
        }
    };
    let x = x.view()?;
    // the forward output's valid positions (the op by name, cast-free)
    let Output::Sparse(fwd) = x.apply(req)? else {
        unreachable!("sparse in, sparse out")
    };
    check_grad_dtype(grad, &g.values, x.dtype())?;
    let values = align(grad, &fwd.shape, &fwd.indices, &g)?;
    let up = Output::Sparse(SparseOutcome { values, ..fwd });
    let Output::Sparse(out) = x.vjp(req, &up)? else {
        unreachable!("sparse in, sparse out")
    };
    crate::write_sparse(&a.output, &out)
}

/// Aligns `G` (stored positions and values) to the valid output positions `valid`
/// (increasing): a missing position takes 0, a stored position that is not valid is an
/// error naming it.
fn align(
    path: &Path, shape: &[usize], valid: &[usize], g: &sparse::SparseFile,
) -> Result<DynVec, CliError> {
    if g.shape != shape {
        return Err(CliError::file(
            path,
            format!(
                "the upstream gradient has shape {:?}, the op's output has shape {:?}",
                g.shape, shape
            ),
        ));
    }
    let flat = ravel(shape, &g.coords);
    let mut at = vec![usize::MAX; valid.len()];
    for (k, &p) in flat.iter().enumerate() {
        match valid.binary_search(&p) {
            Ok(i) => at[i] = k,
            Err(_) => {
                let pos: Vec<usize> = g.coords.iter().map(|c| c[k]).collect();
                return Err(CliError::file(
                    path,
                    format!("entry {k} at {pos:?} is not a valid output position of the op"),
                ));
            }
        }
    }
    // a valid position G does not store takes 0
    Ok(with_dyn_vec!(&g.values, v => <_ as Element>::into_dyn(
        at.iter().map(|&k| if k == usize::MAX { Element::ZERO } else { v[k] }).collect()
    )))
}

/// Row-major flat positions of coordinates (in range: the reader checked them).
fn ravel(shape: &[usize], coords: &[Vec<usize>]) -> Vec<usize> {
    let n = coords
        .first()
        .map_or(usize::from(shape.is_empty()), Vec::len);
    (0..n)
        .map(|k| {
            shape
                .iter()
                .zip(coords)
                .fold(0usize, |f, (&dim, c)| f * dim + c[k])
        })
        .collect()
}
