//! serde for the containers, through the facade: portable forms that round-trip, and
//! re-validation on the way in (a corrupted or hostile pattern is an error, never an
//! invalid value the unchecked kernels would index with).

use masked::{
    BitMask, CooMask, CooPattern, MaskedArray, MaskedCoo, MaskedOps, PatternI, SparseArray,
};
use ndarray::{array, Array2};

fn round<T: serde::Serialize + serde::de::DeserializeOwned>(x: &T) -> T {
    serde_json::from_str(&serde_json::to_string(x).unwrap()).unwrap()
}

fn rejects<T: serde::de::DeserializeOwned + std::fmt::Debug>(json: &str, needle: &str) {
    let e = serde_json::from_str::<T>(json).expect_err(json).to_string();
    assert!(e.contains(needle), "{json}: {e:?} lacks {needle:?}");
}

#[test]
fn bit_masks_are_shape_and_words() {
    let m = BitMask::from_bools([2, 3], [true, false, true, false, false, true]).unwrap();
    // bit k of word k / 64 is element k, row-major: 0b100101
    assert_eq!(
        serde_json::to_string(&m).unwrap(),
        r#"{"shape":[2,3],"words":[37]}"#
    );
    assert_eq!(round(&m), m);
    // 130 elements: three words, the unused high bits of the last one cleared
    let big = BitMask::from_bools([130], (0..130).map(|i| i % 3 == 0)).unwrap();
    assert_eq!(round(&big), big);
    let m: BitMask = serde_json::from_str(r#"{"shape":[3],"words":[255]}"#).unwrap();
    assert_eq!(m.words(), &[0b111]);
    assert_eq!(m.count_ones(), 3);
    rejects::<BitMask>(r#"{"shape":[2,100],"words":[1,2]}"#, "holds 128 bits");
    rejects::<BitMask>(
        r#"{"shape":[18446744073709551615,3],"words":[]}"#,
        "size overflows",
    );
}

#[test]
fn csr_patterns_round_trip_and_are_checked() {
    let p = PatternI::<u32>::from_coords((3, 4), &[vec![0, 2, 0], vec![1, 3, 2]]).unwrap();
    let j = serde_json::to_string(&p).unwrap();
    assert_eq!(j, r#"{"shape":[3,4],"indptr":[0,2,2,3],"indices":[1,2,3]}"#);
    assert_eq!(round(&p), p);
    let bad = |indptr: &str, indices: &str| {
        format!(r#"{{"shape":[3,4],"indptr":{indptr},"indices":{indices}}}"#)
    };
    rejects::<PatternI<u32>>(&bad("[0,2,2,3]", "[2,1,3]"), "");
    rejects::<PatternI<u32>>(&bad("[0,2,2,3]", "[1,2,4]"), "out of range");
    rejects::<PatternI<u32>>(&bad("[0,2,1,3]", "[1,2,3]"), "");
    rejects::<PatternI<u32>>(&bad("[0,2,3]", "[1,2,3]"), "");
    rejects::<PatternI<u32>>(&bad("[0,2,2,9]", "[1,2,3]"), "");
    rejects::<PatternI<u32>>(&bad("[0,2,2,2]", "[1,1]"), "");
    // an index that does not fit the pattern's index type
    rejects::<PatternI<u16>>(
        r#"{"shape":[1,100000],"indptr":[0,1],"indices":[70000]}"#,
        "",
    );
    // every rejection above is an error value, and a valid pattern still works
    let q: PatternI<u32> = serde_json::from_str(&bad("[0,1,1,2]", "[0,3]")).unwrap();
    assert_eq!(q.nnz(), 2);
}

#[test]
fn coo_patterns_and_arrays_round_trip_and_are_checked() {
    let p = CooPattern::from_coords([2, 3, 4], &[vec![1, 0], vec![2, 0], vec![3, 1]]).unwrap();
    assert_eq!(round(&p), p);
    rejects::<CooPattern>(r#"{"shape":[2,3],"coords":[[0,0],[1,1]]}"#, "duplicate");
    rejects::<CooPattern>(r#"{"shape":[2,3],"coords":[[0,2],[1,1]]}"#, "out of range");
    rejects::<CooPattern>(r#"{"shape":[2,3],"coords":[[0,1],[1]]}"#, "");
    rejects::<CooPattern>(r#"{"shape":[2,3],"coords":[[0,1]]}"#, "");

    for mask in [
        CooMask::Stored,
        CooMask::All,
        CooMask::Pattern(CooPattern::from_coords([2, 3, 4], &[vec![1], vec![2], vec![3]]).unwrap()),
    ] {
        let a = MaskedCoo::from_parts(p.clone(), vec![5.0f64, -1.0], mask).unwrap();
        let b = round(&a);
        assert_eq!(b.pattern(), a.pattern());
        assert_eq!(b.values(), a.values());
        assert_eq!(b.mask(), a.mask());
        assert_eq!(b.sum(2, false).unwrap(), a.sum(2, false).unwrap());
    }
    let j = serde_json::to_string(
        &MaskedCoo::from_parts(p.clone(), vec![1.0f64, 2.0], CooMask::Stored).unwrap(),
    )
    .unwrap();
    // one value too many; a mask of another shape
    rejects::<MaskedCoo<f64>>(&j.replace("[1.0,2.0]", "[1.0,2.0,3.0]"), "3 values for 2");
    let other = serde_json::to_string(&CooMask::Pattern(
        CooPattern::from_coords([9, 9], &[vec![1], vec![2]]).unwrap(),
    ))
    .unwrap();
    rejects::<MaskedCoo<f64>>(&j.replace(r#""Stored""#, &other), "");
}

#[test]
fn dense_arrays_and_sparse_results_round_trip_and_are_checked() {
    let x: Array2<f32> = array![[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let m = BitMask::from_bools([2, 1], [true, false]).unwrap();
    let a = MaskedArray::new(x.clone(), m).unwrap();
    let b = round(&a);
    assert_eq!(b.values(), a.values());
    assert_eq!(b.mask(), a.mask());
    // a view serialises too, as the same form
    let v = MaskedArray::new(x.view(), BitMask::filled([2, 3], true).unwrap()).unwrap();
    let c: MaskedArray<ndarray::OwnedRepr<f32>, ndarray::Ix2> =
        serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
    assert_eq!(c.values(), &x);
    let u = round(&MaskedArray::unmasked(x.clone()));
    assert!(u.mask().is_none());
    // a mask that does not broadcast to the values
    let bad = serde_json::to_string(&a)
        .unwrap()
        .replace(r#""shape":[2,3],"words""#, r#""shape":[4,3],"words""#);
    rejects::<MaskedArray<ndarray::OwnedRepr<f32>, ndarray::Ix2>>(&bad, "broadcast");

    let s = SparseArray::new(vec![2, 3], vec![1, 5], vec![7.0f32, 8.0]).unwrap();
    assert_eq!(round(&s), s);
    rejects::<SparseArray<f32>>(
        r#"{"shape":[2,3],"indices":[5,1],"values":[7.0,8.0]}"#,
        "strictly increasing",
    );
    rejects::<SparseArray<f32>>(
        r#"{"shape":[2,3],"indices":[1,6],"values":[7.0,8.0]}"#,
        "below 6",
    );
    rejects::<SparseArray<f32>>(r#"{"shape":[2,3],"indices":[1],"values":[7.0,8.0]}"#, "");
}
