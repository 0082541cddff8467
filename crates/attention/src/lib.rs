//! Sparse attention and message passing: `softmax(scale · Q Kᵀ + bias) V` computed at a
//! pattern's (query, key) pairs only, in O(nnz + n·d) memory, with gradients.
//!
//! - [`sddmm`]: `scale · (A Bᵀ)` at the pattern's positions (the scores);
//! - [`spmm`]: `P X` for values `P` on the pattern (message passing: a graph's
//!   adjacency times node features);
//! - [`attention`]: both fused with the masked softmax between them, one query row
//!   at a time (its scores live in a scratch row, never a matrix) or, for a pattern
//!   whose rows scatter over many keys, in key slices with an online softmax per row
//!   ([`Traversal`]); a query with no valid key (or every key biased to `-inf`) gives
//!   a zero row, never NaN;
//! - [`attention_vjp`], [`sddmm_vjp`], [`spmm_vjp`]: the gradients. The attention
//!   gradient recomputes each pair's probability (as flash attention does): a row at a
//!   time from three statistics per query row (nothing per pair beyond the plan's
//!   transpose), or in key slices keeping two values per pair; nothing of size `n²` or
//!   `nnz · d` exists.
//!
//! Operands are dense `[..., n, d]` arrays whose leading (batch, head) dims broadcast as
//! NumPy's do; the pattern is an [`AttentionPlan`] (one pattern, or one per batch
//! element). Storage may be f32, f64, f16 or bf16; halves compute in f32 (widened once
//! at the boundary), f64 in f64, and results come back in the storage type. Each kernel
//! is compiled once per accumulator type (`f32`, `f64`) and CPU tier; the [`erased`]
//! functions take run-time dtypes (what the CLI and the Python extension call).
//!
//! ```
//! use masked::attention::{attention, AttentionPlan, Options, Pattern};
//! use ndarray::ArrayD;
//!
//! // one query row attending to keys 0 and 1 of two, d = 1
//! let plan = AttentionPlan::new(Pattern::full([1, 2])?);
//! let q = ArrayD::from_shape_vec(vec![1, 1], vec![0.0f32])?;
//! let k = ArrayD::from_shape_vec(vec![2, 1], vec![1.0f32, 2.0])?;
//! let v = ArrayD::from_shape_vec(vec![2, 1], vec![10.0f32, 20.0])?;
//! let o = attention(q.view(), k.view(), v.view(), &plan, &Options::default())?;
//! assert_eq!(o.as_slice().unwrap(), &[15.0]); // equal scores: the mean of the values
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod batch;
pub mod erased;
mod kernels;
pub mod patterns;
mod plan;
pub mod segment;

#[doc(hidden)]
pub use kernels::cap_madd;
pub use kernels::Acc;
pub use layout_csr::Pattern;
pub use plan::{AttentionPlan, Traversal};

use batch::{Batch, Operand};
use kernels::sliced::{self, GradKeys, Pairs};
use kernels::{with_madd, Attn, Cols, GradCols, GradOut, Mat, RowStat};
use masked_core::{try_vec, DType, Element, Float, MaskedError, Result};
use masked_kernels::par;
use ndarray::{ArrayD, ArrayViewD, IxDyn};
use std::borrow::Cow;

/// A float storage type of attention operands: `f32`, `f64`, `f16` or `bf16`.
pub trait AttnFloat: Copy + Send + Sync + 'static {
    /// What it computes in: itself for f32 and f64, f32 for the halves.
    type Acc: Acc;
    /// Its dtype tag.
    const DTYPE: DType;
    /// The values in the compute type (borrowed where it is the same).
    fn widen(xs: &[Self]) -> Cow<'_, [Self::Acc]>;
    /// Back to storage, rounding to nearest.
    fn narrow(xs: Vec<Self::Acc>) -> Vec<Self>;
    /// From `f64` (a scale or a constant), rounding to nearest.
    fn acc(v: f64) -> Self::Acc {
        <Self::Acc as masked_core::Float>::from_f64(v)
    }
    /// The array as a run-time-dtype one (no copy).
    fn wrap(x: ArrayD<Self>) -> erased::FloatArray;
    /// The view, where it holds this type.
    fn unwrap<'a>(x: &erased::FloatView<'a>) -> Option<ArrayViewD<'a, Self>>;
}

/// The run-time-dtype conversions of an [`AttnFloat`]: its variant of the erased enums.
macro_rules! attn_float_erased {
    ($var:ident) => {
        fn wrap(x: ArrayD<Self>) -> erased::FloatArray {
            erased::FloatArray::$var(x)
        }
        fn unwrap<'a>(x: &erased::FloatView<'a>) -> Option<ArrayViewD<'a, Self>> {
            match x {
                erased::FloatView::$var(v) => Some(v.clone()),
                _ => None,
            }
        }
    };
}

