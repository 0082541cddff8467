//! Conversions between the layouts, masks carried along: dense ↔ COO (any rank), a CSR
//! matrix's parts ↔ COO and dense → CSR (2-D). The conversions that take a typed
//! `MaskedCsr` are the engine's (`masked::csr_to_coo`, `masked::csr_to_dense`): this
//! layout does not import the CSR layout.

use crate::pattern::size_of;
use crate::{CooMask, CooPattern, MaskedCoo};
use layout_dense::{MaskedArray, MaskedArrayD};
use masked_core::{BitMask, Element, MaskedError, Result};
use masked_sparse::{CsrMask, Pattern};
use ndarray::{ArrayD, Data, Dimension, IxDyn};
use sprs::{CsMat, CsMatViewI, SpIndex};

/// A dense masked array as COO: with a mask, the valid elements are stored and the mask
/// is their pattern ([`CooMask::Stored`]); without one, the nonzero elements are stored
/// and every element stays valid ([`CooMask::All`]; a `-0.0` is then read back as `0.0`).
///
/// ```
/// use masked::MaskedCoo;
/// use masked::MaskedArray;
/// use masked::{BitMask, MaskedOps};
/// use ndarray::array;
/// let d = MaskedArray::new(array![[1.0f64, 2.0], [3.0, 4.0]],
///     BitMask::from_bools(&[2, 2], [true, false, false, true]).unwrap()).unwrap();
/// let c = MaskedCoo::from(&d);
/// assert_eq!(c.pattern().flat(), vec![0, 3]);
/// assert_eq!(c.sum(1, false).unwrap().values(), d.sum(1, false).unwrap().values().as_slice().unwrap());
/// ```
impl<T: Element, S: Data<Elem = T>, D: Dimension> From<&MaskedArray<S, D>> for MaskedCoo<T> {
    fn from(a: &MaskedArray<S, D>) -> Self {
        let mut flat = Vec::new();
        let mut values = Vec::new();
        let mask = match a.mask() {
            Some(m) => {
                for (i, &x) in a.values().iter().enumerate() {
                    if m.get(i) {
                        flat.push(i);
                        values.push(x);
                    }
                }
                CooMask::Stored
            }
            None => {
                for (i, &x) in a.values().iter().enumerate() {
                    if x != T::default() {
                        flat.push(i);
                        values.push(x);
                    }
                }
                CooMask::All
            }
        };
        let pattern = CooPattern::from_flat(a.shape(), &flat)
            .expect("positions of a dense array are increasing and inside its shape");
        MaskedCoo::from_parts(pattern, values, mask)
            .expect("one value per position, and no separate mask")
    }
}

/// Scatters `values` at the increasing flat positions of `pattern` into a zero array.
fn scatter<T: Element>(pattern: &CooPattern, values: &[T], size: usize) -> Result<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(size).map_err(|_| {
        MaskedError::InvalidData(format!(
            "a dense array of shape {:?} does not fit in memory",
            pattern.shape()
        ))
    })?;
    out.resize(size, T::default());
    for (&f, &v) in pattern.flat_slice().iter().zip(values) {
        out[f] = v;
    }
    Ok(out)
}

fn bits_at(pattern: &CooPattern) -> Result<BitMask> {
    let mut m = BitMask::filled(pattern.shape(), false)?;
    for &f in pattern.flat_slice() {
        m.set(f, true);
    }
    Ok(m)
}

/// A COO array densified: zeros where unstored, the mask kept (a stored pattern or a
/// separate one become a bit mask; no mask stays none).
///
/// # Errors
/// [`MaskedError::InvalidData`] when the dense array cannot be allocated.
impl<T: Element> TryFrom<&MaskedCoo<T>> for MaskedArrayD<T> {
    type Error = MaskedError;

