//! `masked sweep`: which layout for my data and my op? Builds the same logical data in
//! every layout (dense + bit mask, CSR, COO) at each point of a density grid, times each
//! op on each layout and the conversions between them, and writes the crossover report,
//! one SVG per op and series, JSON lines and CSV (docs/cli.md, docs/benchmarks.md).

pub mod data;
pub mod plot;
pub mod report;

use crate::error::CliError;
use crate::timing::{emit, measure, parse_list, Timing};
use clap::Parser;
use data::{Logical, Structure};
use masked::by_name::{self as ops, Kind, OpRequest};
use masked::{Dims, Element, MaskedArray, MaskedArrayD, MaskedCoo, MaskedCsr};
use ndarray::{ArrayViewD, IxDyn};
use report::{PeerRecord, Record};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Sweep the layouts over a density grid: the crossover report and plots.
#[derive(Parser, Debug, Clone)]
#[command(name = "masked sweep")]
pub struct SweepArgs {
    /// Ops to time, comma separated (reductions and normalizations of the registry).
    /// Default: sum,amax,softmax,median (full: also mean,var,logsumexp).
    #[arg(long)]
    pub op: Option<String>,
    /// Layouts, comma separated: dense, csr, coo.
    #[arg(long, default_value = "dense,csr,coo")]
    pub layout: String,
    /// The whole grid (four points a decade from 1e-5 to 1), every series and more ops,
    /// on a 4096 x 4096 matrix: several minutes. Without it, a quick run (one point a
    /// decade, two series, 2048 x 2048) of about a minute.
    #[arg(long)]
    pub full: bool,
    /// Density grid: `LO:HI:K` (K log-spaced points a decade, HI included) or a comma
    /// list. Default 1e-5:1:1 (full: 1e-5:1:4).
    #[arg(long)]
    pub grid: Option<String>,
    /// Series, comma separated, each `VARY:STRUCTURE`. VARY `stored`: the stored density
    /// takes the grid, the mask has STRUCTURE (pattern: the stored entries; random,
    /// lengths, banded at --mask-density; causal). VARY `mask`: the mask density takes the
    /// grid (random, lengths, banded), the stored density is --density. Default
    /// stored:pattern,mask:random (full: also stored:causal,mask:lengths,mask:banded).
    #[arg(long)]
    pub series: Option<String>,
    /// Stored density of `mask:*` series.
    #[arg(long, default_value_t = 0.01)]
    pub density: f64,
    /// Mask density of `stored:random|lengths|banded` series.
    #[arg(long, default_value_t = 0.5)]
    pub mask_density: f64,
    /// Matrix shape `R,C`. Default 2048,2048 (full: 4096,4096).
    #[arg(long, conflicts_with = "size")]
    pub shape: Option<String>,
    /// Size of the dense values instead of a shape (K, M, G suffixes): a square matrix of
    /// at least this many bytes, e.g. 1G for DRAM-resident runs.
    #[arg(long)]
    pub size: Option<String>,
    /// The dim reduced and normalized along: 1 (rows) or 0 (columns).
    #[arg(long, default_value_t = 1)]
    pub dim: usize,
    /// Worker threads, one count or a comma list (each point is timed at each count).
    /// Default: all cores.
    #[arg(long)]
    pub threads: Option<String>,
    /// Thread scaling: time every point at 1, 2, 4 ... threads up to all cores.
    #[arg(long, conflicts_with = "threads")]
    pub scaling: bool,
    /// Timed runs per measurement at most (the median is reported).
    #[arg(long, default_value_t = 7)]
    pub repeat: usize,
    /// Seconds of timed runs per measurement before stopping (at least 3 runs).
    #[arg(long, default_value_t = 0.1)]
    pub budget: f64,
    /// Skip timing the conversions between layouts.
    #[arg(long)]
    pub no_convert: bool,
    /// Skip the attention series (dense masked attention vs the sparse path across
    /// pattern densities: n = 1024, or 2048 with --full; d = 64, f32).
    #[arg(long)]
    pub no_attention: bool,
    /// Seed of the generator.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Value dtype: f32, f64, f16, bf16, i32 or i64.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Output folder: results.jsonl, results.csv, report.md, the SVGs.
    #[arg(long, default_value = "sweep-out")]
    pub out: PathBuf,
    /// Also write each point's data (data/*.npz, points.jsonl) for the peer script
    /// (scripts/sweep_peers.py).
    #[arg(long)]
    pub export: bool,
    /// Do not time: rebuild report.md and the SVGs of --out from its results.jsonl and,
    /// when present, the peers' peers.jsonl.
    #[arg(long)]
    pub report_only: bool,
    /// Print JSON lines on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Memory ceiling (bytes; K, M, G suffixes); default MASKED_MAX_MEMORY, else 80% of
    /// physical memory. Each point is checked against it before it is built.
    #[arg(long)]
    pub max_memory: Option<String>,
}