macro_rules! attn_float_self {
    ($t:ty, $dt:expr, $var:ident) => {
        impl AttnFloat for $t {
            attn_float_erased!($var);
            type Acc = $t;
            const DTYPE: DType = $dt;
            fn widen(xs: &[$t]) -> Cow<'_, [$t]> {
                Cow::Borrowed(xs)
            }
            fn narrow(xs: Vec<$t>) -> Vec<$t> {
                xs
            }
        }
    };
}
attn_float_self!(f32, DType::F32, F32);
attn_float_self!(f64, DType::F64, F64);

macro_rules! attn_float_half {
    ($t:ty, $dt:expr, $var:ident) => {
        impl AttnFloat for $t {
            attn_float_erased!($var);
            type Acc = f32;
            const DTYPE: DType = $dt;
            fn widen(xs: &[$t]) -> Cow<'_, [f32]> {
                use half::slice::HalfFloatSliceExt;
                Cow::Owned(xs.to_f32_vec())
            }
            fn narrow(xs: Vec<f32>) -> Vec<$t> {
                xs.iter().map(|&x| <$t>::from_f32(x)).collect()
            }
        }
    };
}
attn_float_half!(half::f16, DType::F16, F16);
attn_float_half!(half::bf16, DType::BF16, BF16);

/// The options of [`attention`] and [`attention_vjp`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Options<'a, T> {
    /// Factor of `Q Kᵀ`; `None`: `1 / sqrt(d)`.
    pub scale: Option<f64>,
    /// Added to the scaled scores: one value per stored position of the plan (the
    /// patterns' positions in row order, pattern after pattern), shared by every head
    /// (and by every batch element where the pattern is).
    pub bias: Option<&'a [T]>,
}

/// The gradients of `sum(O ⊙ G)` for attention's inputs, each in its input's shape (summed
/// over the dims an input was broadcast along).
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionGrads<T> {
    /// For the queries.
    pub dq: ArrayD<T>,
    /// For the keys.
    pub dk: ArrayD<T>,
    /// For the values.
    pub dv: ArrayD<T>,
    /// For the bias, where one was given.
    pub dbias: Option<Vec<T>>,
}

/// Zeros of the compute type, allocated fallibly.
fn zeros<A: Acc>(n: usize, what: &str) -> Result<Vec<A>> {
    let mut v = try_vec(n, || what.to_string())?;
    v.resize(n, A::ZERO);
    Ok(v)
}

/// `ArrayD` from a shape and values.
fn array<T>(shape: Vec<usize>, values: Vec<T>) -> ArrayD<T> {
    ArrayD::from_shape_vec(IxDyn(&shape), values).expect("the shape's element count")
}

/// The values of a view in row-major order, borrowed when contiguous, in the compute
/// type.
fn acc_values<'a, T: AttnFloat>(x: &'a ArrayViewD<'a, T>) -> Cow<'a, [T::Acc]> {
    match x.as_slice() {
        Some(s) => T::widen(s),
        None => {
            let owned: Vec<T> = x.iter().copied().collect();
            Cow::Owned(T::widen(&owned).into_owned())
        }
    }
}

/// Bytes of one key row and one value row together.
fn row_bytes<A>(d: usize, dv: usize) -> usize {
    (d + dv) * std::mem::size_of::<A>()
}

/// Rows per task: about eight tasks per thread, at most `cap` rows.
fn rows_per_task(n: usize, cap: usize) -> usize {
    n.div_ceil(8 * par::threads()).clamp(1, cap.max(1))
}

/// Rows per task of a traversal (`width`: the key slices', or `None`: a row at a time).
/// A row at a time: about eight tasks a thread, at most 4096 rows. In key slices: one
/// task a thread, as each task loads every key and value row of each slice into its
/// cache once, whatever its rows (more rows a task: more pairs served by each load).
fn task_rows(n: usize, width: Option<usize>) -> usize {
    match width {
        Some(_) => n.div_ceil(par::threads()).max(1),
        None => rows_per_task(n, 4096),
    }
}

/// Keys per key task of the key-sliced traversal: two tasks a thread, in whole slices
/// of `w` (at most the `nk` keys there are, whatever the width asked for).
fn key_task_width(nk: usize, w: usize) -> usize {
    nk.div_ceil(2 * par::threads())
        .div_ceil(w)
        .saturating_mul(w)
        .clamp(1, nk.max(1))
}

/// The chunk bounds `[0, r, 2r, .., n]`.
fn bounds(n: usize, r: usize) -> Vec<usize> {
    let mut b: Vec<usize> = (0..n).step_by(r.max(1)).collect();
    b.push(n);
    b
}

