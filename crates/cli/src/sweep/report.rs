//! The sweep's report: crossovers measured and modelled, conversions, thread scaling,
//! peers, written as `report.md` beside one SVG per op and series.

use super::{read_jsonl, read_peers, Meta, Vary, CONVERSIONS};
use crate::error::CliError;
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use std::path::Path;

/// One measurement: an op (or a conversion) on one layout at one point of a series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The series, `VARY-STRUCTURE`.
    pub series: String,
    /// What the series varies.
    pub vary: Vary,
    /// The mask's structure.
    pub structure: String,
    /// The grid value of the varied density.
    pub x: f64,
    /// Stored entries / elements, as generated.
    pub density: f64,
    /// Valid elements / elements, as generated.
    pub mask_density: f64,
    /// The op, or `convert`.
    pub op: String,
    /// `dense`, `csr`, `coo`, or `FROM->TO` for a conversion.
    pub layout: String,
    /// `[R, C]`.
    pub shape: Vec<usize>,
    /// Stored entries.
    pub nnz: usize,
    /// Valid elements.
    pub mask_nnz: usize,
    /// Worker threads.
    pub threads: usize,
    /// Median seconds.
    pub seconds: f64,
    /// `ideal_bytes / seconds`, in 10^9 bytes a second.
    pub gbps: f64,
    /// Bytes the ideal kernel reads (of the source layout for a conversion).
    pub ideal_bytes: f64,
    /// Peak bytes allocated during one run.
    pub peak_bytes: usize,
}

impl Record {
    /// The header of results.csv.
    pub const CSV_HEADER: &'static str = "series,vary,structure,x,density,mask_density,op,layout,rows,cols,nnz,mask_nnz,threads,seconds,gbps,ideal_bytes,peak_bytes";

    /// The line of results.csv.
    pub fn csv(&self) -> String {
        let vary = match self.vary {
            Vary::Stored => "stored",
            Vary::Mask => "mask",
        };
        format!(
            "{},{vary},{},{:e},{:e},{:e},{},{},{},{},{},{},{},{:e},{:.4},{},{}",
            self.series,
            self.structure,
            self.x,
            self.density,
            self.mask_density,
            self.op,
            self.layout,
            self.shape.first().copied().unwrap_or(0),
            self.shape.get(1).copied().unwrap_or(0),
            self.nnz,
            self.mask_nnz,
            self.threads,
            self.seconds,
            self.gbps,
            self.ideal_bytes,
            self.peak_bytes
        )
    }
}

/// One point of the attention series (attention.jsonl): dense masked attention and the
/// sparse path at one pattern density.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttnRecord {
    /// Queries (= keys).
    pub n: usize,
    /// Head dim.
    pub d: usize,
    /// Probability of a valid (query, key) pair (plus the diagonal).
    pub density: f64,
    /// Valid pairs.
    pub nnz: usize,
    /// Threads.
    pub threads: usize,
    /// Median seconds of dense masked attention: scores `Q Kᵀ` (a dense matrix product),
    /// the engine's masked softmax, `P V`.
    pub dense_seconds: f64,
    /// Median seconds of the sparse path (`masked::attention::attention`).
    pub sparse_seconds: f64,
    /// Peak bytes one dense run allocated.
    pub dense_peak: usize,
    /// Peak bytes one sparse run allocated.
    pub sparse_peak: usize,
    /// Largest difference between the two outputs (the same result).
    pub max_diff: f64,
}

