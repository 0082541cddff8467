//! `masked bench`: times the ops on generated data (docs/cli.md).

use crate::error::CliError;
use clap::Parser;
use masked::binary::{CmpZip, FloatZip, KeepZip, PartialZip};
use masked::by_name::{self as ops, BinOp, Kind, OpRequest};
use masked::{
    BitMask, CooMask, CooPattern, DType, Dims, Element, MaskRule, MaskedArray, MaskedCoo,
    MaskedCsr, MaskedOps, PatternI, ZipKernels,
};
use masked_cli::timing::{emit, measure, parse_list, Timing};
use ndarray::{ArrayViewD, IxDyn};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use rand_distr::{Poisson, StandardNormal};
use sprs::{CsMatI, CsMatViewI};

/// Time the layouts on generated data.
#[derive(Parser, Debug, Clone)]
#[command(name = "masked bench")]
pub struct BenchArgs {
    /// Ops, comma separated.
    #[arg(long, default_value = "sum")]
    op: String,
    /// Layouts, comma separated: dense, csr, coo.
    #[arg(long, default_value = "dense")]
    layout: String,
    /// Shape, comma separated.
    #[arg(long, default_value = "4096,4096")]
    shape: String,
    /// Stored-entry density of sparse inputs.
    #[arg(long, default_value_t = 0.001)]
    density: f64,
    /// Probability that an element is valid (dense mask; sparse random mask).
    #[arg(long, default_value_t = 0.5)]
    mask_density: f64,
    /// Sparse mask: the input's own pattern or an independent random one.
    #[arg(long, default_value = "pattern")]
    mask_source: String,
    /// Dims, comma separated (default: the last dim).
    #[arg(long, allow_hyphen_values = true)]
    dim: Option<String>,
    /// Timed repeats (median reported), after a warm-up of at least 0.2 s.
    #[arg(long, default_value_t = 7)]
    repeat: usize,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Memory ceiling (bytes; K, M, G suffixes); default MASKED_MAX_MEMORY, else 80% of
    /// physical memory. The generated data is checked against it before it is built.
    #[arg(long)]
    max_memory: Option<String>,
    /// Seed of the generator.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Value dtype: f32, f64, f16, bf16, i32 or i64 (integers: normal values x 100,
    /// rounded).
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Mask rule of binary ops: strict (the second operand has the first's mask and
    /// structure) or and (an independent mask and pattern of the same densities).
    #[arg(long, default_value = "strict")]
    masks: String,
    /// Binary ops and VJPs write into one output buffer allocated before the timing (a
    /// caller's buffer: no fresh pages per run; a binary VJP into two). Dense, and for
    /// binary ops CSR when the result keeps every entry (the strict rule: the partner
    /// shares the structure).
    #[arg(long)]
    into: bool,
    /// The op options (`--q`, `--correction`, ...), as for the op commands.
    #[command(flatten)]
    options: crate::OpOptions,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

/// Runs the benchmark.
pub fn run(a: BenchArgs) -> Result<(), CliError> {
    let shape: Vec<usize> = parse_list(&a.shape, "shape")?;
    if !(0.0..=1.0).contains(&a.mask_density) {
        return Err(CliError::Usage(format!(
            "invalid --mask-density {}: expected a value in [0, 1]",
            a.mask_density
        )));
    }
    crate::limits::init(a.max_memory.as_deref())?;
    // two operands and an output: dense values (at most 8 bytes) and mask bits; sparse
    // entries (value and coordinates, at most 24 bytes) and CSR row pointers
    let elements = shape
        .iter()
        .fold(1u128, |n, &d| n.saturating_mul(d as u128));
    let dense = elements.saturating_mul(8 * 8 + 1) / 8;
    let entries = (elements as f64 * a.density.clamp(0.0, 1.0)) as u128;
    let rows = shape.first().map_or(1, |&r| r as u128 + 1);
    let sparse = entries
        .saturating_mul(24)
        .saturating_add(rows.saturating_mul(8));
    let per_layout = if a.layout.contains("dense") {
        dense.max(sparse)
    } else {
        sparse
    };
    crate::limits::check(
        format!("bench data of shape {:?}", shape),
        per_layout.saturating_mul(3),
    )?;
    if a.repeat == 0 {
        return Err(CliError::Usage(
            "invalid --repeat 0: expected at least 1".into(),
        ));
    }
    let dims = match a.dim.as_deref() {
        Some(_) => crate::parse_dims(a.dim.as_deref())?,
        None if shape.is_empty() => Dims::All,
        None => Dims::from(-1isize),
    };
    let dim_json = match &dims {
        Dims::All => serde_json::Value::Null,
        Dims::Set(v) if v.len() == 1 => serde_json::json!(v[0]),
        Dims::Set(v) => serde_json::json!(v),
    };
    let threads = a.threads.unwrap_or_else(rayon::current_num_threads);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| CliError::Usage(format!("cannot start {threads} threads: {e}")))?;
    let op_names: Vec<&str> = a.op.split(',').map(str::trim).collect();
    let specs = op_names
        .iter()
        .map(|n| Job::parse(n))
        .collect::<Result<Vec<_>, _>>()?;
    let rule: MaskRule = a.masks.parse().map_err(|_| {
        CliError::Usage(format!(
            "invalid --masks value '{}': expected strict or and",
            a.masks
        ))
    })?;
    if !a.json {
        emit(format!(
            "{:<12} {:<6} {:>14} {:>12} {:>8} {:>12} {:>9} {:>10}",
            "op", "layout", "shape", "nnz", "threads", "seconds", "GB/s", "peak MB"
        ))?;
    }
    let dtype: DType = a.dtype.parse()?;
    for (name, _) in &a.options.0 {
        if !specs.iter().any(|s| s.options().contains(name)) {
            return Err(CliError::Usage(format!(
                "option --{name} has no meaning for any of the ops {}",
                a.op
            )));
        }
    }
    for layout in a.layout.split(',').map(str::trim) {
        masked::with_dtype!(dtype, T => bench_layout::<T>(&a, layout, &shape, &dims, &specs, rule, &pool, &dim_json, threads))?;
    }
    Ok(())
}

/// Times every op of `specs` on one layout's generated data of value type `T`.
#[allow(clippy::too_many_arguments)]
fn bench_layout<T: Element>(
    a: &BenchArgs,
    layout: &str,
    shape: &[usize],
    dims: &Dims,
    specs: &[Job],
    rule: MaskRule,
    pool: &rayon::ThreadPool,
    dim_json: &serde_json::Value,
    threads: usize,
) -> Result<(), CliError> {
    {
        let data: Data<T> = match layout {
            "dense" => Data::dense(shape, a)?,
            "csr" => Data::csr(shape, a)?,
            "coo" => Data::coo(shape, a)?,
            other => {
                return Err(CliError::Usage(format!(
                    "invalid --layout '{other}': expected dense, csr or coo"
                )))
            }
        };
        // the second operand of binary and fused ops, generated once
        let partner = if specs
            .iter()
            .any(|s| matches!(s, Job::Binary(_) | Job::Fused(..) | Job::VjpBinary(_)))
        {
            Some(data.partner(a, rule)?)
        } else {
            None
        };
        for job in specs {
            let spec = match job {
                Job::Op(o) | Job::Fused(o, _) | Job::Vjp(o) => *o,
                Job::Binary(o) | Job::VjpBinary(o) => *o,
            };
            let mut req = OpRequest::from_op(spec).dims(match spec.kind() {
                Kind::ReduceOne | Kind::Normalize => match dims {
                    Dims::Set(v) if v.len() > 1 => Dims::from(v[v.len() - 1]),
                    d => d.clone(),
                },
                Kind::Reduce => dims.clone(),
                Kind::Unary | Kind::Binary => Dims::All,
            });
            for (name, text) in &a.options.0 {
                if spec.options().contains(name) {
                    req.set_option(name, text)?;
                }
            }
            let (secs, peak) = match (job, &partner) {
                (Job::Op(_), _) => pool.install(|| data.time(&req, a.repeat))?,
                (Job::Vjp(_), _) => pool.install(|| data.time_vjp(&req, a.repeat, a.into))?,
                (Job::Binary(_), Some(b)) => {
                    pool.install(|| data.time_binary(b, job, rule, a.repeat, a.into))?
                }
                (Job::Fused(..), Some(b)) => {
                    pool.install(|| data.time_fused(b, &req, job, rule, a.repeat))?
                }
                (Job::VjpBinary(_), Some(b)) => {
                    pool.install(|| data.time_vjp_binary(b, &req, rule, a.repeat, a.into))?
                }
                _ => unreachable!("a partner for every binary job"),
            };
            let bytes = if matches!(job, Job::Op(_) | Job::Vjp(_)) {
                data.bytes
            } else {
                2.0 * data.bytes
            };
            let gbps = bytes / secs / 1e9;
            let name = job.name();
            let elementwise =
                matches!(job, Job::Binary(_) | Job::VjpBinary(_)) || spec.kind() == Kind::Unary;
            let dim_json = if elementwise {
                &serde_json::Value::Null
            } else {
                dim_json
            };
            if a.json {
                emit(format!(
                    "{}",
                    serde_json::json!({
                        "op": name, "layout": layout, "shape": shape, "nnz": data.nnz,
                        "dtype": T::DTYPE.name(),
                        "dim": dim_json, "threads": threads, "seconds": secs, "gbps": gbps,
                        "peak_bytes": peak, "input_bytes": bytes,
                    })
                ))?;
            } else {
                emit(format!(
                    "{:<12} {:<6} {:>14} {:>12} {:>8} {:>12.6} {:>9.2} {:>10.1}",
                    name,
                    layout,
                    shape
                        .iter()
                        .map(|s| s.to_string())
                        .collect::<Vec<_>>()
                        .join("x"),
                    data.nnz,
                    threads,
                    secs,
                    gbps,
                    peak as f64 / 1e6
                ))?;
            }
        }
    }
    Ok(())
}

/// What one `--op` name times.
#[derive(Debug, Clone, Copy)]
enum Job {
    /// A one-operand op of the registry (reduction, normalization, unary).
    Op(ops::Op),
    /// A binary elementwise op on generated operand pairs.
    Binary(ops::Op),
    /// `R-of-B`: reduction or normalization `R` of the binary op `B`, fused.
    Fused(ops::Op, ops::Op),
    /// `vjp-OP`: the VJP of a reduction, normalization or unary op.
    Vjp(ops::Op),
    /// `vjp-B`: both operands' gradients of a binary op, on generated operand pairs.
    VjpBinary(ops::Op),
}

impl Job {
    fn parse(name: &str) -> Result<Job, CliError> {
        if let Some(op) = name.strip_prefix("vjp-") {
            let op: ops::Op = op.parse()?;
            if !op.differentiable() {
                return Err(CliError::Usage(format!(
                    "invalid op '{name}': vjp-OP takes a differentiable op ({} is not)",
                    op.name()
                )));
            }
            return Ok(if op.kind() == Kind::Binary {
                Job::VjpBinary(op)
            } else {
                Job::Vjp(op)
            });
        }
        if let Some((r, b)) = name.split_once("-of-") {
            let (r, b): (ops::Op, ops::Op) = (r.parse()?, b.parse()?);
            if !matches!(r.kind(), Kind::Reduce | Kind::ReduceOne | Kind::Normalize)
                || b.binary().is_none()
            {
                return Err(CliError::Usage(format!(
                    "invalid fused op '{name}': expected R-of-B with R a reduction or normalization and B a binary op"
                )));
            }
            return Ok(Job::Fused(r, b));
        }
        let op: ops::Op = name.parse()?;
        Ok(if op.kind() == Kind::Binary {
            Job::Binary(op)
        } else {
            Job::Op(op)
        })
    }

