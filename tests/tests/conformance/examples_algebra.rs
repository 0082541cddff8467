//! The worked examples of the masked-algebra API, through the facade `masked::` (as a
//! user writes them): the floor_divide domain rule on one run, mask logic on every
//! layout, predicates, `where`, and a fused reduction.

use masked::binary::{KeepBin, KeepZip, Predicate, Src};
use masked::{
    BitMask, CooPattern, MaskLogic, MaskRule, MaskedArray, MaskedArrayD, MaskedOps, PatternI,
    ZipMap,
};
use ndarray::{arr0, array};

#[test]
fn floor_divide_fails_only_at_valid_positions() {
    let (xs, ys) = ([7i32, -7, 5, 1], [2i32, 2, 0, 0]);
    let valid = [0b1011u64]; // position 2 (5 / 0) is masked out: no error there
    let mut out = [0i32; 4];
    let z = KeepZip(KeepBin::FloorDivide);
    let bad = z.run(
        Src::Slice(&xs),
        Src::Slice(&ys),
        Some(masked::Bits::new(&valid, 0)),
        &mut out,
    );
    assert_eq!(bad, Some(3)); // 1 // 0 at a valid position
    let valid = [0b0011u64];
    assert_eq!(
        z.run(
            Src::Slice(&xs),
            Src::Slice(&ys),
            Some(masked::Bits::new(&valid, 0)),
            &mut out
        ),
        None
    );
    assert_eq!(out, [3, -4, 0, 0]); // floor division; 0 where invalid
}

#[test]
fn mask_logic_on_every_layout() {
    let a = BitMask::from_bools([2, 2], [true, true, false, false]).unwrap();
    let col = BitMask::from_bools([2], [true, false]).unwrap();
    assert_eq!(
        a.logic(&col, MaskLogic::AndNot).unwrap().to_vec(),
        vec![false, true, false, false]
    );
    assert_eq!(a.not().to_vec(), vec![false, false, true, true]);
    let a = CooPattern::from_flat([2, 3], &[0, 2, 4]).unwrap();
    let b = CooPattern::from_flat([2, 3], &[2, 5]).unwrap();
    assert_eq!(a.logic(&b, MaskLogic::Xor).unwrap().flat(), vec![0, 4, 5]);
    let a = PatternI::<usize>::from_coords((2, 3), &[vec![0, 0, 1], vec![0, 2, 1]]).unwrap();
    let b = PatternI::<usize>::from_coords((2, 3), &[vec![0, 1], vec![2, 2]]).unwrap();
    assert_eq!(a.logic(&b, MaskLogic::And).unwrap().indices(), &[2]);
    assert_eq!(a.logic(&b, MaskLogic::Or).unwrap().nnz(), 4);
    assert_eq!(a.logic(&b, MaskLogic::AndNot).unwrap().indices(), &[0, 1]);
}

#[test]
fn predicates_where_and_fused() {
    let x = array![1.0f64, f64::NAN, 5.0, 7.0].into_dyn();
    let a = MaskedArray::from_bool_mask(x.view(), array![true, true, true, false].view()).unwrap();
    assert_eq!(
        a.predicate(Predicate::IsNan).to_vec(),
        vec![false, true, false, false]
    );
    assert_eq!(
        a.predicate(Predicate::parse("gt:2").unwrap()).to_vec(),
        vec![false, false, true, false]
    );

    let x = array![1.0f32, 2.0, 3.0].into_dyn();
    let a = MaskedArray::from_bool_mask(x.view(), array![true, false, true].view()).unwrap();
    let zero = arr0(0.0f32).into_dyn();
    let cond = BitMask::from_bools([3], [true, true, false]).unwrap();
    let r = masked::dense::select(&cond, None, &a, &MaskedArray::unmasked(zero.view())).unwrap();
    assert_eq!(r.values().as_slice().unwrap(), &[1.0, 0.0, 0.0]);
    assert_eq!(r.mask().unwrap().to_vec(), vec![true, false, true]);

    let a = array![[1.0f64, 2.0], [3.0, 4.0]].into_dyn();
    let w = array![[10.0f64, 20.0], [30.0, 40.0]].into_dyn();
    let x =
        MaskedArray::from_bool_mask(a.view(), array![[true, false], [true, true]].view()).unwrap();
    let y = MaskedArray::unmasked(w.view());
    // sum(x * w, dim 1) without the product array
    let s: MaskedArrayD<f64> = x
        .zip_view(&y, KeepZip(KeepBin::Mul), MaskRule::Strict)
        .unwrap()
        .sum(1, false)
        .unwrap();
    assert_eq!(s.values().as_slice().unwrap(), &[10.0, 250.0]);
}

#[test]
fn csr_zip_into_a_callers_buffer() {
    use masked::{MaskedBinaryOps, MaskedCsr};
    use sprs::CsMat;
    let x = CsMat::new((2, 3), vec![0, 2, 3], vec![0, 2, 1], vec![1.0f32, 2.0, 3.0]);
    let w = CsMat::new(
        (2, 3),
        vec![0, 2, 3],
        vec![0, 2, 1],
        vec![10.0f32, 20.0, 30.0],
    );
    let (a, b) = (
        MaskedCsr::from_pattern(x.view()).unwrap(),
        MaskedCsr::from_pattern(w.view()).unwrap(),
    );
    let mul = KeepZip(KeepBin::Mul);
    let mut out = vec![0.0f32; 3];
    a.zip_into(&b, &mul, MaskRule::Strict, &mut out).unwrap();
    assert_eq!(out, [10.0, 40.0, 90.0]);
    // the same values as the allocating form, whose structure is x's
    let full = a.mul(&b, MaskRule::Strict).unwrap();
    assert_eq!(full.data(), &out[..]);
    assert_eq!(full.indices(), x.indices());
    a.zip_scalar_into(2.0, &KeepZip(KeepBin::Sub), &mut out)
        .unwrap();
    assert_eq!(out, [-1.0, 0.0, 1.0]);
    // a buffer of another length, another structure, an entry dropped by `and`
    let mut short = vec![0.0f32; 2];
    assert!(a.zip_into(&b, &mul, MaskRule::Strict, &mut short).is_err());
    let y = CsMat::new((2, 3), vec![0, 1, 2], vec![0, 1], vec![1.0f32, 1.0]);
    let c = MaskedCsr::from_pattern(y.view()).unwrap();
    let e = a.zip_into(&c, &mul, MaskRule::And, &mut out).unwrap_err();
    assert!(e.to_string().contains("structures differ"), "{e}");
    let half = PatternI::<usize>::try_from_parts((2, 3), vec![0, 1, 2], vec![0, 1]).unwrap();
    let d = MaskedCsr::with_mask(w.view(), half).unwrap();
    let e = a.zip_into(&d, &mul, MaskRule::And, &mut out).unwrap_err();
    assert!(e.to_string().contains("structures differ"), "{e}");
    // a matrix masked by a sub-pattern writes one value per valid entry
    let sub = PatternI::<usize>::try_from_parts((2, 3), vec![0, 1, 2], vec![2, 1]).unwrap();
    let (p, q) = (
        MaskedCsr::with_mask(x.view(), sub.clone()).unwrap(),
        MaskedCsr::with_mask(w.view(), sub).unwrap(),
    );
    let mut two = vec![0.0f32; 2];
    p.zip_into(&q, &mul, MaskRule::Strict, &mut two).unwrap();
    assert_eq!(two, [40.0, 90.0]);
}
