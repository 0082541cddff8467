//! What ties the ops to the layouts: the layout contract (`MaskedReduce`, `ZipKernels`),
//! the op registry (names, options, dispatch, gradients: `registry`) and the kernels
//! a layout compiles in its own crate (`prebuilt`).

pub mod into;
pub mod layout;
pub mod prebuilt;
pub mod registry;