/// Checks a bias's length against the plan.
fn check_bias<T>(bias: Option<&[T]>, plan: &AttentionPlan) -> Result<()> {
    match bias {
        Some(b) if b.len() != plan.nnz() => Err(MaskedError::ValueCount {
            expected: plan.nnz(),
            got: b.len(),
        }),
        _ => Ok(()),
    }
}

/// The scale: given, or `1 / sqrt(d)`; it must be finite.
fn scale_of(scale: Option<f64>, d: usize) -> Result<f64> {
    let s = scale.unwrap_or(1.0 / (d.max(1) as f64).sqrt());
    if !s.is_finite() {
        return Err(MaskedError::InvalidArgument {
            name: "scale",
            value: s.to_string(),
            reason: "must be finite",
        });
    }
    Ok(s)
}

/// `softmax_masked(scale · Q Kᵀ + bias) V`: `q` `[..., nq, d]`, `k` `[..., nk, d]`, `v`
/// `[..., nk, dv]` (leading dims broadcast), softmax over each query's valid keys; the
/// result is `[..., nq, dv]`.
///
/// # Errors
/// Shapes that do not match the plan or each other, a bias of the wrong length, a
/// non-finite scale, an output too large to allocate.
pub fn attention<T: AttnFloat>(
    q: ArrayViewD<'_, T>, k: ArrayViewD<'_, T>, v: ArrayViewD<'_, T>, plan: &AttentionPlan,
    opts: &Options<'_, T>,
) -> Result<ArrayD<T>> {
    let inp = inputs(&q, &k, &v, plan, opts)?;
    let out = attend(&inp, plan)?;
    Ok(array(
        inp.batch.shape(plan.shape().0, inp.ops[2].cols),
        T::narrow(out),
    ))
}

/// What attention and its gradient read, checked: the batch, the operands' shapes and
/// values in the compute type (borrowed where the storage is the compute type), the bias
/// and the scale.
struct Inputs<'a, A: Clone> {
    batch: Batch,
    ops: [Operand; 3],
    vals: [Cow<'a, [A]>; 3],
    bias: Option<Cow<'a, [A]>>,
    scale: A,
}

fn inputs<'a, T: AttnFloat>(
    q: &'a ArrayViewD<'a, T>, k: &'a ArrayViewD<'a, T>, v: &'a ArrayViewD<'a, T>,
    plan: &AttentionPlan, opts: &Options<'a, T>,
) -> Result<Inputs<'a, T::Acc>> {
    let ops = [
        Operand::of(q, "q")?,
        Operand::of(k, "k")?,
        Operand::of(v, "v")?,
    ];
    let batch = Batch::attention(&ops[0], &ops[1], &ops[2], plan)?;
    check_bias(opts.bias, plan)?;
    let scale = T::acc(scale_of(opts.scale, ops[0].cols)?);
    Ok(Inputs {
        batch,
        vals: [acc_values(q), acc_values(k), acc_values(v)],
        bias: opts.bias.map(T::widen),
        scale,
        ops,
    })
}

fn attend<A: Acc>(inp: &Inputs<'_, A>, plan: &AttentionPlan) -> Result<Vec<A>> {
    let (batch, [qo, ko, vo], scale) = (&inp.batch, &inp.ops, inp.scale);
    let [q, k, v] = [&*inp.vals[0], &*inp.vals[1], &*inp.vals[2]];
    let bias = inp.bias.as_deref();
    let ((nq, nk), dv) = (plan.shape(), vo.cols);
    let mut out = zeros::<A>(batch.count * nq * dv, "attention's output")?;
    for b in 0..batch.count {
        let pi = batch.pattern(b, plan);
        let a = Attn {
            q: qo.mat(q, batch.offset(b, qo)),
            k: ko.mat(k, batch.offset(b, ko)),
            v: vo.mat(v, batch.offset(b, vo)),
            p: plan.index(pi),
            bias: bias.map(|x| &x[plan.start(pi)..plan.start(pi + 1)]),
            scale,
        };
        let ob = &mut out[b * nq * dv..(b + 1) * nq * dv];
        let width = plan.slice_width(pi, row_bytes::<A>(qo.cols, dv));
        let rpt = task_rows(nq, width);
        let rows = |c: usize| (c * rpt, ((c + 1) * rpt).min(nq));
        match width {
            Some(w) => with_madd!(m => par::chunks_mut(ob, rpt * dv, |c, chunk| {
                sliced::attend_rows(m, &a, (w, nk), rows(c), chunk)
            })),
            None => with_madd!(m => par::chunks_mut(ob, rpt * dv, |c, chunk| {
                let (r0, r1) = rows(c);
                kernels::attend_rows(m, &a, r0, r1, chunk)
            })),
        };
    }
    Ok(out)
}

