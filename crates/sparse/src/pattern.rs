//! A validated 2-D sparse index pattern: the mask of a CSR matrix ("mask from indices").

use masked_core::mask::merge_positions;
use masked_core::{check_lengths, BitMask, BoolArray, MaskLogic, MaskedError, Result, ShapeLike};
use sprs::{CsMatViewI, SpIndex};
use std::borrow::Borrow;

/// A validated compressed-row index pattern: for every row, the strictly increasing
/// column indices of its valid positions. A position in the pattern is valid; any other
/// is not.
///
/// Every constructor validates and returns a typed error naming the first bad entry:
/// [`MaskedError::IndexOutOfRange`] for an index outside the shape,
/// [`MaskedError::DuplicateIndex`] for a position given twice.
///
/// ```
/// use masked::{Pattern, PatternI};
/// // a padding mask for a batch of 3 sequences of lengths 2, 0, 4 padded to 4
/// let p = Pattern::from_lengths([3, 4], &[2, 0, 4]).unwrap();
/// assert_eq!(p.row(0), &[0, 1]);
/// assert!(p.row(1).is_empty());
/// assert_eq!(p.nnz(), 6);
/// // a causal attention mask with u32 column indices
/// let c = PatternI::<u32>::causal(3).unwrap();
/// assert_eq!(c.row(2), &[0, 1, 2]);
/// // from coordinates (one array per dim) in any order; a duplicate is an error
/// let q = Pattern::from_coords([2, 3], &[[1, 0], [2, 1]]).unwrap();
/// assert_eq!(q.indptr(), &[0, 1, 2]);
/// assert!(Pattern::from_coords([2, 3], &[[1, 1], [2, 2]]).is_err());
/// ```
///
/// Serialised (serde) as `{"shape": [nrows, ncols], "indptr": [...], "indices": [...]}`
/// (scipy's CSR arrays). Deserialising re-validates through
/// [`Pattern::try_from_parts`]: the kernels index without bounds checks on these
/// invariants, so a corrupted or hostile pattern is an error, never undefined behaviour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternI<I: SpIndex = usize> {
    shape: (usize, usize),
    indptr: Vec<usize>,
    indices: Vec<I>,
}

/// A CSR index pattern with `usize` column indices, the common case (as `sprs`'s `CsMat`
/// is `CsMatI` with `usize` indices): `Pattern::from_lengths(...)` needs no type
/// annotation. [`PatternI`] with another index type (`u32` halves the index memory).
pub type Pattern = PatternI<usize>;

/// Converts a column index to the pattern's index type, or says it does not fit.
fn to_index<I: SpIndex>(c: usize, entry: usize, ncols: usize) -> Result<I> {
    I::try_from_usize(c).ok_or(MaskedError::IndexOutOfRange {
        entry,
        dim: 1,
        index: c as i64,
        size: ncols,
    })
}

/// Checks that `ncols - 1` fits the index type.
fn check_width<I: SpIndex>(ncols: usize) -> Result<()> {
    if ncols > 0 && I::try_from_usize(ncols - 1).is_none() {
        return Err(MaskedError::InvalidData(format!(
            "{ncols} columns do not fit the pattern's index type"
        )));
    }
    Ok(())
}

impl<I: SpIndex> PatternI<I> {
    /// A pattern from a zero-based row pointer (`nrows + 1` entries) and the column
    /// indices of every row, strictly increasing within a row.
    ///
    /// # Errors
    /// A malformed `indptr` ([`MaskedError::InvalidData`]), an index out of range, a
    /// duplicate or an unsorted row.
    pub fn try_from_parts(
        shape: (usize, usize), indptr: Vec<usize>, indices: Vec<I>,
    ) -> Result<Self> {
        let (nrows, ncols) = shape;
        if indptr.len() != nrows.saturating_add(1)
            || indptr[0] != 0
            || indptr[nrows] != indices.len()
            || indptr.windows(2).any(|w| w[0] > w[1])
        {
            return Err(MaskedError::InvalidData(format!(
                "row pointer must have {} non-decreasing entries from 0 to {}",
                nrows as u128 + 1,
                indices.len()
            )));
        }
        for r in 0..nrows {
            let row = &indices[indptr[r]..indptr[r + 1]];
            for (k, c) in row.iter().enumerate() {
                let entry = indptr[r] + k;
                let ci = c.try_index().filter(|&ci| ci < ncols);
                let Some(ci) = ci else {
                    return Err(MaskedError::IndexOutOfRange {
                        entry,
                        dim: 1,
                        index: c.to_i64().unwrap_or(-1),
                        size: ncols,
                    });
                };
                if k > 0 {
                    let prev = row[k - 1].index();
                    if prev == ci {
                        return Err(MaskedError::DuplicateIndex {
                            coords: vec![r, ci],
                            first: entry - 1,
                            second: entry,
                        });
                    }
                    if prev > ci {
                        return Err(MaskedError::InvalidData(format!(
                            "column indices of row {r} are not increasing at entry {entry}"
                        )));
                    }
                }
            }
        }
        Ok(PatternI {
            shape,
            indptr,
            indices,
        })
    }

