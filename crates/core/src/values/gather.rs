//! Row-major values of any strided view: what a kernel reads when the caller's buffer is
//! a transpose, a broadcast or a step slice (numpy's `x.T`, `np.broadcast_to`, torch's
//! `expand`, `x[:, ::2]`).
//!
//! ndarray's element iterator over a dynamic-rank view steps a heap-held index per
//! element (about 20 ns); this merges the axes that are contiguous with each other, then
//! writes the result in tasks of whole rows of the last two axes: a contiguous row is
//! copied, a broadcast one filled, and a transposed pair of axes (the rows' stride the
//! unit one) moved with the kernels' tile transposes, so that both sides stay in cache.

use masked_kernels::par;
/// The value types [`row_major_values`] gathers: numbers and `bool` (a transposed pair
/// of 4- or 8-byte numbers is moved in tiles whose source spans the values between its
/// rows, every bit pattern of which is a number).
pub use masked_kernels::ZeroBits;
use ndarray::{s, ArrayBase, ArrayView1, ArrayView2, ArrayViewD, Axis, Data, Dimension, Ix1, Ix2};
use std::borrow::Cow;
use std::mem::MaybeUninit;

/// Elements a parallel task should at least cover.
const GRAIN: usize = 1 << 15;
/// The rows of a transposed pair moved as one block: 16 (for `f32`, each source row's
/// cache line and page read once a block; 8 rows took 9.4 ms for a 4096² `f32`
/// transpose against 6.8, 32 rows 10.9; a `bool` one took 9.0 ms, 14.5 at 64 rows).
const BLOCK: usize = 16;
/// The most columns of a transposed block moved at once (its source rows then stay in
/// the cache's sets and the TLB while the block's rows are read).
const COLS: usize = 256;

/// The elements of `a` in row-major (logical) order: borrowed when `a` is in standard
/// layout, gathered otherwise (in parallel, into a fresh buffer).
pub fn row_major_values<T: ZeroBits + Send + Sync, S: Data<Elem = T>, D: Dimension>(
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
    // every slot is written below, none zeroed first
    let mut out = masked_kernels::fresh_capacity::<T>(a.len());
    let slots = &mut out.spare_capacity_mut()[..a.len()];
    match v.ndim() {
        0 => {
            slots[0].write(v[[]]);
        }
        // one lane: a step slice (of a whole array too: its rows merge into one lane) or
        // a broadcast value, in tasks of a stretch each
        1 => {
            let v = v.into_dimensionality::<Ix1>().expect("rank 1");
            par::chunks_mut(slots, 2 * GRAIN, |t, d| {
                strided_row(v.slice(s![t * 2 * GRAIN..]), d)
            });
        }
        _ => gather_into(&v, slots),
    }
    // SAFETY: the writers above wrote each of the first `a.len()` slots (a panic in one
    // leaves the length 0)
    unsafe { out.set_len(a.len()) };
    Cow::Owned(out)
}

/// A view broadcast along its leading axes (stride 0, as torch's `expand` of an upstream
/// gradient, numpy's `broadcast_to`) as one period of its row-major values and the
/// number of times the period repeats: the values over the axes after the broadcast
/// ones (borrowed where they lie contiguous, else gathered; never the last axis, so a
/// period holds at least one whole row). `None` where the first axis longer than 1 is
/// not broadcast (or the view is contiguous): there is nothing to save.
pub fn repeated_values<'a, T: ZeroBits + Send + Sync, S: Data<Elem = T>, D: Dimension>(
    a: &'a ArrayBase<S, D>,
) -> Option<(Cow<'a, [T]>, usize)> {
    if a.is_standard_layout() || a.ndim() < 2 {
        return None;
    }
    let mut v = a.view().into_dyn();
    let mut times = 1usize;
    while v.ndim() > 1 && (v.len_of(Axis(0)) == 1 || v.strides()[0] == 0) {
        times *= v.len_of(Axis(0));
        v = v.index_axis_move(Axis(0), 0);
    }
    if times < 2 {
        return None;
    }
    let period = match v.to_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(row_major_values(&v).into_owned()),
    };
    Some((period, times))
}

/// Writes `v`'s elements (rank 2 or more) in row-major order into `out`: tasks of whole
/// planes of the last two axes, or of a few rows of one large plane.
fn gather_into<T: Copy + Send + Sync>(v: &ArrayViewD<'_, T>, out: &mut [MaybeUninit<T>]) {
    let nd = v.ndim();
    let (r, c) = (v.len_of(Axis(nd - 2)), v.len_of(Axis(nd - 1)));
    let plane = r * c;
    if plane == 0 {
        return;
    }
    // the rows of a task: whole blocks of rows near the grain
    let rows = (GRAIN / c).next_multiple_of(BLOCK).max(BLOCK);
    let planes = (GRAIN / plane).max(1);
    par::chunks_mut(out, plane * planes, |t, po| {
        for (k, dst) in po.chunks_mut(plane).enumerate() {
            let p = plane_of(v, t * planes + k);
            if plane < 2 * GRAIN {
                rows_into(&p, 0, dst);
            } else {
                par::chunks_mut(dst, rows * c, |b, d| rows_into(&p, b * rows, d));
            }
        }
    });
}

