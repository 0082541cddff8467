//! Every op of the registry on `f32` and `f64`, on every layout (dense; CSR with a stored
//! pattern, a separate mask, no mask; 3-d COO likewise), runs a kernel compiled in the
//! layout's own crate (the core's `compiled` module): a kernel value type missing from
//! its list fails here. An integration test, so that it links the layouts as a dependent
//! does (their unit-test builds compile no entries) and so that no other test of the
//! process moves the fallback counter.

use masked::core::compiled::{run_every_op, FALLBACKS};
use masked::{CooPattern, Element, MaskedArray, MaskedCoo, MaskedCsr, Pattern};
use std::sync::atomic::Ordering;

fn dense<T: Element>(x: ndarray::ArrayView2<'_, T>) {
    let a = MaskedArray::from_bool_mask(x, x.mapv(|v| v != T::ZERO)).unwrap();
    run_every_op(&a.view());
    run_every_op(&MaskedArray::unmasked(x));
}

#[test]
fn every_op_runs_a_kernel_compiled_in_its_layout() {
    let x = ndarray::Array2::from_shape_fn((5, 7), |(i, j)| ((i * 7 + j) % 4) as f32);
    dense(x.view());
    dense(x.mapv(f64::from).view());
    assert_eq!(FALLBACKS.load(Ordering::Relaxed), 0, "dense");

    let m = sprs::CsMat::new(
        (3, 4),
        vec![0, 2, 2, 5],
        vec![0, 3, 0, 1, 2],
        vec![1.0f32, -2.0, 3.0, 0.5, 4.0],
    );
    let mask = Pattern::from_lengths([3, 4], &[2, 0, 3]).unwrap();
    let d = m.map(|&v| f64::from(v));
    run_every_op(&MaskedCsr::from_pattern(&m).unwrap());
    run_every_op(&MaskedCsr::with_mask(&m, mask.clone()).unwrap());
    run_every_op(&MaskedCsr::unmasked(&m).unwrap());
    run_every_op(&MaskedCsr::from_pattern(&d).unwrap());
    run_every_op(&MaskedCsr::with_mask(&d, mask).unwrap());
    assert_eq!(FALLBACKS.load(Ordering::Relaxed), 0, "csr");

    let coords = [vec![0, 0, 1, 1], vec![0, 2, 1, 2], vec![1, 0, 1, 0]];
    let mask = CooPattern::from_lengths([2, 3, 2], &[2, 3]).unwrap();
    let v = vec![1.0f32, -2.0, 3.0, 0.5];
    let w: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
    run_every_op(&MaskedCoo::from_pattern([2, 3, 2], &coords, v.clone()).unwrap());
    run_every_op(&MaskedCoo::with_mask([2, 3, 2], &coords, v.clone(), mask.clone()).unwrap());
    run_every_op(&MaskedCoo::unmasked([2, 3, 2], &coords, v).unwrap());
    run_every_op(&MaskedCoo::from_pattern([2, 3, 2], &coords, w.clone()).unwrap());
    run_every_op(&MaskedCoo::with_mask([2, 3, 2], &coords, w, mask).unwrap());
    assert_eq!(FALLBACKS.load(Ordering::Relaxed), 0, "coo");
}
