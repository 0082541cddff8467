//! Sparse attention against a dense reference written here with plain loops in f64: the
//! softmax of the masked scores, its product with V, and the gradients by finite
//! differences, on every pattern kind (causal, band, lengths with empty rows, random,
//! full), broadcast batch and head dims, per-batch patterns, a bias, f16 storage.

mod common;

use common::close;
use masked_attention::erased::{self, FloatArray};
use masked_attention::segment::{segment, segment_vjp, Segment};
use masked_attention::{
    attention, attention_vjp, sddmm, sddmm_vjp, spmm, spmm_vjp, AttentionPlan, Options, Pattern,
    Traversal,
};
use masked_core::{DynVec, MaskedError};
use ndarray::{ArrayD, IxDyn};

/// A small deterministic generator (xorshift), values in [-1, 1).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
    fn array(&mut self, shape: &[usize]) -> ArrayD<f64> {
        let n = shape.iter().product();
        ArrayD::from_shape_vec(IxDyn(shape), (0..n).map(|_| self.next()).collect()).unwrap()
    }
    fn pattern(&mut self, n: usize, m: usize, p: f64) -> Pattern {
        let bools: Vec<bool> = (0..n * m).map(|_| (self.next() + 1.0) / 2.0 < p).collect();
        Pattern::from_bools([n, m], bools).unwrap()
    }
}

/// The patterns every test walks: causal, a band, padding lengths with an empty row, a
/// random one (rows left empty), full, rectangular random.
fn patterns(rng: &mut Rng) -> Vec<Pattern> {
    vec![
        Pattern::causal(7).unwrap(),
        Pattern::banded([7, 7], 2, 0).unwrap(),
        Pattern::from_lengths([7, 7], &[3, 0, 7, 1, 5, 2, 0]).unwrap(),
        rng.pattern(7, 7, 0.3),
        Pattern::full([7, 7]).unwrap(),
        rng.pattern(5, 9, 0.5),
        // keys seen by more queries than the gradient's column pass takes at a time
        // (8): column 0 of a causal 19 has 19, a dense 20 x 6 about 16 a column
        Pattern::causal(19).unwrap(),
        rng.pattern(20, 6, 0.8),
    ]
}

/// Broadcast index of batch element `b` (of `lead`) into an operand with leading dims
/// `olead`.
fn bidx(b: usize, lead: &[usize], olead: &[usize]) -> usize {
    let (mut rem, mut idx, mut stride) = (b, 0, 1);
    let skip = lead.len() - olead.len();
    for i in (0..lead.len()).rev() {
        let c = rem % lead[i];
        rem /= lead[i];
        if i >= skip {
            let s = olead[i - skip];
            if s != 1 {
                idx += c * stride;
            }
            stride *= s;
        }
    }
    idx
}

fn lead_of(shape: &[usize]) -> &[usize] {
    &shape[..shape.len() - 2]
}

fn broadcast(shapes: &[&[usize]]) -> Vec<usize> {
    let r = shapes.iter().map(|s| s.len()).max().unwrap();
    let mut out = vec![1; r];
    for s in shapes {
        for (i, &d) in s.iter().rev().enumerate() {
            if d != 1 {
                out[r - 1 - i] = d;
            }
        }
    }
    out
}

