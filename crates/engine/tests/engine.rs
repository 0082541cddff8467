//! The dtype-erased boundary: hand-checked values, every op of the registry on every
//! layout and dtype agreeing with the dense result, the VJP by finite differences, and
//! bad input as typed errors.

use masked_core::{BitMask, DType, DynVec, Kind, MaskRule, MaskedError, Op, Scalar};
use masked_engine::by_name::cast_values;
use masked_engine::{
    convert, Array, BinOp, CooMask, CsrMask, OpRequest, Operand, Outcome, Output, SparseOutcome,
    ZipOutput,
};

/// A 3 x 4 matrix: row 0 has three valid entries, row 1 one, row 2 none (fully masked).
fn data() -> (Vec<f64>, Vec<bool>) {
    let v = vec![
        1.5, -2.0, 0.25, 9.0, //
        4.0, 7.0, 7.0, 7.0, //
        -1.0, 3.0, 5.0, 2.0,
    ];
    let m = vec![
        true, true, true, false, //
        true, false, false, false, //
        false, false, false, false,
    ];
    (v, m)
}

fn values_of(v: &[f64], dtype: DType) -> DynVec {
    cast_values(&DynVec::F64(v.to_vec()), dtype).unwrap()
}

fn dense(dtype: DType) -> Array {
    let (v, m) = data();
    Array::dense(
        &[3, 4],
        values_of(&v, dtype),
        Some(BitMask::from_bools([3, 4], m).unwrap()),
    )
    .unwrap()
}

/// The same matrix stored at exactly its valid positions (the mask is the pattern).
fn stored(dtype: DType) -> (Vec<usize>, Vec<usize>, Vec<usize>, DynVec) {
    let (v, m) = data();
    let (mut rows, mut cols, mut vals) = (vec![], vec![], vec![]);
    for (k, &valid) in m.iter().enumerate() {
        if valid {
            rows.push(k / 4);
            cols.push(k % 4);
            vals.push(v[k]);
        }
    }
    let mut indptr = vec![0; 4];
    for &r in &rows {
        indptr[r + 1] += 1;
    }
    for r in 0..3 {
        indptr[r + 1] += indptr[r];
    }
    (rows, cols, indptr, values_of(&vals, dtype))
}

fn csr(dtype: DType) -> Array {
    let (_, cols, indptr, vals) = stored(dtype);
    Array::csr((3, 4), indptr, cols, vals, CsrMask::Stored).unwrap()
}

fn coo(dtype: DType) -> Array {
    let (rows, cols, _, vals) = stored(dtype);
    Array::coo(&[3, 4], &[rows, cols], vals, CooMask::Stored).unwrap()
}

fn f64s(v: &DynVec) -> Vec<f64> {
    match cast_values(v, DType::F64).unwrap() {
        DynVec::F64(x) => x,
        _ => unreachable!(),
    }
}

fn dense_out(o: Output) -> Outcome {
    match o {
        Output::Dense(d) => d,
        _ => panic!("expected a dense output"),
    }
}

/// The VJP of `req` on the dense test matrix (of `g`'s dtype) for the upstream `g` of
/// shape `shape`, every position valid.
fn dense_vjp(req: &OpRequest, shape: Vec<usize>, g: DynVec) -> Vec<f64> {
    let x = dense(g.dtype());
    let mask = BitMask::filled(&shape[..], true).unwrap();
    let up = Output::Dense(Outcome {
        shape,
        values: g,
        mask,
    });
    f64s(x.view().unwrap().vjp(req, &up).unwrap().values())
}

fn sparse_out(o: Output) -> SparseOutcome {
    match o {
        Output::Sparse(s) => s,
        _ => panic!("expected a sparse output"),
    }
}

#[test]
fn hand_checked_sums_on_every_layout() {
    let req = OpRequest::new("sum").unwrap().dims(1);
    let d = dense_out(dense(DType::F32).view().unwrap().apply(&req).unwrap());
    assert_eq!(d.shape, vec![3]);
    assert_eq!(d.values, DynVec::F32(vec![-0.25, 4.0, 0.0]));
    // a sum is valid wherever its lane has a valid element
    assert_eq!(d.mask.to_vec(), vec![true, true, false]);
    for a in [csr(DType::F32), coo(DType::F32)] {
        let s = sparse_out(a.view().unwrap().apply(&req).unwrap());
        assert_eq!(s.shape, vec![3]);
        assert_eq!(s.indices, vec![0, 1]);
        assert_eq!(s.values, DynVec::F32(vec![-0.25, 4.0]));
    }
    // integers widen to i64
    let i = dense_out(dense(DType::I32).view().unwrap().apply(&req).unwrap());
    assert_eq!(i.values, DynVec::I64(vec![-1, 4, 0]));
}

