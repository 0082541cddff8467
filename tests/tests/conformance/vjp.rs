//! Gradients (VJPs) on the dense layout: every differentiable reduction and
//! normalization of the registry against central finite differences of the engine's own
//! forward op, in f64, on random masks with fully masked lanes; the upstream gradient
//! holds NaN at invalid output positions, which must not reach the result. Plus the
//! contract's edge rules by hand and 1 vs 2 threads.

use masked::by_name::{apply_dense, Kind, Op, OpRequest};
use masked::{BitMask, Dims, DynVec, MaskedArray, MaskedArrayD, MaskedError, MaskedOps};
use ndarray::{ArrayD, IxDyn};

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn random_range(&mut self, r: std::ops::Range<f64>) -> f64 {
        r.start + (r.end - r.start) * self.unit()
    }
    fn random_bool(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

fn f64s(v: &DynVec) -> Vec<f64> {
    match v {
        DynVec::F64(v) => v.clone(),
        other => panic!("expected f64 values, got {other:?}"),
    }
}

/// A random f64 array of `shape` with about a third of it masked out and, when the
/// shape allows, lane 0 of the last dim fully masked.
fn random_input(rng: &mut Rng, shape: &[usize]) -> (ArrayD<f64>, Vec<bool>) {
    let n: usize = shape.iter().product();
    let x: Vec<f64> = (0..n).map(|_| rng.random_range(-2.0..2.0)).collect();
    let mut m: Vec<bool> = (0..n).map(|_| rng.random_bool(0.7)).collect();
    let last = *shape.last().unwrap();
    for v in m.iter_mut().take(last) {
        *v = false;
    }
    (ArrayD::from_shape_vec(IxDyn(shape), x).unwrap(), m)
}

fn masked(x: &ArrayD<f64>, m: &[bool]) -> MaskedArrayD<f64> {
    MaskedArray::new(
        x.clone(),
        BitMask::from_bools(x.shape(), m.iter().copied()).unwrap(),
    )
    .unwrap()
}

/// The forward op's valid outputs as (values, mask).
fn forward(x: &ArrayD<f64>, m: &[bool], req: &OpRequest) -> (Vec<f64>, Vec<bool>, Vec<usize>) {
    let a = masked(x, m);
    let out = apply_dense(&a.view(), req).unwrap();
    (f64s(&out.values), out.mask.to_vec(), out.shape)
}

/// Checks the VJP of `req` on one input against central differences.
fn check_fd(x: &ArrayD<f64>, m: &[bool], req: &OpRequest, rng: &mut Rng) {
    let (_, out_mask, out_shape) = forward(x, m, req);
    // the upstream gradient: random at valid outputs, NaN at invalid ones (ignored)
    let g: Vec<f64> = out_mask
        .iter()
        .map(|&ok| {
            if ok {
                rng.random_range(-1.0..1.0)
            } else {
                f64::NAN
            }
        })
        .collect();
    let g = ArrayD::from_shape_vec(IxDyn(&out_shape), g).unwrap();
    let a = masked(x, m);
    let dx = match req.op.kind() {
        Kind::Normalize | Kind::Unary => {
            // a map's upstream has the input's shape and mask
            let gm = MaskedArray::new(
                g.clone(),
                BitMask::from_bools(x.shape(), m.iter().copied()).unwrap(),
            )
            .unwrap();
            a.vjp_map(req, &gm).unwrap()
        }
        _ => a
            .vjp_reduce(req, &MaskedArray::unmasked(g.clone()))
            .unwrap(),
    };
    assert_eq!(dx.shape(), x.shape());
    assert_eq!(
        dx.mask().map(|b| b.to_vec()),
        Some(m.to_vec()),
        "{}: the input's mask",
        req.op
    );
    let dx: Vec<f64> = dx.values().iter().copied().collect();
    let h = 1e-6;
    let xs: Vec<f64> = x.iter().copied().collect();
    for i in 0..xs.len() {
        if !m[i] {
            assert_eq!(dx[i], 0.0, "{} at masked-out {i}", req.op);
            continue;
        }
        assert!(dx[i].is_finite(), "{} at {i}: {}", req.op, dx[i]);
        let at = |v: f64| {
            let mut y = xs.clone();
            y[i] = v;
            let y = ArrayD::from_shape_vec(IxDyn(x.shape()), y).unwrap();
            forward(&y, m, req).0
        };
        let (up, dn) = (at(xs[i] + h), at(xs[i] - h));
        let fd: f64 = up
            .iter()
            .zip(&dn)
            .zip(g.iter())
            .zip(&out_mask)
            // a lane whose forward value is not finite (var with count <= correction)
            // has no derivative: the contract's gradient there is 0
            .filter(|(((u, d), _), &ok)| ok && u.is_finite() && d.is_finite())
            .map(|(((u, d), g), _)| g * (u - d) / (2.0 * h))
            .sum();
        assert!(
            (fd - dx[i]).abs() <= 1e-5 * (1.0 + fd.abs()),
            "{} {:?} at {i}: finite difference {fd}, vjp {}",
            req.op,
            req.dims,
            dx[i]
        );
    }
}

/// The requests to check for `op`: its dims variants and option values.
fn requests(op: Op, rank: usize) -> Vec<OpRequest> {
    let base = OpRequest::from_op(op);
    let mut reqs = Vec::new();
    match op.kind() {
        Kind::Normalize => {
            for d in 0..rank as isize {
                reqs.push(base.clone().dims(d));
            }
        }
        Kind::Unary => reqs.push(base.clone()),
        _ => {
            reqs.push(base.clone().dims(-1));
            reqs.push(base.clone().dims(0).keepdim(true));
            reqs.push(base.clone());
            if rank == 3 {
                reqs.push(base.clone().dims(Dims::from([0isize, 2])));
            }
        }
    }
    let mut more = Vec::new();
    for r in &reqs {
        match op.name() {
            "var" | "std" | "nanvar" | "nanstd" => {
                for c in [0.0, 1.0, 2.5] {
                    more.push(r.clone().correction(c));
                }
            }
            "norm" => {
                for p in [
                    1.0,
                    2.0,
                    3.0,
                    0.5,
                    -1.5,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    0.0,
                ] {
                    more.push(r.clone().ord(p));
                }
            }
            "normalize" => {
                for (p, eps) in [(2.0, 1e-12), (1.0, 1e-12), (3.0, 1e-12), (2.0, 50.0)] {
                    more.push(r.clone().ord(p).eps(eps));
                }
            }
            "quantile" | "nanquantile" => {
                use masked::Interpolation::*;
                for (q, i) in [
                    (0.3, Linear),
                    (0.75, Lower),
                    (0.5, Higher),
                    (0.1, Midpoint),
                    (0.6, Nearest),
                ] {
                    more.push(r.clone().q(q).interpolation(i));
                }
            }
            "clamp" => {
                more.push(r.clone().min(Some(-0.5)).max(Some(0.7)));
                more.push(r.clone().max(Some(0.2)));
            }
            "pow" => {
                more.push(r.clone().exponent(3.0));
                more.push(r.clone().exponent(0.5));
            }
            "median" | "nanmedian" => {
                more.push(r.clone().mode(masked::MedianMode::Avg));
                more.push(r.clone().mode(masked::MedianMode::Lower));
            }
            _ => more.push(r.clone()),
        }
    }
    more
}

#[test]
fn every_lane_vjp_equals_finite_differences_on_dense() {
    let mut rng = Rng(16);
    let mut checked = 0;
    for shape in [vec![4, 5], vec![3, 2, 4]] {
        let (x, m) = random_input(&mut rng, &shape);
        for &op in Op::ALL {
            if !op.differentiable()
                || !matches!(op.kind(), Kind::Reduce | Kind::ReduceOne | Kind::Normalize)
            {
                continue;
            }
            for req in requests(op, shape.len()) {
                check_fd(&x, &m, &req, &mut rng);
                checked += 1;
            }
        }
    }
    // every reduction and normalization with a gradient took part
    assert!(checked > 150, "{checked} requests");
}

#[test]
fn nan_family_gradients_skip_nan_values() {
    // nanmean over [1, NaN, 3] and a masked-out 7: 1/2 at the two numbers, 0 elsewhere
    let x = ArrayD::from_shape_vec(IxDyn(&[4]), vec![1.0, f64::NAN, 3.0, 7.0]).unwrap();
    let a = masked(&x, &[true, true, true, false]);
    let g = MaskedArray::unmasked(ArrayD::from_elem(IxDyn(&[]), 1.0));
    let dx = a
        .vjp_reduce(&OpRequest::new("nanmean").unwrap(), &g)
        .unwrap();
    assert_eq!(dx.values().as_slice().unwrap(), &[0.5, 0.0, 0.5, 0.0]);
    // mean with the valid NaN: the forward is NaN, the gradient the plain mean's
    let dx = a.vjp_reduce(&OpRequest::new("mean").unwrap(), &g).unwrap();
    assert_eq!(
        dx.values().as_slice().unwrap(),
        &[1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0, 0.0]
    );
    // amax with the valid NaN: NaN at the valid positions only
    let dx = a.vjp_reduce(&OpRequest::new("amax").unwrap(), &g).unwrap();
    let v = dx.values().as_slice().unwrap();
    assert!(v[..3].iter().all(|x| x.is_nan()) && v[3] == 0.0, "{v:?}");
}

#[test]
fn var_and_std_give_no_nan_where_torch_does() {
    // torch.masked gives NaN on every position of a fully masked row and at the valid
    // element of a row with one valid element; here 0
    let x = ArrayD::from_shape_vec(
        IxDyn(&[3, 3]),
        vec![1.0, 2.0, 4.0, 5.0, 6.0, 7.0, 3.0, 3.0, 3.0],
    )
    .unwrap();
    let m = [true, true, true, false, false, false, false, true, false];
    let a = masked(&x, &m);
    let g = MaskedArray::unmasked(ArrayD::from_elem(IxDyn(&[3]), 1.0));
    for op in ["var", "std", "nanvar", "nanstd"] {
        let dx = a
            .vjp_reduce(&OpRequest::new(op).unwrap().dims(1), &g)
            .unwrap();
        let v = dx.values().as_slice().unwrap();
        assert!(v.iter().all(|x| x.is_finite()), "{op}: {v:?}");
        assert_eq!(&v[3..], &[0.0; 6], "{op}");
    }
    // std of row 0 [1, 2, 4] (mean 7/3, correction 1): (x - mean) / (2 sd)
    let sd = ((16.0f64 / 9.0 + 1.0 / 9.0 + 25.0 / 9.0) / 2.0).sqrt();
    let dx = a
        .vjp_reduce(&OpRequest::new("std").unwrap().dims(1), &g)
        .unwrap();
    let v = dx.values().as_slice().unwrap();
    for (k, xv) in [1.0, 2.0, 4.0].iter().enumerate() {
        assert!((v[k] - (xv - 7.0 / 3.0) / (2.0 * sd)).abs() < 1e-15);
    }
}

#[test]
fn vjp_refusals_are_typed() {
    let x = ArrayD::from_shape_vec(IxDyn(&[2, 2]), vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let a = MaskedArray::unmasked(x.clone());
    let g = MaskedArray::unmasked(ArrayD::from_elem(IxDyn(&[2]), 1.0));
    for op in ["argmax", "argmin", "count"] {
        let e = a
            .vjp_reduce(&OpRequest::new(op).unwrap().dims(1), &g)
            .unwrap_err();
        assert!(
            matches!(e, MaskedError::NotDifferentiable { .. }),
            "{op}: {e}"
        );
    }
    let e = a
        .vjp_reduce(
            &OpRequest::new("sum").unwrap().dims(1),
            &MaskedArray::unmasked(ArrayD::from_elem(IxDyn(&[3]), 1.0)),
        )
        .unwrap_err();
    assert!(matches!(e, MaskedError::ShapeMismatch { .. }), "{e}");
    let e = a
        .vjp_reduce(&OpRequest::new("softmax").unwrap().dims(1), &g)
        .unwrap_err();
    assert!(matches!(e, MaskedError::InvalidArgument { .. }), "{e}");
    let xi = MaskedArray::unmasked(ArrayD::from_elem(IxDyn(&[2, 2]), 3i32));
    let gi = MaskedArray::unmasked(ArrayD::from_elem(IxDyn(&[2]), 1.0f64));
    let e = xi
        .vjp_reduce(&OpRequest::new("sum").unwrap().dims(1), &gi)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "sum is not differentiable: integer and bool input have no gradient"
    );
}

#[test]
fn one_and_two_threads_give_identical_gradients() {
    let mut rng = Rng(7);
    let (x, m) = random_input(&mut rng, &[64, 300]);
    let a = masked(&x, &m);
    let g1 = MaskedArray::unmasked(ArrayD::from_shape_fn(IxDyn(&[64]), |i| i[0] as f64 - 3.5));
    let gm = masked(&x.mapv(|v| v * 0.5 - 0.1), &m);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut out = Vec::new();
            for op in ["sum", "var", "amax", "median", "logsumexp", "norm"] {
                let r = OpRequest::new(op).unwrap().dims(1);
                out.push(a.vjp_reduce(&r, &g1).unwrap().values().clone());
            }
            for op in ["softmax", "log_softmax", "cumprod", "normalize"] {
                let r = OpRequest::new(op).unwrap().dims(1);
                out.push(a.vjp_map(&r, &gm).unwrap().values().clone());
            }
            out
        })
    };
    let (one, two) = (run(1), run(2));
    for (a, b) in one.iter().zip(&two) {
        let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same);
    }
}

