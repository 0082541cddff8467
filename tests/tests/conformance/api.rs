//! The API as a first-time user meets it: results chain into the next op, masks have
//! operators that broadcast, one constructor vocabulary across the three layouts,
//! arguments of the natural types, `filled` on every result, messages that name the
//! real problem. Most of these are compile-pass checks as much as value checks: the
//! file not compiling is the failure.

use masked::prelude::*;
use masked::{MaskedArray, SparseArray};
use ndarray::{array, Array2, Array3, Ix2, OwnedRepr};
use sprs::CsMat;

type R = masked::Result<()>;

/// The positions (row-major flat indices) of a mask of each layout.
fn bit_positions(m: &BitMask) -> Vec<usize> {
    (0..m.len()).filter(|&i| m.get(i)).collect()
}
fn csr_positions(p: &Pattern) -> Vec<usize> {
    let ncols = p.shape().1;
    (0..p.shape().0)
        .flat_map(|r| p.row(r).iter().map(move |&c| r * ncols + c))
        .collect()
}

#[test]
fn results_are_inputs() -> R {
    // dense: a normalization keeps the static dimension, a reduction converts in one call
    let x = Array2::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as f32);
    let a = MaskedArray::new(x.view(), BitMask::from_lengths([3, 4], &[4, 2, 0])?)?;
    let sm: MaskedArray<OwnedRepr<f32>, Ix2> = a.softmax(1)?;
    assert_eq!(sm.values().dim(), (3, 4));
    let row_sums = sm.sum(1, false)?;
    assert_eq!(row_sums.mask_vec(), [true, true, false]);
    assert!((row_sums.values()[[0]] - 1.0).abs() < 1e-6);
    let x3 = Array3::from_shape_fn((2, 3, 4), |(i, j, k)| (i + j + k) as f64);
    let s = MaskedArray::unmasked(x3)
        .sum(2, false)?
        .into_dimensionality::<Ix2>()?;
    assert_eq!(s.values(), &array![[6.0, 10.0, 14.0], [10.0, 14.0, 18.0]]);
    assert!(s.clone().into_dimensionality::<ndarray::Ix3>().is_err());

    // CSR: an owned CsMat in one call, and any CSR matrix by reference as the next input
    let m = CsMat::new((2, 3), vec![0, 2, 3], vec![0, 2, 1], vec![1.0f64, 2.0, 3.0]);
    let sm: CsMat<f64> = MaskedCsr::from_pattern(&m)?.softmax(1)?.into_csmat();
    assert_eq!(sm.indices(), m.indices());
    let again = MaskedCsr::from_pattern(&sm)?.sum(1, false)?;
    assert!(again.values().iter().all(|v| (v - 1.0).abs() < 1e-12));
    // a CsrMapped result is an input too, without converting
    let lsm = MaskedCsr::from_pattern(&m)?.log_softmax(1)?;
    let back = MaskedCsr::from_pattern(&lsm)?.exp()?;
    assert!((back.data()[0] - sm.data()[0]).abs() < 1e-12);

    // COO: a normalization is a masked COO; a sparse reduction converts with From
    let c = MaskedCoo::from_pattern(
        [2, 2, 3],
        &[vec![0, 0, 1, 1], vec![0, 0, 1, 1], vec![0, 2, 0, 1]],
        vec![1.0f64, 2.0, 3.0, 4.0],
    )?;
    let csm: MaskedCoo<f64> = c.softmax(2)?;
    assert_eq!(csm.pattern(), c.pattern());
    let per_row: MaskedCoo<f64> = csm.sum(2, false)?.into();
    assert_eq!(per_row.shape(), &[2, 2]);
    assert_eq!(per_row.pattern().flat(), vec![0, 3]);
    assert!(per_row.values().iter().all(|v| (v - 1.0).abs() < 1e-12));
    // and reduces again
    let total = per_row.sum(Dims::All, false)?;
    assert!((total.values()[0] - 2.0).abs() < 1e-12);
    Ok(())
}

