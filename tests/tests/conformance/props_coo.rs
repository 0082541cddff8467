//! The COO layout against the dense oracle: for random shapes of rank 1 to 4, stored
//! entries given in a random order (explicit zeros, NaN and infinities included), and
//! every kind of mask (the stored pattern, a separate pattern that is not a subset of
//! it, none), every op of the table over every set of dims (each subset, all dims,
//! negative dims), keepdim both ways, and every normalization dim, equals the dense op
//! on the densified input at the output mask, and the output stores exactly the output
//! mask. Conversions dense ↔ COO ↔ CSR round-trip.

use masked::by_name::{apply_dense, apply_sparse, Kind, Op, OpRequest};
use masked::{csr_to_coo, csr_to_dense, dense_to_csr};
use masked::{
    CooMask, CooPattern, Dims, Element, MaskedArray, MaskedArrayD, MaskedCoo, MaskedCsr, MaskedOps,
};
use masked_tests::{at, both_keepdims, conform, opts, value, Opts};
use ndarray::{ArrayD, IxDyn};
use proptest::prelude::*;

/// Which mask the COO input gets.
#[derive(Debug, Clone)]
enum MaskKind {
    Stored,
    /// A separate pattern: these positions valid.
    Own(Vec<bool>),
    All,
}

#[derive(Debug, Clone)]
struct Case {
    shape: Vec<usize>,
    /// `Some(v)` stored with value `v`.
    cells: Vec<Option<f64>>,
    /// The order the stored entries are given in (a permutation of their ranks).
    order: Vec<usize>,
    mask: MaskKind,
    opts: Opts,
}

fn case(specials: bool) -> impl Strategy<Value = Case> {
    let shape = prop::collection::vec(prop_oneof![1 => Just(0usize), 8 => 1usize..5], 1..=4)
        .prop_filter("small", |s| s.iter().product::<usize>() <= 160);
    (shape, 0.0f64..1.0)
        .prop_flat_map(move |(shape, density)| {
            let n: usize = shape.iter().product();
            let cell = prop_oneof![
                ((1.0 - density) * 100.0) as u32 + 1 => Just(None),
                (density * 100.0) as u32 + 1 => value(specials).prop_map(Some),
            ];
            let mask = prop_oneof![
                2 => Just(MaskKind::Stored),
                2 => prop::collection::vec(prop::bool::weighted(0.4), n).prop_map(MaskKind::Own),
                1 => Just(MaskKind::All),
            ];
            (
                Just(shape),
                prop::collection::vec(cell, n),
                Just((0..n).collect::<Vec<usize>>()).prop_shuffle(),
                mask,
                opts(),
            )
        })
        .prop_map(|(shape, cells, order, mask, opts)| Case {
            shape,
            cells,
            order,
            mask,
            opts,
        })
}

/// The row-major coordinates of flat position `f`.
fn unravel(shape: &[usize], mut f: usize) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        c[d] = f % shape[d];
        f /= shape[d];
    }
    c
}

/// Every subset of the dims of a rank, as dims sets (the empty one meaning all dims).
fn subsets(ndim: usize) -> Vec<Dims> {
    let mut out = vec![Dims::All];
    for bits in 1u32..(1 << ndim) {
        let v: Vec<isize> = (0..ndim as isize).filter(|d| bits >> d & 1 == 1).collect();
        out.push(Dims::from(v));
    }
    out.push(Dims::from(-1isize));
    out
}

/// The COO input (entries given in `c.order`) and the dense oracle.
fn inputs<T: Element>(c: &Case, conv: impl Fn(f64) -> T) -> (MaskedCoo<T>, MaskedArrayD<T>) {
    let shape = &c.shape;
    let n: usize = shape.iter().product();
    let stored: Vec<usize> = (0..n).filter(|&p| c.cells[p].is_some()).collect();
    let mut coords = vec![Vec::new(); shape.len()];
    let mut values = Vec::new();
    for &k in c.order.iter().filter(|&&k| k < stored.len()) {
        let p = stored[k];
        for (d, x) in unravel(shape, p).into_iter().enumerate() {
            coords[d].push(x);
        }
        values.push(conv(c.cells[p].unwrap()));
    }
    let dense = ArrayD::from_shape_fn(IxDyn(shape), |ix| {
        let p = (0..shape.len()).fold(0, |f, d| f * shape[d] + ix[d]);
        c.cells[p].map_or(T::default(), &conv)
    });
    let (mask, valid): (CooMask, Option<Vec<bool>>) = match &c.mask {
        MaskKind::Stored => (
            CooMask::Stored,
            Some(c.cells.iter().map(Option::is_some).collect()),
        ),
        MaskKind::All => (CooMask::All, None),
        MaskKind::Own(b) => (
            CooMask::Pattern(CooPattern::from_bools(shape, b).unwrap()),
            Some(b.clone()),
        ),
    };
    let coo = MaskedCoo::try_new(shape, &coords, values, mask).unwrap();
    let oracle = match valid {
        Some(v) => {
            let m = ArrayD::from_shape_vec(IxDyn(shape), v).unwrap();
            MaskedArray::from_bool_mask(dense, m.view()).unwrap()
        }
        None => MaskedArray::unmasked(dense),
    };
    (coo, oracle)
}

