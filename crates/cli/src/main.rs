//! `masked`: run any op of the engine on files, or time the layouts (`masked bench`).
//! The contract is docs/cli.md; every bad input exits with status 2 and a one-line
//! message naming the problem.

mod algebra;
mod attention;
mod attention_bench;
mod bench;
mod binary;
mod sweep_run;
mod vjp;

use masked::io::{extension, limits, npy, sparse};
use masked_cli::sweep;
use masked_cli::{alloc, error};

use clap::Parser;
use error::CliError;
use masked::by_name::{Kind, Op, OpRequest, Outcome, SparseOutcome, OPTIONS};
use masked::engine::{Array, CsrMask, Output};
use masked::{with_dyn_vec, CooMask, DType, Dims, DynVec, Element, Values};
use std::path::PathBuf;
use std::process::ExitCode;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

/// Run one masked op on a file.
#[derive(Parser, Debug)]
#[command(
    name = "masked",
    version,
    about = "Masked reductions and normalizations on .npy / .mtx / .npz files",
    after_help = ops_help()
)]
pub(crate) struct RunArgs {
    /// The op.
    op: String,
    /// Input file (.npy dense; .mtx / .npz sparse); A of a binary op.
    input: PathBuf,
    /// The second operand B of a binary op (.npy dense; .mtx / .npz sparse); A of
    /// `where COND A B`.
    b: Option<PathBuf>,
    /// B of `where COND A B`.
    c: Option<PathBuf>,
    /// The fill value of `fill`.
    #[arg(long, allow_hyphen_values = true)]
    value: Option<String>,
    /// A scalar second operand of a binary op (`3` is an integer, `3.0` a float).
    #[arg(long, allow_hyphen_values = true)]
    scalar: Option<String>,
    /// Compute `op(scalar, A)` instead of `op(A, scalar)` (`1 - x`, `2 / x`).
    #[arg(long)]
    scalar_first: bool,
    /// Mask file of B (binary ops).
    #[arg(long)]
    mask_b: Option<PathBuf>,
    /// Mask rule of a binary op: strict (equal masks, the default) or and (valid where
    /// both are).
    #[arg(long)]
    masks: Option<String>,
    /// Mask file (.npy bool broadcastable to the input for dense input).
    #[arg(long)]
    mask: Option<PathBuf>,
    /// Use the sparse input's own stored pattern as the mask.
    #[arg(long)]
    mask_from_pattern: bool,
    /// Dims, comma separated (negative wrap); absent = all dims.
    #[arg(long, allow_hyphen_values = true)]
    dim: Option<String>,
    /// Keep reduced dims with size 1.
    #[arg(long)]
    keepdim: bool,
    /// Layout to run on: dense, csr or coo.
    #[arg(long)]
    layout: Option<String>,
    /// Compute on the input cast to this dtype first (torch's `dtype=`: an f16 sum
    /// accumulated and returned in f32); for `cast`, the target dtype.
    #[arg(long)]
    dtype: Option<String>,
    /// The op's options (`--correction`, `--ord`, ...), one flag per option of the registry.
    #[command(flatten)]
    options: OpOptions,
    /// The upstream gradient of `masked vjp OP INPUT --grad G` (.npy for dense input,
    /// .npz COO for sparse input).
    #[arg(long)]
    grad: Option<PathBuf>,
    /// Output file (.npy for dense input).
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
    /// Output mask file (.npy bool).
    #[arg(long)]
    out_mask: Option<PathBuf>,
    /// Memory ceiling of this command (bytes; K, M, G suffixes); default
    /// MASKED_MAX_MEMORY, else 80% of physical memory.
    #[arg(long)]
    max_memory: Option<String>,
}

/// The help text after the flags: every op of the registry with its options.
fn ops_help() -> String {
    let mut s = String::from(
        "Run `masked sweep --help` for the layout sweep (which layout for my data), `masked bench --help` for the benchmark, `masked attention --help` for sparse attention (and `attention-vjp`, its gradients).\n\nOPs:\n",
    );
    for op in Op::ALL {
        let opts: Vec<String> = op.options().iter().map(|o| format!("--{o}")).collect();
        s.push_str(&format!("  {:<12} {}", op.name(), op.summary()));
        if !opts.is_empty() {
            s.push_str(&format!(" [{}]", opts.join(" ")));
        }
        s.push('\n');
    }
    s.push_str(&format!(
        "  {:<12} the values converted to --dtype (mask and sparse positions kept)\n",
        "cast"
    ));
    s.push_str(&format!(
        "  {:<12} COND A B: A where COND is true, B where false (values and validity)\n",
        "where"
    ));
    s.push_str(&format!(
        "  {:<12} a plain array with the invalid positions set to --value\n",
        "fill"
    ));
    s
}