/// The gradients of `sum(attention(q, k, v) ⊙ grad)` for `q`, `k`, `v` and the bias.
/// Each probability is computed again (nothing is saved from the forward pass). A row
/// at a time ([`Traversal::Rows`]): a row pass computes `dQ` and three statistics per
/// query row, a column pass recomputes each pair's `P` and `dS` from them (flash
/// attention's backward) for `dK` and `dV`; the extra memory is the gradients, O(rows)
/// statistics and the plan's transpose (built on the first call, then reused). In key
/// slices ([`Traversal::KeySlices`]): row tasks keep each pair's `P` and `dS` (two
/// values a pair) and compute `dQ`, key tasks `dK` and `dV` from them; no transpose.
///
/// # Errors
/// As [`attention`]; `grad` not of the output's shape.
pub fn attention_vjp<T: AttnFloat>(
    q: ArrayViewD<'_, T>, k: ArrayViewD<'_, T>, v: ArrayViewD<'_, T>, plan: &AttentionPlan,
    opts: &Options<'_, T>, grad: ArrayViewD<'_, T>,
) -> Result<AttentionGrads<T>> {
    let inp = inputs(&q, &k, &v, plan, opts)?;
    let out_shape = inp.batch.shape(plan.shape().0, inp.ops[2].cols);
    if grad.shape() != out_shape.as_slice() {
        return Err(MaskedError::ShapeMismatch {
            what: "the gradient and attention's output".into(),
            left: grad.shape().to_vec(),
            right: out_shape,
        });
    }
    let g = attend_grad(&inp, &acc_values(&grad), plan)?;
    let has_bias = inp.bias.is_some();
    let [dq, dk, dv, dbias] = g;
    Ok(AttentionGrads {
        dq: array(q.shape().to_vec(), T::narrow(dq)),
        dk: array(k.shape().to_vec(), T::narrow(dk)),
        dv: array(v.shape().to_vec(), T::narrow(dv)),
        dbias: has_bias.then(|| T::narrow(dbias)),
    })
}

fn attend_grad<A: Acc>(inp: &Inputs<'_, A>, g: &[A], plan: &AttentionPlan) -> Result<[Vec<A>; 4]> {
    let (batch, [qo, ko, vo], scale) = (&inp.batch, &inp.ops, inp.scale);
    let [q, k, v] = [&*inp.vals[0], &*inp.vals[1], &*inp.vals[2]];
    let bias = inp.bias.as_deref();
    let ((nq, nk), d, dv) = (plan.shape(), qo.cols, vo.cols);
    let mut dq = zeros::<A>(q.len(), "the gradient of q")?;
    let mut dk = zeros::<A>(k.len(), "the gradient of k")?;
    let mut dvv = zeros::<A>(v.len(), "the gradient of v")?;
    let mut dbias = zeros::<A>(bias.map_or(0, <[A]>::len), "the gradient of the bias")?;
    let mut stats: Vec<RowStat<A>> = Vec::new();
    // the key-sliced traversal's two values a pair, sized for the largest such pattern
    let mut pairs: [Vec<A>; 2] = [Vec::new(), Vec::new()];
    let go = Operand {
        lead: batch.lead.clone(),
        rows: nq,
        cols: dv,
    };
    for b in 0..batch.count {
        let pi = batch.pattern(b, plan);
        let (qb, kb, vb) = (
            batch.offset(b, qo),
            batch.offset(b, ko),
            batch.offset(b, vo),
        );
        let a = Attn {
            q: qo.mat(q, qb),
            k: ko.mat(k, kb),
            v: vo.mat(v, vb),
            p: plan.index(pi),
            bias: bias.map(|x| &x[plan.start(pi)..plan.start(pi + 1)]),
            scale,
        };
        let gm = go.mat(g, b * nq * dv);
        let dbias_b =
            bias.map(|_| par::Scatter::new(&mut dbias[plan.start(pi)..plan.start(pi + 1)]));
        let dqb = &mut dq[qb..qb + nq * d];
        let (dkb, dvb) = (&mut dk[kb..kb + nk * d], &mut dvv[vb..vb + nk * dv]);
        // row chunks of dq (empty ones too where d = 0: the rows still write their
        // statistics or per-pair values)
        let width = plan.slice_width(pi, row_bytes::<A>(d, dv));
        let rb = bounds(nq, task_rows(nq, width));
        let db: Vec<usize> = rb.iter().map(|&r| r * d).collect();
        if let Some(w) = width {
            let nnz = a.p.idx.len();
            for x in &mut pairs {
                if x.len() < nnz {
                    *x = zeros::<A>(nnz, "the attention gradient's per-pair values")?;
                }
            }
            let [p, ds] = &mut pairs;
            {
                // row tasks: each pair's P and scale · dS, dQ, the bias gradient
                let out = Pairs {
                    p: par::Scatter::new(p),
                    ds: par::Scatter::new(ds),
                    dbias: dbias_b,
                };
                with_madd!(m => par::parts_mut(dqb, &db, |c, dqc| {
                    sliced::grad_rows(m, &a, gm, (w, nk), (rb[c], rb[c + 1]), dqc, &out)
                }));
            }
            // key tasks: dK and dV, two a thread, whole slices each
            let kpt = key_task_width(nk, w);
            let gk = GradKeys {
                a,
                g: gm,
                p,
                ds,
                nq,
                width: w,
            };
            let span = |c: usize| (c * kpt, ((c + 1) * kpt).min(nk));
            with_madd!(m => key_tasks(dkb, dvb, (d, dv), kpt, |c, dkc, dvc| {
                sliced::grad_keys(m, &gk, span(c), dkc, dvc)
            }));
        } else {
            let t = plan.transpose(pi)?;
            if stats.len() < nq {
                stats = try_vec(nq, || "the attention gradient's row statistics".into())?;
                stats.resize(nq, RowStat::default());
            }
            {
                // rows: dQ, each row's statistics, the bias gradient
                let out = GradOut {
                    stats: par::Scatter::new(&mut stats),
                    dbias: dbias_b,
                };
                with_madd!(m => par::parts_mut(dqb, &db, |c, dqc| {
                    kernels::grad_rows(m, &a, gm, rb[c], rb[c + 1], dqc, &out)
                }));
            }
            // columns: dK and dV, each pair's P and dS recomputed
            let gc = GradCols {
                a,
                g: gm,
                stats: &stats,
                t: t.index(),
                src: &t.src,
            };
            let cpt = rows_per_task(nk, 4096);
            let span = |c: usize| (c * cpt, ((c + 1) * cpt).min(nk));
            with_madd!(m => key_tasks(dkb, dvb, (d, dv), cpt, |c, dkc, dvc| {
                kernels::grad_cols(m, &gc, span(c), dkc, dvc)
            }));
        }
    }
    Ok([dq, dk, dvv, dbias])
}

