//! The COO lane kernels compiled in this crate for `f32` and `f64`, for every listed
//! kernel value type (the core's `compiled` module says why). `CooLanes`'
//! `MaskedReduce` methods dispatch here.

use crate::CooLanes;

masked_core::compiled_lanes!(input: CooLanes);
