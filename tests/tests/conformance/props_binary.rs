//! Binary elementwise ops, properties: on random 2-D data with random stored patterns and
//! independent random masks (valid-but-unstored positions are zeros), every binary op
//! under both rules gives on CSR and COO exactly the dense result (stored exactly at the
//! dense output mask); the strict rule keeps `sum(a + b) == sum(a) + sum(b)` per row;
//! a scalar on the left is the swapped op; mask-free sparse operands keep their stored
//! union only for ops with `op(0, 0) == 0`; structure is shared where it can be.

use masked::by_name::{apply_binary, apply_binary_sparse, BinOp, ZipOutcome};
use masked::{
    BitMask, CooMask, CooPattern, MaskRule, MaskedArray, MaskedBinaryOps, MaskedCoo, MaskedCsr,
    MaskedError, MaskedOps, Op, Pattern, Splat, Values,
};
use ndarray::{Array2, IxDyn};
use proptest::prelude::*;
use sprs::CsMat;
use std::borrow::Cow;

#[derive(Debug, Clone)]
struct Case {
    rows: usize,
    cols: usize,
    /// (stored, value, mask) per position of a and of b.
    a: Vec<(bool, f64, bool)>,
    b: Vec<(bool, f64, bool)>,
    op: usize,
    rule_and: bool,
}

fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        8 => (-40i32..40).prop_map(|v| f64::from(v) / 8.0),
        1 => Just(0.0),
        1 => prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(-f64::INFINITY)],
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..7, 1usize..9).prop_flat_map(|(rows, cols)| {
        let n = rows * cols;
        let entry = || (any::<bool>(), value(), prop::bool::weighted(0.7));
        (
            Just(rows),
            Just(cols),
            prop::collection::vec(entry(), n),
            prop::collection::vec(entry(), n),
            0usize
                ..Op::ALL
                    .iter()
                    .filter(|o| o.kind() == masked::by_name::Kind::Binary)
                    .count(),
            any::<bool>(),
        )
            .prop_map(|(rows, cols, a, b, op, rule_and)| Case {
                rows,
                cols,
                a,
                b,
                op,
                rule_and,
            })
    })
}

fn binary_ops() -> Vec<BinOp> {
    Op::ALL
        .iter()
        .filter(|o| o.kind() == masked::by_name::Kind::Binary)
        .map(|o| o.binary().unwrap())
        .collect()
}

/// The CSR matrix of the stored entries, and the mask pattern.
fn csr(c: &Case, e: &[(bool, f64, bool)]) -> (CsMat<f64>, Pattern) {
    let (mut ptr, mut cols, mut vals) = (vec![0], vec![], vec![]);
    let (mut mr, mut mc) = (vec![], vec![]);
    for i in 0..c.rows {
        for j in 0..c.cols {
            let (stored, v, m) = e[i * c.cols + j];
            if stored {
                cols.push(j);
                vals.push(v);
            }
            if m {
                mr.push(i);
                mc.push(j);
            }
        }
        ptr.push(cols.len());
    }
    let mat = CsMat::new((c.rows, c.cols), ptr, cols, vals);
    (
        mat,
        Pattern::from_coords((c.rows, c.cols), &[mr.to_vec(), mc.to_vec()]).unwrap(),
    )
}

fn coo(c: &Case, e: &[(bool, f64, bool)]) -> MaskedCoo<f64> {
    let stored: Vec<usize> = (0..e.len()).filter(|&k| e[k].0).collect();
    let coords = masked::sparse::unravel(&[c.rows, c.cols], &stored);
    let vals = stored.iter().map(|&k| e[k].1).collect();
    let masked: Vec<usize> = (0..e.len()).filter(|&k| e[k].2).collect();
    let mask = CooPattern::from_flat([c.rows, c.cols], &masked).unwrap();
    MaskedCoo::try_new([c.rows, c.cols], &coords, vals, CooMask::Pattern(mask)).unwrap()
}

/// The dense oracle: unstored positions are 0.
fn dense(c: &Case, e: &[(bool, f64, bool)]) -> (Array2<f64>, BitMask) {
    let v = e.iter().map(|&(s, v, _)| if s { v } else { 0.0 }).collect();
    let m = BitMask::from_bools([c.rows, c.cols], e.iter().map(|x| x.2)).unwrap();
    (Array2::from_shape_vec((c.rows, c.cols), v).unwrap(), m)
}

fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