#[test]
fn mask_operators_broadcast() -> R {
    // a [4, 6] padding mask and a [6, 6] causal mask: the attention mask [4, 6, 6]
    let pad = BitMask::from_lengths([4, 6], &[6, 3, 1, 0])?;
    let causal = BitMask::causal(6)?;
    let att = (&pad.clone().reshape([4, 1, 6])? & &causal)?;
    assert_eq!(att.shape(), &[4, 6, 6]);
    for b in 0..4 {
        for i in 0..6 {
            for j in 0..6 {
                let want = j <= i && j < [6, 3, 1, 0][b];
                assert_eq!(att.get((b * 6 + i) * 6 + j), want, "{b} {i} {j}");
            }
        }
    }
    // mismatched shapes are an error, never a panic
    assert!(matches!(
        &pad & &causal,
        Err(MaskedError::MaskNotBroadcastable { .. })
    ));
    let a = BitMask::from_bools([4], [true, true, false, false])?;
    let b = BitMask::from_bools([4], [true, false, true, false])?;
    assert_eq!((&a | &b)?.to_vec(), [true, true, true, false]);
    assert_eq!((&a ^ &b)?.to_vec(), [false, true, true, false]);
    assert_eq!((!&a).to_vec(), [false, false, true, true]);
    assert_eq!((&a & &!&b)?, a.and_not(&b)?);
    // a per-row [2, 1] mask broadcasts against [2, 3]
    let rows = BitMask::from_bools([2, 1], [true, false])?;
    let cols = BitMask::from_bools([3], [true, false, true])?;
    assert_eq!(
        (&rows & &cols)?.to_vec(),
        [true, false, true, false, false, false]
    );

    // sparse patterns: the same operators, by merges
    let p = Pattern::from_lengths([2, 3], &[2, 1])?;
    let q = Pattern::causal(2).and_then(|_| Pattern::banded([2, 3], 0, 1))?;
    // p: rows {0, 1}, {0}; q: rows {0, 1}, {1, 2}
    assert_eq!(csr_positions(&(&p & &q)?), vec![0, 1]);
    assert_eq!(csr_positions(&(&p | &q)?), vec![0, 1, 3, 4, 5]);
    assert_eq!(csr_positions(&(&p ^ &q)?), vec![3, 4, 5]);
    let cp = CooPattern::from_lengths([2, 3], &[2, 1])?;
    let cq = CooPattern::banded([2, 3], 0, 1)?;
    assert_eq!((&cp & &cq)?.flat(), vec![0, 1]);
    assert_eq!((&cp | &cq)?.flat(), vec![0, 1, 3, 4, 5]);
    assert!((&cp & &CooPattern::full([3, 2])?).is_err());
    Ok(())
}

