//! # masked-sparse
//!
//! The sparse lane engine of the `masked` engine: the kernels over a compressed row
//! structure that the CSR and COO layouts both drive, as siblings. A [`CsrLanes`] is a
//! row structure (row pointer, column indices of either width as [`Cols`], values, an
//! optional validity bit per entry, whether unstored positions are valid zeros); every
//! op of `MaskedOps` runs on it: folds, statistics and maps along rows, columns or all
//! entries, their VJPs, zips with a scalar, another structure or a dense operand
//! ([`DenseOperand`]), and fused views that compute their values a row task at a time
//! ([`FusedLanes`]). The CSR layout hands it a matrix and its mask; the COO layout its
//! entries grouped into rows by the kept dims. Index patterns ([`PatternI`]) and the CSR
//! mask kinds ([`CsrMask`]) live here too: both layouts build and read them.
//!
//! Work is split into row tasks of about the same entry count; results do not depend on
//! the thread count.
#![deny(missing_docs)]

mod cols;
mod compiled;
mod lanes;
mod operand;
mod partition;
mod pattern;

pub use cols::{Cols, ColsBuf, CsrIndex, LanesMapped};
pub use lanes::{
    computed_view, csr_parts, entry_view, CsrLanes, CsrMapped, CsrZipView, DynEntries, EntryValues,
    FusedLanes, MappedParts, Rows, ZipEntries,
};
pub use operand::{DenseOperand, Entries, EntryOther, EntryRhs};
pub use pattern::{CsrMask, Pattern, PatternI};