    fn try_from(a: &MaskedCoo<T>) -> Result<Self> {
        let shape = a.shape();
        let data = scatter(a.pattern(), a.values(), size_of(shape)?)?;
        let data = ArrayD::from_shape_vec(IxDyn(shape), data)
            .map_err(|e| MaskedError::InvalidData(e.to_string()))?;
        match a.mask() {
            CooMask::Stored => MaskedArray::new(data, bits_at(a.pattern())?),
            CooMask::Pattern(p) => MaskedArray::new(data, bits_at(&p)?),
            CooMask::All => Ok(MaskedArray::unmasked(data)),
        }
    }
}

/// The COO pattern of a CSR structure (`indptr` from 0).
fn csr_pattern<I: SpIndex>(
    shape: (usize, usize), indptr: impl Iterator<Item = usize>, indices: &[I],
) -> Result<CooPattern> {
    let mut rows = Vec::with_capacity(indices.len());
    let ptr: Vec<usize> = indptr.collect();
    for r in 0..shape.0 {
        rows.extend(std::iter::repeat_n(r, ptr[r + 1] - ptr[r]));
    }
    let cols: Vec<usize> = indices[..ptr[shape.0]].iter().map(|i| i.index()).collect();
    CooPattern::from_coords([shape.0, shape.1], &[rows, cols])
}

impl<T: Element> MaskedCoo<T> {
    /// A CSR matrix and its mask (a `MaskedCsr`'s `matrix()` and `mask_kind()`) as 2-D
    /// COO: the stored entries, values and mask kind carried.
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] when `rows * cols` overflows.
    ///
    /// ```
    /// use masked::{CsrMask, MaskedCoo, MaskedOps};
    /// let m = sprs::CsMat::new((2, 3), vec![0, 1, 2], vec![2, 1], vec![5.0f32, 7.0]);
    /// let c = MaskedCoo::from_csr(&m.view(), &CsrMask::Stored).unwrap();
    /// assert_eq!(c.pattern().flat(), vec![2, 4]);
    /// assert_eq!(c.sum(1, false).unwrap().values(), &[5.0, 7.0]);
    /// ```
    pub fn from_csr<I: SpIndex, Iptr: SpIndex>(
        m: &CsMatViewI<'_, T, I, Iptr>, mask: &CsrMask<I>,
    ) -> Result<Self> {
        let ptr = m.indptr();
        let base = ptr.raw_storage()[0].index();
        let pattern = csr_pattern(
            m.shape(),
            ptr.raw_storage().iter().map(|p| p.index() - base),
            m.indices(),
        )?;
        let mask = match mask {
            CsrMask::Stored => CooMask::Stored,
            CsrMask::All => CooMask::All,
            CsrMask::Pattern(p) => CooMask::Pattern(csr_pattern(
                p.shape(),
                p.indptr().iter().copied(),
                p.indices(),
            )?),
        };
        MaskedCoo::from_parts(pattern, m.data().to_vec(), mask)
    }
}

/// The CSR row pointer and column indices of a 2-D pattern.
fn csr_parts(p: &CooPattern) -> (usize, usize, Vec<usize>, Vec<usize>) {
    let (nrows, ncols) = (p.shape()[0], p.shape()[1]);
    let mut indptr = vec![0usize; nrows + 1];
    for &r in p.coords(0) {
        indptr[r + 1] += 1;
    }
    for r in 0..nrows {
        indptr[r + 1] += indptr[r];
    }
    (nrows, ncols, indptr, p.coords(1).to_vec())
}

