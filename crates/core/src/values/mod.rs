//! The values every layout shares: bit masks, dims and reduce plans, sparse results and
//! the error type.

pub mod dims;
pub mod error;
pub mod gather;
pub mod mask;
pub mod sparse;