/// The sparse layouts' VJPs equal the dense one at every valid position, and store
/// exactly the valid positions: CSR and COO with the mask as the stored pattern and as
/// a separate pattern (valid-but-unstored positions take part as 0), rank 2 and (COO)
/// rank 3 with every dims choice.
mod sparse {
    use super::*;
    use masked::{CooPattern, MaskedCoo, MaskedCsr, Pattern, SparseArray};
    use sprs::CsMat;

    /// A stored/unstored choice per cell and a mask per cell.
    struct Data {
        shape: Vec<usize>,
        stored: Vec<bool>,
        x: Vec<f64>,
        mask: Vec<bool>,
    }

    fn data(rng: &mut Rng, shape: &[usize], own_mask: bool) -> Data {
        let n: usize = shape.iter().product();
        let stored: Vec<bool> = (0..n).map(|_| rng.random_bool(0.6)).collect();
        let x: Vec<f64> = stored
            .iter()
            .map(|&s| if s { rng.random_range(-2.0..2.0) } else { 0.0 })
            .collect();
        let mask = if own_mask {
            (0..n).map(|_| rng.random_bool(0.6)).collect()
        } else {
            stored.clone()
        };
        Data {
            shape: shape.to_vec(),
            stored,
            x,
            mask,
        }
    }

