//! The CSR lane kernels instantiated in this crate for `f32` and `f64` (either column
//! index width: the lanes read them as `Cols`), for every kernel value type of the engine
//! (the core's `prebuilt_kernels!` says why). `CsrLanes`' `MaskedReduce` methods
//! dispatch here.

use crate::CsrLanes;

/// What the kernels read.
type Input<'a, T> = CsrLanes<'a, T>;
masked_core::prebuilt_lanes!(input: Input, dtypes: [f32, f64]);