    /// A pattern from its coordinates, one index array per dim (`[rows, cols]`, of
    /// equal length), in any order: the same arguments as every layout's `from_coords`.
    ///
    /// # Errors
    /// A shape that is not 2-D or not two arrays of one length
    /// ([`MaskedError::InvalidData`]), an index out of range, a position given twice
    /// (naming both entries).
    pub fn from_coords<C: AsRef<[usize]>>(shape: impl ShapeLike, coords: &[C]) -> Result<Self> {
        let shape = shape.to_shape2()?;
        let (nrows, ncols) = shape;
        let [rows, cols] = coords else {
            return Err(MaskedError::InvalidData(format!(
                "{} coordinate arrays for a 2-d shape",
                coords.len()
            )));
        };
        let (rows, cols) = (rows.as_ref(), cols.as_ref());
        if rows.len() != cols.len() {
            return Err(MaskedError::InvalidData(format!(
                "coordinate array 1 has {} entries, expected {} (as array 0)",
                cols.len(),
                rows.len()
            )));
        }
        check_width::<I>(ncols)?;
        let mut counts = Vec::new();
        counts
            .try_reserve_exact(nrows.saturating_add(1))
            .map_err(|_| {
                MaskedError::InvalidData(format!(
                    "a pattern of {nrows} rows: too many row pointers to allocate"
                ))
            })?;
        counts.resize(nrows + 1, 0usize);
        for (e, (&r, &c)) in rows.iter().zip(cols).enumerate() {
            for (dim, index, size) in [(0, r, nrows), (1, c, ncols)] {
                if index >= size {
                    return Err(MaskedError::IndexOutOfRange {
                        entry: e,
                        dim,
                        index: index as i64,
                        size,
                    });
                }
            }
            counts[r + 1] += 1;
        }
        for r in 0..nrows {
            counts[r + 1] += counts[r];
        }
        let indptr = counts.clone();
        // counting sort by row, keeping the entry number to name duplicates
        let mut slot = counts;
        let mut order = vec![(0usize, 0usize); rows.len()];
        for (e, (&r, &c)) in rows.iter().zip(cols).enumerate() {
            order[slot[r]] = (c, e);
            slot[r] += 1;
        }
        let mut indices = Vec::with_capacity(rows.len());
        for r in 0..nrows {
            let row = &mut order[indptr[r]..indptr[r + 1]];
            row.sort_unstable();
            for k in 0..row.len() {
                if k > 0 && row[k].0 == row[k - 1].0 {
                    let (a, b) = (row[k - 1].1.min(row[k].1), row[k - 1].1.max(row[k].1));
                    return Err(MaskedError::DuplicateIndex {
                        coords: vec![r, row[k].0],
                        first: a,
                        second: b,
                    });
                }
                indices.push(to_index(row[k].0, row[k].1, ncols)?);
            }
        }
        Ok(PatternI {
            shape,
            indptr,
            indices,
        })
    }

