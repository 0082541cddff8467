//! # masked
//!
//! Masked reductions and normalizations (the semantics of PyTorch's RFC-0016 and
//! `torch.masked`, with defined values for fully masked lanes) over three layouts:
//! dense `ndarray` arrays with bit-packed masks, CSR matrices and n-D COO arrays.
//!
//! One import gives everything:
//!
//! ```
//! use masked::prelude::*;
//! use ndarray::array;
//!
//! // a padded batch: two sequences of lengths 3 and 1
//! let x = array![[0.5f32, 1.5, 2.0, 9.0], [4.0, 7.0, 7.0, 7.0]];
//! let valid = array![[true, true, true, false], [true, false, false, false]];
//! let a = MaskedArray::from_bool_mask(x.view(), valid.view())?;
//!
//! let mean = a.mean(-1, false)?; // per sequence, padding ignored
//! assert_eq!(mean.values().as_slice().unwrap(), &[4.0 / 3.0, 4.0]);
//! let best = a.argmax(1, false)?;
//! assert_eq!(best.values().as_slice().unwrap(), &[2, 0]);
//! let total = a.sum(Dims::All, false)?; // every valid element
//! assert_eq!(total.values()[[]], 8.0);
//! # Ok::<(), MaskedError>(())
//! ```
//!
//! Masks from indices, for the layout they apply to:
//!
//! | mask | dense ([`BitMask`]) | CSR ([`Pattern`]) | COO ([`CooPattern`]) |
//! |---|---|---|---|
//! | from index arrays | [`BitMask::from_coords`] | [`Pattern::from_coords`] | [`CooPattern::from_coords`], [`CooPattern::from_flat`] |
//! | an array's own stored pattern | | [`Pattern::of`], or [`MaskedCsr::from_pattern`] (no copy) | [`MaskedCoo::pattern`], or [`MaskedCoo::from_pattern`] |
//! | padding, from sequence lengths | [`BitMask::from_lengths`] | [`Pattern::from_lengths`] | [`CooPattern::from_lengths`] (`[batch, len, ...]`) |
//! | causal / banded attention | [`BitMask::causal`], [`BitMask::banded`] | [`Pattern::causal`], [`Pattern::banded`] | via CSR: [`MaskedCoo::try_from`] a [`MaskedCsr`] |
//! | from a dense bool array | [`BitMask::from_bools`] | [`Pattern::from_dense`] | [`CooPattern::from_bools`] |
//! | from a predicate over values | `BitMask::from_bools(shape, x.iter().map(pred))` | [`Pattern::from_predicate`] | `CooPattern::from_flat` of the positions kept |
//!
//! Conversions carry masks along: dense ↔ COO with `From` / `TryFrom`, CSR ↔ COO with
//! `TryFrom` and [`MaskedCoo::to_csr`], dense ↔ CSR with [`coo::dense_to_csr`] and
//! [`coo::csr_to_dense`].
//!
//! Each validates and returns a typed error naming the bad entry.
//!
//! The semantics (masks, dims, fully masked lanes, NaN, integer widening) are in
//! `docs/semantics.md`; the design in `docs/architecture.md`.
#![deny(missing_docs)]

pub mod by_name;

pub use layout_coo as coo;
pub use layout_csr as csr;
pub use layout_dense as dense;

pub use layout_coo::{CooLanes, CooMask, CooPattern, MaskedCoo};
pub use layout_csr::{to_csmat, to_csvec, CsrLanes, CsrMapped, CsrMask, MaskedCsr, Pattern};
pub use layout_dense::{MaskedArray, MaskedArrayD, MaskedView};
pub use masked_core::{
    binary, half, lane, ops, registry, sparse, stats, unary, with_dtype, with_dyn_vec, BitMask,
    Bits, DType, Dims, DynVec, Element, Float, Fold, Interpolation, LaneKernels, LaneMap, LaneStat,
    MaskLogic, MaskRule, MaskedBinaryOps, MaskedError, MaskedOps, MedianMode, Op, ReducePlan,
    Result, Scalar, SparseArray, Splat, Value, Values, ZipKernels, ZipMap,
};

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The guide's pipelines (docs/guide.md), compiled and run as doctests.
#[doc = include_str!("../../../docs/guide.md")]
#[cfg(doctest)]
pub struct GuideDoctests;

/// Everything a user of the engine needs in scope.
pub mod prelude {
    pub use crate::{
        BitMask, CooMask, CooPattern, DType, Dims, Element, Interpolation, MaskLogic, MaskRule,
        MaskedArray, MaskedArrayD, MaskedBinaryOps, MaskedCoo, MaskedCsr, MaskedError, MaskedOps,
        MaskedView, MedianMode, Op, Pattern, Result, SparseArray, Splat, ZipKernels,
    };
}
