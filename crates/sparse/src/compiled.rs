//! The CSR lane kernels compiled in this crate for `f32` and `f64` (either column index
//! width: the lanes read them as `Cols`), for every listed kernel value type (the core's
//! `compiled` module says why). `CsrLanes`' `MaskedReduce` methods dispatch here.

use crate::CsrLanes;

masked_core::compiled_lanes!(input: CsrLanes);
