//! `masked <BINARY> A (B | --scalar V)`: binary elementwise ops on files (docs/cli.md,
//! "Elementwise ops"). Operands are promoted by torch's rules, then run by name.

use crate::error::CliError;
use crate::{nonzero, RunArgs};
use masked::by_name::{promote, promote_scalar, BinOp};
use masked::engine::{self, Array, CsrMask, Operand, ZipOutput};
use masked::io::{extension, npy, sparse};
use masked::{
    with_dtype, BitMask, CooMask, CooPattern, DType, DynVec, Element, MaskRule, Pattern, Scalar,
    Values,
};
use sparse::SparseFile;
use sprs::CsMat;
use std::path::{Path, PathBuf};

/// A dense operand as read: shape, values, mask.
pub(crate) struct DenseIn {
    pub(crate) shape: Vec<usize>,
    pub(crate) values: DynVec,
    pub(crate) mask: Option<BitMask>,
}

impl DenseIn {
    /// The operand as an engine array with values converted to `dtype`.
    pub(crate) fn array(&self, dtype: DType) -> Result<Array, CliError> {
        let values = engine::convert(self.values.clone(), dtype)?;
        Ok(Array::dense(&self.shape, values, self.mask.clone())?)
    }
}

/// A sparse operand as read, with the file of its mask (or its own pattern).
pub(crate) struct SparseIn {
    pub(crate) path: PathBuf,
    pub(crate) file: SparseFile,
    pub(crate) mask: Option<(PathBuf, SparseFile)>,
}

/// The second operand.
enum Rhs {
    Dense(DenseIn),
    Sparse(SparseIn),
    Scalar(Scalar),
}

/// Parses `--scalar`: a literal without a decimal point or exponent is an integer.
pub(crate) fn parse_scalar(s: &str) -> Result<Scalar, CliError> {
    let t = s.trim();
    let bad = || CliError::Usage(format!("invalid --scalar value '{s}': expected a number"));
    if !t.contains(['.', 'e', 'E'])
        && !t.to_ascii_lowercase().contains("inf")
        && !t.eq_ignore_ascii_case("nan")
        && let Ok(i) = t.parse::<i64>()
    {
        return Ok(Scalar::Int(i));
    }
    t.parse::<f64>().map(Scalar::Float).map_err(|_| bad())
}

pub(crate) fn read_dense(path: &Path, mask: Option<&PathBuf>) -> Result<DenseIn, CliError> {
    let a = npy::read_values(path)?;
    let mask = match mask {
        None => None,
        Some(p) => {
            if extension(p) != "npy" {
                return Err(CliError::file(
                    p,
                    "a mask for dense input must be a .npy file".into(),
                ));
            }
            let m = npy::read_mask(p)?;
            Some(
                m.broadcast_to(&a.shape)
                    .map_err(|e| CliError::file(p, e.to_string()))?,
            )
        }
    };
    Ok(DenseIn {
        shape: a.shape,
        values: a.values,
        mask,
    })
}

pub(crate) fn read_sparse(
    path: &Path, mask: Option<&PathBuf>, from_pattern: bool, flag: &str,
) -> Result<SparseIn, CliError> {
    if mask.is_none() && !from_pattern {
        return Err(CliError::Usage(format!(
            "{}: a sparse operand of an elementwise op needs {flag} or --mask-from-pattern \
             (which positions are valid must be explicit)",
            path.display()
        )));
    }
    let file = sparse::read_sparse(path)?;
    let mask = match mask {
        None => None,
        Some(p) => {
            let m = sparse::read_sparse(p)?;
            if m.shape != file.shape {
                return Err(CliError::file(
                    p,
                    format!(
                        "mask shape {:?} differs from input shape {:?}",
                        m.shape, file.shape
                    ),
                ));
            }
            Some((p.clone(), m))
        }
    };
    Ok(SparseIn {
        path: path.to_path_buf(),
        file,
        mask,
    })
}

/// A COO mask pattern from a mask file's non-zero entries.
pub(crate) fn coo_mask(p: &Path, m: &SparseFile) -> Result<CooPattern, CliError> {
    let keep = nonzero(&m.values);
    let coords: Vec<Vec<usize>> = m
        .coords
        .iter()
        .map(|c| c.iter().zip(&keep).filter(|x| *x.1).map(|x| *x.0).collect())
        .collect();
    CooPattern::from_coords(&m.shape, &coords).map_err(|e| CliError::file(p, e.to_string()))
}

