//! Mask algebra on the CSR layout: pattern logic (merges of sorted rows), masks from
//! predicates, `masked_where`, `where`, `fill` / `filled` and `compress`. Nothing is
//! densified except by `filled`, which says so.

use crate::{CsrIndex, CsrMapped, MaskedCsr, PatternI};
use masked_core::binary::{select_merge, PredZip, Predicate};
use masked_core::{
    BitMask, Element, MaskLogic, MaskRule, MaskedError, MaskedOps, Result, Splat, ZipKernels,
};
use ndarray::Array2;
use sprs::SpIndex;

impl<'a, T: Element, I: CsrIndex, Iptr: SpIndex> MaskedCsr<'a, T, I, Iptr> {
    /// The valid positions as a pattern.
    ///
    /// # Errors
    /// [`MaskedError::Unsupported`] without a mask (every position valid).
    pub fn valid_pattern(&self) -> Result<PatternI<I>> {
        if let Some(p) = self.mask_pattern() {
            return Ok(p.clone());
        }
        if matches!(self.mask_kind(), crate::CsrMask::All) {
            return Err(MaskedError::densifying("valid_pattern"));
        }
        PatternI::of(self.matrix())
    }

    /// The mask of a predicate: the valid positions where `p` holds (a valid but
    /// unstored position is tested as 0).
    ///
    /// # Errors
    /// Without a mask, a predicate true at 0 ([`MaskedError::Unsupported`]: it would
    /// hold at every unstored position).
    pub fn predicate(&self, p: Predicate) -> Result<PatternI<I>> {
        let m = self.zip_elements(&Splat(T::ZERO), &PredZip(p), MaskRule::Strict)?;
        let (nrows, _) = self.matrix().shape();
        let mut indptr = Vec::with_capacity(nrows + 1);
        indptr.push(0);
        let mut indices = Vec::new();
        for (r, row) in m.outer_iterator().enumerate() {
            let _ = r;
            indices.extend(
                row.iter()
                    .filter(|&(_, &b)| b)
                    .map(|(c, _)| I::from_usize(c)),
            );
            indptr.push(indices.len());
        }
        PatternI::try_from_parts(m.shape(), indptr, indices)
    }

    /// numpy.ma's `masked_where(p, x)`: the same matrix with the valid positions where
    /// `p` holds masked out.
    ///
    /// # Errors
    /// As [`MaskedCsr::predicate`] and [`MaskedCsr::valid_pattern`].
    pub fn masked_where(&self, p: Predicate) -> Result<MaskedCsr<'a, T, I, Iptr>> {
        let keep = self
            .valid_pattern()?
            .logic(&self.predicate(p)?, MaskLogic::AndNot)?;
        MaskedCsr::with_mask(*self.matrix(), keep)
    }

    /// The same matrix with its valid positions combined with `other` by `logic`.
    ///
    /// # Errors
    /// As [`PatternI::logic`] and [`MaskedCsr::valid_pattern`].
    pub fn mask_logic(
        &self, other: &PatternI<I>, logic: MaskLogic,
    ) -> Result<MaskedCsr<'a, T, I, Iptr>> {
        MaskedCsr::with_mask(*self.matrix(), self.valid_pattern()?.logic(other, logic)?)
    }

    /// `fill(0)`: the matrix storing exactly the valid positions (valid-but-unstored ones
    /// as stored zeros), sharing this input's indices where they are the valid ones.
    ///
    /// # Errors
    /// Without a mask: every position is valid ([`MaskedError::Unsupported`]).
    pub fn fill_zero(&self) -> Result<CsrMapped<'a, T, I>> {
        self.valid_pattern()?;
        self.cast::<T>()
    }

    /// An explicit densification: a dense matrix with the valid values and `value` at
    /// every other position (`filled(0)` of a mask-free matrix is its dense form).
    ///
    /// # Errors
    /// [`MaskedError::TooLarge`] when the dense matrix cannot be allocated (checked
    /// before allocating), [`MaskedError::InvalidData`] when its size overflows.
    pub fn filled(&self, value: T) -> Result<Array2<T>> {
        let l = self.lanes();
        let fill = if l.fill() { T::ZERO } else { value };
        crate::dense_with(
            self.matrix().shape(),
            fill,
            (0..l.shape().0)
                .flat_map(|i| l.row(i).map(move |k| (i, k)))
                .filter(|&(_, k)| l.is_valid(k))
                .map(|(i, k)| (i, l.col(k), l.values()[k])),
        )
    }

    /// The valid values in row-major order (numpy.ma's `compressed`), valid-but-unstored
    /// positions as 0.
    ///
    /// # Errors
    /// Without a mask: every position is valid ([`MaskedError::Unsupported`]).
    pub fn compress(&self) -> Result<Vec<T>> {
        Ok(self.fill_zero()?.data().to_vec())
    }
}

/// `where(cond, a, b)` of two CSR matrices of one shape (with masks): the value and
/// validity of `a` where the dense condition (broadcast to the shape) is true, of `b`
/// where false; read only at their valid entries. Sparse out.
///
/// # Errors
/// Different shapes, a condition that does not broadcast, an operand without a mask.
pub fn select<'a, T: Element, I: CsrIndex, P1: SpIndex, P2: SpIndex>(
    cond: &BitMask, a: &MaskedCsr<'a, T, I, P1>, b: &MaskedCsr<'_, T, I, P2>,
) -> Result<sprs::CsMatI<T, I, usize>> {
    let shape = a.matrix().shape();
    if shape != b.matrix().shape() {
        return Err(MaskedError::ShapeMismatch {
            what: "where: sparse operands must have one shape".into(),
            left: vec![shape.0, shape.1],
            right: vec![b.matrix().rows(), b.matrix().cols()],
        });
    }
    let (la, lb) = (a.lanes(), b.lanes());
    if la.fill() || lb.fill() {
        return Err(MaskedError::densifying("where"));
    }
    let c = cond.broadcast_to(&[shape.0, shape.1])?;
    let (Some(ia), Some(ib)) = (I::of(la.indices()), I::of(lb.indices())) else {
        return Err(MaskedError::InvalidData(
            "column indices of another width than the matrix type's".into(),
        ));
    };
    let mut indptr = vec![0usize];
    let (mut idx, mut val) = (Vec::new(), Vec::new());
    for r in 0..shape.0 {
        select_merge(
            la.side(ia, la.row(r)),
            lb.side(ib, lb.row(r)),
            |col: I| c.get(r * shape.1 + col.index()),
            &mut idx,
            &mut val,
        );
        indptr.push(idx.len());
    }
    sprs::CsMatI::try_new(shape, indptr, idx, val)
        .map_err(|(_, _, _, e)| MaskedError::InvalidData(e.to_string()))
}
