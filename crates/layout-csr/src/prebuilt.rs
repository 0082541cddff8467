//! The CSR lane kernels instantiated in this crate for `f32` and `f64` with `usize`
//! column indices (`Pattern`'s and `CsMat`'s), for every kernel value type of the engine
//! (the core's `prebuilt_kernels!` says why). `CsrLanes`' `MaskedReduce` methods
//! dispatch here.

use crate::CsrLanes;

/// What the kernels read.
type Input<'a, T> = CsrLanes<'a, T, usize>;
masked_core::prebuilt_lanes!(input: Input, dtypes: [f32, f64]);

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