fn check<T: Element>(c: &Case, conv: impl Fn(f64) -> T) -> Result<(), TestCaseError> {
    let (coo, oracle) = inputs(c, conv);
    let oracle = oracle.view();
    let ndim = c.shape.len();
    let choices = |kind: Kind| match kind {
        Kind::Unary => vec![(Dims::All, false)],
        Kind::Binary => vec![],
        Kind::Normalize => (-1..ndim as isize)
            .map(|d| (Dims::from(d), false))
            .collect(),
        Kind::ReduceOne => both_keepdims((-1..ndim as isize).map(Dims::from).chain([Dims::All])),
        Kind::Reduce => both_keepdims(subsets(ndim)),
    };
    conform(&oracle, &coo, choices, &c.opts)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn coo_f64_equals_dense_oracle(c in case(true)) {
        check::<f64>(&c, |v| v)?;
    }

    #[test]
    fn coo_i32_equals_dense_oracle(c in case(false)) {
        check::<i32>(&c, |v| v as i32)?;
    }

    #[test]
    fn coo_f32_equals_dense_oracle(c in case(true)) {
        check::<f32>(&c, |v| v as f32)?;
    }

    /// Half values stored as halves, computed in f32, rounded once: the sparse layout
    /// agrees with the dense one within two half ulps.
    #[test]
    fn coo_f16_equals_dense_oracle(c in case(true)) {
        check::<half::f16>(&c, half::f16::from_f64)?;
    }

    #[test]
    fn coo_bf16_equals_dense_oracle(c in case(true)) {
        check::<half::bf16>(&c, half::bf16::from_f64)?;
    }

    /// dense -> COO -> dense keeps the mask and the valid values; for 2-D, COO -> CSR
    /// -> COO keeps the stored positions, values and mask, and dense -> CSR -> dense
    /// keeps the mask and valid values.
    #[test]
    fn conversions_round_trip(c in case(false)) {
        let (coo, oracle) = inputs(&c, |v| v);
        let dense = MaskedArrayD::try_from(&coo).unwrap();
        let valid_values = |a: &MaskedArrayD<f64>| -> Vec<(usize, f64)> {
            let m = a.mask_vec();
            a.values().iter().enumerate().filter(|(i, _)| m[*i]).map(|(i, &v)| (i, v)).collect()
        };
        prop_assert_eq!(dense.mask_vec(), oracle.mask_vec());
        prop_assert_eq!(valid_values(&dense), valid_values(&oracle));
        let again = MaskedCoo::from(&oracle);
        let back = MaskedArrayD::try_from(&again).unwrap();
        prop_assert_eq!(back.mask_vec(), oracle.mask_vec());
        prop_assert_eq!(valid_values(&back), valid_values(&oracle));
        if c.shape.len() == 2 {
            let (m, mask) = coo.to_csr().unwrap();
            let csr = MaskedCsr::new(m.view(), mask).unwrap();
            let coo2 = csr_to_coo(&csr).unwrap();
            prop_assert_eq!(coo2.pattern(), coo.pattern());
            prop_assert_eq!(coo2.values(), coo.values());
            prop_assert_eq!(coo2.mask(), coo.mask());
            let (m3, mask3) = dense_to_csr(&oracle).unwrap();
            let d3 = csr_to_dense(&MaskedCsr::new(m3.view(), mask3).unwrap()).unwrap();
            prop_assert_eq!(d3.mask_vec(), oracle.mask_vec());
            prop_assert_eq!(valid_values(&d3), valid_values(&oracle));
            // and the CSR view computes what the COO array does
            let s1 = coo.sum(0, false).unwrap();
            let s2 = csr.sum(0, false).unwrap();
            prop_assert_eq!(s1.indices(), s2.indices());
            for k in 0..s1.nnz() {
                prop_assert!(masked_tests::close(s1.values()[k], s2.values()[k], 1e-12));
            }
        }
    }
}