/// Dense reference attention, f64: per batch element, scores on the pattern, softmax
/// (zero row when none valid), times V.
fn reference(
    q: &ArrayD<f64>, k: &ArrayD<f64>, v: &ArrayD<f64>, pats: &[Pattern], scale: f64,
    bias: Option<&[f64]>,
) -> ArrayD<f64> {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let lead = broadcast(&[lead_of(qs), lead_of(ks), lead_of(vs)]);
    let count: usize = lead.iter().product();
    let (nq, d, nk, dv) = (
        qs[qs.len() - 2],
        qs[qs.len() - 1],
        ks[ks.len() - 2],
        vs[vs.len() - 1],
    );
    let (qf, kf, vf) = (
        q.as_slice().unwrap(),
        k.as_slice().unwrap(),
        v.as_slice().unwrap(),
    );
    let mut out = vec![0.0; count * nq * dv];
    let inner = if pats.len() > 1 {
        count / lead[0]
    } else {
        count
    };
    let mut starts = vec![0];
    for p in pats {
        starts.push(starts.last().unwrap() + p.nnz());
    }
    for b in 0..count {
        let pi = if pats.len() > 1 { b / inner } else { 0 };
        let p = &pats[pi];
        let (qb, kb, vb) = (
            bidx(b, &lead, lead_of(qs)) * nq * d,
            bidx(b, &lead, lead_of(ks)) * nk * d,
            bidx(b, &lead, lead_of(vs)) * nk * dv,
        );
        for i in 0..nq {
            let keys = p.row(i);
            let lo = p.indptr()[i];
            let s: Vec<f64> = keys
                .iter()
                .enumerate()
                .map(|(t, &j)| {
                    let dot: f64 = (0..d)
                        .map(|c| qf[qb + i * d + c] * kf[kb + j * d + c])
                        .sum();
                    dot * scale + bias.map_or(0.0, |bb| bb[starts[pi] + lo + t])
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            if keys.is_empty() || m == f64::NEG_INFINITY {
                continue;
            }
            let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for (t, &j) in keys.iter().enumerate() {
                for c in 0..dv {
                    out[b * nq * dv + i * dv + c] += e[t] / z * vf[vb + j * dv + c];
                }
            }
        }
    }
    let mut shape = lead.clone();
    shape.extend([nq, dv]);
    ArrayD::from_shape_vec(IxDyn(&shape), out).unwrap()
}

/// Every way to walk a pattern: a row at a time; key slices of one key (every slice a
/// new largest score for the online softmax to rescale by), of three, of the width
/// chosen from the head dims (one slice at these sizes) and of the widest width asked.
const TRAVERSALS: [Traversal; 5] = [
    Traversal::Rows,
    Traversal::KeySlices(1),
    Traversal::KeySlices(3),
    Traversal::KeySlices(0),
    Traversal::KeySlices(usize::MAX),
];

fn plan_of(pats: &[Pattern]) -> AttentionPlan {
    if pats.len() == 1 {
        AttentionPlan::new(pats[0].clone())
    } else {
        AttentionPlan::per_batch(pats.to_vec()).unwrap()
    }
}

#[test]
fn forward_equals_the_dense_reference_on_every_pattern() {
    let mut rng = Rng(7);
    for p in patterns(&mut rng) {
        let (n, m) = p.shape();
        for ((d, dv), t) in [(3, 2), (16, 16), (21, 35), (64, 64)]
            .into_iter()
            .flat_map(|dd| TRAVERSALS.map(|t| (dd, t)))
        {
            let (q, k, v) = (rng.array(&[n, d]), rng.array(&[m, d]), rng.array(&[m, dv]));
            let plan = AttentionPlan::new(p.clone()).with_traversal(t);
            let o = attention(q.view(), k.view(), v.view(), &plan, &Options::default()).unwrap();
            let r = reference(
                &q,
                &k,
                &v,
                std::slice::from_ref(&p),
                1.0 / (d as f64).sqrt(),
                None,
            );
            close(o.as_slice().unwrap(), r.as_slice().unwrap(), 1e-12, "out");
            // f32 storage
            let o32 = attention(
                q.mapv(|x| x as f32).view(),
                k.mapv(|x| x as f32).view(),
                v.mapv(|x| x as f32).view(),
                &plan,
                &Options::default(),
            )
            .unwrap();
            let o32: Vec<f64> = o32.iter().map(|&x| x as f64).collect();
            close(&o32, r.as_slice().unwrap(), 1e-5, "out f32");
        }
    }
}

#[test]
fn empty_rows_are_zero_never_nan_and_a_bias_of_minus_infinity_empties_a_row() {
    for t in TRAVERSALS {
        empty_rows_under(t);
    }
}

fn empty_rows_under(t: Traversal) {
    let p = Pattern::from_lengths([3, 4], &[2, 0, 4]).unwrap();
    let plan = AttentionPlan::new(p).with_traversal(t);
    let mut rng = Rng(3);
    let (q, k, v) = (rng.array(&[3, 5]), rng.array(&[4, 5]), rng.array(&[4, 2]));
    let mut bias = vec![0.0; 6];
    bias[0] = f64::NEG_INFINITY;
    bias[1] = f64::NEG_INFINITY;
    let opts = Options {
        scale: Some(0.5),
        bias: Some(&bias),
    };
    let o = attention(q.view(), k.view(), v.view(), &plan, &opts).unwrap();
    assert_eq!(o.as_slice().unwrap()[0..2].to_vec(), [0.0, 0.0]);
    assert_eq!(o.as_slice().unwrap()[2..4].to_vec(), [0.0, 0.0]);
    assert!(o.iter().all(|x| x.is_finite()));
    let g = attention_vjp(
        q.view(),
        k.view(),
        v.view(),
        &plan,
        &opts,
        rng.array(&[3, 2]).view(),
    )
    .unwrap();
    for x in [&g.dq, &g.dk, &g.dv] {
        assert!(x.iter().all(|x| x.is_finite()));
    }
    assert!(g.dbias.unwrap().iter().all(|x| x.is_finite()));
    // the empty rows' queries get no gradient
    assert_eq!(g.dq.as_slice().unwrap()[0..5].to_vec(), [0.0; 5]);
    assert_eq!(g.dq.as_slice().unwrap()[5..10].to_vec(), [0.0; 5]);
}

#[test]
fn broadcast_batch_and_heads_and_per_batch_patterns_equal_the_reference() {
    let mut rng = Rng(11);
    let (n, d, dv) = (6, 4, 3);
    let shapes: [(&[usize], &[usize], &[usize]); 4] = [
        (&[2, 3, n, d], &[2, 3, n, d], &[2, 3, n, dv]),
        (&[2, 3, n, d], &[1, 3, n, d], &[3, n, dv]),
        (&[3, n, d], &[2, 1, n, d], &[n, dv]),
        (&[1, n, d], &[2, 3, n, d], &[2, 1, n, dv]),
    ];
    for (qs, ks, vs) in shapes {
        let (q, k, v) = (rng.array(qs), rng.array(ks), rng.array(vs));
        let lead = broadcast(&[lead_of(qs), lead_of(ks), lead_of(vs)]);
        let shared = vec![rng.pattern(n, n, 0.5)];
        let each: Vec<Pattern> = (0..lead[0]).map(|_| rng.pattern(n, n, 0.5)).collect();
        for (pats, t) in [shared, each]
            .into_iter()
            .flat_map(|p| TRAVERSALS.map(|t| (p.clone(), t)))
        {
            let plan = plan_of(&pats).with_traversal(t);
            let bias: Vec<f64> = (0..plan.nnz()).map(|_| rng.next()).collect();
            let opts = Options {
                scale: Some(0.7),
                bias: Some(&bias),
            };
            let o = attention(q.view(), k.view(), v.view(), &plan, &opts).unwrap();
            let r = reference(&q, &k, &v, &pats, 0.7, Some(&bias));
            assert_eq!(o.shape(), r.shape());
            close(
                o.as_slice().unwrap(),
                r.as_slice().unwrap(),
                1e-12,
                "batched out",
            );
        }
    }
}

/// `sum(O ⊙ G)` by the reference.
fn loss(
    q: &ArrayD<f64>, k: &ArrayD<f64>, v: &ArrayD<f64>, pats: &[Pattern], bias: &[f64],
    g: &ArrayD<f64>,
) -> f64 {
    let o = reference(q, k, v, pats, 0.6, Some(bias));
    o.iter().zip(g.iter()).map(|(a, b)| a * b).sum()
}

/// Central differences of `f` at every element of `x`.
fn numeric(x: &mut [f64], f: &mut dyn FnMut(&[f64]) -> f64) -> Vec<f64> {
    let h = 1e-6;
    (0..x.len())
        .map(|i| {
            let x0 = x[i];
            x[i] = x0 + h;
            let up = f(x);
            x[i] = x0 - h;
            let down = f(x);
            x[i] = x0;
            (up - down) / (2.0 * h)
        })
        .collect()
}

/// A scalar function of `(q, k, v)`.
type OfQkv<'a> = dyn Fn(&ArrayD<f64>, &ArrayD<f64>, &ArrayD<f64>) -> f64 + 'a;

/// Finite differences of `f(q, k, v)` with respect to each of `q`, `k` and `v`.
fn numeric_qkv(qkv: [&ArrayD<f64>; 3], f: &OfQkv<'_>) -> [Vec<f64>; 3] {
    std::array::from_fn(|which| {
        let mut x = qkv[which].as_standard_layout().into_owned();
        let shape = x.raw_dim();
        numeric(x.as_slice_mut().unwrap(), &mut |v| {
            let moved = ArrayD::from_shape_vec(shape.clone(), v.to_vec()).unwrap();
            let mut args = qkv;
            args[which] = &moved;
            f(args[0], args[1], args[2])
        })
    })
}

#[test]
fn attention_vjp_equals_finite_differences_with_broadcasting_and_bias() {
    let mut rng = Rng(5);
    let (n, m, d, dv) = (5, 6, 3, 2);
    type Case<'a> = (&'a [usize], &'a [usize], &'a [usize], bool);
    let cases: [Case; 3] = [
        (&[n, d], &[m, d], &[m, dv], false),
        (&[2, 2, n, d], &[1, 2, m, d], &[2, 1, m, dv], false),
        (&[2, 1, n, d], &[2, 2, m, d], &[m, dv], true),
    ];
    for (qs, ks, vs, per_batch) in cases {
        let pats: Vec<Pattern> = if per_batch {
            (0..2).map(|_| rng.pattern(n, m, 0.5)).collect()
        } else {
            vec![rng.pattern(n, m, 0.5)]
        };
        let plan = plan_of(&pats);
        let (q, k, v) = (rng.array(qs), rng.array(ks), rng.array(vs));
        let mut bias: Vec<f64> = (0..plan.nnz()).map(|_| rng.next()).collect();
        let lead = broadcast(&[lead_of(qs), lead_of(ks), lead_of(vs)]);
        let mut gshape = lead.clone();
        gshape.extend([n, dv]);
        let g = rng.array(&gshape);
        let b0 = bias.clone();
        let [nq, nk, nv] = numeric_qkv([&q, &k, &v], &|q, k, v| loss(q, k, v, &pats, &b0, &g));
        let nb = numeric(&mut bias, &mut |x| loss(&q, &k, &v, &pats, x, &g));
        let opts = Options {
            scale: Some(0.6),
            bias: Some(&bias),
        };
        for t in TRAVERSALS {
            let plan = plan_of(&pats).with_traversal(t);
            let ours = attention_vjp(q.view(), k.view(), v.view(), &plan, &opts, g.view()).unwrap();
            close(ours.dq.as_slice().unwrap(), &nq, 1e-7, "dq");
            close(ours.dk.as_slice().unwrap(), &nk, 1e-7, "dk");
            close(ours.dv.as_slice().unwrap(), &nv, 1e-7, "dv");
            close(ours.dbias.as_ref().unwrap(), &nb, 1e-7, "dbias");
        }
    }
}

#[test]
fn vjp_on_every_pattern_kind_and_wide_heads_equals_finite_differences() {
    let mut rng = Rng(9);
    for p in patterns(&mut rng) {
        let (n, m) = p.shape();
        let plan = AttentionPlan::new(p.clone());
        assert_eq!(plan.traversal(), Traversal::Auto);
        // d = 20 and dv = 17 cover the 16-lane blocks and their tails; 70 and 67 the
        // 64 columns combined at once, then a block and a tail
        let (d, dv) = if n * m > 100 { (70, 67) } else { (20, 17) };
        let (q, k, v) = (rng.array(&[n, d]), rng.array(&[m, d]), rng.array(&[m, dv]));
        let g = rng.array(&[n, dv]);
        let bias = vec![0.0; plan.nnz()];
        let opts = Options {
            scale: Some(0.6),
            bias: None,
        };
        let pats = [p.clone()];
        let [nq, nk, nv] = numeric_qkv([&q, &k, &v], &|q, k, v| loss(q, k, v, &pats, &bias, &g));
        for t in TRAVERSALS {
            let plan = AttentionPlan::new(p.clone()).with_traversal(t);
            let ours = attention_vjp(q.view(), k.view(), v.view(), &plan, &opts, g.view()).unwrap();
            assert!(ours.dbias.is_none());
            close(ours.dq.as_slice().unwrap(), &nq, 1e-7, "dq");
            close(ours.dk.as_slice().unwrap(), &nk, 1e-7, "dk");
            close(ours.dv.as_slice().unwrap(), &nv, 1e-7, "dv");
        }
    }
}

#[test]
fn sddmm_and_spmm_equal_dense_products_and_their_vjps_finite_differences() {
    for t in TRAVERSALS {
        sddmm_and_spmm_under(t);
    }
}

fn sddmm_and_spmm_under(t: Traversal) {
    let mut rng = Rng(21);
    let p = rng.pattern(6, 8, 0.4);
    let plan = AttentionPlan::new(p.clone()).with_traversal(t);
    let (mut a, mut b) = (rng.array(&[2, 6, 5]), rng.array(&[2, 8, 5]));
    let s = sddmm(a.view(), b.view(), &plan, 0.5).unwrap();
    assert_eq!(s.shape(), &[2, p.nnz()]);
    let dense_s = |a: &ArrayD<f64>, b: &ArrayD<f64>| -> Vec<f64> {
        let mut out = vec![];
        for e in 0..2 {
            for i in 0..6 {
                for &j in p.row(i) {
                    out.push(0.5 * (0..5).map(|c| a[[e, i, c]] * b[[e, j, c]]).sum::<f64>());
                }
            }
        }
        out
    };
    close(s.as_slice().unwrap(), &dense_s(&a, &b), 1e-13, "sddmm");
    let g = rng.array(&[2, p.nnz()]);
    let (da, db) = sddmm_vjp(a.view(), b.view(), &plan, 0.5, g.view()).unwrap();
    let gl = g.as_slice().unwrap().to_vec();
    let dot = |x: &[f64]| x.iter().zip(&gl).map(|(x, y)| x * y).sum::<f64>();
    let (a0, b0) = (a.clone(), b.clone());
    let na = numeric(a.as_slice_mut().unwrap(), &mut |x| {
        dot(&dense_s(
            &ArrayD::from_shape_vec(IxDyn(&[2, 6, 5]), x.to_vec()).unwrap(),
            &b0,
        ))
    });
    let nb = numeric(b.as_slice_mut().unwrap(), &mut |x| {
        dot(&dense_s(
            &a0,
            &ArrayD::from_shape_vec(IxDyn(&[2, 8, 5]), x.to_vec()).unwrap(),
        ))
    });
    close(da.as_slice().unwrap(), &na, 1e-7, "sddmm da");
    close(db.as_slice().unwrap(), &nb, 1e-7, "sddmm db");

    // spmm with values shared by the batch ([nnz]) and x [2, 8, 3]
    let mut vals = rng.array(&[p.nnz()]);
    let mut x = rng.array(&[2, 8, 3]);
    let o = spmm(vals.view(), &plan, x.view()).unwrap();
    let dense_o = |vals: &[f64], x: &ArrayD<f64>| -> Vec<f64> {
        let mut out = vec![0.0; 2 * 6 * 3];
        for e in 0..2 {
            for i in 0..6 {
                for (t, &j) in p.row(i).iter().enumerate() {
                    for c in 0..3 {
                        out[e * 18 + i * 3 + c] += vals[p.indptr()[i] + t] * x[[e, j, c]];
                    }
                }
            }
        }
        out
    };
    close(
        o.as_slice().unwrap(),
        &dense_o(vals.as_slice().unwrap(), &x),
        1e-13,
        "spmm",
    );
    let g = rng.array(&[2, 6, 3]);
    let (dvals, dx) = spmm_vjp(vals.view(), &plan, x.view(), g.view()).unwrap();
    assert_eq!(dvals.shape(), &[p.nnz()]);
    let gl = g.as_slice().unwrap().to_vec();
    let dot = |x: &[f64]| x.iter().zip(&gl).map(|(x, y)| x * y).sum::<f64>();
    let (v0, x0) = (vals.clone(), x.clone());
    let nvals = numeric(vals.as_slice_mut().unwrap(), &mut |v| dot(&dense_o(v, &x0)));
    let nx = numeric(x.as_slice_mut().unwrap(), &mut |xx| {
        dot(&dense_o(
            v0.as_slice().unwrap(),
            &ArrayD::from_shape_vec(IxDyn(&[2, 8, 3]), xx.to_vec()).unwrap(),
        ))
    });
    close(dvals.as_slice().unwrap(), &nvals, 1e-7, "spmm dvalues");
    close(dx.as_slice().unwrap(), &nx, 1e-7, "spmm dx");
}

#[test]
fn sddmm_then_softmax_then_spmm_is_attention() {
    // the unfused path through the three pieces gives the fused result
    let mut rng = Rng(4);
    let p = rng.pattern(9, 9, 0.4);
    let plan = AttentionPlan::new(p.clone());
    let (q, k, v) = (rng.array(&[9, 6]), rng.array(&[9, 6]), rng.array(&[9, 4]));
    let s = sddmm(q.view(), k.view(), &plan, 0.3).unwrap();
    let mut probs = s.as_slice().unwrap().to_vec();
    for i in 0..9 {
        let r = &mut probs[p.indptr()[i]..p.indptr()[i + 1]];
        let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = r.iter().map(|x| (x - m).exp()).sum();
        r.iter_mut().for_each(|x| *x = (*x - m).exp() / z);
    }
    let probs = ArrayD::from_shape_vec(IxDyn(&[p.nnz()]), probs).unwrap();
    let unfused = spmm(probs.view(), &plan, v.view()).unwrap();
    let fused = attention(
        q.view(),
        k.view(),
        v.view(),
        &plan,
        &Options {
            scale: Some(0.3),
            bias: None,
        },
    )
    .unwrap();
    close(
        fused.as_slice().unwrap(),
        unfused.as_slice().unwrap(),
        1e-12,
        "fused",
    );
}

#[test]
fn half_storage_computes_in_f32_and_rounds_once() {
    let mut rng = Rng(13);
    let p = Pattern::causal(33).unwrap();
    let plan = AttentionPlan::new(p.clone());
    let (q, k, v) = (
        rng.array(&[33, 24]),
        rng.array(&[33, 24]),
        rng.array(&[33, 8]),
    );
    let h = |x: &ArrayD<f64>| x.mapv(half::f16::from_f64);
    let (qh, kh, vh) = (h(&q), h(&k), h(&v));
    let o = attention(qh.view(), kh.view(), vh.view(), &plan, &Options::default()).unwrap();
    // the reference on the rounded inputs, in f64, then rounded once to f16
    let back = |x: &ArrayD<half::f16>| x.mapv(|e| e.to_f64());
    let r = reference(
        &back(&qh),
        &back(&kh),
        &back(&vh),
        &[p],
        1.0 / 24f64.sqrt(),
        None,
    );
    for (x, y) in o.iter().zip(r.iter()) {
        let (x, y) = (x.to_f64(), half::f16::from_f64(*y).to_f64());
        assert!((x - y).abs() <= 1e-3 * (1.0 + y.abs()), "{x} vs {y}");
    }
    let bf = |x: &ArrayD<f64>| x.mapv(half::bf16::from_f64);
    let ob = attention(
        bf(&q).view(),
        bf(&k).view(),
        bf(&v).view(),
        &plan,
        &Options::default(),
    );
    assert!(ob.unwrap().iter().all(|x| x.is_finite()));
}

#[test]
fn bad_inputs_are_typed_errors() {
    let plan = AttentionPlan::new(Pattern::causal(4).unwrap());
    let z = |s: &[usize]| ArrayD::<f32>::zeros(IxDyn(s));
    let o = Options::default();
    let run = |q: &[usize], k: &[usize], v: &[usize], plan: &AttentionPlan, o: &Options<f32>| {
        attention(z(q).view(), z(k).view(), z(v).view(), plan, o)
    };
    // (q, k, v) shapes that do not fit: q's rows against the pattern, k's width against
    // q's, batch dims that differ
    for (q, k, v) in [
        (&[5, 3][..], &[4, 3][..], &[4, 2][..]),
        (&[4, 3], &[4, 2], &[4, 2]),
        (&[2, 4, 3], &[3, 4, 3], &[4, 2]),
    ] {
        let e = run(q, k, v, &plan, &o);
        assert!(
            matches!(e, Err(MaskedError::ShapeMismatch { .. })),
            "{q:?} {k:?}: {e:?}"
        );
    }
    let e = run(&[3], &[4, 3], &[4, 2], &plan, &o);
    assert!(
        matches!(e, Err(MaskedError::InvalidArgument { .. })),
        "{e:?}"
    );
    let bias = [0.0f32; 3];
    let ob = Options {
        scale: None,
        bias: Some(&bias),
    };
    let e = run(&[4, 3], &[4, 3], &[4, 2], &plan, &ob);
    assert!(
        matches!(
            e,
            Err(MaskedError::ValueCount {
                expected: 10,
                got: 3
            })
        ),
        "{e:?}"
    );
    let on = Options {
        scale: Some(f64::NAN),
        bias: None,
    };
    let e = run(&[4, 3], &[4, 3], &[4, 2], &plan, &on);
    assert!(
        matches!(e, Err(MaskedError::InvalidArgument { name: "scale", .. })),
        "{e:?}"
    );
    let e = attention_vjp(
        z(&[4, 3]).view(),
        z(&[4, 3]).view(),
        z(&[4, 2]).view(),
        &plan,
        &o,
        z(&[4, 3]).view(),
    );
    assert!(matches!(e, Err(MaskedError::ShapeMismatch { .. })), "{e:?}");
    // per-batch plans need the first leading dim to count the patterns
    let pb = AttentionPlan::per_batch(vec![Pattern::causal(4).unwrap(); 2]).unwrap();
    let e = run(&[3, 4, 3], &[4, 3], &[4, 2], &pb, &o);
    assert!(matches!(e, Err(MaskedError::ShapeMismatch { .. })), "{e:?}");
    assert!(AttentionPlan::per_batch(vec![]).is_err());
    assert!(AttentionPlan::per_batch(vec![
        Pattern::causal(4).unwrap(),
        Pattern::causal(3).unwrap()
    ])
    .is_err());
    // the erased boundary: integers and mixed dtypes
    let f = FloatArray::from_dyn(vec![4, 3], DynVec::F32(vec![0.0; 12])).unwrap();
    let g = FloatArray::from_dyn(vec![4, 3], DynVec::F64(vec![0.0; 12])).unwrap();
    let e = erased::attention(&f.view(), &g.view(), &f.view(), &plan, None, None);
    assert!(
        matches!(e, Err(MaskedError::InvalidArgument { name: "dtype", .. })),
        "{e:?}"
    );
    let e = FloatArray::from_dyn(vec![2], DynVec::I32(vec![1, 2]));
    assert!(matches!(e, Err(MaskedError::Unsupported { .. })), "{e:?}");
    let e = FloatArray::from_dyn(vec![3], DynVec::F32(vec![1.0, 2.0]));
    assert!(matches!(e, Err(MaskedError::ValueCount { .. })), "{e:?}");
}

#[test]
fn the_erased_boundary_equals_the_typed_api() {
    let mut rng = Rng(8);
    let plan = AttentionPlan::new(Pattern::banded([10, 10], 3, 0).unwrap());
    let (q, k, v) = (
        rng.array(&[2, 10, 4]),
        rng.array(&[2, 10, 4]),
        rng.array(&[2, 10, 3]),
    );
    let f = |x: &ArrayD<f64>| FloatArray::F32(x.mapv(|e| e as f32));
    let (fq, fk, fv) = (f(&q), f(&k), f(&v));
    let (fq, fk, fv) = (fq.view(), fk.view(), fv.view());
    let o = erased::attention(&fq, &fk, &fv, &plan, Some(0.5), None).unwrap();
    let opts = Options {
        scale: Some(0.5),
        bias: None,
    };
    let t = attention(
        q.mapv(|e| e as f32).view(),
        k.mapv(|e| e as f32).view(),
        v.mapv(|e| e as f32).view(),
        &plan,
        &opts,
    )
    .unwrap();
    assert_eq!(o, FloatArray::F32(t));
    let g = f(&rng.array(&[2, 10, 3]));
    let eg = erased::attention_vjp(&fq, &fk, &fv, &plan, Some(0.5), None, &g.view()).unwrap();
    assert_eq!(eg.dq.shape(), &[2, 10, 4]);
    assert_eq!(eg.dv.dtype(), masked_core::DType::F32);
    assert!(eg.dbias.is_none());
}

#[test]
fn per_batch_patterns_through_sddmm_softmax_spmm_equal_fused_attention() {
    // [2 batch, 3 heads], one pattern per batch element: the values are flat, element
    // after element (batch 0's three heads on pattern 0, then batch 1's on pattern 1)
    let mut rng = Rng(31);
    let pats = vec![rng.pattern(6, 6, 0.5), rng.pattern(6, 6, 0.3)];
    let plan = AttentionPlan::per_batch(pats.clone()).unwrap();
    let (q, k, v) = (
        rng.array(&[2, 3, 6, 4]),
        rng.array(&[2, 3, 6, 4]),
        rng.array(&[2, 3, 6, 5]),
    );
    let s = sddmm(q.view(), k.view(), &plan, 0.5).unwrap();
    let total = 3 * (pats[0].nnz() + pats[1].nnz());
    assert_eq!(s.shape(), &[total]);
    let mut probs = s.as_slice().unwrap().to_vec();
    let mut at = 0;
    for e in 0..6 {
        let p = &pats[e / 3];
        for i in 0..6 {
            let r = &mut probs[at + p.indptr()[i]..at + p.indptr()[i + 1]];
            let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = r.iter().map(|x| (x - m).exp()).sum();
            r.iter_mut().for_each(|x| *x = (*x - m).exp() / z);
        }
        at += p.nnz();
    }
    let probs = ArrayD::from_shape_vec(IxDyn(&[total]), probs).unwrap();
    let unfused = spmm(probs.view(), &plan, v.view()).unwrap();
    let opts = Options {
        scale: Some(0.5),
        bias: None,
    };
    let fused = attention(q.view(), k.view(), v.view(), &plan, &opts).unwrap();
    close(
        fused.as_slice().unwrap(),
        unfused.as_slice().unwrap(),
        1e-12,
        "per-batch",
    );
    let r = reference(&q, &k, &v, &pats, 0.5, None);
    close(
        fused.as_slice().unwrap(),
        r.as_slice().unwrap(),
        1e-12,
        "per-batch reference",
    );
    // values shared per pattern (one per stored position of the plan) are accepted too
    let shared = ArrayD::from_shape_vec(IxDyn(&[plan.nnz()]), vec![1.0; plan.nnz()]).unwrap();
    let o = spmm(shared.view(), &plan, v.view()).unwrap();
    assert_eq!(o.shape(), &[2, 3, 6, 5]);
    let (dvals, _) = spmm_vjp(shared.view(), &plan, v.view(), o.view()).unwrap();
    assert_eq!(dvals.shape(), &[plan.nnz()]);
    let bad = ArrayD::from_shape_vec(IxDyn(&[5]), vec![1.0; 5]).unwrap();
    assert!(matches!(
        spmm(bad.view(), &plan, v.view()),
        Err(MaskedError::ValueCount { .. })
    ));
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// `x` of leading dims `lead` (rank-aligned right) expanded to `full` leading dims.
    fn expand(x: &ArrayD<f64>, full: &[usize]) -> ArrayD<f64> {
        let s = x.shape();
        let mut shape = full.to_vec();
        shape.extend(&s[s.len() - 2..]);
        x.broadcast(IxDyn(&shape)).unwrap().to_owned()
    }

    /// Sums an expanded gradient back over the dims `x` was broadcast along.
    fn reduce_to(g: &ArrayD<f64>, shape: &[usize]) -> ArrayD<f64> {
        let mut g = g.clone();
        while g.ndim() > shape.len() {
            g = g.sum_axis(ndarray::Axis(0));
        }
        for (ax, &s) in shape.iter().enumerate() {
            if s == 1 && g.shape()[ax] != 1 {
                g = g.sum_axis(ndarray::Axis(ax)).insert_axis(ndarray::Axis(ax));
            }
        }
        g
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]
        #[test]
        fn any_batch_and_head_shapes_equal_the_reference_and_sum_broadcast_gradients(
            lead in proptest::collection::vec(1usize..4, 0..3),
            keep in proptest::collection::vec(proptest::bool::ANY, 9),
            n in 1usize..7, m in 1usize..7, d in 1usize..20, dv in 1usize..20,
            density in 0.0f64..1.0, seed in 1u64..1000,
        ) {
            let mut rng = Rng(seed);
            // each operand keeps a suffix of the leading dims, some of them as 1
            let own = |o: usize| -> Vec<usize> {
                let r = if keep[3 * o] { lead.len() } else { lead.len().saturating_sub(1) };
                lead[lead.len() - r..]
                    .iter()
                    .enumerate()
                    .map(|(i, &s)| if keep[3 * o + 1 + i % 2] { s } else { 1 })
                    .collect()
            };
            let shape = |o: usize, rows: usize, cols: usize| {
                let mut s = own(o);
                s.extend([rows, cols]);
                s
            };
            let (qs, ks, vs) = (shape(0, n, d), shape(1, m, d), shape(2, m, dv));
            let (q, k, v) = (rng.array(&qs), rng.array(&ks), rng.array(&vs));
            let pats = vec![rng.pattern(n, m, density)];
            let plan = AttentionPlan::new(pats[0].clone());
            let opts = Options { scale: Some(0.8), bias: None };
            let o = attention(q.view(), k.view(), v.view(), &plan, &opts).unwrap();
            let r = reference(&q, &k, &v, &pats, 0.8, None);
            prop_assert_eq!(o.shape(), r.shape());
            close(o.as_slice().unwrap(), r.as_slice().unwrap(), 1e-12, "out");
            // the gradients of broadcast operands are the expanded ones summed back
            let full = broadcast(&[lead_of(&qs), lead_of(&ks), lead_of(&vs)]);
            let g = rng.array(o.shape());
            let ours = attention_vjp(q.view(), k.view(), v.view(), &plan, &opts, g.view()).unwrap();
            let (qe, ke, ve) = (expand(&q, &full), expand(&k, &full), expand(&v, &full));
            let exp = attention_vjp(qe.view(), ke.view(), ve.view(), &plan, &opts, g.view()).unwrap();
            for (got, want, s) in [(&ours.dq, &exp.dq, &qs), (&ours.dk, &exp.dk, &ks), (&ours.dv, &exp.dv, &vs)] {
                let want = reduce_to(want, s);
                prop_assert_eq!(got.shape(), want.shape());
                close(got.as_slice().unwrap(), want.as_standard_layout().as_slice().unwrap(), 1e-12, "broadcast grad");
            }
        }
    }
}

