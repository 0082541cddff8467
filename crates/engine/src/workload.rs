//! Generated workloads for `masked bench`, behind the erased boundary: the typed data
//! of one layout and dtype ([`Workload`]), and each kind of timed call prepared on it as
//! a [`Run`] (a closure the caller's timing loop calls). The typed engine code a
//! benchmark runs (plain ops, VJPs from a saved forward pass, binary ops, fused
//! elementwise-then-reduce, writing into a caller's buffer) is instantiated here, once,
//! and the CLI only times the closures.

use crate::array::ArrayRef;
use crate::by_name::{Discard, Forward, KeepForward};
use layout_coo::{CooMask, CooPattern, MaskedCoo};
use layout_csr::{MaskedCsr, PatternI};
use layout_dense::{MaskedArray, MaskedView};
use masked_core::binary::{BinOp, CmpZip, FloatZip, KeepZip, PartialZip};
use masked_core::registry::apply_to;
use masked_core::{
    with_by_dtype, with_dtype, BitMask, ByDType, DType, Element, Erase, Family, Kind, MaskRule,
    MaskedError, MaskedOps, OpRequest, Result, ZipKernels,
};
use masked_kernels::fresh_vec;
use ndarray::{ArrayViewD, IxDyn};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use rand_distr::{Poisson, StandardNormal};
use sprs::{CsMatI, CsMatViewI};
use std::sync::Mutex;

/// One prepared timed call: everything built before the timing is owned or borrowed by
/// the closure, which runs the call once (its result dropped).
pub type Run<'a> = Box<dyn Fn() -> Result<()> + Sync + 'a>;

/// How a workload is generated.
#[derive(Debug, Clone)]
pub struct Gen {
    /// Seed of the generator.
    pub seed: u64,
    /// Stored-entry density of sparse inputs.
    pub density: f64,
    /// Probability that an element is valid (dense mask; a sparse random mask).
    pub mask_density: f64,
    /// Sparse mask: `pattern` (the input's own) or `random` (an independent one).
    pub mask_source: String,
    /// The distribution of the values.
    pub values: Values,
}

/// The distribution of generated values: a standard normal draw, mapped into an op's
/// domain (so that a timed `log` or `acosh` computes numbers, not NaNs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Values {
    /// Standard normal.
    #[default]
    Normal,
    /// `|x| + 0.01` (logarithms, roots, powers).
    Positive,
    /// `tanh(x)`, in (-1, 1) (asin, acos, atanh).
    Unit,
    /// `1 + |x|` (acosh).
    AboveOne,
}

impl Values {
    /// The names [`Values::parse`] takes.
    pub const NAMES: &'static str = "normal, positive, unit, above-one";

    /// From its name (`normal`, `positive`, `unit`, `above-one`).
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] naming the unknown distribution.
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "normal" => Values::Normal,
            "positive" => Values::Positive,
            "unit" => Values::Unit,
            "above-one" => Values::AboveOne,
            _ => {
                return Err(usage(format!(
                    "unknown value distribution '{name}': expected one of {}",
                    Self::NAMES
                )))
            }
        })
    }

    /// The value a standard normal draw `x` becomes.
    pub fn map(self, x: f64) -> f64 {
        match self {
            Values::Normal => x,
            Values::Positive => x.abs() + 0.01,
            Values::Unit => x.tanh(),
            Values::AboveOne => 1.0 + x.abs(),
        }
    }
}

fn usage(msg: String) -> MaskedError {
    MaskedError::InvalidData(msg)
}

/// The generated input of one layout.
struct Data<T: Element> {
    input: Input<T>,
    /// Stored entries (dense: the element count).
    nnz: usize,
    /// Bytes the ideal kernel reads.
    bytes: f64,
}

enum Input<T: Element> {
    Dense {
        shape: Vec<usize>,
        values: Vec<T>,
        mask: BitMask,
    },
    Csr {
        mat: CsMatI<T, u32, usize>,
        mask: Option<PatternI<u32>>,
    },
    Coo(MaskedCoo<T>),
}

