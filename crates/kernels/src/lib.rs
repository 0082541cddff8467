//! # masked-kernels
//!
//! The bottom layer of the `masked` engine: the loops that touch memory, generic over
//! plain `Copy` values and knowing nothing of dtypes, ops or layouts.
//!
//! - [`cpu`]: run-time feature detection and [`multiversion!`], which compiles one generic
//!   kernel for AVX-512, AVX2 + FMA and the baseline target;
//! - [`Bits`]: a borrowed run of validity bits, read 64 at a time;
//! - [`run`]: an elementwise monoid ([`run::Lanes`]) folded over a masked run or across
//!   columns, and the map / update / predicate / search loops;
//! - [`pack`]: compress the valid elements of a run together and expand them back;
//! - [`select`]: the element of a given rank of a slice of integer order keys;
//! - [`buffer`]: large output vectors on transparent huge pages;
//! - [`widen`]: 16-bit floats to `f32`, one at a time or a block per instruction.
//!
//! The core crate (`masked-core`) builds dtypes and ops on top of these; layouts use them
//! directly for their own fast paths. Nothing here is part of the user-facing API of
//! the `masked` facade.
//!
//! ```
//! use masked_kernels::{run::{fold_run, Lanes}, Bits};
//! struct Sum;
//! impl Lanes<f32> for Sum {
//!     type A = f32;
//!     fn id(&self) -> f32 { 0.0 }
//!     fn lift(&self, x: f32, _: i64) -> f32 { x }
//!     fn comb(&self, a: f32, b: f32) -> f32 { a + b }
//! }
//! let valid = [0b1011u64]; // element 2 is masked out
//! assert_eq!(fold_run(&Sum, &[1.0, 2.0, f32::NAN, 4.0], Some(Bits::new(&valid, 0)), 0), 7.0);
//! ```
#![deny(missing_docs)]

pub mod bits;
pub mod buffer;
pub mod cpu;
pub mod order;
pub mod pack;
pub mod par;
pub mod run;
pub mod select;
pub mod transpose;
pub mod widen;

pub use bits::Bits;
pub use buffer::{fresh_capacity, fresh_vec, ZeroBits};

/// Elements per vector block: a float sum moves each block's total into its f64 state
/// (each of the kernel's accumulators adds at most `BLOCK / 32` values, so an f32 sum
/// stays within 1e-4 relative of an f64 one at any size), and packing works block by
/// block in a stack buffer of this many elements.
pub const BLOCK: usize = 4096;
