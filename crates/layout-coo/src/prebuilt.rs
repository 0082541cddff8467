//! The COO lane kernels instantiated in this crate for `f32` and `f64`, for every kernel
//! value type of the engine (the core's `prebuilt_kernels!` says why). `CooLanes`'
//! `MaskedReduce` methods dispatch here.

use crate::CooLanes;

/// What the kernels read.
type Input<'a, T> = CooLanes<'a, T>;
masked_core::prebuilt_lanes!(input: Input, dtypes: [f32, f64]);

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