struct DataOf;
impl Family for DataOf {
    type Of<T: Element> = Data<T>;
}

/// Generated data of one layout and dtype (dense: a bit mask; CSR: `u32` column
/// indices, the mask its own pattern or a random one; COO: the same over n-D
/// coordinates), from which timed calls are prepared.
pub struct Workload(ByDType<DataOf>);

/// A standard normal value mapped by `v`, as `T` (integers: x 100, rounded).
fn normal<T: Element>(rng: &mut SmallRng, v: Values) -> T {
    let x = v.map(rng.sample(StandardNormal));
    if T::DTYPE.is_float() {
        T::from_f64_lossy(x)
    } else {
        T::from_f64_lossy((x * 100.0).round())
    }
}

/// `k` distinct random positions below `n`, sorted.
fn random_positions(rng: &mut SmallRng, n: usize, k: usize) -> Vec<usize> {
    let k = k.min(n);
    let mut out: Vec<usize> = Vec::with_capacity(k);
    if k * 2 > n {
        // dense: keep each position with probability k / n
        let p = k as f64 / n as f64;
        return (0..n).filter(|_| rng.random::<f64>() < p).collect();
    }
    while out.len() < k {
        while out.len() < k {
            out.push(rng.random_range(0..n));
        }
        out.sort_unstable();
        out.dedup();
    }
    out
}

/// Sorted distinct random columns for every row: Poisson(`mean`) of them per row.
fn random_rows(
    rng: &mut SmallRng, nrows: usize, ncols: usize, mean: f64,
) -> Result<(Vec<usize>, Vec<u32>)> {
    let poisson =
        Poisson::new(mean.max(1e-12)).map_err(|e| usage(format!("invalid --density: {e}")))?;
    let mut indptr = Vec::with_capacity(nrows + 1);
    indptr.push(0);
    let mut indices: Vec<u32> = Vec::new();
    let mut row = Vec::new();
    for _ in 0..nrows {
        let k = (rng.sample(poisson) as usize).min(ncols);
        row.clear();
        while row.len() < k {
            while row.len() < k {
                row.push(rng.random_range(0..ncols as u32));
            }
            row.sort_unstable();
            row.dedup();
        }
        indices.extend_from_slice(&row);
        indptr.push(indices.len());
    }
    Ok((indptr, indices))
}

