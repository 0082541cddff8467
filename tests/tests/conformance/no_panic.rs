//! No panic on bad input: arbitrary shapes (empty dims included), masks, values (NaN,
//! infinities), dims (out of range, repeated, negative), keepdim, dtypes and option
//! values (out of range, unparsable) for every op of the registry, on every layout.
//! Every call must return `Ok` or a typed `Err`, never panic.

use masked::by_name::{apply, Op, OpRequest};
use masked::{BitMask, CooMask, DType, Dims, MaskedArray, MaskedCoo, MaskedCsr, PatternI};
use ndarray::ArrayD;
use proptest::prelude::*;
use sprs::CsMat;
use std::panic::{catch_unwind, AssertUnwindSafe};

const TEXTS: &[&str] = &[
    "0", "1", "-1", "2", "0.5", "-0.5", "1.5", "nan", "inf", "-inf", "1e308", "abc", "", "linear",
    "lower", "higher", "midpoint", "nearest", "true", "false", "fro", "3",
];

const SPECIALS: &[f64] = &[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, 1e308];

/// Values and validity of `n` elements from `seed`.
fn data(n: usize, seed: u64) -> (Vec<f64>, Vec<bool>) {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let v = (0..n)
        .map(|_| match next() % 8 {
            0 => SPECIALS[(next() % SPECIALS.len() as u64) as usize],
            _ => (next() % 200) as f64 / 10.0 - 10.0,
        })
        .collect();
    let m = (0..n).map(|_| next() % 3 != 0).collect();
    (v, m)
}

fn no_panic<R>(what: &str, f: impl FnOnce() -> R) {
    let r = catch_unwind(AssertUnwindSafe(f));
    assert!(r.is_ok(), "{what}: panicked");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn no_op_panics_on_any_request(
        shape in proptest::collection::vec(0usize..4, 0..4),
        seed in any::<u64>(),
        op in 0usize..Op::ALL.len(),
        dims in proptest::option::of(proptest::collection::vec(-5isize..5, 0..3)),
        keepdim in any::<bool>(),
        options in proptest::collection::vec((0usize..8, 0usize..TEXTS.len()), 0..3),
        dtype in proptest::option::of(0usize..4),
    ) {
        let op = Op::ALL[op];
        let mut req = OpRequest::from_op(op).keepdim(keepdim);
        req = match dims {
            Some(d) => req.dims(Dims::Set(d)),
            None => req.dims(Dims::All),
        };
        for (o, t) in options {
            if let Some(name) = op.options().get(o) {
                let _ = req.set_option(name, TEXTS[t]);
            }
        }
        if let Some(d) = dtype {
            req = req.dtype([DType::F32, DType::F64, DType::I64, DType::F16][d]);
        }
        let n: usize = shape.iter().product();
        let (v, m) = data(n, seed);
        let what = format!("{} {:?} on shape {shape:?}", op.name(), req);
        // dense
        let values = ArrayD::from_shape_vec(shape.clone(), v.clone()).unwrap();
        let mask = BitMask::from_bools(&shape, m.iter().copied()).unwrap();
        let dense = MaskedArray::new(values.view(), mask).unwrap();
        no_panic(&format!("dense {what}"), || apply(&dense, &req));
        // COO, with the valid positions as the stored entries, and without a mask
        let idx: Vec<usize> = (0..n).filter(|&i| m[i]).collect();
        let coords: Vec<Vec<usize>> = (0..shape.len())
            .map(|d| {
                let inner: usize = shape[d + 1..].iter().product();
                idx.iter().map(|&i| (i / inner.max(1)) % shape[d].max(1)).collect()
            })
            .collect();
        let vals: Vec<f64> = idx.iter().map(|&i| v[i]).collect();
        for mask in [CooMask::Stored, CooMask::All] {
            let coo = MaskedCoo::try_new(&shape, &coords, vals.clone(), mask).unwrap();
            no_panic(&format!("coo {what}"), || apply(&coo, &req));
        }
        // CSR for 2-d shapes
        if let [r, c] = shape[..] {
            let p = PatternI::<usize>::from_coords((r, c), &[coords[0].to_vec(), coords[1].to_vec()]).unwrap();
            let mat = CsMat::new((r, c), p.indptr().to_vec(), p.indices().to_vec(), vals.clone());
            let csr = MaskedCsr::from_pattern(mat.view()).unwrap();
            no_panic(&format!("csr {what}"), || apply(&csr, &req));
            let free = MaskedCsr::unmasked(mat.view()).unwrap();
            no_panic(&format!("csr unmasked {what}"), || apply(&free, &req));
        }
    }
}
