//! The fuzz targets' bodies, on raw bytes: `fuzz/fuzz_targets/*.rs` each call one of
//! these, and the corpus-replay test (`tests/fuzz_corpus.rs`) runs every committed input
//! of `fuzz/corpus/TARGET/` through the same function under `cargo test`, so CI keeps
//! the findings without a fuzzer.
//!
//! Each returns normally when the input was handled (accepted, or refused with a typed
//! error); a panic is a finding. Beyond "no panic", each checks what an accepted input
//! must satisfy: a reader's output is self-consistent and agrees with the engine's own
//! validating constructors, a deserialised value re-serialises to the same text, and
//! every sparse layout computes what the dense layout computes.

use crate::hostile::{
    dim_from, index_from, run_constructors, run_request, ConstructorCase, RequestCase,
};
use crate::{conform, Opts};
use arbitrary::Unstructured;
use masked::by_name::{apply, Kind, Op, OpRequest};
use masked::{
    BitMask, CooMask, CooPattern, Dims, Interpolation, MaskedArray, MaskedArrayD, MaskedCoo,
    MaskedCsr, MedianMode, Pattern, SparseArray,
};
use masked_io::sparse::SparseFile;
use masked_io::{limits, npy, sparse};
use std::path::Path;

/// The memory ceiling the readers run under while fuzzing and replaying: a declared
/// size above it is refused before allocating, as in the CLI.
pub const CEILING: &str = "64M";

/// A target's body: one input, handled or a panic.
pub type Target = fn(&[u8]);

/// Every target, by the name of its `fuzz/fuzz_targets/NAME.rs` and corpus folder.
pub const TARGETS: &[(&str, Target)] = &[
    ("npy", npy_reader),
    ("mtx", mtx_reader),
    ("npz", npz_reader),
    ("constructors", constructors),
    ("serde", serde),
    ("by_name", by_name),
    ("differential", differential),
];

fn ceiling() {
    limits::init(Some(CEILING)).expect("a valid ceiling");
}

/// `.npy` reader: the first byte picks the value reader, the mask reader or the `.npz`
/// member stream reader (one per input: the header parser dominates the time of an
/// execution), the rest is the file. An accepted array holds one value per element of
/// its shape and re-encodes to bytes that read back to the same encoding.
pub fn npy_reader(data: &[u8]) {
    ceiling();
    let p = Path::new("fuzz.npy");
    let Some((&which, data)) = data.split_first() else {
        return;
    };
    match which % 3 {
        0 => {
            if let Ok(a) = npy::parse_values(p, data) {
                let n: usize = a.shape.iter().product();
                assert_eq!(n, a.values.len(), "values of shape {:?}", a.shape);
                let mut once = Vec::new();
                if npy::encode_dyn(&a.shape, a.values, &mut once).is_ok() {
                    let b = npy::parse_values(p, &once).expect("our own encoding reads back");
                    let mut twice = Vec::new();
                    npy::encode_dyn(&b.shape, b.values, &mut twice).expect("encodes again");
                    assert_eq!(once, twice, "npy round trip");
                }
            }
        }
        1 => {
            if let Ok(m) = npy::parse_mask(p, data) {
                assert_eq!(m.len(), m.shape().iter().product::<usize>(), "mask length");
            }
        }
        _ => {
            let _ = npy::read_stream(p, "fuzz", &mut &data[..]);
        }
    }
}