impl Workload {
    /// Generates the data of `layout` (`dense`, `csr` or `coo`) and `dtype` (integers:
    /// normal values x 100, rounded).
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] naming a bad layout, density, mask source or shape.
    pub fn generate(layout: &str, dtype: DType, shape: &[usize], g: &Gen) -> Result<Workload> {
        Ok(Workload(
            with_dtype!(dtype, T => T::erase::<DataOf>(match layout {
                "dense" => Data::<T>::dense(shape, g)?,
                "csr" => Data::<T>::csr(shape, g)?,
                "coo" => Data::<T>::coo(shape, g)?,
                other => {
                    return Err(usage(format!(
                        "invalid --layout '{other}': expected dense, csr or coo"
                    )))
                }
            })),
        ))
    }

    /// Stored entries (dense: the element count).
    pub fn nnz(&self) -> usize {
        with_by_dtype!(&self.0, T, d => d.nnz)
    }

    /// Bytes the ideal kernel reads.
    pub fn bytes(&self) -> f64 {
        with_by_dtype!(&self.0, T, d => d.bytes)
    }

    /// The value type.
    pub fn dtype(&self) -> DType {
        self.0.dtype()
    }

    /// The second operand of a binary op: new values on the same mask and structure
    /// (`strict`), or an independent mask and pattern of the same densities (`and`).
    ///
    /// # Errors
    /// As [`Workload::generate`].
    pub fn partner(&self, g: &Gen, rule: MaskRule) -> Result<Workload> {
        Ok(Workload(
            with_by_dtype!(&self.0, T, d => T::erase::<DataOf>(d.partner(g, rule)?)),
        ))
    }

    /// `req`'s op (its result dropped).
    ///
    /// # Errors
    /// Bad dims or options for the op.
    pub fn op<'s>(&'s self, req: &OpRequest, into: bool) -> Result<Run<'s>> {
        let req = req.clone();
        Ok(with_by_dtype!(&self.0, T, d => match &d.input {
            Input::Dense { shape, values, mask } if into => {
                into_run(ArrayRef::from_dense(dense_of(shape, values, mask)?), req)?
            }
            Input::Dense { shape, values, mask } => {
                let x = ArrayRef::from_dense(dense_of(shape, values, mask)?);
                Box::new(move || x.run(&req))
            }
            Input::Csr { mat, mask } if into => {
                into_run(ArrayRef::from_csr32(csr_of(mat.view(), mask)?), req)?
            }
            Input::Coo(c) if into => into_run(ArrayRef::from_coo(c), req)?,
            Input::Csr { mat, mask } => {
                let x = ArrayRef::from_csr32(csr_of(mat.view(), mask)?);
                Box::new(move || x.run(&req))
            }
            Input::Coo(c) => {
                let x = ArrayRef::from_coo(c);
                Box::new(move || x.run(&req))
            }
        }))
    }

    /// The VJP of `req`'s op given its saved forward output (the saved forms, which read
    /// it where it saves work), with an upstream built once: a mean of the input for a
    /// reduction, a softmax along the dim for a map (values at exactly the forward
    /// output's valid positions). `into`: the dense VJP written into one reused buffer.
    /// Compiled for the float dtypes only.
    ///
    /// # Errors
    /// Integer input, an op without a VJP, `into` on a sparse layout.
    pub fn vjp<'s>(&'s self, req: &OpRequest, into: bool) -> Result<Run<'s>> {
        let op = req.op.name();
        with_by_dtype!(&self.0, T, d => d.vjp(req, into); floats_only else Err(MaskedError::NotDifferentiable {
            op,
            reason: "integer and bool input have no gradient",
        }))
    }

    /// Both operands' gradients of the binary op of `req` with `other` (the partner), an
    /// upstream stored at the forward output's positions; `into`: dense, into two
    /// reused buffers. Compiled for the float dtypes only.
    ///
    /// # Errors
    /// Integer input, operands of two dtypes or layouts, `into` on a sparse layout.
    pub fn vjp_binary<'s>(
        &'s self, other: &'s Workload, req: &OpRequest, rule: MaskRule, into: bool,
    ) -> Result<Run<'s>> {
        let op = req.op.name();
        with_by_dtype!(&self.0, T, d => d.vjp_binary(same::<T>(&other.0)?, req, rule, into);
        floats_only else Err(MaskedError::NotDifferentiable {
            op,
            reason: "integer and bool input have no gradient",
        }))
    }

    /// The binary op `op` of this operand and `other` (its typed result dropped);
    /// `into`: written into one reused buffer (dense, and CSR whose result keeps every
    /// entry).
    ///
    /// # Errors
    /// Operands of two dtypes or layouts, `into` on COO.
    pub fn binary<'s>(
        &'s self, other: &'s Workload, op: BinOp, rule: MaskRule, into: bool,
    ) -> Result<Run<'s>> {
        with_by_dtype!(&self.0, T, d => d.binary(same::<T>(&other.0)?, op, rule, into))
    }

    /// `R-of-B`: `req`'s reduction or normalization of the lazy binary op `op` of this
    /// operand and `other` (the sparse views compute values a row task at a time where
    /// the reduction allows). Float dtypes only: each (dtype, layout, op family) is
    /// a lazy view with every op of the registry compiled over it, and the integer
    /// ones were a twelfth of this crate's code for a benchmark nobody times (the
    /// typed API keeps `zip_view` for every dtype).
    ///
    /// # Errors
    /// A comparison (bool values), integer operands, operands of two dtypes or layouts.
    pub fn fused<'s>(
        &'s self, other: &'s Workload, req: &OpRequest, op: BinOp, rule: MaskRule,
    ) -> Result<Run<'s>> {
        let dtype = self.dtype();
        with_by_dtype!(&self.0, T, d => d.fused(same::<T>(&other.0)?, req, op, rule);
        floats_only else Err(usage(format!(
            "{}-of-{} on {dtype}: the fused forms are benchmarked on float dtypes \
             (f16, bf16, f32, f64)",
            req.op,
            op.name()
        ))))
    }
}