/// `run(c, dk rows, dv rows)` over chunks of `per` keys of `dk` and `dv` (`d` and `dv`
/// values a key), in parallel; with `d` or `dv` 0, that side's chunks are empty.
fn key_tasks<A: Send>(
    dk: &mut [A], dv: &mut [A], (d, dvw): (usize, usize), per: usize,
    run: impl Fn(usize, &mut [A], &mut [A]) + Sync,
) {
    match (d, dvw) {
        (0, 0) => {}
        (0, _) => drop(par::chunks_mut(dv, per * dvw, |c, dvc| {
            run(c, &mut [], dvc)
        })),
        (_, 0) => drop(par::chunks_mut(dk, per * d, |c, dkc| run(c, dkc, &mut []))),
        _ => drop(par::chunks_mut2(dk, per * d, dv, per * dvw, run)),
    }
}

/// Where the values on the pattern of batch element `b` start, for values given as
/// `vals` (one per stored position of the plan, shared; `[..., nnz]` broadcasting with
/// the batch, for one shared pattern; or one per position of every batch element).
#[derive(Debug, Clone)]
enum ValuesAt {
    /// One value per stored position of the plan, shared by every batch element.
    Shared,
    /// `[lead..., nnz]` for one shared pattern.
    Lead(Operand),
    /// Every batch element's, element after element.
    Each,
}

impl ValuesAt {
    fn of(shape: &[usize], batch: &Batch, plan: &AttentionPlan) -> Result<ValuesAt> {
        let total = batch.value_total(plan);
        let count_error = |got: usize| MaskedError::ValueCount {
            expected: plan.nnz(),
            got,
        };
        if plan.is_per_batch() {
            return match shape {
                [n] if *n == plan.nnz() => Ok(ValuesAt::Shared),
                [n] if *n == total => Ok(ValuesAt::Each),
                _ => Err(count_error(shape.iter().product())),
            };
        }
        let Some((&nnz, lead)) = shape.split_last() else {
            return Err(count_error(1));
        };
        if nnz != plan.nnz() {
            return Err(count_error(nnz));
        }
        let op = Operand {
            lead: lead.to_vec(),
            rows: 1,
            cols: nnz,
        };
        let both = Batch::of(&[
            (&op, "the values"),
            (
                &Operand {
                    lead: batch.lead.clone(),
                    rows: 1,
                    cols: 1,
                },
                "x",
            ),
        ])?;
        if both.lead != batch.lead {
            return Err(MaskedError::ShapeMismatch {
                what: "the values' leading dims and the batch".into(),
                left: lead.to_vec(),
                right: batch.lead.clone(),
            });
        }
        Ok(ValuesAt::Lead(op))
    }