/// Every reduction and normalization of the registry, by name through the erased
/// boundary, on every dtype: the sparse layouts' stored outputs equal the dense output at
/// its valid positions, and they store exactly those.
#[test]
fn every_op_every_layout_every_dtype_agrees_with_dense() {
    let mut checked = 0;
    for &op in Op::ALL {
        let dims: Vec<OpRequest> = match op.kind() {
            Kind::Reduce => vec![
                OpRequest::from_op(op).dims(1),
                OpRequest::from_op(op).dims(0),
                OpRequest::from_op(op),
            ],
            Kind::ReduceOne => vec![OpRequest::from_op(op).dims(1), OpRequest::from_op(op)],
            Kind::Normalize => vec![
                OpRequest::from_op(op).dims(1),
                OpRequest::from_op(op).dims(0),
            ],
            Kind::Unary | Kind::Binary => continue,
        };
        for &dtype in DType::ALL {
            for req in &dims {
                let d = dense_out(dense(dtype).view().unwrap().apply(req).unwrap());
                let valid: Vec<usize> = d
                    .mask
                    .to_vec()
                    .iter()
                    .enumerate()
                    .filter(|x| *x.1)
                    .map(|x| x.0)
                    .collect();
                let dv = f64s(&d.values);
                for a in [csr(dtype), coo(dtype)] {
                    let s = sparse_out(a.view().unwrap().apply(req).unwrap());
                    let ctx = format!("{op} {dtype} {} {:?}", a.layout(), req.dims);
                    assert_eq!(s.shape, d.shape, "{ctx}");
                    assert_eq!(s.values.dtype(), d.values.dtype(), "{ctx}");
                    // count is valid everywhere on dense; sparse stores the valid lanes
                    if op != Op::Count {
                        assert_eq!(s.indices, valid, "{ctx}");
                    }
                    for (&p, x) in s.indices.iter().zip(f64s(&s.values)) {
                        let want = dv[p];
                        let tol = 1e-2 * want.abs().max(1.0);
                        assert!(
                            (x - want).abs() <= tol || (x.is_nan() && want.is_nan()),
                            "{ctx} at {p}: {x} vs {want}"
                        );
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 300, "only {checked} cases ran");
}

#[test]
fn run_and_cast_and_dtype_requests() {
    let a = dense(DType::F64);
    let v = a.view().unwrap();
    for &op in Op::ALL {
        if matches!(op.kind(), Kind::Reduce | Kind::ReduceOne) {
            v.run(&OpRequest::from_op(op).dims(1)).unwrap();
        }
    }
    let c = dense_out(v.cast(DType::I32).unwrap());
    // masked-out values are 0 in the output (9.0 at [0, 3] was masked)
    assert_eq!(
        c.values,
        DynVec::I32(vec![1, -2, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0])
    );
    let h = dense(DType::F16);
    let req = OpRequest::new("sum").unwrap().dims(1).dtype(DType::F32);
    let s = dense_out(h.view().unwrap().apply(&req).unwrap());
    assert_eq!(s.values, DynVec::F32(vec![-0.25, 4.0, 0.0]));
    // run with a dtype request times the cast too, and succeeds
    h.view().unwrap().run(&req).unwrap();
}

/// The softmax VJP through the boundary equals central finite differences of
/// `sum(g * softmax(x))`, on the dense and both sparse layouts.
#[test]
fn softmax_vjp_equals_finite_differences() {
    let (v, m) = data();
    let g = [0.3, -1.0, 2.0, 0.7, 1.1, -0.4, 0.2, 0.9, 0.5, 0.5, 0.5, 0.5];
    let req = OpRequest::new("softmax").unwrap().dims(1);
    let f = |x: &[f64]| -> f64 {
        let a = Array::dense(
            &[3, 4],
            DynVec::F64(x.to_vec()),
            Some(BitMask::from_bools([3, 4], m.clone()).unwrap()),
        )
        .unwrap();
        let y = f64s(&dense_out(a.view().unwrap().apply(&req).unwrap()).values);
        y.iter().zip(&g).map(|(y, g)| y * g).sum()
    };
    let dx = dense_vjp(&req, vec![3, 4], DynVec::F64(g.to_vec()));
    let h = 1e-6;
    for k in 0..12 {
        let (mut p, mut q) = (v.clone(), v.clone());
        p[k] += h;
        q[k] -= h;
        let fd = (f(&p) - f(&q)) / (2.0 * h);
        assert!((dx[k] - fd).abs() < 1e-6, "at {k}: {} vs {fd}", dx[k]);
        if !m[k] {
            assert_eq!(dx[k], 0.0, "a masked-out position has no gradient");
        }
    }
    // sparse: the upstream at the forward output's valid positions
    for a in [csr(DType::F64), coo(DType::F64)] {
        let x = a.view().unwrap();
        let fwd = sparse_out(x.apply(&req).unwrap());
        let gv: Vec<f64> = fwd.indices.iter().map(|&p| g[p]).collect();
        let up = Output::Sparse(SparseOutcome {
            values: DynVec::F64(gv),
            ..fwd.clone()
        });
        let s = sparse_out(x.vjp(&req, &up).unwrap());
        assert_eq!(s.indices, fwd.indices, "{}", a.layout());
        for (&p, d) in s.indices.iter().zip(f64s(&s.values)) {
            assert!((d - dx[p]).abs() < 1e-12, "{} at {p}", a.layout());
        }
    }
}

/// With the forward output saved (`vjp_saved`), every differentiable op of the registry
/// on every layout gives the gradient the recomputing form gives, and so do the dense
/// views read in place (`vjp_dense`); a saved output of the wrong shape or layout kind
/// is a typed error.
#[test]
fn vjp_with_the_saved_output_equals_the_recomputed_one() {
    let mut checked = 0;
    for &op in Op::ALL {
        let dims: &[isize] = match op.kind() {
            Kind::Normalize => &[1, 0],
            Kind::Reduce | Kind::ReduceOne => &[1, 0],
            _ => continue,
        };
        for &d in dims {
            let req = OpRequest::from_op(op).dims(d);
            for a in [dense(DType::F64), csr(DType::F64), coo(DType::F64)] {
                let x = a.view().unwrap();
                let Ok(y) = x.apply(&req) else { continue };
                // the upstream: varied values at every output position
                let up = |n: usize| DynVec::F64((0..n).map(|k| (k % 5) as f64 - 1.5).collect());
                let g = match &y {
                    Output::Dense(o) => Output::Dense(Outcome {
                        values: up(o.values.len()),
                        ..o.clone()
                    }),
                    Output::Sparse(o) => Output::Sparse(SparseOutcome {
                        values: up(o.values.len()),
                        ..o.clone()
                    }),
                    Output::Csr(_) | Output::Coo(_) => panic!("apply returns flat positions"),
                };
                let Ok(want) = x.vjp(&req, &g) else { continue };
                let mut got = vec![x.vjp_saved(&req, Some(&y), &g).unwrap()];
                if let (Output::Dense(go), Output::Dense(yo)) = (&g, &y) {
                    // the upstream and the saved output as views, read in place
                    let view =
                        |o: &Outcome| Array::dense(&o.shape, o.values.clone(), None).unwrap();
                    let (ga, ya) = (view(go), view(yo));
                    let (gv, yv) = (ga.view().unwrap(), ya.view().unwrap());
                    got.push(x.vjp_dense(&req, Some(&yv), &gv).unwrap());
                    got.push(x.vjp_dense(&req, None, &gv).unwrap());
                    assert_eq!(got[1].shape(), want.shape());
                }
                let w = f64s(want.values());
                for got in got {
                    let h = f64s(got.values());
                    assert_eq!(w.len(), h.len(), "{op} dim {d} {}", a.layout());
                    for (p, q) in w.iter().zip(&h) {
                        assert!(
                            (p - q).abs() <= 1e-12 * p.abs().max(1.0),
                            "{op} dim {d} {}: {w:?} vs {h:?}",
                            a.layout()
                        );
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 100, "checked only {checked}");
    // a saved output of another shape or layout kind
    let req = OpRequest::new("softmax").unwrap().dims(1);
    let x = dense(DType::F64);
    let x = x.view().unwrap();
    let y = x.apply(&req).unwrap();
    let bad = Output::Dense(Outcome {
        shape: vec![4, 3],
        ..dense_out(y.clone())
    });
    assert!(matches!(
        x.vjp_saved(&req, Some(&bad), &y),
        Err(MaskedError::ShapeMismatch { .. })
    ));
    let s = csr(DType::F64);
    let sy = s.view().unwrap().apply(&req).unwrap();
    assert!(matches!(
        x.vjp_saved(&req, Some(&sy), &y),
        Err(MaskedError::InvalidArgument { .. })
    ));
    // views: an upstream of another dtype, a sparse one, sparse input
    let g32 = dense(DType::F32);
    let g32 = g32.view().unwrap();
    assert!(matches!(
        x.vjp_dense(&req, None, &g32),
        Err(MaskedError::InvalidArgument { .. })
    ));
    let sv = s.view().unwrap();
    assert!(matches!(
        x.vjp_dense(&req, None, &sv),
        Err(MaskedError::InvalidArgument { .. })
    ));
    assert!(matches!(
        sv.vjp_dense(&req, None, &x),
        Err(MaskedError::Unsupported { .. })
    ));
}

/// `apply_into` writes every op's values into a caller's buffer (prefilled with NaN:
/// every slot is overwritten) bit for bit as `apply` returns them, with the same mask;
/// a buffer of another dtype or size and `dtype=` are typed errors.
#[test]
fn apply_into_a_callers_buffer_equals_apply() {
    use masked_core::ByDType;
    let mut checked = 0;
    for dtype in [DType::F64, DType::F32, DType::I64] {
        let x = dense(dtype);
        let x = x.view().unwrap();
        for &op in Op::ALL {
            let dims: Vec<OpRequest> = match op.kind() {
                Kind::Normalize => vec![
                    OpRequest::from_op(op).dims(1),
                    OpRequest::from_op(op).dims(0),
                ],
                Kind::Unary => vec![OpRequest::from_op(op)],
                Kind::Reduce | Kind::ReduceOne => vec![
                    OpRequest::from_op(op).dims(1),
                    OpRequest::from_op(op).dims(0).keepdim(true),
                ],
                Kind::Binary => continue,
            };
            for req in dims {
                let Ok(want) = x.apply(&req) else { continue };
                let want = dense_out(want);
                into_equals(
                    &x,
                    &req,
                    &want.values,
                    &want.mask,
                    &format!("{op} {dtype:?}"),
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 150, "checked only {checked}");
    let x = dense(DType::F64);
    let x = x.view().unwrap();
    let req = OpRequest::new("softmax").unwrap().dims(1);
    let mut small = [0.0f64; 5];
    assert!(matches!(
        x.apply_into(&req, ByDType::F64(&mut small[..])),
        Err(MaskedError::InvalidData(_))
    ));
    let mut f32s = [0.0f32; 12];
    assert!(matches!(
        x.apply_into(&req, ByDType::F32(&mut f32s[..])),
        Err(MaskedError::InvalidArgument { .. })
    ));
    let mut ok = [0.0f64; 12];
    let req32 = OpRequest::new("softmax").unwrap().dims(1).dtype(DType::F32);
    assert!(matches!(
        x.apply_into(&req32, ByDType::F64(&mut ok[..])),
        Err(MaskedError::Unsupported { .. })
    ));
}

/// A buffer of `n` NaNs (7s for integers) of `dtype`, and `f` run on it erased.
/// `apply_into` of `req` on `x` into a NaN-prefilled buffer writes `want` bit for bit
/// and returns the mask `mask`.
fn into_equals(
    x: &masked_engine::ArrayRef<'_>, req: &OpRequest, want: &DynVec, mask: &BitMask, what: &str,
) {
    let (buf, got) = with_buffer(want.dtype(), want.len(), |out| x.apply_into(req, out));
    let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(&got, mask, "{what}");
    let (w, g) = (f64s(want), f64s(&buf));
    assert!(
        w.iter().zip(&g).all(|(a, b)| a.to_bits() == b.to_bits()),
        "{what}: {w:?} vs {g:?}"
    );
}

fn with_buffer<R>(
    dtype: DType, n: usize, f: impl FnOnce(masked_core::ByDType<masked_core::SliceMutOf<'_>>) -> R,
) -> (DynVec, R) {
    use masked_core::ByDType;
    let mut buf = cast_values(&DynVec::F64(vec![f64::NAN; n]), dtype)
        .unwrap_or_else(|_| cast_values(&DynVec::F64(vec![7.0; n]), dtype).unwrap());
    let r = f(match &mut buf {
        DynVec::F64(v) => ByDType::F64(&mut v[..]),
        DynVec::F32(v) => ByDType::F32(&mut v[..]),
        DynVec::I64(v) => ByDType::I64(&mut v[..]),
        DynVec::I32(v) => ByDType::I32(&mut v[..]),
        DynVec::F16(v) => ByDType::F16(&mut v[..]),
        DynVec::BF16(v) => ByDType::BF16(&mut v[..]),
    });
    (buf, r)
}

/// A 3 x 4 x 5 COO array of 23 entries (lanes of every length along each dim,
/// including empty ones), its mask its own pattern.
fn coo3(dtype: DType) -> Array {
    let flat: Vec<usize> = (0..60).filter(|p| (p * 7 + p / 5) % 13 < 5).collect();
    let coords: Vec<Vec<usize>> = vec![
        flat.iter().map(|p| p / 20).collect(),
        flat.iter().map(|p| p / 5 % 4).collect(),
        flat.iter().map(|p| p % 5).collect(),
    ];
    let v: Vec<f64> = flat
        .iter()
        .map(|&p| (p as f64 * 0.37).sin() * 3.0)
        .collect();
    Array::coo(&[3, 4, 5], &coords, values_of(&v, dtype), CooMask::Stored).unwrap()
}

/// On sparse input, `apply_into` writes a normalization's or an elementwise op's values
/// into one slot per stored entry (NaN-prefilled: every slot overwritten), bit for bit
/// the values `apply` stores, every slot valid; reductions, a result that would store
/// every position, and a buffer of another size or dtype are typed errors.
#[test]
fn apply_into_on_sparse_input_writes_one_slot_per_stored_entry() {
    let mut checked = 0;
    for dtype in [DType::F64, DType::F32, DType::I64] {
        let (_, cols, indptr, vals) = stored(dtype);
        let (rows, ..) = stored(dtype);
        // a separate mask pattern: the lanes are its entries
        let sep =
            masked::Pattern::from_coords((3, 4), &[vec![0, 0, 1, 2], vec![1, 3, 0, 2]]).unwrap();
        let csr_sep = Array::csr(
            (3, 4),
            indptr.clone(),
            cols.clone(),
            vals.clone(),
            CsrMask::Pattern(sep),
        )
        .unwrap();
        let coo_sep = Array::coo(
            &[3, 4],
            &[rows, cols],
            vals,
            CooMask::Pattern(masked::CooPattern::from_flat([3, 4], &[1, 3, 4, 10]).unwrap()),
        )
        .unwrap();
        for a in [csr(dtype), coo(dtype), csr_sep, coo_sep, coo3(dtype)] {
            let x = a.view().unwrap();
            let rank = if matches!(a, Array::Coo(_))
                && x.apply(&OpRequest::new("sum").unwrap().dims(2)).is_ok()
            {
                3
            } else {
                2
            };
            for &op in Op::ALL {
                let reqs: Vec<OpRequest> = match op.kind() {
                    Kind::Normalize => (0..rank).map(|d| OpRequest::from_op(op).dims(d)).collect(),
                    Kind::Unary => vec![OpRequest::from_op(op)],
                    Kind::Reduce | Kind::ReduceOne => {
                        let (_, r) = with_buffer(DType::F64, 4, |out| {
                            x.apply_into(&OpRequest::from_op(op).dims(1), out)
                        });
                        assert!(matches!(r, Err(MaskedError::Unsupported { .. })), "{op}");
                        continue;
                    }
                    Kind::Binary => continue,
                };
                for req in reqs {
                    let Ok(want) = x.apply(&req) else { continue };
                    let want = sparse_out(want);
                    // every stored slot valid
                    let all = BitMask::filled([want.values.len()], true).unwrap();
                    let what = format!("{op} {dtype:?} {:?}", req.dims);
                    into_equals(&x, &req, &want.values, &all, &what);
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 300, "checked only {checked}");
    // without a mask a softmax would store every position; exp (exp(0) = 1) too, while
    // sin keeps the stored entries
    let (_, cols, indptr, vals) = stored(DType::F64);
    let all = Array::csr((3, 4), indptr, cols, vals, CsrMask::All).unwrap();
    let x = all.view().unwrap();
    for (op, dims, ok) in [
        ("softmax", Some(1), false),
        ("exp", None, false),
        ("sin", None, true),
    ] {
        let mut req = OpRequest::new(op).unwrap();
        if let Some(d) = dims {
            req = req.dims(d);
        }
        let (buf, r) = with_buffer(DType::F64, 4, |out| x.apply_into(&req, out));
        if ok {
            assert_eq!(r.unwrap().count_ones(), 4);
            assert_eq!(f64s(&buf), [1.5f64, -2.0, 0.25, 4.0].map(f64::sin).to_vec());
        } else {
            assert!(
                matches!(r, Err(MaskedError::Unsupported { .. })),
                "{op}: {r:?}"
            );
        }
    }
    let req = OpRequest::new("softmax").unwrap().dims(1);
    for a in [csr(DType::F64), coo(DType::F64)] {
        let x = a.view().unwrap();
        let (_, r) = with_buffer(DType::F64, 5, |out| x.apply_into(&req, out));
        assert!(matches!(r, Err(MaskedError::InvalidData(_))), "{r:?}");
        let (_, r) = with_buffer(DType::F32, 4, |out| x.apply_into(&req, out));
        assert!(
            matches!(r, Err(MaskedError::InvalidArgument { .. })),
            "{r:?}"
        );
        // hand-checked: row 0 holds 1.5, -2, 0.25; row 1 holds 4 alone
        let (buf, r) = with_buffer(DType::F64, 4, |out| x.apply_into(&req, out));
        r.unwrap();
        let e = [1.5f64, -2.0, 0.25].map(f64::exp);
        let z: f64 = e.iter().sum();
        let got = f64s(&buf);
        for (g, w) in got.iter().zip([e[0] / z, e[1] / z, e[2] / z, 1.0]) {
            assert!((g - w).abs() < 1e-15, "{got:?}");
        }
    }
}

#[test]
fn vjp_of_a_fully_masked_lane_is_zero_not_nan() {
    let req = OpRequest::new("var").unwrap().dims(1);
    let dx = dense_vjp(&req, vec![3], DynVec::F32(vec![1.0, 1.0, 1.0]));
    assert!(dx.iter().all(|x| x.is_finite()), "{dx:?}");
    assert_eq!(&dx[8..], &[0.0; 4]);
}

#[test]
fn vjp_bad_input_is_a_typed_error() {
    let req = OpRequest::new("sum").unwrap().dims(1);
    let up = |dtype, shape: Vec<usize>| {
        let n = shape.iter().product();
        Output::Dense(Outcome {
            values: values_of(&vec![1.0; n], dtype),
            mask: BitMask::filled(&shape, true).unwrap(),
            shape,
        })
    };
    // integer input: not differentiable, and no integer VJP is compiled
    let e = dense(DType::I64)
        .view()
        .unwrap()
        .vjp(&req, &up(DType::I64, vec![3]));
    assert!(
        matches!(e, Err(MaskedError::NotDifferentiable { .. })),
        "{e:?}"
    );
    let x = dense(DType::F32);
    let e = x.view().unwrap().vjp(&req, &up(DType::F64, vec![3]));
    assert!(
        matches!(e, Err(MaskedError::InvalidArgument { name: "g", .. })),
        "{e:?}"
    );
    let e = x.view().unwrap().vjp(&req, &up(DType::F32, vec![4]));
    assert!(matches!(e, Err(MaskedError::ShapeMismatch { .. })), "{e:?}");
    let e = csr(DType::F32)
        .view()
        .unwrap()
        .vjp(&req, &up(DType::F32, vec![3]));
    assert!(
        matches!(e, Err(MaskedError::InvalidArgument { name: "g", .. })),
        "{e:?}"
    );
    let e = x.view().unwrap().vjp(
        &OpRequest::new("argmax").unwrap().dims(1),
        &up(DType::F32, vec![3]),
    );
    assert!(
        matches!(e, Err(MaskedError::NotDifferentiable { .. })),
        "{e:?}"
    );
    // a sparse map upstream of the wrong length
    let sm = OpRequest::new("softmax").unwrap().dims(1);
    let bad = Output::Sparse(SparseOutcome {
        shape: vec![3, 4],
        indices: vec![0],
        values: DynVec::F32(vec![1.0]),
    });
    let e = csr(DType::F32).view().unwrap().vjp(&sm, &bad);
    assert!(matches!(e, Err(MaskedError::ValueCount { .. })), "{e:?}");
    // ... and of the right count at other positions (the forward output's shifted by one)
    for c in [csr(DType::F32), coo(DType::F32)] {
        let Output::Sparse(fwd) = c.view().unwrap().apply(&sm).unwrap() else {
            panic!("a sparse softmax is sparse")
        };
        let shifted = Output::Sparse(SparseOutcome {
            indices: fwd.indices.iter().map(|p| p + 1).collect(),
            ..fwd
        });
        let e = c.view().unwrap().vjp(&sm, &shifted);
        assert!(e.is_err(), "{}: {e:?}", c.layout());
    }
}

#[test]
fn binary_ops_hand_checked() {
    use masked_core::binary::KeepBin;
    let mul = BinOp::Keep(KeepBin::Mul);
    let sub = BinOp::Keep(KeepBin::Sub);
    let x = dense(DType::F64);
    let v = x.view().unwrap();
    // 1 - x, valid where x is
    let ZipOutput::Dense(r) = v
        .binary(Operand::Scalar(Scalar::Int(1)), sub, MaskRule::Strict, true)
        .unwrap()
    else {
        panic!("dense")
    };
    assert_eq!(r.mask.to_vec(), data().1);
    let got = f64s(match &r.values {
        masked_core::Values::Num(n) => n,
        _ => panic!("numbers"),
    });
    assert_eq!(&got[..4], &[-0.5, 3.0, 0.75, 0.0]);
    // sparse * dense: a sparse result at the sparse operand's valid positions
    let s = csr(DType::F64);
    let ZipOutput::Sparse(r) = s
        .view()
        .unwrap()
        .binary(Operand::Array(&v), mul, MaskRule::Strict, false)
        .unwrap()
    else {
        panic!("sparse")
    };
    assert_eq!(r.indices, vec![0, 1, 2, 4]);
    // dense * sparse: sparse wins, the same result
    let ZipOutput::Sparse(r2) = v
        .binary(
            Operand::Array(&s.view().unwrap()),
            mul,
            MaskRule::Strict,
            false,
        )
        .unwrap()
    else {
        panic!("sparse")
    };
    assert_eq!(r, r2);
    match &r.values {
        masked_core::Values::Num(n) => assert_eq!(f64s(n), vec![2.25, 4.0, 0.0625, 16.0]),
        _ => panic!("numbers"),
    }
    // refused, the argument named: two dtypes (until promoted), CSR with COO, a scalar
    // the dtype cannot hold
    let (y, c, i) = (dense(DType::F32), coo(DType::F64), dense(DType::I32));
    let (sv, iv, nan) = (
        s.view().unwrap(),
        i.view().unwrap(),
        Scalar::Float(f64::NAN),
    );
    for (x, rhs, name) in [
        (&v, Operand::Array(&y.view().unwrap()), "rhs"),
        (&sv, Operand::Array(&c.view().unwrap()), "rhs"),
        (&iv, Operand::Scalar(nan), "scalar"),
    ] {
        let e = x.binary(rhs, mul, MaskRule::Strict, false);
        assert!(
            matches!(&e, Err(MaskedError::InvalidArgument { name: n, .. }) if *n == name),
            "{e:?}"
        );
    }
}

#[test]
fn select_filled_and_fill_zero() {
    let cond = BitMask::from_bools([4], [true, false, true, false]).unwrap();
    let x = dense(DType::F64);
    let (v, _) = data();
    let y = Array::dense(
        &[3, 4],
        DynVec::F64(v.iter().map(|x| x * 10.0).collect()),
        None,
    )
    .unwrap();
    let r = dense_out(x.view().unwrap().select(&cond, &y.view().unwrap()).unwrap());
    assert_eq!(&f64s(&r.values)[..4], &[1.5, -20.0, 0.25, 90.0]);
    assert_eq!(&r.mask.to_vec()[..4], &[true, true, true, true]);
    let f = dense_out(x.view().unwrap().filled(Scalar::Float(-1.0)).unwrap());
    assert_eq!(
        &f64s(&f.values)[..8],
        &[1.5, -2.0, 0.25, -1.0, 4.0, -1.0, -1.0, -1.0]
    );
    for a in [csr(DType::F32), coo(DType::F32)] {
        let f = dense_out(a.view().unwrap().filled(Scalar::Int(7)).unwrap());
        assert_eq!(
            &f64s(&f.values)[..4],
            &[1.5, -2.0, 0.25, 7.0],
            "{}",
            a.layout()
        );
        let z = sparse_out(a.view().unwrap().fill_zero().unwrap());
        assert_eq!(z.indices, vec![0, 1, 2, 4], "{}", a.layout());
    }
    let e = dense(DType::I32)
        .view()
        .unwrap()
        .filled(Scalar::Float(0.5e300));
    assert!(e.is_err());
}

#[test]
fn constructors_refuse_bad_parts() {
    let e = Array::dense(&[2, 2], DynVec::F32(vec![1.0; 3]), None);
    assert!(matches!(e, Err(MaskedError::InvalidData(_))));
    let e = Array::csr(
        (2, 2),
        vec![0, 1],
        vec![0],
        DynVec::F32(vec![1.0]),
        CsrMask::All,
    );
    assert!(matches!(e, Err(MaskedError::InvalidData(_))));
    let e = Array::coo(
        &[2, 2],
        &[vec![0, 0], vec![1, 1]],
        DynVec::F32(vec![1.0, 2.0]),
        CooMask::All,
    );
    assert!(e.is_err(), "a repeated position");
    let a = coo(DType::BF16);
    assert_eq!(
        (a.dtype(), a.layout(), a.shape(), a.nnz()),
        (DType::BF16, "coo", vec![3, 4], 4)
    );
    // convert moves values of the same dtype and casts others
    assert_eq!(
        convert(DynVec::I32(vec![3]), DType::F64).unwrap(),
        DynVec::F64(vec![3.0])
    );
    assert!(convert(DynVec::F64(vec![f64::NAN]), DType::I32).is_err());
}

/// nanargmax / nanargmin (registry entries over the nan-free data): numpy's
/// `nanargmax` / `nanargmin` on the valid elements, hand-checked.
#[test]
fn nanargmax_and_nanargmin() {
    let nan = f64::NAN;
    // row 0: NaN is the first valid element (argmax would pick it); row 1: all NaN
    let v = vec![nan, 3.0, 8.0, 1.0, nan, nan, 2.0, 5.0];
    let m = vec![true, true, false, true, true, true, false, false];
    let x = Array::dense(
        &[2, 4],
        DynVec::F64(v),
        Some(BitMask::from_bools([2, 4], m).unwrap()),
    )
    .unwrap();
    let x = x.view().unwrap();
    let get = |name: &str, dims: Option<isize>| {
        let mut req = OpRequest::new(name).unwrap();
        if let Some(d) = dims {
            req = req.dims(d);
        }
        dense_out(x.apply(&req).unwrap())
    };
    let a = get("argmax", Some(1));
    assert_eq!(
        a.values,
        DynVec::I64(vec![0, 0]),
        "argmax takes the first NaN"
    );
    let a = get("nanargmax", Some(1));
    assert_eq!(a.values, DynVec::I64(vec![1, 0]));
    assert_eq!(a.mask.to_vec(), vec![true, false]);
    let a = get("nanargmin", Some(1));
    assert_eq!(a.values, DynVec::I64(vec![3, 0]));
    assert_eq!(get("nanargmax", None).values, DynVec::I64(vec![1]));
    assert_eq!(get("nanargmin", None).values, DynVec::I64(vec![3]));
    let e = x.apply(&OpRequest::new("nanargmax").unwrap().dims([0, 1]));
    assert!(matches!(e, Err(MaskedError::DimCount { .. })), "{e:?}");
}

/// The op table of docs/cli.md is the registry's: adding an op without documenting it
/// (or documenting one that does not exist) fails here.
#[test]
fn docs_cli_op_table_is_the_registry() {
    let docs = include_str!("../../../docs/cli.md");
    let (begin, end) = ("<!-- ops:begin -->\n", "<!-- ops:end -->");
    let start = docs
        .find(begin)
        .expect("docs/cli.md has no ops:begin marker")
        + begin.len();
    let stop = docs[start..].find(end).expect("no ops:end marker") + start;
    let want = masked_engine::by_name::markdown_table();
    assert!(
        docs[start..stop] == want,
        "docs/cli.md's op table differs from the registry; replace it with:\n{want}"
    );
}

/// Every kind of prepared bench call runs on every layout; bad combinations are typed
/// errors, not panics.
#[test]
fn workloads_prepare_every_kind_of_call() {
    use masked_core::binary::{FloatBin, KeepBin};
    use masked_engine::workload::{Gen, Values, Workload};
    let g = Gen {
        seed: 3,
        density: 0.2,
        mask_density: 0.5,
        mask_source: "random".into(),
        values: Values::Normal,
    };
    let sum = OpRequest::new("sum").unwrap().dims(1);
    let softmax = OpRequest::new("softmax").unwrap().dims(1);
    let mul = BinOp::Keep(KeepBin::Mul);
    for (layout, shape) in [
        ("dense", vec![6, 9]),
        ("csr", vec![6, 9]),
        ("coo", vec![6, 9]),
    ] {
        let w = Workload::generate(layout, DType::F32, &shape, &g).unwrap();
        assert!(w.nnz() > 0 && w.bytes() > 0.0, "{layout}");
        let p = w.partner(&g, MaskRule::Strict).unwrap();
        w.op(&sum, false).unwrap()().unwrap();
        w.vjp(&softmax, false).unwrap()().unwrap();
        w.vjp(&sum, false).unwrap()().unwrap();
        w.binary(&p, mul, MaskRule::Strict, false).unwrap()().unwrap();
        w.fused(&p, &sum, mul, MaskRule::Strict).unwrap()().unwrap();
        let vb = OpRequest::new("mul").unwrap();
        w.vjp_binary(&p, &vb, MaskRule::Strict, false).unwrap()().unwrap();
        if layout == "dense" {
            w.op(&softmax, true).unwrap()().unwrap();
            w.op(&sum, true).unwrap()().unwrap();
            w.vjp(&softmax, true).unwrap()().unwrap();
            w.binary(&p, BinOp::Float(FloatBin::Div), MaskRule::Strict, true)
                .unwrap()()
            .unwrap();
            w.vjp_binary(&p, &vb, MaskRule::Strict, true).unwrap()().unwrap();
        } else {
            // a sparse normalization writes one slot per stored entry; a sparse
            // reduction and a sparse VJP have no buffer form
            w.op(&softmax, true).unwrap()().unwrap();
            assert!(
                w.op(&sum, true).is_err(),
                "{layout}: a reduction into a buffer"
            );
            assert!(
                w.vjp(&softmax, true).is_err(),
                "{layout}: a VJP into a buffer is dense only"
            );
        }
        let a = w.partner(&g, MaskRule::And).unwrap();
        w.binary(&a, mul, MaskRule::And, false).unwrap()().unwrap();
        // a comparison has no reduction
        let lt = BinOp::Cmp(masked_core::binary::CmpBin::Lt);
        assert!(w.fused(&p, &sum, lt, MaskRule::Strict).is_err());
    }
    let i = Workload::generate("dense", DType::I32, &[4, 4], &g).unwrap();
    let e = i.vjp(&sum, false);
    assert!(matches!(e, Err(MaskedError::NotDifferentiable { .. })));
    let f = Workload::generate("dense", DType::F64, &[4, 4], &g).unwrap();
    let e = f.binary(&i, mul, MaskRule::Strict, false);
    assert!(matches!(e, Err(MaskedError::InvalidData(_))));
    let c = Workload::generate("csr", DType::F64, &[4, 4], &g).unwrap();
    assert!(f.binary(&c, mul, MaskRule::Strict, false).is_err());
    assert!(Workload::generate("csc", DType::F64, &[4, 4], &g).is_err());
    assert!(Workload::generate("csr", DType::F64, &[4, 4, 4], &g).is_err());
    let bad = Gen { density: 2.0, ..g };
    assert!(Workload::generate("coo", DType::F64, &[4, 4], &bad).is_err());
}

#[test]
fn lane_moments_hand_checked() {
    use masked_core::Dims;
    let near = |a: &[f64], b: &[f64], tol: f64| {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{a:?} vs {b:?}");
        }
    };
    // every value of data() is exact in every float dtype; the integers take the
    // rounded ones, so their rows differ: checked on the floats and i64 separately
    for dtype in [DType::F64, DType::F32, DType::F16, DType::BF16] {
        // narrower floats sum each block in f32 before the f64 merge (the contract's
        // accuracy for them)
        let tol = if dtype == DType::F64 { 1e-12 } else { 1e-6 };
        let close = |a: &[f64], b: &[f64]| near(a, b, tol);
        let x = dense(dtype);
        let x = x.view().unwrap();
        // rows: {1.5, -2, 0.25} (mean -1/12, m2 906/144), {4}, none
        let m = x.moments(&Dims::from(1isize), true).unwrap();
        assert_eq!(m.shape, vec![3, 1]);
        assert_eq!(m.n, vec![3, 1, 0]);
        close(&m.mean, &[-1.0 / 12.0, 4.0, 0.0]);
        close(&m.m2, &[906.0 / 144.0, 0.0, 0.0]);
        // columns, keepdim false: {1.5, 4}, {-2}, {0.25}, none
        let m = x.moments(&Dims::from(0isize), false).unwrap();
        assert_eq!(m.shape, vec![4]);
        assert_eq!(m.n, vec![2, 1, 1, 0]);
        close(&m.mean, &[2.75, -2.0, 0.25, 0.0]);
        close(&m.m2, &[3.125, 0.0, 0.0, 0.0]);
        // everything: {1.5, -2, 0.25, 4}
        let m = x.moments(&Dims::All, false).unwrap();
        assert_eq!((m.shape.len(), m.n.clone()), (0, vec![4]));
        close(&m.mean, &[0.9375]);
        close(&m.m2, &[18.796875]);
        // var's finish of these states is var itself
        let Output::Dense(v) = x.apply(&OpRequest::new("var").unwrap().dims(1)).unwrap() else {
            unreachable!()
        };
        let m = x.moments(&Dims::from(1isize), false).unwrap();
        let var: Vec<f64> = f64s(&v.values);
        // (var in the input dtype: bf16 keeps 8 bits)
        assert!(
            (var[0] - m.m2[0] / 2.0).abs() < 5e-3 * var[0],
            "{dtype:?} {var:?} {m:?}"
        );
    }
    let close = |a: &[f64], b: &[f64]| near(a, b, 1e-12);
    let x = dense(DType::I64);
    let m = x
        .view()
        .unwrap()
        .moments(&Dims::from(1isize), true)
        .unwrap();
    assert_eq!(m.n, vec![3, 1, 0]);
    // against the integers the array holds (data() cast to i64)
    let DynVec::I64(held) = values_of(&data().0, DType::I64) else {
        unreachable!()
    };
    let row: Vec<f64> = held[..3].iter().map(|&v| v as f64).collect();
    let mean = row.iter().sum::<f64>() / 3.0;
    close(&m.mean[..1], &[mean]);
    close(
        &m.m2[..1],
        &[row.iter().map(|v| (v - mean).powi(2)).sum::<f64>()],
    );
    // a bad dim and sparse input are typed errors
    let (d, c) = (dense(DType::F32), csr(DType::F32));
    let e = d.view().unwrap().moments(&Dims::from(2isize), true);
    assert!(matches!(e, Err(MaskedError::DimOutOfRange { .. })));
    let e = c.view().unwrap().moments(&Dims::from(1isize), true);
    assert!(matches!(e, Err(MaskedError::Unsupported { .. })));
}

/// Each generated value distribution lands in its domain, by name.
#[test]
fn values_map_into_their_domains() {
    use masked_engine::workload::Values;
    for x in [-3.0, -0.5, 0.0, 0.5, 3.0] {
        assert!(Values::parse("positive").unwrap().map(x) >= 0.01);
        let u = Values::parse("unit").unwrap().map(x);
        assert!(u > -1.0 && u < 1.0);
        assert!(Values::parse("above-one").unwrap().map(x) >= 1.0);
        assert_eq!(Values::parse("normal").unwrap().map(x), x);
    }
    assert_eq!(Values::parse("positive").unwrap().map(-2.0), 2.01);
    assert!(Values::parse("uniform").is_err());
}

/// `apply_rows` keeps a CSR map's result as rows: on a matrix masked by its stored
/// entries, a map stores exactly those entries and says so ([`CsrCols::Input`]: no
/// indices at all); with a separate mask pattern it owns the pattern's indices (u32 for
/// a u32 matrix); a reduction stays a flat sparse result. Each equals `apply`'s flat
/// result position for position. A COO map's result comes on its pattern.
#[test]
fn apply_rows_keeps_sparse_maps_in_their_layouts_form() {
    use masked_engine::{ArrayRef, CsrCols, CsrOutcome};
    use sprs::CsMatI;
    let (_, cols, indptr, vals) = stored(DType::F64);
    let softmax = OpRequest::new("softmax").unwrap().dims(1);
    let check = |x: &ArrayRef<'_>, want_cols: fn(&CsrCols) -> bool| {
        let flat = sparse_out(x.apply(&softmax).unwrap());
        let Output::Csr(CsrOutcome {
            shape,
            indptr: ptr,
            cols: rows,
            values,
        }) = x.apply_rows(&softmax).unwrap()
        else {
            panic!("a CSR map comes as rows")
        };
        assert!(want_cols(&rows), "{rows:?}");
        assert_eq!((shape, values), (flat.shape.clone(), flat.values.clone()));
        // the rows' positions, with the input's columns where they are its own
        let c: Vec<usize> = match rows {
            CsrCols::Input => cols.clone(), // the stored input's own
            CsrCols::U32(c) => c.iter().map(|&v| v as usize).collect(),
            CsrCols::Usize(c) => c,
        };
        let pos: Vec<usize> = (0..3)
            .flat_map(|r| (ptr[r]..ptr[r + 1]).map(move |k| (r, k)))
            .map(|(r, k)| r * 4 + c[k])
            .collect();
        assert_eq!(pos, flat.indices);
        // a reduction: flat lanes
        let sum = OpRequest::new("sum").unwrap().dims(1);
        assert!(matches!(x.apply_rows(&sum).unwrap(), Output::Sparse(_)));
    };
    let a = csr(DType::F64);
    check(&a.view().unwrap(), |c| *c == CsrCols::Input);
    // every element stored, the mask a separate pattern (the valid ones)
    let full = |v: &DynVec| {
        let f = f64s(v);
        let mut dense = vec![0.0; 12];
        for r in 0..3 {
            for k in indptr[r]..indptr[r + 1] {
                dense[r * 4 + cols[k]] = f[k];
            }
        }
        dense
    };
    let dense = full(&vals);
    let mask = layout_csr::Pattern::try_from_parts((3, 4), indptr.clone(), cols.clone()).unwrap();
    let all: Vec<usize> = (0..3).flat_map(|_| 0..4).collect();
    let m = CsMatI::<f64, usize>::new((3, 4), vec![0, 4, 8, 12], all.clone(), dense.clone());
    let own = layout_csr::MaskedCsr::with_mask(m.view(), mask).unwrap();
    check(&ArrayRef::from_csr(own), |c| matches!(c, CsrCols::Usize(_)));
    let m32 = CsMatI::<f64, u32, usize>::new(
        (3, 4),
        vec![0, 4, 8, 12],
        all.iter().map(|&c| c as u32).collect(),
        dense,
    );
    let mask32 = layout_csr::PatternI::<u32>::try_from_parts(
        (3, 4),
        indptr.clone(),
        cols.iter().map(|&c| c as u32).collect(),
    )
    .unwrap();
    let own32 = layout_csr::MaskedCsr::with_mask(m32.view(), mask32).unwrap();
    check(&ArrayRef::from_csr32(own32), |c| {
        matches!(c, CsrCols::U32(_))
    });
    // COO: a map's result on the input's pattern (equal, and its flat positions apply's)
    let c = coo(DType::F64);
    let x = c.view().unwrap();
    let flat = sparse_out(x.apply(&softmax).unwrap());
    let Output::Coo(r) = x.apply_rows(&softmax).unwrap() else {
        panic!("a COO map comes on its pattern")
    };
    assert_eq!(r.clone().flat(), flat);
    assert_eq!(r.pattern.nnz(), c.nnz());
}

/// `vjp_map_values`: a CSR map's gradient from the upstream's values alone (borrowed)
/// equals the dense layout's VJP on the same data at the valid positions, and the
/// positioned VJP's (with and without the saved output), on the input's structure; a
/// reduction, another layout and a wrong count are errors.
#[test]
fn vjp_map_values_equals_the_dense_and_positioned_vjps() {
    use masked_engine::CsrCols;
    let a = csr(DType::F64);
    let x = a.view().unwrap();
    let d = dense(DType::F64);
    for name in ["softmax", "exp", "cumsum"] {
        let req = match name {
            "exp" => OpRequest::new(name).unwrap(),
            _ => OpRequest::new(name).unwrap().dims(1),
        };
        let y = sparse_out(x.apply(&req).unwrap());
        let g = DynVec::F64((0..y.indices.len()).map(|k| k as f64 * 0.5 - 1.0).collect());
        let up = Output::Sparse(SparseOutcome {
            values: g.clone(),
            ..y.clone()
        });
        let positioned = sparse_out(x.vjp(&req, &up).unwrap());
        // the dense layout's VJP with the upstream spread onto the 3 x 4 grid
        let mut spread = vec![0.0; 12];
        for (&p, v) in y.indices.iter().zip(f64s(&g)) {
            spread[p] = v;
        }
        let dense_up = Output::Dense(Outcome {
            shape: vec![3, 4],
            values: DynVec::F64(spread),
            mask: BitMask::filled([3, 4], true).unwrap(),
        });
        let dd = f64s(&dense_out(d.view().unwrap().vjp(&req, &dense_up).unwrap()).values);
        let want: Vec<f64> = y.indices.iter().map(|&p| dd[p]).collect();
        assert_eq!(f64s(&positioned.values), want, "{name}");
        for saved in [None, Some(y.values.as_slices())] {
            let Output::Csr(r) = x.vjp_map_values(&req, saved, g.as_slices()).unwrap() else {
                panic!("a CSR gradient comes as rows")
            };
            assert_eq!(r.cols, CsrCols::Input, "{name}");
            assert_eq!(f64s(&r.values), want, "{name}");
        }
    }
    let sum = OpRequest::new("sum").unwrap().dims(1);
    assert!(x
        .vjp_map_values(&sum, None, DynVec::F64(vec![1.0; 3]).as_slices())
        .is_err());
    let d = dense(DType::F64);
    let exp = OpRequest::new("exp").unwrap();
    assert!(d
        .view()
        .unwrap()
        .vjp_map_values(&exp, None, DynVec::F64(vec![1.0; 12]).as_slices())
        .is_err());
    let e = x.vjp_map_values(&exp, None, DynVec::F64(vec![1.0; 2]).as_slices());
    assert!(matches!(e, Err(MaskedError::ValueCount { .. })), "{e:?}");
    let three = DynVec::F64(vec![1.0; 3]);
    let e = x.vjp_map_values(
        &OpRequest::new("softmax").unwrap().dims(1),
        Some(three.as_slices()),
        DynVec::F64(vec![1.0; 4]).as_slices(),
    );
    assert!(matches!(e, Err(MaskedError::ValueCount { .. })), "{e:?}");
}