/// `other` as data of `T`.
fn same<T: Element>(other: &ByDType<DataOf>) -> Result<&Data<T>> {
    T::unerase(other).ok_or_else(|| {
        usage(format!(
            "the partner has dtype {}, the operand {}",
            other.dtype(),
            T::DTYPE
        ))
    })
}

fn layouts() -> MaskedError {
    usage("the partner has another layout".into())
}

/// `req` on `x` written into one reused buffer: the result's dtype and size (dense: its
/// positions; sparse: its stored entries, every one a slot) from one call first, then
/// one write into it (an op that cannot write into a buffer fails here, before timing).
fn into_run<'s>(x: ArrayRef<'s>, req: OpRequest) -> Result<Run<'s>> {
    let mut values = match x.apply(&req)? {
        crate::Output::Dense(o) => o.values,
        crate::Output::Sparse(o) => o.values,
        crate::Output::Csr(o) => o.values,
        crate::Output::Coo(o) => o.values,
    };
    x.apply_into(&req, values.as_out())?;
    let out = Mutex::new(values);
    Ok(Box::new(move || {
        let mut out = out.lock().expect("one user");
        x.apply_into(&req, out.as_out()).map(drop)
    }))
}

fn no_into(what: &str) -> MaskedError {
    usage(format!(
        "bench --into with {what}: dense layout only (a sparse gradient is stored on \
         the input's valid entries)"
    ))
}

impl<T: Element> Data<T> {
    pub(crate) fn dense(shape: &[usize], a: &Gen) -> Result<Self> {
        let n: usize = shape.iter().product();
        let mut rng = SmallRng::seed_from_u64(a.seed);
        // buffers advised onto huge pages, as numpy's and torch's large arrays are (on 4
        // KiB pages one core streams a 1 GiB array at half the speed: TLB misses)
        let mut values: Vec<T> = fresh_vec(n);
        for v in &mut values {
            *v = normal(&mut rng, a.values);
        }
        let mut words: Vec<u64> = fresh_vec(n.div_ceil(64));
        for k in 0..n {
            words[k / 64] |= u64::from(rng.random::<f64>() < a.mask_density) << (k % 64);
        }
        let mask = BitMask::from_words(shape, words)?;
        Ok(Data {
            input: Input::Dense {
                shape: shape.to_vec(),
                values,
                mask,
            },
            nnz: n,
            bytes: (n * std::mem::size_of::<T>() + n.div_ceil(8)) as f64,
        })
    }

    pub(crate) fn csr(shape: &[usize], a: &Gen) -> Result<Self> {
        let &[nrows, ncols] = shape else {
            return Err(usage(format!(
                "bench --layout csr needs a 2-d --shape, got {} dims",
                shape.len()
            )));
        };
        if u32::try_from(ncols).is_err() {
            return Err(usage(format!(
                "--shape: {ncols} columns exceed u32 indices"
            )));
        }
        if !(0.0..=1.0).contains(&a.density) {
            return Err(usage(format!(
                "invalid --density {}: expected a value in [0, 1]",
                a.density
            )));
        }
        let mut rng = SmallRng::seed_from_u64(a.seed);
        let (indptr, indices) = random_rows(&mut rng, nrows, ncols, a.density * ncols as f64)?;
        let values: Vec<T> = (0..indices.len())
            .map(|_| normal(&mut rng, a.values))
            .collect();
        let nnz = indices.len();
        let mat = CsMatI::try_new((nrows, ncols), indptr, indices, values)
            .map_err(|(_, _, _, e)| usage(format!("generated matrix: {e}")))?;
        let mask = match a.mask_source.as_str() {
            "pattern" => None,
            "random" => {
                let (mp, mi) = random_rows(&mut rng, nrows, ncols, a.density * ncols as f64)?;
                Some(PatternI::try_from_parts((nrows, ncols), mp, mi)?)
            }
            other => {
                return Err(usage(format!(
                    "invalid --mask-source '{other}': expected pattern or random"
                )))
            }
        };
        Ok(Data {
            input: Input::Csr { mat, mask },
            nnz,
            bytes: (nnz * (std::mem::size_of::<T>() + 4) + (nrows + 1) * 8) as f64,
        })
    }