/// What an accepted sparse file must satisfy: one coordinate per entry and dim, each in
/// range; duplicates found by the reader exactly when the engine's COO constructor finds
/// them; a CSR form (when 2-d and under the ceiling) that the pattern check accepts.
fn check_sparse(p: &Path, f: &SparseFile) {
    let nnz = f.nnz();
    assert_eq!(f.values.len(), nnz, "one value per entry");
    assert_eq!(
        f.coords.len(),
        f.shape.len(),
        "one coordinate vector per dim"
    );
    for (d, c) in f.coords.iter().enumerate() {
        assert_eq!(c.len(), nnz, "coordinates of dim {d}");
        assert!(
            c.iter().all(|&i| i < f.shape[d]),
            "coordinate out of dim {d}"
        );
    }
    let order = f.sorted_order(p);
    let coo = CooPattern::from_coords(&f.shape[..], &f.coords);
    match (&order, &coo) {
        (Ok(_), Ok(c)) => assert_eq!(c.nnz(), nnz, "COO pattern of the file"),
        (Err(_), Ok(_)) => panic!("the reader found a duplicate the COO pattern did not"),
        // the COO pattern also refuses shapes whose size overflows
        _ => {}
    }
    if order.is_ok()
        && f.shape.len() == 2
        && let Ok((indptr, indices, values)) = f.to_csr(p)
    {
        assert_eq!(values.len(), nnz);
        let pat = Pattern::try_from_parts((f.shape[0], f.shape[1]), indptr, indices);
        assert!(
            pat.is_ok(),
            "the reader's CSR form is invalid: {:?}",
            pat.err()
        );
    }
}

/// Matrix Market reader.
pub fn mtx_reader(data: &[u8]) {
    ceiling();
    let p = Path::new("fuzz.mtx");
    if let Ok(f) = sparse::parse_mtx(p, data) {
        check_sparse(p, &f);
    }
}

/// COO `.npz` reader (zip archives, stored or deflated members).
pub fn npz_reader(data: &[u8]) {
    ceiling();
    let p = Path::new("fuzz.npz");
    if let Ok(f) = sparse::parse_npz(p, std::io::Cursor::new(data)) {
        check_sparse(p, &f);
    }
}

fn bytes_vec<T>(u: &mut Unstructured<'_>, max: usize, f: impl Fn(u8) -> T) -> Vec<T> {
    let n = u.int_in_range(0..=max).unwrap_or(0);
    (0..n).map(|_| f(u.arbitrary().unwrap_or(0))).collect()
}

/// Every public constructor of masks, patterns and containers
/// ([`run_constructors`]), on a case decoded from the bytes.
pub fn constructors(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let c = ConstructorCase {
        shape: bytes_vec(&mut u, 4, dim_from),
        other_shape: bytes_vec(&mut u, 4, dim_from),
        coords: (0..u.int_in_range(0..=4).unwrap_or(0))
            .map(|_| bytes_vec(&mut u, 12, index_from))
            .collect(),
        flat: bytes_vec(&mut u, 12, index_from),
        lengths: bytes_vec(&mut u, 5, index_from),
        band: (
            index_from(u.arbitrary().unwrap_or(0)),
            index_from(u.arbitrary().unwrap_or(0)),
        ),
        n: dim_from(u.arbitrary().unwrap_or(0)),
        bools: bytes_vec(&mut u, 40, |b| b & 1 == 1),
        indptr: bytes_vec(&mut u, 7, index_from),
        indices: bytes_vec(&mut u, 12, index_from),
        words: (0..u.int_in_range(0..=3).unwrap_or(0))
            .map(|_| u.arbitrary().unwrap_or(0))
            .collect(),
        values: bytes_vec(&mut u, 16, |b| f64::from(b as i8) / 4.0),
    };
    run_constructors(&c);
}

/// Re-serialises `x` and checks the text reads back to a value that serialises the
/// same (the deserialiser accepted it, so it must be a valid value).
fn same_again<T: serde::Serialize + serde::de::DeserializeOwned>(x: &T) {
    let once = serde_json::to_string(x).expect("serialises");
    let y: T = serde_json::from_str(&once).expect("our own output reads back");
    assert_eq!(once, serde_json::to_string(&y).expect("serialises"));
}

