//! Row-major values of any strided view: what a kernel reads when the caller's buffer is
//! a transpose, a broadcast or a step slice (numpy's `x.T`, `np.broadcast_to`, `x[:, ::2]`).
//!
//! ndarray's element iterator over a dynamic-rank view steps a heap-held index per
//! element (about 20 ns); this copies whole lanes of the last axis instead, after merging
//! the axes that are contiguous with each other, and walks a transposed pair of axes in
//! tiles so that both sides stay in cache.

use ndarray::{ArrayBase, ArrayView1, ArrayView2, ArrayViewD, Axis, Data, Dimension, Ix1, Ix2};
use std::borrow::Cow;

/// The side of the square tiles a transposed pair of axes is copied in.
const TILE: usize = 16;

/// The elements of `a` in row-major (logical) order: borrowed when `a` is in standard
/// layout, gathered otherwise.
pub fn row_major_values<T: Copy, S: Data<Elem = T>, D: Dimension>(
    a: &ArrayBase<S, D>,
) -> Cow<'_, [T]> {
    if let Some(s) = a.as_slice() {
        return Cow::Borrowed(s);
    }
    let mut v = a.view().into_dyn();
    // merge each axis into the next one where one stride walks both (a broadcast or
    // sliced outer axis stays; a contiguous block of axes becomes one)
    for i in (0..v.ndim().saturating_sub(1)).rev() {
        v.merge_axes(Axis(i), Axis(i + 1));
    }
    // and without its length-1 axes (their stride never moves)
    let mut i = 0;
    while i < v.ndim() {
        if v.len_of(Axis(i)) == 1 {
            v = v.index_axis_move(Axis(i), 0);
        } else {
            i += 1;
        }
    }
    let mut out = Vec::with_capacity(a.len());
    gather_into(v, &mut out);
    Cow::Owned(out)
}

/// Appends `v`'s elements in row-major order to `out`.
fn gather_into<T: Copy>(v: ArrayViewD<'_, T>, out: &mut Vec<T>) {
    match v.ndim() {
        0 => out.extend(v.iter().copied()),
        1 => lane(v.into_dimensionality::<Ix1>().expect("rank 1"), out),
        2 => plane(v.into_dimensionality::<Ix2>().expect("rank 2"), out),
        _ => {
            for sub in v.outer_iter() {
                gather_into(sub, out);
            }
        }
    }
}

/// Appends a 1-D view's elements in order: one copy when contiguous.
fn lane<T: Copy>(v: ArrayView1<'_, T>, out: &mut Vec<T>) {
    match v.as_slice() {
        Some(s) => out.extend_from_slice(s),
        // SAFETY: every index is below the view's length
        None => out.extend((0..v.len()).map(|i| unsafe { *v.uget(i) })),
    }
}

/// A 2-D block: row by row, or in tiles when the rows' stride is the shorter one (a
/// transpose, not a broadcast), so that each tile's reads and writes stay in cache.
fn plane<T: Copy>(v: ArrayView2<'_, T>, out: &mut Vec<T>) {
    let (r, c) = v.dim();
    let (sr, sc) = (v.strides()[0].unsigned_abs(), v.strides()[1].unsigned_abs());
    if sr == 0 || sc <= sr || r < TILE || c < TILE {
        for row in v.rows() {
            lane(row, out);
        }
        return;
    }
    let base = out.len();
    out.resize(base + r * c, v[[0, 0]]);
    let dst = &mut out[base..];
    for i0 in (0..r).step_by(TILE) {
        for j0 in (0..c).step_by(TILE) {
            let j1 = (j0 + TILE).min(c);
            for i in i0..(i0 + TILE).min(r) {
                for (j, d) in (j0..j1).zip(&mut dst[i * c + j0..i * c + j1]) {
                    // SAFETY: i < r and j < c, the view's dims
                    *d = unsafe { *v.uget((i, j)) };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::row_major_values;
    use ndarray::{s, Array, ArrayD, IxDyn};

    fn check(v: ndarray::ArrayViewD<'_, i64>) {
        let want: Vec<i64> = v.iter().copied().collect();
        assert_eq!(
            row_major_values(&v).as_ref(),
            want.as_slice(),
            "shape {:?} strides {:?}",
            v.shape(),
            v.strides()
        );
    }

    #[test]
    fn strided_views_gather_in_row_major_order() {
        let a: ArrayD<i64> = Array::from_iter(0..(5 * 70 * 3 * 40))
            .into_shape_with_order(IxDyn(&[5, 70, 3, 40]))
            .unwrap();
        check(a.view());
        check(a.view().reversed_axes());
        check(a.slice(s![.., ..;2, .., 1..]).into_dyn());
        check(a.slice(s![..;-1, .., 1, ..]).into_dyn());
        let mut p = a.view();
        p.swap_axes(1, 3);
        check(p.clone());
        p.swap_axes(0, 2);
        check(p);
        // broadcasts: a row and a column over 64 x 70, and a scalar
        let row = a.slice(s![0, .., 0, 0]).into_dyn();
        check(row.broadcast(IxDyn(&[64, 70])).unwrap());
        let col = a.slice(s![0, .., 0, 0..1]).into_dyn();
        check(col.broadcast(IxDyn(&[2, 70, 33])).unwrap());
        let one = a.slice(s![0, 0, 0, 0..1]).into_dyn();
        check(one.broadcast(IxDyn(&[3, 40, 1, 50])).unwrap());
        check(a.slice(s![1, 2, 0, 3]).into_dyn());
        check(a.slice(s![.., 0..0, .., ..]).into_dyn());
        // a transposed 2-D block that is not a multiple of the tile
        let t = Array::from_iter(0..(33 * 97))
            .into_shape_with_order((33, 97))
            .unwrap();
        check(t.t().into_dyn());
        check(t.slice(s![..;2, ..;3]).t().into_dyn());
    }
}