#[test]
fn one_constructor_vocabulary() -> R {
    // the same arguments give the same positions in all three layouts
    let lengths = [3usize, 0, 5, 1];
    let d = BitMask::from_lengths([4, 5], &lengths)?;
    let c = Pattern::from_lengths([4, 5], &lengths)?;
    let o = CooPattern::from_lengths([4, 5], &lengths)?;
    assert_eq!(bit_positions(&d), csr_positions(&c));
    assert_eq!(bit_positions(&d), o.flat());

    for (lo, up) in [(0, 0), (1, 0), (5, 0), (0, 2), (2, 1)] {
        let d = BitMask::banded((4, 6), lo, up)?;
        let c = Pattern::banded([4, 6], lo, up)?;
        let o = CooPattern::banded(vec![4, 6], lo, up)?;
        assert_eq!(bit_positions(&d), csr_positions(&c), "{lo} {up}");
        assert_eq!(bit_positions(&d), o.flat(), "{lo} {up}");
    }
    let d = BitMask::causal(5)?;
    assert_eq!(bit_positions(&d), csr_positions(&Pattern::causal(5)?));
    assert_eq!(bit_positions(&d), CooPattern::causal(5)?.flat());

    let coords = [vec![2usize, 0, 1], vec![1usize, 3, 0]];
    let d = BitMask::from_coords([3, 4], &coords)?;
    let c = Pattern::from_coords([3, 4], &coords)?;
    let o = CooPattern::from_coords([3, 4], &coords)?;
    assert_eq!(bit_positions(&d), vec![3, 4, 9]);
    assert_eq!(bit_positions(&d), csr_positions(&c));
    assert_eq!(bit_positions(&d), o.flat());

    // bools: an array, a slice, a Vec, an iterator, an ndarray (owned, view, reference)
    let bools = [true, false, false, true, true, false];
    let arr = Array2::from_shape_vec((2, 3), bools.to_vec()).unwrap();
    let d = BitMask::from_bools([2, 3], bools)?;
    assert_eq!(d, BitMask::from_bools([2, 3], &bools[..])?);
    assert_eq!(d, BitMask::from_bools([2, 3], bools.to_vec())?);
    assert_eq!(d, BitMask::from_array(&arr)?);
    assert_eq!(d, BitMask::from_array(arr.view())?);
    let c = Pattern::from_bools([2, 3], bools.iter())?;
    assert_eq!(c, Pattern::from_array(arr.clone())?);
    let o = CooPattern::from_bools([2, 3], bools)?;
    assert_eq!(o, CooPattern::from_array(&arr)?);
    assert_eq!(bit_positions(&d), csr_positions(&c));
    assert_eq!(bit_positions(&d), o.flat());

    let d = BitMask::full([2, 3])?;
    assert_eq!(bit_positions(&d), csr_positions(&Pattern::full([2, 3])?));
    assert_eq!(bit_positions(&d), CooPattern::full([2, 3])?.flat());

    // every constructor is fallible the same way: a bad shape is an Err, not a panic
    assert!(BitMask::banded([2, 3, 4], 0, 0).is_err());
    assert!(Pattern::banded([2, 3, 4], 0, 0).is_err());
    assert!(CooPattern::banded([2, 3, 4], 0, 0).is_err());
    assert!(BitMask::filled([usize::MAX, 3], true).is_err());
    assert!(BitMask::causal(usize::MAX).is_err());
    assert!(CooPattern::from_lengths([usize::MAX, 2, 2], &[]).is_err());
    Ok(())
}

#[test]
fn natural_argument_types() -> R {
    let x = Array2::from_shape_fn((2, 3), |(i, j)| (i * 3 + j) as f64);
    let valid: Array2<bool> = array![[true, true, false], [true, false, false]];
    // an owned bool array, a reference, a view
    let a = MaskedArray::from_bool_mask(x.view(), valid.clone())?;
    let b = MaskedArray::from_bool_mask(x.view(), &valid)?;
    let c = MaskedArray::from_bool_mask(x.view(), valid.view())?;
    assert_eq!(a.mask(), b.mask());
    assert_eq!(b.mask(), c.mask());
    // a usize dim, an i64 dim, a negative literal
    let d: usize = 1;
    let s1 = a.softmax(d)?;
    let s2 = a.softmax(-1)?;
    let s3 = a.softmax(1i64)?;
    assert_eq!(s1.values(), s2.values());
    assert_eq!(s1.values(), s3.values());
    assert_eq!(a.cumsum(d)?.values(), a.cumsum(1)?.values());
    let (m, i) = a.median_with_index(d, false)?;
    assert_eq!(m.values().as_slice().unwrap(), &[0.0, 3.0]);
    assert_eq!(i.values().as_slice().unwrap(), &[0, 0]);
    // dims as a Vec<usize>, a slice, an array of usize
    let dims: Vec<usize> = vec![0, 1];
    let t = a.sum(dims.clone(), false)?;
    // valid: 0, 1 and 3
    assert_eq!(t.values()[[]], 4.0);
    assert_eq!(a.sum(&dims[..], false)?.values()[[]], 4.0);
    assert_eq!(a.sum([0usize, 1], false)?.values()[[]], 4.0);
    assert_eq!(Dims::from(vec![1usize]), Dims::from(1));
    // a CSR matrix by reference (owned), or a view
    let m = CsMat::new((2, 2), vec![0, 1, 2], vec![0, 1], vec![1.0f32, 2.0]);
    let r1 = MaskedCsr::from_pattern(&m)?.sum(1, false)?;
    let r2 = MaskedCsr::from_pattern(m.view())?.sum(1, false)?;
    assert_eq!(r1, r2);
    // a pattern without naming its index type
    let p = Pattern::from_lengths([2, 2], &[1, 2])?;
    assert_eq!(p.nnz(), 3);
    let r = MaskedCsr::with_mask(&m, p)?.count(1, false)?;
    assert_eq!(r.values(), &[1, 2]);
    Ok(())
}

