//! The key-sliced kernels, for patterns whose rows scatter over more keys than the
//! second-level cache holds (a random pattern): the keys are swept in slices of `width`,
//! and for each slice every row of the task takes its pairs inside it (a cursor a row),
//! so the key and value rows gathered for a pair come from a slice that stays in the
//! cache, where the row kernels would gather each from the last-level cache.
//!
//! - forward: an online softmax a row (flash attention's): the row's largest score and
//!   sum so far, its output rescaled when a slice raises the largest;
//! - gradient, row tasks: each pair's score and `dP` into two per-pair buffers (slices),
//!   then per row `P`, `D = Σ P dP` and `dS = P (dP − D)` in place, then `dQ` (slices);
//! - gradient, key tasks: `dK` and `dV` from the buffers, the rows streamed in order and
//!   each pair's update landing in the task's cached slice of `dK` and `dV`.

use super::{add_to, combine, max_lanes, scores, softmax, sum_lanes, Acc, Attn, Index, Madd, Mat};
use masked_kernels::cpu::prefetch;
use masked_kernels::multiversion;
use masked_kernels::par::Scatter;

/// The pairs of one row below key `j1`, from its cursor on: `(first, end)` positions,
/// the cursor moved to `end`.
#[inline(always)]
fn take(idx: &[usize], cur: &mut usize, row_end: usize, j1: usize) -> (usize, usize) {
    let c = *cur;
    let mut e = c;
    while e < row_end && idx[e] < j1 {
        e += 1;
    }
    *cur = e;
    (c, e)
}

/// Rows ahead of the one visited whose cursors' cache lines are prefetched: a row's
/// pairs in a slice are a few dozen bytes somewhere in a pattern of megabytes, a miss
/// each visit that the hardware does not foresee.
const AHEAD: usize = 8;

/// Prefetches the first key indices, and the first values of each of `vals` (pointers
/// to per-position values, `base` the position `vals` start at), at the cursor `AHEAD`
/// rows on.
#[inline(always)]
fn prefetch_ahead<A>(idx: &[usize], cur: &[usize], r: usize, base: usize, vals: &[*const A]) {
    if let Some(&c) = cur.get(r + AHEAD) {
        prefetch(idx.as_ptr().wrapping_add(c));
        prefetch(idx.as_ptr().wrapping_add(c + 8));
        for &v in vals {
            prefetch(v.wrapping_add(c.wrapping_sub(base)));
        }
    }
}

/// The walk both task kinds share: for each key slice of `k0..k1` (`width` keys), for
/// each row `rows.0 + r` (`cur[r]` its cursor) with pairs inside it, `f(r, i, c, e)`
/// over its positions `c..e`; prefetching ahead as [`prefetch_ahead`] does for `vals`.
#[inline(always)]
fn walk<A>(
    p: Index<'_, usize>, (r0, mut cur): (usize, Vec<usize>),
    (k0, k1, width): (usize, usize, usize), (base, vals): (usize, &[*const A]),
    mut f: impl FnMut(usize, usize, usize, usize),
) {
    // the key slices `[j0, j1)` of `k0..k1`, `width` keys each (the last may be shorter)
    let w = width.max(1);
    let mut j0 = k0;
    while j0 < k1 {
        let j1 = (j0 + w).min(k1);
        j0 = j1;
        for r in 0..cur.len() {
            let i = r0 + r;
            prefetch_ahead(p.idx, &cur, r, base, vals);
            let (c, e) = take(p.idx, &mut cur[r], p.ptr[i + 1], j1);
            if c < e {
                f(r, i, c, e);
            }
        }
    }
}

/// A row task's walk over rows `r0..r1` and every key: [`walk`] from each row's start.
#[inline(always)]
fn visit_rows<A>(
    p: Index<'_, usize>, (r0, r1): (usize, usize), (width, nk): (usize, usize),
    pf: (usize, &[*const A]), f: impl FnMut(usize, usize, usize, usize),
) {
    walk(p, (r0, p.ptr[r0..r1].to_vec()), (0, nk, width), pf, f);
}