#[test]
fn every_cpu_path_gives_the_reference() {
    // the kernels' lower paths (no FMA; FMA without AVX; AVX2), which this CPU would not
    // take by itself, against the same reference; f32 and f64 (each has its own sums)
    let mut rng = Rng(17);
    let p = rng.pattern(9, 40, 0.6);
    for t in [Traversal::Rows, Traversal::KeySlices(7)] {
        every_cpu_path_under(&mut rng, &p, t);
    }
}

fn every_cpu_path_under(rng: &mut Rng, p: &Pattern, t: Traversal) {
    let plan = AttentionPlan::new(p.clone()).with_traversal(t);
    let (q, k, v) = (
        rng.array(&[2, 9, 37]),
        rng.array(&[2, 40, 37]),
        rng.array(&[2, 40, 19]),
    );
    let r = reference(&q, &k, &v, std::slice::from_ref(p), 0.3, None);
    let opts = Options {
        scale: Some(0.3),
        bias: None,
    };
    let g = rng.array(&[2, 9, 19]);
    let base = attention_vjp(q.view(), k.view(), v.view(), &plan, &opts, g.view()).unwrap();
    for cap in [1u8, 2, 3, 0] {
        masked_attention::cap_madd(cap);
        let o = attention(q.view(), k.view(), v.view(), &plan, &opts).unwrap();
        close(
            o.as_slice().unwrap(),
            r.as_slice().unwrap(),
            1e-12,
            &format!("cap {cap}"),
        );
        let f = |x: &ArrayD<f64>| x.mapv(|e| e as f32);
        let o32 = attention(
            f(&q).view(),
            f(&k).view(),
            f(&v).view(),
            &plan,
            &Options {
                scale: Some(0.3),
                bias: None,
            },
        )
        .unwrap();
        let o32: Vec<f64> = o32.iter().map(|&x| x as f64).collect();
        close(&o32, r.as_slice().unwrap(), 1e-5, &format!("cap {cap} f32"));
        let gr = attention_vjp(q.view(), k.view(), v.view(), &plan, &opts, g.view()).unwrap();
        for (a, b) in [(&gr.dq, &base.dq), (&gr.dk, &base.dk), (&gr.dv, &base.dv)] {
            close(
                a.as_slice().unwrap(),
                b.as_slice().unwrap(),
                1e-12,
                &format!("cap {cap} grad"),
            );
        }
    }
}