    fn dense_of(d: &Data) -> MaskedArrayD<f64> {
        let x = ArrayD::from_shape_vec(IxDyn(&d.shape), d.x.clone()).unwrap();
        masked(&x, &d.mask)
    }

    fn coords_of(shape: &[usize], flat: &[usize]) -> Vec<Vec<usize>> {
        masked::sparse::unravel(shape, flat)
    }

    fn coo_of(d: &Data, own_mask: bool) -> MaskedCoo<f64> {
        let flat: Vec<usize> = (0..d.x.len()).filter(|&i| d.stored[i]).collect();
        let vals = flat.iter().map(|&i| d.x[i]).collect();
        let coords = coords_of(&d.shape, &flat);
        if own_mask {
            let m = CooPattern::from_bools(&d.shape, &d.mask).unwrap();
            MaskedCoo::with_mask(&d.shape, &coords, vals, m).unwrap()
        } else {
            MaskedCoo::from_pattern(&d.shape, &coords, vals).unwrap()
        }
    }

    fn csmat_of(d: &Data) -> CsMat<f64> {
        let (r, c) = (d.shape[0], d.shape[1]);
        let mut indptr = vec![0];
        let (mut ind, mut val) = (Vec::new(), Vec::new());
        for i in 0..r {
            for j in 0..c {
                if d.stored[i * c + j] {
                    ind.push(j);
                    val.push(d.x[i * c + j]);
                }
            }
            indptr.push(ind.len());
        }
        CsMat::new((r, c), indptr, ind, val)
    }

