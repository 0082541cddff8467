//! The COO lane kernels instantiated in this crate for `f32` and `f64`, for every kernel
//! value type of the engine (the core's `prebuilt_kernels!` says why). `CooLanes`'
//! `LaneKernels` methods dispatch here.

use crate::CooLanes;
use masked_core::{Dims, Element, Fold, LaneMap, LaneStat, Result, SparseArray};

/// What the kernels read.
type Input<'a, T> = CooLanes<'a, T>;
type FoldOut<'a, T, K> = Result<SparseArray<<K as Fold<T>>::Output>>;
type StatOut<'a, T, K> = Result<SparseArray<<K as LaneStat<T>>::Output>>;
type MapOut<'a, T, K> = Result<SparseArray<<K as LaneMap<T>>::Output>>;

fn fold<'a, T: Element, K: Fold<T>>(
    op: &K,
    l: &Input<'a, T>,
    dims: &Dims,
    keepdim: bool,
) -> FoldOut<'a, T, K> {
    l.kernel_fold_lanes(op, dims, keepdim)
}

fn stat<'a, T: Element, K: LaneStat<T>>(
    op: &K,
    l: &Input<'a, T>,
    dims: &Dims,
    keepdim: bool,
) -> StatOut<'a, T, K> {
    l.kernel_stat_lanes(op, dims, keepdim)
}

fn map<'a, T: Element, K: LaneMap<T>>(op: &K, l: &Input<'a, T>, dim: isize) -> MapOut<'a, T, K> {
    l.kernel_map_lanes(op, dim)
}

fn map_each<'a, T: Element, K: LaneMap<T>>(
    op: &K,
    l: &Input<'a, T>,
    zero_preserving: bool,
) -> MapOut<'a, T, K> {
    l.kernel_map_elements(op, zero_preserving)
}

masked_core::prebuilt_kernels! {
    input: Input,
    dtypes: [f32, f64],
    fold fold_lanes(dims: &Dims, keepdim: bool) -> FoldOut = fold;
    stat stat_lanes(dims: &Dims, keepdim: bool) -> StatOut = stat;
    map map_lanes(dim: isize) -> MapOut = map;
    map map_elements(zero_preserving: bool) -> MapOut = map_each;
}

#[cfg(all(test, feature = "prebuilt"))]
mod tests {
    use crate::{CooPattern, MaskedCoo};
    use masked_core::prebuilt::{run_every_op, FALLBACKS};
    use std::sync::atomic::Ordering;

    /// Every op of the registry on `f32` and `f64` (stored pattern, separate mask, no
    /// mask; 3-d) runs a kernel compiled here.
    #[test]
    fn every_op_runs_a_kernel_compiled_here() {
        let coords = [vec![0, 0, 1, 1], vec![0, 2, 1, 2], vec![1, 0, 1, 0]];
        let mask = CooPattern::from_lengths([2, 3, 2], &[2, 3]).unwrap();
        let v = vec![1.0f32, -2.0, 3.0, 0.5];
        let w: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
        run_every_op(&MaskedCoo::from_pattern([2, 3, 2], &coords, v.clone()).unwrap());
        run_every_op(&MaskedCoo::with_mask([2, 3, 2], &coords, v.clone(), mask.clone()).unwrap());
        run_every_op(&MaskedCoo::unmasked([2, 3, 2], &coords, v).unwrap());
        run_every_op(&MaskedCoo::from_pattern([2, 3, 2], &coords, w.clone()).unwrap());
        run_every_op(&MaskedCoo::with_mask([2, 3, 2], &coords, w, mask).unwrap());
        assert_eq!(FALLBACKS.load(Ordering::Relaxed), 0);
    }
}