#[test]
fn filled_on_every_result() -> R {
    let x = array![[1.0f32, 2.0], [3.0, 4.0]];
    let a = MaskedArray::from_bool_mask(x.view(), array![[true, false], [false, false]])?;
    // dense: keeps the dimension
    let f: Array2<f32> = a.filled(-1.0);
    assert_eq!(f, array![[1.0, -1.0], [-1.0, -1.0]]);
    // a dense reduction's result
    let m = a.mean(1, false)?;
    assert_eq!(m.filled(0.0).as_slice().unwrap(), &[1.0, 0.0]);
    // a sparse reduction's result
    let s = SparseArray::new(vec![2], vec![1], vec![7.0f32])?;
    assert_eq!(s.filled(0.0)?.as_slice().unwrap(), &[0.0, 7.0]);
    // CSR and COO containers
    let csr = CsMat::new((2, 2), vec![0, 1, 1], vec![1], vec![5.0f32]);
    assert_eq!(
        MaskedCsr::from_pattern(&csr)?
            .filled(f32::NAN)?
            .map(|v| v.is_nan()),
        array![[true, false], [true, true]]
    );
    let coo = MaskedCoo::from_pattern([2, 2], &[vec![1], vec![0]], vec![5.0f32])?;
    assert_eq!(
        coo.filled(-2.0)?,
        array![[-2.0, -2.0], [5.0, -2.0]].into_dyn()
    );
    // a CSR normalization's result (a sprs matrix): `CsrFilled`, in the prelude
    let p = MaskedCsr::from_pattern(&csr)?.softmax(1)?;
    assert_eq!(p.filled(-1.0)?, array![[-1.0, 1.0], [-1.0, -1.0]]);
    // checked before allocating
    let huge = CsMat::new((1, 1usize << 60), vec![0, 1], vec![5], vec![2.0f64]);
    let p = MaskedCsr::from_pattern(&huge)?.softmax(1)?;
    let e = p.filled(0.0).unwrap_err();
    assert!(matches!(e, masked::MaskedError::TooLarge { .. }), "{e}");
    // the masked input's own densification and a COO one: checked alike
    let e = MaskedCsr::from_pattern(&huge)?.filled(0.0).unwrap_err();
    assert!(matches!(e, masked::MaskedError::TooLarge { .. }), "{e}");
    let big = MaskedCoo::from_pattern([1, 1usize << 60], &[vec![0], vec![5]], vec![2.0f64])?;
    let e = big.filled(0.0).unwrap_err();
    assert!(matches!(e, masked::MaskedError::TooLarge { .. }), "{e}");
    Ok(())
}