    fn start(&self, b: usize, batch: &Batch, plan: &AttentionPlan) -> usize {
        match self {
            ValuesAt::Shared => plan.start(batch.pattern(b, plan)),
            ValuesAt::Lead(op) => batch.offset(b, op),
            ValuesAt::Each => batch.value_start(b, plan),
        }
    }
}

/// The shape of values on the pattern for a batch: `[lead..., nnz]` for one shared
/// pattern, flat (element after element) for one pattern per batch element.
fn values_shape(batch: &Batch, plan: &AttentionPlan) -> Vec<usize> {
    if plan.is_per_batch() {
        vec![batch.value_total(plan)]
    } else {
        let mut s = batch.lead.clone();
        s.push(plan.nnz());
        s
    }
}

/// SDDMM: `scale · (a bᵀ)` at the plan's stored positions, for `a` `[..., n, d]` and `b`
/// `[..., m, d]` (leading dims broadcast). The result holds each batch element's values
/// in the pattern's row order: `[..., nnz]` for one shared pattern, flat (element after
/// element) for one pattern per batch element.
///
/// # Errors
/// Shapes that do not match the plan or each other; a non-finite scale.
pub fn sddmm<T: AttnFloat>(
    a: ArrayViewD<'_, T>, b: ArrayViewD<'_, T>, plan: &AttentionPlan, scale: f64,
) -> Result<ArrayD<T>> {
    let (ao, bo) = (Operand::of(&a, "a")?, Operand::of(&b, "b")?);
    let batch = pair_batch(&ao, &bo, plan, "b")?;
    let scale = T::acc(scale_of(Some(scale), ao.cols)?);
    let (aa, ba) = (acc_values(&a), acc_values(&b));
    let shape = values_shape(&batch, plan);
    let mut out = zeros::<T::Acc>(shape.iter().product(), "sddmm's output")?;
    sddmm_into(&batch, plan, [&aa, &ba], [&ao, &bo], scale, &mut out);
    Ok(array(shape, T::narrow(out)))
}

/// The batch of `a` `[..., n, d]` and `b` `[..., m, d or dv]` against the plan.
fn pair_batch(
    a: &Operand, b: &Operand, plan: &AttentionPlan, bname: &'static str,
) -> Result<Batch> {
    let (n, m) = plan.shape();
    let mismatch = |what: String, left: usize, right: usize| MaskedError::ShapeMismatch {
        what,
        left: vec![left],
        right: vec![right],
    };
    if a.rows != n {
        return Err(mismatch(
            "rows of the first operand and the pattern's rows".into(),
            a.rows,
            n,
        ));
    }
    if b.rows != m {
        return Err(mismatch(
            format!("rows of {bname} and the pattern's columns"),
            b.rows,
            m,
        ));
    }
    let batch = Batch::of(&[(a, "the operands"), (b, bname)])?;
    batch.fits(plan)?;
    Ok(batch)
}

/// `out = scale · (a bᵀ)` on the pattern, every batch element's values after the
/// previous element's.
fn sddmm_into<A: Acc>(
    batch: &Batch, plan: &AttentionPlan, [a, b]: [&[A]; 2], [ao, bo]: [&Operand; 2], scale: A,
    out: &mut [A],
) {
    for e in 0..batch.count {
        let pi = batch.pattern(e, plan);
        let (am, bm) = (
            ao.mat(a, batch.offset(e, ao)),
            bo.mat(b, batch.offset(e, bo)),
        );
        let s = batch.value_start(e, plan);
        sddmm_on(
            plan,
            pi,
            [am, bm],
            scale,
            &mut out[s..s + plan.index(pi).idx.len()],
        );
    }
}