/// Many groups, dims reduced that are not trailing (the scatter fold, the sorted
/// grouping for statistics and maps), a huge lane (split into pieces by the row
/// kernels), the trailing dim's groups of a few entries over several tasks (the segment
/// fold and the short lanes' maps) and of more than 8 (their lane-by-lane paths), with
/// and without validity bits: equal to the dense oracle, and bit for bit the same on 1
/// and 2 threads.
#[test]
fn sparse_groups_and_long_lanes() {
    // [3, 40000, 2]: reduce dims (0, 2) -> 40000 groups for ~70000 entries; reduce dim 1
    // -> lanes of 40000 positions; reduce dim 2 -> 120000 lanes of at most 2 entries.
    // [3000, 2, 12]: lanes of up to 12 along dim 2, about 54000 entries.
    for shape in [[3usize, 40_000, 2], [3000, 2, 12]] {
        for separate_mask in [false, true] {
            groups_and_lanes(shape, separate_mask);
        }
    }
}

fn groups_and_lanes(shape: [usize; 3], separate_mask: bool) {
    let n: usize = shape.iter().product();
    let mut state = 99u64;
    let mut flat = Vec::new();
    let mut vals = Vec::new();
    let mut dense = vec![0.0f64; n];
    let mut valid = vec![false; n];
    for p in 0..n {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if state >> 62 != 0 {
            continue;
        }
        let v = ((state >> 20) % 1000) as f64 / 8.0 - 60.0;
        flat.push(p);
        vals.push(v);
        dense[p] = v;
        valid[p] = true;
    }
    let pat = CooPattern::from_flat(shape, &flat).unwrap();
    let coords: Vec<Vec<usize>> = (0..3).map(|d| pat.coords(d).to_vec()).collect();
    let coo = if separate_mask {
        // every third stored entry masked out
        let (mut own, mut out) = (Vec::new(), Vec::new());
        for (k, &p) in flat.iter().enumerate() {
            if k % 3 == 0 {
                out.push(p)
            } else {
                own.push(p)
            }
        }
        for p in out {
            valid[p] = false;
        }
        let mask = CooMask::Pattern(CooPattern::from_flat(shape, &own).unwrap());
        MaskedCoo::try_new(shape, &coords, vals, mask).unwrap()
    } else {
        MaskedCoo::from_pattern(shape, &coords, vals).unwrap()
    };
    let oracle = MaskedArray::from_bool_mask(
        ArrayD::from_shape_vec(IxDyn(&shape), dense).unwrap(),
        ArrayD::from_shape_vec(IxDyn(&shape), valid).unwrap().view(),
    )
    .unwrap();
    let oracle = oracle.view();
    for name in [
        "sum",
        "amax",
        "argmin",
        "argmax",
        "count",
        "mean",
        "median",
        "var",
        "softmax",
        "log_softmax",
        "softmin",
        "cumsum",
    ] {
        let spec: Op = name.parse().unwrap();
        let dims: Vec<Dims> = match spec.kind() {
            Kind::Normalize => vec![Dims::from(1isize), Dims::from(0isize), Dims::from(2isize)],
            _ => vec![
                Dims::from([0isize, 2]),
                Dims::from(1isize),
                Dims::from(2isize),
                Dims::from([1isize, 2]),
                Dims::All,
            ],
        };
        for d in dims {
            if spec.kind() == Kind::ReduceOne && d.given_len() != Some(1) && d != Dims::All {
                continue;
            }
            let req = OpRequest::new(name).unwrap().dims(d.clone());
            let a = apply_dense(&oracle, &req).unwrap();
            let pool = |n| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build()
                    .unwrap()
            };
            let b = pool(1).install(|| apply_sparse(&coo, &req)).unwrap();
            let b2 = pool(2).install(|| apply_sparse(&coo, &req)).unwrap();
            let bits = |o: &masked::by_name::SparseOutcome| -> (Vec<usize>, Vec<u64>) {
                let v = (0..o.indices.len()).map(|k| at(&o.values, k).to_bits());
                (o.indices.clone(), v.collect())
            };
            assert_eq!(
                bits(&b),
                bits(&b2),
                "{name} {d:?}: thread count changed the result"
            );
            let valid: Vec<usize> = (0..a.mask.len()).filter(|&i| a.mask.get(i)).collect();
            assert_eq!(
                valid, b.indices,
                "{name} {d:?} {shape:?} mask {separate_mask}"
            );
            for (k, &i) in valid.iter().enumerate() {
                let (x, y) = (at(&a.values, i), at(&b.values, k));
                assert!(
                    masked_tests::close(x, y, 1e-9),
                    "{name} {d:?} {shape:?} mask {separate_mask}: dense {x} vs coo {y}"
                );
            }
        }
    }
}
