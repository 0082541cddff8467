//! `masked vjp OP INPUT ... --grad G -o OUT`: the gradient of an op with respect to the
//! input's values (docs/cli.md, "Gradients"). Dense input takes a dense `G` shaped like
//! the forward output; sparse input a `.npz` COO `G` stored at (some of) the forward
//! output's valid positions, and writes a sparse gradient stored exactly at the input's
//! valid positions.

use crate::binary;
use crate::{build_request, parse_dtype, RunArgs};
use masked::by_name::{self as ops, Kind, Op, OpRequest, SparseOutcome};
use masked::{
    with_dyn_vec, BitMask, CooMask, DType, Element, MaskedArray, MaskedCoo, MaskedCsr, MaskedOps,
    ReducePlan, SparseArray,
};
use masked_cli::error::CliError;
use masked_cli::{extension, npy, sparse_io};
use ndarray::{ArrayD, IxDyn};
use sprs::CsMat;
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

/// `G`'s values as the gradient type `R` of the input, which `G` must have.
fn grad_values<R: Element>(path: &Path, g: &masked::DynVec) -> Result<Vec<R>, CliError> {
    if g.dtype() != R::DTYPE {
        return Err(CliError::file(
            path,
            format!(
                "the upstream gradient is {}, the input's gradient type is {}",
                g.dtype(),
                R::DTYPE
            ),
        ));
    }
    Ok(with_dyn_vec!(g, v => v.iter().map(|x| R::from_f64_lossy(x.to_f64())).collect()))
}

fn dense(a: &RunArgs, req: &OpRequest, grad: &Path) -> Result<(), CliError> {
    if a.mask_from_pattern {
        return Err(CliError::Usage(
            "--mask-from-pattern needs a sparse (.mtx or .npz) input".into(),
        ));
    }
    if extension(&a.output) != "npy" {
        return Err(CliError::file(
            &a.output,
            "dense output must be a .npy file".into(),
        ));
    }
    let input = binary::read_dense(&a.input, a.mask.as_ref())?;
    check_float(&a.input, input.values.dtype(), req.op)?;
    let g = npy::read_values(grad)?;
    let shape = input.shape.clone();
    let out = with_dyn_vec!(input.values, v => {
        let dx = dense_vjp(&shape, v, input.mask, req, grad, &g)?;
        <_ as Element>::into_dyn(dx)
    });
    npy::write_atomic(&a.output, |buf| npy::encode_dyn(&shape, out, buf))
}

fn dense_vjp<T: Element>(
    shape: &[usize],
    v: Vec<T>,
    mask: Option<BitMask>,
    req: &OpRequest,
    path: &Path,
    g: &npy::DynArray,
) -> Result<Vec<T::Real>, CliError> {
    let x = ArrayD::from_shape_vec(IxDyn(shape), v)
        .map_err(|e| CliError::Usage(format!("bad input shape: {e}")))?;
    let a = match mask {
        Some(m) => MaskedArray::new(x, m)?,
        None => MaskedArray::unmasked(x),
    };
    // G has the forward output's shape
    let want = match req.op.kind() {
        Kind::Normalize | Kind::Unary => shape.to_vec(),
        _ => ReducePlan::new(shape, &req.dims, req.keepdim)?.out_shape,
    };
    if g.shape != want {
        return Err(CliError::file(
            path,
            format!(
                "the upstream gradient has shape {:?}, the output of {} has shape {:?}",
                g.shape, req.op, want
            ),
        ));
    }
    let gv = ArrayD::from_shape_vec(IxDyn(&want), grad_values::<T::Real>(path, &g.values)?)
        .map_err(|e| CliError::Usage(format!("bad gradient shape: {e}")))?;
    let dx = match req.op.kind() {
        Kind::Normalize | Kind::Unary => a.vjp_map(req, &MaskedArray::unmasked(gv))?,
        _ => a.vjp_reduce(req, &MaskedArray::unmasked(gv))?,
    };
    let (vals, _) = dx.into_parts();
    Ok(vals.into_raw_vec_and_offset().0)
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
    let layout = a.layout.clone().unwrap_or_else(|| {
        if extension(&a.input) == "mtx" {
            "csr".into()
        } else {
            "coo".into()
        }
    });
    let input = sparse_io::read_sparse(&a.input)?;
    check_float(&a.input, input.values.dtype(), req.op)?;
    let g = sparse_io::read_sparse(grad)?;
    let mask = crate::read_sparse_mask(a, &input.shape)?;
    let out = match layout.as_str() {
        "coo" => {
            let cm = match mask {
                None => CooMask::Stored,
                Some((p, m)) => CooMask::Pattern(binary::coo_mask(p, &m)?),
            };
            let (shape, coords) = (&input.shape, &input.coords);
            let bad = |e: masked::MaskedError| CliError::file(&a.input, e.to_string());
            with_dyn_vec!(input.values, v => {
                let x = MaskedCoo::try_new(shape, coords, v, cm).map_err(bad)?;
                sparse_vjp(&x, req, grad, &g)?
            })
        }
        "csr" => {
            let (indptr, indices, values) = input.to_csr(&a.input)?;
            let shape = (input.shape[0], input.shape[1]);
            let pat = match mask {
                None => None,
                Some((p, m)) => Some(binary::csr_mask(p, &m)?),
            };
            with_dyn_vec!(values, v => {
                let m = CsMat::try_new(shape, indptr, indices, v)
                    .map_err(|(_, _, _, e)| CliError::Usage(format!("bad sparse input: {e}")))?;
                let x = match pat {
                    Some(p) => MaskedCsr::with_mask(m.view(), p)?,
                    None => MaskedCsr::from_pattern(m.view())?,
                };
                sparse_vjp(&x, req, grad, &g)?
            })
        }
        other => {
            return Err(CliError::Usage(format!(
                "invalid --layout '{other}' for a sparse file: expected csr or coo"
            )))
        }
    };
    sparse_io::write_sparse(&a.output, &out)
}