/// A key task's walk over keys `k0..k1` and every one of `nq` query rows: [`walk`] from
/// each row's first pair at or after `k0` (`vals` in the pattern's positions).
#[inline(always)]
fn visit_keys<A>(
    p: Index<'_, usize>, nq: usize, (k0, k1, width): (usize, usize, usize), vals: &[*const A],
    mut f: impl FnMut(usize, usize, usize),
) {
    let (ptr, idx) = (p.ptr, p.idx);
    let mut cur = Vec::with_capacity(nq);
    for i in 0..nq {
        cur.push(ptr[i] + idx[ptr[i]..ptr[i + 1]].partition_point(|&j| j < k0));
    }
    walk(p, (0, cur), (k0, k1, width), (0, vals), |_, i, c, e| {
        f(i, c, e)
    });
}

/// `out_(j - k0) += w_t · x` for each pair `t` (key `j = keys[t]`) of one query row
/// (`x`), `out` holding keys `k0..` a row each of `x`'s length.
#[inline(always)]
fn scatter_row<A: Acc, M: Madd>(keys: &[usize], w: &[A], k0: usize, x: &[A], out: &mut [A]) {
    let d = x.len();
    for t in 0..keys.len().min(w.len()) {
        let j = keys[t] - k0;
        axpy::<A, M>(&mut out[j * d..(j + 1) * d], w[t], x);
    }
}

/// `out += w · x`.
#[inline(always)]
fn axpy<A: Acc, M: Madd>(out: &mut [A], w: A, x: &[A]) {
    for i in 0..out.len().min(x.len()) {
        out[i] = M::madd(w, x[i], out[i]);
    }
}

#[inline(always)]
fn attend_k<A: Acc, M: Madd>(
    _: M, a: &Attn<'_, A>, (width, nk): (usize, usize), (r0, r1): (usize, usize), out: &mut [A],
) {
    let dv = a.v.cols;
    let n = r1 - r0;
    let (mut m, mut l) = (vec![A::NEG_INFINITY; n], vec![A::ZERO; n]);
    let mut s = Vec::new();
    visit_rows::<A>(a.p, (r0, r1), (width, nk), (0, &[]), |r, i, c, e| {
        let keys = &a.p.idx[c..e];
        s.clear();
        s.resize(e - c, A::ZERO);
        scores::<A, M>(a.q.row(i), a.k, keys, a.scale, &mut s);
        if let Some(b) = a.bias {
            add_to(&mut s, &b[c..e]);
        }
        // padded to whole 16-lane blocks with -inf (weight 0): the max, exp and sum
        // below run no scalar remainder, which costs more than a block on a visit
        // of a few dozen pairs
        s.resize((e - c).next_multiple_of(super::L), A::NEG_INFINITY);
        let o = &mut out[r * dv..(r + 1) * dv];
        let (mx, mi) = (max_lanes(&s), m[r]);
        let mn = if mx > mi || mx.is_nan() { mx } else { mi };
        if mn == A::NEG_INFINITY {
            return; // every score so far is -inf: nothing to add
        }
        if mn != mi {
            // a larger largest score (or a NaN): rescale what the row has summed
            let f = M::exp(mi - mn);
            l[r] = l[r] * f;
            for x in o.iter_mut() {
                *x = *x * f;
            }
            m[r] = mn;
        }
        for x in s.iter_mut() {
            *x = M::exp(*x - mn);
        }
        l[r] = l[r] + sum_lanes::<A, M>(&s);
        combine::<A, M, usize>(&s, keys, a.v, o);
    });
    let dv = dv.max(1);
    for r in 0..l.len().min(out.len() / dv) {
        // a row with no finite score (l = 0) is zeros already
        if l[r] != A::ZERO {
            let inv = A::ONE / l[r];
            for x in out[r * dv..(r + 1) * dv].iter_mut() {
                *x = *x * inv;
            }
        }
    }
}

