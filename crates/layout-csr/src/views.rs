//! Fused views of a CSR matrix: a lazy `z(a, b)` or unary map on its entries that the
//! reductions and normalizations consume without storing the elementwise values (the
//! sparse lane engine's [`FusedLanes`](crate::FusedLanes)).

use crate::MaskedCsr;
use layout_dense::MaskedArray;
use masked_core::binary::Unary;
use masked_core::{Element, LaneMap, MaskRule, MaskedError, Result, ZipMap};
use masked_sparse::{
    computed_view, entry_view, CsrIndex, CsrZipView, DenseOperand, EntryRhs as Rhs,
};
use ndarray::{Data, Dimension};
use sprs::SpIndex;

// named by the docs' links
#[allow(unused_imports)]
use masked_core::ZipKernels;

impl<'m, T: Element, I: CsrIndex, Iptr: SpIndex> MaskedCsr<'m, T, I, Iptr> {
    /// The lazy `z(self, rhs)` under `rule` with another CSR matrix of this shape. On
    /// one structure the output validity is computed now (a bit per entry) and the
    /// values when a reduction or normalization reads them; two structures are merged
    /// now, values included.
    ///
    /// # Errors
    /// As [`ZipKernels::zip_elements`]: shapes that
    /// differ, masks that differ under [`MaskRule::Strict`], an op that does not keep 0
    /// on matrices without a mask, an integer op undefined at a valid entry (for the
    /// lazy values: when they are read).
    ///
    /// ```
    /// use masked::binary::{KeepBin, KeepZip};
    /// use masked::{MaskRule, MaskedCsr, MaskedOps};
    /// use sprs::CsMat;
    /// let a = CsMat::new((2, 3), vec![0, 2, 3], vec![0, 2, 1], vec![1.0f64, 2.0, 3.0]);
    /// let w = CsMat::new((2, 3), vec![0, 2, 3], vec![0, 2, 1], vec![4.0f64, 5.0, 6.0]);
    /// let (a, w) = (MaskedCsr::from_pattern(a.view()).unwrap(), MaskedCsr::from_pattern(w.view()).unwrap());
    /// let ab = a.zip_view(&w, KeepZip(KeepBin::Mul), MaskRule::Strict).unwrap();
    /// assert_eq!(ab.sum(1, false).unwrap().values(), &[14.0, 18.0]); // never stores a * w
    /// ```
    pub fn zip_view<'s, Iptr2: SpIndex, Z: ZipMap<T> + 's>(
        &'s self, rhs: &'s MaskedCsr<'_, T, I, Iptr2>, z: Z, rule: MaskRule,
    ) -> Result<CsrZipView<'s, Z::Output>> {
        let (a, b) = (self.lanes(), rhs.lanes());
        if a.shape() != b.shape() {
            let (sa, sb) = (a.shape(), b.shape());
            return Err(MaskedError::ShapeMismatch {
                what: format!("{}: sparse operands must have one shape", z.name()),
                left: vec![sa.0, sa.1],
                right: vec![sb.0, sb.1],
            });
        }
        if a.same_structure(&b) {
            let values = b.values();
            let rhs = Rhs::Same(values, b.into_valid());
            return entry_view(a, rhs, z, rule);
        }
        let fill = a.fill() && b.fill();
        let (indptr, indices, values) = a.zip_merge::<I, _>(&b, &z, rule)?;
        Ok(computed_view(
            a.shape(),
            indptr,
            indices.into_owned(),
            values,
            fill,
        ))
    }

    /// The lazy `z(self, rhs)` under `rule` with a dense array broadcastable to this
    /// matrix's shape, read only at the valid entries.
    ///
    /// # Errors
    /// As [`MaskedCsr::zip_view`](crate::MaskedCsr::zip_view); a matrix without a mask
    /// ([`MaskedError::Unsupported`]: every position would be valid).
    pub fn zip_dense_view<'s, S: Data<Elem = T>, D: Dimension, Z: ZipMap<T> + 's>(
        &'s self, rhs: &'s MaskedArray<S, D>, z: Z, rule: MaskRule,
    ) -> Result<CsrZipView<'s, Z::Output>> {
        let l = self.lanes();
        let (r, c) = l.shape();
        let d = DenseOperand::new(z.name(), rhs.dense_parts(), &[r, c])?;
        entry_view(l, Rhs::Dense(d), z, rule)
    }

    /// The lazy `z(self, s)` with a scalar (a scalar on the left is the `Swapped` op).
    ///
    /// # Errors
    /// Without a mask, an op with `z(0, s) != 0` ([`MaskedError::Unsupported`]).
    pub fn zip_scalar_view<'s, Z: ZipMap<T> + 's>(
        &'s self, s: T, z: Z,
    ) -> Result<CsrZipView<'s, Z::Output>> {
        entry_view(self.lanes(), Rhs::Scalar(s), z, MaskRule::Strict)
    }

    /// The lazy unary map `m(self)` (`abs`, `exp`, ...).
    ///
    /// # Errors
    /// As [`MaskedCsr::zip_scalar_view`](crate::MaskedCsr::zip_scalar_view): without a
    /// mask, a map that does not keep 0.
    pub fn map_view<'s, M: LaneMap<T> + Copy + Send + Sync + 's>(
        &'s self, m: M,
    ) -> Result<CsrZipView<'s, M::Output>>
    where
        M::Output: masked_core::Value,
    {
        self.zip_scalar_view(T::ZERO, Unary(m))
    }
}