/// Plane `p` (in row-major order over the leading axes) of a view of rank 2 or more.
fn plane_of<'a, T>(v: &ArrayViewD<'a, T>, mut p: usize) -> ArrayView2<'a, T> {
    let mut w = v.clone();
    while w.ndim() > 2 {
        let inner: usize = w.shape()[1..w.ndim() - 2].iter().product();
        w = w.index_axis_move(Axis(0), p / inner);
        p %= inner;
    }
    w.into_dimensionality::<Ix2>().expect("rank 2")
}

/// Rows `i0..` of the plane `v` into `dst` (whole rows of `v`'s width).
fn rows_into<T: Copy>(v: &ArrayView2<'_, T>, i0: usize, dst: &mut [MaybeUninit<T>]) {
    let c = v.ncols();
    let n = dst.len() / c;
    let (sr, sc) = (v.strides()[0], v.strides()[1]);
    if sc == 1 || sc == 0 || sc.unsigned_abs() <= sr.unsigned_abs() {
        // rows copied, filled (a broadcast row) or read at their stride
        for (k, d) in dst.chunks_mut(c).enumerate() {
            strided_row(v.row(i0 + k), d);
        }
        return;
    }
    let size = std::mem::size_of::<T>();
    if sr == 1 && sc > 0 && sc as usize >= n.min(BLOCK) && (size == 4 || size == 8) {
        // a transposed pair: the view's columns are memory rows `sc` apart, so a block
        // of rows `i0 + k0..` is a tile of `c` memory rows, `BLOCK` values (64 bytes for
        // `f32`: a source row's cache line and page visited once a block) wide
        for k0 in (0..n).step_by(BLOCK) {
            let h = BLOCK.min(n - k0);
            let base = v.row(i0 + k0).as_ptr();
            for j0 in (0..c).step_by(COLS) {
                let w = COLS.min(c - j0);
                // SAFETY: the view's elements (i0 + k0 + k, j0 + j), k < h, j < w, are at
                // `base + (j0 + j) sc + k`, all inside the one allocation the view
                // borrows (strides positive): the slice spans them and what lies
                // between them, the same buffer's values, of a 4- or 8-byte type that
                // the engine's views hold (a number: every bit pattern a value),
                // read-only while `v` is borrowed.
                let src = unsafe {
                    std::slice::from_raw_parts(
                        base.add(j0 * sc as usize),
                        (w - 1) * sc as usize + h,
                    )
                };
                let at = &mut dst[k0 * c + j0..];
                assert!(at.len() >= (h - 1) * c + w, "a tile inside the rows");
                // SAFETY: the tile's slots `j * c + k`, j < h, k < w, lie in `at`
                // (checked), borrowed mutably; moving bits initialises them
                unsafe {
                    masked_kernels::transpose::transpose_raw(
                        src,
                        (w, h, sc as usize),
                        at.as_mut_ptr().cast::<T>(),
                        c,
                    )
                };
            }
        }
        return;
    }
    // another transposed pair: square tiles, a value at a time
    for k0 in (0..n).step_by(BLOCK) {
        for j0 in (0..c).step_by(BLOCK) {
            let j1 = (j0 + BLOCK).min(c);
            for k in k0..(k0 + BLOCK).min(n) {
                for (j, d) in (j0..j1).zip(&mut dst[k * c + j0..k * c + j1]) {
                    // SAFETY: i0 + k < the view's rows and j < c
                    d.write(unsafe { *v.uget((i0 + k, j)) });
                }
            }
        }
    }
}

/// `dst[j] = row[j]` for the first `dst.len()` values of a row: copied when contiguous,
/// filled when its stride is 0 (one value), else read at its stride.
fn strided_row<T: Copy>(row: ArrayView1<'_, T>, dst: &mut [MaybeUninit<T>]) {
    if let Some(s) = row.as_slice() {
        let s = &s[..dst.len()];
        // SAFETY: `dst` holds `s.len()` slots, borrowed mutably, apart from `s`
        unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), dst.as_mut_ptr().cast(), s.len()) };
        return;
    }
    if row.strides()[0] == 0 {
        let x = row[0];
        for d in dst.iter_mut() {
            d.write(x);
        }
        return;
    }
    for (j, d) in dst.iter_mut().enumerate() {
        // SAFETY: j < dst's length, at most the row's
        d.write(unsafe { *row.uget(j) });
    }
}