    fn name(&self) -> String {
        match self {
            Job::Op(o) | Job::Binary(o) => o.name().to_string(),
            Job::Fused(r, b) => format!("{}-of-{}", r.name(), b.name()),
            Job::Vjp(o) | Job::VjpBinary(o) => format!("vjp-{}", o.name()),
        }
    }

    fn options(&self) -> &'static [&'static str] {
        match self {
            Job::Op(o) | Job::Binary(o) | Job::Fused(o, _) | Job::Vjp(o) | Job::VjpBinary(o) => {
                o.options()
            }
        }
    }

    fn binary(&self) -> BinOp {
        match self {
            Job::Binary(b) | Job::Fused(_, b) | Job::VjpBinary(b) => {
                b.binary().expect("a binary op")
            }
            Job::Op(o) | Job::Vjp(o) => unreachable!("{o} is not binary"),
        }
    }
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

/// A standard normal value as `T` (integers: x 100, rounded).
fn normal<T: Element>(rng: &mut SmallRng) -> T {
    let x: f64 = rng.sample(StandardNormal);
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
    rng: &mut SmallRng,
    nrows: usize,
    ncols: usize,
    mean: f64,
) -> Result<(Vec<usize>, Vec<u32>), CliError> {
    let poisson = Poisson::new(mean.max(1e-12))
        .map_err(|e| CliError::Usage(format!("invalid --density: {e}")))?;
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

impl<T: Element> Data<T> {
    fn dense(shape: &[usize], a: &BenchArgs) -> Result<Self, CliError> {
        let n: usize = shape.iter().product();
        let mut rng = SmallRng::seed_from_u64(a.seed);
        let values: Vec<T> = (0..n).map(|_| normal(&mut rng)).collect();
        let mask =
            BitMask::from_bools(shape, (0..n).map(|_| rng.random::<f64>() < a.mask_density))?;
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

    fn csr(shape: &[usize], a: &BenchArgs) -> Result<Self, CliError> {
        let &[nrows, ncols] = shape else {
            return Err(CliError::Usage(format!(
                "bench --layout csr needs a 2-d --shape, got {} dims",
                shape.len()
            )));
        };
        if u32::try_from(ncols).is_err() {
            return Err(CliError::Usage(format!(
                "--shape: {ncols} columns exceed u32 indices"
            )));
        }
        if !(0.0..=1.0).contains(&a.density) {
            return Err(CliError::Usage(format!(
                "invalid --density {}: expected a value in [0, 1]",
                a.density
            )));
        }
        let mut rng = SmallRng::seed_from_u64(a.seed);
        let (indptr, indices) = random_rows(&mut rng, nrows, ncols, a.density * ncols as f64)?;
        let values: Vec<T> = (0..indices.len()).map(|_| normal(&mut rng)).collect();
        let nnz = indices.len();
        let mat = CsMatI::try_new((nrows, ncols), indptr, indices, values)
            .map_err(|(_, _, _, e)| CliError::Usage(format!("generated matrix: {e}")))?;
        let mask = match a.mask_source.as_str() {
            "pattern" => None,
            "random" => {
                let (mp, mi) = random_rows(&mut rng, nrows, ncols, a.density * ncols as f64)?;
                Some(PatternI::try_from_parts((nrows, ncols), mp, mi)?)
            }
            other => {
                return Err(CliError::Usage(format!(
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

    fn coo(shape: &[usize], a: &BenchArgs) -> Result<Self, CliError> {
        if !(0.0..=1.0).contains(&a.density) {
            return Err(CliError::Usage(format!(
                "invalid --density {}: expected a value in [0, 1]",
                a.density
            )));
        }
        let n = shape
            .iter()
            .try_fold(1usize, |p, &s| p.checked_mul(s))
            .ok_or_else(|| CliError::Usage("--shape: too many elements".into()))?;
        let mut rng = SmallRng::seed_from_u64(a.seed);
        let k = (a.density * n as f64).round() as usize;
        let pattern = CooPattern::from_flat(shape, &random_positions(&mut rng, n, k))?;
        let values: Vec<T> = (0..pattern.nnz()).map(|_| normal(&mut rng)).collect();
        let mask = match a.mask_source.as_str() {
            "pattern" => CooMask::Stored,
            "random" => {
                let m = random_positions(&mut rng, n, k);
                CooMask::Pattern(CooPattern::from_flat(shape, &m)?)
            }
            other => {
                return Err(CliError::Usage(format!(
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

    /// Median seconds of `repeat` runs after a warm-up of at least 0.2 s, and the peak
    /// bytes allocated during one run.
    fn time(&self, req: &OpRequest, repeat: usize) -> Result<(f64, usize), CliError> {
        match &self.input {
            Input::Dense {
                shape,
                values,
                mask,
            } => {
                let arr = dense_of(shape, values, mask)?;
                time_op(|| ops::apply_to(&arr, req, &ops::Discard), repeat)
            }
            Input::Csr { mat, mask } => {
                let m = match mask {
                    None => MaskedCsr::from_pattern(mat.view())?,
                    Some(p) => MaskedCsr::with_mask(mat.view(), p.clone())?,
                };
                time_op(|| ops::apply_to(&m, req, &ops::Discard), repeat)
            }
            Input::Coo(c) => time_op(|| ops::apply_to(c, req, &ops::Discard), repeat),
        }
    }
}

impl<T: Element> Data<T> {
    /// Like [`Data::time`], for the VJP of `req`'s op given its saved forward output
    /// (the saved forms, which read it where it saves work): the forward pass and the
    /// upstream gradient (a mean of the input for a reduction, a softmax along the dim
    /// for a map: values at exactly the forward output's valid positions) are built once,
    /// outside the timing.
    fn time_vjp(
        &self,
        req: &OpRequest,
        repeat: usize,
        into: bool,
    ) -> Result<(f64, usize), CliError> {
        fn run<T: Element, L: MaskedOps<T>>(
            x: &L,
            req: &OpRequest,
            repeat: usize,
        ) -> Result<(f64, usize), CliError> {
            let saved = ops::apply_to(x, req, &ops::KeepForward)?;
            match (req.op.kind(), saved) {
                (Kind::Normalize | Kind::Unary, ops::Forward::Mapped(y)) => {
                    let dim = req.one_dim().unwrap_or(-1);
                    let g = x.softmax(dim)?;
                    time_op(|| x.vjp_map_saved(req, &y, &g).map(drop), repeat)
                }
                (_, ops::Forward::Reduced(y)) => {
                    let g = x.mean(req.dims.clone(), req.keepdim)?;
                    time_op(|| x.vjp_reduce_saved(req, &y, &g).map(drop), repeat)
                }
                _ => Err(CliError::Usage(format!(
                    "vjp-{}: the op's output is not of the input's float type",
                    req.op.name()
                ))),
            }
        }
        /// The dense VJP written into one reused buffer (`vjp_saved_into`).
        fn run_into<T: Element>(
            x: &masked::MaskedView<'_, T, IxDyn>,
            req: &OpRequest,
            repeat: usize,
        ) -> Result<(f64, usize), CliError> {
            let n = x.values().len();
            match ops::apply_to(x, req, &ops::KeepForward)? {
                ops::Forward::Mapped(y) => {
                    let g = x.softmax(req.one_dim().unwrap_or(-1))?;
                    time_into(n, repeat, |out| x.vjp_saved_into(req, Some(&y), &g, out))
                }
                ops::Forward::Reduced(y) => {
                    let g = x.mean(req.dims.clone(), req.keepdim)?;
                    time_into(n, repeat, |out| x.vjp_saved_into(req, Some(&y), &g, out))
                }
                ops::Forward::Other => Err(CliError::Usage(format!(
                    "vjp-{}: the op's output is not of the input's float type",
                    req.op.name()
                ))),
            }
        }
        match &self.input {
            Input::Dense {
                shape,
                values,
                mask,
            } if into => run_into(&dense_of(shape, values, mask)?, req, repeat),
            Input::Dense {
                shape,
                values,
                mask,
            } => run(&dense_of(shape, values, mask)?, req, repeat),
            Input::Csr { .. } | Input::Coo(_) if into => Err(CliError::Usage(
                "bench --into with vjp-OP: dense layout only (a sparse gradient shares the \
                 input's structure)"
                    .into(),
            )),
            Input::Csr { mat, mask } => run(&csr_of(mat.view(), mask)?, req, repeat),
            Input::Coo(c) => run(c, req, repeat),
        }
    }

    /// The second operand of a binary op: new values on the same mask and structure
    /// (strict), or an independent mask and pattern of the same densities (and).
    fn partner(&self, a: &BenchArgs, rule: MaskRule) -> Result<Data<T>, CliError> {
        let mut rng = SmallRng::seed_from_u64(a.seed.wrapping_add(1));
        let shape = match &self.input {
            Input::Dense { shape, .. } => shape.clone(),
            Input::Csr { mat, .. } => vec![mat.rows(), mat.cols()],
            Input::Coo(c) => c.shape().to_vec(),
        };
        if rule == MaskRule::And {
            let b = BenchArgs {
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
                values: (0..values.len()).map(|_| normal(&mut rng)).collect(),
                mask: mask.clone(),
            },
            Input::Csr { mat, mask } => {
                let values = (0..mat.nnz()).map(|_| normal(&mut rng)).collect();
                let m = CsMatI::try_new(
                    mat.shape(),
                    mat.indptr().raw_storage().to_vec(),
                    mat.indices().to_vec(),
                    values,
                )
                .map_err(|(_, _, _, e)| CliError::Usage(format!("generated matrix: {e}")))?;
                Input::Csr {
                    mat: m,
                    mask: mask.clone(),
                }
            }
            Input::Coo(c) => {
                let values = (0..c.nnz()).map(|_| normal(&mut rng)).collect();
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

    /// Times the binary op of `job` on this operand and `other`.
    fn time_binary(
        &self,
        other: &Data<T>,
        job: &Job,
        rule: MaskRule,
        repeat: usize,
        into: bool,
    ) -> Result<(f64, usize), CliError> {
        let op = job.binary();
        match (&self.input, &other.input) {
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
            ) => {
                let (x, y) = (dense_of(shape, values, mask)?, dense_of(shape, v2, m2)?);
                if into {
                    return by_family!(op, values.len(), repeat, |z, out| x
                        .zip_into(&y, z, rule, out)
                        .map(drop));
                }
                time_op(|| zip_discard(&x, &y, op, rule), repeat)
            }
            (Input::Csr { mat, mask }, Input::Csr { mat: m2, mask: k2 }) => {
                let view = same_entries(mat, m2)?;
                let (x, y) = (csr_of(mat.view(), mask)?, csr_of(view, k2)?);
                if into {
                    let n = x.lanes().nnz();
                    return by_family!(op, n, repeat, |z, out| x.zip_into(&y, z, rule, out));
                }
                time_op(|| zip_discard(&x, &y, op, rule), repeat)
            }
            (Input::Coo(_), _) if into => Err(CliError::Usage(
                "bench --into: dense and CSR layouts only".into(),
            )),
            (Input::Coo(x), Input::Coo(y)) => time_op(|| zip_discard(x, y, op, rule), repeat),
            _ => unreachable!("a partner of the same layout"),
        }
    }

    /// Times `vjp-B`: both gradients of the binary op `B` with the partner, on every
    /// layout, given an upstream stored at the forward output's positions.
    fn time_vjp_binary(
        &self,
        other: &Data<T>,
        req: &OpRequest,
        rule: MaskRule,
        repeat: usize,
        into: bool,
    ) -> Result<(f64, usize), CliError> {
        let op = req.op.binary().expect("a binary op");
        // an upstream with the forward output's structure: any zip's result has it
        let up = PartialZip { op, wrt_y: false };
        match (&self.input, &other.input) {
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
            ) => {
                let (x, y) = (dense_of(shape, values, mask)?, dense_of(shape, v2, m2)?);
                let g = x.zip_elements(&y, &up, rule)?;
                if into {
                    let n = values.len();
                    let bufs = std::sync::Mutex::new((
                        vec![T::Real::default(); n],
                        vec![T::Real::default(); n],
                    ));
                    return time_op(
                        || {
                            let (dx, dy) = &mut *bufs.lock().expect("one user");
                            x.vjp_binary_into(req, &y, rule, &g, dx, dy)
                        },
                        repeat,
                    );
                }
                time_op(|| x.vjp_binary(req, &y, rule, &g).map(drop), repeat)
            }
            (Input::Csr { .. }, _) | (Input::Coo(_), _) if into => Err(CliError::Usage(
                "bench --into with vjp-B: dense layout only (a sparse gradient shares the \
                 operand's structure and is returned whole)"
                    .into(),
            )),
            (Input::Csr { mat, mask }, Input::Csr { mat: m2, mask: k2 }) => {
                let (x, y) = (csr_of(mat.view(), mask)?, csr_of(m2.view(), k2)?);
                let g = x.zip_elements(&y, &up, rule)?;
                time_op(|| x.vjp_binary(req, &y, rule, &g).map(drop), repeat)
            }
            (Input::Coo(x), Input::Coo(y)) => {
                let g = x.zip_elements(y, &up, rule)?;
                time_op(|| x.vjp_binary(req, y, rule, &g).map(drop), repeat)
            }
            _ => unreachable!("a partner of the same layout"),
        }
    }

    /// Times `R-of-B`: the reduction of a lazy binary op, on every layout (the sparse
    /// views compute values a row task at a time where the reduction allows).
    fn time_fused(
        &self,
        other: &Data<T>,
        req: &OpRequest,
        job: &Job,
        rule: MaskRule,
        repeat: usize,
    ) -> Result<(f64, usize), CliError> {
        let op = job.binary();
        if let BinOp::Cmp(_) = op {
            return Err(CliError::Usage(format!(
                "{}: a comparison has bool values, which reductions do not take",
                job.name()
            )));
        }
        match (&self.input, &other.input) {
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
            ) => {
                let (x, y) = (dense_of(shape, values, mask)?, dense_of(shape, v2, m2)?);
                fused_by_family!(op, req, repeat, |z| x.zip_view(&y, z, rule))
            }
            (Input::Csr { mat, mask }, Input::Csr { mat: m2, mask: k2 }) => {
                let view = same_entries(mat, m2)?;
                let (x, y) = (csr_of(mat.view(), mask)?, csr_of(view, k2)?);
                fused_by_family!(op, req, repeat, |z| x.zip_view(&y, z, rule))
            }
            (Input::Coo(x), Input::Coo(y)) => {
                fused_by_family!(op, req, repeat, |z| x.zip_view(y, z, rule))
            }
            _ => unreachable!("a partner of the same layout"),
        }
    }
}

/// Times `R(view)` for the lazy view that `$make` builds from the op of `$op`'s family
/// (`Keep` or `Float`; comparisons are refused before).
macro_rules! fused_by_family {
    ($op:expr, $req:expr, $repeat:expr, |$z:ident| $make:expr) => {
        match $op {
            BinOp::Keep(k) => {
                let $z = KeepZip(k);
                time_op(|| ops::apply_to(&$make?, $req, &ops::Discard), $repeat)
            }
            BinOp::Float(f) => {
                let $z = FloatZip(f);
                time_op(|| ops::apply_to(&$make?, $req, &ops::Discard), $repeat)
            }
            BinOp::Cmp(_) => unreachable!("refused above"),
        }
    };
}
use fused_by_family;

/// The partner matrix `m2` as a view sharing `mat`'s index arrays when the two have
/// the same entries (values only, as scipy's same-pattern `A + B` of the peer scripts).
fn same_entries<'m, T: Element>(
    mat: &'m CsMatI<T, u32, usize>,
    m2: &'m CsMatI<T, u32, usize>,
) -> Result<CsMatViewI<'m, T, u32, usize>, CliError> {
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
    .map_err(|(_, _, _, e)| CliError::Usage(format!("partner: {e}")))
}

/// Runs a binary op and drops its typed result unconverted (the op alone is timed).
fn zip_discard<T: Element, R, L: ZipKernels<T, R>>(
    a: &L,
    b: &R,
    op: BinOp,
    rule: MaskRule,
) -> Result<(), masked::MaskedError> {
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
    shape: &[usize],
    values: &'a [T],
    mask: &BitMask,
) -> Result<masked::MaskedView<'a, T, IxDyn>, CliError> {
    let view = ArrayViewD::from_shape(IxDyn(shape), values)
        .map_err(|e| CliError::Usage(format!("bad --shape: {e}")))?;
    Ok(MaskedArray::new(view, mask.clone())?)
}

fn csr_of<'m, T: Element>(
    mat: CsMatViewI<'m, T, u32, usize>,
    mask: &Option<PatternI<u32>>,
) -> Result<MaskedCsr<'m, T, u32, usize>, CliError> {
    Ok(match mask {
        None => MaskedCsr::from_pattern(mat)?,
        Some(p) => MaskedCsr::with_mask(mat, p.clone())?,
    })
}

/// Times `f` writing into one reused buffer of `n` outputs.
fn time_into<O: Clone + Default>(
    n: usize,
    repeat: usize,
    f: impl Fn(&mut [O]) -> Result<(), masked::MaskedError>,
) -> Result<(f64, usize), CliError> {
    let cell = std::sync::Mutex::new(vec![O::default(); n]);
    time_op(|| f(&mut cell.lock().expect("one user")), repeat)
}

/// Times `body` (with `z` the op of `op`'s family, `out` the reused buffer) by
/// [`time_into`], one arm per family of binary ops.
macro_rules! by_family {
    ($op:expr, $n:expr, $repeat:expr, |$z:ident, $out:ident| $body:expr) => {
        match $op {
            BinOp::Keep(k) => {
                let $z = &KeepZip(k);
                time_into($n, $repeat, |$out: &mut [_]| $body)
            }
            BinOp::Float(f) => {
                let $z = &FloatZip(f);
                time_into($n, $repeat, |$out: &mut [_]| $body)
            }
            BinOp::Cmp(c) => {
                let $z = &CmpZip(c);
                time_into($n, $repeat, |$out: &mut [_]| $body)
            }
        }
    };
}
use by_family;

fn time_op(
    f: impl Fn() -> Result<(), masked::MaskedError>,
    repeat: usize,
) -> Result<(f64, usize), CliError> {
    measure(f, &Timing::fixed(repeat))
}