#[test]
fn the_erased_output_hands_over_its_buffer() {
    // an owned row-major result leaves the boundary without a copy (the CLI and Python
    // write or wrap this very buffer)
    let x = ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let ptr = x.as_ptr();
    let (shape, values) = FloatArray::F32(x).into_dyn();
    let DynVec::F32(v) = values else {
        panic!("f32 in, f32 out")
    };
    assert_eq!((shape, v.as_ptr()), (vec![2, 3], ptr));
    // a transposed one comes out in row-major order
    let t = ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0])
        .unwrap()
        .reversed_axes();
    let (shape, values) = FloatArray::F64(t).into_dyn();
    assert_eq!(shape, vec![3, 2]);
    assert_eq!(values, DynVec::F64(vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]));
}

/// Segment ops by plain loops over each row's pairs, in f64: per node (sum, mean, amax;
/// 0 for a node with no edge) or per edge (softmax).
fn segment_reference(op: Segment, p: &Pattern, w: &[f64]) -> Vec<f64> {
    let mut out = Vec::new();
    for r in 0..p.shape().0 {
        let (lo, hi) = (p.indptr()[r], p.indptr()[r + 1]);
        let xs = &w[lo..hi];
        let n = xs.len() as f64;
        match op {
            Segment::Sum => out.push(xs.iter().sum()),
            Segment::Mean => out.push(if xs.is_empty() {
                0.0
            } else {
                xs.iter().sum::<f64>() / n
            }),
            Segment::AMax => out.push(xs.iter().copied().fold(f64::NEG_INFINITY, f64::max).max(
                if xs.is_empty() {
                    0.0
                } else {
                    f64::NEG_INFINITY
                },
            )),
            Segment::Softmax => {
                let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = xs.iter().map(|x| (x - m).exp()).collect();
                let s: f64 = e.iter().sum();
                out.extend(e.iter().map(|x| x / s));
            }
        }
    }
    out
}