/// What one series varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vary {
    /// The stored density takes the grid.
    Stored,
    /// The mask density takes the grid.
    Mask,
}

/// One line of every plot: what varies and the mask's structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Series {
    /// What takes the grid.
    pub vary: Vary,
    /// The mask's structure.
    pub structure: Structure,
}

impl Series {
    /// `stored-pattern`, the name in file names and results.
    pub fn name(&self) -> String {
        let v = match self.vary {
            Vary::Stored => "stored",
            Vary::Mask => "mask",
        };
        format!("{v}-{}", self.structure.name())
    }

    fn parse(s: &str) -> Result<Series, CliError> {
        let (v, st) = s.split_once(':').ok_or_else(|| {
            CliError::Usage(format!(
                "invalid series '{s}': expected VARY:STRUCTURE such as stored:pattern or mask:random"
            ))
        })?;
        let structure: Structure = st.parse()?;
        let vary = match v {
            "stored" => Vary::Stored,
            "mask" => Vary::Mask,
            _ => {
                return Err(CliError::Usage(format!(
                    "invalid series '{s}': VARY is stored or mask"
                )))
            }
        };
        if vary == Vary::Mask && !structure.takes_density() {
            return Err(CliError::Usage(format!(
                "invalid series '{s}': a {} mask has no density to vary (use random, lengths or banded)",
                structure.name()
            )));
        }
        Ok(Series { vary, structure })
    }
}

/// The conversions timed at every point, `(from, to)`.
pub const CONVERSIONS: [(&str, &str); 6] = [
    ("dense", "csr"),
    ("dense", "coo"),
    ("csr", "coo"),
    ("coo", "csr"),
    ("csr", "dense"),
    ("coo", "dense"),
];

/// The density grid: `LO:HI:K` (K points a decade, log-spaced, both ends included) or
/// a comma list; every value in (0, 1], returned increasing.
pub fn parse_grid(s: &str) -> Result<Vec<f64>, CliError> {
    let bad = |why: &str| CliError::Usage(format!("invalid --grid '{s}': {why}"));
    let mut g: Vec<f64> = if let Some((lo, rest)) = s.split_once(':') {
        let (hi, k) = rest
            .split_once(':')
            .ok_or_else(|| bad("expected LO:HI:K"))?;
        let lo: f64 = lo.trim().parse().map_err(|_| bad("LO is not a number"))?;
        let hi: f64 = hi.trim().parse().map_err(|_| bad("HI is not a number"))?;
        let k: usize = k.trim().parse().map_err(|_| bad("K is not a count"))?;
        if lo.is_nan() || hi.is_nan() || lo <= 0.0 || hi < lo || k == 0 {
            return Err(bad("expected 0 < LO <= HI and K >= 1"));
        }
        let steps = ((hi / lo).log10() * k as f64).round() as usize;
        (0..=steps)
            .map(|i| {
                let v = lo * 10f64.powf(i as f64 / k as f64);
                // 3 significant digits, parsed back: 1e-3 stays exactly 1e-3, not
                // 0.0009999999 (the report looks points up by value)
                format!("{v:.2e}").parse::<f64>().unwrap_or(v)
            })
            .collect()
    } else {
        s.split(',')
            .map(|p| p.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|_| bad("not a list of numbers"))?
    };
    if g.iter().any(|&v| v.is_nan() || v <= 0.0 || v > 1.0) {
        return Err(bad("densities must be in (0, 1]"));
    }
    g.sort_by(f64::total_cmp);
    g.dedup();
    Ok(g)
}