/// The attention section of report.md from attention.jsonl (empty where there is none).
pub fn attention_section(rs: &[AttnRecord]) -> String {
    let mut md = String::new();
    let Some(first) = rs.first() else {
        return md;
    };
    let _ = writeln!(
        md,
        "## Attention: dense masked vs sparse
"
    );
    let _ = writeln!(
        md,
        "Masked attention `softmax(Q Kᵀ/√d) V` over a random pattern (each (query, key) pair valid with probability p, plus the diagonal), n = {}, d = {}, f32, {} thread(s). Dense: the scores as a dense n × n product, the engine's masked softmax on them, then `P V`. Sparse: `masked::attention` (the scores at the valid pairs only). Both give the same output (largest difference in the table).
",
        first.n, first.d, first.threads
    );
    let _ = writeln!(
        md,
        "| p | valid pairs | dense s | sparse s | dense/sparse time | dense MB | sparse MB | max diff |\n|---|---|---|---|---|---|---|---|"
    );
    for r in rs {
        let _ = writeln!(
            md,
            "| {:e} | {} | {:.5} | {:.5} | {:.2} | {:.1} | {:.1} | {:.1e} |",
            r.density,
            r.nnz,
            r.dense_seconds,
            r.sparse_seconds,
            r.dense_seconds / r.sparse_seconds,
            r.dense_peak as f64 / 1e6,
            r.sparse_peak as f64 / 1e6,
            r.max_diff
        );
    }
    let xs: Vec<f64> = rs.iter().map(|r| r.density).collect();
    let ratio: Vec<f64> = rs
        .iter()
        .map(|r| r.sparse_seconds / r.dense_seconds)
        .collect();
    let cross = match crossing(&xs, &ratio, true) {
        Some(Cross::At(x)) => format!("the sparse path is faster below p ≈ {x:.2e}"),
        Some(Cross::Above(x)) => {
            format!("the sparse path is faster over the whole grid (up to p = {x:e})")
        }
        Some(Cross::Below(x)) => format!("dense is faster over the whole grid (from p = {x:e})"),
        None => "no points".into(),
    };
    let _ = writeln!(
        md,
        "
Crossover: {cross}.
"
    );
    md
}

/// A peer's time at one point (peers.jsonl, written by scripts/sweep_peers.py).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerRecord {
    /// The series.
    pub series: String,
    /// The grid value.
    pub x: f64,
    /// The op (our name).
    pub op: String,
    /// The peer, e.g. `torch.masked`.
    pub peer: String,
    /// The layout it ran on: `dense`, `csr` or `coo`.
    pub layout: String,
    /// Median seconds.
    pub seconds: f64,
    /// Worker threads.
    #[serde(default)]
    pub threads: usize,
}

impl PeerRecord {
    /// The legend's name.
    pub fn label(&self) -> String {
        format!("{} {}", self.peer, self.layout)
    }
}

/// Where a sparse layout stops beating dense.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cross {
    /// At this density, interpolated between grid points.
    At(f64),
    /// Dense is faster already at the grid's lowest point.
    Below(f64),
    /// The sparse layout is faster on the whole grid.
    Above(f64),
}

impl Cross {
    fn text(self) -> String {
        match self {
            Cross::At(x) => format!("{x:.2e}"),
            Cross::Below(x) => format!("< {x:.0e}"),
            Cross::Above(x) => format!("> {x:.0e}"),
        }
    }

    /// The density where the crossover is marked on a plot.
    pub fn at(self) -> Option<f64> {
        match self {
            Cross::At(x) => Some(x),
            _ => None,
        }
    }
}

/// The first crossing of `ratio` through 1 going up the grid: `xs` increasing, `r` the
/// sparse / dense ratio there; `log` interpolates in log-log (times), else linearly
/// (bytes, affine in the density).
pub fn crossing(xs: &[f64], r: &[f64], log: bool) -> Option<Cross> {
    let first = *xs.first()?;
    let i = match r.iter().position(|&v| v >= 1.0) {
        None => return Some(Cross::Above(*xs.last()?)),
        Some(0) => return Some(Cross::Below(first)),
        Some(i) => i,
    };
    let (x0, x1, r0, r1) = (xs[i - 1], xs[i], r[i - 1], r[i]);
    Some(Cross::At(if log {
        let t = -r0.ln() / (r1.ln() - r0.ln());
        (x0.ln() + t * (x1.ln() - x0.ln())).exp()
    } else {
        x0 + (x1 - x0) * (1.0 - r0) / (r1 - r0)
    }))
}

