//! Concurrency: many threads running ops at once on shared inputs, and ops called from
//! inside a caller's rayon tasks, give exactly the results of one thread, on every
//! layout, and finish (no deadlock from the engine's nested parallelism).

use masked::by_name::{apply, OpRequest};
use masked::{BitMask, CooMask, Dims, MaskedArray, MaskedCoo, MaskedCsr, PatternI};
use ndarray::ArrayD;
use rayon::prelude::*;
use sprs::CsMat;

const ROWS: usize = 384;
const COLS: usize = 512;

/// Deterministic values in [-2, 2) and a mask valid at about 3 positions in 4.
fn data() -> (Vec<f64>, Vec<bool>) {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let n = ROWS * COLS;
    let v = (0..n)
        .map(|_| (next() % 4000) as f64 / 1000.0 - 2.0)
        .collect();
    let m = (0..n).map(|_| next() % 4 != 0).collect();
    (v, m)
}

fn requests() -> Vec<OpRequest> {
    let mut out = Vec::new();
    for name in ["sum", "mean", "var", "amax", "logsumexp", "median", "norm"] {
        for dims in [Dims::from(0isize), Dims::from(1isize), Dims::All] {
            out.push(OpRequest::new(name).unwrap().dims(dims));
        }
    }
    for name in ["softmax", "cumsum"] {
        out.push(OpRequest::new(name).unwrap().dims(1isize));
    }
    out
}

/// Every request on every layout, as comparable text (values bit for bit).
fn run_all(x: &[f64], valid: &[bool]) -> Vec<String> {
    let shape = [ROWS, COLS];
    let values = ArrayD::from_shape_vec(shape.to_vec(), x.to_vec()).unwrap();
    let mask = BitMask::from_bools(shape, valid.iter().copied()).unwrap();
    let dense = MaskedArray::new(values.view(), mask).unwrap();
    // sparse: the valid positions are the stored entries
    let (mut rows, mut cols, mut vals) = (Vec::new(), Vec::new(), Vec::new());
    for (i, (&v, &ok)) in x.iter().zip(valid).enumerate() {
        if ok {
            rows.push(i / COLS);
            cols.push(i % COLS);
            vals.push(v);
        }
    }
    let pattern =
        PatternI::<usize>::from_coords((ROWS, COLS), &[rows.to_vec(), cols.to_vec()]).unwrap();
    let csmat = CsMat::new(
        (ROWS, COLS),
        pattern.indptr().to_vec(),
        pattern.indices().to_vec(),
        vals.clone(),
    );
    let csr = MaskedCsr::from_pattern(csmat.view()).unwrap();
    let coo = MaskedCoo::try_new(shape, &[rows, cols], vals, CooMask::Stored).unwrap();
    let mut out = Vec::new();
    for req in requests() {
        let tag = format!("{} {:?}", req.op.name(), req.dims);
        let d = apply(&dense, &req).unwrap();
        out.push(format!(
            "dense {tag}: {:?} {:?} {:?}",
            d.shape, d.values, d.mask
        ));
        out.push(format!("csr {tag}: {:?}", apply(&csr, &req).unwrap()));
        out.push(format!("coo {tag}: {:?}", apply(&coo, &req).unwrap()));
    }
    out
}

/// Asserts equal runs, naming the first op and layout that differ.
fn same(got: &[String], want: &[String]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        let tag = |s: &str| s.split(':').next().unwrap_or("").to_string();
        assert!(g == w, "{}: differs from one thread", tag(w));
    }
}

fn one_thread(x: &[f64], m: &[bool]) -> Vec<String> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap()
        .install(|| run_all(x, m))
}

#[test]
fn many_threads_at_once_equal_one_thread() {
    let (x, m) = data();
    let want = one_thread(&x, &m);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..6).map(|_| s.spawn(|| run_all(&x, &m))).collect();
        for h in handles {
            same(&h.join().expect("no panic"), &want);
        }
    });
}

#[test]
fn ops_inside_a_callers_rayon_tasks_equal_one_thread() {
    let (x, m) = data();
    let want = one_thread(&x, &m);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    // every task of the caller's pool runs the engine, whose own parallel loops nest
    // in the same pool
    let got: Vec<Vec<String>> =
        pool.install(|| (0..4).into_par_iter().map(|_| run_all(&x, &m)).collect());
    for g in got {
        same(&g, &want);
    }
}