/// What a sparse layout needs for `masked vjp`: its forward results by name (the valid
/// output positions `G` is checked against) and its upstream types built from them.
trait SparseGrad<T: Element>: ops::ByName<T, Out = SparseOutcome> + MaskedOps<T> {
    /// The upstream of a map: `vals` at exactly the valid positions `fwd` of the
    /// forward map's output.
    fn mapped_upstream(
        &self,
        req: &OpRequest,
        fwd: &SparseOutcome,
        vals: Vec<T::Real>,
    ) -> Result<Self::Mapped<T::Real>, CliError>;
    /// The gradient as an outcome: positions and values.
    fn outcome(&self, dx: Self::Mapped<T::Real>) -> SparseOutcome;
}

impl<T: Element> SparseGrad<T> for MaskedCoo<T> {
    fn mapped_upstream(
        &self,
        _: &OpRequest,
        fwd: &SparseOutcome,
        vals: Vec<T::Real>,
    ) -> Result<MaskedCoo<T::Real>, CliError> {
        Ok(SparseArray::new(fwd.shape.clone(), fwd.indices.clone(), vals)?.into())
    }
    fn outcome(&self, dx: MaskedCoo<T::Real>) -> SparseOutcome {
        SparseOutcome {
            shape: dx.shape().to_vec(),
            indices: dx.pattern().flat(),
            values: <T::Real as Element>::into_dyn(dx.values().to_vec()),
        }
    }
}

impl<'m, T: Element> SparseGrad<T> for MaskedCsr<'m, T> {
    fn mapped_upstream(
        &self,
        req: &OpRequest,
        _: &SparseOutcome,
        vals: Vec<T::Real>,
    ) -> Result<masked::CsrMapped<'m, T::Real, usize>, CliError> {
        // the valid structure, as the forward map stores it
        let mut m = self.softmax(req.one_dim().unwrap_or(-1))?;
        m.data_mut().copy_from_slice(&vals);
        Ok(m)
    }
    fn outcome(&self, dx: masked::CsrMapped<'m, T::Real, usize>) -> SparseOutcome {
        let ncols = dx.cols();
        let indices = dx.iter().map(|(_, (i, j))| i * ncols + j).collect();
        SparseOutcome {
            shape: vec![dx.rows(), ncols],
            indices,
            values: <T::Real as Element>::into_dyn(dx.data().to_vec()),
        }
    }
}

/// Aligns `G` (stored positions and values) to the valid output positions `valid`
/// (increasing): a missing position takes 0, a stored position that is not valid is an
/// error naming it.
fn align<R: Element>(
    path: &Path,
    shape: &[usize],
    valid: &[usize],
    g: &sparse_io::SparseFile,
) -> Result<Vec<R>, CliError> {
    if g.shape != shape {
        return Err(CliError::file(
            path,
            format!(
                "the upstream gradient has shape {:?}, the op's output has shape {:?}",
                g.shape, shape
            ),
        ));
    }
    let vals: Vec<R> = grad_values(path, &g.values)?;
    let flat = ravel(shape, &g.coords);
    let mut out = vec![R::ZERO; valid.len()];
    for (k, (&p, &v)) in flat.iter().zip(&vals).enumerate() {
        match valid.binary_search(&p) {
            Ok(i) => out[i] = v,
            Err(_) => {
                let at: Vec<usize> = g.coords.iter().map(|c| c[k]).collect();
                return Err(CliError::file(
                    path,
                    format!("entry {k} at {at:?} is not a valid output position of the op"),
                ));
            }
        }
    }
    Ok(out)
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

fn sparse_vjp<T: Element, L: SparseGrad<T>>(
    x: &L,
    req: &OpRequest,
    path: &Path,
    g: &sparse_io::SparseFile,
) -> Result<SparseOutcome, CliError>
where
    L::Reduced<T::Real>: From<SparseArray<T::Real>>,
{
    // the forward output's valid positions (the op by name, cast-free)
    let fwd = ops::apply(x, req)?;
    let vals = align::<T::Real>(path, &fwd.shape, &fwd.indices, g)?;
    let dx = if matches!(req.op.kind(), Kind::Normalize | Kind::Unary) {
        let up = x.mapped_upstream(req, &fwd, vals)?;
        x.vjp_map(req, &up)?
    } else {
        let up = SparseArray::new(fwd.shape.clone(), fwd.indices.clone(), vals)?;
        x.vjp_reduce(req, &up.into())?
    };
    Ok(x.outcome(dx))
}