fn agree(
    what: &str, d: &Result<ZipOutcome, MaskedError>,
    s: Result<masked::by_name::SparseZipOutcome, MaskedError>,
) -> Result<(), TestCaseError> {
    match (d, s) {
        (Err(x), Err(y)) => {
            prop_assert_eq!(
                std::mem::discriminant(x),
                std::mem::discriminant(&y),
                "{}: {:?} vs {:?}",
                what,
                x,
                y
            );
            Ok(())
        }
        (Ok(d), Ok(s)) => {
            let valid: Vec<usize> = (0..d.mask.len()).filter(|&i| d.mask.get(i)).collect();
            prop_assert_eq!(&s.indices, &valid, "{}: stored positions", what);
            match (&d.values, &s.values) {
                (Values::Num(x), Values::Num(y)) => {
                    for (k, &i) in valid.iter().enumerate() {
                        let (p, q) = (masked_tests::at(x, i), masked_tests::at(y, k));
                        prop_assert!(same(p, q), "{}: at {}: dense {} sparse {}", what, i, p, q);
                    }
                }
                (Values::Bool(x), Values::Bool(y)) => {
                    for (k, &i) in valid.iter().enumerate() {
                        prop_assert_eq!(x[i], y[k], "{}: at {}", what, i);
                    }
                }
                _ => prop_assert!(false, "{}: value kinds differ", what),
            }
            Ok(())
        }
        (d, s) => {
            prop_assert!(
                false,
                "{}: dense {:?} vs sparse {:?}",
                what,
                d.as_ref().err(),
                s.err()
            );
            Ok(())
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Sparse ⊙ sparse (merge or shared structure), sparse ⊙ dense and sparse ⊙ scalar
    /// equal the dense result, under both rules.
    #[test]
    fn every_layout_equals_dense(mut c in case()) {
        let op = binary_ops()[c.op];
        let rule = if c.rule_and { MaskRule::And } else { MaskRule::Strict };
        if !c.rule_and && c.op % 2 == 0 {
            // strict with equal masks half the time (else the mismatch error is compared)
            for k in 0..c.b.len() {
                c.b[k].2 = c.a[k].2;
            }
        }
        let what = format!("{} {:?}", op.name(), rule);
        let (da, ma) = dense(&c, &c.a);
        let (db, mb) = dense(&c, &c.b);
        let xa = MaskedArray::new(da.view().into_dyn(), ma.clone()).unwrap();
        let xb = MaskedArray::new(db.view().into_dyn(), mb).unwrap();
        let want = apply_binary(&xa, &xb, op, rule, false);
        let ((ma_, pa), (mb_, pb)) = (csr(&c, &c.a), csr(&c, &c.b));
        let sa = MaskedCsr::with_mask(ma_.view(), pa).unwrap();
        let sb = MaskedCsr::with_mask(mb_.view(), pb).unwrap();
        agree(&format!("csr {what}"), &want, apply_binary_sparse(&sa, &sb, op, rule, false))?;
        agree(&format!("coo {what}"), &want, apply_binary(&coo(&c, &c.a), &coo(&c, &c.b), op, rule, false))?;
        // sparse ⊙ dense
        agree(&format!("csr-dense {what}"), &want, apply_binary_sparse(&sa, &xb, op, rule, false))?;
        agree(&format!("coo-dense {what}"), &want, apply_binary(&coo(&c, &c.a), &xb, op, rule, false))?;
        // a scalar on either side
        for first in [false, true] {
            let s = Splat(1.5);
            let want = apply_binary(&xa, &s, op, rule, first);
            agree(&format!("csr scalar {what} {first}"), &want, apply_binary_sparse(&sa, &s, op, rule, first))?;
            agree(&format!("coo scalar {what} {first}"), &want, apply_binary(&coo(&c, &c.a), &s, op, rule, first))?;
        }
    }

    /// The strict rule's identity: with equal masks, `sum(a + b, dim 1) == sum(a) + sum(b)`
    /// (up to rounding) on every row, NaN-free values.
    #[test]
    fn strict_sum_is_additive(c in case()) {
        let fin = |e: &[(bool, f64, bool)]| e.iter().map(|&(s, v, m)| (s, if v.is_finite() { v } else { 1.0 }, m)).collect::<Vec<_>>();
        let a = fin(&c.a);
        let mut b = fin(&c.b);
        for k in 0..b.len() {
            b[k].2 = a[k].2;
        }
        let (da, ma) = dense(&c, &a);
        let (db, mb) = dense(&c, &b);
        let xa = MaskedArray::new(da.view().into_dyn(), ma).unwrap();
        let xb = MaskedArray::new(db.view().into_dyn(), mb).unwrap();
        let s = xa.add(&xb, MaskRule::Strict).unwrap();
        let lhs = s.sum(1, false).unwrap();
        let (ra, rb) = (xa.sum(1, false).unwrap(), xb.sum(1, false).unwrap());
        for i in 0..c.rows {
            let (l, r) = (lhs.values()[i], ra.values()[i] + rb.values()[i]);
            prop_assert!((l - r).abs() <= 1e-9 * (1.0 + r.abs()), "row {}: {} vs {}", i, l, r);
            prop_assert_eq!(lhs.mask().unwrap().get(i), ra.mask().unwrap().get(i));
        }
    }
}

#[test]
fn mask_free_sparse_operands_keep_the_stored_union_or_refuse() {
    // [[1, ., 2]] + [[., 3, .]] with no masks: every position valid; add keeps 0 at (0, 0)
    let a = CsMat::new((1, 3), vec![0, 2], vec![0, 2], vec![1.0f64, 2.0]);
    let b = CsMat::new((1, 3), vec![0, 1], vec![1], vec![3.0f64]);
    let (sa, sb) = (
        MaskedCsr::unmasked(a.view()).unwrap(),
        MaskedCsr::unmasked(b.view()).unwrap(),
    );
    let r = sa.add(&sb, MaskRule::Strict).unwrap();
    assert_eq!(r.indices(), &[0, 1, 2]);
    assert_eq!(r.data(), &[1.0, 3.0, 2.0]);
    // exp-like ops would store every position: refused, never densified
    assert!(matches!(
        sa.div(&sb, MaskRule::Strict),
        Err(MaskedError::Unsupported { .. })
    ));
    assert!(matches!(
        sa.eq(&sb, MaskRule::Strict),
        Err(MaskedError::Unsupported { .. })
    ));
    assert!(sa.lt(&sb, MaskRule::Strict).is_ok());
    // with a scalar: mul keeps 0, add does not
    assert!(sa.mul(&Splat(2.0), MaskRule::Strict).is_ok());
    assert!(matches!(
        sa.add(&Splat(2.0), MaskRule::Strict),
        Err(MaskedError::Unsupported { .. })
    ));
    // a mask-free sparse operand with a dense one would store every position
    let d = ndarray::ArrayD::<f64>::ones(IxDyn(&[1, 3]));
    assert!(matches!(
        sa.mul(&MaskedArray::unmasked(d.view()), MaskRule::Strict),
        Err(MaskedError::Unsupported { .. })
    ));
}

#[test]
fn shared_structure_is_borrowed_not_copied() {
    let a = CsMat::new((2, 3), vec![0, 2, 3], vec![0, 2, 1], vec![1.0f32, 2.0, 3.0]);
    let sa = MaskedCsr::from_pattern(a.view()).unwrap();
    let sb = MaskedCsr::from_pattern(a.view()).unwrap();
    let r = sa.mul(&sb, MaskRule::Strict).unwrap();
    let (_, idx, vals) = r.into_raw_storage();
    assert!(matches!(idx, Cow::Borrowed(b) if std::ptr::eq(b, a.indices())));
    assert_eq!(vals, vec![1.0, 4.0, 9.0]);
    let s = sa.sub(&Splat(1.0), MaskRule::Strict).unwrap();
    assert!(matches!(s.into_raw_storage().1, Cow::Borrowed(_)));
}

#[test]
fn strict_errors_name_the_position() {
    let x = ndarray::array![[1.0f64, 2.0], [3.0, 4.0]].into_dyn();
    let a = MaskedArray::from_bool_mask(
        x.view(),
        ndarray::array![[true, true], [true, false]].view(),
    )
    .unwrap();
    let b = MaskedArray::from_bool_mask(
        x.view(),
        ndarray::array![[true, true], [false, false]].view(),
    )
    .unwrap();
    match a.add(&b, MaskRule::Strict) {
        Err(MaskedError::MaskMismatch {
            position,
            left_valid,
            ..
        }) => {
            assert_eq!(position, vec![1, 0]);
            assert!(left_valid);
        }
        other => panic!("{other:?}"),
    }
    let r = a.add(&b, MaskRule::And).unwrap();
    assert_eq!(r.mask().unwrap().to_vec(), vec![true, true, false, false]);
    assert_eq!(r.values().as_slice().unwrap(), &[2.0, 4.0, 0.0, 0.0]);
    // a plain operand takes the masked one's mask
    let p = a
        .mul(&MaskedArray::unmasked(x.view()), MaskRule::Strict)
        .unwrap();
    assert_eq!(p.mask().unwrap().to_vec(), vec![true, true, true, false]);
    assert_eq!(p.values().as_slice().unwrap(), &[1.0, 4.0, 9.0, 0.0]);
}

/// A sparse operand against a masked dense one under the strict rule, on CSR and COO:
/// the error names the first position (row-major) valid on one side only, as the dense
/// rule does, whichever side it is valid on; a matching mask (also broadcast) passes.
#[test]
fn sparse_dense_strict_errors_name_the_first_position() {
    // entries (0,0) (0,2) (1,1) (2,3) of a 3x4 array
    let csr = CsMat::new(
        (3, 4),
        vec![0, 2, 3, 4],
        vec![0, 2, 1, 3],
        vec![1.0f64, 2.0, 3.0, 4.0],
    );
    let a = MaskedCsr::from_pattern(csr.view()).unwrap();
    let coords = [vec![0usize, 0, 1, 2], vec![0usize, 2, 1, 3]];
    let c = MaskedCoo::from_pattern([3, 4], &coords, vec![1.0f64, 2.0, 3.0, 4.0]).unwrap();
    let mine = [(0, 0), (0, 2), (1, 1), (2, 3)];
    let x = ndarray::Array2::<f64>::ones((3, 4)).into_dyn();
    // the dense mask: the entries' positions, less `drop`, plus `add`
    let check =
        |drop: &[(usize, usize)], add: &[(usize, usize)], want: Option<(Vec<usize>, bool)>| {
            let m = ndarray::Array2::from_shape_fn((3, 4), |p| {
                (mine.contains(&p) && !drop.contains(&p)) || add.contains(&p)
            });
            let d = MaskedArray::from_bool_mask(x.view(), m.into_dyn().view()).unwrap();
            for (layout, r) in [
                ("csr", a.mul(&d, MaskRule::Strict).map(drop_it)),
                ("coo", c.mul(&d, MaskRule::Strict).map(drop_it)),
            ] {
                match (&want, r) {
                    (None, Ok(())) => {}
                    (
                        Some((pos, left)),
                        Err(MaskedError::MaskMismatch {
                            position,
                            left_valid,
                            ..
                        }),
                    ) => {
                        assert_eq!(
                            (&position, left_valid),
                            (pos, *left),
                            "{layout} {drop:?} {add:?}"
                        )
                    }
                    (w, r) => panic!("{layout} {drop:?} {add:?}: want {w:?}, got {r:?}"),
                }
            }
        };
    check(&[], &[], None);
    check(&[(1, 1)], &[], Some((vec![1, 1], true)));
    check(&[], &[(2, 0)], Some((vec![2, 0], false)));
    // both kinds: the earlier position is named, whichever kind it is
    check(&[(0, 2)], &[(0, 1)], Some((vec![0, 1], false)));
    check(&[(0, 2)], &[(1, 0)], Some((vec![0, 2], true)));
    // a broadcast row mask [1, 4]: valid at columns 0 and 2 of every row
    let s = CsMat::new(
        (2, 4),
        vec![0, 2, 4],
        vec![0, 2, 0, 2],
        vec![1.0f64, 2.0, 3.0, 4.0],
    );
    let s = MaskedCsr::from_pattern(s.view()).unwrap();
    let row = ndarray::Array2::<f64>::ones((1, 4)).into_dyn();
    let rm = ndarray::array![[true, false, true, false]].into_dyn();
    let d = MaskedArray::from_bool_mask(row.view(), rm.view()).unwrap();
    assert!(s.mul(&d, MaskRule::Strict).is_ok());
    let rm = ndarray::array![[true, true, true, false]].into_dyn();
    let d = MaskedArray::from_bool_mask(row.view(), rm.view()).unwrap();
    match s.mul(&d, MaskRule::Strict) {
        Err(MaskedError::MaskMismatch {
            position,
            left_valid,
            ..
        }) => assert_eq!((position, left_valid), (vec![0, 1], false)),
        other => panic!("{other:?}"),
    }
}

fn drop_it<X>(_: X) {}

fn positions(m: &BitMask) -> Vec<usize> {
    (0..m.len()).filter(|&i| m.get(i)).collect()
}

fn csr_positions(p: &Pattern, cols: usize) -> Vec<usize> {
    (0..p.shape().0)
        .flat_map(|r| p.row(r).iter().map(move |&c| r * cols + c))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Mask algebra on every layout equals the dense bit ops: predicates,
    /// masked_where, and/or/xor/and_not, where, fill(0), to_dense, compress.
    #[test]
    fn mask_algebra_equals_dense(c in case(), conds in prop::collection::vec(any::<bool>(), 64)) {
        use masked::binary::Predicate;
        use masked::MaskLogic;
        let (da, ma) = dense(&c, &c.a);
        let (db, mb) = dense(&c, &c.b);
        let xa = MaskedArray::new(da.view().into_dyn(), ma.clone()).unwrap();
        let xb = MaskedArray::new(db.view().into_dyn(), mb.clone()).unwrap();
        let ((mat_a, pa), (mat_b, pb)) = (csr(&c, &c.a), csr(&c, &c.b));
        let sa = MaskedCsr::with_mask(mat_a.view(), pa.clone()).unwrap();
        let sb = MaskedCsr::with_mask(mat_b.view(), pb.clone()).unwrap();
        let (oa, ob) = (coo(&c, &c.a), coo(&c, &c.b));
        for text in ["isnan", "isinf", "isfinite", "gt:0.5", "le:0", "eq:0"] {
            let p = Predicate::parse(text).unwrap();
            let want = positions(&xa.predicate(p));
            prop_assert_eq!(csr_positions(&sa.predicate(p).unwrap(), c.cols), want.clone(), "csr {}", text);
            prop_assert_eq!(oa.predicate(p).unwrap().flat(), want.clone(), "coo {}", text);
            let w = positions(xa.masked_where(p).mask().unwrap());
            prop_assert_eq!(csr_positions(&sa.masked_where(p).unwrap().valid_pattern().unwrap(), c.cols), w.clone(), "csr masked_where {}", text);
            prop_assert_eq!(oa.masked_where(p).unwrap().valid_pattern().unwrap().flat(), w, "coo masked_where {}", text);
        }
        for logic in [MaskLogic::And, MaskLogic::Or, MaskLogic::Xor, MaskLogic::AndNot] {
            let want = positions(&ma.logic(&mb, logic).unwrap());
            prop_assert_eq!(csr_positions(&pa.logic(&pb, logic).unwrap(), c.cols), want.clone(), "{:?}", logic);
            let (qa, qb) = (oa.valid_pattern().unwrap(), ob.valid_pattern().unwrap());
            prop_assert_eq!(qa.logic(&qb, logic).unwrap().flat(), want, "coo {:?}", logic);
        }
        // where, with a random condition; an all-true condition is the identity
        let n = c.rows * c.cols;
        let cond = BitMask::from_bools([c.rows, c.cols], conds.iter().cycle().take(n).copied()).unwrap();
        let w = masked::dense::select(&cond, None, &xa, &xb).unwrap();
        let valid = positions(w.mask().unwrap());
        let wv = w.values().as_slice().unwrap().to_vec();
        let sw = masked::csr::select(&cond, &sa, &sb).unwrap();
        let sflat: Vec<usize> = sw.iter().map(|(_, (r, col))| r * c.cols + col).collect();
        prop_assert_eq!(&sflat, &valid, "csr where");
        for (k, (v, _)) in sw.iter().enumerate() {
            prop_assert!(same(*v, wv[valid[k]]), "csr where value");
        }
        let ow = masked::coo::select(&cond, &oa, &ob).unwrap();
        prop_assert_eq!(ow.indices(), &valid[..], "coo where");
        for (k, v) in ow.values().iter().enumerate() {
            prop_assert!(same(*v, wv[valid[k]]), "coo where value");
        }
        let all = BitMask::filled([c.rows, c.cols], true).unwrap();
        let id = masked::dense::select(&all, None, &xa, &xb).unwrap();
        prop_assert_eq!(id.mask().unwrap(), &ma);
        for i in positions(&ma) {
            prop_assert!(same(id.values().as_slice().unwrap()[i], da.as_slice().unwrap()[i]));
        }
        // fill(0), to_dense, compress
        let comp = xa.compress();
        let cs = sa.compress().unwrap();
        prop_assert_eq!(cs.len(), comp.len());
        for (x, y) in cs.iter().zip(&comp) {
            prop_assert!(same(*x, *y), "csr compress");
        }
        let co = oa.compress().unwrap();
        for (x, y) in co.iter().zip(&comp) {
            prop_assert!(same(*x, *y), "coo compress");
        }
        let fz = oa.fill_zero().unwrap();
        prop_assert_eq!(&fz.pattern().flat()[..], &positions(&ma)[..]);
        let filled = xa.filled(-7.0);
        for (x, y) in sa.filled(-7.0).unwrap().iter().zip(filled.iter()) {
            prop_assert!(same(*x, *y), "csr to_dense");
        }
        for (x, y) in oa.filled(-7.0).unwrap().iter().zip(filled.iter()) {
            prop_assert!(same(*x, *y), "coo to_dense");
        }
    }
}