    pub(crate) fn coo(shape: &[usize], a: &Gen) -> Result<Self> {
        if !(0.0..=1.0).contains(&a.density) {
            return Err(usage(format!(
                "invalid --density {}: expected a value in [0, 1]",
                a.density
            )));
        }
        let n = shape
            .iter()
            .try_fold(1usize, |p, &s| p.checked_mul(s))
            .ok_or_else(|| usage("--shape: too many elements".into()))?;
        let mut rng = SmallRng::seed_from_u64(a.seed);
        let k = (a.density * n as f64).round() as usize;
        let pattern = CooPattern::from_flat(shape, &random_positions(&mut rng, n, k))?;
        let values: Vec<T> = (0..pattern.nnz())
            .map(|_| normal(&mut rng, a.values))
            .collect();
        let mask = match a.mask_source.as_str() {
            "pattern" => CooMask::Stored,
            "random" => {
                let m = random_positions(&mut rng, n, k);
                CooMask::Pattern(CooPattern::from_flat(shape, &m)?)
            }
            other => {
                return Err(usage(format!(
                    "invalid --mask-source '{other}': expected pattern or random"
                )))
            }
        };
        let nnz = pattern.nnz();
        Ok(Data {
            input: Input::Coo(MaskedCoo::from_parts(pattern, values, mask)?),
            nnz,
            bytes: (nnz * std::mem::size_of::<T>()
                + nnz * shape.len() * std::mem::size_of::<usize>()) as f64,
        })
    }

    /// The second operand of a binary op: new values on the same mask and structure
    /// (strict), or an independent mask and pattern of the same densities (and).
    fn partner(&self, a: &Gen, rule: MaskRule) -> Result<Data<T>> {
        let mut rng = SmallRng::seed_from_u64(a.seed.wrapping_add(1));
        let shape = match &self.input {
            Input::Dense { shape, .. } => shape.clone(),
            Input::Csr { mat, .. } => vec![mat.rows(), mat.cols()],
            Input::Coo(c) => c.shape().to_vec(),
        };
        if rule == MaskRule::And {
            let b = Gen {
                seed: a.seed.wrapping_add(1),
                ..a.clone()
            };
            return match &self.input {
                Input::Dense { .. } => Data::dense(&shape, &b),
                Input::Csr { .. } => Data::csr(&shape, &b),
                Input::Coo(_) => Data::coo(&shape, &b),
            };
        }
        let input = match &self.input {
            Input::Dense {
                shape,
                values,
                mask,
            } => Input::Dense {
                shape: shape.clone(),
                values: (0..values.len())
                    .map(|_| normal(&mut rng, a.values))
                    .collect(),
                mask: mask.clone(),
            },
            Input::Csr { mat, mask } => {
                let values = (0..mat.nnz()).map(|_| normal(&mut rng, a.values)).collect();
                let m = CsMatI::try_new(
                    mat.shape(),
                    mat.indptr().raw_storage().to_vec(),
                    mat.indices().to_vec(),
                    values,
                )
                .map_err(|(_, _, _, e)| usage(format!("generated matrix: {e}")))?;
                Input::Csr {
                    mat: m,
                    mask: mask.clone(),
                }
            }
            Input::Coo(c) => {
                let values = (0..c.nnz()).map(|_| normal(&mut rng, a.values)).collect();
                Input::Coo(MaskedCoo::from_parts(
                    c.pattern().clone(),
                    values,
                    c.mask(),
                )?)
            }
        };
        Ok(Data {
            input,
            nnz: self.nnz,
            bytes: self.bytes,
        })
    }

