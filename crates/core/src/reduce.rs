//! The contract a layout implements, and the op methods it gets in return.

use crate::dims::Dims;
use crate::element::Element;
use crate::error::{MaskedError, Result};
use crate::fold::Fold;
use crate::lane::{
    Cumulative, Interpolation, LaneMap, LaneStat, MedianIndex, MedianMode, Normalize, Quantile,
    Softmax, SoftmaxKind,
};
use crate::ops::{AMax, AMin, ArgMax, ArgMin, Count, Mean, Prod, Sum};
use crate::stats::{check_correction, LogSumExp, Norm, Std, Var};

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
    /// The layout's result of a shape-preserving map with values of type `O`.
    type Mapped<O: Element>;
    /// The same data with `!is_nan(x)` ANDed into the mask (the nan-family).
    type NanMasked<'a>: MaskedReduce<
        T,
        Reduced<T::Real> = Self::Reduced<T::Real>,
        Reduced<T> = Self::Reduced<T>,
        Reduced<T::Wide> = Self::Reduced<T::Wide>,
        Reduced<i64> = Self::Reduced<i64>,
    >
    where
        Self: 'a;

    /// This data with the extra mask `!is_nan(x)`.
    ///
    /// # Errors
    /// [`MaskedError::Unsupported`] where a layout cannot yet carry such a mask.
    fn without_nans(&self) -> Result<Self::NanMasked<'_>>;

    /// Computes `stat` over the valid values of every lane of the reduced `dims`.
    ///
    /// # Errors
    /// Bad dims.
    fn stat_lanes<S: LaneStat<T>>(
        &self,
        stat: &S,
        dims: &Dims,
        keepdim: bool,
    ) -> Result<Self::Reduced<S::Output>>;

    /// Maps every lane along `dim` with `map`; the output mask is the input mask.
    ///
    /// # Errors
    /// Bad dim.
    fn map_lanes<M: LaneMap<T>>(&self, map: &M, dim: isize) -> Result<Self::Mapped<M::Output>>;

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
    /// Masked variance with `correction` (1 = Bessel): `sum((x - mean)^2) /
    /// max(count - correction, 0)`; NaN when fully masked.
    ///
    /// # Errors
    /// A negative or NaN correction ([`MaskedError::InvalidArgument`]), bad dims.
    fn var(
        &self,
        dims: impl Into<Dims>,
        keepdim: bool,
        correction: f64,
    ) -> Result<Self::Reduced<T::Real>> {
        let correction = check_correction(correction)?;
        self.fold_lanes(&Var { correction }, &dims.into(), keepdim)
    }
    /// Masked standard deviation (the square root of [`MaskedReduce::var`]).
    ///
    /// # Errors
    /// As [`MaskedReduce::var`].
    fn std(
        &self,
        dims: impl Into<Dims>,
        keepdim: bool,
        correction: f64,
    ) -> Result<Self::Reduced<T::Real>> {
        let correction = check_correction(correction)?;
        self.fold_lanes(&Std { correction }, &dims.into(), keepdim)
    }
    /// Masked vector norm of order `ord` (see [`Norm`]).
    ///
    /// # Errors
    /// A NaN `ord`, bad dims.
    fn norm(
        &self,
        dims: impl Into<Dims>,
        keepdim: bool,
        ord: f64,
    ) -> Result<Self::Reduced<T::Real>> {
        self.fold_lanes(&Norm::new(ord)?, &dims.into(), keepdim)
    }
    /// Masked, overflow-safe `log(sum(exp(x)))`; `-inf` when fully masked.
    ///
    /// # Errors
    /// Bad dims.
    fn logsumexp(&self, dims: impl Into<Dims>, keepdim: bool) -> Result<Self::Reduced<T::Real>> {
        self.fold_lanes(&LogSumExp, &dims.into(), keepdim)
    }
    /// Masked median (`mode` avg: mean of the two middle values for an even count;
    /// lower: the lower one). A valid NaN gives NaN; fully masked gives NaN.
    ///
    /// # Errors
    /// Bad dims.
    fn median(
        &self,
        dims: impl Into<Dims>,
        keepdim: bool,
        mode: MedianMode,
    ) -> Result<Self::Reduced<T::Real>> {
        self.stat_lanes(&Quantile::median(mode), &dims.into(), keepdim)
    }
    /// The lower median along one `dim` and the lane position of that element (first
    /// among ties; a valid NaN gives NaN and the first NaN's position; -1 for a fully
    /// masked lane), as torch.median / torch.nanmedian with a dim return them.
    ///
    /// # Errors
    /// Bad dim.
    #[allow(clippy::type_complexity)]
    fn median_with_index(
        &self,
        dim: isize,
        keepdim: bool,
    ) -> Result<(Self::Reduced<T::Real>, Self::Reduced<i64>)> {
        let d = Dims::from(dim);
        let v = self.stat_lanes(&Quantile::median(MedianMode::Lower), &d, keepdim)?;
        let i = self.stat_lanes(&MedianIndex, &d, keepdim)?;
        Ok((v, i))
    }
    /// [`MaskedReduce::median_with_index`] ignoring NaN (-1 for an all-NaN lane): paddle's
    /// nanmedian in lower mode, torch.nanmedian with a dim.
    ///
    /// # Errors
    /// Bad dim.
    #[allow(clippy::type_complexity)]
    fn nanmedian_with_index(
        &self,
        dim: isize,
        keepdim: bool,
    ) -> Result<(Self::Reduced<T::Real>, Self::Reduced<i64>)> {
        let a = self.without_nans()?;
        let d = Dims::from(dim);
        let v = a.stat_lanes(&Quantile::median(MedianMode::Lower), &d, keepdim)?;
        let i = a.stat_lanes(&MedianIndex, &d, keepdim)?;
        Ok((v, i))
    }
    /// Masked `q`-quantile (numpy's interpolation methods), by selection.
    ///
    /// # Errors
    /// `q` outside [0, 1], bad dims.
    fn quantile(
        &self,
        dims: impl Into<Dims>,
        keepdim: bool,
        q: f64,
        interpolation: Interpolation,
    ) -> Result<Self::Reduced<T::Real>> {
        self.stat_lanes(&Quantile::new(q, interpolation)?, &dims.into(), keepdim)
    }
    /// Masked softmax along `dim`: 0 at masked-out positions and in fully masked lanes.
    ///
    /// # Errors
    /// Bad dim.
    fn softmax(&self, dim: isize) -> Result<Self::Mapped<T::Real>> {
        self.map_lanes(
            &Softmax {
                kind: SoftmaxKind::Softmax,
            },
            dim,
        )
    }
    /// Masked log-softmax along `dim`: `-inf` at masked-out positions and in fully
    /// masked lanes.
    ///
    /// # Errors
    /// Bad dim.
    fn log_softmax(&self, dim: isize) -> Result<Self::Mapped<T::Real>> {
        self.map_lanes(
            &Softmax {
                kind: SoftmaxKind::LogSoftmax,
            },
            dim,
        )
    }
    /// Masked softmin (`softmax(-x)`) along `dim`.
    ///
    /// # Errors
    /// Bad dim.
    fn softmin(&self, dim: isize) -> Result<Self::Mapped<T::Real>> {
        self.map_lanes(
            &Softmax {
                kind: SoftmaxKind::Softmin,
            },
            dim,
        )
    }
    /// `x / max(norm_ord(x), eps)` along `dim` over the valid elements; 0 elsewhere.
    ///
    /// # Errors
    /// NaN `ord`, negative `eps`, bad dim.
    fn normalize(&self, dim: isize, ord: f64, eps: f64) -> Result<Self::Mapped<T::Real>> {
        self.map_lanes(&Normalize::new(ord, eps)?, dim)
    }
    /// Masked cumulative sum along `dim` in the input type; masked-out positions carry
    /// the running value.
    ///
    /// # Errors
    /// Bad dim.
    fn cumsum(&self, dim: isize) -> Result<Self::Mapped<T>> {
        self.map_lanes(&Cumulative { prod: false }, dim)
    }
    /// Masked cumulative product along `dim` in the input type.
    ///
    /// # Errors
    /// Bad dim.
    fn cumprod(&self, dim: isize) -> Result<Self::Mapped<T>> {
        self.map_lanes(&Cumulative { prod: true }, dim)
    }
    /// Sum ignoring NaN (and masked-out) elements.
    ///
    /// # Errors
    /// Bad dims.
    fn nansum(&self, dims: impl Into<Dims>, keepdim: bool) -> Result<Self::Reduced<T::Wide>> {
        self.without_nans()?.sum(dims, keepdim)
    }
    /// Mean ignoring NaN elements.
    ///
    /// # Errors
    /// Bad dims.
    fn nanmean(&self, dims: impl Into<Dims>, keepdim: bool) -> Result<Self::Reduced<T::Real>> {
        self.without_nans()?.mean(dims, keepdim)
    }
    /// Variance ignoring NaN elements.
    ///
    /// # Errors
    /// As [`MaskedReduce::var`].
    fn nanvar(
        &self,
        dims: impl Into<Dims>,
        keepdim: bool,
        correction: f64,
    ) -> Result<Self::Reduced<T::Real>> {
        self.without_nans()?.var(dims, keepdim, correction)
    }
    /// Standard deviation ignoring NaN elements.
    ///
    /// # Errors
    /// As [`MaskedReduce::var`].
    fn nanstd(
        &self,
        dims: impl Into<Dims>,
        keepdim: bool,
        correction: f64,
    ) -> Result<Self::Reduced<T::Real>> {
        self.without_nans()?.std(dims, keepdim, correction)
    }
    /// Maximum ignoring NaN elements.
    ///
    /// # Errors
    /// Bad dims.
    fn nanmax(&self, dims: impl Into<Dims>, keepdim: bool) -> Result<Self::Reduced<T>> {
        self.without_nans()?.amax(dims, keepdim)
    }
    /// Minimum ignoring NaN elements.
    ///
    /// # Errors
    /// Bad dims.
    fn nanmin(&self, dims: impl Into<Dims>, keepdim: bool) -> Result<Self::Reduced<T>> {
        self.without_nans()?.amin(dims, keepdim)
    }
    /// Median ignoring NaN elements.
    ///
    /// # Errors
    /// Bad dims.
    fn nanmedian(
        &self,
        dims: impl Into<Dims>,
        keepdim: bool,
        mode: MedianMode,
    ) -> Result<Self::Reduced<T::Real>> {
        self.without_nans()?.median(dims, keepdim, mode)
    }
    /// Quantile ignoring NaN elements.
    ///
    /// # Errors
    /// As [`MaskedReduce::quantile`].
    fn nanquantile(
        &self,
        dims: impl Into<Dims>,
        keepdim: bool,
        q: f64,
        interpolation: Interpolation,
    ) -> Result<Self::Reduced<T::Real>> {
        self.without_nans()?
            .quantile(dims, keepdim, q, interpolation)
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
