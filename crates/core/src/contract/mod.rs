//! What ties the ops to the layouts: the layout contract (`MaskedReduce`, `ZipKernels`),
//! the op registry (names, options, dispatch, gradients: `registry`) and the kernels
//! a layout compiles in its own crate (`compiled`).

pub mod compiled;
pub mod into;
pub mod layout;
pub mod registry;
