//! Fused elementwise-then-reduce (the dense `ZipView`): every reduction and normalization
//! of a lazy `z(a, b)` equals materialise-then-reduce. Bit for bit where each output's
//! lane lies in one block of rows (dims that exclude dim 0, the fallbacks); within
//! float tolerance where dim 0 is reduced (block states merge in block order, an
//! association order the flat kernel does not use).

use masked::binary::{FloatBin, FloatZip, KeepBin, KeepZip};
use masked::dense::BLOCK;
use masked::unary::{Abs, KeepFn, KeepMap};
use masked::{BitMask, MaskRule, MaskedArray, MaskedBinaryOps, MaskedError, MaskedOps};
use ndarray::{ArrayD, IxDyn};

fn data(shape: &[usize], seed: u64) -> (ArrayD<f64>, BitMask) {
    let n: usize = shape.iter().product();
    let mut s = seed;
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 33) as f64 / (1u64 << 31) as f64
    };
    let v: Vec<f64> = (0..n).map(|_| next() * 8.0 - 4.0).collect();
    let m: Vec<bool> = (0..n).map(|_| next() < 0.7).collect();
    (
        ArrayD::from_shape_vec(IxDyn(shape), v).unwrap(),
        BitMask::from_bools(shape, m).unwrap(),
    )
}

fn same_bits(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-12 * (1.0 + y.abs()) || (x.is_nan() && y.is_nan()))
}

#[test]
fn fused_equals_materialise_then_reduce() {
    for shape in [vec![40usize, 3000], vec![5, 300, 100], vec![200_000]] {
        assert!(shape.iter().product::<usize>() > BLOCK, "several blocks");
        let (x, mx) = data(&shape, 1);
        let (w, mw) = data(&shape, 2);
        let a = MaskedArray::new(x.view(), mx.clone()).unwrap();
        let b = MaskedArray::new(w.view(), mx.clone()).unwrap();
        let _ = mw;
        let mul = KeepZip(KeepBin::Mul);
        let view = a.zip_view(&b, mul, MaskRule::Strict).unwrap();
        let full = a.mul(&b, MaskRule::Strict).unwrap();
        let nd = shape.len() as isize;
        for dim in 0..nd {
            let f = view.sum(dim, false).unwrap();
            let g = full.sum(dim, false).unwrap();
            assert_eq!(f.mask(), g.mask(), "{shape:?} dim {dim}");
            let (fv, gv) = (
                f.values().as_slice().unwrap(),
                g.values().as_slice().unwrap(),
            );
            if dim == 0 {
                assert!(close(fv, gv), "sum {shape:?} dim 0");
            } else {
                assert!(same_bits(fv, gv), "sum {shape:?} dim {dim}");
            }
            let f = view.median(dim, false, masked::MedianMode::Avg).unwrap();
            let g = full.median(dim, false, masked::MedianMode::Avg).unwrap();
            assert!(
                same_bits(
                    f.values().as_slice().unwrap(),
                    g.values().as_slice().unwrap()
                ),
                "median {shape:?} {dim}"
            );
            let f = view.softmax(dim).unwrap();
            let g = full.softmax(dim).unwrap();
            assert!(
                same_bits(
                    f.values().as_slice().unwrap(),
                    g.values().as_slice().unwrap()
                ),
                "softmax {shape:?} {dim}"
            );
        }
        // logsumexp(x + bias) with a bias broadcast along the last dim
        let last = *shape.last().unwrap();
        let bias = ArrayD::from_shape_vec(
            IxDyn(&[last]),
            (0..last).map(|i| i as f64 / last as f64).collect(),
        )
        .unwrap();
        let bv = MaskedArray::unmasked(bias.view());
        let add = a
            .zip_view(&bv, KeepZip(KeepBin::Add), MaskRule::Strict)
            .unwrap();
        let full = a.add(&bv, MaskRule::Strict).unwrap();
        let f = add.logsumexp(-1, false).unwrap();
        let g = full.logsumexp(-1, false).unwrap();
        assert!(
            same_bits(
                f.values().as_slice().unwrap(),
                g.values().as_slice().unwrap()
            ),
            "logsumexp {shape:?}"
        );
        // amax(abs(x)), all dims
        let abs = a.map_view(KeepMap(KeepFn::Abs(Abs)));
        let f = abs.amax(masked::Dims::All, false).unwrap();
        let g = a.abs().unwrap().amax(masked::Dims::All, false).unwrap();
        assert_eq!(f.values(), g.values());
        // a float function (div) of the view, mean over the last dim
        let div = a
            .zip_view(&b, FloatZip(FloatBin::Div), MaskRule::Strict)
            .unwrap();
        let f = div.mean(-1, true).unwrap();
        let g = a.div(&b, MaskRule::Strict).unwrap().mean(-1, true).unwrap();
        assert!(
            same_bits(
                f.values().as_slice().unwrap(),
                g.values().as_slice().unwrap()
            ),
            "mean of div {shape:?}"
        );
        // the nan-family materialises, with the same result
        let f = view.nansum(-1, false).unwrap();
        let g = a
            .mul(&b, MaskRule::Strict)
            .unwrap()
            .nansum(-1, false)
            .unwrap();
        assert!(same_bits(
            f.values().as_slice().unwrap(),
            g.values().as_slice().unwrap()
        ));
    }
}

#[test]
fn fused_checks_rules_and_domain_errors() {
    let x = ndarray::array![[1i32, 2], [3, 4]].into_dyn();
    let y = ndarray::array![[1i32, 0], [1, 1]].into_dyn();
    let a = MaskedArray::unmasked(x.view());
    let b = MaskedArray::unmasked(y.view());
    let v = a
        .zip_view(&b, KeepZip(KeepBin::FloorDivide), MaskRule::Strict)
        .unwrap();
    assert!(matches!(
        v.sum(1, false),
        Err(MaskedError::IntegerDomain { .. })
    ));
    let m = BitMask::from_bools([2, 2], [true, false, true, true]).unwrap();
    let am = MaskedArray::new(x.view(), m).unwrap();
    assert!(matches!(
        am.zip_view(&b, KeepZip(KeepBin::Add), MaskRule::Strict)
            .map(|_| ()),
        Ok(())
    ));
    let bm = MaskedArray::new(
        y.view(),
        BitMask::from_bools([2, 2], [true, true, false, true]).unwrap(),
    )
    .unwrap();
    assert!(matches!(
        am.zip_view(&bm, KeepZip(KeepBin::Add), MaskRule::Strict)
            .map(|_| ()),
        Err(MaskedError::MaskMismatch { .. })
    ));
    // masked out where the divisor is 0: no error, and the sum skips it
    let s = am
        .zip_view(&b, KeepZip(KeepBin::FloorDivide), MaskRule::And)
        .unwrap()
        .sum(1, false)
        .unwrap();
    assert_eq!(s.values().as_slice().unwrap(), &[1, 7]);
}
