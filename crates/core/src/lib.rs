//! # masked-core
//!
//! The small core every layout of the `masked` engine shares:
//!
//! - [`Element`]: the value types (`f32`, `f64`, `i32`, `i64`) and how each op widens them;
//! - [`Dims`] and [`ReducePlan`]: which dims an op reduces and the shapes that follow;
//! - [`BitMask`] and [`Bits`]: bit-packed validity masks;
//! - [`Fold`]: an op written once as identity / push / merge / finish, with a vector fast
//!   path through the kernels crate's `Lanes` and `fold_run`;
//! - [`ops`]: the op values ([`ops::Sum`], [`ops::Mean`], ...);
//! - [`MaskedReduce`]: the contract a layout implements (fold, compute a statistic of, or
//!   map each lane);
//! - [`registry`]: every op declared once ([`Op`]), and from it [`MaskedOps`], the op
//!   methods every layout gets, and the by-name dispatcher [`apply_to`];
//! - [`SparseArray`]: the sparse result of a reduction over a sparse layout;
//! - [`MaskedError`]: the one error type.
//!
//! ```
//! use masked::{ops::Sum, Bits, Fold};
//! let xs = [1.0f32, 2.0, f32::NAN, 4.0];
//! let valid = [0b1011u64]; // element 2 (the NaN) is masked out
//! let state = Sum.fold_slice(&xs, Some(Bits::new(&valid, 0)));
//! assert_eq!(Fold::<f32>::finish(&Sum, &state), 7.0);
//! ```
#![deny(missing_docs)]

// the rooms: the dtype table, the shared values, the op definitions by family, and the
// contract between ops and layouts; each module keeps its path at the crate's root
mod contract;
mod dtype;
mod opdefs;
mod values;

/// What the layouts' unit tests share: not part of the API.
#[doc(hidden)]
pub mod testing;

pub use contract::{compiled, into, layout, registry};
pub use dtype::{element, math, wire};
pub use opdefs::{binary, cast, columns, fold, grad, lane, ops, scattered, stats, unary};
pub use values::{dims, error, gather, mask, sparse};

pub use binary::{MaskRule, Splat, Value, Values, ZipMap};
pub use dims::{wrap_dim, DimLike, Dims, OneDim, ReducePlan, ShapeLike};
pub use element::{
    Acc, ByDType, DType, DynVec, Element, Erase, Family, FamilyMap, Float, Ref, Scalar, SliceMutOf,
    SliceOf, VecOf,
};
pub use error::{try_vec, MaskedError, Result};
pub use fold::{not_nan_words, Fold, RUN_BLOCK};
pub use grad::GradVisitor;
pub use grad::{LaneGrad, Upstream};
/// The half-precision types (`half::f16`, `half::bf16`) the engine computes on.
#[doc(no_inline)]
pub use half;
pub use into::{with_slots, EntriesInto, MapInto, OutSlots, SlotMask, Written};
pub use lane::{Interpolation, LaneMap, LaneStat, MedianIndex, MedianMode};
pub use layout::{MaskedReduce, ZipKernels};
pub use mask::{check_lengths, BitMask, Bits, BoolArray, MaskLogic};
/// Which CPU tiers the vector kernels were compiled for, and whether this CPU runs them
/// (`MASKED_CPU=native` / `portable`, chosen when the kernels crate is built).
pub use masked_kernels::cpu;
/// How many threads the engine's parallel loops run on ([`set_threads`], as torch's
/// `set_num_threads`: 0 restores the default, `RAYON_NUM_THREADS` else one per core).
pub use masked_kernels::par::{set_threads, threads};
/// Running the engine's parallel loops on another library's OpenMP threads (torch's), as
/// its own ops do.
pub use masked_kernels::par::{with_team, OpenMpMaxThreads, OpenMpParallel, OpenMpTeam};
pub use registry::{
    apply_to, binary_grad_op, check_grad, check_map_grad, visit_grad, Kind, MaskedBinaryOps,
    MaskedOps, Op, OpRequest, Options, Sink,
};
pub use sparse::SparseArray;
pub use wire::{Num, WireNum};
