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
            .filter(|&(((u, d), _), &ok)| ok && u.is_finite() && d.is_finite())
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

/// The VJP of `req` on `a` given its saved forward output `fwd` (values, mask, shape).
fn vjp_both(
    a: &MaskedArrayD<f64>, req: &OpRequest, fwd: &(Vec<f64>, Vec<bool>, Vec<usize>),
    g: &MaskedArrayD<f64>,
) -> (Vec<f64>, Vec<f64>) {
    let y = ArrayD::from_shape_vec(IxDyn(&fwd.2), fwd.0.clone()).unwrap();
    let y = MaskedArray::new(
        y,
        BitMask::from_bools(&fwd.2, fwd.1.iter().copied()).unwrap(),
    )
    .unwrap();
    let (plain, saved) = match req.op.kind() {
        Kind::Normalize | Kind::Unary => (a.vjp_map(req, g), a.vjp_map_saved(req, &y, g)),
        _ => (a.vjp_reduce(req, g), a.vjp_reduce_saved(req, &y, g)),
    };
    let flat = |r: MaskedArrayD<f64>| r.values().iter().copied().collect::<Vec<f64>>();
    (flat(plain.unwrap()), flat(saved.unwrap()))
}

/// The saved forms give the convenience forms' gradients: bit for bit where the saved
/// output names elements (amax, amin, median, quantile) or is not read, within 1e-12
/// where it replaces a recomputed value (logsumexp, norm, std, the softmax family).
#[test]
fn saved_forward_outputs_give_the_recomputed_gradients() {
    let mut rng = Rng(61);
    let mut checked = 0;
    for shape in [vec![4, 5], vec![3, 2, 4], vec![6, 33]] {
        let (x, m) = random_input(&mut rng, &shape);
        // ties: a repeated value in every lane of the last dim
        let mut x = x;
        for (i, v) in x.iter_mut().enumerate() {
            if i % 3 == 1 {
                *v = 0.25;
            }
        }
        let a = masked(&x, &m);
        for &op in Op::ALL {
            if !op.differentiable()
                || !matches!(op.kind(), Kind::Reduce | Kind::ReduceOne | Kind::Normalize)
            {
                continue;
            }
            for req in requests(op, shape.len()) {
                let fwd = forward(&x, &m, &req);
                let g: Vec<f64> = fwd.0.iter().map(|_| rng.random_range(-1.0..1.0)).collect();
                let g = ArrayD::from_shape_vec(IxDyn(&fwd.2), g).unwrap();
                let g = MaskedArray::new(
                    g,
                    BitMask::from_bools(&fwd.2, fwd.1.iter().copied()).unwrap(),
                )
                .unwrap();
                let (plain, saved) = vjp_both(&a, &req, &fwd, &g);
                let rounded = matches!(
                    op.name(),
                    "logsumexp"
                        | "logmeanexp"
                        | "norm"
                        | "std"
                        | "nanstd"
                        | "softmax"
                        | "log_softmax"
                        | "softmin"
                        | "nanlogsumexp"
                );
                for (i, (p, s)) in plain.iter().zip(&saved).enumerate() {
                    let ok = if rounded {
                        (p - s).abs() <= 1e-12 * (1.0 + p.abs())
                    } else {
                        p.to_bits() == s.to_bits()
                    };
                    assert!(ok, "{op} {:?} at {i}: recomputed {p}, saved {s}", req.dims);
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 200, "{checked}");
}

/// The saved forms' typed pass on f32 lanes long enough for the vectorised loops (many
/// 16-wide groups and a tail): the median and quantile name their elements exactly as
/// the recomputed selection does, ties included; the softmax family and logsumexp give
/// the recomputed gradients up to the saved output's rounding.
/// Sum and mean send one value to every valid element of a lane (`g`, `g / n`), which
/// the layouts write under the mask without reading the lane: checked by hand on f32
/// lanes longer than a mask word (a full lane, a fully masked one, random ones), over
/// the trailing dim (contiguous lanes) and the leading one (scattered), returned and
/// into a NaN-filled buffer (every position written).
#[test]
fn sum_and_mean_gradients_are_g_and_g_over_n_at_the_valid_positions() {
    let mut rng = Rng(91);
    let shape = [5usize, 203];
    let n = shape.iter().product::<usize>();
    let x: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0..4.0) as f32).collect();
    // row 0 all valid, row 1 fully masked, the others at random
    let m: Vec<bool> = (0..n)
        .map(|k| k < 203 || (k >= 406 && rng.random_bool(0.6)))
        .collect();
    let a = MaskedArray::new(
        ArrayD::from_shape_vec(IxDyn(&shape), x).unwrap(),
        BitMask::from_bools(shape, m.iter().copied()).unwrap(),
    )
    .unwrap();
    for dim in [1usize, 0] {
        let lanes = shape[1 - dim];
        let lane_of = |k: usize| if dim == 1 { k / 203 } else { k % 203 };
        let mut count = vec![0usize; lanes];
        for k in (0..n).filter(|&k| m[k]) {
            count[lane_of(k)] += 1;
        }
        let g: Vec<f32> = (0..lanes).map(|l| 0.25 * l as f32 - 1.5).collect();
        let gm = MaskedArray::unmasked(ArrayD::from_shape_vec(IxDyn(&[lanes]), g.clone()).unwrap());
        for op in ["sum", "mean"] {
            let req = OpRequest::new(op).unwrap().dims(dim as isize);
            let want: Vec<f32> = (0..n)
                .map(|k| match (m[k], op) {
                    (false, _) => 0.0,
                    (true, "sum") => g[lane_of(k)],
                    (true, _) => (g[lane_of(k)] as f64 / count[lane_of(k)] as f64) as f32,
                })
                .collect();
            let dx = a.vjp_reduce(&req, &gm).unwrap();
            let got: Vec<f32> = dx.values().iter().copied().collect();
            assert_eq!(got, want, "{op} over dim {dim}");
            let mut out = vec![f32::NAN; n];
            a.vjp_into(&req, &gm, &mut out).unwrap();
            assert_eq!(out, want, "{op} over dim {dim}, into a buffer");
        }
    }
}

#[test]
fn saved_f32_gradients_equal_the_recomputed_ones() {
    let mut rng = Rng(62);
    let shape = [5usize, 203];
    let n = shape.iter().product::<usize>();
    // few distinct values: ties everywhere, including at the statistics
    let x: Vec<f32> = (0..n)
        .map(|_| (rng.random_range(-8.0..8.0).round() / 4.0) as f32)
        .collect();
    let m: Vec<bool> = (0..n).map(|k| k >= 203 && rng.random_bool(0.6)).collect();
    let a = MaskedArray::new(
        ArrayD::from_shape_vec(IxDyn(&shape), x).unwrap(),
        BitMask::from_bools(shape, m.iter().copied()).unwrap(),
    )
    .unwrap();
    // the forward output the saved forms take
    let forward_f32 = |req: &OpRequest| -> MaskedArrayD<f32> {
        let out = apply_dense(&a.view(), req).unwrap();
        let DynVec::F32(y) = out.values else {
            panic!("f32 output expected");
        };
        MaskedArray::new(
            ArrayD::from_shape_vec(IxDyn(&out.shape), y).unwrap(),
            out.mask,
        )
        .unwrap()
    };
    let mut reqs = Vec::new();
    for mode in ["avg", "lower"] {
        let mut r = OpRequest::new("median").unwrap().dims(-1);
        r.set_option("mode", mode).unwrap();
        reqs.push(r);
    }
    for (q, interp) in [
        (0.3, "linear"),
        (0.5, "nearest"),
        (0.9, "higher"),
        (0.25, "midpoint"),
    ] {
        let mut r = OpRequest::new("quantile").unwrap().dims(-1);
        r.set_option("q", &q.to_string()).unwrap();
        r.set_option("interpolation", interp).unwrap();
        reqs.push(r);
    }
    for req in reqs {
        let y = forward_f32(&req);
        let g = MaskedArray::unmasked(
            ArrayD::from_shape_vec(IxDyn(&[5]), vec![1.5f32, -2.0, 0.75, 3.0, 1.0]).unwrap(),
        );
        let plain = a.vjp_reduce(&req, &g).unwrap();
        let saved = a.vjp_reduce_saved(&req, &y, &g).unwrap();
        let bits =
            |r: &MaskedArrayD<f32>| r.values().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&plain), bits(&saved), "{req:?}");
        // lane 0 is fully masked: no gradient there; every other lane sends g somewhere
        assert!(plain.values().iter().take(203).all(|&v| v == 0.0));
        assert!(plain.values().iter().skip(203).any(|&v| v != 0.0));
    }
    // the softmax family and logsumexp from their saved f32 outputs (the typed pass):
    // the recomputed forms' gradients up to the saved output's f32 rounding
    let gl: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0) as f32).collect();
    let gm = MaskedArray::unmasked(ArrayD::from_shape_vec(IxDyn(&shape), gl).unwrap());
    let g5 = MaskedArray::unmasked(
        ArrayD::from_shape_vec(IxDyn(&[5]), vec![1.5f32, -2.0, 0.75, 3.0, 1.0]).unwrap(),
    );
    for op in ["softmax", "log_softmax", "softmin", "logsumexp"] {
        let req = OpRequest::new(op).unwrap().dims(-1);
        let y = forward_f32(&req);
        let (plain, saved) = if op == "logsumexp" {
            (
                a.vjp_reduce(&req, &g5).unwrap(),
                a.vjp_reduce_saved(&req, &y, &g5).unwrap(),
            )
        } else {
            (
                a.vjp_map(&req, &gm).unwrap(),
                a.vjp_map_saved(&req, &y, &gm).unwrap(),
            )
        };
        let mut nonzero = 0;
        for (k, (p, q)) in plain.values().iter().zip(saved.values()).enumerate() {
            assert!(
                (p - q).abs() <= 1e-5 * (1.0 + p.abs()),
                "{op} at {k}: recomputed {p}, saved {q}"
            );
            nonzero += (*p != 0.0) as usize;
        }
        assert!(nonzero > 400, "{op}: {nonzero}");
    }
}

