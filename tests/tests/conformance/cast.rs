//! `cast` and the `dtype=` of a request, on every layout: hand-checked conversions, the
//! errors at valid positions only, and `dtype` equal to cast-then-op.

use masked::by_name::{self, apply_dense, apply_sparse, ByNameSparse, OpRequest};
use masked::half::{bf16, f16};
use masked::{
    BitMask, CooMask, DType, DynVec, MaskedArray, MaskedCoo, MaskedCsr, MaskedError, MaskedOps,
    Pattern,
};
use ndarray::{ArrayD, IxDyn};
use sprs::CsMat;

fn dense(shape: &[usize], v: Vec<f32>, valid: &[bool]) -> (ArrayD<f32>, BitMask) {
    let a = ArrayD::from_shape_vec(IxDyn(shape), v).unwrap();
    let m = BitMask::from_bools(shape, valid.iter().copied()).unwrap();
    (a, m)
}

#[test]
fn float_to_int_truncates_toward_zero_and_ignores_invalid_nan() {
    let (a, m) = dense(
        &[2, 3],
        vec![1.9, -1.9, f32::NAN, 2.5e9, -0.5, 7.0],
        &[true, true, false, false, true, true],
    );
    let x = MaskedArray::new(a.view(), m).unwrap();
    let c = x.cast::<i32>().unwrap();
    assert_eq!(c.values().as_slice().unwrap(), &[1, -1, 0, 0, 0, 7]);
    assert_eq!(
        c.mask_array().iter().copied().collect::<Vec<_>>(),
        [true, true, false, false, true, true]
    );
    // i64 holds 2.5e9; NaN stays masked out
    let c = x.cast::<i64>().unwrap();
    assert_eq!(c.values().as_slice().unwrap(), &[1, -1, 0, 0, 0, 7]);
}

#[test]
fn a_valid_value_the_target_cannot_hold_is_an_error_naming_it() {
    for (v, want) in [
        (f32::NAN, "NaN"),
        (f32::INFINITY, "inf"),
        (3e9, "3000000000"),
    ] {
        let (a, m) = dense(&[2], vec![1.0, v], &[true, true]);
        let x = MaskedArray::new(a.view(), m).unwrap();
        match x.cast::<i32>() {
            Err(MaskedError::CastOutOfRange { from, to, value }) => {
                assert_eq!((from, to), (DType::F32, DType::I32));
                assert_eq!(value, want);
            }
            other => panic!("{v}: expected CastOutOfRange, got {other:?}"),
        }
    }
    // i64 -> i32 beyond the range; the edges themselves convert
    let a = ArrayD::from_shape_vec(IxDyn(&[3]), vec![i32::MIN as i64, i32::MAX as i64, 1 << 31])
        .unwrap();
    let x = MaskedArray::unmasked(a.view());
    assert!(matches!(
        x.cast::<i32>(),
        Err(MaskedError::CastOutOfRange { .. })
    ));
    let m = BitMask::from_bools([3], [true, true, false]).unwrap();
    let x = MaskedArray::new(a.view(), m).unwrap();
    assert_eq!(
        x.cast::<i32>().unwrap().values().as_slice().unwrap(),
        &[i32::MIN, i32::MAX, 0]
    );
    // the f64 edge of i64: -2^63 converts, 2^63 does not
    let a = ArrayD::from_shape_vec(IxDyn(&[1]), vec![-(2f64.powi(63))]).unwrap();
    assert_eq!(
        MaskedArray::unmasked(a.view())
            .cast::<i64>()
            .unwrap()
            .values()[[0]],
        i64::MIN
    );
    let a = ArrayD::from_shape_vec(IxDyn(&[1]), vec![2f64.powi(63)]).unwrap();
    assert!(MaskedArray::unmasked(a.view()).cast::<i64>().is_err());
}

#[test]
fn float_casts_round_to_nearest_once() {
    // 0.1 in f16 is 0.0999755859375 (bits 0x2e66), in bf16 0.10009765625 (0x3dcd);
    // 65520 rounds to inf in f16 (half-way to the next binade, ties to even)
    let a = ArrayD::from_shape_vec(IxDyn(&[3]), vec![0.1f64, 65520.0, -2.0]).unwrap();
    let x = MaskedArray::unmasked(a.view());
    let h = x.cast::<f16>().unwrap();
    assert_eq!(
        h.values().iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        [0x2e66, 0x7c00, 0xc000]
    );
    let b = x.cast::<bf16>().unwrap();
    assert_eq!(b.values()[[0]].to_bits(), 0x3dcd);
    // widening is exact
    let back = h.view().cast::<f32>().unwrap();
    assert_eq!(back.values()[[0]], f16::from_bits(0x2e66).to_f32());
    // integers into floats
    let a = ArrayD::from_shape_vec(IxDyn(&[2]), vec![16_777_217i64, -3]).unwrap();
    let f = MaskedArray::unmasked(a.view()).cast::<f32>().unwrap();
    assert_eq!(f.values().as_slice().unwrap(), &[16_777_216.0, -3.0]);
}