/// `y` at `x` by log-log interpolation of the points (`None` outside the grid).
pub fn interpolate(xs: &[f64], ys: &[f64], x: f64) -> Option<f64> {
    let i = xs.iter().position(|&v| v >= x)?;
    if xs[i] == x {
        return Some(ys[i]);
    }
    if i == 0 {
        return None;
    }
    let t = (x.ln() - xs[i - 1].ln()) / (xs[i].ln() - xs[i - 1].ln());
    Some((ys[i - 1].ln() + t * (ys[i].ln() - ys[i - 1].ln())).exp())
}

/// One sparse layout's crossover against dense for one op and series.
#[derive(Debug, Clone, PartialEq)]
pub struct Crossover {
    /// The op.
    pub op: String,
    /// The series.
    pub series: String,
    /// `csr` or `coo`.
    pub layout: String,
    /// Measured.
    pub measured: Cross,
    /// From the bytes each layout must read.
    pub model: Cross,
    /// Dense time / sparse time at 1e-3 and 1e-2 (when on the grid).
    pub speedup: [Option<f64>; 2],
    /// The sparse layout's GB/s over dense's near the crossover, and that density.
    pub rate: Option<(f64, f64)>,
    /// Dense's time at the grid's top over its time at the bottom.
    pub dense_span: f64,
}

/// The records of one op on one layout of one series at one thread count, sorted by x.
pub(crate) fn line<'r>(
    rs: &'r [Record], series: &str, op: &str, layout: &str, threads: usize,
) -> Vec<&'r Record> {
    let mut v: Vec<&Record> = rs
        .iter()
        .filter(|r| r.series == series && r.op == op && r.layout == layout && r.threads == threads)
        .collect();
    v.sort_by(|a, b| a.x.total_cmp(&b.x));
    v
}

/// Every sparse layout's crossover for every op and series, at `threads`.
pub fn crossovers(rs: &[Record], threads: usize) -> Vec<Crossover> {
    let mut out = Vec::new();
    for (series, op) in keys(rs) {
        let dense = line(rs, &series, &op, "dense", threads);
        for layout in ["csr", "coo"] {
            let sparse = line(rs, &series, &op, layout, threads);
            // the points both layouts have
            let pairs: Vec<(&Record, &Record)> = sparse
                .iter()
                .filter_map(|s| dense.iter().find(|d| d.x == s.x).map(|d| (*d, *s)))
                .collect();
            if pairs.is_empty() {
                continue;
            }
            let xs: Vec<f64> = pairs.iter().map(|(d, _)| d.x).collect();
            let rt: Vec<f64> = pairs.iter().map(|(d, s)| s.seconds / d.seconds).collect();
            let rb: Vec<f64> = pairs
                .iter()
                .map(|(d, s)| s.ideal_bytes / d.ideal_bytes)
                .collect();
            let speed: Vec<f64> = rt.iter().map(|r| 1.0 / r).collect();
            let measured = crossing(&xs, &rt, true).expect("points");
            let model = crossing(&xs, &rb, false).expect("points");
            let near = measured.at().or(model.at()).unwrap_or(xs[xs.len() / 2]);
            let k = (0..pairs.len())
                .min_by(|&a, &b| {
                    (xs[a].ln() - near.ln())
                        .abs()
                        .total_cmp(&(xs[b].ln() - near.ln()).abs())
                })
                .expect("points");
            out.push(Crossover {
                op: op.clone(),
                series: series.clone(),
                layout: layout.to_string(),
                measured,
                model,
                speedup: [
                    interpolate(&xs, &speed, 1e-3),
                    interpolate(&xs, &speed, 1e-2),
                ],
                rate: Some((pairs[k].1.gbps / pairs[k].0.gbps, xs[k])),
                dense_span: pairs[pairs.len() - 1].0.seconds / pairs[0].0.seconds,
            });
        }
    }
    out
}

/// The (series, op) pairs of the records, ops only, in order of first appearance.
fn keys(rs: &[Record]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = Vec::new();
    for r in rs.iter().filter(|r| r.op != "convert") {
        let k = (r.series.clone(), r.op.clone());
        if !v.contains(&k) {
            v.push(k);
        }
    }
    v
}