#[test]
fn segment_ops_and_their_vjps_equal_loops_and_finite_differences() {
    let mut rng = Rng(21);
    let ops = [Segment::Sum, Segment::Mean, Segment::AMax, Segment::Softmax];
    for p in patterns(&mut rng) {
        // distinct values: amax has one winner per node, so it is differentiable there
        let w: Vec<f64> = (0..p.nnz()).map(|_| rng.next() * 3.0).collect();
        for op in ops {
            let want = segment_reference(op, &p, &w);
            let got = segment(op, &p, &w).unwrap();
            assert_eq!(got.len(), want.len(), "{op:?}");
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() < 1e-12, "{op:?}: {got:?} vs {want:?}");
            }
            // f32 storage: the same within f32 rounding
            let w32: Vec<f32> = w.iter().map(|&x| x as f32).collect();
            let got32 = segment(op, &p, &w32).unwrap();
            for (a, b) in got32.iter().zip(&want) {
                assert!((f64::from(*a) - b).abs() < 1e-5, "{op:?} f32");
            }
            // the VJP against central differences of sum(segment(op, w) * g)
            let g: Vec<f64> = (0..want.len()).map(|_| rng.next()).collect();
            let ours = segment_vjp(op, &p, &w, &g).unwrap();
            let mut x = w.clone();
            let num = numeric(&mut x, &mut |x| {
                segment_reference(op, &p, x)
                    .iter()
                    .zip(&g)
                    .map(|(a, b)| a * b)
                    .sum()
            });
            for (a, b) in ours.iter().zip(&num) {
                assert!((a - b).abs() < 1e-6, "{op:?} vjp: {ours:?} vs {num:?}");
            }
        }
    }
    // bad lengths are typed errors
    let p = Pattern::causal(3).unwrap();
    assert!(matches!(
        segment(Segment::Sum, &p, &[1.0f64; 5]),
        Err(MaskedError::ValueCount {
            expected: 6,
            got: 5
        })
    ));
    assert!(matches!(
        segment_vjp(Segment::Mean, &p, &[1.0f64; 6], &[1.0; 6]),
        Err(MaskedError::ValueCount {
            expected: 3,
            got: 6
        })
    ));
}