/// A square shape whose dense values take at least `bytes` of `elem` bytes each.
fn shape_for_size(bytes: u64, elem: usize) -> [usize; 2] {
    let side = ((bytes as f64 / elem as f64).sqrt().ceil() as usize).max(1);
    [side, side]
}

/// The thread counts of `--scaling` (the sweep's and `masked bench`'s): 1, 2, 4 ...
/// below `cores`, then `cores`.
pub fn scaling_counts(cores: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |&t| t.checked_mul(2))
        .take_while(|&t| t < cores)
        .collect();
    v.push(cores.max(1));
    v
}

/// The resolved plan of a run, written to `meta.json` with the results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    /// `[R, C]`.
    pub shape: Vec<usize>,
    /// The value dtype.
    pub dtype: String,
    /// The reduced dim.
    pub dim: usize,
    /// The ops timed.
    pub ops: Vec<String>,
    /// The layouts timed.
    pub layouts: Vec<String>,
    /// The series' names.
    pub series: Vec<String>,
    /// The grid.
    pub grid: Vec<f64>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Stored density of the `mask` series.
    pub density: f64,
    /// Mask density of the `stored` series with a separate mask.
    pub mask_density: f64,
    /// The machine: CPU model, cores, the features the kernels dispatch on.
    pub machine: String,
    /// Seed.
    pub seed: u64,
}