    /// The stored pattern of a CSR matrix (owned or a view): every stored entry is a
    /// valid position, explicit zeros included.
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] for CSC storage.
    pub fn of<T, Iptr: SpIndex>(m: &CsMatViewI<'_, T, I, Iptr>) -> Result<Self> {
        Self::from_matrix(m, |_| true)
    }

    /// The stored entries of `m` for which `pred(value)` holds. A bool matrix used as a
    /// mask passes `|&b| b`: an explicitly stored `false` is not valid.
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] for CSC storage.
    pub fn from_predicate<T, Iptr: SpIndex>(
        m: &CsMatViewI<'_, T, I, Iptr>, pred: impl Fn(&T) -> bool,
    ) -> Result<Self> {
        Self::from_matrix(m, pred)
    }

    fn from_matrix<T, Iptr: SpIndex>(
        m: &CsMatViewI<'_, T, I, Iptr>, pred: impl Fn(&T) -> bool,
    ) -> Result<Self> {
        if !m.is_csr() {
            return Err(MaskedError::InvalidData(
                "expected a CSR matrix, got CSC storage".into(),
            ));
        }
        let ip = m.indptr();
        let mut indptr = Vec::with_capacity(m.rows() + 1);
        let mut indices = Vec::new();
        indptr.push(0);
        for r in 0..m.rows() {
            let range = ip.outer_inds_sz(r);
            for (c, v) in m.indices()[range.clone()].iter().zip(&m.data()[range]) {
                if pred(v) {
                    indices.push(*c);
                }
            }
            indptr.push(indices.len());
        }
        Ok(PatternI {
            shape: (m.rows(), m.cols()),
            indptr,
            indices,
        })
    }

    /// The `true` positions of a 2-D `ndarray` bool array (owned, a view or a
    /// reference).
    ///
    /// # Errors
    /// An array that is not 2-D, more columns than the index type holds.
    pub fn from_array(mask: impl BoolArray) -> Result<Self> {
        let v = mask.bool_view();
        Self::from_bools(v.shape(), v.iter())
    }

    /// The `true` positions of a 2-D mask given as its bools in row-major order (any
    /// iterable of `bool` or `&bool`).
    ///
    /// # Errors
    /// A shape that is not 2-D, more columns than the index type holds,
    /// [`MaskedError::MaskLength`] when there is not exactly one value per element.
    pub fn from_bools<B: Borrow<bool>>(
        shape: impl ShapeLike, bools: impl IntoIterator<Item = B>,
    ) -> Result<Self> {
        let (nrows, ncols) = shape.to_shape2()?;
        check_width::<I>(ncols)?;
        // the bit mask checks the count (an endless iterator is a length error)
        let m = BitMask::from_bools([nrows, ncols], bools)?;
        let mut indptr = vec![0usize; nrows + 1];
        let mut indices = Vec::with_capacity(m.count_ones());
        for f in m.as_bitvec().iter_ones() {
            indices.push(I::from_usize_unchecked(f % ncols));
            indptr[f / ncols + 1] += 1;
        }
        for r in 0..nrows {
            indptr[r + 1] += indptr[r];
        }
        Ok(PatternI {
            shape: (nrows, ncols),
            indptr,
            indices,
        })
    }

    /// A padding mask of shape `[batch, len]`: row `r` is valid at columns
    /// `0..lengths[r]` (a batch of sequences of these lengths padded to `len`).
    ///
    /// # Errors
    /// A shape that is not 2-D or not of `lengths.len()` rows, a length above `len`
    /// ([`MaskedError::LengthOutOfRange`] naming the sequence).
    ///
    /// ```
    /// use masked::Pattern;
    /// let e = Pattern::from_lengths([2, 5], &[1, 9]).unwrap_err();
    /// assert_eq!(e.to_string(), "length 9 of sequence 1 is above the padded length 5");
    /// ```
    pub fn from_lengths(shape: impl ShapeLike, lengths: &[usize]) -> Result<Self> {
        let shape = shape.to_shape2()?;
        check_lengths(&[shape.0, shape.1], lengths)?;
        check_width::<I>(shape.1)?;
        Self::from_row_ranges(shape, |r| 0..lengths[r])
    }

    /// A causal (lower-triangular) attention mask of `n` x `n`: row `i` is valid at
    /// columns `0..=i`.
    ///
    /// # Errors
    /// More columns than the index type holds.
    pub fn causal(n: usize) -> Result<Self> {
        Self::banded([n, n], n, 0)
    }

    /// A banded mask: row `i` is valid at columns `i - lower ..= i + upper` (clipped to
    /// the shape). `banded(shape, w, 0)` is a causal sliding window of `w + 1` positions.
    ///
    /// # Errors
    /// A shape that is not 2-D, more columns than the index type holds.
    pub fn banded(shape: impl ShapeLike, lower: usize, upper: usize) -> Result<Self> {
        let shape = shape.to_shape2()?;
        check_width::<I>(shape.1)?;
        Self::from_row_ranges(shape, |r| {
            let lo = r.saturating_sub(lower).min(shape.1);
            let hi = r.saturating_add(upper).saturating_add(1).min(shape.1);
            lo..hi.max(lo)
        })
    }

    /// Every row valid on one contiguous column range (width already checked). The
    /// row pointer and the entries are reserved fallibly: a shape too large for memory
    /// is an error, not an abort.
    fn from_row_ranges(
        shape: (usize, usize), range: impl Fn(usize) -> std::ops::Range<usize>,
    ) -> Result<Self> {
        let too_large = |what: &str, n: u128| {
            MaskedError::InvalidData(format!(
                "a pattern of shape {shape:?} needs {n} {what}: too large to allocate"
            ))
        };
        let mut indptr = Vec::new();
        indptr
            .try_reserve_exact(shape.0.saturating_add(1))
            .map_err(|_| too_large("row pointers", shape.0 as u128 + 1))?;
        indptr.push(0);
        let mut total = 0usize;
        for r in 0..shape.0 {
            total = total
                .checked_add(range(r).len())
                .ok_or_else(|| too_large("entries", u128::MAX))?;
            indptr.push(total);
        }
        let mut indices = Vec::new();
        indices
            .try_reserve_exact(total)
            .map_err(|_| too_large("entries", total as u128))?;
        for r in 0..shape.0 {
            indices.extend(range(r).map(I::from_usize_unchecked));
        }
        Ok(PatternI {
            shape,
            indptr,
            indices,
        })
    }

    /// Every position of `shape` (dense-sized: for tests and small shapes).
    ///
    /// # Errors
    /// More columns than the index type holds.
    pub fn full(shape: impl ShapeLike) -> Result<Self> {
        let shape = shape.to_shape2()?;
        check_width::<I>(shape.1)?;
        Self::from_row_ranges(shape, |_| 0..shape.1)
    }

    /// `(nrows, ncols)`.
    pub fn shape(&self) -> (usize, usize) {
        self.shape
    }
    /// Number of valid positions.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }
    /// Zero-based row pointer (`nrows + 1` entries).
    pub fn indptr(&self) -> &[usize] {
        &self.indptr
    }
    /// Column indices of all rows, row after row.
    pub fn indices(&self) -> &[I] {
        &self.indices
    }
    /// The valid columns of row `r` (empty past the last row).
    pub fn row(&self, r: usize) -> &[I] {
        if r >= self.shape.0 {
            return &[];
        }
        &self.indices[self.indptr[r]..self.indptr[r + 1]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprs::CsMat;

    #[test]
    fn constructors_validate() {
        assert!(matches!(
            PatternI::<usize>::from_coords((2, 3), &[vec![0, 2], vec![0, 0]]),
            Err(MaskedError::IndexOutOfRange {
                entry: 1,
                dim: 0,
                index: 2,
                size: 2
            })
        ));
        assert!(matches!(
            PatternI::<usize>::from_coords((2, 3), &[vec![0, 1, 0], vec![1, 0, 1]]),
            Err(MaskedError::DuplicateIndex {
                first: 0,
                second: 2,
                ..
            })
        ));
        assert!(PatternI::<usize>::from_coords((2, 3), &[vec![0], vec![]]).is_err());
        assert!(matches!(
            PatternI::<usize>::try_from_parts((1, 3), vec![0, 2], vec![1, 1]),
            Err(MaskedError::DuplicateIndex { .. })
        ));
        assert!(PatternI::<usize>::try_from_parts((1, 3), vec![0, 2], vec![2, 1]).is_err());
        assert!(PatternI::<usize>::try_from_parts((1, 3), vec![0, 1], vec![3]).is_err());
        assert!(PatternI::<usize>::try_from_parts((2, 3), vec![0, 1], vec![0]).is_err());
        assert_eq!(
            Pattern::from_lengths([2, 2], &[1, 3]).unwrap_err(),
            MaskedError::LengthOutOfRange {
                row: 1,
                length: 3,
                max: 2
            }
        );
        assert!(Pattern::from_lengths([3, 2], &[1, 1]).is_err());
        assert!(Pattern::from_bools([2, 2], [true, false, true]).is_err());
        assert!(Pattern::from_bools([2, 2], [true; 5]).is_err());
        assert_eq!(
            Pattern::from_bools([3, 0], [false; 0]).unwrap().indptr(),
            &[0, 0, 0, 0]
        );
        assert!(PatternI::<u16>::full((1, 70_000)).is_err());
        assert!(PatternI::<u16>::from_coords((1, 70_000), &[vec![0], vec![69_999]]).is_err());
    }

    #[test]
    fn shapes_of_the_generated_masks() {
        let b = PatternI::<usize>::banded((4, 5), 1, 1).unwrap();
        assert_eq!(b.indptr(), &[0, 2, 5, 8, 11]);
        assert_eq!(b.row(3), &[2, 3, 4]);
        let c = PatternI::<usize>::causal(3).unwrap();
        assert_eq!(c.indices(), &[0, 0, 1, 0, 1, 2]);
        let d = Pattern::from_array(ndarray::arr2(&[
            [true, false],
            [false, false],
            [true, true],
        ]))
        .unwrap();
        assert_eq!(
            Pattern::from_bools([3, 2], [true, false, false, false, true, true]).unwrap(),
            d
        );
        assert_eq!(d.indptr(), &[0, 1, 1, 3]);
        let q = PatternI::<usize>::from_coords((3, 2), &[vec![2, 0, 2], vec![1, 0, 0]]).unwrap();
        assert_eq!(q, d);
        let m = CsMat::new(
            (2, 2),
            vec![0, 2, 3],
            vec![0, 1, 1],
            vec![true, false, true],
        );
        let p = PatternI::from_predicate(&m.view(), |&b| b).unwrap();
        assert_eq!(p.indices(), &[0, 1]);
        assert_eq!(PatternI::of(&m.view()).unwrap().nnz(), 3);
    }
}

/// The portable serialised form of a [`Pattern`].
#[derive(serde::Serialize, serde::Deserialize)]
struct PatternRepr {
    shape: (usize, usize),
    indptr: Vec<usize>,
    indices: Vec<usize>,
}

impl<I: SpIndex> serde::Serialize for PatternI<I> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        PatternRepr {
            shape: self.shape,
            indptr: self.indptr.clone(),
            indices: self.indices.iter().map(|i| i.index()).collect(),
        }
        .serialize(s)
    }
}

