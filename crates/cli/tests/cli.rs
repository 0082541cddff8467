//! The `masked` binary on real files and on bad ones: exit status, message, outputs.

use ndarray::{array, ArrayD};
use ndarray_npy::{ReadNpyExt, WriteNpyExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_masked"))
}

fn run(dir: &Path, args: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run masked")
}

/// A command line's arguments, split at white space (for arguments without spaces of
/// their own).
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// `run` with the arguments written as one command line.
fn run_line(dir: &Path, line: &str) -> Output {
    run(dir, &words(line))
}

/// [`run_line`], asserting success.
fn run_ok(dir: &Path, line: &str) -> Output {
    let o = run_line(dir, line);
    assert!(o.status.success(), "{line}: {}", stderr(&o));
    o
}

fn save<T: ndarray_npy::WritableElement, D: ndarray::Dimension>(
    dir: &Path, name: &str, a: &ndarray::Array<T, D>,
) -> PathBuf {
    let p = dir.join(name);
    a.write_npy(std::fs::File::create(&p).unwrap()).unwrap();
    p
}

fn load<T: ndarray_npy::ReadableElement>(p: &Path) -> ArrayD<T> {
    ArrayD::<T>::read_npy(std::fs::File::open(p).unwrap()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `masked bench ARGS --repeat 1 --json`, asserts it succeeded, and returns its
/// rows (one JSON object a line).
fn bench_rows(args: &[&str]) -> Vec<serde_json::Value> {
    let o = bin()
        .arg("bench")
        .args(args)
        .args(["--repeat", "1", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "bench {args:?}: {}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// [`bench_rows`] of `ops` on 32 x 64 operands of every layout under the mask rule
/// `masks`.
fn bench_every_layout(ops: &str, masks: &str) -> Vec<serde_json::Value> {
    let layouts = ["--layout", "dense,csr,coo", "--shape", "32,64"];
    bench_rows(&[&["--op", ops, "--masks", masks][..], &layouts[..]].concat())
}

/// Runs `masked bench ARGS`, asserts a usage error (exit 2) and returns its message.
fn bench_refused(args: &[&str]) -> String {
    let o = bin().arg("bench").args(args).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "bench {args:?}: {}", stderr(&o));
    stderr(&o)
}

/// Asserts exit status 2, a message naming `needle` on the first line, and no output.
fn assert_bad(dir: &Path, args: &[&str], needle: &str) {
    let o = run(dir, args);
    assert_eq!(o.status.code(), Some(2), "args {args:?}: {}", stderr(&o));
    let first = stderr(&o).lines().next().unwrap_or("").to_string();
    assert!(
        first.contains(needle),
        "args {args:?}: first line {first:?} lacks {needle:?}"
    );
    assert!(!stderr(&o).contains("panicked"), "panic for {args:?}");
    assert!(
        !dir.join("out.npy").exists(),
        "output left behind for {args:?}"
    );
}

/// [`assert_bad`] for each `(args, needle)` of a table.
fn assert_all_bad(dir: &Path, cases: &[(&str, &str)]) {
    for (line, needle) in cases {
        assert_bad(dir, &words(line), needle);
    }
}

fn setup() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    save(
        d.path(),
        "x.npy",
        &array![[-3.0f32, -2.0, -1.0], [0.0, 1.0, 2.0]],
    );
    save(
        d.path(),
        "m.npy",
        &array![[true, false, true], [false, false, false]],
    );
    d
}

#[test]
fn sum_with_mask_writes_values_and_output_mask() {
    let d = setup();
    run_ok(
        d.path(),
        "sum x.npy --mask m.npy --dim 1 -o s.npy --out-mask sm.npy",
    );
    let v = load::<f32>(&d.path().join("s.npy"));
    assert_eq!(v.shape(), &[2]);
    assert_eq!(v.as_slice().unwrap(), &[-4.0, 0.0]);
    let m = load::<bool>(&d.path().join("sm.npy"));
    assert_eq!(m.as_slice().unwrap(), &[true, false]);
}

#[test]
fn output_dtypes_follow_the_contract() {
    let d = setup();
    save(d.path(), "i.npy", &array![[1i32, 2], [3, 4]]);
    let cases: [(&str, &str); 4] = [
        ("prod", "i64"),
        ("mean", "f64"),
        ("amax", "i32"),
        ("count", "i64"),
    ];
    for (op, want) in cases {
        let o = run(d.path(), &[op, "i.npy", "--dim=-1", "-o", "r.npy"]);
        assert!(o.status.success(), "{op}: {}", stderr(&o));
        let p = d.path().join("r.npy");
        match want {
            "i64" => {
                let v = load::<i64>(&p);
                let w: &[i64] = if op == "prod" { &[2, 12] } else { &[2, 2] };
                assert_eq!(v.as_slice().unwrap(), w, "{op}");
            }
            "f64" => assert_eq!(load::<f64>(&p).as_slice().unwrap(), &[1.5, 3.5]),
            _ => assert_eq!(load::<i32>(&p).as_slice().unwrap(), &[2, 4]),
        }
    }
    // argmax of f32 gives integer indices; keepdim keeps the reduced dim
    run_ok(
        d.path(),
        "argmax x.npy --mask m.npy --dim -1 --keepdim -o a.npy",
    );
    let a = load::<i64>(&d.path().join("a.npy"));
    assert_eq!(a.shape(), &[2, 1]);
    assert_eq!(a.as_slice().unwrap(), &[2, 0]);
}

/// A hand-made `.npy` v1.0 file: big-endian f64 in Fortran order.
fn write_big_endian_fortran(p: &Path) {
    let mut header = "{'descr': '>f8', 'fortran_order': True, 'shape': (2, 3), }".to_string();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    // logical [[0, 1, 2], [3, 4, 5]] stored column by column
    for v in [0.0f64, 3.0, 1.0, 4.0, 2.0, 5.0] {
        bytes.extend_from_slice(&v.to_be_bytes());
    }
    std::fs::write(p, bytes).unwrap();
}

#[test]
fn reads_fortran_order_and_big_endian() {
    let d = setup();
    write_big_endian_fortran(&d.path().join("f.npy"));
    run_ok(d.path(), "sum f.npy --dim 1 -o r.npy");
    assert_eq!(
        load::<f64>(&d.path().join("r.npy")).as_slice().unwrap(),
        &[3.0, 12.0]
    );
}

#[test]
fn broadcast_and_integer_masks() {
    let d = setup();
    save(d.path(), "row.npy", &array![1i64, 0, 1]);
    run_ok(d.path(), "amin x.npy --mask row.npy --dim 0,1 -o r.npy");
    assert_eq!(
        load::<f32>(&d.path().join("r.npy"))
            .into_raw_vec_and_offset()
            .0,
        vec![-3.0]
    );
}

#[test]
fn bad_inputs_exit_2_with_a_message_and_no_output() {
    let d = setup();
    let x = std::fs::read(d.path().join("x.npy")).unwrap();
    std::fs::write(d.path().join("trunc.npy"), &x[..x.len() - 5]).unwrap();
    std::fs::write(d.path().join("garbage.npy"), b"not an npy file at all").unwrap();
    save(
        d.path(),
        "m3.npy",
        &ndarray::Array3::<bool>::from_elem((1, 2, 3), true),
    );
    save(
        d.path(),
        "m4.npy",
        &ndarray::Array2::<bool>::from_elem((2, 4), true),
    );
    save(d.path(), "u16.npy", &array![1u16, 2]);
    let dir = d.path();
    assert_all_bad(
        dir,
        &[
            ("sum trunc.npy -o out.npy", "trunc.npy"),
            ("sum garbage.npy -o out.npy", "garbage.npy"),
            ("sum missing.npy -o out.npy", "missing.npy"),
            ("sum u16.npy -o out.npy", "unsupported dtype"),
            ("sum x.npy --dim 2 -o out.npy", "dim 2 is out of range"),
            ("sum x.npy --dim 1,-1 -o out.npy", "appears more than once"),
            ("sum x.npy --dim a -o out.npy", "invalid --dim"),
            ("sum x.npy --mask m4.npy -o out.npy", "does not broadcast"),
            ("sum x.npy --mask m3.npy -o out.npy", "mask has 3 dims"),
            ("frobnicate x.npy -o out.npy", "unknown op 'frobnicate'"),
            ("sum x.npy --q 0.5 -o out.npy", "--q has no meaning for sum"),
            ("argmax x.npy --dim 0,1 -o out.npy", "at most one --dim"),
            (
                "sum x.npy --layout csr -o out.npy",
                "cannot run on --layout csr",
            ),
            ("sum x.npy", "--output"),
            ("sum x.npy -o out.txt", "out.txt"),
        ],
    );
    let none = run(dir, &[]);
    assert_eq!(none.status.code(), Some(2));
}

#[test]
fn help_exits_zero() {
    let o = bin().arg("--help").output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("Usage"));
    let o = bin().args(["bench", "--help"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn bench_json_prints_one_object_per_op() {
    let rows = bench_rows(&["--op", "sum,amax", "--shape", "64,128"]);
    assert_eq!(rows.len(), 2, "{rows:?}");
    for (v, op) in rows.iter().zip(["sum", "amax"]) {
        assert_eq!(v["op"], op);
        assert_eq!(v["layout"], "dense");
        assert_eq!(v["shape"], serde_json::json!([64, 128]));
        assert_eq!(v["nnz"], 64 * 128);
        assert_eq!(v["dim"], -1);
        assert!(v["threads"].as_u64().unwrap() >= 1);
        assert!(v["seconds"].as_f64().unwrap() > 0.0);
        assert!(v["gbps"].as_f64().unwrap() > 0.0);
    }
    bench_refused(&["--op", "nope"]);
}

/// `--values` maps the draws into an op's domain; an unknown distribution is a usage
/// error naming it.
#[test]
fn bench_values_take_each_distribution_and_refuse_others() {
    for v in ["normal", "positive", "unit", "above-one"] {
        let rows = bench_rows(&["--op", "acosh,atanh", "--shape", "8,16", "--values", v]);
        assert_eq!(rows.len(), 2, "{v}");
    }
    let bad = bench_refused(&["--op", "log", "--shape", "8,16", "--values", "lognormal"]);
    assert!(
        bad.contains("unknown value distribution 'lognormal'"),
        "{bad}"
    );
}

#[test]
fn bench_scaling_times_each_op_at_1_2_4_threads_up_to_the_count() {
    let lines = bench_rows(&words(
        "--op sum,softmax --layout dense,coo --shape 64,128 --density 0.1 --scaling --threads 5",
    ));
    // per layout and op: 1, 2, 4 threads, then the count (5)
    assert_eq!(lines.len(), 2 * 2 * 4, "{lines:?}");
    for (k, v) in lines.iter().enumerate() {
        let (layout, op) = (["dense", "coo"][k / 8], ["sum", "softmax"][k / 4 % 2]);
        assert_eq!(
            (v["layout"].as_str(), v["op"].as_str()),
            (Some(layout), Some(op))
        );
        assert_eq!(v["threads"].as_u64(), Some([1, 2, 4, 5][k % 4]), "{v}");
        let speedup = v["speedup"].as_f64().unwrap();
        if k % 4 == 0 {
            assert_eq!(speedup, 1.0);
        }
        // the speedup is the first line's time over this one's
        let first = lines[k - k % 4]["seconds"].as_f64().unwrap();
        let here = v["seconds"].as_f64().unwrap();
        assert!((speedup - first / here).abs() < 1e-9 * speedup, "{v}");
    }
    let text = bin()
        .args([
            "bench",
            "--shape",
            "64,128",
            "--repeat",
            "1",
            "--scaling",
            "--threads",
            "2",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.lines().next().unwrap().ends_with("speedup"), "{text}");
    assert!(text.lines().nth(1).unwrap().ends_with("1.00x"), "{text}");
    let zero = bench_refused(&["--threads", "0"]);
    assert!(zero.contains("--threads 0"), "{zero}");
    let attn = bench_refused(&["--op", "attention", "--shape", "64,8", "--scaling"]);
    assert!(attn.contains("--scaling"), "{attn}");
}

#[test]
fn statistics_and_normalizations_with_options() {
    let d = setup();
    let dir = d.path();
    // x = [[-3, -2, -1], [0, 1, 2]] (f32), m = [[T, F, T], [F, F, F]]
    let f32s = |name: &str| load::<f32>(&dir.join(name)).into_raw_vec_and_offset().0;
    let ok = |args: &[&str]| {
        let o = run(dir, args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    };
    ok(&words("var x.npy --dim 1 --correction 0 -o v.npy"));
    assert_eq!(f32s("v.npy"), vec![2.0 / 3.0, 2.0 / 3.0]);
    ok(&words(
        "std x.npy --mask m.npy --dim 1 -o s.npy --out-mask sm.npy",
    ));
    let s = f32s("s.npy");
    assert!((s[0] - 2f32.sqrt()).abs() < 1e-6 && s[1].is_nan());
    ok(&["norm", "x.npy", "--ord", "-1", "--dim", "1", "-o", "n.npy"]);
    let n = f32s("n.npy");
    assert!((n[0] - 1.0 / (1.0 / 3.0 + 0.5 + 1.0)).abs() < 1e-6 && n[1] == 0.0);
    ok(&["norm", "x.npy", "--ord=-inf", "--dim", "1", "-o", "n.npy"]);
    assert_eq!(f32s("n.npy"), vec![1.0, 0.0]);
    ok(&["norm", "x.npy", "--ord", "inf", "-o", "n.npy"]);
    assert_eq!(f32s("n.npy"), vec![3.0]);
    ok(&words(
        "quantile x.npy --q 0.25 --interpolation nearest -o q.npy",
    ));
    // sorted [-3 -2 -1 0 1 2], position 1.25 -> nearest index 1 -> -2
    assert_eq!(f32s("q.npy"), vec![-2.0]);
    ok(&["median", "x.npy", "--mode", "lower", "-o", "q.npy"]);
    assert_eq!(f32s("q.npy"), vec![-1.0]);
    ok(&["median", "x.npy", "-o", "q.npy"]);
    assert_eq!(f32s("q.npy"), vec![-0.5]);
    ok(&words(
        "log_softmax x.npy --mask m.npy --dim 1 -o l.npy --out-mask lm.npy",
    ));
    let l = f32s("l.npy");
    assert_eq!(&l[3..], &[f32::NEG_INFINITY; 3]);
    assert_eq!(l[1], f32::NEG_INFINITY);
    assert!((l[0] - (-2.0 - (1.0 + (-2f32).exp()).ln())).abs() < 1e-6);
    assert_eq!(
        load::<bool>(&dir.join("lm.npy"))
            .into_raw_vec_and_offset()
            .0,
        vec![true, false, true, false, false, false]
    );
    save(dir, "i.npy", &array![[1i32, 2], [3, 4]]);
    ok(&["cumsum", "i.npy", "--dim", "0", "-o", "c.npy"]);
    assert_eq!(
        load::<i32>(&dir.join("c.npy")).into_raw_vec_and_offset().0,
        vec![1, 2, 4, 6]
    );
    save(dir, "nan.npy", &array![[1.0f64, f64::NAN, 3.0]]);
    ok(&["nanmedian", "nan.npy", "--dim", "1", "-o", "nm.npy"]);
    assert_eq!(
        load::<f64>(&dir.join("nm.npy")).into_raw_vec_and_offset().0,
        vec![2.0]
    );
    ok(&["median", "nan.npy", "--dim", "1", "-o", "nm.npy"]);
    assert!(load::<f64>(&dir.join("nm.npy"))[[0]].is_nan());
}

#[test]
fn bad_option_values_exit_2() {
    let d = setup();
    let dir = d.path();
    assert_all_bad(
        dir,
        &[
            (
                "quantile x.npy --q 1.5 -o out.npy",
                "invalid value for q: 1.5",
            ),
            (
                "quantile x.npy --interpolation cubic -o out.npy",
                "interpolation",
            ),
            ("var x.npy --correction -1 -o out.npy", "correction"),
            ("normalize x.npy --dim 1 --eps -1 -o out.npy", "eps"),
            ("median x.npy --mode upper -o out.npy", "mode"),
            (
                "norm x.npy --ord abc -o out.npy",
                "invalid --ord value 'abc'",
            ),
            ("softmax x.npy -o out.npy", "exactly one --dim"),
            (
                "softmax x.npy --dim 1 --keepdim -o out.npy",
                "--keepdim has no meaning",
            ),
            (
                "var x.npy --ord 2 -o out.npy",
                "--ord has no meaning for var",
            ),
        ],
    );
}

#[test]
fn bench_runs_the_statistics() {
    let rows = bench_rows(&["--op", "var,softmax,median,nanmedian", "--shape", "32,64"]);
    assert_eq!(rows.len(), 4);
}

#[test]
fn bench_times_binary_vjps_on_every_layout() {
    for masks in ["strict", "and"] {
        let rows = bench_every_layout("vjp-mul,vjp-atan2", masks);
        assert_eq!(rows.len(), 6, "{masks}: {rows:?}");
        assert!(
            rows.iter()
                .all(|r| r["op"].as_str().unwrap().starts_with("vjp-")),
            "{rows:?}"
        );
    }
    // a comparison has no VJP
    bench_refused(&["--op", "vjp-lt"]);
    // into the caller's two buffers: dense only
    let into = ["--op", "vjp-mul", "--shape", "32,64", "--into", "--layout"];
    assert_eq!(bench_rows(&[&into[..], &["dense"]].concat()).len(), 1);
    for layout in ["csr", "coo"] {
        let bad = bench_refused(&[&into[..], &[layout]].concat());
        assert!(bad.contains("dense layout only"), "{layout}: {bad}");
    }
}

#[test]
fn bench_into_times_sparse_normalizations_and_refuses_sparse_reductions() {
    let args = |op, layout| {
        [
            "--op",
            op,
            "--layout",
            layout,
            "--shape",
            "64,48",
            "--density",
            "0.2",
            "--into",
        ]
    };
    assert_eq!(bench_rows(&args("softmax,cumsum,exp", "csr,coo")).len(), 6);
    for layout in ["csr", "coo"] {
        let bad = bench_refused(&args("sum", layout));
        assert!(bad.contains("reduction"), "{layout}: {bad}");
    }
}

#[test]
fn bench_times_fused_forms_on_every_layout() {
    for masks in ["strict", "and"] {
        let rows = bench_every_layout("sum-of-mul,logsumexp-of-add,softmax-of-div", masks);
        assert_eq!(rows.len(), 9, "{masks}: {rows:?}");
        for layout in ["dense", "csr", "coo"] {
            let n = rows.iter().filter(|r| r["layout"] == layout).count();
            assert_eq!(n, 3, "{rows:?}");
        }
        assert!(
            rows.iter().all(|r| r["seconds"].as_f64().unwrap() > 0.0),
            "{rows:?}"
        );
    }
    // a comparison's bool values are not reduced
    let bad = bench_refused(&["--op", "sum-of-lt", "--layout", "csr", "--shape", "8,8"]);
    assert!(bad.contains("bool values"), "{bad}");
    // integer operands: the fused forms are compiled for the float dtypes only
    let int = bench_refused(&["--op", "sum-of-mul", "--dtype", "i32", "--shape", "8,8"]);
    assert!(int.contains("float dtypes"), "{int}");
}

/// Reads a COO `.npz` result: coords (ndim x nnz), data, shape.
fn load_npz<T: ndarray_npy::ReadableElement + Clone>(
    p: &Path,
) -> (ndarray::Array2<i64>, Vec<T>, Vec<i64>) {
    let mut z = ndarray_npy::NpzReader::new(std::fs::File::open(p).unwrap()).unwrap();
    let coords: ndarray::Array2<i64> = z.by_name("coords").unwrap();
    let data: ndarray::Array1<T> = z.by_name("data").unwrap();
    let shape: ndarray::Array1<i64> = z.by_name("shape").unwrap();
    (coords, data.to_vec(), shape.to_vec())
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

/// [[-3, ., -1], [., ., .], [., 5, 0]] with an explicit stored 0 (0-based positions)
const A_MTX: &str = "%%MatrixMarket matrix coordinate real general\n% a comment\n3 3 4\n1 1 -3\n3 2 5\n1 3 -1\n3 3 0\n";

#[test]
fn csr_ops_on_matrix_market_files() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    write(p, "a.mtx", A_MTX);
    // mask from the stored pattern: row 1 has no valid element, so it is not stored
    run_ok(p, "amax a.mtx --dim 1 --mask-from-pattern -o out.npz");
    let (c, v, s) = load_npz::<f64>(&p.join("out.npz"));
    assert_eq!(c, ndarray::arr2(&[[0i64, 2]]));
    assert_eq!(v, vec![-1.0, 5.0]);
    assert_eq!(s, vec![3]);
    // no mask: every element valid, unstored zeros take part, every row stored
    run_ok(p, "amax a.mtx --dim 1 --keepdim -o out.npz");
    let (c, v, s) = load_npz::<f64>(&p.join("out.npz"));
    assert_eq!(c, ndarray::arr2(&[[0i64, 1, 2], [0, 0, 0]]));
    assert_eq!(v, vec![0.0, 0.0, 5.0]);
    assert_eq!(s, vec![3, 1]);
    // a separate mask whose explicit 0 is not valid: valid (0,1) unstored -> 0, (2,1)
    write(
        p,
        "m.mtx",
        "%%MatrixMarket matrix coordinate integer general\n3 3 3\n1 2 1\n3 2 7\n3 3 0\n",
    );
    run_ok(p, "sum a.mtx --mask m.mtx --dim 0 -o out.npz");
    let (c, v, s) = load_npz::<f64>(&p.join("out.npz"));
    assert_eq!(c, ndarray::arr2(&[[1i64]]));
    assert_eq!(v, vec![5.0]);
    assert_eq!(s, vec![3]);
    // all dims: a 0-d result stores position 0 with coords of shape (0, 1)
    run_ok(p, "count a.mtx --mask-from-pattern -o out.npz");
    let (c, v, s) = load_npz::<i64>(&p.join("out.npz"));
    assert_eq!(c.dim(), (0, 1));
    assert_eq!(v, vec![4]);
    assert!(s.is_empty());
    // a normalization as Matrix Market: the valid elements, 1-based
    run_ok(p, "softmax a.mtx --dim 1 --mask-from-pattern -o out.mtx");
    let text = std::fs::read_to_string(p.join("out.mtx")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "%%MatrixMarket matrix coordinate real general");
    assert_eq!(lines[1], "3 3 4");
    assert!(
        lines[2].starts_with("1 1 ") && lines[5].starts_with("3 3 "),
        "{text}"
    );
    // integer and symmetric pattern files
    write(
        p,
        "i.mtx",
        "%%MatrixMarket matrix coordinate integer symmetric\n2 2 2\n1 1 4\n2 1 -6\n",
    );
    run_ok(p, "sum i.mtx --dim 1 --mask-from-pattern -o out.npz");
    let (_, v, _) = load_npz::<i64>(&p.join("out.npz"));
    assert_eq!(v, vec![-2, -6]);
    write(
        p,
        "k.mtx",
        "%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 1\n2 1 3\n",
    );
    run_ok(p, "sum k.mtx --dim 1 --mask-from-pattern -o out.npz");
    let (_, v, _) = load_npz::<f64>(&p.join("out.npz"));
    assert_eq!(v, vec![-3.0, 3.0]);
    write(
        p,
        "pat.mtx",
        "%%MatrixMarket matrix coordinate pattern general\n2 3 2\n1 3\n2 1\n",
    );
    run_ok(p, "count pat.mtx --dim 1 -o out.npz");
    let (_, v, _) = load_npz::<i64>(&p.join("out.npz"));
    assert_eq!(v, vec![3, 3]);
}

#[test]
fn bad_matrix_market_files_name_the_line() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let cases: &[(&str, &str)] = &[
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n1 1 2\n",
            "duplicate entry at [0, 0] (line 3 and line 4)",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1\n",
            "line 3: row index 3 is out of range",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 1\n0 1 1\n",
            "line 3: row index 0: Matrix Market indices are 1-based",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n",
            "declares 2 entries but the file holds 1",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1\n2 2 2\n",
            "line 4: more entries than the 1",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 x\n",
            "line 3: cannot parse value 'x'",
        ),
        (
            "%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 1 1.5\n",
            "line 3: cannot parse value '1.5' as an integer",
        ),
        (
            "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n",
            "line 1: format 'array' is not supported",
        ),
        (
            "%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n",
            "field 'complex' is not supported",
        ),
        (
            "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n2 1 1\n1 2 1\n",
            "duplicate entry at [0, 1] (line 3 and line 4)",
        ),
        ("not a header\n", "line 1: expected '%%MatrixMarket"),
        (
            "%%MatrixMarket matrix coordinate real general\n2 x 1\n",
            "line 2: cannot parse column count 'x'",
        ),
    ];
    for (text, needle) in cases {
        write(p, "bad.mtx", text);
        let o = run_line(p, "sum bad.mtx --mask-from-pattern -o out.npz");
        assert_eq!(o.status.code(), Some(2), "{text:?}: {}", stderr(&o));
        let first = stderr(&o).lines().next().unwrap_or("").to_string();
        assert!(
            first.contains("bad.mtx") && first.contains(needle),
            "{text:?}: {first:?} lacks {needle:?}"
        );
        assert!(!p.join("out.npz").exists());
    }
    write(p, "a.mtx", A_MTX);
    write(
        p,
        "m2.mtx",
        "%%MatrixMarket matrix coordinate pattern general\n2 3 1\n1 1\n",
    );
    for (args, needle) in [
        (
            vec!["sum", "a.mtx", "--mask", "m2.mtx", "-o", "out.npz"],
            "mask shape [2, 3] differs",
        ),
        (
            vec![
                "sum",
                "a.mtx",
                "--mask-from-pattern",
                "--out-mask",
                "m.npy",
                "-o",
                "out.npz",
            ],
            "--out-mask is for dense input",
        ),
        (
            vec!["sum", "a.mtx", "--mask-from-pattern", "-o", "out.npy"],
            "sparse output must be a .npz or .mtx",
        ),
        (
            vec!["sum", "a.mtx", "--layout", "dense", "-o", "out.npz"],
            "cannot run on --layout dense",
        ),
        (
            vec!["sum", "a.mtx", "--dim", "2", "-o", "out.npz"],
            "dim 2 is out of range",
        ),
    ] {
        let o = run(p, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let first = stderr(&o).lines().next().unwrap_or("").to_string();
        assert!(
            first.contains(needle),
            "{args:?}: {first:?} lacks {needle:?}"
        );
    }
}

/// Writes a COO `.npz` input: coords (ndim x nnz, int64), data, shape.
fn save_coo<T: ndarray_npy::WritableElement>(
    p: &Path, coords: &[Vec<i64>], data: Vec<T>, shape: &[i64],
) {
    let mut z = ndarray_npy::NpzWriter::new(std::fs::File::create(p).unwrap());
    let nnz = data.len();
    let flat: Vec<i64> = coords.iter().flatten().copied().collect();
    z.add_array(
        "coords",
        &ndarray::Array2::from_shape_vec((coords.len(), nnz), flat).unwrap(),
    )
    .unwrap();
    z.add_array("data", &ndarray::Array1::from_vec(data))
        .unwrap();
    z.add_array("shape", &ndarray::Array1::from_vec(shape.to_vec()))
        .unwrap();
    z.finish().unwrap();
}

#[test]
fn coo_ops_on_npz_files() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    // a [2, 2, 3] tensor, entries given unsorted:
    // (1,1,2)=4 (0,0,0)=1 (0,1,2)=2 (1,1,0)=3
    let coords = vec![vec![1, 0, 0, 1], vec![1, 0, 1, 1], vec![2, 0, 2, 0]];
    save_coo(
        &p.join("a.npz"),
        &coords,
        vec![4.0f64, 1.0, 2.0, 3.0],
        &[2, 2, 3],
    );
    run_ok(p, "sum a.npz --dim 0,2 --mask-from-pattern -o out.npz");
    let (c, v, s) = load_npz::<f64>(&p.join("out.npz"));
    assert_eq!(c, ndarray::arr2(&[[0i64, 1]]));
    assert_eq!(v, vec![1.0, 9.0]);
    assert_eq!(s, vec![2]);
    // softmax along the last dim stores exactly the valid entries
    run_ok(p, "softmax a.npz --dim -1 --mask-from-pattern -o out.npz");
    let (c, v, s) = load_npz::<f64>(&p.join("out.npz"));
    assert_eq!(
        c,
        ndarray::arr2(&[[0i64, 0, 1, 1], [0, 1, 1, 1], [0, 2, 0, 2]])
    );
    assert_eq!(s, vec![2, 2, 3]);
    let e = 1.0 / (1.0 + 1f64.exp());
    assert_eq!(v[0], 1.0);
    assert!((v[2] - e).abs() < 1e-15 && (v[3] - (1.0 - e)).abs() < 1e-15);
    // no mask: unstored zeros are valid, so amax over dim 1 stores every lane
    run_ok(p, "amax a.npz --dim 1 -o out.npz");
    let (_, v, s) = load_npz::<f64>(&p.join("out.npz"));
    assert_eq!(s, vec![2, 3]);
    assert_eq!(v, vec![1.0, 0.0, 2.0, 3.0, 0.0, 4.0]);
    // a separate mask whose stored 0 is not valid: (0,0,0) valid, (1,0,1) valid unstored,
    // (1,1,2) stored false
    save_coo(
        &p.join("m.npz"),
        &[vec![0, 1, 1], vec![0, 0, 1], vec![0, 1, 2]],
        vec![true, true, false],
        &[2, 2, 3],
    );
    run_ok(p, "amin a.npz --mask m.npz --dim 1,2 --keepdim -o out.npz");
    let (c, v, s) = load_npz::<f64>(&p.join("out.npz"));
    assert_eq!(s, vec![2, 1, 1]);
    assert_eq!(c, ndarray::arr2(&[[0i64, 1], [0, 0], [0, 0]]));
    assert_eq!(v, vec![1.0, 0.0]);
    // a .mtx on --layout coo equals the CSR run; a 2-D .npz on --layout csr
    write(p, "a.mtx", A_MTX);
    for (input, layout) in [("a.mtx", "coo"), ("a.mtx", "csr")] {
        let o = run(
            p,
            &[
                "median",
                input,
                "--dim",
                "0",
                "--layout",
                layout,
                "--mask-from-pattern",
                "-o",
                "o.npz",
            ],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let (c, v, _) = load_npz::<f64>(&p.join("o.npz"));
        assert_eq!(c, ndarray::arr2(&[[0i64, 1, 2]]), "{layout}");
        assert_eq!(v, vec![-3.0, 5.0, -0.5], "{layout}");
    }
    save_coo(
        &p.join("b.npz"),
        &[vec![1, 0], vec![0, 2]],
        vec![2i64, 5],
        &[2, 3],
    );
    run_ok(p, "sum b.npz --dim 1 --keepdim --layout csr -o o.mtx");
    let text = std::fs::read_to_string(p.join("o.mtx")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[1..], ["2 1 2", "1 1 5", "2 1 2"], "{text}");
    // errors: a repeated coordinate names both entries; a 3-d file on --layout csr
    save_coo(
        &p.join("dup.npz"),
        &[vec![0, 1, 0], vec![2, 0, 2]],
        vec![1.0f32, 2.0, 3.0],
        &[2, 3],
    );
    assert_all_bad(
        p,
        &[
            ("sum dup.npz -o o.npz", "duplicate"),
            ("sum dup.npz -o o.npz", "entries 0 and 2"),
            (
                "sum a.npz --layout csr -o o.npz",
                "a 3-d array cannot run on --layout csr",
            ),
        ],
    );
    save_coo(&p.join("m2.npz"), &[vec![0], vec![0]], vec![true], &[2, 2]);
    assert_bad(
        p,
        &["sum", "a.npz", "--mask", "m2.npz", "-o", "o.npz"],
        "mask shape",
    );
}

/// An op added through the registry alone (its fold value and one table entry) runs in
/// the CLI with its mask, and the help lists every op of the registry.
#[test]
fn registry_op_ptp_runs_and_help_lists_every_op() {
    let d = setup();
    // x = [[-3, -2, -1], [0, 1, 2]], m = [[T, F, T], [F, F, F]]
    run_ok(
        d.path(),
        "ptp x.npy --mask m.npy --dim 1 -o out.npy --out-mask om.npy",
    );
    let v: ArrayD<f32> = load(&d.path().join("out.npy"));
    assert_eq!(v.as_slice().unwrap(), &[2.0, 0.0]); // -1 - (-3); fully masked row: 0
    let m: ArrayD<bool> = load(&d.path().join("om.npy"));
    assert_eq!(m.as_slice().unwrap(), &[true, false]);
    run_ok(d.path(), "ptp x.npy --dim 0 -o out.npy");
    let v: ArrayD<f32> = load(&d.path().join("out.npy"));
    assert_eq!(v.as_slice().unwrap(), &[3.0, 3.0, 3.0]);
    let help = String::from_utf8_lossy(&bin().arg("--help").output().unwrap().stdout).into_owned();
    for op in masked::Op::ALL {
        assert!(
            help.contains(&format!("\n  {:<12} ", op.name())),
            "help lacks {op}"
        );
    }
    for o in masked::registry::OPTIONS {
        assert!(
            help.contains(&format!("--{} <VALUE>", o.name)),
            "help lacks --{}",
            o.name
        );
    }
}

/// Writes `v` (row-major, `shape`) as a numpy float16 `.npy` file: the u16 bits under a
/// `<f2` descriptor, which is what `numpy.save` writes for float16.
fn save_f16(dir: &Path, name: &str, shape: &[usize], v: &[f32]) -> PathBuf {
    let bits: Vec<u16> = v
        .iter()
        .map(|&x| half::f16::from_f32(x).to_bits())
        .collect();
    let a = ArrayD::from_shape_vec(ndarray::IxDyn(shape), bits).unwrap();
    let mut bytes = Vec::new();
    a.write_npy(&mut bytes).unwrap();
    let at = bytes
        .windows(5)
        .position(|w| w == b"'<u2'")
        .expect("u16 descriptor")
        + 2;
    bytes[at] = b'f';
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn load_f16(p: &Path) -> (Vec<usize>, Vec<f32>) {
    let mut bytes = std::fs::read(p).unwrap();
    let at = bytes
        .windows(5)
        .position(|w| w == b"'<f2'")
        .expect("float16 output")
        + 2;
    bytes[at] = b'u';
    let a = ArrayD::<u16>::read_npy(&bytes[..]).unwrap();
    let shape = a.shape().to_vec();
    (
        shape,
        a.iter()
            .map(|&b| half::f16::from_bits(b).to_f32())
            .collect(),
    )
}

/// float16 `.npy` in, float16 out: computed in f32 and rounded once.
#[test]
fn float16_npy_round_trips_through_ops() {
    let d = tempfile::tempdir().unwrap();
    save_f16(d.path(), "h.npy", &[2, 3], &[1.0, 2.0, 4.0, 0.1, 0.2, 0.3]);
    save(
        d.path(),
        "m.npy",
        &array![[true, true, false], [true, true, true]],
    );
    run_ok(d.path(), "mean h.npy --mask m.npy --dim 1 -o out.npy");
    let (shape, v) = load_f16(&d.path().join("out.npy"));
    assert_eq!(shape, vec![2]);
    // row 0: (1 + 2) / 2; row 1: the f16 values of 0.1, 0.2, 0.3 averaged in f32, rounded
    let h = |x: f32| half::f16::from_f32(x).to_f32();
    assert_eq!(v[0], 1.5);
    assert_eq!(v[1], h((h(0.1) + h(0.2) + h(0.3)) / 3.0));
    run_ok(d.path(), "softmax h.npy --dim 1 -o out.npy");
    let (_, v) = load_f16(&d.path().join("out.npy"));
    let e = [1f32.exp(), 2f32.exp(), 4f32.exp()];
    let s: f32 = e.iter().sum();
    for k in 0..3 {
        assert!((v[k] - h(e[k] / s)).abs() <= 1e-3 * h(e[k] / s), "{v:?}");
    }
    // integer outputs stay integer
    run_ok(d.path(), "argmax h.npy --dim 1 -o out.npy");
    let v: ArrayD<i64> = load(&d.path().join("out.npy"));
    assert_eq!(v.as_slice().unwrap(), &[2, 2]);
}

/// `--dtype` is torch's `dtype=` (cast, then the op); `cast` converts and keeps the mask.
#[test]
fn dtype_flag_and_cast_command() {
    let d = tempfile::tempdir().unwrap();
    save_f16(d.path(), "h.npy", &[2, 3], &[1.0, 2.0, 4.0, 0.1, 0.2, 0.3]);
    save(
        d.path(),
        "m.npy",
        &array![[true, true, false], [true, true, true]],
    );
    run_ok(
        d.path(),
        "mean h.npy --mask m.npy --dim 1 --dtype f32 -o out.npy",
    );
    // f32 out, not rounded to f16
    let v: ArrayD<f32> = load(&d.path().join("out.npy"));
    let h = |x: f32| half::f16::from_f32(x).to_f32();
    assert_eq!(
        v.as_slice().unwrap(),
        &[1.5, (h(0.1) + h(0.2) + h(0.3)) / 3.0]
    );

    // cast: f32 -> i32 truncates, masked-out NaN is no error, the mask is kept
    save(
        d.path(),
        "x.npy",
        &array![[1.9f32, -1.9, f32::NAN], [2.5, -0.5, 7.0]],
    );
    save(
        d.path(),
        "xm.npy",
        &array![[true, true, false], [true, true, true]],
    );
    run_ok(
        d.path(),
        "cast x.npy --mask xm.npy --dtype i32 -o out.npy --out-mask om.npy",
    );
    let v: ArrayD<i32> = load(&d.path().join("out.npy"));
    assert_eq!(v.as_slice().unwrap(), &[1, -1, 0, 2, 0, 7]);
    let m: ArrayD<bool> = load(&d.path().join("om.npy"));
    assert_eq!(
        m.as_slice().unwrap(),
        &[true, true, false, true, true, true]
    );
    std::fs::remove_file(d.path().join("out.npy")).unwrap();
    // a valid NaN cannot be an i32
    assert_all_bad(
        d.path(),
        &[
            (
                "cast x.npy --dtype i32 -o out.npy",
                "cannot cast the valid value NaN from f32 to i32",
            ),
            ("cast x.npy -o out.npy", "cast needs --dtype"),
            (
                "cast x.npy --dtype f8 -o out.npy",
                "invalid --dtype value 'f8'",
            ),
            (
                "cast x.npy --dtype f64 --dim 0 -o out.npy",
                "cast takes no --dim",
            ),
            (
                "sum x.npy --dtype i64 -o out.npy",
                "cannot cast the valid value NaN",
            ),
        ],
    );

    // sparse: positions kept, values converted
    write(
        d.path(),
        "a.mtx",
        "%%MatrixMarket matrix coordinate real general\n2 3 3\n1 1 1.75\n1 3 -2.5\n2 2 9.0\n",
    );
    run_ok(
        d.path(),
        "cast a.mtx --mask-from-pattern --dtype i64 -o out.npz",
    );
    let (coords, data, shape) = load_npz::<i64>(&d.path().join("out.npz"));
    assert_eq!(shape, vec![2, 3]);
    assert_eq!(coords, ndarray::array![[0, 0, 1], [0, 2, 1]]);
    assert_eq!(data, vec![1, -2, 9]);
}

/// Unary elementwise ops: the mask kept, 0 at invalid positions (no NaN leaks), integer
/// promotion, sparse in / sparse out with an explicit mask, and their bad inputs.
#[test]
fn unary_elementwise_ops() {
    let d = tempfile::tempdir().unwrap();
    save(
        d.path(),
        "x.npy",
        &array![[-1.5f32, 0.25, f32::NAN], [4.0, f32::INFINITY, -0.0]],
    );
    save(
        d.path(),
        "m.npy",
        &array![[true, true, false], [true, false, true]],
    );
    run_ok(
        d.path(),
        "exp x.npy --mask m.npy -o out.npy --out-mask om.npy",
    );
    let v: ArrayD<f32> = load(&d.path().join("out.npy"));
    let want = [(-1.5f32).exp(), 0.25f32.exp(), 0.0, 4.0f32.exp(), 0.0, 1.0];
    for (g, w) in v.iter().zip(want) {
        assert!((g - w).abs() <= 4.0 * f32::EPSILON * w.abs(), "{v:?}");
    }
    let m: ArrayD<bool> = load(&d.path().join("om.npy"));
    assert_eq!(
        m.as_slice().unwrap(),
        &[true, true, false, true, false, true]
    );
    // clamp with both bounds; NaN under the mask stays hidden
    run_ok(
        d.path(),
        "clamp x.npy --mask m.npy --min 0 --max 1 -o out.npy",
    );
    let v: ArrayD<f32> = load(&d.path().join("out.npy"));
    assert_eq!(v.as_slice().unwrap(), &[0.0, 0.25, 0.0, 1.0, 0.0, 0.0]);
    // integers: abs keeps i32 (wrapping), sqrt gives f64
    save(d.path(), "i.npy", &array![-7i32, 9, i32::MIN]);
    run_ok(d.path(), "abs i.npy -o out.npy");
    let v: ArrayD<i32> = load(&d.path().join("out.npy"));
    assert_eq!(v.as_slice().unwrap(), &[7, 9, i32::MIN]);
    run_ok(d.path(), "sqrt i.npy -o out.npy");
    let v: ArrayD<f64> = load(&d.path().join("out.npy"));
    assert!(v[0].is_nan() && v[1] == 3.0 && v[2].is_nan());
    run_ok(d.path(), "pow i.npy --exponent 2 -o out.npy");
    let v: ArrayD<i32> = load(&d.path().join("out.npy"));
    assert_eq!(v.as_slice().unwrap(), &[49, 81, 0]); // MIN^2 wraps to 0
    std::fs::remove_file(d.path().join("out.npy")).unwrap();
    assert_all_bad(
        d.path(),
        &[
            (
                "pow i.npy --exponent -1 -o out.npy",
                "negative integer power",
            ),
            ("pow x.npy -o out.npy", "pow needs a numeric exponent"),
            (
                "exp x.npy --dim 0 -o out.npy",
                "exp is elementwise: it takes no --dim",
            ),
            ("clamp x.npy -o out.npy", "clamp needs min, max or both"),
            (
                "exp x.npy --q 0.5 -o out.npy",
                "option --q has no meaning for exp",
            ),
        ],
    );
    // sparse: the stored pattern as the mask, positions kept; no mask is an error
    write(
        d.path(),
        "a.mtx",
        "%%MatrixMarket matrix coordinate real general\n2 3 3\n1 1 -1.5\n1 3 4\n2 2 0.25\n",
    );
    run_ok(d.path(), "relu a.mtx --mask-from-pattern -o out.npz");
    let (coords, data, _) = load_npz::<f64>(&d.path().join("out.npz"));
    assert_eq!(coords, ndarray::array![[0, 0, 1], [0, 2, 1]]);
    assert_eq!(data, vec![0.0, 4.0, 0.25]);
    let o = run_line(d.path(), "exp a.mtx -o out.npz");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("needs --mask or --mask-from-pattern"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn binary_ops_rules_scalars_and_errors() {
    let d = setup();
    let p = d.path();
    save(p, "y.npy", &array![10.0f32, 20.0, 30.0]);
    save(p, "my.npy", &array![true, true, false]);
    // a plain B broadcasts and takes A's mask (strict)
    run_ok(
        p,
        "add x.npy y.npy --mask m.npy -o out.npy --out-mask om.npy",
    );
    assert_eq!(
        load::<f32>(&p.join("out.npy")).into_raw_vec_and_offset().0,
        vec![7.0, 0.0, 29.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(
        load::<bool>(&p.join("om.npy")).into_raw_vec_and_offset().0,
        vec![true, false, true, false, false, false]
    );
    std::fs::remove_file(p.join("out.npy")).unwrap();
    // differing masks: strict exits 2 naming the position; and intersects
    assert_bad(
        p,
        &words("add x.npy y.npy --mask m.npy --mask-b my.npy -o out.npy"),
        "masks differ at position [0, 1]",
    );
    run_ok(
        p,
        "mul x.npy y.npy --mask m.npy --mask-b my.npy --masks and -o out.npy --out-mask om.npy",
    );
    assert_eq!(
        load::<f32>(&p.join("out.npy")).into_raw_vec_and_offset().0,
        vec![-30.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(
        load::<bool>(&p.join("om.npy")).into_raw_vec_and_offset().0,
        vec![true, false, false, false, false, false]
    );
    std::fs::remove_file(p.join("out.npy")).unwrap();
    // a scalar on the left; comparisons write bools; integer scalars keep integer arrays
    run_ok(p, "sub x.npy --scalar 1 --scalar-first -o out.npy");
    assert_eq!(
        load::<f32>(&p.join("out.npy")).into_raw_vec_and_offset().0,
        vec![4.0, 3.0, 2.0, 1.0, 0.0, -1.0]
    );
    run_ok(p, "gt x.npy --scalar -1.5 -o out.npy");
    assert_eq!(
        load::<bool>(&p.join("out.npy")).into_raw_vec_and_offset().0,
        vec![false, false, true, true, true, true]
    );
    save(p, "i.npy", &array![7i32, -7, 5]);
    save(p, "j.npy", &array![2i32, 2, 0]);
    save(p, "mi.npy", &array![true, true, false]);
    run_ok(p, "remainder i.npy j.npy --mask mi.npy -o out.npy");
    assert_eq!(
        load::<i32>(&p.join("out.npy")).into_raw_vec_and_offset().0,
        vec![1, 1, 0]
    );
    run_ok(p, "div i.npy --scalar 2 -o out.npy");
    assert_eq!(
        load::<f64>(&p.join("out.npy")).into_raw_vec_and_offset().0,
        vec![3.5, -3.5, 2.5]
    );
    run_ok(p, "mul i.npy --scalar 2.5 -o out.npy");
    assert_eq!(
        load::<f64>(&p.join("out.npy")).into_raw_vec_and_offset().0,
        vec![17.5, -17.5, 12.5]
    );
    std::fs::remove_file(p.join("out.npy")).unwrap();
    // errors
    assert_bad(
        p,
        &["fmod", "i.npy", "j.npy", "-o", "out.npy"],
        "integer division by zero at position [2]",
    );
    save(p, "k.npy", &array![1i32, 2]);
    assert_all_bad(
        p,
        &[
            ("add x.npy k.npy -o out.npy", "do not broadcast"),
            ("add x.npy -o out.npy", "needs a second operand"),
            (
                "add x.npy y.npy --masks or -o out.npy",
                "invalid --masks value 'or'",
            ),
            ("sum x.npy y.npy -o out.npy", "takes one operand"),
            (
                "pow i.npy --scalar -1 -o out.npy",
                "negative power at position [0]",
            ),
        ],
    );
    // pow: unary with --exponent, binary with B
    run_ok(p, "pow i.npy j.npy -o out.npy");
    assert_eq!(
        load::<i32>(&p.join("out.npy")).into_raw_vec_and_offset().0,
        vec![49, 49, 1]
    );
}

#[test]
fn sparse_binary_ops_where_and_fill() {
    let d = setup();
    let p = d.path();
    write(p, "a.mtx", A_MTX);
    // shared structure: values only
    run_ok(p, "mul a.mtx a.mtx --mask-from-pattern -o s.npz");
    let (coords, data, shape) = load_npz::<f64>(&p.join("s.npz"));
    assert_eq!(shape, vec![3, 3]);
    assert_eq!(coords.row(0).to_vec(), vec![0, 0, 2, 2]);
    assert_eq!(data, vec![9.0, 1.0, 25.0, 0.0]);
    // sparse with a dense operand, read at the stored positions only
    save(p, "col.npy", &array![1.0f64, 10.0, 100.0]);
    run_ok(p, "add a.mtx col.npy --mask-from-pattern -o s.npz");
    assert_eq!(
        load_npz::<f64>(&p.join("s.npz")).1,
        vec![-2.0, 99.0, 15.0, 100.0]
    );
    // comparisons of sparse input write bool data
    run_ok(p, "lt a.mtx --scalar 0 --mask-from-pattern -o b.npz");
    assert_eq!(
        load_npz::<bool>(&p.join("b.npz")).1,
        vec![true, true, false, false]
    );
    // a sparse operand needs explicit validity
    assert_bad(
        p,
        &["add", "a.mtx", "--scalar", "1", "-o", "s2.npz"],
        "needs --mask or --mask-from-pattern",
    );
    // fill: 0 keeps the sparse file, another value densifies explicitly
    run_ok(p, "fill a.mtx --mask-from-pattern --value 7 -o f.npy");
    assert_eq!(
        load::<f64>(&p.join("f.npy")).into_raw_vec_and_offset().0,
        vec![-3.0, 7.0, -1.0, 7.0, 7.0, 7.0, 7.0, 5.0, 0.0]
    );
    run_ok(p, "fill x.npy --mask m.npy --value 0 -o f0.npy");
    assert_eq!(
        load::<f32>(&p.join("f0.npy")).into_raw_vec_and_offset().0,
        vec![-3.0, 0.0, -1.0, 0.0, 0.0, 0.0]
    );
    // where on dense files and on sparse ones
    save(
        p,
        "c.npy",
        &array![[true, false, true], [true, true, false]],
    );
    save(p, "z.npy", &array![[9.0f32, 8.0, 7.0], [6.0, 5.0, 4.0]]);
    run_ok(
        p,
        "where c.npy x.npy z.npy --mask m.npy -o w.npy --out-mask wm.npy",
    );
    assert_eq!(
        load::<f32>(&p.join("w.npy")).into_raw_vec_and_offset().0,
        vec![-3.0, 8.0, -1.0, 0.0, 0.0, 4.0]
    );
    assert_eq!(
        load::<bool>(&p.join("wm.npy")).into_raw_vec_and_offset().0,
        vec![true, true, true, false, false, true]
    );
    save(p, "c3.npy", &array![true, false, false]);
    run_ok(p, "where c3.npy a.mtx a.mtx --mask-from-pattern -o w.npz");
    assert_eq!(
        load_npz::<f64>(&p.join("w.npz")).1,
        vec![-3.0, -1.0, 5.0, 0.0]
    );
    assert_bad(
        p,
        &["where", "c.npy", "x.npy", "-o", "out.npy"],
        "three files",
    );
}

/// A `.npy` file whose header declares `shape` of f4 values, followed by `body` bytes.
fn npy_claiming(dir: &Path, name: &str, shape: &str, body: usize) -> PathBuf {
    let mut h = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((h.len() as u16).to_le_bytes());
    b.extend(h.as_bytes());
    b.extend(vec![0u8; body]);
    let p = dir.join(name);
    std::fs::write(&p, b).unwrap();
    p
}

#[test]
fn hostile_sizes_exit_2_before_allocating() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    // a 200-byte .npy that claims 10^16 values: named sizes, no allocation, no abort
    npy_claiming(dir, "big.npy", "(100000000000, 100000)", 40);
    assert_bad(
        dir,
        &["sum", "big.npy", "-o", "out.npy"],
        "declares shape [100000000000, 100000] of 4-byte values",
    );
    // a truthful header over the memory ceiling
    npy_claiming(dir, "fits.npy", "(1000, 1000)", 4_000_000);
    assert_bad(
        dir,
        &["sum", "fits.npy", "-o", "out.npy", "--max-memory", "1M"],
        "over the memory limit of 1.0 MiB",
    );
    let o = run_line(dir, "sum fits.npy -o out.npy --max-memory 1G");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    std::fs::remove_file(dir.join("out.npy")).unwrap();
    // the environment variable, and a bad value of it
    for (value, needle) in [
        ("2M", "over the memory limit of 2.0 MiB"),
        ("lots", "invalid MASKED_MAX_MEMORY 'lots'"),
    ] {
        let o = bin()
            .current_dir(dir)
            .env("MASKED_MAX_MEMORY", value)
            .args(["sum", "fits.npy", "-o", "out.npy"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains(needle), "{}", stderr(&o));
    }
    // a mask file with a lying header
    npy_claiming(dir, "m.npy", "(1000000000000,)", 8);
    assert_bad(
        dir,
        &["sum", "fits.npy", "--mask", "m.npy", "-o", "out.npy"],
        "truncated .npy data",
    );
    // Matrix Market: 4e9 x 4e9 with three entries
    let mm = "%%MatrixMarket matrix coordinate real general\n4000000000 4000000000 3\n\
              1 1 1.0\n2 2 2.0\n3 3 3.0\n";
    write(dir, "big.mtx", mm);
    let big = |more: &[&'static str]| [&["sum", "big.mtx", "--dim", "1"], more].concat();
    // CSR row pointers of 32 GB: refused with the COO suggestion
    let csr = big(&["--mask-from-pattern", "-o", "out.npz", "--max-memory", "8G"]);
    assert_bad(dir, &csr, "--layout coo");
    // COO keeps memory O(nnz): the per-row sums of the three entries
    let coo = big(&["--mask-from-pattern", "--layout", "coo", "-o", "out.npz"]);
    let o = run(dir, &coo);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (coords, data, shape) = load_npz::<f64>(&dir.join("out.npz"));
    assert_eq!(shape, vec![4_000_000_000]);
    assert_eq!(coords.into_raw_vec_and_offset().0, vec![0, 1, 2]);
    assert_eq!(data, vec![1.0, 2.0, 3.0]);
    // without a mask every one of the 4e9 sums is valid: an output refused up front
    std::fs::remove_file(dir.join("out.npz")).unwrap();
    let all = big(&["--layout", "coo", "-o", "out.npz", "--max-memory", "8G"]);
    assert_bad(dir, &all, "an output of 4000000000 entries");
    // a size line that claims 10^11 entries: no reservation, the count is checked
    write(
        dir,
        "many.mtx",
        "%%MatrixMarket matrix coordinate real general\n10 10 99999999999\n1 1 1.0\n",
    );
    assert_bad(
        dir,
        &["sum", "many.mtx", "-o", "out.npz"],
        "declares 99999999999 entries but the file holds 1",
    );
    // a broadcast output far larger than its inputs
    save(dir, "col.npy", &ndarray::Array2::<f32>::zeros((100_000, 1)));
    save(dir, "row.npy", &ndarray::Array2::<f32>::zeros((1, 100_000)));
    assert_bad(
        dir,
        &words("add col.npy row.npy -o out.npy --max-memory 1G"),
        "add: an output of shape [100000, 100000] needs",
    );
}

#[test]
fn sweep_prints_a_table_and_the_crossovers() {
    let d = tempfile::tempdir().unwrap();
    let o = run_ok(d.path(), "sweep --shape 32,32 --grid 0.05,1 --op sum --series stored:pattern --repeat 1 --budget 0 --no-convert --out s");
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("series") && lines[0].contains("GB/s"),
        "{out}"
    );
    // 2 points x 3 layouts, then the crossover table
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("stored-pattern"))
            .count(),
        6,
        "{out}"
    );
    assert!(
        out.contains("crossover") && out.contains("byte model"),
        "{out}"
    );
    assert!(d.path().join("s/report.md").exists());
    assert!(d.path().join("s/sum-stored-pattern.svg").exists());
    assert!(!d.path().join("s/convert-stored-pattern.svg").exists());
    // the report again from the results, without timing
    std::fs::remove_file(d.path().join("s/report.md")).unwrap();
    run_ok(d.path(), "sweep --report-only --out s");
    assert!(d.path().join("s/report.md").exists());
}

/// Every output of a small sweep: the records (2 series x 3 points x 2 thread counts x
/// (2 ops x 3 layouts + 6 conversions)), the CSV, the exported points, the report with
/// its thread-scaling table and well-formed SVGs.
#[test]
fn a_tiny_sweep_writes_every_output() {
    use masked_cli::sweep::report::Record;
    use masked_cli::sweep::{read_jsonl, Exported, Vary};
    let d = tempfile::tempdir().unwrap();
    let o = run_ok(d.path(), "sweep --shape 48,40 --grid 1e-2,0.3,1 --op sum,softmax --series stored:pattern,mask:banded --repeat 1 --budget 0 --threads 1,2 --export --json --out s");
    let dir = d.path().join("s");
    let rs: Vec<Record> = read_jsonl(&dir.join("results.jsonl")).unwrap();
    // 2 series x 3 points x 2 thread counts x (2 ops x 3 layouts + 6 conversions)
    assert_eq!(rs.len(), 2 * 3 * 2 * 12);
    // --json: the same records on stdout, a line each
    assert_eq!(
        String::from_utf8(o.stdout).unwrap().lines().count(),
        rs.len()
    );
    assert!(rs
        .iter()
        .all(|r| r.seconds > 0.0 && r.gbps > 0.0 && r.shape == [48, 40]));
    let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), rs.len() + 1);
    assert_eq!(csv.lines().next().unwrap(), Record::CSV_HEADER);
    // the stored series stores the grid's density; the mask series keeps 0.01 stored
    for r in &rs {
        let target = if r.vary == Vary::Stored { r.x } else { 0.01 };
        assert!((r.density - target).abs() < 0.2 + 0.5 * target, "{r:?}");
    }
    let points: Vec<Exported> = read_jsonl(&dir.join("points.jsonl")).unwrap();
    assert_eq!(points.len(), 6);
    assert!(points.iter().all(|p| dir.join(&p.file).exists()));
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("## Thread scaling") && md.contains("| sum | mask-banded | csr |"));
    for f in [
        "sum-stored-pattern.svg",
        "softmax-mask-banded.svg",
        "convert-mask-banded.svg",
    ] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
}

#[test]
fn sweep_bad_arguments_exit_2() {
    let d = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (vec!["sweep", "--grid", "0:1:1"], "invalid --grid"),
        (
            vec!["sweep", "--grid", "1e-3,2"],
            "densities must be in (0, 1]",
        ),
        (
            vec!["sweep", "--series", "mask:causal"],
            "no density to vary",
        ),
        (
            vec!["sweep", "--series", "stored:diagonal"],
            "unknown mask structure",
        ),
        (
            vec!["sweep", "--op", "add"],
            "reductions and normalizations",
        ),
        (vec!["sweep", "--op", "nope"], "nope"),
        (vec!["sweep", "--layout", "bsr"], "invalid --layout"),
        (vec!["sweep", "--shape", "10,10,10"], "2-d shape"),
        (vec!["sweep", "--size", "lots"], "invalid --size"),
        (vec!["sweep", "--dim", "2"], "invalid --dim"),
        (vec!["sweep", "--threads", "0"], "invalid --threads"),
        (
            vec!["sweep", "--max-memory", "1M", "--shape", "4096,4096"],
            "over the memory limit",
        ),
        (
            vec!["sweep", "--report-only", "--out", "nothing-here"],
            "no results",
        ),
    ] {
        let mut a = args.clone();
        a.extend(["--out", "o"].iter().filter(|_| !args.contains(&"--out")));
        let o = run(d.path(), &a);
        assert_eq!(o.status.code(), Some(2), "{a:?}: {}", stderr(&o));
        let first = stderr(&o).lines().next().unwrap_or("").to_string();
        assert!(first.contains(needle), "{a:?}: {first:?} lacks {needle:?}");
        assert!(!stderr(&o).contains("panicked"), "{a:?}");
    }
    let o = bin().args(["sweep", "--help"]).output().unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("--series"));
}

/// Writes a COO `.npz` as the readers take it: coords (ndim x nnz), data, shape.
fn save_npz(dir: &Path, name: &str, coords: ndarray::Array2<i64>, data: Vec<f64>, shape: Vec<i64>) {
    let mut z = ndarray_npy::NpzWriter::new(std::fs::File::create(dir.join(name)).unwrap());
    z.add_array("coords", &coords).unwrap();
    z.add_array("data", &ndarray::Array1::from(data)).unwrap();
    z.add_array("shape", &ndarray::Array1::from(shape)).unwrap();
    z.finish().unwrap();
}

#[test]
fn vjp_on_dense_files() {
    let d = setup();
    let p = d.path();
    // sum over dim 1: g broadcast to the valid positions; the NaN at the fully masked
    // row's output is ignored
    save(p, "g1.npy", &array![2.0f32, f32::NAN]);
    let args = [
        "vjp", "sum", "x.npy", "--mask", "m.npy", "--dim", "1", "--grad", "g1.npy", "-o", "out.npy",
    ];
    let o = run(p, &args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        load::<f32>(&p.join("out.npy")),
        array![[2.0f32, 0.0, 2.0], [0.0, 0.0, 0.0]].into_dyn()
    );
    // softmax over dim 1: y (g - sum g y) over the valid -3 and -1 of row 0
    save(p, "g.npy", &array![[1.0f32, 9.0, 0.0], [5.0, 5.0, 5.0]]);
    let args = [
        "vjp", "softmax", "x.npy", "--mask", "m.npy", "--dim", "1", "--grad", "g.npy", "-o",
        "out.npy",
    ];
    let o = run(p, &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = load::<f32>(&p.join("out.npy"));
    let e = (2.0f64).exp();
    let (y0, y2) = (1.0 / (1.0 + e), e / (1.0 + e));
    let dot = y0;
    let want = [y0 * (1.0 - dot), 0.0, y2 * (0.0 - dot), 0.0, 0.0, 0.0];
    for (g, w) in got.iter().zip(want) {
        assert!((f64::from(*g) - w).abs() < 1e-6, "{got:?}");
    }
    // a unary op: g · f'(x) at the valid positions (square: 2x)
    let args = [
        "vjp", "square", "x.npy", "--mask", "m.npy", "--grad", "g.npy", "-o", "out.npy",
    ];
    let o = run(p, &args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        load::<f32>(&p.join("out.npy")),
        array![[-6.0f32, 0.0, 0.0], [0.0, 0.0, 0.0]].into_dyn()
    );
    // refusals: exit 2 with the problem named, no output
    std::fs::remove_file(p.join("out.npy")).unwrap();
    let vjp = |op: &str, grad: &str| {
        format!("vjp {op} x.npy --mask m.npy --dim 1 --grad {grad} -o out.npy")
    };
    assert_all_bad(
        p,
        &[
            (&vjp("argmax", "g1.npy"), "argmax is not differentiable"),
            (&vjp("count", "g1.npy"), "count is not differentiable"),
            (
                &vjp("sum", "g.npy"),
                "has shape [2, 3], the output of sum has shape [2]",
            ),
            ("vjp sum x.npy -o out.npy", "vjp needs --grad"),
        ],
    );
    save(p, "g64.npy", &array![2.0f64, 1.0]);
    assert_bad(
        p,
        &words(&vjp("sum", "g64.npy")),
        "the upstream gradient is f64, the input's gradient type is f32",
    );
    save(p, "xi.npy", &array![[1i64, 2, 3], [4, 5, 6]]);
    assert_all_bad(
        p,
        &[
            (
                "vjp sum xi.npy --dim 1 --grad g1.npy -o out.npy",
                "sum is not differentiable on i64 input",
            ),
            (
                "sum x.npy --grad g1.npy -o out.npy",
                "--grad is for `masked vjp",
            ),
        ],
    );
}

#[test]
fn vjp_on_sparse_files() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    write(p, "a.mtx", A_MTX);
    // amax over rows: valid rows 0 and 2; all of g to the maximum (-1 at (0, 2), 5 at
    // (2, 1)); the output stores exactly the valid (stored) positions
    save_npz(
        p,
        "g.npz",
        ndarray::arr2(&[[0i64, 2]]),
        vec![1.0, 3.0],
        vec![3],
    );
    for layout in ["csr", "coo"] {
        let args = [
            "vjp",
            "amax",
            "a.mtx",
            "--dim",
            "1",
            "--mask-from-pattern",
            "--layout",
            layout,
            "--grad",
            "g.npz",
            "-o",
            "out.npz",
        ];
        let o = run(p, &args);
        assert!(o.status.success(), "{layout}: {}", stderr(&o));
        let (c, v, s) = load_npz::<f64>(&p.join("out.npz"));
        assert_eq!(
            c,
            ndarray::arr2(&[[0i64, 0, 2, 2], [0, 2, 1, 2]]),
            "{layout}"
        );
        assert_eq!(v, vec![0.0, 1.0, 3.0, 0.0], "{layout}");
        assert_eq!(s, vec![3, 3]);
    }
    // a valid output missing from G counts as 0
    save_npz(p, "g2.npz", ndarray::arr2(&[[2i64]]), vec![4.0], vec![3]);
    run_ok(
        p,
        "vjp sum a.mtx --dim 1 --mask-from-pattern --grad g2.npz -o out.npz",
    );
    assert_eq!(
        load_npz::<f64>(&p.join("out.npz")).1,
        vec![0.0, 0.0, 4.0, 4.0]
    );
    // a G entry at an invalid output position (row 1 has no valid element) is named
    save_npz(p, "bad.npz", ndarray::arr2(&[[1i64]]), vec![1.0], vec![3]);
    std::fs::remove_file(p.join("out.npz")).unwrap();
    let args = [
        "vjp",
        "sum",
        "a.mtx",
        "--dim",
        "1",
        "--mask-from-pattern",
        "--grad",
        "bad.npz",
        "-o",
        "out.npz",
    ];
    let o = run(p, &args);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("entry 0 at [1] is not a valid output position"),
        "{}",
        stderr(&o)
    );
    assert!(!p.join("out.npz").exists());
    let o = run_line(p, "vjp sum a.mtx --dim 1 --grad g.npz -o out.npz");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("needs --mask or --mask-from-pattern"),
        "{}",
        stderr(&o)
    );
}

/// Q, K, V and a pattern whose attention is checked by hand: row 0 sees key 0, row 1
/// keys 0 and 2 (equal scores), row 2 nothing.
fn attention_files(p: &Path) {
    save(p, "q.npy", &array![[1.0f64, 0.0], [0.0, 1.0], [1.0, 1.0]]);
    save(p, "k.npy", &array![[1.0f64, 0.0], [0.0, 1.0], [2.0, 0.0]]);
    save(p, "v.npy", &array![[1.0f64], [2.0], [4.0]]);
    write(
        p,
        "p.mtx",
        "%%MatrixMarket matrix coordinate pattern general\n3 3 3\n1 1\n2 1\n2 3\n",
    );
}

#[test]
fn attention_and_its_gradients_on_files() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    attention_files(p);
    run_ok(
        p,
        "attention q.npy k.npy v.npy --pattern p.mtx --scale 1 -o o.npy",
    );
    assert_eq!(
        load::<f64>(&p.join("o.npy"))
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        [1.0, 2.5, 0.0]
    );
    // a bias of ln 3 on (1, 0) weighs row 1's keys 3 : 1
    write(
        p,
        "b.mtx",
        &format!(
            "%%MatrixMarket matrix coordinate real general\n3 3 3\n2 3 0\n1 1 0\n2 1 {}\n",
            3f64.ln()
        ),
    );
    run_ok(
        p,
        "attention q.npy k.npy v.npy --pattern p.mtx --scale 1 --bias b.mtx -o o.npy",
    );
    let got = load::<f64>(&p.join("o.npy"));
    assert!((got[[1, 0]] - 1.75).abs() < 1e-12, "{got}");
    // gradients of sum(O): dV = Pᵀ 1 = [1.5, 0, 0.5]; row 0 has one key, so dQ row 0 = 0
    save(p, "g.npy", &array![[1.0f64], [1.0], [1.0]]);
    run_ok(p, "attention-vjp q.npy k.npy v.npy --pattern p.mtx --scale 1 --grad g.npy -o dq.npy --dk dk.npy --dv dv.npy");
    assert_eq!(
        load::<f64>(&p.join("dv.npy"))
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        [1.5, 0.0, 0.5]
    );
    assert_eq!(
        load::<f64>(&p.join("dq.npy"))
            .iter()
            .take(2)
            .copied()
            .collect::<Vec<_>>(),
        [0.0, 0.0]
    );
    assert_eq!(load::<f64>(&p.join("dk.npy")).shape(), &[3, 2]);
    // a generated pattern: causal, the default scale
    run_ok(p, "attention q.npy k.npy v.npy --pattern causal -o o.npy");
    assert_eq!(load::<f64>(&p.join("o.npy"))[[0, 0]], 1.0);
}

#[test]
fn bad_attention_inputs_exit_2_naming_the_problem() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    attention_files(p);
    write(
        p,
        "p4.mtx",
        "%%MatrixMarket matrix coordinate pattern general\n4 3 1\n1 1\n",
    );
    assert_bad(
        p,
        &words("attention q.npy k.npy v.npy --pattern p4.mtx -o out.npy"),
        "p4.mtx",
    );
    write(
        p,
        "b.mtx",
        "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 0\n",
    );
    assert_all_bad(
        p,
        &[
            (
                "attention q.npy k.npy v.npy --pattern p.mtx --bias b.mtx -o out.npy",
                "b.mtx",
            ),
            (
                "attention-vjp q.npy k.npy v.npy --pattern p.mtx -o out.npy",
                "--grad",
            ),
            (
                "attention q.npy k.npy v.npy --pattern band:0 -o out.npy",
                "pattern",
            ),
        ],
    );
    save(p, "i.npy", &array![[1i32, 0], [0, 1], [1, 1]]);
    assert_bad(
        p,
        &words("attention i.npy k.npy v.npy --pattern p.mtx -o out.npy"),
        "i.npy",
    );
    save(p, "k1.npy", &array![[1.0f64], [0.0], [2.0]]);
    assert_bad(
        p,
        &words("attention q.npy k1.npy v.npy --pattern p.mtx -o out.npy"),
        "head dim",
    );
}

#[test]
fn bench_times_the_attention_ops() {
    let lines = bench_rows(&words(
        "--op attention,attention-vjp,sddmm,spmm --shape 64,16 --batch 2,2 --pattern lengths",
    ));
    assert_eq!(lines.len(), 4);
    for (l, op) in lines
        .iter()
        .zip(["attention", "attention-vjp", "sddmm", "spmm"])
    {
        assert_eq!(l["op"], op);
        assert_eq!(l["shape"], serde_json::json!([2, 2, 64, 16]));
        // lengths drawn in [32, 64] per batch element: between 2·2·32² and 2·2·64² pairs
        let nnz = l["nnz"].as_u64().unwrap();
        assert!((4 * 32 * 32..=4 * 64 * 64).contains(&nnz), "{nnz}");
        assert!(l["gflops"].as_f64().unwrap() > 0.0);
    }
    bench_refused(&["--op", "attention,sum", "--shape", "64,16"]);
}
