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
//! Masks, for the layout they apply to, with one vocabulary: the same name and the same
//! arguments build the same positions in each, and every constructor returns a
//! [`Result`]. A shape is anything [`ShapeLike`]: `[2, 3]`, `&shape[..]`, a `Vec`,
//! `(rows, cols)`.
//!
//! | mask | dense ([`BitMask`]) | CSR ([`Pattern`]) | COO ([`CooPattern`]) |
//! |---|---|---|---|
//! | from index arrays, one per dim | [`BitMask::from_coords`] | [`Pattern::from_coords`](PatternI::from_coords) | [`CooPattern::from_coords`] |
//! | from bools in row-major order | [`BitMask::from_bools`] | [`Pattern::from_bools`](PatternI::from_bools) | [`CooPattern::from_bools`] |
//! | from an `ndarray` bool array | [`BitMask::from_array`] | [`Pattern::from_array`](PatternI::from_array) | [`CooPattern::from_array`] |
//! | padding, `[batch, len, ...]` from lengths | [`BitMask::from_lengths`] | [`Pattern::from_lengths`](PatternI::from_lengths) | [`CooPattern::from_lengths`] |
//! | causal / banded attention | [`BitMask::causal`], [`BitMask::banded`] | [`Pattern::causal`](PatternI::causal), [`Pattern::banded`](PatternI::banded) | [`CooPattern::causal`], [`CooPattern::banded`] |
//! | every position | [`BitMask::full`] | [`Pattern::full`](PatternI::full) | [`CooPattern::full`] |
//! | an array's own stored pattern | | [`Pattern::of`](PatternI::of), or [`MaskedCsr::from_pattern`] (no copy) | [`MaskedCoo::pattern`], or [`MaskedCoo::from_pattern`] |
//! | from a predicate over values | [`MaskedArray::predicate`] | [`Pattern::from_predicate`](PatternI::from_predicate) | [`MaskedCoo::predicate`] |
//!
//! Masks combine with `&`, `|`, `^` on references and `!` (dense): the result is a
//! [`Result`], never a panic. Dense masks broadcast by NumPy rules, so a `[batch, 1, len]`
//! padding mask and a `[len, len]` causal mask give the `[batch, len, len]` attention
//! mask:
//!
//! ```
//! use masked::prelude::*;
//! let pad = BitMask::from_lengths([2, 3], &[3, 1])?.reshape([2, 1, 3])?;
//! let attention = (&pad & &BitMask::causal(3)?)?;
//! assert_eq!(attention.shape(), &[2, 3, 3]);
//! assert_eq!(attention.count_ones(), 6 + 3);
//! # Ok::<(), MaskedError>(())
//! ```
//!
//! Results are inputs: a dense normalization keeps the input's dimension type, a
//! reduction's [`MaskedArrayD`] takes one [`MaskedArray::into_dimensionality`] call; a
//! CSR result ([`CsrMapped`]) is the next op's input by reference or a plain `CsMat`
//! with [`IntoCsMat::into_csmat`]; a COO normalization is a [`MaskedCoo`] and a sparse
//! reduction's [`SparseArray`] becomes one with `From`. Every result has `filled(value)`
//! for code that wants plain arrays.
//!
//! Conversions carry masks along: dense ↔ COO with `From` / `TryFrom`, CSR ↔ COO with
//! [`csr_to_coo`] and [`MaskedCoo::to_csr`], dense ↔ CSR with [`dense_to_csr`] and
//! [`csr_to_dense`].
//!
//! Each validates and returns a typed error naming the bad entry.
//!
//! Depending on `masked` from another crate: the kernels are generic, so they are
//! compiled in the crate that uses them, at its optimisation level; a debug build of a
//! dependent runs them 5-100x slower. `docs/guide.md` ("Using masked from your crate")
//! has the profile settings that fix it, measured.
//!
//! The semantics (masks, dims, fully masked lanes, NaN, integer widening) are in
//! `docs/semantics.md`; the design in `docs/architecture.md`.
#![deny(missing_docs)]

