//! The dense layout's gradient kernels: gather each lane's valid values and upstream
//! gradient, run the op's [`LaneGrad`], scatter the result to the valid positions (0
//! everywhere else). Lanes that are contiguous runs (a reduction over trailing dims, a
//! map along the last dim) and the blocks of a map along another dim run in parallel;
//! a reduction over leading or scattered dims groups its lanes' positions first.

use masked_core::{Bits, Element, Float, LaneGrad, ReducePlan, Upstream};
use rayon::prelude::*;

/// Per-task scratch: a lane's valid values, upstream gradients, results and positions.
#[derive(Default)]
struct Scratch {
    x: Vec<f64>,
    g: Vec<f64>,
    o: Vec<f64>,
    at: Vec<usize>,
}

/// Where the upstream gradient of a lane comes from.
#[derive(Clone, Copy)]
enum LaneG<'a, R> {
    /// One value for the whole lane.
    One(f64),
    /// One value per element, at the element's own position (minus the region's base).
    Each(&'a [R]),
}

impl Scratch {
    /// One lane: `positions` are flat positions in row-major order (relative to the
    /// region `out` and `xs` start at); invalid ones are skipped.
    fn lane<T: Element, G: LaneGrad>(
        &mut self,
        grad: &G,
        positions: impl Iterator<Item = usize>,
        xs: &[T],
        valid: &impl Fn(usize) -> bool,
        g: LaneG<'_, T::Real>,
        out: &mut [T::Real],
    ) {
        self.x.clear();
        self.g.clear();
        self.at.clear();
        for p in positions {
            if valid(p) {
                self.at.push(p);
                self.x.push(xs[p].to_f64());
                if let LaneG::Each(ge) = g {
                    self.g.push(ge[p].to_f64());
                }
            }
        }
        if self.at.is_empty() {
            return; // a fully masked lane: nothing of it reaches a gradient
        }
        if let LaneG::One(v) = g {
            self.g.push(v);
        }
        self.o.clear();
        self.o.resize(self.x.len(), 0.0);
        grad.grad(&self.x, &self.g, &mut self.o);
        for (&p, &v) in self.at.iter().zip(&self.o) {
            out[p] = <T::Real as Float>::from_f64(v);
        }
    }
}

/// The validity test of flat position `p` (relative to `base`).
fn validity(bits: Option<Bits<'_>>, base: usize) -> impl Fn(usize) -> bool + '_ {
    move |p| bits.is_none_or(|b| b.get(base + p))
}

/// The VJP of a reduction planned by `plan`: `g` holds the upstream gradient of every
/// output position in row-major order; `out` (the input's size, zeroed) receives the
/// gradient.
pub(crate) fn grad_reduce<T: Element, G: LaneGrad>(
    grad: &G,
    xs: &[T],
    bits: Option<Bits<'_>>,
    plan: &ReducePlan,
    g: &[T::Real],
    out: &mut [T::Real],
) {
    debug_assert_eq!(grad.upstream(), Upstream::PerLane);
    let len = plan.lane_len;
    if len == 0 || xs.is_empty() {
        return;
    }
    // reduced dims (of size > 1) all after the kept ones: lane k is the k-th run
    let first = plan
        .reduced
        .iter()
        .zip(&plan.in_shape)
        .position(|(&r, &n)| r && n > 1);
    let trailing = first.is_none_or(|f| {
        plan.reduced[f..]
            .iter()
            .zip(&plan.in_shape[f..])
            .all(|(&r, &n)| r || n == 1)
    });
    if trailing {
        out.par_chunks_mut(len)
            .zip(xs.par_chunks(len))
            .zip(g.par_iter())
            .enumerate()
            .for_each_init(Scratch::default, |s, (k, ((o, x), gk))| {
                let valid = validity(bits, k * len);
                s.lane(grad, 0..len, x, &valid, LaneG::One(gk.to_f64()), o);
            });
        return;
    }
    // general: the lane of each position (row-major over the kept dims), positions
    // grouped by lane in row-major order (a counting sort)
    let lane_of = lane_ids(plan);
    let mut start = vec![0usize; plan.lanes + 1];
    for &l in &lane_of {
        start[l + 1] += 1;
    }
    for k in 0..plan.lanes {
        start[k + 1] += start[k];
    }
    let mut next = start.clone();
    let mut grouped = vec![0usize; lane_of.len()];
    for (p, &l) in lane_of.iter().enumerate() {
        grouped[next[l]] = p;
        next[l] += 1;
    }
    let valid = validity(bits, 0);
    let mut s = Scratch::default();
    for k in 0..plan.lanes {
        let at = grouped[start[k]..start[k + 1]].iter().copied();
        s.lane(grad, at, xs, &valid, LaneG::One(g[k].to_f64()), out);
    }
}

/// The output position (row-major over the kept dims) of every input position.
fn lane_ids(plan: &ReducePlan) -> Vec<usize> {
    let shape = &plan.in_shape;
    // the stride of each input dim in the output (0 for a reduced dim)
    let mut stride = vec![0usize; shape.len()];
    let mut acc = 1;
    for d in (0..shape.len()).rev() {
        if !plan.reduced[d] {
            stride[d] = acc;
            acc *= shape[d];
        }
    }
    let n: usize = shape.iter().product();
    let mut ids = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    let mut lane = 0usize;
    for _ in 0..n {
        ids.push(lane);
        // odometer step
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            lane += stride[d];
            if idx[d] < shape[d] {
                break;
            }
            lane -= stride[d] * idx[d];
            idx[d] = 0;
        }
    }
    ids
}

/// The VJP of a map along dim `d` of `shape`: `g` and `out` have the input's shape
/// (row-major), `out` zeroed.
pub(crate) fn grad_map<T: Element, G: LaneGrad>(
    grad: &G,
    xs: &[T],
    bits: Option<Bits<'_>>,
    shape: &[usize],
    d: usize,
    g: &[T::Real],
    out: &mut [T::Real],
) {
    debug_assert_eq!(grad.upstream(), Upstream::PerElement);
    let n = shape[d];
    let inner: usize = shape[d + 1..].iter().product();
    let block = n * inner;
    if block == 0 || xs.is_empty() {
        return;
    }
    // one block per index of the dims before d: lanes at stride `inner` inside it
    out.par_chunks_mut(block)
        .zip(xs.par_chunks(block))
        .zip(g.par_chunks(block))
        .enumerate()
        .for_each_init(Scratch::default, |s, (b, ((o, x), gb))| {
            let valid = validity(bits, b * block);
            for i in 0..inner {
                let at = (0..n).map(|k| i + k * inner);
                s.lane(grad, at, x, &valid, LaneG::Each(gb), o);
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use masked_core::Dims;

    #[test]
    fn lane_ids_follow_the_kept_dims() {
        // shape [2, 3, 2], reducing dim 1: output [2, 2]
        let plan = ReducePlan::new(&[2, 3, 2], &Dims::from(1), false).unwrap();
        let ids = lane_ids(&plan);
        assert_eq!(ids, [0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3]);
        // reducing dims 0 and 2: output [3]
        let plan = ReducePlan::new(&[2, 3, 2], &Dims::from([0isize, 2]), false).unwrap();
        assert_eq!(lane_ids(&plan), [0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]);
    }
}