/// The saved output is read, not recomputed: a saved extremum or softmax that is not
/// the forward one steers the gradient (the saved forms trust their input).
#[test]
fn saved_outputs_are_read() {
    let x = MaskedArray::unmasked(ndarray::array![[1.0f64, 2.0, 3.0]].into_dyn());
    let g = MaskedArray::unmasked(ndarray::array![[1.0f64, 0.0, 0.0]].into_dyn());
    let y = MaskedArray::unmasked(ndarray::array![[0.2f64, 0.3, 0.5]].into_dyn());
    let req = OpRequest::new("softmax").unwrap().dims(1);
    let dx = x.vjp_map_saved(&req, &y, &g).unwrap();
    // y (g - y·g) with y·g = 0.2
    let want = [0.2 * 0.8, 0.3 * -0.2, 0.5 * -0.2];
    for (d, w) in dx.values().iter().zip(want) {
        assert!((d - w).abs() < 1e-15, "{d} vs {w}");
    }
    // amax given 2 (not the maximum): g goes to the element equal to it
    let req = OpRequest::new("amax").unwrap().dims(1);
    let g1 = MaskedArray::unmasked(ndarray::array![4.0f64].into_dyn());
    let m = MaskedArray::unmasked(ndarray::array![2.0f64].into_dyn());
    let dx = x.vjp_reduce_saved(&req, &m, &g1).unwrap();
    assert_eq!(
        dx.values().iter().copied().collect::<Vec<_>>(),
        [0.0, 4.0, 0.0]
    );
    // a saved output of the wrong shape is a typed error
    let bad = MaskedArray::unmasked(ndarray::array![2.0f64, 1.0].into_dyn());
    let e = x.vjp_reduce_saved(&req, &bad, &g1).unwrap_err();
    assert!(matches!(e, MaskedError::ShapeMismatch { .. }), "{e}");
}

