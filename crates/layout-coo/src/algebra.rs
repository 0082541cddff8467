//! Mask algebra on the COO layout: pattern logic (one merge of the flat positions),
//! masks from predicates, `masked_where`, `where`, `fill` / `filled` and `compress`.
//! Nothing is densified except by `filled`, which says so.

use crate::{CooMask, CooPattern, MaskedCoo};
use masked_core::binary::{select_merge, PredZip, Predicate, Side};
use masked_core::mask::merge_positions;
use masked_core::{
    BitMask, Element, MaskLogic, MaskRule, MaskedError, MaskedOps, Result, SparseArray, Splat,
    ZipKernels,
};
use ndarray::{ArrayD, IxDyn};

impl CooPattern {
    /// `logic(self, other)` of two patterns of one shape: one merge of the flat
    /// positions.
    ///
    /// # Errors
    /// [`MaskedError::ShapeMismatch`] for patterns of different shapes.
    pub fn logic(&self, other: &CooPattern, logic: MaskLogic) -> Result<CooPattern> {
        if self.shape() != other.shape() {
            return Err(MaskedError::ShapeMismatch {
                what: "mask logic of two patterns".into(),
                left: self.shape().to_vec(),
                right: other.shape().to_vec(),
            });
        }
        let mut out = Vec::new();
        merge_positions(self.flat_slice(), other.flat_slice(), logic, &mut out);
        CooPattern::from_flat(self.shape(), &out)
    }
}

impl<T: Element> MaskedCoo<T> {
    /// The valid positions as a pattern.
    ///
    /// # Errors
    /// [`MaskedError::Unsupported`] without a mask (every position valid).
    pub fn valid_pattern(&self) -> Result<CooPattern> {
        match self.mask() {
            CooMask::Stored => Ok(self.pattern().clone()),
            CooMask::Pattern(p) => Ok(p),
            CooMask::All => Err(MaskedError::densifying("valid_pattern")),
        }
    }

    /// The mask of a predicate: the valid positions where `p` holds (a valid but
    /// unstored position is tested as 0).
    ///
    /// # Errors
    /// Without a mask, a predicate true at 0 ([`MaskedError::Unsupported`]).
    pub fn predicate(&self, p: Predicate) -> Result<CooPattern> {
        let m = self.zip_elements(&Splat(T::ZERO), &PredZip(p), MaskRule::Strict)?;
        let flat: Vec<usize> = m
            .indices()
            .iter()
            .zip(m.values())
            .filter(|&(_, &b)| b)
            .map(|(&f, _)| f)
            .collect();
        CooPattern::from_flat(m.shape(), &flat)
    }

    /// numpy.ma's `masked_where(p, x)`: the same entries with the valid positions where
    /// `p` holds masked out.
    ///
    /// # Errors
    /// As [`MaskedCoo::predicate`] and [`MaskedCoo::valid_pattern`].
    pub fn masked_where(&self, p: Predicate) -> Result<MaskedCoo<T>> {
        self.mask_logic(&self.predicate(p)?, MaskLogic::AndNot)
    }

    /// The same entries with their valid positions combined with `other` by `logic`.
    ///
    /// # Errors
    /// As [`CooPattern::logic`] and [`MaskedCoo::valid_pattern`].
    pub fn mask_logic(&self, other: &CooPattern, logic: MaskLogic) -> Result<MaskedCoo<T>> {
        let keep = self.valid_pattern()?.logic(other, logic)?;
        MaskedCoo::from_parts(
            self.pattern().clone(),
            self.values().to_vec(),
            CooMask::Pattern(keep),
        )
    }

    /// `fill(0)`: the array storing exactly the valid positions (valid-but-unstored ones
    /// as stored zeros).
    ///
    /// # Errors
    /// Without a mask: every position is valid ([`MaskedError::Unsupported`]).
    pub fn fill_zero(&self) -> Result<MaskedCoo<T>> {
        self.valid_pattern()?;
        self.cast::<T>()
    }

    /// An explicit densification: a dense array with the valid values and `value` at
    /// every other position.
    ///
    /// # Errors
    /// A shape whose element count overflows; [`MaskedError::TooLarge`] when the dense
    /// array cannot be allocated (checked before allocating).
    pub fn filled(&self, value: T) -> Result<ArrayD<T>> {
        let all = matches!(self.mask(), CooMask::All);
        let (shape, flat, vals) = if all {
            (
                self.shape().to_vec(),
                self.pattern().flat(),
                self.values().to_vec(),
            )
        } else {
            let f = self.fill_zero()?;
            (f.shape().to_vec(), f.pattern().flat(), f.values().to_vec())
        };
        let n = crate::pattern::size_of(&shape)?;
        let mut out = masked_core::try_vec(n, || format!("a dense array of shape {shape:?}"))?;
        out.resize(n, if all { T::ZERO } else { value });
        for (f, v) in flat.into_iter().zip(vals) {
            out[f] = v;
        }
        ArrayD::from_shape_vec(IxDyn(&shape), out)
            .map_err(|e| MaskedError::InvalidData(e.to_string()))
    }

    /// The valid values in row-major order (numpy.ma's `compressed`), valid-but-unstored
    /// positions as 0.
    ///
    /// # Errors
    /// Without a mask: every position is valid ([`MaskedError::Unsupported`]).
    pub fn compress(&self) -> Result<Vec<T>> {
        Ok(self.fill_zero()?.into_parts().1)
    }
}

/// `where(cond, a, b)` of two COO arrays of one shape (with masks): the value and
/// validity of `a` where the dense condition (broadcast to the shape) is true, of `b`
/// where false; read only at their valid entries. Sparse out.
///
/// # Errors
/// Different shapes, a condition that does not broadcast, an operand without a mask.
pub fn select<T: Element>(
    cond: &BitMask, a: &MaskedCoo<T>, b: &MaskedCoo<T>,
) -> Result<SparseArray<T>> {
    if a.shape() != b.shape() {
        return Err(MaskedError::ShapeMismatch {
            what: "where: sparse operands must have one shape".into(),
            left: a.shape().to_vec(),
            right: b.shape().to_vec(),
        });
    }
    let (la, lb) = (a.lanes(), b.lanes());
    if la.fill || lb.fill {
        return Err(MaskedError::densifying("where"));
    }
    let c = cond.broadcast_to(a.shape())?;
    let (fa, fb) = (la.pattern.flat_slice(), lb.pattern.flat_slice());
    let (mut pos, mut val) = (Vec::new(), Vec::new());
    select_merge(
        Side::new(fa, la.values, la.valid.as_deref(), 0, false),
        Side::new(fb, lb.values, lb.valid.as_deref(), 0, false),
        |p| c.get(p),
        &mut pos,
        &mut val,
    );
    SparseArray::new(a.shape().to_vec(), pos, val)
}
masked_core::mask_operators!(CooPattern);