/// The CPU model and features, for the report.
fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let mut feats = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            feats.push("AVX-512");
        } else if std::arch::is_x86_feature_detected!("avx2") {
            feats.push("AVX2");
        }
        if std::arch::is_x86_feature_detected!("f16c") {
            feats.push("F16C");
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{model}, {cores} cores, {}", feats.join(" + "))
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn progress(total: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30}] {pos}/{len} eta {eta} {msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// The resolved run: shape, ops, timing, series.
pub struct Plan {
    /// The matrix shape.
    pub shape: [usize; 2],
    /// The ops, by name.
    pub reqs: Vec<(String, OpRequest)>,
    /// The series.
    pub series: Vec<Series>,
    /// How each measurement runs.
    pub timing: Timing,
    /// What `meta.json` records.
    pub meta: Meta,
}

impl Plan {
    /// Resolves the arguments (shape, grid, series, ops, threads) for dtype `T`.
    pub fn new<T: Element>(a: &SweepArgs) -> Result<Plan, CliError> {
        let shape = match (&a.shape, &a.size) {
            (Some(s), _) => {
                let v: Vec<usize> = parse_list(s, "shape")?;
                match v[..] {
                    [r, c] if r > 0 && c > 0 => [r, c],
                    _ => {
                        return Err(CliError::Usage(format!(
                        "invalid --shape '{s}': the sweep takes a 2-d shape R,C of positive sizes"
                    )))
                    }
                }
            }
            (None, Some(s)) => {
                let bytes = masked::io::limits::parse_bytes(s).ok_or_else(|| {
                    CliError::Usage(format!(
                        "invalid --size '{s}': expected a byte count such as 1G"
                    ))
                })?;
                shape_for_size(bytes, std::mem::size_of::<T>())
            }
            (None, None) if a.full => [4096, 4096],
            (None, None) => [2048, 2048],
        };
        if a.dim > 1 {
            return Err(CliError::Usage(format!(
                "invalid --dim {}: the sweep's matrices have dims 0 and 1",
                a.dim
            )));
        }
        let grid =
            parse_grid(
                a.grid
                    .as_deref()
                    .unwrap_or(if a.full { "1e-5:1:4" } else { "1e-5:1:1" }),
            )?;
        let series = a
            .series
            .as_deref()
            .unwrap_or(if a.full {
                "stored:pattern,stored:causal,mask:random,mask:lengths,mask:banded"
            } else {
                "stored:pattern,mask:random"
            })
            .split(',')
            .map(|s| Series::parse(s.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        for (what, v) in [("--density", a.density), ("--mask-density", a.mask_density)] {
            if !(0.0..=1.0).contains(&v) {
                return Err(CliError::Usage(format!(
                    "invalid {what} {v}: expected a value in [0, 1]"
                )));
            }
        }
        let ops_list = a.op.as_deref().unwrap_or(if a.full {
            "sum,mean,amax,var,logsumexp,softmax,median"
        } else {
            "sum,amax,softmax,median"
        });
        let mut reqs = Vec::new();
        for name in ops_list.split(',').map(str::trim) {
            let op: ops::Op = name.parse()?;
            if !matches!(op.kind(), Kind::Reduce | Kind::ReduceOne | Kind::Normalize) {
                return Err(CliError::Usage(format!(
                    "sweep --op {name}: the sweep times reductions and normalizations (time elementwise ops with masked bench)"
                )));
            }
            reqs.push((
                name.to_string(),
                OpRequest::from_op(op).dims(Dims::from(a.dim as isize)),
            ));
        }
        let layouts: Vec<String> = a.layout.split(',').map(|s| s.trim().to_string()).collect();
        if let Some(bad) = layouts
            .iter()
            .find(|l| !matches!(l.as_str(), "dense" | "csr" | "coo"))
        {
            return Err(CliError::Usage(format!(
                "invalid --layout '{bad}': expected dense, csr or coo"
            )));
        }
        let cores = rayon::current_num_threads();
        let threads = if a.scaling {
            scaling_counts(cores)
        } else {
            match &a.threads {
                Some(t) => parse_list(t, "threads")?,
                None => vec![cores],
            }
        };
        if threads.contains(&0) {
            return Err(CliError::Usage(
                "invalid --threads 0: expected at least 1".into(),
            ));
        }
        if a.repeat == 0 {
            return Err(CliError::Usage(
                "invalid --repeat 0: expected at least 1".into(),
            ));
        }
        Ok(Plan {
            shape,
            meta: Meta {
                shape: shape.to_vec(),
                dtype: T::DTYPE.name().to_string(),
                dim: a.dim,
                ops: reqs.iter().map(|(n, _)| n.clone()).collect(),
                layouts,
                series: series.iter().map(Series::name).collect(),
                grid,
                threads,
                density: a.density,
                mask_density: a.mask_density,
                machine: machine(),
                seed: a.seed,
            },
            reqs,
            series,
            timing: Timing {
                warmup: 0.0,
                min_reps: 3.min(a.repeat),
                max_reps: a.repeat,
                budget: a.budget,
            },
        })
    }
}

/// One point of a series: what was generated.
pub struct Point {
    series: Series,
    x: f64,
    shape: Vec<usize>,
    nnz: usize,
    mask_nnz: usize,
    density: f64,
    mask_density: f64,
}

impl Point {
    /// The point `x` of `series` with the data `l`.
    pub fn new<T: Element>(series: Series, x: f64, l: &Logical<T>) -> Point {
        let n = (l.shape[0] * l.shape[1]) as f64;
        Point {
            series,
            x,
            shape: l.shape.to_vec(),
            nnz: l.stored.len(),
            mask_nnz: l.valid().len(),
            density: l.stored.len() as f64 / n,
            mask_density: l.valid().len() as f64 / n,
        }
    }

    /// The result record of one measurement at this point.
    pub fn record(
        &self, op: &str, layout: &str, threads: usize, seconds: f64, peak: usize, bytes: f64,
    ) -> Record {
        Record {
            series: self.series.name(),
            vary: self.series.vary,
            structure: self.series.structure.name().to_string(),
            x: self.x,
            density: self.density,
            mask_density: self.mask_density,
            op: op.to_string(),
            layout: layout.to_string(),
            shape: self.shape.clone(),
            nnz: self.nnz,
            mask_nnz: self.mask_nnz,
            threads,
            seconds,
            gbps: bytes / seconds / 1e9,
            ideal_bytes: bytes,
            peak_bytes: peak,
        }
    }
}

/// The layouts of one point, built from one [`Logical`].
pub struct Built<T: Element> {
    dense: Option<(Vec<T>, masked::BitMask)>,
    csr: Option<data::CsrParts<T>>,
    coo: Option<MaskedCoo<T>>,
    shape: Vec<usize>,
}

impl<T: Element> Built<T> {
    /// Builds `layouts` (every layout when `all`).
    pub fn new(l: &Logical<T>, all: bool, layouts: &[String]) -> Result<Self, CliError> {
        let has = |n: &str| all || layouts.iter().any(|l| l == n);
        Ok(Built {
            dense: has("dense").then(|| l.dense()).transpose()?,
            csr: has("csr").then(|| l.csr()).transpose()?,
            coo: has("coo").then(|| l.coo()).transpose()?,
            shape: l.shape.to_vec(),
        })
    }

    /// The dense layout as a masked view.
    pub fn dense(&self) -> Result<MaskedArray<ndarray::ViewRepr<&T>, IxDyn>, CliError> {
        let (v, m) = self.dense.as_ref().expect("the dense layout is built");
        let view = ArrayViewD::from_shape(IxDyn(&self.shape), &v[..])
            .map_err(|e| CliError::Usage(format!("bad shape: {e}")))?;
        Ok(MaskedArray::new(view, m.clone())?)
    }

    /// The CSR layout as a masked matrix.
    pub fn csr(&self) -> Result<MaskedCsr<'_, T, u32, usize>, CliError> {
        let (mat, mask) = self.csr.as_ref().expect("the CSR layout is built");
        Ok(match mask {
            None => MaskedCsr::from_pattern(mat.view())?,
            Some(p) => MaskedCsr::with_mask(mat.view(), p.clone())?,
        })
    }

    /// The COO layout.
    pub fn coo(&self) -> &MaskedCoo<T> {
        self.coo.as_ref().expect("the COO layout is built")
    }

    /// Times the conversion of this point's `from` layout to `to`.
    pub fn time_convert(&self, from: &str, to: &str, t: &Timing) -> Result<(f64, usize), CliError> {
        /// Drops a conversion's result where the optimiser cannot see it unused.
        fn done<X>(x: X) {
            drop(std::hint::black_box(x))
        }
        match (from, to) {
            ("dense", "csr") => {
                let a = self.dense()?;
                measure(|| masked::coo::dense_to_csr(&a).map(done), t)
            }
            ("dense", "coo") => {
                let a = self.dense()?;
                measure(
                    || {
                        done(MaskedCoo::from(&a));
                        Ok(())
                    },
                    t,
                )
            }
            ("csr", "coo") => {
                let a = self.csr()?;
                measure(|| masked::csr_to_coo(&a).map(done), t)
            }
            ("coo", "csr") => measure(|| self.coo().to_csr().map(done), t),
            ("csr", "dense") => {
                let a = self.csr()?;
                measure(|| masked::csr_to_dense(&a).map(done), t)
            }
            _ => measure(|| MaskedArrayD::try_from(self.coo()).map(done), t),
        }
    }
}

/// Where the results go: results.jsonl and results.csv in the folder, and stdout (a table,
/// or JSON lines with `--json`).
pub struct Output {
    jsonl: std::io::BufWriter<std::fs::File>,
    csv: std::io::BufWriter<std::fs::File>,
    json: bool,
    dir: PathBuf,
}

impl Output {
    /// Creates the result files in `dir` and prints the table's header.
    pub fn open(dir: &Path, json: bool) -> Result<Output, CliError> {
        let create = |name: &str| {
            let p = dir.join(name);
            std::fs::File::create(&p)
                .map(std::io::BufWriter::new)
                .map_err(|e| CliError::file(&p, e.to_string()))
        };
        let mut o = Output {
            jsonl: create("results.jsonl")?,
            csv: create("results.csv")?,
            json,
            dir: dir.to_path_buf(),
        };
        o.write_csv(Record::CSV_HEADER)?;
        if !json {
            emit(format!(
                "{:<16} {:>8} {:<10} {:<12} {:>8} {:>11} {:>9} {:>9}",
                "series", "x", "op", "layout", "threads", "ms", "GB/s", "peak MB"
            ))?;
        }
        Ok(o)
    }

    fn write_csv(&mut self, line: &str) -> Result<(), CliError> {
        use std::io::Write;
        writeln!(self.csv, "{line}")
            .map_err(|e| CliError::file(&self.dir.join("results.csv"), e.to_string()))
    }

    /// Writes one record to the files and stdout.
    pub fn record(&mut self, r: &Record) -> Result<(), CliError> {
        use std::io::Write;
        let line = serde_json::to_string(r).expect("a plain struct serialises");
        writeln!(self.jsonl, "{line}")
            .map_err(|e| CliError::file(&self.dir.join("results.jsonl"), e.to_string()))?;
        self.write_csv(&r.csv())?;
        if self.json {
            emit(line)
        } else {
            emit(format!(
                "{:<16} {:>8.0e} {:<10} {:<12} {:>8} {:>11.4} {:>9.2} {:>9.1}",
                r.series,
                r.x,
                r.op,
                r.layout,
                r.threads,
                r.seconds * 1e3,
                r.gbps,
                r.peak_bytes as f64 / 1e6
            ))
        }
    }

    /// Flushes the files.
    pub fn finish(mut self) -> Result<(), CliError> {
        use std::io::Write;
        self.jsonl
            .flush()
            .and_then(|_| self.csv.flush())
            .map_err(|e| CliError::file(&self.dir, e.to_string()))
    }
}

/// Writes `v` as pretty JSON.
pub fn write_json<S: Serialize>(path: &Path, v: &S) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(v).expect("a plain struct serialises");
    std::fs::write(path, text).map_err(|e| CliError::file(path, e.to_string()))
}

/// A point's data for the peer script, and its line of points.jsonl.
#[derive(Debug, Serialize, Deserialize)]
pub struct Exported {
    /// The series.
    pub series: String,
    /// The grid value.
    pub x: f64,
    /// The `.npz` under `data/`: `indptr`, `indices`, `data`, `shape` of the stored CSR
    /// (scipy's names), and `mask_indptr`, `mask_indices` for a separate mask.
    pub file: String,
    /// Stored entries.
    pub nnz: usize,
    /// Valid elements.
    pub mask_nnz: usize,
}

/// Writes the data of point `i` under `dir/data/` for the peer script.
pub fn export_point<T: Element>(
    dir: &Path, i: usize, point: &Point, l: &Logical<T>,
) -> Result<Exported, CliError> {
    use ndarray::Array1;
    use ndarray_npy::NpzWriter;
    let file = format!("data/{}-{i:03}.npz", point.series.name());
    let path = dir.join(&file);
    let (mat, mask) = l.csr()?;
    // f64 holds every dtype's values exactly; the peer script casts to meta.json's dtype
    let values: Vec<f64> = mat.data().iter().map(|v| v.to_f64()).collect();
    masked::io::npy::write_atomic(&path, |buf| {
        let mut cur = std::io::Cursor::new(Vec::new());
        {
            let e = |e: ndarray_npy::WriteNpzError| e.to_string();
            let mut w = NpzWriter::new(&mut cur);
            let i64s = |v: &[usize]| Array1::from_iter(v.iter().map(|&x| x as i64));
            let i32s = |v: &[u32]| Array1::from_iter(v.iter().map(|&x| x as i32));
            w.add_array("indptr", &i64s(mat.indptr().raw_storage()))
                .map_err(e)?;
            w.add_array("indices", &i32s(mat.indices())).map_err(e)?;
            w.add_array("data", &Array1::from_vec(values)).map_err(e)?;
            w.add_array("shape", &i64s(&l.shape)).map_err(e)?;
            if let Some(p) = &mask {
                w.add_array("mask_indptr", &i64s(p.indptr())).map_err(e)?;
                w.add_array("mask_indices", &i32s(p.indices())).map_err(e)?;
            }
            w.finish().map_err(e)?;
        }
        *buf = cur.into_inner();
        Ok(())
    })?;
    Ok(Exported {
        series: point.series.name(),
        x: point.x,
        file,
        nnz: point.nnz,
        mask_nnz: point.mask_nnz,
    })
}

/// Reads JSON lines of `R` (a missing file is no lines).
pub fn read_jsonl<R: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<R>, CliError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CliError::file(path, e.to_string())),
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(k, l)| {
            serde_json::from_str(l)
                .map_err(|e| CliError::file(path, format!("line {}: {e}", k + 1)))
        })
        .collect()
}

/// The peers' figures of a folder, if the peer script wrote them.
pub fn read_peers(dir: &Path) -> Result<Vec<PeerRecord>, CliError> {
    read_jsonl(&dir.join("peers.jsonl"))
}

#[cfg(test)]
mod tests;