/// CSR and COO keep their positions (valid ones stored, as every sparse result) and agree
/// with the dense cast.
#[test]
fn sparse_casts_keep_positions_and_match_dense() {
    // [[1.5, ., -2.7], [., NaN(masked out), 4.2]]
    let mat = CsMat::new(
        (2, 3),
        vec![0, 2, 4],
        vec![0, 2, 1, 2],
        vec![1.5f32, -2.7, f32::NAN, 4.2],
    );
    let mask = Pattern::from_coords((2, 3), &[vec![0, 0, 1, 0], vec![0, 2, 2, 1]]).unwrap();
    let csr = MaskedCsr::with_mask(mat.view(), mask).unwrap();
    let out = csr
        .to_sparse(by_name::cast(&csr, DType::I32).unwrap())
        .unwrap();
    // valid: (0,0) 1.5, (0,1) unstored 0, (0,2) -2.7, (1,2) 4.2
    assert_eq!(out.indices, vec![0, 1, 2, 5]);
    assert_eq!(out.values, DynVec::I32(vec![1, 0, -2, 4]));

    let coo = MaskedCoo::try_new(
        [2, 3],
        &[vec![0, 0, 1, 1], vec![0, 2, 1, 2]],
        vec![1.5f32, -2.7, f32::NAN, 4.2],
        CooMask::Stored,
    )
    .unwrap();
    // NaN is stored and valid here: an i32 cannot hold it
    assert!(matches!(
        by_name::cast(&coo, DType::I32),
        Err(MaskedError::CastOutOfRange { .. })
    ));
    let out = coo
        .to_sparse(by_name::cast(&coo, DType::F16).unwrap())
        .unwrap();
    assert_eq!(out.indices, vec![0, 2, 4, 5]);
    let want: Vec<f16> = [1.5f32, -2.7, f32::NAN, 4.2]
        .iter()
        .map(|&v| f16::from_f32(v))
        .collect();
    match out.values {
        DynVec::F16(v) => assert_eq!(
            v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        ),
        other => panic!("{other:?}"),
    }
}

/// `dtype=` is cast-then-op on every layout: an f16 sum with dtype f32 is the f32 sum of
/// the exact f16 values, not rounded to f16.
#[test]
fn dtype_of_a_request_is_cast_then_op_on_every_layout() {
    let vals: Vec<f16> = (0..40)
        .map(|k| f16::from_f32(1.0 + k as f32 / 1024.0))
        .collect();
    let exact: f64 = vals.iter().map(|v| v.to_f64()).sum();
    let a = ArrayD::from_shape_vec(IxDyn(&[40]), vals.clone()).unwrap();
    let x = MaskedArray::unmasked(a.view());
    let req = OpRequest::new("sum").unwrap();
    let plain = apply_dense(&x, &req).unwrap();
    let wide = apply_dense(&x, &req.clone().dtype(DType::F32)).unwrap();
    assert!(matches!(plain.values, DynVec::F16(_)));
    assert_eq!(wide.values, DynVec::F32(vec![exact as f32]));
    // 40.76... is not an f16: the f16 result is rounded, the f32 one is not
    assert_ne!(exact, f16::from_f64(exact).to_f64());

    // sparse: the same values stored on a row, every entry valid
    let mat = CsMat::new((1, 40), vec![0, 40], (0..40).collect(), vals.clone());
    let csr = MaskedCsr::from_pattern(mat.view()).unwrap();
    let out = apply_sparse(&csr, &req.clone().dtype(DType::F32)).unwrap();
    assert_eq!(out.values, DynVec::F32(vec![exact as f32]));
    let coo =
        MaskedCoo::try_new([40], &[(0..40).collect::<Vec<_>>()], vals, CooMask::Stored).unwrap();
    let out = apply_sparse(&coo, &req.clone().dtype(DType::F32)).unwrap();
    assert_eq!(out.values, DynVec::F32(vec![exact as f32]));
    // normalizations too: softmax of halves in f32
    let sm = apply_sparse(
        &coo,
        &OpRequest::new("softmax").unwrap().dims(0).dtype(DType::F64),
    )
    .unwrap();
    assert!(matches!(sm.values, DynVec::F64(ref v) if (v.iter().sum::<f64>() - 1.0).abs() < 1e-12));
}