/// The op options given on the command line, in registry order: one `--NAME VALUE` flag
/// per option of the registry ([`OPTIONS`]), so a new option needs no CLI code.
#[derive(Debug, Clone, Default)]
pub(crate) struct OpOptions(pub(crate) Vec<(&'static str, String)>);

impl clap::FromArgMatches for OpOptions {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(OpOptions(
            OPTIONS
                .iter()
                .filter_map(|o| m.get_one::<String>(o.name).map(|v| (o.name, v.clone())))
                .collect(),
        ))
    }
    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Args for OpOptions {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        OPTIONS.iter().fold(cmd, |c, o| {
            c.arg(
                clap::Arg::new(o.name)
                    .long(o.name)
                    .help(o.help)
                    .allow_hyphen_values(true)
                    .value_name("VALUE"),
            )
        })
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

fn main() -> ExitCode {
    // a native build (MASKED_CPU=native) on a CPU without its tier: say so before any
    // kernel runs
    if let Err(e) = masked::cpu::check() {
        eprintln!("masked: error: {e}");
        return ExitCode::from(2);
    }
    let argv: Vec<String> = std::env::args().collect();
    let result = if argv.get(1).map(String::as_str) == Some("bench") {
        let mut rest = vec!["masked bench".to_string()];
        rest.extend(argv[2..].iter().cloned());
        match bench::BenchArgs::try_parse_from(rest) {
            Ok(a) => bench::run(a),
            Err(e) => return clap_exit(e),
        }
    } else if argv.get(1).map(String::as_str) == Some("vjp") {
        let mut rest = vec!["masked vjp".to_string()];
        rest.extend(argv[2..].iter().cloned());
        match RunArgs::try_parse_from(rest) {
            Ok(a) => limits::init(a.max_memory.as_deref())
                .map_err(CliError::from)
                .and_then(|()| vjp::run(&a)),
            Err(e) => return clap_exit(e),
        }
    } else if let Some(cmd @ ("attention" | "attention-vjp")) = argv.get(1).map(String::as_str) {
        let mut rest = vec![format!("masked {cmd}")];
        rest.extend(argv[2..].iter().cloned());
        match attention::AttnArgs::try_parse_from(rest) {
            Ok(a) => attention::run(&a, cmd == "attention-vjp"),
            Err(e) => return clap_exit(e),
        }
    } else if argv.get(1).map(String::as_str) == Some("sweep") {
        let mut rest = vec!["masked sweep".to_string()];
        rest.extend(argv[2..].iter().cloned());
        match sweep::SweepArgs::try_parse_from(rest) {
            Ok(a) => sweep_run::run(a),
            Err(e) => return clap_exit(e),
        }
    } else {
        match RunArgs::try_parse_from(&argv) {
            Ok(a) => run(a),
            Err(e) => return clap_exit(e),
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("masked: error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Prints clap's help/version (exit 0) or its error (exit 2).
fn clap_exit(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            print!("{e}");
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprint!("{e}");
            ExitCode::from(2)
        }
        _ => {
            // clap spreads one message over several lines (names of missing arguments
            // below the sentence): join them so the first line names the problem
            let msg = e.to_string();
            let first: Vec<&str> = msg
                .lines()
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more"))
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            eprintln!("masked: {}", first.join(" "));
            eprintln!("run `masked --help` for usage");
            ExitCode::from(2)
        }
    }
}

/// Parses `--dim 0,-1`.
pub(crate) fn parse_dims(s: Option<&str>) -> Result<Dims, CliError> {
    let Some(s) = s else { return Ok(Dims::All) };
    let v: Result<Vec<isize>, _> = s.split(',').map(|p| p.trim().parse::<isize>()).collect();
    match v {
        Ok(v) if !v.is_empty() => Ok(Dims::Set(v)),
        _ => Err(CliError::Usage(format!(
            "invalid --dim value '{s}': expected integers separated by commas"
        ))),
    }
}

/// What a run computes: a registry op, or a cast.
enum Job {
    /// A registry op (with its dtype, if any).
    Op(OpRequest),
    /// The values cast to a dtype.
    Cast(DType),
}

impl Job {
    /// Runs the job on the input, through the engine's dtype-erased boundary.
    fn run(&self, a: &Array) -> Result<Output, masked::MaskedError> {
        let v = a.view()?;
        match self {
            Job::Op(req) => v.apply(req),
            Job::Cast(d) => v.cast(*d),
        }
    }
}

fn parse_dtype(s: &str) -> Result<DType, CliError> {
    s.parse().map_err(|_| {
        CliError::Usage(format!(
            "invalid --dtype value '{s}': expected one of f32, f64, f16, bf16, i32, i64"
        ))
    })
}

fn run(a: RunArgs) -> Result<(), CliError> {
    limits::init(a.max_memory.as_deref())?;
    match a.op.as_str() {
        "where" => return algebra::run_where(&a),
        "fill" => return algebra::run_fill(&a),
        _ => {}
    }
    if a.grad.is_some() {
        return Err(CliError::Usage(format!(
            "--grad is for `masked vjp {} ...`",
            a.op
        )));
    }
    if a.c.is_some() || a.value.is_some() {
        return Err(CliError::Usage(format!(
            "{}: a third file and --value are for where and fill",
            a.op
        )));
    }
    let dtype = a.dtype.as_deref().map(parse_dtype).transpose()?;
    if a.op == "cast" {
        let Some(d) = dtype else {
            return Err(CliError::Usage("cast needs --dtype".into()));
        };
        if let Some((name, _)) = a.options.0.first() {
            return Err(CliError::Usage(format!(
                "option --{name} has no meaning for cast"
            )));
        }
        if a.dim.is_some() || a.keepdim {
            return Err(CliError::Usage(
                "cast takes no --dim or --keepdim: it converts every value".into(),
            ));
        }
        return run_job(&a, &Job::Cast(d));
    }
    let spec: Op = a.op.parse()?;
    let two = a.b.is_some() || a.scalar.is_some();
    if spec.kind() == Kind::Binary || (two && spec.binary().is_some()) {
        if let Some((name, _)) = a.options.0.first() {
            return Err(CliError::Usage(format!(
                "option --{name} has no meaning for the binary op {spec}"
            )));
        }
        let op = spec.binary().expect("a binary op");
        return binary::run(&a, op);
    }
    if two || a.mask_b.is_some() || a.masks.is_some() || a.scalar_first {
        return Err(CliError::Usage(format!(
            "{spec} takes one operand: B, --scalar, --scalar-first, --mask-b and --masks are for binary ops"
        )));
    }
    let req = build_request(&a, spec, dtype)?;
    run_job(&a, &Job::Op(req))
}

/// The request of a one-operand op from the command line: its options (each one the op
/// takes), dims and keepdim checked against its kind.
pub(crate) fn build_request(
    a: &RunArgs, spec: Op, dtype: Option<DType>,
) -> Result<OpRequest, CliError> {
    // options that mean nothing for this op are errors
    for (name, _) in &a.options.0 {
        if !spec.options().contains(name) {
            return Err(CliError::Usage(format!(
                "option --{name} has no meaning for {spec}"
            )));
        }
    }
    if spec.kind() == Kind::Unary && (a.dim.is_some() || a.keepdim) {
        return Err(CliError::Usage(format!(
            "{spec} is elementwise: it takes no --dim or --keepdim"
        )));
    }
    if a.keepdim && spec.kind() == Kind::Normalize {
        return Err(CliError::Usage(format!(
            "option --keepdim has no meaning for {spec}"
        )));
    }
    let dims = parse_dims(a.dim.as_deref())?;
    match (spec.kind(), dims.given_len()) {
        (Kind::Normalize, Some(1))
        | (Kind::Reduce | Kind::Unary | Kind::Binary, _)
        | (Kind::ReduceOne, None | Some(1)) => {}
        (Kind::Normalize, n) => {
            return Err(CliError::Usage(format!(
                "{} needs exactly one --dim (got {})",
                spec.name(),
                n.unwrap_or(0)
            )))
        }
        (Kind::ReduceOne, Some(n)) => {
            return Err(CliError::Usage(format!(
                "{} takes at most one --dim (got {n})",
                spec.name()
            )))
        }
    }
    let mut req = OpRequest::from_op(spec).dims(dims).keepdim(a.keepdim);
    if let Some(d) = dtype {
        req = req.dtype(d);
    }
    for (name, text) in &a.options.0 {
        req.set_option(name, text).map_err(|e| match e {
            masked::MaskedError::InvalidArgument { reason, .. } => {
                CliError::Usage(format!("invalid --{name} value '{text}': {reason}"))
            }
            e => e.into(),
        })?;
    }
    Ok(req)
}

/// Runs a job on the input file's layout.
fn run_job(a: &RunArgs, job: &Job) -> Result<(), CliError> {
    let ext = extension(&a.input);
    let layout = a.layout.clone().unwrap_or_else(|| match ext.as_str() {
        "mtx" => "csr".into(),
        "npz" => "coo".into(),
        _ => "dense".into(),
    });
    if !["dense", "csr", "coo"].contains(&layout.as_str()) {
        return Err(CliError::Usage(format!(
            "invalid --layout '{layout}': expected dense, csr or coo"
        )));
    }
    match ext.as_str() {
        "npy" => {
            if layout != "dense" {
                return Err(CliError::Usage(format!(
                    "{}: a .npy file is dense and cannot run on --layout {layout}",
                    a.input.display()
                )));
            }
            if a.mask_from_pattern {
                return Err(CliError::Usage(
                    "--mask-from-pattern needs a sparse (.mtx or .npz) input".into(),
                ));
            }
            run_dense_file(a, job)
        }
        "mtx" | "npz" => match layout.as_str() {
            "csr" | "coo" => run_sparse_file(a, job, &layout),
            _ => Err(CliError::Usage(format!(
                "{}: a sparse file cannot run on --layout dense (sparse in, sparse out)",
                a.input.display()
            ))),
        },
        _ => Err(CliError::file(
            &a.input,
            "unknown input extension: expected .npy, .mtx or .npz".into(),
        )),
    }
}

fn run_dense_file(a: &RunArgs, job: &Job) -> Result<(), CliError> {
    dense_output(a)?;
    if let Some(m) = &a.out_mask
        && extension(m) != "npy"
    {
        return Err(CliError::file(m, "output mask must be a .npy file".into()));
    }
    let input = binary::read_dense(&a.input, a.mask.as_ref())?;
    let x = Array::dense(&input.shape, input.values, input.mask)?;
    let Output::Dense(out) = job.run(&x)? else {
        unreachable!("dense in, dense out")
    };
    write_dense(a, out)
}

/// Refuses an output path that is not a `.npy` file, for a dense result.
pub(crate) fn dense_output(a: &RunArgs) -> Result<(), CliError> {
    if extension(&a.output) != "npy" {
        return Err(CliError::file(
            &a.output,
            "dense output must be a .npy file".into(),
        ));
    }
    Ok(())
}

/// The sparse layout a command runs on: `--layout` where given, else the input file's own
/// (CSR for a Matrix Market file, COO for a `.npz`).
pub(crate) fn sparse_layout(given: Option<&str>, input: &std::path::Path) -> String {
    let own = || {
        if extension(input) == "mtx" {
            "csr"
        } else {
            "coo"
        }
    };
    given.unwrap_or_else(own).into()
}

/// Refuses a sparse result's output path that is neither `.npz` nor `.mtx`, saying `what`.
pub(crate) fn sparse_output_path(out: &std::path::Path, what: &str) -> Result<(), CliError> {
    let ext = extension(out);
    if ext != "npz" && ext != "mtx" {
        return Err(CliError::file(out, what.into()));
    }
    Ok(())
}

/// Writes a dense result: its values (numbers or bools) to `-o`, its mask to
/// `--out-mask` where asked. Each file is written to a temporary first, then renamed: a
/// failure leaves an existing file as it was.
pub(crate) fn write_dense<V: Into<Values>>(a: &RunArgs, out: Outcome<V>) -> Result<(), CliError> {
    let mask = out.mask.to_vec();
    npy::write_atomic(&a.output, |buf| match out.values.into() {
        Values::Num(v) => npy::encode_dyn(&out.shape, v, buf),
        Values::Bool(b) => npy::encode(&out.shape, b, buf),
    })?;
    if let Some(m) = &a.out_mask {
        npy::write_atomic(m, |buf| npy::encode(&out.shape, mask, buf))?;
    }
    Ok(())
}

/// A stored 0 / false of a sparse mask file is not valid.
pub(crate) fn nonzero(v: &DynVec) -> Vec<bool> {
    with_dyn_vec!(v, v => v.iter().map(|x| x.to_f64() != 0.0).collect())
}

fn run_sparse_file(a: &RunArgs, job: &Job, layout: &str) -> Result<(), CliError> {
    let elementwise = match job {
        Job::Op(req) => req.op.kind() == Kind::Unary,
        Job::Cast(_) => true,
    };
    if elementwise && a.mask.is_none() && !a.mask_from_pattern {
        return Err(CliError::Usage(format!(
            "{}: an elementwise op on a sparse file needs --mask or --mask-from-pattern \
             (which positions are valid must be explicit)",
            a.input.display()
        )));
    }
    if a.out_mask.is_some() {
        return Err(CliError::Usage(
            "--out-mask is for dense input: the stored positions of a sparse output are its mask"
                .into(),
        ));
    }
    if a.mask.is_some() && a.mask_from_pattern {
        return Err(CliError::Usage(
            "--mask and --mask-from-pattern exclude each other".into(),
        ));
    }
    sparse_output_path(&a.output, "sparse output must be a .npz or .mtx file")?;
    let input = sparse::read_sparse(&a.input)?;
    check_sparse_output(a, job, &input.shape, input.nnz())?;
    let mask = read_sparse_mask(a, &input.shape)?;
    let x = if layout == "coo" {
        let mask = match mask {
            None if a.mask_from_pattern => CooMask::Stored,
            None => CooMask::All,
            Some((p, m)) => CooMask::Pattern(binary::coo_mask(p, &m)?),
        };
        Array::coo(&input.shape, &input.coords, input.values, mask)
            .map_err(|e| CliError::file(&a.input, e.to_string()))?
    } else {
        let (indptr, indices, values) = input.to_csr(&a.input)?;
        let shape = (input.shape[0], input.shape[1]);
        let mask = match mask {
            Some((p, m)) => CsrMask::Pattern(binary::csr_mask(p, &m)?),
            None if a.mask_from_pattern => CsrMask::Stored,
            None => CsrMask::All,
        };
        Array::csr(shape, indptr, indices, values, mask)?
    };
    let Output::Sparse(out) = job.run(&x)? else {
        unreachable!("sparse in, sparse out")
    };
    write_sparse(&a.output, &out)
}

/// Writes a sparse result (`.npz` or `.mtx`, by extension).
pub(crate) fn write_sparse(path: &std::path::Path, out: &SparseOutcome) -> Result<(), CliError> {
    Ok(sparse::write_entries(
        path,
        &out.shape,
        &out.indices,
        sparse::Data::Num(&out.values),
    )?)
}

/// The `--mask` file of a sparse input of `shape`, read and checked against it.
pub(crate) fn read_sparse_mask<'a>(
    a: &'a RunArgs, shape: &[usize],
) -> Result<Option<(&'a PathBuf, sparse::SparseFile)>, CliError> {
    let Some(p) = &a.mask else { return Ok(None) };
    let m = sparse::read_sparse(p)?;
    if m.shape != shape {
        return Err(CliError::file(
            p,
            format!(
                "mask shape {:?} differs from input shape {:?}",
                m.shape, shape
            ),
        ));
    }
    Ok(Some((p, m)))
}

/// Refuses up front a sparse run whose output could pass the memory ceiling: at most
/// one entry per stored input entry, except a reduction of an input without a mask,
/// whose every output position is valid (a sum over dim 0 of a 4e9-column matrix holds
/// 4e9 values, zeros included).
fn check_sparse_output(
    a: &RunArgs, job: &Job, shape: &[usize], nnz: usize,
) -> Result<(), CliError> {
    let Job::Op(req) = job else {
        return Ok(());
    };
    let mask_free = a.mask.is_none() && !a.mask_from_pattern;
    let outputs = match req.op.kind() {
        Kind::Reduce | Kind::ReduceOne if mask_free => {
            let reduced = req.dims.canonical(shape.len())?;
            (0..shape.len())
                .filter(|d| !reduced.contains(d))
                .fold(1u128, |n, d| n.saturating_mul(shape[d] as u128))
        }
        _ => nnz as u128,
    };
    // an output entry: its value and index, and the engine's per-lane state
    Ok(limits::check(
        format!(
            "{} of {}: an output of {outputs} entries",
            req.op.name(),
            a.input.display()
        ),
        outputs.saturating_mul(32),
    )?)
}
