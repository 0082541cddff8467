//! `masked bench`: times the ops on generated data (docs/cli.md).

use crate::error::CliError;
use clap::Parser;
use masked::by_name::{self as ops, Kind, OpRequest};
use masked::{BitMask, Dims, MaskedArray};
use ndarray::{ArrayViewD, IxDyn};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use rand_distr::StandardNormal;
use std::time::Instant;

/// Time the layouts on generated data.
#[derive(Parser, Debug)]
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
    /// Seed of the generator.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

fn parse_list<T: std::str::FromStr>(s: &str, what: &str) -> Result<Vec<T>, CliError> {
    s.split(',')
        .map(|p| p.trim().parse::<T>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| CliError::Usage(format!("invalid --{what} value '{s}'")))
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
        .map(|n| ops::lookup(n).map_err(CliError::from))
        .collect::<Result<Vec<_>, _>>()?;
    if !a.json {
        println!(
            "{:<12} {:<6} {:>14} {:>12} {:>8} {:>12} {:>9}",
            "op", "layout", "shape", "nnz", "threads", "seconds", "GB/s"
        );
    }
    for layout in a.layout.split(',').map(str::trim) {
        match layout {
            "dense" => {}
            "csr" | "coo" => {
                return Err(CliError::Usage(format!(
                    "bench --layout {layout} is not supported by this build yet"
                )))
            }
            other => {
                return Err(CliError::Usage(format!(
                    "invalid --layout '{other}': expected dense, csr or coo"
                )))
            }
        }
        let n: usize = shape.iter().product();
        let mut rng = SmallRng::seed_from_u64(a.seed);
        let values: Vec<f32> = (0..n).map(|_| rng.sample(StandardNormal)).collect();
        let mask =
            BitMask::from_bools(&shape, (0..n).map(|_| rng.random::<f64>() < a.mask_density))?;
        let view = ArrayViewD::from_shape(IxDyn(&shape), &values[..])
            .map_err(|e| CliError::Usage(format!("bad --shape: {e}")))?;
        let arr = MaskedArray::new(view, mask)?;
        let bytes = (n * 4 + n.div_ceil(8)) as f64;
        for spec in &specs {
            let req = OpRequest::from_spec(spec).dims(match spec.kind {
                Kind::ReduceOne | Kind::Normalize => match &dims {
                    Dims::Set(v) if v.len() > 1 => Dims::from(v[v.len() - 1]),
                    d => d.clone(),
                },
                Kind::Reduce => dims.clone(),
            });
            let secs = pool.install(|| -> Result<f64, CliError> {
                // warm up for at least 0.2 s (caches, clocks, thread pool), not just once
                let warm = Instant::now();
                let mut runs = 0;
                while runs < 1 || (warm.elapsed().as_secs_f64() < 0.2 && runs < 50) {
                    std::hint::black_box(ops::apply_dense(&arr, &req).map_err(CliError::from)?);
                    runs += 1;
                }
                let mut t = Vec::with_capacity(a.repeat);
                for _ in 0..a.repeat {
                    let s = Instant::now();
                    std::hint::black_box(ops::apply_dense(&arr, &req).map_err(CliError::from)?);
                    t.push(s.elapsed().as_secs_f64());
                }
                t.sort_by(f64::total_cmp);
                Ok(t[t.len() / 2])
            })?;
            let gbps = bytes / secs / 1e9;
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "op": spec.name, "layout": layout, "shape": shape, "nnz": n,
                        "dim": dim_json, "threads": threads, "seconds": secs, "gbps": gbps,
                    })
                );
            } else {
                println!(
                    "{:<12} {:<6} {:>14} {:>12} {:>8} {:>12.6} {:>9.2}",
                    spec.name,
                    layout,
                    shape
                        .iter()
                        .map(|s| s.to_string())
                        .collect::<Vec<_>>()
                        .join("x"),
                    n,
                    threads,
                    secs,
                    gbps
                );
            }
        }
    }
    Ok(())
}
