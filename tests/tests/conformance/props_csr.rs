//! The CSR layout against the dense oracle: for random shapes, stored patterns and masks
//! (empty rows, empty matrices, explicit zeros, NaN and infinities, mask = input pattern,
//! a mask that is not a subset of the input pattern, explicit `false` entries in the
//! mask, no mask at all), every op of the table over dim 1, dim 0 and all dims, keepdim
//! both ways, equals the dense op on the densified input at the output mask, and the
//! stored output pattern equals the output mask; with `usize` and with `u32` column
//! indices.

use masked::by_name::{apply_dense, apply_sparse, Kind, OpRequest};
use masked::{Dims, Element, MaskedArray, MaskedCsr, Pattern, PatternI};
use masked_tests::{at, both_keepdims, conform, opts, value, Opts};
use ndarray::{Array2, IxDyn};
use proptest::prelude::*;
use sprs::{CsMat, CsMatI};

/// How a position of the input is stored.
#[derive(Debug, Clone, Copy)]
enum Cell {
    Unstored,
    Stored(f64),
}

/// Which mask the CSR input gets.
#[derive(Debug, Clone)]
enum MaskKind {
    /// The input's own stored pattern.
    Stored,
    /// A separate mask, given as a bool matrix: `None` unstored, `Some(b)` stored as `b`.
    Own(Vec<Option<bool>>),
    /// No mask: every element valid.
    All,
}

#[derive(Debug, Clone)]
struct Case {
    nrows: usize,
    ncols: usize,
    cells: Vec<Cell>,
    mask: MaskKind,
    opts: Opts,
}

fn case(specials: bool) -> impl Strategy<Value = Case> {
    let dim = prop_oneof![6 => 0usize..7, 1 => 60usize..80];
    shaped(
        specials,
        (dim.clone(), dim).prop_filter("small", |(r, c)| r * c <= 600),
    )
}

/// A case of a shape that `shape` draws.
fn shaped(
    specials: bool, shape: impl Strategy<Value = (usize, usize)>,
) -> impl Strategy<Value = Case> {
    (shape, 0.0f64..1.0)
        .prop_flat_map(move |((nrows, ncols), density)| {
            let n = nrows * ncols;
            let cell = prop_oneof![
                ((1.0 - density) * 100.0) as u32 + 1 => Just(Cell::Unstored),
                (density * 100.0) as u32 + 1 => value(specials).prop_map(Cell::Stored),
            ];
            let own = prop::collection::vec(
                prop_oneof![3 => Just(None), 2 => Just(Some(true)), 1 => Just(Some(false))],
                n,
            );
            let mask = prop_oneof![
                2 => Just(MaskKind::Stored),
                2 => own.prop_map(MaskKind::Own),
                1 => Just(MaskKind::All),
            ];
            (
                Just(nrows),
                Just(ncols),
                prop::collection::vec(cell, n),
                mask,
                opts(),
            )
        })
        .prop_map(|(nrows, ncols, cells, mask, opts)| Case {
            nrows,
            ncols,
            cells,
            mask,
            opts,
        })
}

/// A CSR matrix from `(flat position, value)` pairs in increasing position order.
fn csr_of<V>(
    nrows: usize, ncols: usize, entries: impl IntoIterator<Item = (usize, V)>,
) -> CsMat<V> {
    let mut indptr = vec![0usize; nrows + 1];
    let (mut ind, mut dat) = (Vec::new(), Vec::new());
    for (p, v) in entries {
        indptr[p / ncols + 1] += 1;
        ind.push(p % ncols);
        dat.push(v);
    }
    for r in 0..nrows {
        indptr[r + 1] += indptr[r];
    }
    CsMat::new((nrows, ncols), indptr, ind, dat)
}