/// Why a measured crossover differs from the byte model, in numbers.
fn explain(c: &Crossover) -> String {
    let mut s = String::new();
    if let Some((rate, x)) = c.rate {
        let _ = write!(
            s,
            "{} moves {} dense's model bytes/s at {x:.0e}",
            c.layout.to_uppercase(),
            sig(rate)
        );
        if let (Cross::At(m), Cross::At(b)) = (c.measured, c.model) {
            let _ = write!(s, "; crossover at {} the model's", sig(m / b));
        }
    }
    if c.dense_span > 1.5 {
        let _ = write!(
            s,
            "; dense's own time grows {:.1}x over the grid (it skips masked-out words, reading less than the model's bytes when few are valid)",
            c.dense_span
        );
    }
    s
}

/// A ratio with two significant digits: 2.4x, 0.13x, 0.0021x.
fn sig(v: f64) -> String {
    let digits = (1 - v.abs().log10().floor() as i32).max(0) as usize;
    format!("{v:.digits$}x")
}

fn fmt_speedup(v: Option<f64>) -> String {
    v.map_or("".into(), |v| format!("{v:.2}x"))
}

/// A crossover's cells: op, series, layout, measured, model, speedups at 1e-3 and 1e-2.
fn cells(c: &Crossover) -> [String; 7] {
    [
        c.op.clone(),
        c.series.clone(),
        c.layout.clone(),
        c.measured.text(),
        c.model.text(),
        fmt_speedup(c.speedup[0]),
        fmt_speedup(c.speedup[1]),
    ]
}

/// The crossover table as Markdown, with the reason for each difference from the model.
pub fn crossover_table(cs: &[Crossover]) -> String {
    let mut s = String::from(
        "| op | series | layout | measured crossover | byte model | dense/sparse time at 1e-3 | at 1e-2 | why they differ |\n|---|---|---|---|---|---|---|---|\n",
    );
    for c in cs {
        let _ = writeln!(s, "| {} | {} |", cells(c).join(" | "), explain(c));
    }
    s
}

/// The crossover table as plain text for stdout.
fn crossover_text(cs: &[Crossover]) -> String {
    let row = |v: [&str; 7]| {
        format!(
            "{:<10} {:<16} {:<6} {:>14} {:>12} {:>14} {:>10}\n",
            v[0], v[1], v[2], v[3], v[4], v[5], v[6]
        )
    };
    let mut s = row([
        "op",
        "series",
        "layout",
        "crossover",
        "byte model",
        "speedup@1e-3",
        "@1e-2",
    ]);
    for c in cs {
        let v = cells(c);
        s.push_str(&row(std::array::from_fn(|i| v[i].as_str())));
    }
    s
}

/// The conversions of one series: time of each, and after how many runs of the first
/// op converting dense to each sparse layout pays off.
fn conversion_table(rs: &[Record], series: &str, threads: usize, first_op: &str) -> String {
    let mut s = String::from("| density |");
    for (f, t) in CONVERSIONS {
        let _ = write!(s, " {f}→{t} ms |");
    }
    let _ = writeln!(
        s,
        " dense→CSR pays off after (runs of {first_op}) | dense→COO pays off after |"
    );
    let _ = writeln!(s, "|---|{}---|---|", "---|".repeat(CONVERSIONS.len()));
    let mut xs: Vec<f64> = rs
        .iter()
        .filter(|r| r.series == series && r.op == "convert" && r.threads == threads)
        .map(|r| r.x)
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let time = |op: &str, layout: &str, x: f64| {
        rs.iter()
            .find(|r| {
                r.series == series
                    && r.op == op
                    && r.layout == layout
                    && r.threads == threads
                    && r.x == x
            })
            .map(|r| r.seconds)
    };
    for x in xs {
        let _ = write!(s, "| {x:.0e} |");
        for (f, t) in CONVERSIONS {
            let v = time("convert", &format!("{f}->{t}"), x);
            let _ = write!(
                s,
                " {} |",
                v.map_or("".into(), |v| format!("{:.3}", v * 1e3))
            );
        }
        for to in ["csr", "coo"] {
            let pays = match (
                time("convert", &format!("dense->{to}"), x),
                time(first_op, "dense", x),
                time(first_op, to, x),
            ) {
                (Some(c), Some(d), Some(sp)) if d > sp => format!("{:.0}", (c / (d - sp)).ceil()),
                (Some(_), Some(_), Some(_)) => "never".into(),
                _ => String::new(),
            };
            let _ = write!(s, " {pays} |");
        }
        s.push('\n');
    }
    s
}