multiversion! {
    /// The attention output of rows `r0..r1` (`dv` values each in `out`, zeroed), the
    /// keys `0..nk` swept in slices of `width`.
    pub fn attend_rows[A: Acc, M: Madd](m: M, a: &Attn<'_, A>, slicing: (usize, usize), rows: (usize, usize), out: &mut [A]) = attend_k;
}

/// The gradient's per-pair buffers (one slot per stored position of the pattern) and,
/// with a bias, its gradient (likewise): a row task has its rows' positions alone.
pub struct Pairs<'a, A> {
    /// Scores, then `P`.
    pub p: Scatter<'a, A>,
    /// `dP`, then `scale · dS`.
    pub ds: Scatter<'a, A>,
    /// `dS` added at each position (a bias shared by batch elements).
    pub dbias: Option<Scatter<'a, A>>,
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn grad_rows_k<A: Acc, M: Madd>(
    _: M, a: &Attn<'_, A>, g: Mat<'_, A>, (width, nk): (usize, usize), (r0, r1): (usize, usize),
    dq: &mut [A], pairs: &Pairs<'_, A>,
) {
    let d = a.q.cols;
    let (ptr, idx) = (a.p.ptr, a.p.idx);
    let e0 = ptr[r0];
    // SAFETY: the positions of rows r0..r1 belong to this task only
    let (p, ds) = unsafe { (pairs.p.part(e0, ptr[r1]), pairs.ds.part(e0, ptr[r1])) };
    // each pair's score and dP, a key slice at a time
    let pf = [p.as_ptr(), ds.as_ptr()];
    visit_rows(a.p, (r0, r1), (width, nk), (e0, &pf), |_, i, c, e| {
        let keys = &idx[c..e];
        scores::<A, M>(a.q.row(i), a.k, keys, a.scale, &mut p[c - e0..e - e0]);
        scores::<A, M>(g.row(i), a.v, keys, A::ONE, &mut ds[c - e0..e - e0]);
    });
    // per row: P, D = Σ P dP, dS = P (dP - D)
    for i in r0..r1 {
        let (lo, hi) = (ptr[i], ptr[i + 1]);
        let (pr, dr) = (&mut p[lo - e0..hi - e0], &mut ds[lo - e0..hi - e0]);
        if let Some(b) = a.bias {
            add_to(pr, &b[lo..hi]);
        }
        softmax::<A, M>(pr);
        let big_d = super::dot1::<A, M>(pr, dr);
        // SAFETY: the positions of row i belong to this task only
        unsafe { super::ds_row(pr, dr, big_d, a.scale, pairs.dbias.as_ref(), lo) };
    }
    // dQ += scale · dS K, a key slice at a time
    let pf = [ds.as_ptr()];
    visit_rows(a.p, (r0, r1), (width, nk), (e0, &pf), |r, _, c, e| {
        let dqi = &mut dq[r * d..(r + 1) * d];
        combine::<A, M, usize>(&ds[c - e0..e - e0], &idx[c..e], a.k, dqi);
    });
}

multiversion! {
    /// The row tasks of the key-sliced attention VJP over rows `r0..r1` (`d` values each
    /// in `dq`): each pair's score and `dP = dO Vᵀ`, then per row `P`, `dS = P ⊙ (dP −
    /// rowsum(P ⊙ dP))` into `pairs` (and the bias gradient), then `dQ += scale · dS K`.
    pub fn grad_rows[A: Acc, M: Madd](m: M, a: &Attn<'_, A>, g: Mat<'_, A>, slicing: (usize, usize), rows: (usize, usize), dq: &mut [A], pairs: &Pairs<'_, A>) = grad_rows_k;
}

/// What the key tasks of the gradient read: the forward's operands, `dO`, and the row
/// tasks' `P` and `scale · dS` (one a stored position).
#[derive(Clone, Copy)]
pub struct GradKeys<'a, A> {
    /// The forward's operands and pattern.
    pub a: Attn<'a, A>,
    /// The upstream gradient of the output (`nq × dv`).
    pub g: Mat<'a, A>,
    /// `P`.
    pub p: &'a [A],
    /// `scale · dS`.
    pub ds: &'a [A],
    /// Query rows.
    pub nq: usize,
    /// Keys a slice.
    pub width: usize,
}

#[inline(always)]
fn grad_keys_k<A: Acc, M: Madd>(
    _: M, c: &GradKeys<'_, A>, (k0, k1): (usize, usize), dk: &mut [A], dv: &mut [A],
) {
    let (a, idx) = (&c.a, c.a.p.idx);
    let pf = [c.p.as_ptr(), c.ds.as_ptr()];
    visit_keys(a.p, c.nq, (k0, k1, c.width), &pf, |i, lo, e| {
        scatter_row::<A, M>(&idx[lo..e], &c.ds[lo..e], k0, a.q.row(i), dk);
        scatter_row::<A, M>(&idx[lo..e], &c.p[lo..e], k0, c.g.row(i), dv);
    });
}

multiversion! {
    /// The key tasks of the key-sliced attention VJP over keys `k0..k1` (`dk` and `dv`
    /// hold their rows): `dK_j += scale · Σ_i dS_ij Q_i` and `dV_j += Σ_i P_ij dO_i`,
    /// every query row streamed once a slice.
    pub fn grad_keys[A: Acc, M: Madd](m: M, c: &GradKeys<'_, A>, keys: (usize, usize), dk: &mut [A], dv: &mut [A]) = grad_keys_k;
}

#[inline(always)]
fn sddmm_rows_k<A: Acc, M: Madd>(
    _: M, [a, b]: [Mat<'_, A>; 2], p: Index<'_, usize>, scale: A, (width, nk): (usize, usize),
    (r0, r1): (usize, usize), out: &mut [A],
) {
    let e0 = p.ptr[r0];
    let pf = [out.as_ptr()];
    visit_rows(p, (r0, r1), (width, nk), (e0, &pf), |_, i, c, e| {
        scores::<A, M>(a.row(i), b, &p.idx[c..e], scale, &mut out[c - e0..e - e0]);
    });
}

multiversion! {
    /// `out = scale · (a bᵀ)` for `ab = [a, b]` at the stored positions of rows
    /// `r0..r1` (`out` holds exactly their entries), the keys `0..nk` swept in slices
    /// of `width`.
    pub fn sddmm_rows[A: Acc, M: Madd](m: M, ab: [Mat<'_, A>; 2], p: Index<'_, usize>, scale: A, slicing: (usize, usize), rows: (usize, usize), out: &mut [A]) = sddmm_rows_k;
}

#[inline(always)]
fn spmm_rows_k<A: Acc, M: Madd>(
    _: M, vals: &[A], p: Index<'_, usize>, x: Mat<'_, A>, (width, nk): (usize, usize),
    (r0, r1): (usize, usize), out: &mut [A],
) {
    let w = x.cols;
    visit_rows(
        p,
        (r0, r1),
        (width, nk),
        (0, &[vals.as_ptr()]),
        |r, _, c, e| {
            combine::<A, M, usize>(&vals[c..e], &p.idx[c..e], x, &mut out[r * w..(r + 1) * w]);
        },
    );
}

multiversion! {
    /// `out += P x` for rows `r0..r1` of the pattern with values `vals` (`x.cols` values
    /// a row in `out`), the keys `0..nk` swept in slices of `width`.
    pub fn spmm_rows[A: Acc, M: Madd](m: M, vals: &[A], p: Index<'_, usize>, x: Mat<'_, A>, slicing: (usize, usize), rows: (usize, usize), out: &mut [A]) = spmm_rows_k;
}

/// `Pᵀ x` by key tasks: what [`scatter_keys`] reads.
#[derive(Clone, Copy)]
pub struct KeyScatter<'a, A> {
    /// The pattern.
    pub p: Index<'a, usize>,
    /// One weight a stored position, in row order.
    pub w: &'a [A],
    /// The rows combined (one a query row).
    pub x: Mat<'a, A>,
    /// Query rows.
    pub nq: usize,
    /// Keys a slice.
    pub width: usize,
}

#[inline(always)]
fn scatter_keys_k<A: Acc, M: Madd>(
    _: M, s: &KeyScatter<'_, A>, (k0, k1): (usize, usize), out: &mut [A],
) {
    visit_keys(s.p, s.nq, (k0, k1, s.width), &[s.w.as_ptr()], |i, lo, e| {
        scatter_row::<A, M>(&s.p.idx[lo..e], &s.w[lo..e], k0, s.x.row(i), out);
    });
}

multiversion! {
    /// `out_j += Σ_i w_ij x_i` for keys `k0..k1` (`x.cols` values a key in `out`), every
    /// query row streamed once a slice.
    pub fn scatter_keys[A: Acc, M: Madd](m: M, s: &KeyScatter<'_, A>, keys: (usize, usize), out: &mut [A]) = scatter_keys_k;
}