#[cfg(test)]
mod tests {
    use super::{repeated_values, row_major_values};
    use ndarray::{s, Array, Array2, ArrayD, IxDyn};

    /// The period of broadcasts over leading axes: a row, a plane, a broadcast value
    /// (its period one row of the last axis); none for contiguous or transposed views,
    /// or a broadcast that starts after the first axis.
    #[test]
    fn repeated_values_are_one_period() {
        let row = Array::from_vec(vec![1.0f32, 2.0, 3.0]);
        let b = row.broadcast((4, 3)).unwrap();
        let (p, t) = repeated_values(&b).unwrap();
        assert_eq!((&p[..], t), (&[1.0, 2.0, 3.0][..], 4));
        assert!(matches!(p, std::borrow::Cow::Borrowed(_)));
        let plane = Array::from_shape_fn((2, 3), |(i, j)| (i * 3 + j) as f32);
        let b = plane.broadcast((5, 2, 3)).unwrap();
        let (p, t) = repeated_values(&b).unwrap();
        assert_eq!((&p[..], t), (&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0][..], 5));
        let one = ArrayD::from_elem(IxDyn(&[]), 7.0f32);
        let b = one.broadcast(IxDyn(&[3, 1, 4])).unwrap();
        let (p, t) = repeated_values(&b).unwrap();
        assert_eq!((&p[..], t), (&[7.0; 4][..], 3));
        // the columns of a transposed plane, broadcast: its period gathered
        let pt = plane.t();
        let b = pt.broadcast((2, 3, 2)).unwrap();
        let (p, t) = repeated_values(&b).unwrap();
        assert_eq!((&p[..], t), (&[0.0, 3.0, 1.0, 4.0, 2.0, 5.0][..], 2));
        assert!(repeated_values(&Array2::<f32>::zeros((4, 3))).is_none());
        assert!(repeated_values(&plane.t()).is_none());
        let col = Array::from_shape_vec((3, 1), vec![1.0f32, 2.0, 3.0]).unwrap();
        let b = col.broadcast((3, 4)).unwrap();
        assert!(repeated_values(&b).is_none());
    }

    fn check<T: super::ZeroBits + Send + Sync + std::fmt::Debug + PartialEq>(
        v: ndarray::ArrayViewD<'_, T>,
    ) {
        let want: Vec<T> = v.iter().copied().collect();
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

    #[test]
    fn large_views_gather_in_parallel_tasks_and_tile_transposes() {
        // planes past two grains (split into row tasks), transposed with the unit stride
        // on the rows (the tile transposes, 4- and 8-byte values, edges that are not
        // whole blocks, a column stride longer than the rows), and the other paths
        let (r, c) = (333, 517);
        let a32: Array<f32, _> = Array::from_iter((0..r * c).map(|i| i as f32))
            .into_shape_with_order((r, c))
            .unwrap();
        let a64 = a32.mapv(|x| x as i64);
        check(a32.t().into_dyn());
        check(a64.t().into_dyn());
        check(a32.slice(s![..300, 5..]).t().into_dyn());
        check(a64.slice(s![1.., ..;3]).t().into_dyn());
        check(a32.slice(s![..;-1, ..]).t().into_dyn());
        check(a32.slice(s![.., ..;-2]).into_dyn());
        // many small transposed planes, in tasks of several planes
        let b: ArrayD<f32> = Array::from_iter((0..(900 * 9 * 11)).map(|i| i as f32))
            .into_shape_with_order(IxDyn(&[900, 9, 11]))
            .unwrap();
        let mut p = b.view();
        p.swap_axes(1, 2);
        check(p);
        let mut q = b.view();
        q.swap_axes(0, 2);
        check(q);
        // broadcasts of a row, a column and one value over large planes (torch's
        // `expand`, numpy's `broadcast_to`: rows filled)
        let row = a32.slice(s![3, ..]).into_dyn();
        check(row.broadcast(IxDyn(&[200, c])).unwrap());
        let col = a32.slice(s![.., 7..8]).into_dyn();
        check(col.broadcast(IxDyn(&[2, r, 300])).unwrap());
        let one = a32.slice(s![0, 0..1]).into_dyn();
        check(one.broadcast(IxDyn(&[400, 300])).unwrap());
        // a step slice of a whole array (its rows merge into one lane of 86247 values,
        // in tasks of a stretch), one long strided lane, and bools
        let even: Array<f32, _> = Array::from_iter((0..333 * 518).map(|i| i as f32))
            .into_shape_with_order((333, 518))
            .unwrap();
        check(even.slice(s![.., ..;2]).into_dyn());
        check(even.slice(s![.., 1..;2]).into_dyn());
        check(a32.slice(s![.., 2]).into_dyn());
        let bits = a64.mapv(|x| x % 3 == 0);
        check(bits.t().into_dyn());
        check(bits.slice(s![.., ..;2]).into_dyn());
    }
}