/// Thread scaling: time at the fewest threads over time at each count, median over the
/// points of each series.
fn scaling_table(rs: &[Record], threads: &[usize]) -> String {
    let base = threads[0];
    let mut s = String::from("| op | series | layout |");
    for t in &threads[1..] {
        let _ = write!(s, " {base}→{t} threads |");
    }
    let _ = writeln!(s, "\n|---|---|---|{}", "---|".repeat(threads.len() - 1));
    for (series, op) in keys(rs) {
        for layout in ["dense", "csr", "coo"] {
            let b = line(rs, &series, &op, layout, base);
            if b.is_empty() {
                continue;
            }
            let _ = write!(s, "| {op} | {series} | {layout} |");
            for &t in &threads[1..] {
                let mut sp: Vec<f64> = line(rs, &series, &op, layout, t)
                    .iter()
                    .filter_map(|r| b.iter().find(|q| q.x == r.x).map(|q| q.seconds / r.seconds))
                    .collect();
                sp.sort_by(f64::total_cmp);
                let v = sp
                    .get(sp.len() / 2)
                    .map_or("".into(), |v| format!("{v:.2}x"));
                let _ = write!(s, " {v} |");
            }
            s.push('\n');
        }
    }
    s
}

/// Peer time over ours on the same layout, per point.
fn peer_table(rs: &[Record], peers: &[PeerRecord], threads: usize) -> String {
    let mut s = String::from(
        "| series | op | density | peer | layout | peer ms | ours ms | peer / ours |\n|---|---|---|---|---|---|---|---|\n",
    );
    for p in peers {
        let ours = rs.iter().find(|r| {
            r.series == p.series
                && r.op == p.op
                && r.layout == p.layout
                && r.threads == threads
                && r.x == p.x
        });
        if let Some(o) = ours {
            let _ = writeln!(
                s,
                "| {} | {} | {:.0e} | {} | {} | {:.3} | {:.3} | {:.1} |",
                p.series,
                p.op,
                p.x,
                p.peer,
                p.layout,
                p.seconds * 1e3,
                o.seconds * 1e3,
                p.seconds / o.seconds
            );
        }
    }
    s
}

/// What a series shows, in words.
pub fn describe_series(series: &str, meta: &Meta) -> String {
    let (vary, st) = series.split_once('-').unwrap_or((series, ""));
    let mask = match st {
        "pattern" => "the stored entries are the valid ones".to_string(),
        "causal" => "a causal mask (column ≤ row)".to_string(),
        "random" if vary == "mask" => "a random mask".to_string(),
        "lengths" if vary == "mask" => "a padding mask (row lengths)".to_string(),
        "banded" if vary == "mask" => "a band around the diagonal".to_string(),
        other => format!("a {other} mask of density {}", meta.mask_density),
    };
    if vary == "stored" {
        format!("stored density on the grid; {mask}")
    } else {
        format!(
            "mask density on the grid, {mask}; stored density {}",
            meta.density
        )
    }
}