impl<T: Element> MaskedCoo<T> {
    /// A 2-D COO array as an owned CSR matrix and its mask; view it with
    /// `MaskedCsr::new`.
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] when the array is not 2-D.
    ///
    /// ```
    /// use masked::MaskedCoo;
    /// use masked::MaskedCsr;
    /// use masked::MaskedOps;
    /// let c = MaskedCoo::from_pattern(&[2, 3], &[vec![1, 0], vec![2, 1]], vec![5.0f32, 7.0]).unwrap();
    /// let (m, mask) = c.to_csr().unwrap();
    /// assert_eq!(m.indptr().raw_storage(), &[0, 1, 2]);
    /// let csr = MaskedCsr::new(m.view(), mask).unwrap();
    /// assert_eq!(csr.sum(1, false).unwrap(), c.sum(1, false).unwrap());
    /// ```
    pub fn to_csr(&self) -> Result<(CsMat<T>, CsrMask<usize>)> {
        if self.shape().len() != 2 {
            return Err(MaskedError::InvalidData(format!(
                "a {}-d COO array is not a matrix",
                self.shape().len()
            )));
        }
        let (nrows, ncols, indptr, indices) = csr_parts(self.pattern());
        let mat = CsMat::try_new((nrows, ncols), indptr, indices, self.values().to_vec())
            .map_err(|(_, _, _, e)| MaskedError::InvalidData(e.to_string()))?;
        let mask = match self.mask() {
            CooMask::Stored => CsrMask::Stored,
            CooMask::All => CsrMask::All,
            CooMask::Pattern(p) => {
                let (nr, nc, ptr, ind) = csr_parts(&p);
                CsrMask::Pattern(Pattern::try_from_parts((nr, nc), ptr, ind)?)
            }
        };
        Ok((mat, mask))
    }
}

/// A 2-D dense masked array as an owned CSR matrix and its mask (see
/// `From<&MaskedArray> for MaskedCoo` for what is stored).
///
/// # Errors
/// [`MaskedError::InvalidData`] when the array is not 2-D.
pub fn dense_to_csr<T: Element, S: Data<Elem = T>, D: Dimension>(
    a: &MaskedArray<S, D>,
) -> Result<(CsMat<T>, CsrMask<usize>)> {
    MaskedCoo::from(a).to_csr()
}

#[cfg(test)]
mod tests {
    use super::*;
    use masked_core::MaskedOps;
    use ndarray::array;

    #[test]
    fn round_trips_keep_values_and_masks() {
        let d = MaskedArray::new(
            array![[0.0f64, 2.0, 0.0], [3.0, 0.0, -1.0]].into_dyn(),
            BitMask::from_bools([2, 3], [true, true, false, false, true, true]).unwrap(),
        )
        .unwrap();
        let c = MaskedCoo::from(&d);
        assert_eq!(c.pattern().flat(), vec![0, 1, 4, 5]);
        assert_eq!(c.values(), &[0.0, 2.0, 0.0, -1.0]);
        let back = MaskedArrayD::try_from(&c).unwrap();
        assert_eq!(back.mask_vec(), d.mask_vec());
        assert_eq!(
            back.sum(1, false).unwrap().values(),
            d.sum(1, false).unwrap().values()
        );
        let (m, mask) = dense_to_csr(&d).unwrap();
        assert_eq!(mask, CsrMask::Stored);
        let dd = MaskedArrayD::try_from(&MaskedCoo::from_csr(&m.view(), &mask).unwrap()).unwrap();
        assert_eq!(dd.mask_vec(), d.mask_vec());
        // unmasked: nonzeros stored, every element valid
        let u = MaskedArray::unmasked(array![[0.0f32, 5.0], [0.0, 0.0]]);
        let cu = MaskedCoo::from(&u);
        assert_eq!(cu.nnz(), 1);
        assert_eq!(cu.mask(), CooMask::All);
        assert_eq!(cu.count(Dims::all(), false).unwrap().values(), &[4]);
        assert!(MaskedArrayD::try_from(&cu).unwrap().mask().is_none());
        // a separate mask survives COO -> CSR -> COO
        let p = CooPattern::from_coords([2, 2], &[vec![0, 1], vec![0, 1]]).unwrap();
        let cp = MaskedCoo::try_new(
            [2, 2],
            &[vec![0], vec![1]],
            vec![5.0f32],
            CooMask::Pattern(p.clone()),
        )
        .unwrap();
        let (m2, k2) = cp.to_csr().unwrap();
        let again = MaskedCoo::from_csr(&m2.view(), &k2).unwrap();
        assert_eq!(again.mask(), CooMask::Pattern(p));
        assert_eq!(again.pattern(), cp.pattern());
        assert!(MaskedCoo::from_pattern([2], &[vec![0]], vec![1.0f32])
            .unwrap()
            .to_csr()
            .is_err());
    }
    use masked_core::Dims;
}
