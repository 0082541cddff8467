//! The result type of a reduction over a sparse layout: sparse in, sparse out.

use crate::error::{MaskedError, Result};
use crate::wire::WireNum;
use serde::{Deserialize, Serialize};

/// An n-D sparse array whose stored positions are exactly the valid outputs of a
/// reduction over a sparse input (CSR or COO). Positions are row-major flat indices into
/// [`SparseArray::shape`], strictly increasing; a 0-d result has shape `[]` and stores
/// position 0 or nothing.
///
/// ```
/// use masked::SparseArray;
/// let a = SparseArray::new(vec![2, 3], vec![1, 5], vec![7.0f32, 8.0]).unwrap();
/// assert_eq!(a.coords(), vec![vec![0, 1], vec![1, 2]]);
/// assert_eq!(a.get(&[1, 2]), Some(&8.0));
/// assert_eq!(a.get(&[0, 0]), None);
/// ```
///
/// Serialised (serde) as `{"shape", "indices", "values"}`, each value through
/// [`Num`](crate::Num) (in JSON a NaN is `"NaN"`, an infinity `"inf"` or `"-inf"`);
/// deserialising re-validates through [`SparseArray::new`] (lengths, increasing positions
/// inside the shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    try_from = "SparseRepr<O>",
    bound(serialize = "O: WireNum", deserialize = "O: WireNum")
)]
pub struct SparseArray<O> {
    shape: Vec<usize>,
    indices: Vec<usize>,
    #[serde(with = "crate::wire::nums")]
    values: Vec<O>,
}

/// The serialised form of a [`SparseArray`], checked on the way in.
#[derive(Deserialize)]
#[serde(bound(deserialize = "O: WireNum"))]
struct SparseRepr<O> {
    shape: Vec<usize>,
    indices: Vec<usize>,
    #[serde(with = "crate::wire::nums")]
    values: Vec<O>,
}

impl<O> TryFrom<SparseRepr<O>> for SparseArray<O> {
    type Error = MaskedError;
    fn try_from(r: SparseRepr<O>) -> Result<Self> {
        SparseArray::new(r.shape, r.indices, r.values)
    }
}

impl<O> SparseArray<O> {
    /// A sparse array from its shape, increasing flat positions and their values.
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] when the lengths differ or the positions are not
    /// strictly increasing and inside the shape.
    pub fn new(shape: Vec<usize>, indices: Vec<usize>, values: Vec<O>) -> Result<Self> {
        if indices.len() != values.len() {
            return Err(MaskedError::InvalidData(format!(
                "{} positions but {} values",
                indices.len(),
                values.len()
            )));
        }
        let size = crate::mask::element_count(&shape)?;
        // one branch-free pass (it vectorises; `any` stops early but is a branch per pair)
        let unsorted = indices
            .windows(2)
            .fold(false, |bad, w| bad | (w[0] >= w[1]));
        if unsorted || indices.last().is_some_and(|&i| i >= size) {
            return Err(MaskedError::InvalidData(format!(
                "positions must be strictly increasing and below {size}"
            )));
        }
        Ok(SparseArray {
            shape,
            indices,
            values,
        })
    }

    /// Logical shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// Stored (valid) positions, as row-major flat indices, increasing.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }
    /// Values at the stored positions.
    pub fn values(&self) -> &[O] {
        &self.values
    }
    /// Number of stored positions.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }
    /// The stored positions as coordinates: one vector per dim, each of length
    /// [`SparseArray::nnz`] (the `coords` array of a COO file).
    pub fn coords(&self) -> Vec<Vec<usize>> {
        unravel(&self.shape, &self.indices)
    }
    /// The value stored at `coords`, if that position is valid.
    pub fn get(&self, coords: &[usize]) -> Option<&O> {
        if coords.len() != self.shape.len() || coords.iter().zip(&self.shape).any(|(c, s)| c >= s) {
            return None;
        }
        let flat = coords
            .iter()
            .zip(&self.shape)
            .fold(0, |f, (c, s)| f * s + c);
        self.indices
            .binary_search(&flat)
            .ok()
            .map(|k| &self.values[k])
    }
    /// The parts: shape, flat positions, values.
    pub fn into_parts(self) -> (Vec<usize>, Vec<usize>, Vec<O>) {
        (self.shape, self.indices, self.values)
    }
}

impl<O: Clone> SparseArray<O> {
    /// The dense array with `fill` at unstored (invalid) positions, as every container's
    /// `filled`: a result handed to code that wants plain arrays (dense-sized).
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] when the shape's size overflows.
    ///
    /// ```
    /// use masked::SparseArray;
    /// let s = SparseArray::new(vec![2, 2], vec![1, 2], vec![5.0, 6.0]).unwrap();
    /// assert_eq!(s.filled(0.0).unwrap(), ndarray::array![[0.0, 5.0], [6.0, 0.0]].into_dyn());
    /// ```
    pub fn filled(&self, fill: O) -> Result<ndarray::ArrayD<O>> {
        crate::mask::element_count(&self.shape)?;
        ndarray::ArrayD::from_shape_vec(self.shape.clone(), self.to_dense_vec(fill))
            .map_err(|e| MaskedError::InvalidData(e.to_string()))
    }

    /// Row-major dense values with `fill` at unstored positions (for tests and small
    /// outputs; dense-sized).
    pub fn to_dense_vec(&self, fill: O) -> Vec<O> {
        let mut out = vec![fill; self.shape.iter().product()];
        for (&i, v) in self.indices.iter().zip(&self.values) {
            out[i] = v.clone();
        }
        out
    }
}

/// The coordinates of row-major flat positions in `shape`: one vector per dim, each as
/// long as `flat`.
pub fn unravel(shape: &[usize], flat: &[usize]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::with_capacity(flat.len()); shape.len()];
    for &f in flat {
        let mut rest = f;
        for d in (0..shape.len()).rev() {
            out[d].push(rest % shape[d].max(1));
            rest /= shape[d].max(1);
        }
    }
    out
}
