//! Conversions of a typed `MaskedCsr` into the other layouts, masks carried along. They
//! live here, above the layouts, because the CSR and COO layouts are siblings that do
//! not import each other (the COO layout converts a CSR matrix's parts:
//! [`MaskedCoo::from_csr`]).

use layout_coo::MaskedCoo;
use layout_csr::{CsrIndex, MaskedCsr};
use layout_dense::MaskedArrayD;
use masked_core::{Element, Result};
use sprs::SpIndex;

/// A masked CSR matrix as 2-D COO (stored entries, values and mask kind carried).
///
/// # Errors
/// `MaskedError::InvalidData` when `rows * cols` overflows.
///
/// ```
/// use masked::{csr_to_coo, MaskedCsr, MaskedOps};
/// let m = sprs::CsMat::new((2, 3), vec![0, 1, 2], vec![2, 1], vec![5.0f32, 7.0]);
/// let a = MaskedCsr::from_pattern(m.view()).unwrap();
/// let c = csr_to_coo(&a).unwrap();
/// assert_eq!(c.pattern().flat(), vec![2, 4]);
/// assert_eq!(c.sum(1, false).unwrap(), a.sum(1, false).unwrap());
/// ```
pub fn csr_to_coo<T: Element, I: CsrIndex, Iptr: SpIndex>(
    a: &MaskedCsr<'_, T, I, Iptr>,
) -> Result<MaskedCoo<T>> {
    MaskedCoo::from_csr(a.matrix(), &a.mask_kind())
}

/// A masked CSR matrix densified (zeros where unstored, the mask as bits).
///
/// # Errors
/// As `TryFrom<&MaskedCoo> for MaskedArrayD` (a size that cannot be allocated).
pub fn csr_to_dense<T: Element, I: CsrIndex, Iptr: SpIndex>(
    a: &MaskedCsr<'_, T, I, Iptr>,
) -> Result<MaskedArrayD<T>> {
    MaskedArrayD::try_from(&csr_to_coo(a)?)
}
