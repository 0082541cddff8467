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
    assert_eq!(b.mask(), a.mask());
    // the valid values as they were, the masked-out row (no meaning) as 0
    assert_eq!(b.values(), &array![[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]);
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

/// Both floats are the same value: equal, or both NaN.
fn same<T: masked::Element>(a: T, b: T) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// Valid NaN and infinities round-trip exactly through JSON (as the strings "NaN", "inf",
/// "-inf"); a value under a false mask bit is written as 0 and reads back as 0; every
/// dtype.
#[test]
fn non_finite_values_round_trip_in_dense_arrays() {
    fn check<T: masked::Element>(vals: [f64; 6], want_text: &[&str]) {
        let x = ndarray::Array2::from_shape_vec(
            (2, 3),
            vals.iter().map(|&v| T::from_f64_lossy(v)).collect(),
        )
        .unwrap();
        // position 4 (a NaN) and 5 (an infinity) are masked out
        let m = BitMask::from_bools([2, 3], [true, true, true, true, false, false]).unwrap();
        let a = MaskedArray::new(x.clone(), m).unwrap();
        let j = serde_json::to_string(&a).unwrap();
        for w in want_text {
            assert!(j.contains(w), "{j} lacks {w}");
        }
        assert!(!j.contains("null"), "{j}");
        let b: MaskedArray<ndarray::OwnedRepr<T>, ndarray::Ix2> = serde_json::from_str(&j).unwrap();
        assert_eq!(b.mask(), a.mask());
        for (k, (&got, &had)) in b.values().iter().zip(x.iter()).enumerate() {
            if k < 4 {
                assert!(same(got, had), "{j}: {k}: {got:?} != {had:?}");
            } else {
                assert_eq!(got, T::ZERO, "{j}: a masked-out value reads back as 0");
            }
        }
        // the text round-trips to itself
        assert_eq!(serde_json::to_string(&b).unwrap(), j);
    }
    let v = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1.5,
        f64::NAN,
        f64::INFINITY,
    ];
    let text = [r#"["NaN","inf","-inf",1.5,0"#];
    check::<f32>(v, &[r#""data":["NaN","inf","-inf",1.5,0.0,0.0]"#]);
    check::<f64>(v, &[r#""data":["NaN","inf","-inf",1.5,0.0,0.0]"#]);
    // halves as their value, not their bits
    check::<half::f16>(v, &text);
    check::<half::bf16>(v, &text);
    // integers: the masked-out values are written as 0 too
    check::<i32>(
        [7.0, -2.0, 3.0, 4.0, 99.0, 98.0],
        &[r#""data":[7,-2,3,4,0,0]"#],
    );
    check::<i64>(
        [7.0, -2.0, 3.0, 4.0, 99.0, 98.0],
        &[r#""data":[7,-2,3,4,0,0]"#],
    );
}

/// The report's case: the mean over a fully padded sequence (NaN under a false bit) and
/// an unmasked `[1, inf]`, written and read back.
#[test]
fn a_mean_over_a_fully_padded_row_reads_back() {
    let x = array![[1.0f32, 2.0], [3.0, 4.0], [1.0, f32::INFINITY]];
    let m = BitMask::from_bools([3, 2], [true, true, false, false, true, true]).unwrap();
    let mean = MaskedArray::new(x, m).unwrap().mean(1, false).unwrap();
    assert!(mean.values()[1].is_nan() && !mean.mask().unwrap().get(1));
    let j = serde_json::to_string(&mean).unwrap();
    assert!(j.contains(r#""data":[1.5,0.0,"inf"]"#), "{j}");
    let back: masked::MaskedArrayD<f32> = serde_json::from_str(&j).unwrap();
    assert_eq!(back.mask(), mean.mask());
    assert_eq!(back.values()[0], 1.5);
    assert_eq!(back.values()[2], f32::INFINITY);
    assert_eq!(back.filled(-1.0), mean.filled(-1.0));
}

#[test]
fn non_finite_values_round_trip_in_sparse_containers() {
    let s = SparseArray::new(
        vec![2, 3],
        vec![0, 1, 5],
        vec![f64::NAN, f64::INFINITY, -f64::INFINITY],
    )
    .unwrap();
    let j = serde_json::to_string(&s).unwrap();
    assert_eq!(
        j,
        r#"{"shape":[2,3],"indices":[0,1,5],"values":["NaN","inf","-inf"]}"#
    );
    let b: SparseArray<f64> = serde_json::from_str(&j).unwrap();
    assert_eq!(b.indices(), s.indices());
    assert!(b.values()[0].is_nan());
    assert_eq!(&b.values()[1..], &s.values()[1..]);
    // integer results stay integers
    let i = SparseArray::new(vec![3], vec![2], vec![i64::MIN]).unwrap();
    assert_eq!(round(&i), i);

    // COO: non-finite values inside and outside the mask pattern round-trip exactly
    let p = CooPattern::from_coords([2, 3], &[vec![0, 0, 1], vec![0, 2, 1]]).unwrap();
    let inside = CooPattern::from_coords([2, 3], &[vec![0, 1], vec![0, 1]]).unwrap();
    for mask in [CooMask::Stored, CooMask::Pattern(inside), CooMask::All] {
        let vals = vec![f32::NAN, f32::NEG_INFINITY, f32::INFINITY];
        let a = MaskedCoo::from_parts(p.clone(), vals.clone(), mask).unwrap();
        let j = serde_json::to_string(&a).unwrap();
        assert!(j.contains(r#""values":["NaN","-inf","inf"]"#), "{j}");
        let b: MaskedCoo<f32> = serde_json::from_str(&j).unwrap();
        assert_eq!(b.mask(), a.mask());
        assert!(b.values().iter().zip(&vals).all(|(&g, &h)| same(g, h)));
        let (sa, sb) = (a.sum(1, false).unwrap(), b.sum(1, false).unwrap());
        assert_eq!(sa.indices(), sb.indices());
        assert!(sa
            .values()
            .iter()
            .zip(sb.values())
            .all(|(&g, &h)| same(g, h)));
    }
}

/// Every fold's partial state, with NaN and infinities in it (amax's identity is -inf),
/// survives JSON, and the finished value of the read-back state is the original's.
#[test]
fn fold_states_with_non_finite_values_round_trip() {
    use masked::ops::{AMax, AMin, ArgMax, ArgMin, Count, Mean, Prod, Ptp, Sum};
    use masked::stats::{LogSumExp, Norm, Var};
    use masked::Fold;
    fn check<F: Fold<f32>>(op: &F, lanes: &[&[f32]])
    where
        F::Output: masked::Element,
    {
        for xs in lanes {
            for state in [op.identity(), op.fold_slice(xs, None)] {
                let j = serde_json::to_string(&state).unwrap();
                assert!(!j.contains("null"), "{}: {j}", op.name());
                let back: F::State = serde_json::from_str(&j).unwrap();
                let (a, b) = (op.finish(&state), op.finish(&back));
                assert!(same(a, b), "{}: {j}: {a:?} != {b:?}", op.name());
                // and it still merges
                let mut m = back.clone();
                op.merge(&mut m, op.fold_slice(&[2.0], None));
                let mut n = state.clone();
                op.merge(&mut n, op.fold_slice(&[2.0], None));
                assert!(same(op.finish(&m), op.finish(&n)), "{}", op.name());
            }
        }
    }
    let lanes: [&[f32]; 4] = [
        &[1.0, f32::INFINITY],
        &[f32::NEG_INFINITY, 3.0],
        &[f32::NAN, 1.0],
        &[f32::INFINITY, f32::NEG_INFINITY],
    ];
    check(&Sum, &lanes);
    check(&Prod, &lanes);
    check(&AMax, &lanes);
    check(&AMin, &lanes);
    check(&Ptp, &lanes);
    check(&ArgMax, &lanes);
    check(&ArgMin, &lanes);
    check(&Mean, &lanes);
    check(&Count, &lanes);
    check(&Var::default(), &lanes);
    check(&LogSumExp, &lanes);
    for ord in [2.0, f64::INFINITY, f64::NEG_INFINITY] {
        check(&Norm::new(ord).unwrap(), &lanes);
    }
    // the identity of amax is -inf, written as a string
    assert_eq!(
        serde_json::to_string(&Fold::<f32>::identity(&AMax)).unwrap(),
        r#""-inf""#
    );
}

#[test]
fn unreadable_numbers_are_errors_naming_what_was_found() {
    use masked::Num;
    let e = serde_json::from_str::<Num<f32>>("null")
        .unwrap_err()
        .to_string();
    assert!(e.contains("found null") && e.contains(r#""NaN""#), "{e}");
    let e = serde_json::from_str::<Num<f64>>(r#""nope""#)
        .unwrap_err()
        .to_string();
    assert!(e.contains(r#"found the string "nope""#), "{e}");
    // the spellings a Python writer may use
    for (t, want) in [
        (r#""Infinity""#, f64::INFINITY),
        (r#""-Infinity""#, f64::NEG_INFINITY),
        (r#""+inf""#, f64::INFINITY),
        ("3", 3.0),
    ] {
        assert_eq!(serde_json::from_str::<Num<f64>>(t).unwrap().0, want, "{t}");
    }
    assert!(serde_json::from_str::<Num<f64>>(r#""nan""#)
        .unwrap()
        .0
        .is_nan());
    // a dense array written by serde_json's own f32 (NaN as null) is refused, naming null
    rejects::<masked::MaskedArrayD<f32>>(
        r#"{"values":{"v":1,"dim":[2],"data":[1.0,null]},"mask":null}"#,
        "found null",
    );
}