/// The dtype-erased boundary: with the `engine` feature, `engine::Array` holds any
/// layout and dtype and runs any op by name, compiled once (off by default: it compiles
/// every op for every dtype and layout, which a user of the typed API does not need).
#[doc(inline)]
pub use masked_engine as engine;
/// Ops by name on typed inputs: the registry's dispatcher with each layout's result
/// conversion (the typed half of the engine's by-name path).
#[doc(inline)]
pub use masked_engine::by_name;

/// Files, with the `io` feature: `.npy` values and masks, Matrix Market and COO `.npz`
/// sparse arrays, every declared size checked against a memory ceiling before
/// allocating.
#[cfg(feature = "io")]
#[doc(inline)]
pub use masked_io as io;

/// Sparse attention and message passing on a CSR pattern: SDDMM, SpMM and fused
/// `softmax(scale · Q Kᵀ + bias) V` with their gradients, in O(nnz + n·d) memory.
#[doc(inline)]
pub use masked_attention as attention;

/// The COO layout: n-D coordinate arrays with a sparse mask, and the conversions between
/// the layouts.
#[doc(inline)]
pub use layout_coo as coo;
/// The CSR layout: `sprs` matrices with a sparse mask.
#[doc(inline)]
pub use layout_csr as csr;
/// The dense layout: `ndarray` arrays with a bit-packed mask.
#[doc(inline)]
pub use layout_dense as dense;
/// The layout-independent core: the op registry, folds, lane statistics, masks, dtypes.
#[doc(inline)]
pub use masked_core as core;
/// Which CPU tiers the vector kernels were compiled for (`cpu::BUILT_FOR`) and whether
/// this CPU runs them (`cpu::check`): a build from this repository compiles its build
/// machine's tier only (`MASKED_CPU=native`), a dependent all of them (`portable`).
#[doc(inline)]
pub use masked_core::cpu;
/// How many threads the engine's parallel loops run on: `set_threads(1)` puts every
/// call on one core (a server's threads side by side), `set_threads(0)` restores the
/// default (`RAYON_NUM_THREADS`, else one per core).
#[doc(inline)]
pub use masked_core::{set_threads, threads};
/// Running the engine's parallel loops on another library's OpenMP threads (torch's
/// intra-op threads, whose workers spin on the cores after each of its ops): `with_team`
/// around the calls made beside it.
#[doc(inline)]
pub use masked_core::{with_team, OpenMpMaxThreads, OpenMpParallel, OpenMpTeam};

pub use layout_coo::{dense_to_csr, CooGradients, CooMask, CooPattern, CooZipView, MaskedCoo};
pub use layout_csr::{
    to_csmat, to_csvec, CsrFilled, CsrGradients, CsrMapped, CsrMask, CsrZipView, IntoCsMat,
    IntoCsrView, MaskedCsr, Pattern, PatternI,
};
pub use layout_dense::{MaskedArray, MaskedArrayD, MaskedView};
pub use masked_core::{
    binary, cast, check_lengths, dims, element, fold, grad, half, lane, mask, math, ops, registry,
    sparse, stats, unary, wire, with_dtype, with_dyn_vec, BitMask, Bits, BoolArray, DType, DimLike,
    Dims, DynVec, Element, Float, Fold, GradVisitor, Interpolation, Kind, LaneGrad, LaneMap,
    LaneStat, MaskLogic, MaskRule, MaskedBinaryOps, MaskedError, MaskedOps, MaskedReduce,
    MedianMode, Num, OneDim, Op, ReducePlan, Result, Scalar, ShapeLike, SparseArray, Splat, Value,
    Values, WireNum, ZipKernels, ZipMap,
};
pub use masked_engine::{csr_to_coo, csr_to_dense};

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
        BitMask, CooMask, CooPattern, CsrFilled, CsrMask, DType, Dims, Element, Interpolation,
        IntoCsMat, MaskLogic, MaskRule, MaskedArray, MaskedArrayD, MaskedBinaryOps, MaskedCoo,
        MaskedCsr, MaskedError, MaskedOps, MaskedReduce, MaskedView, MedianMode, Op, Pattern,
        PatternI, Result, SparseArray, Splat, ZipKernels,
    };
}