#[test]
fn auto_sweeps_key_slices_only_where_rows_scatter() {
    // a random pattern over 20000 keys (rows spanning ~20000 keys at 0.1%) is swept in
    // key slices, which need no transpose; a band and a causal pattern are walked a row
    // at a time, through the transpose
    let mut rng = Rng(29);
    let (n, m) = (40, 20000);
    let mut coords: [Vec<usize>; 2] = [vec![], vec![]];
    for i in 0..n {
        for j in 0..m {
            if (rng.next() + 1.0) / 2.0 < 1e-3 || j == i || j == m - 1 - i {
                coords[0].push(i);
                coords[1].push(j);
            }
        }
    }
    let scattered = Pattern::from_coords([n, m], &coords).unwrap();
    assert_eq!(
        AttentionPlan::new(scattered.clone())
            .prepare_backward()
            .unwrap(),
        0
    );
    for t in [Traversal::Rows, Traversal::KeySlices(0)] {
        let plan = AttentionPlan::new(scattered.clone()).with_traversal(t);
        assert_eq!(plan.prepare_backward().unwrap() > 0, t == Traversal::Rows);
    }
    for p in [
        Pattern::banded([5000, 5000], 255, 0).unwrap(),
        Pattern::causal(9000).unwrap(),
    ] {
        assert!(AttentionPlan::new(p).prepare_backward().unwrap() > 0);
    }
    // and the slices compute what the rows do
    let (q, k, v) = (rng.array(&[n, 8]), rng.array(&[m, 8]), rng.array(&[m, 5]));
    let g = rng.array(&[n, 5]);
    let opts = Options::default();
    let run = |t: Traversal| {
        let plan = AttentionPlan::new(scattered.clone()).with_traversal(t);
        let o = attention(q.view(), k.view(), v.view(), &plan, &opts).unwrap();
        let gr = attention_vjp(q.view(), k.view(), v.view(), &plan, &opts, g.view()).unwrap();
        let s = sddmm(q.view(), k.view(), &plan, 0.5).unwrap();
        let (da, db) = sddmm_vjp(q.view(), k.view(), &plan, 0.5, s.view()).unwrap();
        let y = spmm(s.view(), &plan, v.view()).unwrap();
        let (dvals, dx) = spmm_vjp(s.view(), &plan, v.view(), g.view()).unwrap();
        [o, gr.dq, gr.dk, gr.dv, s, da, db, y, dvals, dx]
    };
    let (a, b) = (run(Traversal::Rows), run(Traversal::Auto));
    for (x, y) in a.iter().zip(&b) {
        close(
            x.as_slice().unwrap(),
            y.as_slice().unwrap(),
            1e-12,
            "auto vs rows",
        );
    }
}
