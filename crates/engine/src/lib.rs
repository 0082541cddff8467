//! # masked-engine
//!
//! The dtype-erased boundary of the masked engine. An `Array` holds a masked array of
//! any layout (dense, CSR, COO) and any dtype; its `ArrayRef` runs any op of the
//! registry by name (`ArrayRef::apply`, `ArrayRef::run`), casts (`ArrayRef::cast`) and
//! VJPs (`ArrayRef::vjp`). Every match from a run-time
//! dtype and layout to the typed engine is written here, once, and compiled once, in
//! this crate: the CLI, `masked bench`, the sweep, the test crates and a Python
//! extension call these functions and instantiate no generic engine code themselves.
//!
//! [`by_name`] is the typed half of the same path: the registry's dispatcher with each
//! layout's result conversion, for code that holds typed inputs.
//!
//! `Array`, `ArrayRef` and the bench workloads compile every op for every dtype and
//! layout: they are behind the `erased` feature (the facade's `engine` feature), so a
//! crate using only the typed API does not compile them.
#![deny(missing_docs)]

#[cfg(feature = "erased")]
pub mod array;
pub mod by_name;
pub mod layouts;
#[cfg(feature = "erased")]
pub mod workload;

#[cfg(feature = "erased")]
pub use array::{
    convert, Array, ArrayRef, CooOf, CsrOf, CsrParts, CsrViewOf, DenseOf, DenseViewOf, LaneMoments,
    Operand,
};
pub use by_name::{
    promote, promote_scalar, BinOp, CooOutcome, CsrCols, CsrOutcome, CsrZipOutcome, Kind, Op,
    OpRequest, Outcome, Output, SparseOutcome, SparseZipOutcome, ZipOutcome, ZipOutput,
};
pub use layout_coo::CooMask;
pub use layout_csr::CsrMask;
pub use layouts::{csr_to_coo, csr_to_dense};
