//! Fused elementwise-then-reduce (the dense `ZipView`): every reduction and normalization
//! of a lazy `z(a, b)` equals materialise-then-reduce. Bit for bit where the reduced
//! dims are the innermost ones (the array's own run kernel reads the computed pieces:
//! the last dim, all dims) and where each output's lane lies in one block of rows (dims
//! that exclude dim 0, the fallbacks); within float tolerance where dim 0 is reduced
//! with inner dims kept (block states merge in block order, an association order the
//! column kernel does not use).

use masked::binary::{FloatBin, FloatZip, KeepBin, KeepZip};
use masked::dense::BLOCK;
use masked::unary::{Abs, KeepFn, KeepMap};
use masked::{BitMask, MaskRule, MaskedArray, MaskedBinaryOps, MaskedError, MaskedOps};
use ndarray::{ArrayD, IxDyn};

/// A deterministic stream of uniform values in [0, 1) (a 64-bit LCG).
fn uniform(seed: u64) -> impl FnMut() -> f64 {
    let mut s = seed;
    move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 33) as f64 / (1u64 << 31) as f64
    }
}

fn data(shape: &[usize], seed: u64) -> (ArrayD<f64>, BitMask) {
    let n: usize = shape.iter().product();
    let mut next = uniform(seed);
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
        && a.iter().zip(b).all(|(x, y)| {
            x == y || (x - y).abs() <= 1e-12 * (1.0 + y.abs()) || (x.is_nan() && y.is_nan())
        })
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
        // block by block: the values are never held whole
        view.sum(nd - 1, false).unwrap();
        view.sum(0, false).unwrap();
        view.sum(masked::Dims::All, false).unwrap();
        view.argmax(Some(nd - 1), false).unwrap();
        assert!(!view.is_materialized(), "{shape:?}");
        for dim in 0..nd {
            let f = view.sum(dim, false).unwrap();
            let g = full.sum(dim, false).unwrap();
            assert_eq!(f.mask(), g.mask(), "{shape:?} dim {dim}");
            let (fv, gv) = (
                f.values().as_slice().unwrap(),
                g.values().as_slice().unwrap(),
            );
            if dim == 0 && nd > 1 {
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

/// A result's shape, values (as `f64` bits) and mask, for bit-for-bit comparisons.
type Exact = (Vec<usize>, Vec<u64>, Vec<bool>);

fn exact<O: masked::Element>(r: masked::MaskedArrayD<O>) -> Exact {
    let shape = r.shape().to_vec();
    let values = r.values().iter().map(|v| v.to_f64().to_bits()).collect();
    let valid = (0..r.values().len())
        .map(|i| r.mask().is_none_or(|m| m.get(i)))
        .collect();
    (shape, values, valid)
}

/// The sink that turns any result into [`Exact`].
struct ToExact;
impl<'v> masked::by_name::Sink<f64, masked::dense::ZipView<'v, f64>> for ToExact {
    type Out = Exact;
    fn reduced<O: masked::Element>(&self, r: masked::MaskedArrayD<O>) -> Exact {
        exact(r)
    }
    fn mapped<O: masked::Element>(&self, m: masked::MaskedArrayD<O>) -> Exact {
        exact(m)
    }
}
impl<'v> masked::by_name::Sink<f64, masked::MaskedView<'v, f64, IxDyn>> for ToExact {
    type Out = Exact;
    fn reduced<O: masked::Element>(&self, r: masked::MaskedArrayD<O>) -> Exact {
        exact(r)
    }
    fn mapped<O: masked::Element>(&self, m: masked::MaskedArrayD<O>) -> Exact {
        exact(m)
    }
}

/// Every reduction and normalization of the registry, through the by-name dispatch:
/// the fused view against the materialised product, bit for bit over the last dim and
/// over all dims (the run kernel reading computed pieces, several pieces and several
/// parallel chunks a lane), within float tolerance over dim 0 of a matrix.
#[test]
fn every_op_fused_equals_materialised() {
    use masked::by_name::{apply_to, Kind, Op, OpRequest};
    use masked::Dims;
    // rows of 3 blocks of the run kernel and a part; one lane of 2 parallel chunks
    let row = 3 * masked::core::RUN_BLOCK + 333;
    // and a 3-D array whose blocks are single rows, for dims (0, 2) (gathered lanes
    // that continue across blocks)
    for shape in [vec![6usize, row], vec![3 * 65_536 + 11], vec![3, 50, 900]] {
        let (x, mx) = data(&shape, 3);
        let (w, _) = data(&shape, 4);
        // values near 1: the product stays finite over a long lane
        let x = x.mapv(|v| 1.0 + v * 1e-4);
        let a = MaskedArray::new(x.view(), mx.clone()).unwrap();
        let b = MaskedArray::new(w.view(), mx.clone()).unwrap();
        // a bias along the last dim, broadcast over the rows: its pieces start inside
        // rows, and over all dims they cross rows
        let last = *shape.last().unwrap();
        let bias = ArrayD::from_shape_fn(IxDyn(&[last]), |i| (i[0] % 7) as f64 * 1e-3);
        let bias = MaskedArray::unmasked(bias.view());
        let (mul, add) = (KeepZip(KeepBin::Mul), KeepZip(KeepBin::Add));
        let product = a.mul(&b, MaskRule::Strict).unwrap();
        let sum = a.add(&bias, MaskRule::Strict).unwrap();
        for (case, full) in [(0, product.view()), (1, sum.view())] {
            let view = || match case {
                0 => a.zip_view(&b, mul, MaskRule::Strict).unwrap(),
                _ => a.zip_view(&bias, add, MaskRule::Strict).unwrap(),
            };
            let mut checked = 0;
            for &op in Op::ALL {
                let dims: Vec<(Dims, bool)> = match op.kind() {
                    Kind::Reduce => {
                        let mut d = vec![
                            (Dims::from(-1), true),
                            (Dims::All, true),
                            (Dims::from(0), false),
                        ];
                        if shape.len() == 3 {
                            d.push((Dims::from(vec![0, 2]), false));
                        }
                        d
                    }
                    Kind::ReduceOne => vec![
                        (Dims::from(-1), true),
                        (Dims::All, true),
                        (Dims::from(0), false),
                    ],
                    Kind::Normalize => vec![(Dims::from(-1), true), (Dims::from(0), false)],
                    Kind::Unary | Kind::Binary => continue,
                };
                for (d, bitwise) in dims {
                    let what = format!("case {case}: {op} {d:?} {shape:?}");
                    let req = OpRequest::from_op(op).dims(d);
                    // a fresh view per op: a view that materialised keeps its values
                    let f = apply_to(&view(), &req, &ToExact);
                    let g = apply_to(&full, &req, &ToExact);
                    let (f, g) = match (f, g) {
                        (Ok(f), Ok(g)) => (f, g),
                        (Err(e), Err(h)) => {
                            assert_eq!(e, h, "{what}: errors");
                            continue;
                        }
                        (f, g) => panic!("{what}: {:?} vs {:?}", f.err(), g.err()),
                    };
                    assert_eq!((&f.0, &f.2), (&g.0, &g.2), "{what}: shape and mask");
                    if bitwise || shape.len() == 1 {
                        assert_eq!(f.1, g.1, "{what}: values");
                    } else {
                        let (fv, gv): (Vec<f64>, Vec<f64>) = (
                            f.1.iter().map(|&v| f64::from_bits(v)).collect(),
                            g.1.iter().map(|&v| f64::from_bits(v)).collect(),
                        );
                        assert!(close(&fv, &gv), "{what}: values");
                    }
                    checked += 1;
                }
            }
            assert!(checked > 40, "{checked} op cases");
        }
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

/// A random CSR matrix (`density` of the positions stored), and a random pattern over
/// the same positions keeping about 80% of them (a separate mask).
fn csr_data(
    shape: (usize, usize), density: f64, seed: u64,
) -> (sprs::CsMat<f64>, sprs::CsMat<f64>, masked::Pattern) {
    let mut next = uniform(seed);
    let (mut indptr, mut idx, mut v, mut w) = (vec![0usize], Vec::new(), Vec::new(), Vec::new());
    let (mut mptr, mut midx) = (vec![0usize], Vec::new());
    for r in 0..shape.0 {
        // row 1 is full (a row of its own task), row 2 empty
        let d = match r {
            1 => 1.0,
            2 => 0.0,
            _ => density,
        };
        for c in 0..shape.1 {
            if next() < d {
                idx.push(c);
                v.push(next() * 8.0 - 4.0);
                w.push(next() * 2.0 - 1.0);
                if next() < 0.8 {
                    midx.push(c);
                }
            }
        }
        indptr.push(idx.len());
        mptr.push(midx.len());
    }
    (
        sprs::CsMat::new(shape, indptr.clone(), idx.clone(), v),
        sprs::CsMat::new(shape, indptr, idx, w),
        masked::Pattern::try_from_parts(shape, mptr, midx).unwrap(),
    )
}

fn same_sparse(a: &masked::SparseArray<f64>, b: &masked::SparseArray<f64>, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}");
    assert_eq!(a.indices(), b.indices(), "{what}");
    assert!(same_bits(a.values(), b.values()), "{what}");
}

/// A sparse reduction's shape, stored positions and values (as `f64` bits); `None` for
/// a normalization (compared elsewhere).
type SparseExact = Option<(Vec<usize>, Vec<usize>, Vec<u64>)>;

/// The sink that turns a sparse reduction into [`SparseExact`].
struct ToSparse;
fn sparse_exact<O: masked::Element>(r: masked::SparseArray<O>) -> SparseExact {
    let (shape, indices, values) = r.into_parts();
    let bits = values.iter().map(|v| v.to_f64().to_bits()).collect();
    Some((shape, indices, bits))
}
/// Two operands of one structure, twice: with the pattern as the mask, and with a
/// separate mask (values with validity bits).
fn csr_inputs<'a>(
    x: &'a sprs::CsMat<f64>, w: &'a sprs::CsMat<f64>, pat: &masked::Pattern,
) -> [(masked::MaskedCsr<'a, f64>, masked::MaskedCsr<'a, f64>); 2] {
    use masked::MaskedCsr;
    [
        (
            MaskedCsr::from_pattern(x.view()).unwrap(),
            MaskedCsr::from_pattern(w.view()).unwrap(),
        ),
        (
            MaskedCsr::with_mask(x.view(), pat.clone()).unwrap(),
            MaskedCsr::with_mask(w.view(), pat.clone()).unwrap(),
        ),
    ]
}

/// [`csr_inputs`] for COO: random entries of `shape` from `coo_data(shape, seed)`.
fn coo_inputs(
    shape: [usize; 3], seed: u64,
) -> [(masked::MaskedCoo<f64>, masked::MaskedCoo<f64>); 2] {
    use masked::MaskedCoo;
    let (coords, v, w, pat) = coo_data(shape, seed);
    [
        (
            MaskedCoo::from_pattern(shape, &coords, v.clone()).unwrap(),
            MaskedCoo::from_pattern(shape, &coords, w.clone()).unwrap(),
        ),
        (
            MaskedCoo::with_mask(shape, &coords, v, pat.clone()).unwrap(),
            MaskedCoo::with_mask(shape, &coords, w, pat).unwrap(),
        ),
    ]
}

/// `Sink` for one sparse layout (its mapped type named with the generic `$o`).
macro_rules! to_sparse {
    ([$($g:tt)*] $layout:ty, |$o:ident| $mapped:ty) => {
        impl<$($g)*> masked::by_name::Sink<f64, $layout> for ToSparse {
            type Out = SparseExact;
            fn reduced<O: masked::Element>(&self, r: masked::SparseArray<O>) -> SparseExact {
                sparse_exact(r)
            }
            fn mapped<$o: masked::Element>(&self, _: $mapped) -> SparseExact {
                None
            }
        }
    };
}
to_sparse!(['v] masked::CsrZipView<'v, f64>, |O| masked::csr::LanesMapped<'v, O>);
to_sparse!(['v] masked::MaskedCsr<'v, f64>, |O| masked::CsrMapped<'v, O, usize>);
to_sparse!(['v] masked::CooZipView<'v, f64>, |O| masked::MaskedCoo<O>);
to_sparse!([] masked::MaskedCoo<f64>, |O| masked::MaskedCoo<O>);

/// Runs every reduction of the registry by name on a fresh fused `view()` and on the
/// materialised `full` over each of `dims` (bit for bit where its flag is set, else
/// within float tolerance); the number of cases compared.
fn every_sparse_reduction<V, M>(
    view: impl Fn() -> V, full: &M, dims: &[(masked::Dims, bool)], case: usize,
) -> usize
where
    V: masked::MaskedReduce<f64>,
    M: masked::MaskedReduce<f64>,
    ToSparse: masked::by_name::Sink<f64, V, Out = SparseExact>
        + masked::by_name::Sink<f64, M, Out = SparseExact>,
{
    use masked::by_name::{apply_to, Kind, Op, OpRequest};
    let mut checked = 0;
    for &op in Op::ALL {
        if !matches!(op.kind(), Kind::Reduce | Kind::ReduceOne) {
            continue;
        }
        for (d, bitwise) in dims {
            let what = format!("case {case}: {op} {d:?}");
            let req = OpRequest::from_op(op).dims(d.clone());
            let (f, g) = match (
                apply_to(&view(), &req, &ToSparse),
                apply_to(full, &req, &ToSparse),
            ) {
                (Ok(Some(f)), Ok(Some(g))) => (f, g),
                (Err(e), Err(h)) => {
                    assert_eq!(e, h, "{what}: errors");
                    continue;
                }
                (f, g) => panic!("{what}: {:?} vs {:?}", f.err(), g.err()),
            };
            assert_eq!((&f.0, &f.1), (&g.0, &g.1), "{what}: shape and positions");
            let (fv, gv): (Vec<f64>, Vec<f64>) = (
                f.2.iter().map(|&v| f64::from_bits(v)).collect(),
                g.2.iter().map(|&v| f64::from_bits(v)).collect(),
            );
            if *bitwise {
                assert!(same_bits(&fv, &gv), "{what}: values");
            } else {
                assert!(close(&fv, &gv), "{what}: values");
            }
            checked += 1;
        }
    }
    checked
}

/// Every reduction of the registry on the CSR fused view, by name, against the
/// materialised product: bit for bit over the rows (a row task at a time); over the
/// columns and all entries within float tolerance (row-task states merge there).
#[test]
fn csr_every_reduction_fused_equals_materialised() {
    use masked::{Dims, MaskedCsr};
    let (x, w, pat) = csr_data((1500, 700), 0.3, 11);
    let mul = KeepZip(KeepBin::Mul);
    let inputs = csr_inputs(&x, &w, &pat);
    let dims = [
        (Dims::from(1), true),
        (Dims::from(0), false),
        (Dims::All, false),
    ];
    for (case, (a, b)) in inputs.iter().enumerate() {
        let eager = a.mul(b, MaskRule::Strict).unwrap();
        let full = MaskedCsr::from_pattern(&eager).unwrap();
        let view = || a.zip_view(b, mul, MaskRule::Strict).unwrap();
        let checked = every_sparse_reduction(view, &full, &dims, case);
        assert!(checked > 30, "{checked} op cases");
    }
}

#[test]
fn csr_fused_equals_materialise_then_reduce() {
    use masked::{MaskedCsr, MedianMode};
    let (x, w, pat) = csr_data((1500, 700), 0.3, 7);
    assert!(x.nnz() > 4 * (1 << 15), "several row tasks");
    let mul = KeepZip(KeepBin::Mul);
    // mask = the pattern, and a separate mask (values with validity bits)
    let inputs = csr_inputs(&x, &w, &pat);
    for (case, (a, b)) in inputs.iter().enumerate() {
        // a fresh view per op: a view that computed its values once keeps them
        let view = || a.zip_view(b, mul, MaskRule::Strict).unwrap();
        let eager = a.mul(b, MaskRule::Strict).unwrap();
        let full = MaskedCsr::from_pattern(&eager).unwrap();
        let what = |op: &str| format!("case {case}: {op}");
        for dim in [0isize, 1] {
            same_sparse(
                &view().sum(dim, false).unwrap(),
                &full.sum(dim, false).unwrap(),
                &what(&format!("sum {dim}")),
            );
            same_sparse(
                &view().median(dim, true, MedianMode::Avg).unwrap(),
                &full.median(dim, true, MedianMode::Avg).unwrap(),
                &what(&format!("median {dim}")),
            );
            same_sparse(
                &view().logsumexp(dim, false).unwrap(),
                &full.logsumexp(dim, false).unwrap(),
                &what(&format!("logsumexp {dim}")),
            );
            let (f, g) = (view().softmax(dim).unwrap(), full.softmax(dim).unwrap());
            let f = f.typed::<usize>().unwrap();
            assert_eq!(f.indptr(), g.indptr(), "{}", what("softmax ptr"));
            assert_eq!(f.indices(), g.indices(), "{}", what("softmax idx"));
            assert!(same_bits(f.data(), g.data()), "{}", what("softmax"));
            let (f, g) = (
                view().var(dim, false, 1.0).unwrap(),
                full.var(dim, false, 1.0).unwrap(),
            );
            same_sparse(&f, &g, &what(&format!("var {dim}")));
        }
        let all = masked::Dims::All;
        let (fs, g) = (
            view().sum(all.clone(), false).unwrap(),
            full.sum(all.clone(), false).unwrap(),
        );
        assert!(close(fs.values(), g.values()), "{}", what("sum all"));
        same_sparse(
            &view().amax(all.clone(), false).unwrap(),
            &full.amax(all.clone(), false).unwrap(),
            &what("amax all"),
        );
        let (f, g) = (
            view().argmax(all.clone(), false).unwrap(),
            full.argmax(all.clone(), false).unwrap(),
        );
        assert_eq!(
            f.values(),
            g.values(),
            "{}",
            what("argmax all (positional: materialised)")
        );
        let (f, g) = (
            view().argmin(1, false).unwrap(),
            full.argmin(1, false).unwrap(),
        );
        assert_eq!(f.values(), g.values(), "{}", what("argmin rows"));
        same_sparse(
            &view().nansum(1, false).unwrap(),
            &full.nansum(1, false).unwrap(),
            &what("nansum rows (materialised)"),
        );
        same_sparse(
            &view()
                .quantile(1, false, 0.3, masked::Interpolation::Linear)
                .unwrap(),
            &full
                .quantile(1, false, 0.3, masked::Interpolation::Linear)
                .unwrap(),
            &what("quantile rows"),
        );
        // the row kernels and the order-free all-entries fold never hold the values
        let v = view();
        v.sum(1, false).unwrap();
        v.softmax(1).unwrap();
        v.median(1, false, MedianMode::Avg).unwrap();
        v.sum(all.clone(), false).unwrap();
        assert!(!v.is_materialized(), "{}", what("row kernels"));
        v.sum(0, false).unwrap();
        assert!(v.is_materialized(), "{}", what("a column reduction"));
        // the all-entries merge does not depend on the thread count
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let f1 = one.install(|| view().sum(all.clone(), false).unwrap());
        assert_eq!(
            f1.values()[0].to_bits(),
            fs.values()[0].to_bits(),
            "{}",
            what("1 vs 2 threads")
        );
    }
}

#[test]
fn csr_fused_dense_scalar_unary_and_unmasked() {
    use masked::{MaskedCsr, Pattern};
    let (x, w, pat) = csr_data((900, 400), 0.2, 11);
    let a = MaskedCsr::from_pattern(x.view()).unwrap();
    let am = MaskedCsr::with_mask(x.view(), pat.clone()).unwrap();
    // logsumexp(x + bias), the bias broadcast along rows
    let bias = ArrayD::from_shape_vec(IxDyn(&[400]), (0..400).map(|i| i as f64 / 400.0).collect())
        .unwrap();
    let bv = MaskedArray::unmasked(bias.view());
    let add = KeepZip(KeepBin::Add);
    let view = a.zip_dense_view(&bv, add, MaskRule::Strict).unwrap();
    let eager = a.add(&bv, MaskRule::Strict).unwrap();
    let full = MaskedCsr::from_pattern(&eager).unwrap();
    same_sparse(
        &view.logsumexp(1, false).unwrap(),
        &full.logsumexp(1, false).unwrap(),
        "lse(x + bias)",
    );
    // a masked dense operand under `and`: entries drop out (validity bits per entry)
    let (dv, dm) = data(&[900, 400], 5);
    let d = MaskedArray::new(dv.view(), dm).unwrap();
    for (lhs, what) in [(&a, "pattern"), (&am, "separate mask")] {
        let view = || lhs.zip_dense_view(&d, add, MaskRule::And).unwrap();
        let eager = lhs.add(&d, MaskRule::And).unwrap();
        let full = MaskedCsr::from_pattern(&eager).unwrap();
        same_sparse(
            &view().sum(1, true).unwrap(),
            &full.sum(1, true).unwrap(),
            what,
        );
        same_sparse(
            &view().mean(0, false).unwrap(),
            &full.mean(0, false).unwrap(),
            what,
        );
        let (f, g) = (view().log_softmax(1).unwrap(), full.log_softmax(1).unwrap());
        let f = f.typed::<usize>().unwrap();
        assert_eq!(f.indptr(), g.indptr(), "{what}");
        assert_eq!(f.indices(), g.indices(), "{what}");
        assert!(same_bits(f.data(), g.data()), "{what}");
        let (f, g) = (view().cumsum(1).unwrap(), full.cumsum(1).unwrap());
        assert!(same_bits(f.data(), g.data()), "{what}: cumsum");
    }
    // the strict rule against a dense mask that differs: the error at once
    assert!(matches!(
        a.zip_dense_view(&d, add, MaskRule::Strict).map(|_| ()),
        Err(MaskedError::MaskMismatch { .. })
    ));
    // amax(abs(x)) and a scalar op
    let abs = a.map_view(KeepMap(KeepFn::Abs(Abs))).unwrap();
    let abs_x = a.abs().unwrap();
    let g = MaskedCsr::from_pattern(&abs_x).unwrap();
    same_sparse(
        &abs.amax(masked::Dims::All, false).unwrap(),
        &g.amax(masked::Dims::All, false).unwrap(),
        "amax(abs(x))",
    );
    let half = am.zip_scalar_view(0.5, KeepZip(KeepBin::Mul)).unwrap();
    let halved = am.mul(&masked::Splat(0.5), MaskRule::Strict).unwrap();
    let g = MaskedCsr::from_pattern(&halved).unwrap();
    same_sparse(
        &half.prod(1, false).unwrap(),
        &g.prod(1, false).unwrap(),
        "prod(0.5 x)",
    );
    // different patterns under `and`: merged when the view is made
    let b = MaskedCsr::with_mask(w.view(), pat.clone()).unwrap();
    let view = a
        .zip_view(&b, KeepZip(KeepBin::Mul), MaskRule::And)
        .unwrap();
    let merged = a.mul(&b, MaskRule::And).unwrap();
    let g = MaskedCsr::from_pattern(&merged).unwrap();
    same_sparse(
        &view.sum(1, false).unwrap(),
        &g.sum(1, false).unwrap(),
        "merged",
    );
    // no mask: unstored positions are valid zeros, counted by the mean
    let u = MaskedCsr::unmasked(x.view()).unwrap();
    let twice = || u.zip_scalar_view(2.0, KeepZip(KeepBin::Mul)).unwrap();
    let doubled = u.mul(&masked::Splat(2.0), MaskRule::Strict).unwrap();
    let g = MaskedCsr::unmasked(&doubled).unwrap();
    for dim in [0isize, 1] {
        same_sparse(
            &twice().mean(dim, false).unwrap(),
            &g.mean(dim, false).unwrap(),
            "unmasked mean",
        );
    }
    assert!(close(
        twice().mean(masked::Dims::All, false).unwrap().values(),
        g.mean(masked::Dims::All, false).unwrap().values()
    ));
    // ... and a map that does not keep 0 would store every position
    assert!(matches!(
        u.map_view(KeepMap(KeepFn::Abs(Abs))).map(|_| ()),
        Ok(())
    ));
    assert!(matches!(
        u.zip_scalar_view(1.0, KeepZip(KeepBin::Add)).map(|_| ()),
        Err(MaskedError::Unsupported { .. })
    ));
    let _ = Pattern::try_from_parts((1, 1), vec![0, 0], vec![]).unwrap();
}

#[test]
fn csr_fused_integer_domain_error_when_read() {
    use masked::MaskedCsr;
    let x = sprs::CsMat::new((2, 3), vec![0, 2, 3], vec![0, 2, 1], vec![7i32, 8, 9]);
    let y = sprs::CsMat::new((2, 3), vec![0, 2, 3], vec![0, 2, 1], vec![2i32, 0, 3]);
    let (a, b) = (
        MaskedCsr::from_pattern(x.view()).unwrap(),
        MaskedCsr::from_pattern(y.view()).unwrap(),
    );
    let v = a
        .zip_view(&b, KeepZip(KeepBin::FloorDivide), MaskRule::Strict)
        .unwrap();
    match v.sum(1, false) {
        Err(MaskedError::IntegerDomain { .. }) => {}
        other => panic!("expected an integer domain error, got {other:?}"),
    }
    // masked out: the divisor 0 is not read
    let pat = masked::Pattern::try_from_parts((2, 3), vec![0, 1, 2], vec![0, 1]).unwrap();
    let b = MaskedCsr::with_mask(y.view(), pat).unwrap();
    let v = a
        .zip_view(&b, KeepZip(KeepBin::FloorDivide), MaskRule::And)
        .unwrap();
    let s = v.sum(1, false).unwrap();
    assert_eq!(s.values(), &[3, 3]);
}

/// A random 3-D COO array (about 30% of the positions stored), a second value set on
/// the same entries, and a separate mask keeping about 80% of them.
fn coo_data(
    shape: [usize; 3], seed: u64,
) -> (Vec<Vec<usize>>, Vec<f64>, Vec<f64>, masked::CooPattern) {
    let mut next = uniform(seed);
    let (mut coords, mut v, mut w, mut keep) = (
        vec![Vec::new(); 3],
        Vec::new(),
        Vec::new(),
        vec![Vec::new(); 3],
    );
    for i in 0..shape[0] {
        for j in 0..shape[1] {
            for k in 0..shape[2] {
                if next() < 0.3 {
                    for (c, x) in coords.iter_mut().zip([i, j, k]) {
                        c.push(x);
                    }
                    v.push(next() * 8.0 - 4.0);
                    w.push(next() * 2.0 - 1.0);
                    if next() < 0.8 {
                        for (c, x) in keep.iter_mut().zip([i, j, k]) {
                            c.push(x);
                        }
                    }
                }
            }
        }
    }
    let pat = masked::CooPattern::from_coords(shape, &keep).unwrap();
    (coords, v, w, pat)
}

/// The eager result as a masked COO array (it stores exactly its valid positions).
fn coo_of(
    shape: &[usize], s: masked::SparseArray<f64>, mask: masked::CooMask,
) -> masked::MaskedCoo<f64> {
    let (_, flat, values) = s.into_parts();
    let p = masked::CooPattern::from_flat(shape, &flat).unwrap();
    masked::MaskedCoo::from_parts(p, values, mask).unwrap()
}

/// The COO view: reductions over trailing dims run on the fused lanes (bit for bit: the
/// same row kernels on the same groups), the others materialise (bit for bit).
/// Every reduction of the registry on the COO fused view, by name, against the
/// materialised product, bit for bit: over trailing dims (the fused row lanes) and
/// where the view materialises.
#[test]
fn coo_every_reduction_fused_equals_materialised() {
    use masked::{CooMask, Dims};
    let shape = [40usize, 60, 100];
    let inputs = coo_inputs(shape, 5);
    let mul = KeepZip(KeepBin::Mul);
    let dims = [
        (Dims::from(2), true),
        (Dims::from(vec![1, 2]), true),
        (Dims::from(0), true),
        (Dims::All, true),
    ];
    for (case, (a, b)) in inputs.iter().enumerate() {
        let full = coo_of(&shape, a.mul(b, MaskRule::Strict).unwrap(), CooMask::Stored);
        let view = || a.zip_view(b, mul, MaskRule::Strict).unwrap();
        let checked = every_sparse_reduction(view, &full, &dims, case);
        assert!(checked > 40, "{checked} op cases");
    }
}

#[test]
fn coo_fused_equals_materialise_then_reduce() {
    use masked::{CooMask, Dims, MaskedCoo, MedianMode};
    let shape = [40usize, 60, 100];
    let inputs = coo_inputs(shape, 3);
    // the same data again, for the cases below that build other operands from it
    let (coords, v, w, pat) = coo_data(shape, 3);
    assert!(
        inputs[0].0.values().len() > 2 * (1 << 15),
        "several row tasks"
    );
    let mul = KeepZip(KeepBin::Mul);
    let mut argmaxes = 0;
    for (case, (a, b)) in inputs.iter().enumerate() {
        let view = || a.zip_view(b, mul, MaskRule::Strict).unwrap();
        let full = coo_of(&shape, a.mul(b, MaskRule::Strict).unwrap(), CooMask::Stored);
        for dims in [
            Dims::from(2),
            Dims::from(vec![1, 2]),
            Dims::from(0),
            Dims::from(vec![0, 2]),
            Dims::All,
        ] {
            let what = format!("case {case}, dims {dims:?}");
            same_sparse(
                &view().sum(dims.clone(), false).unwrap(),
                &full.sum(dims.clone(), false).unwrap(),
                &what,
            );
            same_sparse(
                &view()
                    .median(dims.clone(), true, MedianMode::Lower)
                    .unwrap(),
                &full.median(dims.clone(), true, MedianMode::Lower).unwrap(),
                &what,
            );
            same_sparse(
                &view().logsumexp(dims.clone(), false).unwrap(),
                &full.logsumexp(dims.clone(), false).unwrap(),
                &what,
            );
            // argmax takes one dim (or all)
            if let Ok(f) = view().argmax(dims.clone(), false) {
                assert_eq!(
                    f.values(),
                    full.argmax(dims.clone(), false).unwrap().values(),
                    "{what}: argmax"
                );
                argmaxes += 1;
            }
        }
        for dim in [0isize, 2] {
            let (f, g) = (view().softmax(dim).unwrap(), full.softmax(dim).unwrap());
            assert_eq!(f.pattern(), g.pattern(), "softmax {dim}");
            assert!(same_bits(f.values(), g.values()), "softmax {dim}");
        }
        same_sparse(
            &view().nanmean(2, false).unwrap(),
            &full.nanmean(2, false).unwrap(),
            "nanmean",
        );
    }
    assert_eq!(argmaxes, 6, "argmax over dims 2, 0 and all, in both cases");
    // reductions over trailing dims never hold the values; over dim 0 they do
    let (a, b) = &inputs[1];
    let lazy = a.zip_view(b, mul, MaskRule::Strict).unwrap();
    lazy.sum(vec![1, 2], false).unwrap();
    lazy.median(2, false, MedianMode::Avg).unwrap();
    lazy.amax(Dims::All, false).unwrap();
    assert!(!lazy.is_materialized());
    lazy.sum(0, false).unwrap();
    assert!(lazy.is_materialized());
    // x + bias (a dense operand along the last dim), and a masked one under `and`
    let a = MaskedCoo::with_mask(shape, &coords, v.clone(), pat.clone()).unwrap();
    let bias = ArrayD::from_shape_vec(IxDyn(&[100]), (0..100).map(|i| i as f64 / 100.0).collect())
        .unwrap();
    let bv = MaskedArray::unmasked(bias.view());
    let add = KeepZip(KeepBin::Add);
    let full = coo_of(
        &shape,
        a.add(&bv, MaskRule::Strict).unwrap(),
        CooMask::Stored,
    );
    same_sparse(
        &a.zip_dense_view(&bv, add, MaskRule::Strict)
            .unwrap()
            .logsumexp(-1, false)
            .unwrap(),
        &full.logsumexp(-1, false).unwrap(),
        "lse(x + bias)",
    );
    let (dv, dm) = data(&shape, 9);
    let d = MaskedArray::new(dv.view(), dm).unwrap();
    let full = coo_of(&shape, a.add(&d, MaskRule::And).unwrap(), CooMask::Stored);
    same_sparse(
        &a.zip_dense_view(&d, add, MaskRule::And)
            .unwrap()
            .mean(vec![1, 2], false)
            .unwrap(),
        &full.mean(vec![1, 2], false).unwrap(),
        "mean(x + d) under and",
    );
    // different patterns: merged when the view is made
    let b = MaskedCoo::from_pattern(shape, &coords, w.clone()).unwrap();
    let full = coo_of(&shape, a.mul(&b, MaskRule::And).unwrap(), CooMask::Stored);
    same_sparse(
        &a.zip_view(&b, mul, MaskRule::And)
            .unwrap()
            .sum(2, false)
            .unwrap(),
        &full.sum(2, false).unwrap(),
        "merged",
    );
    // amax(abs(x)) over all; no mask: unstored zeros count in the mean
    let abs = a.map_view(KeepMap(KeepFn::Abs(Abs))).unwrap();
    let full = a.abs().unwrap();
    same_sparse(
        &abs.amax(Dims::All, false).unwrap(),
        &full.amax(Dims::All, false).unwrap(),
        "amax(abs)",
    );
    let u = MaskedCoo::unmasked(shape, &coords, v.clone()).unwrap();
    let twice = || u.zip_scalar_view(2.0, mul).unwrap();
    let full = coo_of(
        &shape,
        u.mul(&masked::Splat(2.0), MaskRule::Strict).unwrap(),
        CooMask::All,
    );
    for dims in [Dims::from(2), Dims::from(0)] {
        same_sparse(
            &twice().mean(dims.clone(), false).unwrap(),
            &full.mean(dims.clone(), false).unwrap(),
            "unmasked mean",
        );
    }
    assert!(matches!(
        u.zip_scalar_view(1.0, add).map(|_| ()),
        Err(MaskedError::Unsupported { .. })
    ));
    // an integer op undefined at a valid entry: the error when the values are read
    let c = [vec![0usize, 0, 1], vec![0usize, 2, 1]];
    let x = MaskedCoo::from_pattern([2, 3], &c, vec![7i32, 8, 9]).unwrap();
    let y = MaskedCoo::from_pattern([2, 3], &c, vec![2i32, 0, 3]).unwrap();
    let v = x
        .zip_view(&y, KeepZip(KeepBin::FloorDivide), MaskRule::Strict)
        .unwrap();
    assert!(matches!(
        v.sum(1, false),
        Err(MaskedError::IntegerDomain { .. })
    ));
}
