//! `masked bench`: times the ops on generated data (docs/cli.md).

use crate::error::CliError;
use clap::Parser;
use masked::by_name::{self as ops, BinOp, Kind, OpRequest};
use masked::engine::workload::{Gen, Run, Values, Workload};
use masked::{DType, Dims, MaskRule};
use masked_cli::timing::{emit, measure, parse_list, Timing};

/// Time the layouts on generated data.
#[derive(Parser, Debug, Clone)]
#[command(name = "masked bench")]
pub struct BenchArgs {
    /// Ops, comma separated.
    #[arg(long, default_value = "sum")]
    pub(crate) op: String,
    /// Layouts, comma separated: dense, csr, coo.
    #[arg(long, default_value = "dense")]
    layout: String,
    /// Shape, comma separated.
    #[arg(long, default_value = "4096,4096")]
    pub(crate) shape: String,
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
    pub(crate) repeat: usize,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Thread scaling: time every op at 1, 2, 4 ... threads up to all cores (or up to
    /// `--threads`), in one run on the same data; each line adds the speedup over one
    /// thread.
    #[arg(long)]
    scaling: bool,
    /// Memory ceiling (bytes; K, M, G suffixes); default MASKED_MAX_MEMORY, else 80% of
    /// physical memory. The generated data is checked against it before it is built.
    #[arg(long)]
    pub(crate) max_memory: Option<String>,
    /// Seed of the generator.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// The values' distribution: normal (standard normal), positive (|x| + 0.01: logs,
    /// roots, powers), unit (tanh x: asin, acos, atanh) or above-one (1 + |x|: acosh).
    #[arg(long, default_value = "normal")]
    pub(crate) values: String,
    /// Value dtype: f32, f64, f16, bf16, i32 or i64 (integers: normal values x 100,
    /// rounded).
    #[arg(long, default_value = "f32")]
    pub(crate) dtype: String,
    /// Mask rule of binary ops: strict (the second operand has the first's mask and
    /// structure) or and (an independent mask and pattern of the same densities).
    #[arg(long, default_value = "strict")]
    masks: String,
    /// Ops, binary ops and VJPs write into one output buffer allocated before the timing
    /// (a caller's buffer: no fresh pages per run; a binary VJP into two). Dense, and for
    /// binary ops CSR when the result keeps every entry (the strict rule: the partner
    /// shares the structure).
    #[arg(long)]
    into: bool,
    /// Attention ops: the pattern, generated: causal (the default), band:W (each query
    /// sees itself and the W-1 keys before it), random:P (each pair valid with
    /// probability P, plus the diagonal), lengths[:L] (padding; with --batch and no L,
    /// one random length per batch element).
    #[arg(long)]
    pub(crate) pattern: Option<String>,
    /// Attention ops: leading batch and head dims, comma separated (B,H).
    #[arg(long)]
    pub(crate) batch: Option<String>,
    /// The op options (`--q`, `--correction`, ...), as for the op commands.
    #[command(flatten)]
    options: crate::OpOptions,
    /// One JSON object per line.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs the benchmark.
pub fn run(a: BenchArgs) -> Result<(), CliError> {
    let threads = a.threads.unwrap_or_else(rayon::current_num_threads);
    if threads == 0 {
        return Err(CliError::Usage(
            "invalid --threads 0: expected at least 1".into(),
        ));
    }
    let (attn, rest): (Vec<&str>, Vec<&str>) =
        a.op.split(',')
            .map(str::trim)
            .partition(|o| crate::attention_bench::OPS.contains(o));
    if a.repeat == 0 {
        return Err(CliError::Usage(
            "invalid --repeat 0: expected at least 1".into(),
        ));
    }
    if !attn.is_empty() {
        if !rest.is_empty() {
            return Err(CliError::Usage(format!(
                "--op {}: attention ops ({}) run alone: their --shape is N,D",
                a.op,
                crate::attention_bench::OPS.join(", ")
            )));
        }
        if a.scaling {
            return Err(CliError::Usage(
                "--scaling: the attention ops take --threads (one count per run)".into(),
            ));
        }
        return crate::attention_bench::run(&a, &attn, threads);
    }
    if a.pattern.is_some() || a.batch.is_some() {
        return Err(CliError::Usage(
            "--pattern and --batch belong to the attention ops".into(),
        ));
    }
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
    let counts = if a.scaling {
        crate::sweep::scaling_counts(threads)
    } else {
        vec![threads]
    };
    let pools = counts
        .iter()
        .map(|&t| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .map(|p| (t, p))
                .map_err(|e| CliError::Usage(format!("cannot start {t} threads: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
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
            "{:<12} {:<6} {:>14} {:>12} {:>8} {:>12} {:>9} {:>10}{}",
            "op",
            "layout",
            "shape",
            "nnz",
            "threads",
            "seconds",
            "GB/s",
            "peak MB",
            if a.scaling { "   speedup" } else { "" }
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
        bench_layout(
            &a, dtype, layout, &shape, &dims, &specs, rule, &pools, &dim_json,
        )?;
    }
    Ok(())
}

/// Times every op of `specs` on one layout's generated data of value type `dtype`.
#[allow(clippy::too_many_arguments)]
fn bench_layout(
    a: &BenchArgs, dtype: DType, layout: &str, shape: &[usize], dims: &Dims, specs: &[Job],
    rule: MaskRule, pools: &[(usize, rayon::ThreadPool)], dim_json: &serde_json::Value,
) -> Result<(), CliError> {
    {
        let g = Gen {
            seed: a.seed,
            density: a.density,
            mask_density: a.mask_density,
            mask_source: a.mask_source.clone(),
            values: Values::parse(&a.values).map_err(usage)?,
        };
        let data = Workload::generate(layout, dtype, shape, &g).map_err(usage)?;
        // the second operand of binary and fused ops, generated once
        let partner = if specs
            .iter()
            .any(|s| matches!(s, Job::Binary(_) | Job::Fused(..) | Job::VjpBinary(_)))
        {
            Some(data.partner(&g, rule).map_err(usage)?)
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
            let run = match (job, &partner) {
                (Job::Op(_), _) => data.op(&req, a.into),
                (Job::Vjp(_), _) => data.vjp(&req, a.into),
                (Job::Binary(_), Some(b)) => data.binary(b, job.binary(), rule, a.into),
                (Job::Fused(..), Some(b)) => data.fused(b, &req, job.binary(), rule),
                (Job::VjpBinary(_), Some(b)) => data.vjp_binary(b, &req, rule, a.into),
                _ => unreachable!("a partner for every binary job"),
            }
            .map_err(usage)?;
            let bytes = if matches!(job, Job::Op(_) | Job::Vjp(_)) {
                data.bytes()
            } else {
                2.0 * data.bytes()
            };
            let name = job.name();
            let elementwise =
                matches!(job, Job::Binary(_) | Job::VjpBinary(_)) || spec.kind() == Kind::Unary;
            let dim_json = if elementwise {
                &serde_json::Value::Null
            } else {
                dim_json
            };
            let mut first = None;
            for (threads, pool) in pools {
                let (secs, peak) = pool.install(|| time_op(&run, a.repeat))?;
                let gbps = bytes / secs / 1e9;
                // the speedup over the first (one-thread) count of a scaling run
                let speedup = *first.get_or_insert(secs) / secs;
                if a.json {
                    let mut line = serde_json::json!({
                        "op": name, "layout": layout, "shape": shape, "nnz": data.nnz(),
                        "dtype": dtype.name(),
                        "dim": dim_json, "threads": threads, "seconds": secs, "gbps": gbps,
                        "peak_bytes": peak, "input_bytes": bytes,
                    });
                    if a.scaling {
                        line["speedup"] = serde_json::json!(speedup);
                    }
                    emit(format!("{line}"))?;
                } else {
                    emit(format!(
                        "{:<12} {:<6} {:>14} {:>12} {:>8} {:>12.6} {:>9.2} {:>10.1}{}",
                        name,
                        layout,
                        shape
                            .iter()
                            .map(|s| s.to_string())
                            .collect::<Vec<_>>()
                            .join("x"),
                        data.nnz(),
                        threads,
                        secs,
                        gbps,
                        peak as f64 / 1e6,
                        if a.scaling {
                            format!(" {speedup:>9.2}x")
                        } else {
                            String::new()
                        }
                    ))?;
                }
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

/// An engine error of the workload (a bad density, layout or option) as a usage error.
fn usage(e: masked::MaskedError) -> CliError {
    match e {
        masked::MaskedError::InvalidData(m) => CliError::Usage(m),
        e => CliError::Engine(e),
    }
}

fn time_op(run: &Run<'_>, repeat: usize) -> Result<(f64, usize), CliError> {
    measure(run, &Timing::fixed(repeat))
}