impl<'de, I: SpIndex> serde::Deserialize<'de> for PatternI<I> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error;
        let r = PatternRepr::deserialize(d)?;
        let indices = r
            .indices
            .iter()
            .enumerate()
            .map(|(k, &c)| to_index::<I>(c, k, r.shape.1))
            .collect::<Result<Vec<I>>>()
            .map_err(D::Error::custom)?;
        PatternI::try_from_parts(r.shape, r.indptr, indices).map_err(D::Error::custom)
    }
}

/// The mask of a CSR matrix, as given to `MaskedCsr::new` or read back with
/// `MaskedCsr::mask_kind` (and what `MaskedCoo::to_csr` gives).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CsrMask<I: SpIndex = usize> {
    /// The input's own stored pattern.
    Stored,
    /// A separate pattern of the input's shape.
    Pattern(PatternI<I>),
    /// No mask: every element valid, unstored ones as 0.
    All,
}

impl<I: SpIndex> PatternI<I> {
    /// `logic(self, other)` of two patterns of one shape: one merge per row.
    ///
    /// # Errors
    /// [`MaskedError::ShapeMismatch`] for patterns of different shapes.
    pub fn logic(&self, other: &PatternI<I>, logic: MaskLogic) -> Result<PatternI<I>> {
        if self.shape() != other.shape() {
            let (a, b) = (self.shape(), other.shape());
            return Err(MaskedError::ShapeMismatch {
                what: "mask logic of two patterns".into(),
                left: vec![a.0, a.1],
                right: vec![b.0, b.1],
            });
        }
        let mut indptr = Vec::with_capacity(self.shape().0 + 1);
        indptr.push(0);
        let mut indices = Vec::new();
        for r in 0..self.shape().0 {
            merge_positions(self.row(r), other.row(r), logic, &mut indices);
            indptr.push(indices.len());
        }
        PatternI::try_from_parts(self.shape(), indptr, indices)
    }
}

masked_core::mask_operators!(PatternI<I>, I: SpIndex);
