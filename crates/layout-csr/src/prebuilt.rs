//! The CSR lane kernels instantiated in this crate for `f32` and `f64` with `usize`
//! column indices (`Pattern`'s and `CsMat`'s), for every kernel value type of the engine
//! (the core's `prebuilt_kernels!` says why). `CsrLanes`' `LaneKernels` methods
//! dispatch here.

use crate::{CsrLanes, CsrMapped};
use masked_core::{Dims, Element, Fold, LaneMap, LaneStat, Result, SparseArray};

/// What the kernels read.
type Input<'a, T> = CsrLanes<'a, T, usize>;
type FoldOut<'a, T, K> = Result<SparseArray<<K as Fold<T>>::Output>>;
type StatOut<'a, T, K> = Result<SparseArray<<K as LaneStat<T>>::Output>>;
type MapOut<'a, T, K> = Result<CsrMapped<'a, <K as LaneMap<T>>::Output, usize>>;

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
    use crate::{MaskedCsr, Pattern};
    use masked_core::prebuilt::{run_every_op, FALLBACKS};
    use std::sync::atomic::Ordering;

    /// Every op of the registry on `f32` and `f64` (`usize` indices; stored pattern,
    /// separate mask, no mask) runs a kernel compiled here.
    #[test]
    fn every_op_runs_a_kernel_compiled_here() {
        let m = sprs::CsMat::new(
            (3, 4),
            vec![0, 2, 2, 5],
            vec![0, 3, 0, 1, 2],
            vec![1.0f32, -2.0, 3.0, 0.5, 4.0],
        );
        let mask = Pattern::from_lengths([3, 4], &[2, 0, 3]).unwrap();
        let d = m.map(|&v| f64::from(v));
        run_every_op(&MaskedCsr::from_pattern(&m).unwrap());
        run_every_op(&MaskedCsr::with_mask(&m, mask.clone()).unwrap());
        run_every_op(&MaskedCsr::unmasked(&m).unwrap());
        run_every_op(&MaskedCsr::from_pattern(&d).unwrap());
        run_every_op(&MaskedCsr::with_mask(&d, mask).unwrap());
        assert_eq!(FALLBACKS.load(Ordering::Relaxed), 0);
    }
}
