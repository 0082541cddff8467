//! # layout-dense
//!
//! The dense layout of the `masked` engine: a [`MaskedArray`] pairs an `ndarray` array
//! (owned or a zero-copy view, any rank, `f32`/`f64`/`i32`/`i64`) with an optional
//! bit-packed [`BitMask`] that is broadcast to the array's shape when it is attached.
//! It implements [`MaskedOps`], so every op of the engine is available.
//!
//! ```
//! use masked::MaskedArray;
//! use masked::MaskedOps;
//! use ndarray::array;
//!
//! let x = array![[-3.0f32, -2.0, -1.0], [0.0, 1.0, 2.0]];
//! let m = array![[true, false, true], [false, false, false]];
//! let a = MaskedArray::from_bool_mask(x.view(), m.view()).unwrap();
//! let s = a.sum(1, false).unwrap();
//! assert_eq!(s.values().as_slice().unwrap(), &[-4.0, 0.0]);
//! assert_eq!(s.mask_vec(), vec![true, false]); // row 1 is fully masked
//! ```
#![deny(missing_docs)]

mod algebra;
mod array;
mod compiled;
mod grad;
mod into;
mod kernels;
mod lazy;
mod zip;

pub use algebra::select;
pub use array::{MaskedArray, MaskedArrayD, MaskedView};
pub use into::{OutMask, WriteInto};
pub use lazy::{Unary, ZipView, BLOCK};
pub use masked_core::{
    BitMask, Dims, MaskRule, MaskedBinaryOps, MaskedError, MaskedOps, MaskedReduce, Result,
    ZipKernels,
};
pub use zip::{grad_array, Gradients};
