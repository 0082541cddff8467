//! The COO lane kernels instantiated in this crate for `f32` and `f64`, for every kernel
//! value type of the engine (the core's `prebuilt_kernels!` says why). `CooLanes`'
//! `MaskedReduce` methods dispatch here.

use crate::CooLanes;

/// What the kernels read.
type Input<'a, T> = CooLanes<'a, T>;
masked_core::prebuilt_lanes!(input: Input, dtypes: [f32, f64]);