/// A CSR mask pattern from a mask file's non-zero entries.
pub(crate) fn csr_mask(p: &Path, m: &SparseFile) -> Result<Pattern, CliError> {
    let (mptr, mind, mval) = m.to_csr(p)?;
    let bools = CsMat::new((m.shape[0], m.shape[1]), mptr, mind, nonzero(&mval));
    Pattern::from_predicate(&bools.view(), |&b| b).map_err(|e| CliError::file(p, e.to_string()))
}

impl SparseIn {
    /// The operand on `layout` (`csr` or `coo`) with values converted to `dtype`.
    pub(crate) fn array(&self, layout: &str, dtype: DType) -> Result<Array, CliError> {
        if layout == "coo" {
            let values = engine::convert(self.file.values.clone(), dtype)?;
            let mask = match &self.mask {
                None => CooMask::Stored,
                Some((p, m)) => CooMask::Pattern(coo_mask(p, m)?),
            };
            return Array::coo(&self.file.shape, &self.file.coords, values, mask)
                .map_err(|e| CliError::file(&self.path, e.to_string()));
        }
        if self.file.shape.len() != 2 {
            return Err(CliError::file(
                &self.path,
                "the csr layout needs a 2-d array: use --layout coo".into(),
            ));
        }
        let (indptr, indices, values) = self.file.to_csr(&self.path)?;
        let values = engine::convert(values, dtype)?;
        let mask = match &self.mask {
            None => CsrMask::Stored,
            Some((p, f)) => CsrMask::Pattern(csr_mask(p, f)?),
        };
        let shape = (self.file.shape[0], self.file.shape[1]);
        Array::csr(shape, indptr, indices, values, mask)
            .map_err(|e| CliError::file(&self.path, format!("bad sparse input: {e}")))
    }
}

/// Runs a binary op from the command line.
pub(crate) fn run(a: &RunArgs, op: BinOp) -> Result<(), CliError> {
    let rule: MaskRule = match a.masks.as_deref() {
        None => MaskRule::Strict,
        Some(s) => s.parse().map_err(|_| {
            CliError::Usage(format!(
                "invalid --masks value '{s}': expected strict or and"
            ))
        })?,
    };
    if a.dim.is_some() || a.keepdim {
        return Err(CliError::Usage(format!(
            "{} is elementwise: it takes no --dim or --keepdim",
            op.name()
        )));
    }
    if a.dtype.is_some() {
        return Err(CliError::Usage(format!(
            "{} promotes its operands by torch's rules: it takes no --dtype (cast a file first)",
            op.name()
        )));
    }
    if a.scalar_first && a.scalar.is_none() {
        return Err(CliError::Usage("--scalar-first needs --scalar".into()));
    }
    if a.mask.is_some() && a.mask_from_pattern && a.mask_b.is_some() {
        return Err(CliError::Usage(
            "--mask, --mask-b and --mask-from-pattern: give each operand one mask".into(),
        ));
    }
    let rhs = match (&a.b, &a.scalar) {
        (Some(_), Some(_)) => return Err(CliError::Usage("give B or --scalar, not both".into())),
        (None, None) => {
            return Err(CliError::Usage(format!(
                "{} needs a second operand: a file B or --scalar V",
                op.name()
            )))
        }
        (None, Some(s)) => {
            if a.mask_b.is_some() {
                return Err(CliError::Usage(
                    "--mask-b belongs to B: a scalar has no mask".into(),
                ));
            }
            Rhs::Scalar(parse_scalar(s)?)
        }
        (Some(p), None) => match extension(p).as_str() {
            "npy" => Rhs::Dense(read_dense(p, a.mask_b.as_ref())?),
            "mtx" | "npz" => Rhs::Sparse(read_sparse(
                p,
                a.mask_b.as_ref(),
                a.mask_from_pattern,
                "--mask-b",
            )?),
            _ => {
                return Err(CliError::file(
                    p,
                    "unknown input extension: expected .npy, .mtx or .npz".into(),
                ))
            }
        },
    };
    let ext = extension(&a.input);
    match ext.as_str() {
        "npy" => {
            let x = read_dense(&a.input, a.mask.as_ref())?;
            match rhs {
                // sparse wins: the sparse operand runs on the left with the op swapped
                Rhs::Sparse(s) => sparse_out(a, &s, Rhs::Dense(x), op, rule, true),
                rhs => dense_out(a, &x, rhs, op, rule),
            }
        }
        "mtx" | "npz" => {
            let s = read_sparse(&a.input, a.mask.as_ref(), a.mask_from_pattern, "--mask")?;
            sparse_out(a, &s, rhs, op, rule, a.scalar_first)
        }
        _ => Err(CliError::file(
            &a.input,
            "unknown input extension: expected .npy, .mtx or .npz".into(),
        )),
    }
}