/// Every op of the table, every dims choice, on CSR and on the dense oracle.
fn check<T: Element>(c: &Case, conv: impl Fn(f64) -> T) -> Result<(), TestCaseError> {
    let (nrows, ncols) = (c.nrows, c.ncols);
    // the CSR input
    let mut dense = Array2::<T>::default((nrows, ncols));
    let mut stored = Array2::from_elem((nrows, ncols), false);
    let mut entries = Vec::new();
    for (p, cell) in c.cells.iter().enumerate() {
        if let Cell::Stored(v) = *cell {
            entries.push((p, conv(v)));
            dense[[p / ncols, p % ncols]] = conv(v);
            stored[[p / ncols, p % ncols]] = true;
        }
    }
    let m: CsMat<T> = csr_of(nrows, ncols, entries);
    let dense = dense.into_dyn();
    // the same matrix with `u32` column indices: the lane kernels read both widths
    // through one `Cols` type, so each case checks both against the oracle
    let (ptr, idx, val) = m.clone().into_raw_storage();
    let idx32: Vec<u32> = idx.iter().map(|&c| c as u32).collect();
    let m32 = CsMatI::<T, u32, usize>::new((nrows, ncols), ptr, idx32, val);
    let (csr, csr32, dmask) = match &c.mask {
        MaskKind::Stored => (
            MaskedCsr::from_pattern(m.view()).unwrap(),
            MaskedCsr::from_pattern(m32.view()).unwrap(),
            Some(stored),
        ),
        MaskKind::All => (
            MaskedCsr::unmasked(m.view()).unwrap(),
            MaskedCsr::unmasked(m32.view()).unwrap(),
            None,
        ),
        MaskKind::Own(bools) => {
            let mut valid = Array2::from_elem((nrows, ncols), false);
            let mut entries = Vec::new();
            for (p, b) in bools.iter().enumerate() {
                if let Some(b) = *b {
                    entries.push((p, b));
                    valid[[p / ncols, p % ncols]] = b;
                }
            }
            let mm: CsMat<bool> = csr_of(nrows, ncols, entries);
            let pat = Pattern::from_predicate(&mm.view(), |&b| b).unwrap();
            let (p, i) = (pat.indptr().to_vec(), pat.indices());
            let i32s: Vec<u32> = i.iter().map(|&c| c as u32).collect();
            let pat32 = PatternI::<u32>::try_from_parts((nrows, ncols), p, i32s).unwrap();
            (
                MaskedCsr::with_mask(m.view(), pat).unwrap(),
                MaskedCsr::with_mask(m32.view(), pat32).unwrap(),
                Some(valid),
            )
        }
    };
    let dmask_dyn = dmask.map(|a| a.into_dyn());
    let oracle = match &dmask_dyn {
        Some(mk) => MaskedArray::from_bool_mask(dense.view(), mk.view()).unwrap(),
        None => MaskedArray::unmasked(dense.view()),
    };
    let oracle: masked::MaskedView<'_, T, IxDyn> = oracle;
    let choices = |kind: Kind| match kind {
        Kind::Unary => vec![(Dims::All, false)],
        Kind::Binary => vec![],
        Kind::Normalize => vec![
            (Dims::from(1isize), false),
            (Dims::from(0isize), false),
            (Dims::from(-1isize), false),
        ],
        Kind::ReduceOne => both_keepdims([Dims::from(1isize), Dims::from(0isize), Dims::All]),
        Kind::Reduce => both_keepdims([
            Dims::from(1isize),
            Dims::from(0isize),
            Dims::All,
            Dims::from([0isize, 1]),
        ]),
    };
    conform(&oracle, &csr, choices, &c.opts)?;
    conform(&oracle, &csr32, choices, &c.opts)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn csr_f64_equals_dense_oracle(c in case(true)) {
        check::<f64>(&c, |v| v)?;
    }

    #[test]
    fn csr_i32_equals_dense_oracle(c in case(false)) {
        check::<i32>(&c, |v| v as i32)?;
    }

    #[test]
    fn csr_f32_equals_dense_oracle(c in case(true)) {
        check::<f32>(&c, |v| v as f32)?;
    }

    /// Half values stored as halves, computed in f32, rounded once: the sparse layout
    /// agrees with the dense one within two half ulps.
    #[test]
    fn csr_f16_equals_dense_oracle(c in case(true)) {
        check::<half::f16>(&c, half::f16::from_f64)?;
    }

    #[test]
    fn csr_bf16_equals_dense_oracle(c in case(true)) {
        check::<half::bf16>(&c, half::bf16::from_f64)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// Over 2048 columns the entries are sorted into columns through blocks of
    /// columns (the ops along dim 0 that need each column's values together).
    #[test]
    fn wide_csr_equals_dense_oracle(c in shaped(true, (1usize..4, 2048usize..2300))) {
        check::<f32>(&c, |v| v as f32)?;
    }
}

/// Rows long enough to be folded in pieces (more than 2^16 stored entries), with and
/// without a mask: equal to the dense oracle, and bit for bit the same on 1 and 2
/// threads.
#[test]
fn huge_rows_are_split_and_thread_count_independent() {
    let (nrows, ncols) = (3, 200_003);
    let mut entries = Vec::new();
    let mut dense = Array2::<f32>::zeros((nrows, ncols));
    let mut state = 12345u64;
    for r in 0..nrows {
        for c in 0..ncols {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let keep = if r == 1 {
                state >> 60 != 0
            } else {
                state >> 58 == 0
            };
            if keep {
                let v = ((state >> 33) % 2001) as f32 / 1000.0 - 1.0;
                entries.push((r * ncols + c, v));
                dense[[r, c]] = v;
            }
        }
    }
    let m: CsMat<f32> = csr_of(nrows, ncols, entries);
    let dense = dense.into_dyn();
    let stored = {
        let mut s = Array2::from_elem((nrows, ncols), false);
        for (_, (r, c)) in m.iter() {
            s[[r, c]] = true;
        }
        s.into_dyn()
    };
    for unmasked in [false, true] {
        let csr = if unmasked {
            MaskedCsr::unmasked(m.view()).unwrap()
        } else {
            MaskedCsr::from_pattern(m.view()).unwrap()
        };
        let oracle = if unmasked {
            MaskedArray::unmasked(dense.view())
        } else {
            MaskedArray::from_bool_mask(dense.view(), stored.view()).unwrap()
        };
        for name in [
            "sum",
            "argmax",
            "argmin",
            "var",
            "logsumexp",
            "median",
            "amax",
            "count",
        ] {
            for dims in [Dims::from(1isize), Dims::All] {
                let req = OpRequest::new(name).unwrap().dims(dims.clone());
                let one = rayon::ThreadPoolBuilder::new()
                    .num_threads(1)
                    .build()
                    .unwrap();
                let two = rayon::ThreadPoolBuilder::new()
                    .num_threads(2)
                    .build()
                    .unwrap();
                let s1 = one.install(|| apply_sparse(&csr, &req)).unwrap();
                let s2 = two.install(|| apply_sparse(&csr, &req)).unwrap();
                assert_eq!(s1, s2, "{name} {dims:?}: thread count changed the result");
                let d = apply_dense(&oracle, &req).unwrap();
                let valid: Vec<usize> = (0..d.mask.len()).filter(|&i| d.mask.get(i)).collect();
                assert_eq!(valid, s1.indices, "{name} {dims:?}");
                for (k, &i) in valid.iter().enumerate() {
                    let (x, y) = (at(&d.values, i), at(&s1.values, k));
                    assert!(
                        (x - y).abs() <= 1e-4 * x.abs().max(1.0),
                        "{name} {dims:?} unmasked={unmasked}: dense {x} vs csr {y}"
                    );
                }
            }
        }
    }
}
