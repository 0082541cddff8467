//! Unary elementwise ops on the sparse layouts beyond the cross-layout properties: a
//! mask-free sparse input (zero-preserving ops keep the stored positions, others are
//! refused rather than densified) and structure sharing when the mask is the pattern.

use masked::{CooMask, MaskedCoo, MaskedCsr, MaskedError, MaskedOps};
use sprs::CsMat;
use std::borrow::Cow;

#[test]
fn mask_free_sparse_keeps_stored_positions_or_refuses() {
    // [[-1, ., 4], [., 0.25, .]] with no mask: every position valid, unstored ones 0
    let mat = CsMat::new(
        (2, 3),
        vec![0, 2, 3],
        vec![0, 2, 1],
        vec![-1.0f64, 4.0, 0.25],
    );
    let a = MaskedCsr::unmasked(mat.view()).unwrap();
    let r = a.relu().unwrap();
    assert_eq!(r.indptr().raw_storage(), &[0, 2, 3]);
    assert_eq!(r.indices(), &[0, 2, 1]);
    assert_eq!(r.data(), &[0.0, 4.0, 0.25]);
    let s = a.sqrt().unwrap();
    assert!(s.data()[0].is_nan() && s.data()[1] == 2.0 && s.data()[2] == 0.5);
    for e in [a.exp().err(), a.cos().err(), a.log().err()] {
        assert!(matches!(e, Some(MaskedError::Unsupported { .. })), "{e:?}");
    }
    // clamp keeps 0 only when its range holds 0
    assert!(a.clamp(Some(-0.5), Some(0.5)).is_ok());
    assert!(matches!(
        a.clamp(Some(1.0), None),
        Err(MaskedError::Unsupported { .. })
    ));

    let coo = MaskedCoo::try_new(
        [2, 3],
        &[vec![0, 0, 1], vec![0, 2, 1]],
        vec![-1.0f64, 4.0, 0.25],
        CooMask::All,
    )
    .unwrap();
    let r = coo.neg().unwrap();
    assert_eq!(r.pattern().flat(), &[0, 2, 4]);
    assert_eq!(r.values(), &[1.0, -4.0, -0.25]);
    assert!(matches!(
        coo.sigmoid(),
        Err(MaskedError::Unsupported { .. })
    ));
}

#[test]
fn mask_equal_to_pattern_shares_the_column_indices() {
    let mat = CsMat::new(
        (2, 3),
        vec![0, 2, 3],
        vec![0, 2, 1],
        vec![-1.0f32, 4.0, 0.25],
    );
    let a = MaskedCsr::from_pattern(mat.view()).unwrap();
    let e = a.exp().unwrap();
    let (_, indices, values) = e.into_raw_storage();
    assert!(matches!(indices, Cow::Borrowed(b) if std::ptr::eq(b, mat.indices())));
    for (v, x) in values.iter().zip([-1.0f32, 4.0, 0.25]) {
        assert!(
            (v - x.exp()).abs() <= 2.0 * f32::EPSILON * x.exp(),
            "{v} vs exp({x})"
        );
    }
    // a valid NaN stays a valid NaN; a separate mask drops what it masks out
    let mat = CsMat::new(
        (1, 3),
        vec![0, 3],
        vec![0, 1, 2],
        vec![-1.0f64, f64::NAN, 9.0],
    );
    let mask = masked::Pattern::from_coords((1, 3), &[vec![0, 0], vec![0, 2]]).unwrap();
    let a = MaskedCsr::with_mask(mat.view(), mask).unwrap();
    let r = a.sqrt().unwrap();
    assert_eq!(r.indices(), &[0, 2]);
    assert!(r.data()[0].is_nan() && r.data()[1] == 3.0);
}