#[test]
fn messages_name_the_real_problem() {
    let e = Pattern::from_lengths([3, 5], &[1, 9, 2]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "length 9 of sequence 1 is above the padded length 5"
    );
    let e = BitMask::from_lengths([2, 5], &[6, 1]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "length 6 of sequence 0 is above the padded length 5"
    );
    // too few values for the coordinates: the values are named, not the coordinates
    let e = MaskedCoo::from_pattern([3], &[vec![0, 2]], vec![1.0f32]).unwrap_err();
    assert_eq!(e.to_string(), "1 values for 2 stored positions");
    // ragged coordinates still name the coordinate array
    let e = MaskedCoo::from_pattern([3, 3], &[vec![0, 2], vec![1]], vec![1.0f32]).unwrap_err();
    assert!(
        e.to_string().contains("coordinate array 1 has 1 entries"),
        "{e}"
    );
    // a [batch, len] mask on [batch, len, features] data: the fix is named
    let x = ndarray::Array3::<f32>::zeros((4, 6, 8));
    let pad = BitMask::from_lengths([4, 6], &[6, 5, 4, 3]).unwrap();
    let e = MaskedArray::new(x.view(), pad.clone()).unwrap_err();
    assert!(
        e.to_string().contains(
            "(dims align from the right; reshape it to [4, 6, 1] to lay it over the input's dims 0, 1)"
        ),
        "{e}"
    );
    // key padding of attention scores [batch, query, key]: both readings are named
    let scores = ndarray::Array3::<f32>::zeros((3, 5, 5));
    let keys = BitMask::from_lengths([3, 5], &[5, 3, 1]).unwrap();
    let e = MaskedArray::new(scores.view(), keys.clone())
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with(
            "(dims align from the right; reshape it to [3, 5, 1] to lay it over the input's \
             dims 0, 1, or to [3, 1, 5] to lay it over the input's dims 0, 2)"
        ),
        "{e}"
    );
    let by_key = MaskedArray::new(scores.view(), keys.reshape([3, 1, 5]).unwrap()).unwrap();
    assert_eq!(by_key.mask().unwrap().count_ones(), (5 + 3 + 1) * 5);
    // a mask that fits nowhere gets no hint
    let e = MaskedArray::new(scores.view(), BitMask::filled([7], true).unwrap()).unwrap_err();
    assert!(!e.to_string().contains("reshape"), "{e}");
    // ... and the fix works
    let fixed = MaskedArray::new(x.view(), pad.reshape([4, 6, 1]).unwrap()).unwrap();
    assert_eq!(fixed.mask().unwrap().count_ones(), (6 + 5 + 4 + 3) * 8);
}

/// Doc comments speak to users of the facade: no example or link names an internal
/// crate (`masked_core::`, `layout_dense::`, `layout_csr::`, `masked_io::` ...), which a
/// crate depending on `masked` cannot import.
#[test]
fn doc_comments_name_only_the_facade() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let internal = [
        "masked_core::",
        "layout_dense::",
        "layout_csr::",
        "layout_coo::",
        "masked_engine::",
        "masked_attention::",
        "masked_sparse::",
        "masked_io::",
    ];
    let mut bad = Vec::new();
    let mut files = 0;
    let mut stack = vec![root.join("crates")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files += 1;
                let text = std::fs::read_to_string(&p).unwrap();
                for (n, line) in text.lines().enumerate() {
                    let t = line.trim_start();
                    if (t.starts_with("///") || t.starts_with("//!"))
                        && internal.iter().any(|c| t.contains(c))
                    {
                        bad.push(format!("{}:{}: {t}", p.display(), n + 1));
                    }
                }
            }
        }
    }
    // README and docs code too
    for md in [
        "README.md",
        "docs/guide.md",
        "docs/semantics.md",
        "docs/cli.md",
    ] {
        let text = std::fs::read_to_string(root.join(md)).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.starts_with("use ") && internal.iter().any(|c| line.contains(c)) {
                bad.push(format!("{md}:{}: {line}", n + 1));
            }
        }
    }
    assert!(files > 50, "walked only {files} files");
    assert!(bad.is_empty(), "internal crates named:\n{}", bad.join("\n"));
}