/// The deserialisers of every container and mask, on the bytes as JSON. An accepted
/// value round-trips and a sum over all dims runs on it (the kernels index without
/// bounds checks on the invariants the deserialiser re-validated).
pub fn serde(data: &[u8]) {
    let sum = OpRequest::from_op(Op::Sum).dims(Dims::All);
    if let Ok(m) = serde_json::from_slice::<BitMask>(data) {
        assert!(m.count_ones() <= m.len());
        same_again(&m);
    }
    if let Ok(p) = serde_json::from_slice::<Pattern>(data) {
        same_again(&p);
        let vals = vec![1.0f64; p.nnz()];
        let mat = sprs::CsMat::new(p.shape(), p.indptr().to_vec(), p.indices().to_vec(), vals);
        let csr = MaskedCsr::from_pattern(mat.view()).expect("a valid pattern");
        let _ = apply(&csr, &sum);
    }
    if let Ok(p) = serde_json::from_slice::<CooPattern>(data) {
        same_again(&p);
    }
    if let Ok(c) = serde_json::from_slice::<MaskedCoo<f64>>(data) {
        same_again(&c);
        let _ = apply(&c, &sum);
    }
    if let Ok(a) = serde_json::from_slice::<MaskedArrayD<f64>>(data) {
        same_again(&a);
        let _ = apply(&a.view(), &sum);
    }
    if let Ok(s) = serde_json::from_slice::<SparseArray<f64>>(data) {
        same_again(&s);
        let _ = MaskedCoo::from(s);
    }
}

/// The by-name dispatcher with random ops, dims, options (unparsable ones included)
/// and dtypes, on every layout ([`run_request`]).
pub fn by_name(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let c = RequestCase {
        shape: bytes_vec(&mut u, 3, |b| (b % 5) as usize),
        seed: u.arbitrary().unwrap_or(1),
        op: u.arbitrary::<u8>().unwrap_or(0) as usize,
        dims: if u.arbitrary().unwrap_or(false) {
            Some(bytes_vec(&mut u, 3, |b| isize::from(b as i8 % 6)))
        } else {
            None
        },
        keepdim: u.arbitrary().unwrap_or(false),
        options: (0..u.int_in_range(0..=3).unwrap_or(0))
            .map(|_| {
                (
                    u.arbitrary::<u8>().unwrap_or(0) as usize,
                    u.arbitrary::<u8>().unwrap_or(0) as usize,
                )
            })
            .collect(),
        dtype: u
            .arbitrary::<Option<u8>>()
            .unwrap_or(None)
            .map(|d| d as usize),
    };
    run_request(&c);
}

const VALUES: &[f64] = &[
    0.0,
    1.0,
    -1.0,
    0.5,
    2.0,
    -3.5,
    4.0,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
];