/// Reads the results of `dir` and writes report.md and the SVGs; returns the crossover
/// table as text (for stdout). `meta` is the run's plan (read from meta.json when `None`).
pub fn write_all(dir: &Path, meta: Option<&Meta>) -> Result<String, CliError> {
    let rs: Vec<Record> = read_jsonl(&dir.join("results.jsonl"))?;
    if rs.is_empty() {
        return Err(CliError::file(
            &dir.join("results.jsonl"),
            "no results to report (run masked sweep first)".into(),
        ));
    }
    let meta: Meta = match meta {
        Some(m) => m.clone(),
        None => {
            let p = dir.join("meta.json");
            let text =
                std::fs::read_to_string(&p).map_err(|e| CliError::file(&p, e.to_string()))?;
            serde_json::from_str(&text).map_err(|e| CliError::file(&p, e.to_string()))?
        }
    };
    let peers = read_peers(dir)?;
    let threads = *meta.threads.iter().max().unwrap_or(&1);
    let cs = crossovers(&rs, threads);
    let mut md = String::new();
    let _ = writeln!(md, "# Layout sweep: dense + bit mask vs CSR vs COO\n");
    let _ = writeln!(
        md,
        "Matrix {} x {}, {}, ops along dim {}, {} thread(s) (plots and crossovers); machine: {}; seed {}.\n",
        meta.shape[0], meta.shape[1], meta.dtype, meta.dim, threads, meta.machine, meta.seed
    );
    let _ = writeln!(
        md,
        "Every point holds the same logical data in each layout: the stored entries (standard normal values, uniformly placed) and the mask. Times are medians of repeated runs of the op alone; the byte model is the bytes an ideal kernel reads (dense: 4 bytes a value + 1 bit of mask per element for f32; CSR: value + 4-byte column index per stored entry, 8-byte row pointers, and the same again for a separate mask pattern; COO: value + two 8-byte coordinates per entry, and per mask entry).\n"
    );
    let _ = writeln!(md, "## Crossovers\n");
    let _ = writeln!(
        md,
        "Below the crossover density the sparse layout is faster than dense. `dense/sparse time` above 1 means the sparse layout wins by that factor.\n"
    );
    md.push_str(&crossover_table(&cs));
    let svgs = super::plot::write_plots(dir, &rs, &peers, &meta, &cs, threads)?;
    let mut current = String::new();
    for (series, file, title) in &svgs {
        if *series != current {
            let _ = writeln!(md, "\n## {series}: {}\n", describe_series(series, &meta));
            current = series.clone();
        }
        let _ = writeln!(md, "![{title}]({file})\n");
    }
    let first_op = meta.ops.first().cloned().unwrap_or_default();
    let conv_series: Vec<String> = {
        let mut v: Vec<String> = rs
            .iter()
            .filter(|r| r.op == "convert")
            .map(|r| r.series.clone())
            .collect();
        v.dedup();
        v
    };
    if !conv_series.is_empty() {
        let _ = writeln!(md, "## Conversions\n");
        let _ = writeln!(
            md,
            "Each conversion builds the target layout with the mask carried (dense → sparse stores the valid elements). \"Pays off after N\" is the conversion time over the time one {first_op} saves on the sparse layout.\n"
        );
        for s in &conv_series {
            let _ = writeln!(md, "### {s}\n");
            md.push_str(&conversion_table(&rs, s, threads, &first_op));
            md.push('\n');
        }
    }
    if meta.threads.len() > 1 {
        let _ = writeln!(md, "## Thread scaling\n");
        let _ = writeln!(
            md,
            "Time at {} thread(s) over time at each count, median over each series' points.\n",
            meta.threads[0]
        );
        md.push_str(&scaling_table(&rs, &meta.threads));
        md.push('\n');
    }
    if !peers.is_empty() {
        let _ = writeln!(md, "## Peers\n");
        let _ = writeln!(
            md,
            "Timed by scripts/sweep_peers.py on the data this sweep exported (same points, same values and masks), right after it. The peers' lines are dashed on the plots.\n"
        );
        md.push_str(&peer_table(&rs, &peers, threads));
        md.push('\n');
    }
    let attn: Vec<AttnRecord> = if dir.join("attention.jsonl").exists() {
        read_jsonl(&dir.join("attention.jsonl"))?
    } else {
        Vec::new()
    };
    md.push_str(&attention_section(&attn));
    let _ = writeln!(
        md,
        "## Data\n\n[results.csv](results.csv) and [results.jsonl](results.jsonl) hold every measurement (seconds, GB/s of the byte model, peak bytes allocated during one run)."
    );
    let path = dir.join("report.md");
    std::fs::write(&path, md).map_err(|e| CliError::file(&path, e.to_string()))?;
    Ok(format!(
        "\n{}\nreport: {}",
        crossover_text(&cs),
        path.display()
    ))
}