    fn vjp<'s>(&'s self, req: &OpRequest, into: bool) -> Result<Run<'s>> {
        let req = req.clone();
        let not_float = || {
            usage(format!(
                "vjp-{}: the op's output is not of the input's float type",
                req.op.name()
            ))
        };
        match &self.input {
            Input::Dense {
                shape,
                values,
                mask,
            } if into => {
                let x = dense_of(shape, values, mask)?;
                let n = x.values().len();
                let buf = Mutex::new(vec![T::Real::default(); n]);
                match apply_to(&x, &req, &KeepForward)? {
                    Forward::Mapped(y) => {
                        let g = x.softmax(req.one_dim().unwrap_or(-1))?;
                        Ok(Box::new(move || {
                            let mut out = buf.lock().expect("one user");
                            x.vjp_saved_into(&req, Some(&y), &g, &mut out)
                        }))
                    }
                    Forward::Reduced(y) => {
                        let g = x.mean(req.dims.clone(), req.keepdim)?;
                        Ok(Box::new(move || {
                            let mut out = buf.lock().expect("one user");
                            x.vjp_saved_into(&req, Some(&y), &g, &mut out)
                        }))
                    }
                    Forward::Other => Err(not_float()),
                }
            }
            Input::Csr { .. } | Input::Coo(_) if into => Err(no_into("vjp-OP")),
            Input::Dense {
                shape,
                values,
                mask,
            } => saved_vjp::<T, MaskedView<'_, T, IxDyn>, _>(dense_of(shape, values, mask)?, req),
            Input::Csr { mat, mask } => {
                saved_vjp::<T, MaskedCsr<'_, T, u32, usize>, _>(csr_of(mat.view(), mask)?, req)
            }
            Input::Coo(c) => saved_vjp::<T, MaskedCoo<T>, _>(c, req),
        }
    }

    /// This input and `other` as two operands of one layout; `share`: a CSR partner
    /// with the same entries shares this matrix's index arrays ([`same_entries`]).
    fn pair<'s>(&'s self, other: &'s Data<T>, share: bool) -> Result<Pair<'s, T>> {
        Ok(match (&self.input, &other.input) {
            (
                Input::Dense {
                    shape,
                    values,
                    mask,
                },
                Input::Dense {
                    values: v2,
                    mask: m2,
                    ..
                },
            ) => Pair::Dense(dense_of(shape, values, mask)?, dense_of(shape, v2, m2)?),
            (Input::Csr { mat, mask }, Input::Csr { mat: m2, mask: k2 }) => {
                let view = if share {
                    same_entries(mat, m2)?
                } else {
                    m2.view()
                };
                Pair::Csr(csr_of(mat.view(), mask)?, csr_of(view, k2)?)
            }
            (Input::Coo(x), Input::Coo(y)) => Pair::Coo(x, y),
            _ => return Err(layouts()),
        })
    }

    fn binary<'s>(
        &'s self, other: &'s Data<T>, op: BinOp, rule: MaskRule, into: bool,
    ) -> Result<Run<'s>> {
        match self.pair(other, true)? {
            Pair::Dense(x, y) => {
                if into {
                    let n = x.values().len();
                    return Ok(by_family!(op, n, |z, out| x
                        .zip_into(&y, z, rule, out)
                        .map(drop)));
                }
                Ok(Box::new(move || zip_discard(&x, &y, op, rule)))
            }
            Pair::Csr(x, y) => {
                if into {
                    let n = x.lanes().nnz();
                    return Ok(by_family!(op, n, |z, out| x.zip_into(&y, z, rule, out)));
                }
                Ok(Box::new(move || zip_discard(&x, &y, op, rule)))
            }
            Pair::Coo(..) if into => Err(usage("bench --into: dense and CSR layouts only".into())),
            Pair::Coo(x, y) => Ok(Box::new(move || zip_discard(x, y, op, rule))),
        }
    }

    fn vjp_binary<'s>(
        &'s self, other: &'s Data<T>, req: &OpRequest, rule: MaskRule, into: bool,
    ) -> Result<Run<'s>> {
        let req = req.clone();
        let op = req
            .op
            .binary()
            .ok_or_else(|| usage(format!("{} is not binary", req.op)))?;
        // an upstream with the forward output's structure: any zip's result has it
        let up = PartialZip { op, wrt_y: false };
        match self.pair(other, false)? {
            Pair::Dense(x, y) => {
                let g = x.zip_elements(&y, &up, rule)?;
                if into {
                    let n = x.values().len();
                    let bufs =
                        Mutex::new((vec![T::Real::default(); n], vec![T::Real::default(); n]));
                    return Ok(Box::new(move || {
                        let (dx, dy) = &mut *bufs.lock().expect("one user");
                        x.vjp_binary_into(&req, &y, rule, &g, dx, dy)
                    }));
                }
                Ok(Box::new(move || x.vjp_binary(&req, &y, rule, &g).map(drop)))
            }
            Pair::Csr(..) | Pair::Coo(..) if into => Err(no_into("vjp-B")),
            Pair::Csr(x, y) => {
                let g = x.zip_elements(&y, &up, rule)?;
                Ok(Box::new(move || x.vjp_binary(&req, &y, rule, &g).map(drop)))
            }
            Pair::Coo(x, y) => {
                let g = x.zip_elements(y, &up, rule)?;
                Ok(Box::new(move || x.vjp_binary(&req, y, rule, &g).map(drop)))
            }
        }
    }

    fn fused<'s>(
        &'s self, other: &'s Data<T>, req: &OpRequest, op: BinOp, rule: MaskRule,
    ) -> Result<Run<'s>> {
        let req = req.clone();
        if let BinOp::Cmp(_) = op {
            return Err(usage(format!(
                "{}-of-{}: a comparison has bool values, which reductions do not take",
                req.op,
                op.name()
            )));
        }
        match self.pair(other, true)? {
            Pair::Dense(x, y) => Ok(fused_by_family!(op, req, |z| x.zip_view(&y, z, rule))),
            Pair::Csr(x, y) => Ok(fused_by_family!(op, req, |z| x.zip_view(&y, z, rule))),
            Pair::Coo(x, y) => Ok(fused_by_family!(op, req, |z| x.zip_view(y, z, rule))),
        }
    }
}