/// `out = scale · (a bᵀ)` at the positions of pattern `pi` (`out` holds them all), a
/// query row or a key slice at a time as the plan's [`Traversal`] says.
fn sddmm_on<A: Acc>(
    plan: &AttentionPlan, pi: usize, [am, bm]: [Mat<'_, A>; 2], scale: A, out: &mut [A],
) {
    let index = plan.index(pi);
    let (n, nk) = plan.shape();
    let width = plan.slice_width(pi, row_bytes::<A>(bm.cols, 0));
    let rb = bounds(n, task_rows(n, width));
    let eb: Vec<usize> = rb.iter().map(|&r| index.ptr[r]).collect();
    let rows = |c: usize| (rb[c], rb[c + 1]);
    match width {
        Some(w) => with_madd!(m => par::parts_mut(out, &eb, |c, chunk| {
            sliced::sddmm_rows(m, [am, bm], index, scale, (w, nk), rows(c), chunk)
        })),
        None => with_madd!(m => par::parts_mut(out, &eb, |c, chunk| {
            kernels::sddmm_rows(m, am, bm, index, scale, rows(c), chunk)
        })),
    };
}

/// `out += P x` for pattern `pi` with values `vals` (`out`: a row of `x.cols` a query),
/// a query row or a key slice at a time as the plan's [`Traversal`] says.
fn spmm_on<A: Acc>(plan: &AttentionPlan, pi: usize, vals: &[A], xm: Mat<'_, A>, out: &mut [A]) {
    let index = plan.index(pi);
    let (n, nk) = plan.shape();
    let width = plan.slice_width(pi, row_bytes::<A>(xm.cols, 0));
    let rpt = task_rows(n, width);
    let rows = |c: usize| (c * rpt, ((c + 1) * rpt).min(n));
    match width {
        Some(w) => with_madd!(m => par::chunks_mut(out, rpt * xm.cols, |c, chunk| {
            sliced::spmm_rows(m, vals, index, xm, (w, nk), rows(c), chunk)
        })),
        None => with_madd!(m => par::chunks_mut(out, rpt * xm.cols, |c, chunk| {
            kernels::spmm_rows(m, vals, index, xm, c * rpt, chunk)
        })),
    };
}

/// `out += Pᵀ x` for pattern `pi` with values `vals` in row order (`out`: a row of
/// `x.cols` a key): through the plan's transpose a key at a time, or by key tasks
/// streaming the query rows once a key slice, as the plan's [`Traversal`] says.
fn transpose_times<A: Acc>(
    plan: &AttentionPlan, pi: usize, vals: &[A], xm: Mat<'_, A>, out: &mut [A],
) -> Result<()> {
    let (nq, nk) = plan.shape();
    let width = xm.cols.max(1);
    match plan.slice_width(pi, row_bytes::<A>(xm.cols, 0)) {
        Some(w) => {
            let ks = sliced::KeyScatter {
                p: plan.index(pi),
                w: vals,
                x: xm,
                nq,
                width: w,
            };
            let kpt = key_task_width(nk, w);
            with_madd!(m => par::chunks_mut(out, kpt * width, |c, chunk| {
                sliced::scatter_keys(m, &ks, (c * kpt, ((c + 1) * kpt).min(nk)), chunk)
            }));
        }
        None => {
            let t = plan.transpose(pi)?;
            let wcols = t.to_columns(vals);
            let cols = Cols {
                t: t.index(),
                w: &wcols,
                x: xm,
            };
            let cpt = rows_per_task(nk, 4096);
            with_madd!(m => par::chunks_mut(out, cpt * width, |c, chunk| {
                kernels::cols(m, &cols, c * cpt, chunk)
            }));
        }
    }
    Ok(())
}

/// SpMM: `P x` for values `P` on the plan's pattern and `x` `[..., m, dv]`: the result is
/// `[..., n, dv]`. `values` holds one value per stored position of the plan (shared by
/// the batch), or each batch element's (`[..., nnz]` for one shared pattern, flat for one
/// pattern per element), as [`sddmm`] returns them.
///
/// # Errors
/// Shapes that do not match the plan or each other.
pub fn spmm<T: AttnFloat>(
    values: ArrayViewD<'_, T>, plan: &AttentionPlan, x: ArrayViewD<'_, T>,
) -> Result<ArrayD<T>> {
    let (batch, xo, at) = spmm_batch(values.shape(), plan, &x)?;
    let (va, xa) = (acc_values(&values), acc_values(&x));
    let n = plan.shape().0;
    let mut out = zeros::<T::Acc>(batch.elements(n, xo.cols)?, "spmm's output")?;
    for e in 0..batch.count {
        let pi = batch.pattern(e, plan);
        let vs = at.start(e, &batch, plan);
        let vals = &va[vs..vs + plan.index(pi).idx.len()];
        let xm = xo.mat(&xa, batch.offset(e, &xo));
        let ob = &mut out[e * n * xo.cols..(e + 1) * n * xo.cols];
        spmm_on(plan, pi, vals, xm, ob);
    }
    Ok(array(batch.shape(n, xo.cols), T::narrow(out)))
}

fn spmm_batch<T>(
    vshape: &[usize], plan: &AttentionPlan, x: &ArrayViewD<'_, T>,
) -> Result<(Batch, Operand, ValuesAt)> {
    let xo = Operand::of(x, "x")?;
    let m = plan.shape().1;
    if xo.rows != m {
        return Err(MaskedError::ShapeMismatch {
            what: "rows of x and the pattern's columns".into(),
            left: vec![xo.rows],
            right: vec![m],
        });
    }
    // the batch: x's leading dims, broadcast with the values' for one shared pattern
    let vlead = match vshape.split_last() {
        Some((_, lead)) if !plan.is_per_batch() => lead.to_vec(),
        _ => vec![],
    };
    let vop = Operand {
        lead: vlead,
        rows: 1,
        cols: 1,
    };
    let batch = Batch::of(&[(&xo, "x"), (&vop, "the values")])?;
    batch.fits(plan)?;
    let at = ValuesAt::of(vshape, &batch, plan)?;
    Ok((batch, xo, at))
}

/// The gradients of `sum(sddmm(a, b) ⊙ grad)` for `a` and `b` (`grad` as [`sddmm`]'s
/// output), each in its input's shape.
///
/// # Errors
/// As [`sddmm`]; `grad` not of the output's shape.
pub fn sddmm_vjp<T: AttnFloat>(
    a: ArrayViewD<'_, T>, b: ArrayViewD<'_, T>, plan: &AttentionPlan, scale: f64,
    grad: ArrayViewD<'_, T>,
) -> Result<(ArrayD<T>, ArrayD<T>)> {
    let (ao, bo) = (Operand::of(&a, "a")?, Operand::of(&b, "b")?);
    let batch = pair_batch(&ao, &bo, plan, "b")?;
    let shape = values_shape(&batch, plan);
    if grad.shape() != shape.as_slice() {
        return Err(MaskedError::ShapeMismatch {
            what: "the gradient and sddmm's output".into(),
            left: grad.shape().to_vec(),
            right: shape,
        });
    }
    let scale = T::acc(scale_of(Some(scale), ao.cols)?);
    let (aa, ba, ga) = (acc_values(&a), acc_values(&b), acc_values(&grad));
    let mut da = zeros::<T::Acc>(aa.len(), "the gradient of a")?;
    let mut db = zeros::<T::Acc>(ba.len(), "the gradient of b")?;
    let (n, m) = plan.shape();
    let scaled: Vec<T::Acc> = ga.iter().map(|&g| g * scale).collect();
    for e in 0..batch.count {
        let pi = batch.pattern(e, plan);
        let gs = batch.value_start(e, plan);
        let gvals = &scaled[gs..gs + plan.index(pi).idx.len()];
        let (aoff, boff) = (batch.offset(e, &ao), batch.offset(e, &bo));
        let (am, bm) = (ao.mat(&aa, aoff), bo.mat(&ba, boff));
        spmm_on(plan, pi, gvals, bm, &mut da[aoff..aoff + n * ao.cols]);
        transpose_times(plan, pi, gvals, am, &mut db[boff..boff + m * bo.cols])?;
    }
    Ok((
        array(a.shape().to_vec(), T::narrow(da)),
        array(b.shape().to_vec(), T::narrow(db)),
    ))
}

/// The gradients of `sum(spmm(values, x) ⊙ grad)` for the values (in their shape: summed
/// over the batch elements that share them) and for `x`.
///
/// # Errors
/// As [`spmm`]; `grad` not of the output's shape.
pub fn spmm_vjp<T: AttnFloat>(
    values: ArrayViewD<'_, T>, plan: &AttentionPlan, x: ArrayViewD<'_, T>, grad: ArrayViewD<'_, T>,
) -> Result<(ArrayD<T>, ArrayD<T>)> {
    let (batch, xo, at) = spmm_batch(values.shape(), plan, &x)?;
    let (n, m) = plan.shape();
    let out_shape = batch.shape(n, xo.cols);
    if grad.shape() != out_shape.as_slice() {
        return Err(MaskedError::ShapeMismatch {
            what: "the gradient and spmm's output".into(),
            left: grad.shape().to_vec(),
            right: out_shape,
        });
    }
    let (va, xa, ga) = (acc_values(&values), acc_values(&x), acc_values(&grad));
    let mut dvals = zeros::<T::Acc>(va.len(), "the gradient of the values")?;
    let mut dx = zeros::<T::Acc>(xa.len(), "the gradient of x")?;
    let go = Operand {
        lead: batch.lead.clone(),
        rows: n,
        cols: xo.cols,
    };
    let mut tmp = Vec::new();
    for e in 0..batch.count {
        let pi = batch.pattern(e, plan);
        let vs = at.start(e, &batch, plan);
        let nnz = plan.index(pi).idx.len();
        let xoff = batch.offset(e, &xo);
        let (gm, xm) = (go.mat(&ga, e * n * xo.cols), xo.mat(&xa, xoff));
        // dvalues = (grad xᵀ) on the pattern, summed where the values are shared
        tmp.clear();
        tmp.resize(nnz, T::Acc::ZERO);
        sddmm_on(plan, pi, [gm, xm], T::Acc::ONE, &mut tmp);
        for (o, &v) in dvals[vs..vs + nnz].iter_mut().zip(&tmp) {
            *o = *o + v;
        }
        transpose_times(
            plan,
            pi,
            &va[vs..vs + nnz],
            gm,
            &mut dx[xoff..xoff + m * xo.cols],
        )?;
    }
    Ok((
        array(values.shape().to_vec(), T::narrow(dvals)),
        array(x.shape().to_vec(), T::narrow(dx)),
    ))
}