/// `vjp_into` writes every position of a caller's buffer (NaN beforehand) with the
/// convenience form's gradient, bit for bit: reductions over trailing, leading and
/// scattered dims, maps along every dim, unary ops, with and without the saved output;
/// a 0-d unary input is one lane.
#[test]
fn vjp_into_a_callers_buffer_equals_the_returned_gradient() {
    let mut rng = Rng(33);
    let mut checked = 0;
    for shape in [vec![4, 5], vec![3, 2, 4]] {
        let (x, m) = random_input(&mut rng, &shape);
        let a = masked(&x, &m);
        for &op in Op::ALL {
            if !op.differentiable()
                || !matches!(
                    op.kind(),
                    Kind::Reduce | Kind::ReduceOne | Kind::Normalize | Kind::Unary
                )
            {
                continue;
            }
            for req in requests(op, shape.len()) {
                let fwd = forward(&x, &m, &req);
                let y = ArrayD::from_shape_vec(IxDyn(&fwd.2), fwd.0.clone()).unwrap();
                let y = MaskedArray::unmasked(y);
                let g: Vec<f64> = fwd.0.iter().map(|_| rng.random_range(-1.0..1.0)).collect();
                let g = MaskedArray::unmasked(ArrayD::from_shape_vec(IxDyn(&fwd.2), g).unwrap());
                let want = match op.kind() {
                    Kind::Normalize | Kind::Unary => a.vjp_map(&req, &g).unwrap(),
                    _ => a.vjp_reduce(&req, &g).unwrap(),
                };
                for saved in [None, Some(&y)] {
                    let mut out = vec![f64::NAN; x.len()];
                    a.vjp_saved_into(&req, saved, &g, &mut out).unwrap();
                    if saved.is_some() {
                        // the saved form may round differently: compare within 1e-12
                        // (a NaN from a domain boundary, sqrt of a negative, on both)
                        for (o, w) in out.iter().zip(want.values().iter()) {
                            let close = (o - w).abs() <= 1e-12 * (1.0 + w.abs());
                            assert!(close || (o.is_nan() && w.is_nan()), "{op}: {o} vs {w}");
                        }
                    } else {
                        let same = out
                            .iter()
                            .zip(want.values().iter())
                            .all(|(o, w)| o.to_bits() == w.to_bits());
                        assert!(same, "{op} {:?}: {out:?} vs {:?}", req.dims, want.values());
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 150, "{checked}");
    // a buffer of the wrong length is a typed error
    let (x, m) = random_input(&mut rng, &[2, 3]);
    let g = MaskedArray::unmasked(ArrayD::from_elem(IxDyn(&[2]), 1.0));
    let req = OpRequest::new("sum").unwrap().dims(1);
    let e = masked(&x, &m)
        .vjp_into(&req, &g, &mut [0.0; 5])
        .unwrap_err();
    assert!(matches!(e, MaskedError::InvalidData(_)), "{e}");
    // 0-d: exp'(0.5) = exp(0.5), returned and into a buffer
    let s = MaskedArray::unmasked(ArrayD::from_elem(IxDyn(&[]), 0.5f64));
    let g = MaskedArray::unmasked(ArrayD::from_elem(IxDyn(&[]), 2.0f64));
    let req = OpRequest::new("exp").unwrap();
    let dx = s.vjp_map(&req, &g).unwrap();
    assert_eq!(
        dx.values().iter().copied().collect::<Vec<_>>(),
        [2.0 * 0.5f64.exp()]
    );
    let mut out = [0.0];
    s.vjp_into(&req, &g, &mut out).unwrap();
    assert_eq!(out, [2.0 * 0.5f64.exp()]);
}

/// An upstream broadcast over leading dims (torch's expanded upstream of `.sum()`, a
/// `broadcast_to` row) is read as the rows it repeats, never copied out to the input's
/// size: the gradients of every map equal those of the upstream's own copy, bit for bit,
/// recomputed and from the saved output, over every dim (the lanes along the last dim
/// read the period; the others take the copy).
#[test]
fn broadcast_upstreams_give_the_gradients_of_their_copies() {
    use ndarray::Array1;
    let mut rng = Rng(41);
    let (mut checked, mut nonzero) = (0, 0);
    for shape in [vec![6, 5], vec![3, 4, 5], vec![2, 3, 70]] {
        let (x, m) = random_input(&mut rng, &shape);
        let a = masked(&x, &m);
        let last = *shape.last().unwrap();
        let row: Array1<f64> = (0..last).map(|_| rng.random_range(-1.0..1.0)).collect();
        let plane = ArrayD::from_shape_fn(IxDyn(&shape[1..]), |_| rng.random_range(-1.0..1.0));
        let scalar = ArrayD::from_elem(IxDyn(&[]), 0.75);
        for &op in Op::ALL {
            if !op.differentiable() || !matches!(op.kind(), Kind::Normalize | Kind::Unary) {
                continue;
            }
            for req in requests(op, shape.len()) {
                let fwd = forward(&x, &m, &req);
                let y = ArrayD::from_shape_vec(IxDyn(&fwd.2), fwd.0.clone()).unwrap();
                let y = MaskedArray::unmasked(y);
                let sources = [
                    row.broadcast(IxDyn(&shape)).unwrap(),
                    plane.broadcast(IxDyn(&shape)).unwrap(),
                    scalar.broadcast(IxDyn(&shape)).unwrap(),
                ];
                for view in sources {
                    let copy = MaskedArray::unmasked(view.to_owned());
                    let view = MaskedArray::unmasked(view);
                    for saved in [None, Some(&y)] {
                        let mut got = vec![f64::NAN; x.len()];
                        let mut want = vec![f64::NAN; x.len()];
                        a.vjp_saved_into(&req, saved, &view, &mut got).unwrap();
                        a.vjp_saved_into(&req, saved, &copy, &mut want).unwrap();
                        let same = got
                            .iter()
                            .zip(&want)
                            .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()));
                        assert!(same, "{op} {:?} {shape:?}: {got:?} vs {want:?}", req.dims);
                        // (a softmax's gradient is 0 where the upstream is constant
                        // along its lanes: counted over all, not asserted per case)
                        nonzero += want.iter().any(|&v| v != 0.0) as usize;
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(
        checked > 300 && nonzero * 10 > checked * 9,
        "{checked} {nonzero}"
    );
}

/// Every normalization's VJP along a leading dim (lanes at a stride: tiles of lanes
/// transposed, or the softmax family's lane statistics and then a pass over the rows)
/// equals, bit for bit, the VJP along the last dim of the array with that dim moved
/// last (contiguous lanes), with and without the saved output, for a random upstream
/// and one broadcast over the leading dims (read as its period), on rows of 64
/// positions or more and fewer, with fully masked lanes.
#[test]
fn strided_map_gradients_equal_those_of_the_lanes_moved_last() {
    let mut rng = Rng(43);
    let mut checked = 0;
    for (shape, dim) in [
        (vec![70, 90], 0usize),
        (vec![2, 65, 70], 0),
        (vec![2, 65, 70], 1),
        (vec![9, 5, 6], 1),
    ] {
        let rank = shape.len();
        let mut perm: Vec<usize> = (0..rank).filter(|&d| d != dim).collect();
        perm.push(dim);
        let moved = |a: &ArrayD<f64>| {
            let p = a.view().permuted_axes(IxDyn(&perm));
            ArrayD::from_shape_vec(p.raw_dim(), p.iter().copied().collect()).unwrap()
        };
        let (mut x, mut m) = random_input(&mut rng, &shape);
        // a fully masked lane along `dim`
        for k in 0..shape[dim] {
            let mut at = vec![0usize; rank];
            at[dim] = k;
            let flat: usize = (0..rank)
                .map(|d| at[d] * shape[d + 1..].iter().product::<usize>())
                .sum();
            m[flat + 1] = false;
        }
        x[IxDyn(&vec![0; rank])] = 0.5;
        let mb = ArrayD::from_shape_vec(IxDyn(&shape), m.iter().map(|&b| b as u8 as f64).collect())
            .unwrap();
        let (xt, mt) = (moved(&x), moved(&mb));
        let mt: Vec<bool> = mt.iter().map(|&v| v == 1.0).collect();
        let (a, at) = (masked(&x, &m), masked(&xt, &mt));
        let last = *shape.last().unwrap();
        let row: ndarray::Array1<f64> = (0..last).map(|_| rng.random_range(-1.0..1.0)).collect();
        let full = ArrayD::from_shape_fn(IxDyn(&shape), |_| rng.random_range(-1.0..1.0));
        for &op in Op::ALL {
            if !op.differentiable() || op.kind() != Kind::Normalize {
                continue;
            }
            for req in requests(op, rank) {
                if req.one_dim().ok() != Some(dim as isize) {
                    continue;
                }
                let mut req_t = req.clone();
                req_t = req_t.dims(rank as isize - 1);
                let y = ArrayD::from_shape_vec(IxDyn(&shape), forward(&x, &m, &req).0).unwrap();
                let yt = moved(&y);
                let (y, yt) = (MaskedArray::unmasked(y), MaskedArray::unmasked(yt));
                // (the broadcast row as a view: read as its period)
                for g in [full.view(), row.broadcast(IxDyn(&shape)).unwrap()] {
                    let gt = MaskedArray::unmasked(moved(&g.to_owned()));
                    let g = MaskedArray::unmasked(g);
                    for saved in [false, true] {
                        let mut got = vec![f64::NAN; x.len()];
                        let mut want = vec![f64::NAN; x.len()];
                        a.vjp_saved_into(&req, saved.then_some(&y), &g, &mut got)
                            .unwrap();
                        at.vjp_saved_into(&req_t, saved.then_some(&yt), &gt, &mut want)
                            .unwrap();
                        let got = moved(&ArrayD::from_shape_vec(IxDyn(&shape), got).unwrap());
                        let same = got
                            .iter()
                            .zip(&want)
                            .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()));
                        assert!(same, "{op} dim {dim} {shape:?} saved {saved}");
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked >= 60, "{checked}");
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

    /// A CSR view of `m` (the data of `d`), masked by its own pattern or by `d`'s mask.
    fn csr_of<'m>(d: &Data, m: &'m CsMat<f64>, own: bool) -> MaskedCsr<'m, f64> {
        if own {
            let p = Pattern::from_bools((d.shape[0], d.shape[1]), &d.mask).unwrap();
            MaskedCsr::with_mask(m.view(), p).unwrap()
        } else {
            MaskedCsr::from_pattern(m.view()).unwrap()
        }
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

    /// Checks a sparse gradient (positions, values) against the dense one, bit for bit.
    fn agree(what: &str, d: &Data, flat: &[usize], vals: &[f64], dense: &[f64]) {
        agree_within(what, d, flat, vals, dense, 0.0)
    }

    /// [`agree`] within a relative tolerance `rel` (0: bit for bit).
    fn agree_within(what: &str, d: &Data, flat: &[usize], vals: &[f64], dense: &[f64], rel: f64) {
        let valid: Vec<usize> = (0..d.mask.len()).filter(|&i| d.mask[i]).collect();
        assert_eq!(
            flat,
            valid.as_slice(),
            "{what}: stores exactly the valid positions"
        );
        for (&p, &v) in flat.iter().zip(vals) {
            assert!(
                v.to_bits() == dense[p].to_bits()
                    || (rel > 0.0 && (v - dense[p]).abs() <= rel * dense[p].abs() + 1e-300),
                "{what} at {p}: sparse {v}, dense {}",
                dense[p]
            );
        }
    }

    fn ops() -> impl Iterator<Item = Op> {
        Op::ALL.iter().copied().filter(|op| {
            op.differentiable()
                && matches!(
                    op.kind(),
                    Kind::Reduce | Kind::ReduceOne | Kind::Normalize | Kind::Unary
                )
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
                let csr = csm.as_ref().map(|m| csr_of(&d, m, own));
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

    /// The saved forms on CSR and COO equal the dense saved form bit for bit (the
    /// forward output given at the valid output positions, as the forward op stores it),
    /// softmax and softmin across the entries within 1e-13.
    /// Rows of 203 take the vector loops (whole mask words, eight-term blocks of the
    /// lane sums), and the dense layout's unpacked forms (softmax family, sum, mean).
    #[test]
    fn csr_and_coo_saved_gradients_equal_the_dense_ones() {
        let mut rng = Rng(98);
        let mut checked = 0;
        for own in [false, true] {
            for shape in [vec![5, 7], vec![3, 2, 4], vec![4, 203]] {
                let d = data(&mut rng, &shape, own);
                let coo = coo_of(&d, own);
                let csm = (shape.len() == 2).then(|| csmat_of(&d));
                let csr = csm.as_ref().map(|m| csr_of(&d, m, own));
                let x = ArrayD::from_shape_vec(IxDyn(&shape), d.x.clone()).unwrap();
                let a = dense_of(&d);
                // a unary op's gradient reads no forward output
                for op in ops().filter(|op| op.kind() != Kind::Unary) {
                    for req in requests(op, shape.len()) {
                        let what = format!("saved {op} {:?} own mask {own} {shape:?}", req.dims);
                        let (yv, ok, out_shape) = forward(&x, &d.mask, &req);
                        let g: Vec<f64> = ok
                            .iter()
                            .map(|&v| {
                                if v {
                                    rng.random_range(-1.0..1.0)
                                } else {
                                    f64::NAN
                                }
                            })
                            .collect();
                        let arr = |v: &[f64]| {
                            ArrayD::from_shape_vec(IxDyn(&out_shape), v.to_vec()).unwrap()
                        };
                        let (gs, ys) = (
                            sparse_g(&out_shape, &g, &ok),
                            sparse_g(&out_shape, &yv, &ok),
                        );
                        if matches!(op.kind(), Kind::Normalize) {
                            // softmax and softmin across a sparse layout's entries (not
                            // along the last dim) sum `Σ g y` in entry order, a lane an
                            // accumulator (`RowStatistic::scattered`), not in the lane
                            // kernels' eight partial sums: within 1e-13, not to the bit
                            let dim = req.one_dim().unwrap();
                            let across =
                                dim.rem_euclid(shape.len() as isize) + 1 < shape.len() as isize;
                            let rel = match op.name() {
                                "softmax" | "softmin" if across => 1e-13,
                                _ => 0.0,
                            };
                            let dense = a
                                .vjp_map_saved(
                                    &req,
                                    &masked(&arr(&yv), &ok),
                                    &masked(&arr(&g), &ok),
                                )
                                .unwrap();
                            let dense: Vec<f64> = dense.values().iter().copied().collect();
                            let (gc, yc): (MaskedCoo<f64>, MaskedCoo<f64>) =
                                (gs.clone().into(), ys.clone().into());
                            let r = coo.vjp_map_saved(&req, &yc, &gc).unwrap();
                            agree_within(
                                &format!("coo {what}"),
                                &d,
                                &r.pattern().flat(),
                                r.values(),
                                &dense,
                                rel,
                            );
                            if let Some(csr) = &csr {
                                let mut gm = csr.softmax(dim).unwrap();
                                gm.data_mut().copy_from_slice(gs.values());
                                let mut ym = csr.softmax(dim).unwrap();
                                ym.data_mut().copy_from_slice(ys.values());
                                let r = csr.vjp_map_saved(&req, &ym, &gm).unwrap();
                                let flat: Vec<usize> =
                                    r.iter().map(|(_, (i, j))| i * shape[1] + j).collect();
                                let what = format!("csr {what}");
                                agree_within(&what, &d, &flat, r.data(), &dense, rel);
                            }
                        } else {
                            let y = MaskedArray::unmasked(arr(&yv));
                            let dense = a
                                .vjp_reduce_saved(&req, &y, &MaskedArray::unmasked(arr(&g)))
                                .unwrap();
                            let dense: Vec<f64> = dense.values().iter().copied().collect();
                            let r = coo.vjp_reduce_saved(&req, &ys, &gs).unwrap();
                            agree(
                                &format!("coo {what}"),
                                &d,
                                &r.pattern().flat(),
                                r.values(),
                                &dense,
                            );
                            if let Some(csr) = &csr {
                                let r = csr.vjp_reduce_saved(&req, &ys, &gs).unwrap();
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
        assert!(checked > 200, "{checked}");
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

    /// `d` with its stored values made positive (every binary op's domain).
    fn positive_data(rng: &mut Rng, shape: &[usize], own_mask: bool) -> Data {
        let mut d = data(rng, shape, own_mask);
        for (x, &s) in d.x.iter_mut().zip(&d.stored) {
            if s {
                *x = x.abs() + 0.5;
            }
        }
        d
    }

    /// The flat positions of a CSR result.
    fn csr_flat<O>(m: &masked::CsrMapped<'_, O, usize>) -> Vec<usize> {
        let c = m.cols();
        m.outer_iterator()
            .enumerate()
            .flat_map(|(r, lane)| {
                lane.indices()
                    .iter()
                    .map(move |&j| r * c + j)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// A sparse upstream as a CSR result of the same positions.
    fn csr_g(s: &SparseArray<f64>) -> masked::CsrMapped<'static, f64, usize> {
        let (r, c) = (s.shape()[0], s.shape()[1]);
        let mut ptr = vec![0usize; r + 1];
        for &p in s.indices() {
            ptr[p / c + 1] += 1;
        }
        for i in 0..r {
            ptr[i + 1] += ptr[i];
        }
        let idx: Vec<usize> = s.indices().iter().map(|&p| p % c).collect();
        sprs::CsMatBase::new(
            (r, c),
            ptr,
            std::borrow::Cow::Owned(idx),
            s.values().to_vec(),
        )
    }

    /// A sparse gradient equals the dense one at exactly the valid positions.
    fn close(what: &str, mask: &[bool], flat: &[usize], vals: &[f64], dense: &[f64]) {
        let valid: Vec<usize> = (0..mask.len()).filter(|&i| mask[i]).collect();
        assert_eq!(
            flat,
            valid.as_slice(),
            "{what}: stores exactly the valid positions"
        );
        for (&p, &v) in flat.iter().zip(vals) {
            assert!(
                near(v, dense[p]),
                "{what} at {p}: sparse {v}, dense {}",
                dense[p]
            );
        }
    }

    /// Equal within rounding, or the same infinity or both NaN (a valid but unstored
    /// divisor is 0 on every layout).
    fn near(x: f64, y: f64) -> bool {
        x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-12 * (1.0 + y.abs())
    }

    fn close_dense(what: &str, got: &MaskedArrayD<f64>, want: &MaskedArrayD<f64>) {
        assert_eq!(got.shape(), want.shape(), "{what}");
        assert_eq!(got.mask(), want.mask(), "{what}");
        for (g, w) in got.values().iter().zip(want.values()) {
            assert!(near(*g, *w), "{what}: {g} vs {w}");
        }
    }

    #[test]
    fn binary_csr_and_coo_gradients_equal_the_dense_ones() {
        use masked::MaskRule;
        let shape = [4usize, 5];
        let mut rng = Rng(97);
        let mut checked = 0;
        for &op in Op::ALL {
            if op.binary().is_none() || !op.differentiable() {
                continue;
            }
            let req = OpRequest::from_op(op);
            for rule in [MaskRule::Strict, MaskRule::And] {
                let a = positive_data(&mut rng, &shape, false);
                let b = match rule {
                    // one pattern, other values
                    MaskRule::Strict => Data {
                        shape: a.shape.clone(),
                        stored: a.stored.clone(),
                        mask: a.mask.clone(),
                        x: a.x
                            .iter()
                            .map(|&x| if x != 0.0 { x * 1.7 + 0.1 } else { 0.0 })
                            .collect(),
                    },
                    // another pattern (and a separate mask for the right operand)
                    MaskRule::And => positive_data(&mut rng, &shape, true),
                };
                let out: Vec<bool> = a.mask.iter().zip(&b.mask).map(|(x, y)| *x && *y).collect();
                let g: Vec<f64> = (0..20).map(|_| rng.random_range(-1.0..1.0)).collect();
                let ga = MaskedArray::unmasked(
                    ArrayD::from_shape_vec(IxDyn(&shape), g.clone()).unwrap(),
                );
                let values = |m: &MaskedArrayD<f64>| m.values().iter().copied().collect::<Vec<_>>();

                // sparse with sparse
                let (da, db) = dense_of(&a)
                    .vjp_binary(&req, &dense_of(&b), rule, &ga)
                    .unwrap();
                let (da, db) = (values(&da), values(&db));
                let gs = sparse_g(&shape, &g, &out);
                let (ca, cb) = (coo_of(&a, false), coo_of(&b, rule == MaskRule::And));
                let (xa, xb) = ca.vjp_binary(&req, &cb, rule, &gs).unwrap();
                close(
                    &format!("{op:?} {rule:?} coo a"),
                    &a.mask,
                    xa.indices(),
                    xa.values(),
                    &da,
                );
                close(
                    &format!("{op:?} {rule:?} coo b"),
                    &b.mask,
                    xb.indices(),
                    xb.values(),
                    &db,
                );
                let (ma, mb) = (csmat_of(&a), csmat_of(&b));
                let (ra, rb) = (
                    csr_of(&a, &ma, false),
                    csr_of(&b, &mb, rule == MaskRule::And),
                );
                let (ya, yb) = ra.vjp_binary(&req, &rb, rule, &csr_g(&gs)).unwrap();
                close(
                    &format!("{op:?} {rule:?} csr a"),
                    &a.mask,
                    &csr_flat(&ya),
                    ya.data(),
                    &da,
                );
                close(
                    &format!("{op:?} {rule:?} csr b"),
                    &b.mask,
                    &csr_flat(&yb),
                    yb.data(),
                    &db,
                );

                // sparse with a dense row broadcast over the rows (masked under `and`)
                let wv: Vec<f64> = (0..5).map(|_| rng.random_range(0.5..2.0)).collect();
                let wm: Vec<bool> = (0..5).map(|j| rule == MaskRule::Strict || j != 2).collect();
                let wa = ArrayD::from_shape_vec(IxDyn(&[5]), wv).unwrap();
                // a plain operand takes the sparse one's mask under strict
                let w = match rule {
                    MaskRule::Strict => MaskedArray::unmasked(wa),
                    MaskRule::And => masked(&wa, &wm),
                };
                let (da, dw) = dense_of(&a).vjp_binary(&req, &w, rule, &ga).unwrap();
                let da = values(&da);
                let out: Vec<bool> = (0..20).map(|i| a.mask[i] && wm[i % 5]).collect();
                let gs = sparse_g(&shape, &g, &out);
                let (xa, xw) = ca.vjp_binary_dense(&req, &w, rule, &gs).unwrap();
                close(
                    &format!("{op:?} {rule:?} coo-dense a"),
                    &a.mask,
                    xa.indices(),
                    xa.values(),
                    &da,
                );
                close_dense(&format!("{op:?} {rule:?} coo-dense w"), &xw, &dw);
                let (ya, yw) = ra.vjp_binary_dense(&req, &w, rule, &csr_g(&gs)).unwrap();
                close(
                    &format!("{op:?} {rule:?} csr-dense a"),
                    &a.mask,
                    &csr_flat(&ya),
                    ya.data(),
                    &da,
                );
                close_dense(&format!("{op:?} {rule:?} csr-dense w"), &yw, &dw);

                // sparse with a scalar
                let (da, ds) = dense_of(&a).vjp_binary_scalar(&req, 1.3, &ga).unwrap();
                let da = values(&da);
                let gs = sparse_g(&shape, &g, &a.mask);
                let (xa, xs) = ca.vjp_binary_scalar(&req, 1.3, &gs).unwrap();
                close(
                    &format!("{op:?} coo-scalar"),
                    &a.mask,
                    xa.indices(),
                    xa.values(),
                    &da,
                );
                assert!(near(xs, ds), "{op:?} coo d/ds {xs} vs {ds}");
                let (ya, ys) = ra.vjp_binary_scalar(&req, 1.3, &csr_g(&gs)).unwrap();
                close(
                    &format!("{op:?} csr-scalar"),
                    &a.mask,
                    &csr_flat(&ya),
                    ya.data(),
                    &da,
                );
                assert!(near(ys, ds), "{op:?} csr d/ds {ys} vs {ds}");
                checked += 1;
            }
        }
        // 17 differentiable binary ops, two rules each
        assert!(checked >= 30, "{checked}");
    }

    #[test]
    fn binary_sparse_vjp_refusals_are_typed() {
        let mut rng = Rng(8);
        let d = positive_data(&mut rng, &[3, 4], false);
        let m = csmat_of(&d);
        let x = MaskedCsr::from_pattern(m.view()).unwrap();
        let free = MaskedCsr::unmasked(m.view()).unwrap();
        let mul = OpRequest::new("mul").unwrap();
        let g = csr_g(&sparse_g(&[3, 4], &[1.0; 12], &d.mask));
        // a mask-free operand would get a gradient at every position
        let e = x
            .vjp_binary(&mul, &free, masked::MaskRule::And, &g)
            .unwrap_err();
        assert!(matches!(e, MaskedError::Unsupported { .. }), "{e}");
        // an upstream stored elsewhere than the output
        let all = csr_g(&sparse_g(&[3, 4], &[1.0; 12], &[true; 12]));
        let e = x
            .vjp_binary(&mul, &x, masked::MaskRule::Strict, &all)
            .unwrap_err();
        assert!(matches!(e, MaskedError::InvalidArgument { .. }), "{e}");
        // a comparison has no gradient
        let e = x
            .vjp_binary(
                &OpRequest::new("lt").unwrap(),
                &x,
                masked::MaskRule::Strict,
                &g,
            )
            .unwrap_err();
        assert!(matches!(e, MaskedError::NotDifferentiable { .. }), "{e}");
        // the COO form: the same checks
        let c = coo_of(&d, false);
        let gs = sparse_g(&[3, 4], &[1.0; 12], &[true; 12]);
        let e = c.vjp_binary_scalar(&mul, 2.0, &gs).unwrap_err();
        assert!(matches!(e, MaskedError::InvalidArgument { .. }), "{e}");
        // values only, the input's own structure: a gradient that shares the indices
        let (dx, _) = x.vjp_binary_scalar(&mul, 2.0, &g).unwrap();
        assert!(std::ptr::eq(dx.indices().as_ptr(), m.indices().as_ptr()));
        assert!(dx.data().iter().all(|&v| v == 2.0));
        // two operands of that structure: both gradients share it, each the other's values
        let m2 = m.map(|v| v + 1.0);
        let y = MaskedCsr::from_pattern(m2.view()).unwrap();
        let (dx, dy) = x
            .vjp_binary(&mul, &y, masked::MaskRule::Strict, &g)
            .unwrap();
        assert!(std::ptr::eq(dx.indices().as_ptr(), m.indices().as_ptr()));
        assert!(std::ptr::eq(dy.indices().as_ptr(), m2.indices().as_ptr()));
        assert_eq!(dx.data(), m2.data());
        assert_eq!(dy.data(), m.data());
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

/// Binary elementwise VJPs (dense): both operands' gradients against central
/// differences of the engine's own forward op, for every differentiable binary op,
/// with equal masks (strict), a plain operand broadcast over rows (strict), masks
/// intersected with broadcasting (and), and a scalar.
mod binary {
    use super::*;
    use masked::by_name::{apply_binary, BinOp};
    use masked::{MaskRule, Splat};

    fn arr(shape: &[usize], v: Vec<f64>) -> ArrayD<f64> {
        ArrayD::from_shape_vec(IxDyn(shape), v).unwrap()
    }

    /// Σ over valid outputs of g · op(a, b) (b a scalar when `s` is given).
    fn loss(
        a: &MaskedArrayD<f64>, b: &MaskedArrayD<f64>, s: Option<f64>, op: BinOp, rule: MaskRule,
        g: &[f64],
    ) -> f64 {
        let out = match s {
            Some(s) => apply_binary(&a.view(), &Splat(s), op, rule, false).unwrap(),
            None => apply_binary(&a.view(), &b.view(), op, rule, false).unwrap(),
        };
        let v = match out.values {
            masked::Values::Num(v) => f64s(&v),
            other => panic!("{other:?}"),
        };
        v.iter()
            .zip(out.mask.to_vec())
            .zip(g)
            .filter(|((_, ok), _)| *ok)
            .map(|((x, _), g)| x * g)
            .sum()
    }

    fn positive(rng: &mut Rng, n: usize) -> Vec<f64> {
        (0..n).map(|_| rng.random_range(0.5..2.0)).collect()
    }

    #[test]
    fn every_binary_vjp_equals_finite_differences() {
        let mut rng = Rng(71);
        let mut checked = 0;
        // 3 x 70: full 64-element mask words and a tail in the vectorised kernel
        const C: usize = 70;
        const N: usize = 3 * C;
        for &op in Op::ALL {
            let Some(bin) = op.binary() else { continue };
            if !op.differentiable() {
                continue;
            }
            let req = OpRequest::from_op(op);
            let ma: Vec<bool> = (0..N).map(|_| rng.random_bool(0.7)).collect();
            let a = masked(&arr(&[3, C], positive(&mut rng, N)), &ma);
            let cases: Vec<(MaskedArrayD<f64>, Option<f64>, MaskRule)> = vec![
                (
                    masked(&arr(&[3, C], positive(&mut rng, N)), &ma),
                    None,
                    MaskRule::Strict,
                ),
                (
                    MaskedArray::unmasked(arr(&[C], positive(&mut rng, C))),
                    None,
                    MaskRule::Strict,
                ),
                (
                    masked(&arr(&[3, 1], positive(&mut rng, 3)), &[true, false, true]),
                    None,
                    MaskRule::And,
                ),
                (
                    MaskedArray::unmasked(arr(&[], vec![0.0])),
                    Some(rng.random_range(0.6..1.8)),
                    MaskRule::Strict,
                ),
            ];
            for (b, s, rule) in cases {
                let g: Vec<f64> = (0..N).map(|_| rng.random_range(-1.0..1.0)).collect();
                let ga = MaskedArray::unmasked(arr(&[3, C], g.clone()));
                let (da, db): (Vec<f64>, Vec<f64>) = match s {
                    Some(s) => {
                        let (da, ds) = a.vjp_binary_scalar(&req, s, &ga).unwrap();
                        (da.values().iter().copied().collect(), vec![ds])
                    }
                    None => {
                        let (da, db) = a.vjp_binary(&req, &b, rule, &ga).unwrap();
                        assert_eq!(db.shape(), b.shape());
                        // into the caller's buffers: the same values, bit for bit
                        let (mut ia, mut ib) =
                            (vec![f64::NAN; N], vec![f64::NAN; b.values().len()]);
                        a.vjp_binary_into(&req, &b, rule, &ga, &mut ia, &mut ib)
                            .unwrap();
                        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        let flat =
                            |m: &MaskedArrayD<f64>| m.values().iter().copied().collect::<Vec<_>>();
                        assert_eq!(bits(&ia), bits(&flat(&da)), "{op} into dx");
                        assert_eq!(bits(&ib), bits(&flat(&db)), "{op} into dy");
                        (
                            da.values().iter().copied().collect(),
                            db.values().iter().copied().collect(),
                        )
                    }
                };
                let h = 1e-6;
                let f = |a: &MaskedArrayD<f64>, b: &MaskedArrayD<f64>, s: Option<f64>| {
                    loss(a, b, s, bin, rule, &g)
                };
                for i in 0..N {
                    let bump = |d: f64| {
                        let mut x = a.values().clone();
                        x.as_slice_mut().unwrap()[i] += d;
                        masked(&x, &ma)
                    };
                    let fd = (f(&bump(h), &b, s) - f(&bump(-h), &b, s)) / (2.0 * h);
                    let want = if ma[i] { fd } else { 0.0 };
                    assert!(
                        (da[i] - want).abs() < 1e-5 * (1.0 + want.abs()),
                        "{op} {rule:?} d/da[{i}]: {} vs {want}",
                        da[i]
                    );
                }
                for (j, &dbj) in db.iter().enumerate() {
                    let fd = match s {
                        Some(s) => (f(&a, &b, Some(s + h)) - f(&a, &b, Some(s - h))) / (2.0 * h),
                        None => {
                            let bump = |d: f64| {
                                let mut x = b.values().clone();
                                x.as_slice_mut().unwrap()[j] += d;
                                match b.mask() {
                                    Some(m) => MaskedArray::new(x, m.clone()).unwrap(),
                                    None => MaskedArray::unmasked(x),
                                }
                            };
                            (f(&a, &bump(h), None) - f(&a, &bump(-h), None)) / (2.0 * h)
                        }
                    };
                    assert!(
                        (dbj - fd).abs() < 1e-5 * (1.0 + fd.abs()),
                        "{op} {rule:?} d/db[{j}]: {dbj} vs {fd}"
                    );
                }
                checked += 1;
            }
        }
        // 17 differentiable binary ops (pow included), 4 operand cases each
        assert!(checked >= 60, "{checked}");
    }

    #[test]
    fn binary_kinks_and_refusals() {
        let x = MaskedArray::unmasked(ndarray::array![1.0f64, 2.0, 0.0].into_dyn());
        let y = MaskedArray::unmasked(ndarray::array![1.0f64, 3.0, 5.0].into_dyn());
        let g = MaskedArray::unmasked(ndarray::array![1.0f64, 1.0, 1.0].into_dyn());
        let run = |op: &str| {
            let (dx, dy) = x
                .vjp_binary(&OpRequest::new(op).unwrap(), &y, MaskRule::Strict, &g)
                .unwrap();
            (
                dx.values().iter().copied().collect::<Vec<_>>(),
                dy.values().iter().copied().collect::<Vec<_>>(),
            )
        };
        // a tie splits half and half
        assert_eq!(run("maximum"), (vec![0.5, 0.0, 0.0], vec![0.5, 1.0, 1.0]));
        assert_eq!(run("fmin"), (vec![0.5, 1.0, 1.0], vec![0.5, 0.0, 0.0]));
        // xlogy: 0 for x at x == 0; x / y for y
        let (dx, dy) = run("xlogy");
        assert_eq!(dx[2], 0.0);
        assert_eq!(dy, vec![1.0, 2.0 / 3.0, 0.0]);
        // fmod and remainder: -trunc and -floor of x / y for y
        let xn = MaskedArray::unmasked(ndarray::array![-7.0f64].into_dyn());
        let yn = MaskedArray::unmasked(ndarray::array![2.0f64].into_dyn());
        let g1 = MaskedArray::unmasked(ndarray::array![1.0f64].into_dyn());
        let dy = |op: &str| {
            xn.vjp_binary(&OpRequest::new(op).unwrap(), &yn, MaskRule::Strict, &g1)
                .unwrap()
                .1
                .values()[[0]]
        };
        assert_eq!(dy("fmod"), 3.0);
        assert_eq!(dy("remainder"), 4.0);
        // comparisons are not differentiable; a unary op is not binary
        let e = x
            .vjp_binary(&OpRequest::new("lt").unwrap(), &y, MaskRule::Strict, &g)
            .unwrap_err();
        assert!(matches!(e, MaskedError::NotDifferentiable { .. }), "{e}");
        let e = x
            .vjp_binary(&OpRequest::new("exp").unwrap(), &y, MaskRule::Strict, &g)
            .unwrap_err();
        assert!(matches!(e, MaskedError::InvalidArgument { .. }), "{e}");
        // strict with different masks fails as the forward op does
        let xm = MaskedArray::from_bool_mask(
            ndarray::array![1.0f64, 2.0, 0.0],
            ndarray::array![true, true, true],
        )
        .unwrap();
        let ym = MaskedArray::from_bool_mask(
            ndarray::array![1.0f64, 3.0, 5.0],
            ndarray::array![true, false, true],
        )
        .unwrap();
        let e = xm
            .vjp_binary(&OpRequest::new("add").unwrap(), &ym, MaskRule::Strict, &g)
            .unwrap_err();
        assert!(e.to_string().contains("mask"), "{e}");
        // under and, the position valid in x only gets 0
        let (dx, _) = xm
            .vjp_binary(&OpRequest::new("mul").unwrap(), &ym, MaskRule::And, &g)
            .unwrap();
        assert_eq!(
            dx.values().iter().copied().collect::<Vec<_>>(),
            vec![1.0, 0.0, 5.0]
        );
        // a caller's buffer of the wrong length: a typed error, nothing written
        let (mut dx, mut dy) = (vec![7.0; 2], vec![7.0; 3]);
        let e = xm
            .vjp_binary_into(
                &OpRequest::new("mul").unwrap(),
                &ym,
                MaskRule::And,
                &g,
                &mut dx,
                &mut dy,
            )
            .unwrap_err();
        assert!(matches!(e, MaskedError::InvalidData(_)), "{e}");
        assert_eq!((dx, dy), (vec![7.0; 2], vec![7.0; 3]));
    }
}

/// The contract's "at a zero lane 0" for the infinity norms, through the layout's VJP
/// (the saved-forward path included): a lane of valid zeros gets 0, not `g / len`.
#[test]
fn inf_norm_gradients_are_zero_on_a_zero_lane() {
    let x = ArrayD::from_shape_vec(
        IxDyn(&[2, 8]),
        (0..16)
            .map(|i| if i < 8 { 0.0 } else { i as f64 - 12.0 })
            .collect(),
    )
    .unwrap();
    let a = MaskedArray::unmasked(x);
    let g = MaskedArray::unmasked(ArrayD::from_elem(IxDyn(&[2]), 1.0f64));
    for ord in [f64::INFINITY, f64::NEG_INFINITY] {
        let r = OpRequest::new("norm").unwrap().dims(1).ord(ord);
        let dx = a.vjp_reduce(&r, &g).unwrap();
        let row0: Vec<f64> = dx.values().iter().take(8).copied().collect();
        assert_eq!(row0, [0.0; 8], "ord {ord}");
        // the other lane, -4..=3: the +inf norm is 4 at x = -4 (row position 0, sign -);
        // the -inf norm is 0 at x = 0 (position 4, sign 0)
        let row1: Vec<f64> = dx.values().iter().skip(8).copied().collect();
        let mut want = [0.0; 8];
        if ord > 0.0 {
            want[0] = -1.0;
        }
        assert_eq!(row1, want, "ord {ord}");
    }
}

/// `logmeanexp`, the op added through the registry alone (its fold, its gradient, one
/// entry): values by hand on every layout, the fully masked and non-finite lanes, and the
/// gradient `g · softmax(x)`.
#[test]
fn logmeanexp_by_hand_on_every_layout() {
    use masked::{MaskedCoo, MaskedCsr};
    let ln3 = 3f64.ln();
    // rows: [0, ln 3] -> ln 2; [1] (one valid of two) -> 1; fully masked -> NaN, invalid;
    // [-inf, -inf] -> -inf; [inf, 0] -> inf
    let x = ArrayD::from_shape_vec(
        IxDyn(&[5, 2]),
        vec![
            0.0,
            ln3,
            1.0,
            7.0,
            5.0,
            6.0,
            f64::NEG_INFINITY,
            f64::NEG_INFINITY,
            f64::INFINITY,
            0.0,
        ],
    )
    .unwrap();
    let valid = [
        true, true, true, false, false, false, true, true, true, true,
    ];
    let a = MaskedArray::new(x.clone(), BitMask::from_bools([5, 2], valid).unwrap()).unwrap();
    let r = a.logmeanexp(1, false).unwrap();
    let v: Vec<f64> = r.values().iter().copied().collect();
    assert!((v[0] - 2f64.ln()).abs() < 1e-15, "{v:?}");
    assert_eq!(v[1], 1.0);
    assert!(v[2].is_nan());
    assert_eq!(&v[3..], &[f64::NEG_INFINITY, f64::INFINITY]);
    assert_eq!(r.mask().unwrap().to_vec(), [true, true, false, true, true]);
    // CSR and COO storing exactly the valid positions give the valid lanes
    let (mut rows, mut cols, mut vals) = (vec![], vec![], vec![]);
    for (k, &ok) in valid.iter().enumerate() {
        if ok {
            rows.push(k / 2);
            cols.push(k % 2);
            vals.push(x.as_slice().unwrap()[k]);
        }
    }
    let m = sprs::TriMat::from_triplets((5, 2), rows.clone(), cols.clone(), vals.clone())
        .to_csr::<usize>();
    let c = MaskedCsr::from_pattern(&m)
        .unwrap()
        .logmeanexp(1, false)
        .unwrap();
    let o = MaskedCoo::from_pattern([5, 2], &[rows, cols], vals)
        .unwrap()
        .logmeanexp(1, false)
        .unwrap();
    for s in [&c, &o] {
        assert_eq!(s.indices(), &[0, 1, 3, 4]);
        let sv = s.values();
        assert!((sv[0] - 2f64.ln()).abs() < 1e-15);
        assert_eq!(&sv[1..], &[1.0, f64::NEG_INFINITY, f64::INFINITY]);
    }
    // the gradient: g · softmax over the valid elements: [1/4, 3/4] for row 0, 1 for
    // row 1's valid element, 0 elsewhere in the rows with finite lanes
    let g = MaskedArray::unmasked(
        ArrayD::from_shape_vec(IxDyn(&[5]), vec![2.0, 3.0, 4.0, 0.0, 0.0]).unwrap(),
    );
    let req = OpRequest::new("logmeanexp").unwrap().dims(1);
    let dx = a.vjp_reduce(&req, &g).unwrap();
    let d: Vec<f64> = dx.values().iter().copied().collect();
    assert!(
        (d[0] - 0.5).abs() < 1e-15 && (d[1] - 1.5).abs() < 1e-15,
        "{d:?}"
    );
    // the fully masked row and the all -inf row (g = 0) get 0, never NaN
    assert_eq!(&d[2..8], &[3.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    // a valid +inf makes its lane's gradient NaN, as logsumexp's (and torch's)
    assert!(d[8].is_nan() && d[9].is_nan(), "{d:?}");
}

/// `a` with its axes in the order `axes`, in standard layout.
fn moved<A: Clone>(a: &ArrayD<A>, axes: &[usize]) -> ArrayD<A> {
    a.view()
        .permuted_axes(axes.to_vec())
        .as_standard_layout()
        .into_owned()
}

/// The input `x` (mask `m`, of `x`'s shape) with its axes in the order `axes`.
fn moved_input(x: &ArrayD<f64>, m: &[bool], axes: &[usize]) -> MaskedArrayD<f64> {
    let mb = ArrayD::from_shape_vec(IxDyn(x.shape()), m.to_vec()).unwrap();
    masked(&moved(x, axes), moved(&mb, axes).as_slice().unwrap())
}

/// The dense forward output of `req` on `a`, every position valid (a saved output).
fn saved_output(a: &MaskedArrayD<f64>, req: &OpRequest) -> MaskedArrayD<f64> {
    let o = apply_dense(&a.view(), req).unwrap();
    MaskedArray::unmasked(ArrayD::from_shape_vec(IxDyn(&o.shape), f64s(&o.values)).unwrap())
}

/// One side of a moved-axes comparison: an input, its request, the forward output and
/// the upstream gradient.
type Side<'a> = (
    &'a MaskedArrayD<f64>,
    &'a OpRequest,
    &'a MaskedArrayD<f64>,
    &'a MaskedArrayD<f64>,
);

/// A VJP of one side: given its saved output (`with_saved`) or not.
type Vjp = fn(Side<'_>, bool) -> masked::Result<MaskedArrayD<f64>>;

/// Asserts that `vjp` on `a` and on `b` (the input with its axes in the order `axes`)
/// agree bit for bit (the first moved), without and with the saved output.
fn assert_moved_vjps(what: &str, axes: &[usize], (a, b): (Side<'_>, Side<'_>), vjp: Vjp) {
    for with_saved in [false, true] {
        let (dx, dxt) = (vjp(a, with_saved).unwrap(), vjp(b, with_saved).unwrap());
        let got = moved(&dx.values().to_owned(), axes);
        let same = got
            .iter()
            .zip(dxt.values().iter())
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{what}, saved {with_saved}");
    }
}

/// A map's VJP of one side, as [`Vjp`].
fn map_vjp((x, req, y, g): Side<'_>, with_saved: bool) -> masked::Result<MaskedArrayD<f64>> {
    if with_saved {
        x.vjp_map_saved(req, y, g)
    } else {
        x.vjp_map(req, g)
    }
}

/// A reduction's VJP of one side, as [`Vjp`].
fn reduce_vjp((x, req, y, g): Side<'_>, with_saved: bool) -> masked::Result<MaskedArrayD<f64>> {
    if with_saved {
        x.vjp_reduce_saved(req, y, g)
    } else {
        x.vjp_reduce(req, g)
    }
}

/// A map's VJP along a leading dim (lanes at a stride, gathered a tile of lanes at a
/// time, in parallel) equals the same VJP along the last dim of the array with that
/// axis moved last, bit for bit: lanes longer than a mask word, tiles cut short by the
/// inner size, many blocks, with and without the saved output (the moved side's
/// forward output, moved back, on both sides).
#[test]
fn map_vjps_along_leading_dims_equal_the_last_dims_on_moved_axes() {
    let mut rng = Rng(17);
    let shape = [70usize, 37, 20];
    let (x, m) = random_input(&mut rng, &shape);
    let g: Vec<f64> = (0..x.len()).map(|_| rng.random_range(-1.0..1.0)).collect();
    let g = ArrayD::from_shape_vec(IxDyn(&shape), g).unwrap();
    let xa = masked(&x, &m);
    let ga = MaskedArray::unmasked(g.clone());
    for d in 0..2usize {
        let mut axes: Vec<usize> = (0..3).filter(|&a| a != d).collect();
        axes.push(d);
        let mut back = vec![0; 3];
        for (i, &a) in axes.iter().enumerate() {
            back[a] = i;
        }
        let xt = moved_input(&x, &m, &axes);
        let gt = MaskedArray::unmasked(moved(&g, &axes));
        for op in ["softmax", "log_softmax", "softmin", "cumsum", "normalize"] {
            let (req, req_t) = (
                OpRequest::new(op).unwrap().dims(d as isize),
                OpRequest::new(op).unwrap().dims(2),
            );
            // one saved output for both sides (the forward along a leading dim sums in
            // another order: the same to rounding, not to the bit)
            let yt = saved_output(&xt, &req_t);
            let y = MaskedArray::unmasked(moved(&yt.values().to_owned(), &back));
            let sides = ((&xa, &req, &y, &ga), (&xt, &req_t, &yt, &gt));
            assert_moved_vjps(&format!("{op} along dim {d}"), &axes, sides, map_vjp);
        }
    }
}

/// A reduction's VJP over leading or middle dims (one run of reduced dims, kept dims
/// after them: lanes at a stride, tiled) equals the same VJP over the last dims of the
/// array with those axes moved last, bit for bit, with and without the saved output.
#[test]
fn reduce_vjps_over_leading_dims_equal_the_last_dims_on_moved_axes() {
    let mut rng = Rng(29);
    let (x, m) = random_input(&mut rng, &[70, 37, 20]);
    let xa = masked(&x, &m);
    // reduced dims, and the permutation that moves them last
    let cases: [(Vec<isize>, [usize; 3]); 3] = [
        (vec![0], [1, 2, 0]),
        (vec![1], [0, 2, 1]),
        (vec![0, 1], [2, 0, 1]),
    ];
    let ops = [
        "sum",
        "mean",
        "var",
        "std",
        "amax",
        "amin",
        "median",
        "norm",
        "logsumexp",
        "prod",
    ];
    for (dims, axes) in cases {
        let last: Vec<isize> = (3 - dims.len() as isize..3).collect();
        let xt = moved_input(&x, &m, &axes);
        for op in ops {
            let req = OpRequest::new(op).unwrap().dims(Dims::from(dims.clone()));
            let req_t = OpRequest::new(op).unwrap().dims(Dims::from(last.clone()));
            let y = saved_output(&xa, &req);
            let g: Vec<f64> = (0..y.values().len())
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let g = MaskedArray::unmasked(ArrayD::from_shape_vec(IxDyn(y.shape()), g).unwrap());
            let sides = ((&xa, &req, &y, &g), (&xt, &req_t, &y, &g));
            assert_moved_vjps(&format!("{op} over {dims:?}"), &axes, sides, reduce_vjp);
        }
    }
}