    /// The dense VJP of `req` and its upstream: (gradient values, upstream values over
    /// the forward output, forward output mask).
    fn dense_vjp(d: &Data, req: &OpRequest, rng: &mut Rng) -> (Vec<f64>, Vec<f64>, Vec<bool>) {
        let a = dense_of(d);
        let x = ArrayD::from_shape_vec(IxDyn(&d.shape), d.x.clone()).unwrap();
        let (_, out_mask, out_shape) = forward(&x, &d.mask, req);
        let g: Vec<f64> = out_mask
            .iter()
            .map(|&ok| {
                if ok {
                    rng.random_range(-1.0..1.0)
                } else {
                    f64::NAN
                }
            })
            .collect();
        let ga = ArrayD::from_shape_vec(IxDyn(&out_shape), g.clone()).unwrap();
        let dx = match req.op.kind() {
            Kind::Normalize | Kind::Unary => a.vjp_map(req, &masked(&ga, &d.mask)).unwrap(),
            _ => a.vjp_reduce(req, &MaskedArray::unmasked(ga)).unwrap(),
        };
        (dx.values().iter().copied().collect(), g, out_mask)
    }

    /// The upstream of a reduction as a sparse array at the valid outputs.
    fn sparse_g(shape: &[usize], g: &[f64], ok: &[bool]) -> SparseArray<f64> {
        let ids: Vec<usize> = (0..g.len()).filter(|&i| ok[i]).collect();
        let vals = ids.iter().map(|&i| g[i]).collect();
        SparseArray::new(shape.to_vec(), ids, vals).unwrap()
    }