/// The saved-forward VJP of `req` on `x` (an input of layout `L`, owned or borrowed),
/// prepared.
fn saved_vjp<'s, T, L, X>(x: X, req: OpRequest) -> Result<Run<'s>>
where
    T: Element,
    L: MaskedOps<T>,
    X: std::borrow::Borrow<L> + Sync + 's,
    L::Reduced<T::Real>: Sync + 's,
    L::Mapped<T::Real>: Sync + 's,
{
    let saved = apply_to(x.borrow(), &req, &KeepForward)?;
    match (req.op.kind(), saved) {
        (Kind::Normalize | Kind::Unary, Forward::Mapped(y)) => {
            let g = x.borrow().softmax(req.one_dim().unwrap_or(-1))?;
            Ok(Box::new(move || {
                x.borrow().vjp_map_saved(&req, &y, &g).map(drop)
            }))
        }
        (_, Forward::Reduced(y)) => {
            let g = x.borrow().mean(req.dims.clone(), req.keepdim)?;
            Ok(Box::new(move || {
                x.borrow().vjp_reduce_saved(&req, &y, &g).map(drop)
            }))
        }
        _ => Err(usage(format!(
            "vjp-{}: the op's output is not of the input's float type",
            req.op.name()
        ))),
    }
}

/// A prepared run of `R(view)` for the lazy view that `$make` builds from the op of
/// `$op`'s family (`Keep` or `Float`; comparisons are refused before).
macro_rules! fused_by_family {
    ($op:expr, $req:expr, |$z:ident| $make:expr) => {
        match $op {
            BinOp::Keep(k) => {
                let $z = KeepZip(k);
                Box::new(move || apply_to(&$make?, &$req, &Discard)) as Run<'_>
            }
            BinOp::Float(f) => {
                let $z = FloatZip(f);
                Box::new(move || apply_to(&$make?, &$req, &Discard)) as Run<'_>
            }
            BinOp::Cmp(_) => unreachable!("refused above"),
        }
    };
}
use fused_by_family;