/// The dtype both operands compute in.
fn result_dtype(a: DType, rhs: &Rhs) -> DType {
    match rhs {
        Rhs::Dense(d) => promote(a, d.values.dtype()),
        Rhs::Sparse(s) => promote(a, s.file.values.dtype()),
        Rhs::Scalar(s) => promote_scalar(a, *s),
    }
}

/// Whether `s` has a value in `dtype`.
pub(crate) fn scalar_fits(s: Scalar, dtype: DType) -> bool {
    with_dtype!(dtype, T => T::from_scalar(s).is_some())
}

fn dense_out(
    a: &RunArgs, x: &DenseIn, rhs: Rhs, op: BinOp, rule: MaskRule,
) -> Result<(), CliError> {
    crate::dense_output(a)?;
    let dtype = result_dtype(x.values.dtype(), &rhs);
    if let Rhs::Dense(y) = &rhs {
        // a broadcast output can be far larger than both inputs ([n, 1] + [1, n]): its
        // size is checked before it is allocated (values, mask bit, the encoded file)
        let shape = masked::binary::broadcast_shapes(op.name(), &x.shape, &y.shape)?;
        let n = shape
            .iter()
            .fold(1u128, |n, &d| n.saturating_mul(d as u128));
        crate::limits::check(
            format!("{}: an output of shape {shape:?}", op.name()),
            n.saturating_mul(2 * dtype.size() as u128 + 1),
        )?;
    }
    let left = x.array(dtype)?;
    let right = match &rhs {
        Rhs::Dense(y) => Some(y.array(dtype)?),
        Rhs::Scalar(_) => None,
        Rhs::Sparse(_) => unreachable!("a sparse operand runs on the left"),
    };
    let out = zip(&left, right.as_ref(), &rhs, op, rule, a.scalar_first)?;
    let ZipOutput::Dense(out) = out else {
        unreachable!("dense with dense or a scalar is dense")
    };
    crate::write_dense(a, out)
}

/// Runs `op` on two erased operands (`right` is `None` for a scalar `rhs`).
fn zip(
    left: &Array, right: Option<&Array>, rhs: &Rhs, op: BinOp, rule: MaskRule, swapped: bool,
) -> Result<ZipOutput, CliError> {
    let l = left.view()?;
    Ok(match (right, rhs) {
        (Some(r), _) => l.binary(Operand::Array(&r.view()?), op, rule, swapped)?,
        (None, Rhs::Scalar(s)) => {
            if scalar_fits(*s, left.dtype()) {
                l.binary(Operand::Scalar(*s), op, rule, swapped)?
            } else {
                return Err(CliError::Usage(format!(
                    "the scalar does not fit in {}",
                    left.dtype().name()
                )));
            }
        }
        (None, _) => unreachable!("an array operand is given as an array"),
    })
}

fn sparse_out(
    a: &RunArgs, s: &SparseIn, rhs: Rhs, op: BinOp, rule: MaskRule, swapped: bool,
) -> Result<(), CliError> {
    if a.out_mask.is_some() {
        return Err(CliError::Usage(
            "--out-mask is for dense output: the stored positions of a sparse output are its mask"
                .into(),
        ));
    }
    crate::sparse_output_path(&a.output, "sparse output must be a .npz or .mtx file")?;
    let layout = crate::sparse_layout(a.layout.as_deref(), &s.path);
    let dtype = result_dtype(s.file.values.dtype(), &rhs);
    if !["csr", "coo"].contains(&layout.as_str()) {
        return Err(CliError::Usage(format!(
            "invalid --layout '{layout}' for a sparse operand: expected csr or coo"
        )));
    }
    let left = s.array(&layout, dtype)?;
    let right = match &rhs {
        Rhs::Dense(y) => Some(y.array(dtype)?),
        Rhs::Sparse(b) => Some(b.array(&layout, dtype)?),
        Rhs::Scalar(_) => None,
    };
    let ZipOutput::Sparse(out) = zip(&left, right.as_ref(), &rhs, op, rule, swapped)? else {
        unreachable!("a sparse left operand gives a sparse result")
    };
    let data = match &out.values {
        Values::Num(v) => sparse::Data::Num(v),
        Values::Bool(b) => sparse::Data::Bool(b),
    };
    Ok(sparse::write_entries(
        &a.output,
        &out.shape,
        &out.indices,
        data,
    )?)
}
