//! `masked bench --op attention,attention-vjp,sddmm,spmm`: sparse attention on generated
//! data (docs/cli.md, "Sparse attention").

use crate::bench::BenchArgs;
use crate::error::CliError;
use masked::attention::erased::{self, FloatArray};
use masked::attention::patterns::PatternSpec;
use masked::attention::AttentionPlan;
use masked::{DType, DynVec};
use masked_cli::timing::{emit, measure, parse_list, Timing};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use rand_distr::StandardNormal;

/// The attention ops `masked bench` times.
pub(crate) const OPS: &[&str] = &["attention", "attention-vjp", "sddmm", "spmm"];

/// Standard-normal values of `dtype` and `shape`.
fn normal(shape: &[usize], dtype: DType, rng: &mut SmallRng) -> Result<FloatArray, CliError> {
    let n: usize = shape.iter().product();
    let f: Vec<f64> = (0..n).map(|_| rng.sample(StandardNormal)).collect();
    let v = match dtype {
        DType::F32 => DynVec::F32(f.iter().map(|&x| x as f32).collect()),
        DType::F64 => DynVec::F64(f),
        DType::F16 => DynVec::F16(f.iter().map(|&x| half::f16::from_f64(x)).collect()),
        DType::BF16 => DynVec::BF16(f.iter().map(|&x| half::bf16::from_f64(x)).collect()),
        other => {
            return Err(CliError::Usage(format!(
                "invalid --dtype {other} for attention: expected f32, f64, f16 or bf16"
            )))
        }
    };
    Ok(FloatArray::from_dyn(shape.to_vec(), v)?)
}

/// Times the attention ops `ops` (names from [`OPS`]).
pub(crate) fn run(a: &BenchArgs, ops: &[&str], threads: usize) -> Result<(), CliError> {
    let shape: Vec<usize> = parse_list(&a.shape, "shape")?;
    let [n, d] = shape[..] else {
        return Err(CliError::Usage(format!(
            "invalid --shape '{}' for attention: expected N,D (queries = keys = N, head dim D)",
            a.shape
        )));
    };
    let batch: Vec<usize> = match a.batch.as_deref() {
        Some(b) => parse_list(b, "batch")?,
        None => vec![],
    };
    let spec_text = a.pattern.as_deref().unwrap_or("causal");
    let spec: PatternSpec = spec_text.parse()?;
    let dtype: DType = a.dtype.parse()?;
    let count: usize = batch.iter().product();
    // the operands, outputs and per-pair values, checked before anything is built
    let elems = (count.max(1) as u128) * (n as u128) * (d as u128);
    crate::limits::init(a.max_memory.as_deref())?;
    crate::limits::check(
        format!("attention bench data of shape {shape:?}"),
        elems * 8 * 8,
    )?;
    let mut rng = SmallRng::seed_from_u64(a.seed);
    // one pattern for all, or (lengths with a batch) one per batch element
    let plan = match (spec, batch.first()) {
        (PatternSpec::Lengths(None), Some(&b)) => AttentionPlan::per_batch(
            (0..b)
                .map(|e| spec.generate(n, n, a.seed.wrapping_add(e as u64)))
                .collect::<Result<_, _>>()?,
        )?,
        _ => AttentionPlan::new(spec.generate(n, n, a.seed)?),
    };
    let per_element = count.max(1) / plan.patterns().len();
    let pairs: usize = plan.patterns().iter().map(|p| p.nnz() * per_element).sum();
    crate::limits::check("attention's per-pair values", 16 * pairs as u128)?;
    let mut full = batch.clone();
    full.extend([n, d]);
    let (q, k, v, g) = (
        normal(&full, dtype, &mut rng)?,
        normal(&full, dtype, &mut rng)?,
        normal(&full, dtype, &mut rng)?,
        normal(&full, dtype, &mut rng)?,
    );
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| CliError::Usage(format!("cannot start {threads} threads: {e}")))?;
    let scale = 1.0 / (d as f64).sqrt();
    let probs = pool.install(|| erased::sddmm(&q.view(), &k.view(), &plan, scale))?;
    // the transposes the gradients walk, built once per pattern (faer's symbolic step):
    // outside the timed runs, their size reported beside the runs' peak
    let plan_bytes = pool.install(|| plan.prepare_backward())?;
    let bytes_in = (3 * elems) as f64 * dtype.size() as f64 + pairs as f64 * 8.0;
    for &op in ops {
        let (flops, run): (f64, Box<dyn Fn() -> Result<(), masked::MaskedError> + Sync>) = match op
        {
            "attention" => (
                4.0,
                Box::new(|| {
                    erased::attention(&q.view(), &k.view(), &v.view(), &plan, None, None).map(drop)
                }),
            ),
            // a training step's attention: the forward pass, then the gradients
            "attention-vjp" => (
                12.0,
                Box::new(|| {
                    erased::attention(&q.view(), &k.view(), &v.view(), &plan, None, None)?;
                    erased::attention_vjp(
                        &q.view(),
                        &k.view(),
                        &v.view(),
                        &plan,
                        None,
                        None,
                        &g.view(),
                    )
                    .map(drop)
                }),
            ),
            "sddmm" => (
                2.0,
                Box::new(|| erased::sddmm(&q.view(), &k.view(), &plan, scale).map(drop)),
            ),
            "spmm" => (
                2.0,
                Box::new(|| erased::spmm(&probs.view(), &plan, &v.view()).map(drop)),
            ),
            other => unreachable!("{other} is not an attention op"),
        };
        let (secs, peak) = pool.install(|| measure(&run, &Timing::fixed(a.repeat)))?;
        let gflops = flops * pairs as f64 * d as f64 / secs / 1e9;
        if a.json {
            emit(format!(
                "{}",
                serde_json::json!({
                    "op": op, "layout": "csr", "shape": full, "pattern": spec_text,
                    "nnz": pairs, "dtype": dtype.name(), "dim": null, "threads": threads,
                    "seconds": secs, "gflops": gflops, "gbps": bytes_in / secs / 1e9,
                    "peak_bytes": peak, "input_bytes": bytes_in, "plan_bytes": plan_bytes,
                })
            ))?;
        } else {
            emit(format!(
                "{:<14} {:<12} {:>16} {:>12} {:>8} {:>12.6} {:>9.2} {:>10.1}",
                op,
                spec_text,
                full.iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join("x"),
                pairs,
                threads,
                secs,
                gflops,
                peak as f64 / 1e6
            ))?;
        }
    }
    Ok(())
}
