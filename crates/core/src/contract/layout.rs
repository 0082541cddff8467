//! What a layout implements: [`MaskedReduce`], three lane kernels and the result types.
//! Every op of the registry then comes with [`MaskedOps`](crate::MaskedOps), a blanket
//! impl over this trait: a new layout writes these kernels and gets every op.

use crate::binary::{MaskRule, Value, ZipMap};
use crate::dims::Dims;
use crate::element::Element;
use crate::error::Result;
use crate::fold::Fold;
use crate::grad::LaneGrad;
use crate::lane::{LaneMap, LaneStat};

/// The kernels of a masked container of `T` values: fold, compute a lane statistic of,
/// or map every lane. A layout implements this trait and nothing else; the ops a user
/// calls ([`MaskedOps`](crate::MaskedOps): `sum`, `median`, `softmax`, ...) are written
/// once over it.
///
/// The result types are the layout's own: a dense masked array for the dense layout, a
/// sparse result for the sparse ones (sparse in, sparse out).
pub trait MaskedReduce<T: Element> {
    /// The layout's result of a reduction whose values have type `O`.
    type Reduced<O: Element>;
    /// The layout's result of a shape-preserving map with values of type `O`.
    type Mapped<O: Element>;
    /// The same data with `!is_nan(x)` ANDed into the mask (the nan-family). Its
    /// reductions have the same result types as this layout's.
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
    /// [`MaskedError::Unsupported`](crate::MaskedError::Unsupported) where a layout
    /// cannot carry such a mask.
    fn without_nans(&self) -> Result<Self::NanMasked<'_>>;

    /// Folds every lane of the reduced `dims` with `op`: for each output position, the
    /// valid elements of its lane, and the output mask `any(mask over the reduced dims)`
    /// (all true when [`Fold::valid_everywhere`]).
    ///
    /// # Errors
    /// Bad dims ([`MaskedError::DimOutOfRange`](crate::MaskedError::DimOutOfRange),
    /// [`MaskedError::DuplicateDim`](crate::MaskedError::DuplicateDim)).
    fn fold_lanes<F: Fold<T>>(
        &self, op: &F, dims: &Dims, keepdim: bool,
    ) -> Result<Self::Reduced<F::Output>>;

    /// Computes `stat` over the valid values of every lane of the reduced `dims`.
    ///
    /// # Errors
    /// Bad dims.
    fn stat_lanes<S: LaneStat<T>>(
        &self, stat: &S, dims: &Dims, keepdim: bool,
    ) -> Result<Self::Reduced<S::Output>>;

    /// Maps every lane along `dim` with `map`; the output mask is the input mask.
    ///
    /// # Errors
    /// Bad dim.
    fn map_lanes<M: LaneMap<T>>(&self, map: &M, dim: isize) -> Result<Self::Mapped<M::Output>>;

    /// Maps every element on its own (an elementwise op, a cast): `map` sees runs of
    /// consecutive elements, and its output at a position depends on that element only.
    /// `zero_preserving` says whether `map` takes 0 to 0, which a sparse layout without a
    /// mask needs to keep its stored positions as the result's.
    ///
    /// The default runs [`MaskedReduce::map_lanes`] along the last dim; a layout overrides
    /// it where it has a faster flat path.
    ///
    /// # Errors
    /// [`MaskedError::Unsupported`](crate::MaskedError::Unsupported) where the layout
    /// cannot hold the result without storing every position.
    fn map_elements<M: LaneMap<T>>(
        &self, map: &M, zero_preserving: bool,
    ) -> Result<Self::Mapped<M::Output>> {
        let _ = zero_preserving;
        self.map_lanes(map, -1)
    }