/// Every op of the registry on a small random input (rank 1 to 3, explicit zeros, NaN
/// and infinities among the values, every kind of mask) on COO and, when 2-d, CSR,
/// against the dense layout on the same data: equal outputs and masks, or equal errors
/// ([`conform`]).
pub fn differential(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let ndim = u.int_in_range(1..=3).unwrap_or(1);
    let shape: Vec<usize> = (0..ndim)
        .map(|_| u.int_in_range(0..=4).unwrap_or(1))
        .collect();
    let n: usize = shape.iter().product();
    let cells: Vec<Option<f64>> = (0..n)
        .map(|_| {
            let b: u8 = u.arbitrary().unwrap_or(0);
            (!b.is_multiple_of(3)).then(|| VALUES[(b / 3) as usize % VALUES.len()])
        })
        .collect();
    let mask_kind: u8 = u.arbitrary().unwrap_or(0) % 3;
    let own: Vec<bool> = (0..n).map(|_| u.arbitrary().unwrap_or(false)).collect();
    let pick = |u: &mut Unstructured<'_>, k: usize| u.choose_index(k).unwrap_or(0);
    let o = Opts {
        correction: [0.0, 1.0, 1.5][pick(&mut u, 3)],
        ord: [2.0, 1.0, 0.0, 3.0, -1.0, f64::INFINITY, f64::NEG_INFINITY][pick(&mut u, 7)],
        q: [0.0, 0.3, 0.5, 1.0][pick(&mut u, 4)],
        interpolation: [
            Interpolation::Linear,
            Interpolation::Lower,
            Interpolation::Higher,
            Interpolation::Midpoint,
            Interpolation::Nearest,
        ][pick(&mut u, 5)],
        mode: [MedianMode::Avg, MedianMode::Lower][pick(&mut u, 2)],
        clamp: [
            (Some(-0.5), Some(1.5)),
            (None, Some(0.5)),
            (Some(1.0), None),
        ][pick(&mut u, 3)],
        exponent: [2.0, 3.0, 0.5, -1.0, 0.0][pick(&mut u, 5)],
        nan_to_num: [(0.0, None, None), (1.5, Some(7.0), Some(-7.0))][pick(&mut u, 2)],
    };
    let dim = isize::try_from(pick(&mut u, ndim + 1)).unwrap_or(0) - 1;
    let subset: Vec<isize> = (0..ndim as isize)
        .filter(|_| u.arbitrary().unwrap_or(false))
        .collect();
    let keepdim: bool = u.arbitrary().unwrap_or(false);
    let choices = |kind: Kind| match kind {
        Kind::Unary => vec![(Dims::All, false)],
        Kind::Binary => vec![],
        Kind::Normalize => vec![(Dims::from(dim), false)],
        Kind::ReduceOne => vec![(Dims::from(dim), keepdim), (Dims::All, keepdim)],
        Kind::Reduce => vec![(Dims::from(subset.clone()), keepdim), (Dims::All, keepdim)],
    };

    // the dense oracle
    let valid: Option<Vec<bool>> = match mask_kind {
        0 => Some(cells.iter().map(Option::is_some).collect()),
        1 => Some(own.clone()),
        _ => None,
    };
    let values = ndarray::ArrayD::from_shape_vec(
        shape.clone(),
        cells.iter().map(|c| c.unwrap_or(0.0)).collect(),
    )
    .expect("n values");
    let oracle = match &valid {
        Some(v) => MaskedArray::new(
            values.view(),
            BitMask::from_bools(&shape[..], v).expect("n bools"),
        )
        .expect("mask of the shape"),
        None => MaskedArray::unmasked(values.view()),
    };
    let fail = |layout: &str, e: proptest::test_runner::TestCaseError| {
        panic!("{layout} differs from dense on shape {shape:?}: {e}")
    };

    // COO: the stored entries in row-major order, given in reverse
    let stored: Vec<usize> = (0..n).filter(|&p| cells[p].is_some()).rev().collect();
    let coords: Vec<Vec<usize>> = (0..ndim)
        .map(|d| {
            let inner: usize = shape[d + 1..].iter().product();
            stored.iter().map(|&p| (p / inner) % shape[d]).collect()
        })
        .collect();
    let vals: Vec<f64> = stored.iter().filter_map(|&p| cells[p]).collect();
    let mask = match mask_kind {
        0 => CooMask::Stored,
        1 => CooMask::Pattern(CooPattern::from_bools(&shape[..], &own).expect("n bools")),
        _ => CooMask::All,
    };
    let coo = MaskedCoo::try_new(&shape[..], &coords, vals, mask).expect("a valid COO input");
    conform(&oracle, &coo, choices, &o).unwrap_or_else(|e| fail("COO", e));

    // CSR
    if let [r, c] = shape[..] {
        let rows: Vec<usize> = (0..n).filter(|&p| cells[p].is_some()).collect();
        let pat = Pattern::from_coords(
            (r, c),
            &[
                rows.iter().map(|&p| p / c).collect::<Vec<_>>(),
                rows.iter().map(|&p| p % c).collect(),
            ],
        )
        .expect("valid coordinates");
        let mat = sprs::CsMat::new(
            (r, c),
            pat.indptr().to_vec(),
            pat.indices().to_vec(),
            rows.iter().filter_map(|&p| cells[p]).collect(),
        );
        let csr = match mask_kind {
            0 => MaskedCsr::from_pattern(mat.view()),
            1 => MaskedCsr::with_mask(
                mat.view(),
                Pattern::from_bools((r, c), &own).expect("n bools"),
            ),
            _ => MaskedCsr::unmasked(mat.view()),
        }
        .expect("a valid CSR input");
        conform(&oracle, &csr, choices, &o).unwrap_or_else(|e| fail("CSR", e));
    }
}