/// A prepared run of `body` (with `z` the op of `op`'s family, `out` one buffer of `n`
/// outputs reused by every run), one arm per family of binary ops (each family has its
/// own output element type).
macro_rules! by_family {
    ($op:expr, $n:expr, |$z:ident, $out:ident| $body:expr) => {
        match $op {
            BinOp::Keep(k) => by_family!(@one KeepZip(k), $n, |$z, $out| $body),
            BinOp::Float(f) => by_family!(@one FloatZip(f), $n, |$z, $out| $body),
            BinOp::Cmp(c) => by_family!(@one CmpZip(c), $n, |$z, $out| $body),
        }
    };
    (@one $zip:expr, $n:expr, |$z:ident, $out:ident| $body:expr) => {{
        let buf = Mutex::new(vec![Default::default(); $n]);
        let zip = $zip;
        Box::new(move || {
            let $z = &zip;
            let $out: &mut [_] = &mut buf.lock().expect("one user");
            $body
        }) as Run<'_>
    }};
}
use by_family;

/// Two operands of one layout, prepared for a binary op ([`Data::pair`]).
enum Pair<'s, T: Element> {
    Dense(MaskedView<'s, T, IxDyn>, MaskedView<'s, T, IxDyn>),
    Csr(MaskedCsr<'s, T, u32, usize>, MaskedCsr<'s, T, u32, usize>),
    Coo(&'s MaskedCoo<T>, &'s MaskedCoo<T>),
}

/// The partner matrix `m2` as a view sharing `mat`'s index arrays when the two have
/// the same entries (values only, as scipy's same-pattern `A + B` of the peer scripts).
fn same_entries<'m, T: Element>(
    mat: &'m CsMatI<T, u32, usize>, m2: &'m CsMatI<T, u32, usize>,
) -> Result<CsMatViewI<'m, T, u32, usize>> {
    let same =
        m2.indptr().raw_storage() == mat.indptr().raw_storage() && m2.indices() == mat.indices();
    if !same {
        return Ok(m2.view());
    }
    CsMatViewI::try_new(
        mat.shape(),
        mat.indptr().into_raw_storage(),
        mat.indices(),
        m2.data(),
    )
    .map_err(|(_, _, _, e)| usage(format!("partner: {e}")))
}

/// Runs a binary op and drops its typed result unconverted (the op alone is timed).
fn zip_discard<T: Element, R, L: ZipKernels<T, R>>(
    a: &L, b: &R, op: BinOp, rule: MaskRule,
) -> Result<(), MaskedError> {
    match op {
        BinOp::Keep(k) => drop(std::hint::black_box(a.zip_elements(
            b,
            &KeepZip(k),
            rule,
        )?)),
        BinOp::Float(f) => drop(std::hint::black_box(a.zip_elements(
            b,
            &FloatZip(f),
            rule,
        )?)),
        BinOp::Cmp(c) => drop(std::hint::black_box(a.zip_elements(b, &CmpZip(c), rule)?)),
    }
    Ok(())
}

/// The generated dense input as a masked view.
fn dense_of<'a, T: Element>(
    shape: &[usize], values: &'a [T], mask: &BitMask,
) -> Result<MaskedView<'a, T, IxDyn>> {
    let view = ArrayViewD::from_shape(IxDyn(shape), values)
        .map_err(|e| usage(format!("bad --shape: {e}")))?;
    MaskedArray::new(view, mask.clone())
}

fn csr_of<'m, T: Element>(
    mat: CsMatViewI<'m, T, u32, usize>, mask: &Option<PatternI<u32>>,
) -> Result<MaskedCsr<'m, T, u32, usize>> {
    Ok(match mask {
        None => MaskedCsr::from_pattern(mat)?,
        Some(p) => MaskedCsr::with_mask(mat, p.clone())?,
    })
}