    /// The vector-Jacobian product of a reduction over `dims`: for each lane with a
    /// valid element, `grad` of its valid values and of `g` at the lane's output
    /// position; the result has this input's shape and mask, 0 at invalid positions.
    /// `saved`, when given, is the forward output (read at the same positions as `g`,
    /// and only by ops whose [`LaneGrad::uses_output`] says so).
    ///
    /// The default reports that the layout has no gradient kernels.
    ///
    /// # Errors
    /// Bad dims; `g` or `saved` not shaped like the reduction's output
    /// ([`MaskedError::ShapeMismatch`](crate::MaskedError::ShapeMismatch));
    /// [`MaskedError::Unsupported`](crate::MaskedError::Unsupported) from the default.
    fn grad_reduced<G: LaneGrad>(
        &self, grad: &G, dims: &Dims, keepdim: bool, g: &Self::Reduced<T::Real>,
        saved: Option<&Self::Reduced<T::Real>>,
    ) -> Result<Self::Mapped<T::Real>> {
        let _ = (dims, keepdim, g, saved);
        Err(crate::MaskedError::Unsupported {
            op: grad.name(),
            context: "for a VJP on this layout yet".into(),
        })
    }

    /// The vector-Jacobian product of a map along `dim`: for each lane, `grad` of its
    /// valid values and of `g` at the same positions; the result has this input's shape
    /// and mask, 0 at invalid positions.
    ///
    /// The default reports that the layout has no gradient kernels.
    ///
    /// # Errors
    /// As [`MaskedReduce::grad_reduced`], `g` and `saved` shaped like the input (a
    /// sparse `saved` storing the input's valid positions).
    fn grad_mapped<G: LaneGrad>(
        &self, grad: &G, dim: isize, g: &Self::Mapped<T::Real>,
        saved: Option<&Self::Mapped<T::Real>>,
    ) -> Result<Self::Mapped<T::Real>> {
        let _ = (dim, g, saved);
        Err(crate::MaskedError::Unsupported {
            op: grad.name(),
            context: "for a VJP on this layout yet".into(),
        })
    }
}

/// What a layout implements for binary elementwise ops: combine its values with an
/// operand `Rhs` (another masked container of its own layout, a dense array, or a scalar
/// `T`) element by element. Every binary op of the registry
/// ([`MaskedBinaryOps`](crate::MaskedBinaryOps): `add`, `mul`, `lt`, ...) is written once
/// over it.
///
/// The output has the broadcast shape of the operands (a sparse layout never broadcasts
/// beyond its own shape) and the mask that `rule` gives; it is of the layout's own kind:
/// sparse when either operand is sparse.
pub trait ZipKernels<T: Element, Rhs: ?Sized> {
    /// The layout's result of a binary op with values of type `O`.
    type Zipped<O: Value>;

    /// `z(self, rhs)` at every valid output position.
    ///
    /// # Errors
    /// Shapes that do not broadcast ([`MaskedError::ShapeMismatch`](crate::MaskedError::ShapeMismatch)),
    /// masks that differ under [`MaskRule::Strict`]
    /// ([`MaskedError::MaskMismatch`](crate::MaskedError::MaskMismatch)), an integer op
    /// undefined at a valid position
    /// ([`MaskedError::IntegerDomain`](crate::MaskedError::IntegerDomain)), a sparse
    /// operand without a mask where the result would store every position
    /// ([`MaskedError::Unsupported`](crate::MaskedError::Unsupported)).
    fn zip_elements<Z: ZipMap<T>>(
        &self, rhs: &Rhs, z: &Z, rule: MaskRule,
    ) -> Result<Self::Zipped<Z::Output>>;
}

/// The three associated types of a [`MaskedReduce`] impl, on one line:
/// `reduce_types!(<P> Reduced, Mapped, <'b> NanMasked)`, where `P` names the value type
/// of `Reduced` and `Mapped`, and `'b` the borrow of the NaN-masked form:
///
/// ```ignore
/// impl<'a, T: Element> MaskedReduce<T> for CooLanes<'a, T> {
///     reduce_types!(<O> SparseArray<O>, MaskedCoo<O>, <'b> CooLanes<'b, T>);
///     // the methods
/// }
/// ```
#[macro_export]
macro_rules! reduce_types {
    (<$p:ident> $reduced:ty, $mapped:ty, <$b:lifetime> $nan:ty) => {
        type Reduced<$p: $crate::Element> = $reduced;
        type Mapped<$p: $crate::Element> = $mapped;
        type NanMasked<$b>
            = $nan
        where
            Self: $b;
    };
}
