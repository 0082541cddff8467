//! The contract a layout implements, and the op methods it gets in return.

use crate::dims::Dims;
use crate::element::Element;
use crate::error::{MaskedError, Result};
use crate::fold::Fold;
use crate::ops::{AMax, AMin, ArgMax, ArgMin, Count, Mean, Prod, Sum};

/// A masked container of `T` values that can fold its lanes.
///
/// A layout implements one kernel, [`MaskedReduce::fold_lanes`]: given any [`Fold`], the
/// dims to reduce and `keepdim`, fold every lane over its valid elements and return the
/// finished values with the output mask `any(mask over the reduced dims)`. Every
/// reduction op is then a provided method here, written once for all layouts; adding an
/// op means adding a fold value in [`crate::ops`] and one method below.
///
/// The result type is the layout's own ([`MaskedReduce::Reduced`]): a dense masked array
/// for the dense layout, a sparse vector for the sparse ones (sparse in, sparse out).
pub trait MaskedReduce<T: Element> {
    /// The layout's result of a reduction whose values have type `O`.
    type Reduced<O: Element>;

    /// Folds every lane of the reduced `dims` with `op`.
    ///
    /// # Errors
    /// Bad dims ([`MaskedError::DimOutOfRange`], [`MaskedError::DuplicateDim`]).
    fn fold_lanes<F: Fold<T>>(
        &self,
        op: &F,
        dims: &Dims,
        keepdim: bool,
    ) -> Result<Self::Reduced<F::Output>>;

    /// Masked sum (integers widen to `i64`; fully masked lanes give 0).
    ///
    /// # Errors
    /// Bad dims.
    fn sum(&self, dims: impl Into<Dims>, keepdim: bool) -> Result<Self::Reduced<T::Wide>> {
        self.fold_lanes(&Sum, &dims.into(), keepdim)
    }
    /// Masked product (integers widen to `i64`; fully masked lanes give 1).
    ///
    /// # Errors
    /// Bad dims.
    fn prod(&self, dims: impl Into<Dims>, keepdim: bool) -> Result<Self::Reduced<T::Wide>> {
        self.fold_lanes(&Prod, &dims.into(), keepdim)
    }
    /// Masked maximum (fully masked lanes give `-inf` or the integer MIN).
    ///
    /// # Errors
    /// Bad dims.
    fn amax(&self, dims: impl Into<Dims>, keepdim: bool) -> Result<Self::Reduced<T>> {
        self.fold_lanes(&AMax, &dims.into(), keepdim)
    }
    /// Masked minimum (fully masked lanes give `+inf` or the integer MAX).
    ///
    /// # Errors
    /// Bad dims.
    fn amin(&self, dims: impl Into<Dims>, keepdim: bool) -> Result<Self::Reduced<T>> {
        self.fold_lanes(&AMin, &dims.into(), keepdim)
    }
    /// Index of the masked maximum along one dim, or the flat row-major index when `dim`
    /// is all dims.
    ///
    /// # Errors
    /// More than one dim ([`MaskedError::DimCount`]), bad dims.
    fn argmax(&self, dim: impl Into<Dims>, keepdim: bool) -> Result<Self::Reduced<i64>> {
        let d = at_most_one("argmax", dim.into())?;
        self.fold_lanes(&ArgMax, &d, keepdim)
    }
    /// Index of the masked minimum along one dim, or the flat row-major index when `dim`
    /// is all dims.
    ///
    /// # Errors
    /// More than one dim ([`MaskedError::DimCount`]), bad dims.
    fn argmin(&self, dim: impl Into<Dims>, keepdim: bool) -> Result<Self::Reduced<i64>> {
        let d = at_most_one("argmin", dim.into())?;
        self.fold_lanes(&ArgMin, &d, keepdim)
    }
    /// Masked mean (NaN for fully masked lanes; integers give `f64`).
    ///
    /// # Errors
    /// Bad dims.
    fn mean(&self, dims: impl Into<Dims>, keepdim: bool) -> Result<Self::Reduced<T::Real>> {
        self.fold_lanes(&Mean, &dims.into(), keepdim)
    }
    /// Number of valid elements. Every output position of a count is valid, so its
    /// output mask is all true.
    ///
    /// # Errors
    /// Bad dims.
    fn count(&self, dims: impl Into<Dims>, keepdim: bool) -> Result<Self::Reduced<i64>> {
        self.fold_lanes(&Count, &dims.into(), keepdim)
    }
}

/// Checks that at most one dim was named (argmax/argmin).
///
/// # Errors
/// [`MaskedError::DimCount`].
pub fn at_most_one(op: &'static str, d: Dims) -> Result<Dims> {
    match d.given_len() {
        None | Some(1) => Ok(d),
        Some(n) => Err(MaskedError::DimCount {
            op,
            expected: "at most one dim",
            got: n,
        }),
    }
}
