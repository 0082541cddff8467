//! `masked sweep`'s runner: every point of the grid built in every layout and each op
//! timed on it (the by-name dispatch over every op, layout and dtype, compiled here in
//! the binary); the plan, data, records and report are the library's
//! (`masked_cli::sweep`).

use masked::by_name::OpRequest;
use masked::engine::ArrayRef;
use masked::io::limits;
use masked::{DType, Element};
use masked_cli::error::CliError;
use masked_cli::sweep::data::{Logical, Structure};
use masked_cli::sweep::report;
use masked_cli::sweep::{
    export_point, progress, write_json, Built, Output, Plan, Point, Series, SweepArgs, Vary,
    CONVERSIONS,
};
use masked_cli::timing::{emit, measure, Timing};

/// Runs the sweep (or, with `--report-only`, rebuilds its report).
pub fn run(a: SweepArgs) -> Result<(), CliError> {
    limits::init(a.max_memory.as_deref())?;
    if a.report_only {
        let summary = report::write_all(&a.out, None)?;
        return emit(summary);
    }
    let dtype: DType = a.dtype.parse()?;
    masked::with_dtype!(dtype, T => sweep::<T>(&a))
}

fn sweep<T: Element>(a: &SweepArgs) -> Result<(), CliError> {
    let plan = Plan::new::<T>(a)?;
    std::fs::create_dir_all(&a.out)
        .map_err(|e| CliError::file(&a.out, format!("cannot create the folder: {e}")))?;
    if a.export {
        std::fs::create_dir_all(a.out.join("data"))
            .map_err(|e| CliError::file(&a.out, format!("cannot create data/: {e}")))?;
    }
    let pools = plan
        .meta
        .threads
        .iter()
        .map(|&t| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .map_err(|e| CliError::Usage(format!("cannot start {t} threads: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let per_point = plan.meta.threads.len()
        * (plan.reqs.len() * plan.meta.layouts.len()
            + if a.no_convert { 0 } else { CONVERSIONS.len() });
    let points: Vec<(Series, f64)> = plan
        .series
        .iter()
        .flat_map(|s| plan.meta.grid.iter().map(move |&x| (*s, x)))
        .collect();
    let bar = progress((points.len() * per_point) as u64);
    let mut out = Output::open(&a.out, a.json)?;
    let mut exported = Vec::new();
    for (i, &(series, x)) in points.iter().enumerate() {
        let (d, p) = match series.vary {
            Vary::Stored => (x, a.mask_density),
            Vary::Mask => (a.density, x),
        };
        let p_est = match series.structure {
            Structure::Pattern => 0.0,
            Structure::Causal => 0.5,
            _ => p,
        };
        limits::check(
            format!("sweep point {} at {x:e}", series.name()),
            Logical::<T>::estimate_bytes(plan.shape, d, p_est),
        )?;
        bar.set_message(format!("{} {x:.0e}: generating", series.name()));
        let logical = Logical::<T>::generate(
            plan.shape,
            d,
            series.structure,
            p,
            a.seed.wrapping_add(i as u64),
        );
        let point = Point::new(series, x, &logical);
        if a.export {
            exported.push(export_point(&a.out, i, &point, &logical)?);
        }
        let built = Built::new(&logical, !a.no_convert, &plan.meta.layouts)?;
        for (pool, &threads) in pools.iter().zip(&plan.meta.threads) {
            for (name, req) in &plan.reqs {
                for layout in &plan.meta.layouts {
                    bar.set_message(format!("{} {x:.0e}: {name} {layout}", series.name()));
                    let (seconds, peak) =
                        pool.install(|| time_op(&built, layout, req, &plan.timing))?;
                    let bytes = logical.ideal_bytes(layout);
                    out.record(&point.record(name, layout, threads, seconds, peak, bytes))?;
                    bar.inc(1);
                }
            }
            if !a.no_convert {
                for (from, to) in CONVERSIONS {
                    bar.set_message(format!("{} {x:.0e}: {from} -> {to}", series.name()));
                    let (seconds, peak) =
                        pool.install(|| built.time_convert(from, to, &plan.timing))?;
                    let bytes = logical.ideal_bytes(from);
                    let layout = format!("{from}->{to}");
                    out.record(&point.record("convert", &layout, threads, seconds, peak, bytes))?;
                    bar.inc(1);
                }
            }
        }
    }
    bar.finish_and_clear();
    out.finish()?;
    write_json(&a.out.join("meta.json"), &plan.meta)?;
    if a.export {
        let lines: Vec<String> = exported
            .iter()
            .map(|p| serde_json::to_string(p).expect("a plain struct serialises"))
            .collect();
        std::fs::write(a.out.join("points.jsonl"), lines.join("\n") + "\n")
            .map_err(|e| CliError::file(&a.out.join("points.jsonl"), e.to_string()))?;
    }
    let attn_path = a.out.join("attention.jsonl");
    let _ = std::fs::remove_file(&attn_path);
    if !a.no_attention {
        let threads = *plan.meta.threads.iter().max().unwrap_or(&1);
        let pool = &pools[plan
            .meta
            .threads
            .iter()
            .position(|&t| t == threads)
            .unwrap_or(0)];
        let records = pool.install(|| attention_series(a, threads, &plan.timing))?;
        let lines: Vec<String> = records
            .iter()
            .map(|r| serde_json::to_string(r).expect("a plain struct serialises"))
            .collect();
        std::fs::write(&attn_path, lines.join("\n") + "\n")
            .map_err(|e| CliError::file(&attn_path, e.to_string()))?;
    }
    // peer figures of an earlier run are of other data (scripts/sweep_peers.py writes
    // this run's after it)
    let _ = std::fs::remove_file(a.out.join("peers.jsonl"));
    let summary = report::write_all(&a.out, Some(&plan.meta))?;
    if !a.json {
        emit(summary)?;
    }
    Ok(())
}

/// Times `req` on this point's `layout`.
fn time_op<T: Element>(
    built: &Built<T>, layout: &str, req: &OpRequest, t: &Timing,
) -> Result<(f64, usize), CliError> {
    // the typed inputs erased (no copy); the op runs in the engine's compiled dispatch
    match layout {
        "dense" => {
            let a = ArrayRef::from_dense(built.dense()?);
            measure(|| a.run(req), t)
        }
        "csr" => {
            let a = ArrayRef::from_csr32(built.csr()?);
            measure(|| a.run(req), t)
        }
        _ => {
            let a = ArrayRef::from_coo(built.coo());
            measure(|| a.run(req), t)
        }
    }
}

/// The attention series: dense masked attention (a dense `Q Kᵀ`, the engine's masked
/// softmax, `P V`) and the sparse path, on the same random patterns across densities.
fn attention_series(
    a: &SweepArgs, threads: usize, t: &Timing,
) -> Result<Vec<report::AttnRecord>, CliError> {
    use masked::attention::patterns::PatternSpec;
    use masked::attention::{attention, AttentionPlan, Options};
    use masked::{BitMask, MaskedArray};
    use ndarray::Array2;
    let (n, d) = (if a.full { 2048 } else { 1024 }, 64);
    let grid: &[f64] = if a.full {
        &[1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0]
    } else {
        &[1e-3, 1e-2, 0.1, 0.3, 1.0]
    };
    limits::check(
        "the attention series' dense scores",
        (n * n * 4 * 3) as u128,
    )?;
    let mut state = a.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0
    };
    let mut r#gen = |r: usize| Array2::from_shape_fn((r, d), |_| next());
    let (q, k, v) = (r#gen(n), r#gen(n), r#gen(n));
    let scale = 1.0 / (d as f32).sqrt();
    let softmax = OpRequest::new("softmax")?.dims(1);
    let mut out = Vec::new();
    for &p in grid {
        let pattern = PatternSpec::Random(p).generate(n, n, a.seed)?;
        let nnz = pattern.nnz();
        let mut bools = vec![false; n * n];
        for i in 0..n {
            for &j in pattern.row(i) {
                bools[i * n + j] = true;
            }
        }
        let mask = BitMask::from_bools([n, n], bools)?;
        let plan = AttentionPlan::new(pattern);
        let dense = || -> Result<Array2<f32>, masked::MaskedError> {
            let s = q.dot(&k.t()) * scale;
            let x = MaskedArray::new(s.view().into_dyn(), mask.clone())?;
            let masked::engine::Output::Dense(o) = ArrayRef::from_dense(x).apply(&softmax)? else {
                unreachable!("a dense input gives a dense output")
            };
            let masked::DynVec::F32(pv) = o.values else {
                unreachable!("an f32 softmax is f32")
            };
            Ok(Array2::from_shape_vec((n, n), pv).expect("n x n").dot(&v))
        };
        let sparse = || {
            attention(
                q.view().into_dyn(),
                k.view().into_dyn(),
                v.view().into_dyn(),
                &plan,
                &Options::default(),
            )
        };
        let (ds, dp) = measure(|| dense().map(drop), t)?;
        let (ss, sp) = measure(|| sparse().map(drop), t)?;
        let (od, os) = (dense()?, sparse()?);
        let max_diff = od
            .iter()
            .zip(os.iter())
            .map(|(x, y)| (x - y).abs() as f64)
            .fold(0.0, f64::max);
        out.push(report::AttnRecord {
            n,
            d,
            density: p,
            nnz,
            threads,
            dense_seconds: ds,
            sparse_seconds: ss,
            dense_peak: dp,
            sparse_peak: sp,
            max_diff,
        });
    }
    Ok(out)
}