    /// Checks a sparse gradient (positions, values) against the dense one.
    fn agree(what: &str, d: &Data, flat: &[usize], vals: &[f64], dense: &[f64]) {
        let valid: Vec<usize> = (0..d.mask.len()).filter(|&i| d.mask[i]).collect();
        assert_eq!(
            flat,
            valid.as_slice(),
            "{what}: stores exactly the valid positions"
        );
        for (&p, &v) in flat.iter().zip(vals) {
            assert!(
                v.to_bits() == dense[p].to_bits(),
                "{what} at {p}: sparse {v}, dense {}",
                dense[p]
            );
        }
    }

    fn ops() -> impl Iterator<Item = Op> {
        Op::ALL.iter().copied().filter(|op| {
            op.differentiable()
                && matches!(op.kind(), Kind::Reduce | Kind::ReduceOne | Kind::Normalize)
        })
    }

    #[test]
    fn csr_and_coo_gradients_equal_the_dense_ones() {
        let mut rng = Rng(99);
        let mut checked = 0;
        for own in [false, true] {
            for shape in [vec![5, 7], vec![3, 2, 4]] {
                let d = data(&mut rng, &shape, own);
                let coo = coo_of(&d, own);
                let csm = (shape.len() == 2).then(|| csmat_of(&d));
                let csr = csm.as_ref().map(|m| {
                    if own {
                        let p = Pattern::from_bools((shape[0], shape[1]), &d.mask).unwrap();
                        MaskedCsr::with_mask(m.view(), p).unwrap()
                    } else {
                        MaskedCsr::from_pattern(m.view()).unwrap()
                    }
                });
                for op in ops() {
                    for req in requests(op, shape.len()) {
                        let what = format!(
                            "{op} {:?} keepdim {} own mask {own} {shape:?}",
                            req.dims, req.keepdim
                        );
                        let (dense, g, ok) = dense_vjp(&d, &req, &mut rng);
                        let out_shape = forward(
                            &ArrayD::from_shape_vec(IxDyn(&shape), d.x.clone()).unwrap(),
                            &d.mask,
                            &req,
                        )
                        .2;
                        if matches!(op.kind(), Kind::Normalize | Kind::Unary) {
                            // the upstream stored at the valid input positions
                            let gs = sparse_g(&shape, &g, &ok);
                            let gc: MaskedCoo<f64> = gs.clone().into();
                            let r = coo.vjp_map(&req, &gc).unwrap();
                            let flat = r.pattern().flat();
                            agree(&format!("coo {what}"), &d, &flat, r.values(), &dense);
                            if let Some(csr) = &csr {
                                let dim = req.one_dim().unwrap_or(-1);
                                let mut gm = csr.softmax(dim).unwrap();
                                gm.data_mut().copy_from_slice(gs.values());
                                let r = csr.vjp_map(&req, &gm).unwrap();
                                let flat: Vec<usize> =
                                    r.iter().map(|(_, (i, j))| i * shape[1] + j).collect();
                                agree(&format!("csr {what}"), &d, &flat, r.data(), &dense);
                            }
                        } else {
                            let gs = sparse_g(&out_shape, &g, &ok);
                            let r = coo.vjp_reduce(&req, &gs).unwrap();
                            agree(
                                &format!("coo {what}"),
                                &d,
                                &r.pattern().flat(),
                                r.values(),
                                &dense,
                            );
                            if let Some(csr) = &csr {
                                let r = csr.vjp_reduce(&req, &gs).unwrap();
                                let flat: Vec<usize> =
                                    r.iter().map(|(_, (i, j))| i * shape[1] + j).collect();
                                agree(&format!("csr {what}"), &d, &flat, r.data(), &dense);
                            }
                        }
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 400, "{checked}");
    }

    #[test]
    fn a_mask_free_sparse_input_refuses_rather_than_densify() {
        let mut rng = Rng(5);
        let d = data(&mut rng, &[4, 6], false);
        let m = csmat_of(&d);
        let csr = MaskedCsr::unmasked(m.view()).unwrap();
        let g = SparseArray::new(vec![4], vec![0, 1, 2, 3], vec![1.0; 4]).unwrap();
        let e = csr
            .vjp_reduce(&OpRequest::new("sum").unwrap().dims(1), &g)
            .unwrap_err();
        assert!(matches!(e, MaskedError::Unsupported { .. }), "{e}");
    }

    #[test]
    fn a_csr_gradient_shares_the_input_indices_when_the_mask_is_the_pattern() {
        let mut rng = Rng(6);
        let d = data(&mut rng, &[6, 9], false);
        let m = csmat_of(&d);
        let csr = MaskedCsr::from_pattern(m.view()).unwrap();
        let rows: Vec<usize> = (0..6)
            .filter(|&r| d.mask[r * 9..r * 9 + 9].iter().any(|&b| b))
            .collect();
        let g = SparseArray::new(vec![6], rows.clone(), vec![1.0; rows.len()]).unwrap();
        let r = csr
            .vjp_reduce(&OpRequest::new("mean").unwrap().dims(1), &g)
            .unwrap();
        assert!(std::ptr::eq(r.indices().as_ptr(), m.indices().as_ptr()));
    }
}

#[test]
fn every_unary_vjp_equals_finite_differences_on_dense() {
    let mut rng = Rng(21);
    let shape = [3, 4];
    let (x, m) = random_input(&mut rng, &shape);
    // inside every domain: (0.1, 0.9) (log, sqrt, asin, atanh, logit), acosh above 1
    let inside = x.mapv(|v| 0.5 + 0.2 * v);
    let mut checked = 0;
    for &op in Op::ALL {
        if op.kind() != Kind::Unary {
            continue;
        }
        let xs = if op.name() == "acosh" {
            inside.mapv(|v| v + 1.2)
        } else {
            inside.clone()
        };
        let base = OpRequest::from_op(op);
        let reqs = match op.name() {
            "clamp" => vec![
                base.clone().min(Some(0.45)).max(Some(0.6)),
                base.clone().min(Some(0.5)),
            ],
            "pow" => vec![
                base.clone().exponent(2.5),
                base.clone().exponent(3.0),
                base.clone().exponent(-1.5),
            ],
            _ => vec![base],
        };
        for req in reqs {
            check_fd(&xs, &m, &req, &mut rng);
            checked += 1;
        }
    }
    assert!(checked >= 43, "{checked}");
}

#[test]
fn unary_kinks_follow_torch() {
    let x = ArrayD::from_shape_vec(IxDyn(&[5]), vec![-1.0, 0.0, 0.5, 1.0, f64::INFINITY]).unwrap();
    let a = MaskedArray::unmasked(x);
    let g = MaskedArray::unmasked(ArrayD::from_elem(IxDyn(&[5]), 1.0));
    let d = |r: OpRequest| {
        a.vjp_map(&r, &g)
            .unwrap()
            .values()
            .iter()
            .copied()
            .collect::<Vec<f64>>()
    };
    assert_eq!(
        d(OpRequest::new("abs").unwrap()),
        [-1.0, 0.0, 1.0, 1.0, 1.0]
    );
    assert_eq!(
        d(OpRequest::new("relu").unwrap()),
        [0.0, 0.0, 1.0, 1.0, 1.0]
    );
    // clamp: g strictly inside (min, max), 0 at and beyond the bounds
    let c = OpRequest::new("clamp")
        .unwrap()
        .min(Some(0.0))
        .max(Some(1.0));
    assert_eq!(d(c), [0.0, 0.0, 1.0, 0.0, 0.0]);
    // nan_to_num passes g at finite values only
    assert_eq!(
        d(OpRequest::new("nan_to_num").unwrap()),
        [1.0, 1.0, 1.0, 1.0, 0.0]
    );
    // binary VJPs are not built: a typed refusal
    let e = a.vjp_map(&OpRequest::new("add").unwrap(), &g).unwrap_err();
    assert!(
        matches!(
            e,
            MaskedError::NotDifferentiable { .. }
                | MaskedError::InvalidArgument { .. }
                | MaskedError::Unsupported { .. }
        ),
        "{e}"
    );
}
