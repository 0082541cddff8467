//! # layout-csr
//!
//! The CSR layout of the `masked` engine, over `sprs` matrices. Unspecified (unstored)
//! elements have value 0, and sparse in means sparse out: a row reduction returns a
//! [`SparseVec`] storing exactly the rows that have a valid element.
//!
//! This build provides the fast path of "mask from indices": the mask is the matrix's
//! own stored pattern (every stored entry valid, explicit zeros included, nothing
//! unstored valid), reduced along dim 1 (rows) by every fold of the engine. Separate mask
//! patterns, dim 0 and all-dims reductions, and the remaining ops arrive with the CSR
//! issue; they return [`MaskedError::Unsupported`] until then.
//!
//! ```
//! use layout_csr::MaskedCsr;
//! use masked_core::MaskedReduce;
//! use sprs::CsMat;
//!
//! // [[-3, ., -1], [., ., .], [., 5, 0]] with an explicit stored zero
//! let m = CsMat::new((3, 3), vec![0, 2, 2, 4], vec![0, 2, 1, 2], vec![-3.0f64, -1.0, 5.0, 0.0]);
//! let a = MaskedCsr::from_pattern(m.view()).unwrap();
//! let s = a.amax(1, false).unwrap();
//! assert_eq!(s.indices(), &[0, 2]);         // row 1 has no valid element: not stored
//! assert_eq!(s.values(), &[-1.0, 5.0]);
//! let i = a.argmin(1, false).unwrap();
//! assert_eq!(i.values(), &[0, 2]);          // column indices; the stored zero counts
//! ```
#![deny(missing_docs)]

use masked_core::{Dims, Element, Fold, LaneMap, LaneStat, MaskedError, MaskedReduce, Result};
use rayon::prelude::*;
use sprs::{CsMat, CsMatViewI, SpIndex};

/// A CSR matrix whose mask is its own stored pattern.
#[derive(Debug, Clone)]
pub struct MaskedCsr<'a, T, I: SpIndex = usize, Iptr: SpIndex = I> {
    mat: CsMatViewI<'a, T, I, Iptr>,
}

impl<'a, T: Element, I: SpIndex, Iptr: SpIndex> MaskedCsr<'a, T, I, Iptr> {
    /// Masks `mat` with its own stored pattern ("mask from indices").
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] when `mat` is stored as CSC.
    pub fn from_pattern(mat: CsMatViewI<'a, T, I, Iptr>) -> Result<Self> {
        if !mat.is_csr() {
            return Err(MaskedError::InvalidData(
                "expected a CSR matrix, got CSC storage".into(),
            ));
        }
        Ok(MaskedCsr { mat })
    }

    /// The matrix.
    pub fn matrix(&self) -> &CsMatViewI<'a, T, I, Iptr> {
        &self.mat
    }
}

/// A sparse vector result: the stored positions are exactly the valid outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseVec<O> {
    shape: Vec<usize>,
    indices: Vec<usize>,
    values: Vec<O>,
}

impl<O> SparseVec<O> {
    /// Logical shape of the result (`[nrows]`, or `[nrows, 1]` with keepdim).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// Stored (valid) row positions, increasing.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }
    /// Values at the stored positions.
    pub fn values(&self) -> &[O] {
        &self.values
    }
}

/// Rows per parallel task, at least.
const ROW_GRAIN: usize = 256;

impl<T: Element, I: SpIndex, Iptr: SpIndex> MaskedCsr<'_, T, I, Iptr> {
    /// Checks that `dims` is dim 1 (rows) only.
    fn rows_only(dims: &Dims, op: &'static str) -> Result<()> {
        if dims.canonical(2)? != [1] {
            return Err(MaskedError::Unsupported {
                op,
                context: "on CSR over dims other than 1 in this build".into(),
            });
        }
        Ok(())
    }

    /// Applies `f` to every row's stored values and column indices, in parallel; a row
    /// for which `f` returns `None` is not stored in the result.
    fn per_row<O: Element + Send>(
        &self,
        keepdim: bool,
        f: impl Fn(&[T], &[I]) -> Option<O> + Sync,
    ) -> SparseVec<O> {
        let nrows = self.mat.rows();
        let indptr = self.mat.indptr();
        let (idx, data) = (self.mat.indices(), self.mat.data());
        let rows: Vec<Option<O>> = (0..nrows)
            .into_par_iter()
            .with_min_len(ROW_GRAIN)
            .map(|r| {
                let range = indptr.outer_inds_sz(r);
                f(&data[range.clone()], &idx[range])
            })
            .collect();
        let mut indices = Vec::new();
        let mut values = Vec::new();
        for (r, v) in rows.into_iter().enumerate() {
            if let Some(v) = v {
                indices.push(r);
                values.push(v);
            }
        }
        let shape = if keepdim { vec![nrows, 1] } else { vec![nrows] };
        SparseVec {
            shape,
            indices,
            values,
        }
    }
}

impl<'m, T: Element, I: SpIndex, Iptr: SpIndex> MaskedReduce<T> for MaskedCsr<'m, T, I, Iptr> {
    type Reduced<O: Element> = SparseVec<O>;
    type Mapped<O: Element> = CsMat<O>;
    type NanMasked<'a>
        = MaskedCsr<'m, T, I, Iptr>
    where
        Self: 'a;

    fn without_nans(&self) -> Result<Self> {
        Err(MaskedError::Unsupported {
            op: "nan-family",
            context: "on CSR in this build (a mask other than the stored pattern)".into(),
        })
    }

    fn fold_lanes<F: Fold<T>>(
        &self,
        op: &F,
        dims: &Dims,
        keepdim: bool,
    ) -> Result<SparseVec<F::Output>> {
        Self::rows_only(dims, op.name())?;
        Ok(self.per_row(keepdim, |xs, cols| {
            if xs.is_empty() && !op.valid_everywhere() {
                return None;
            }
            let mut st = op.identity();
            if op.positional() {
                for (x, c) in xs.iter().zip(cols) {
                    op.push(&mut st, *x, c.index() as i64);
                }
            } else {
                op.push_run(&mut st, xs, None, 0);
            }
            Some(op.finish(&st))
        }))
    }

    fn stat_lanes<S: LaneStat<T>>(
        &self,
        stat: &S,
        dims: &Dims,
        keepdim: bool,
    ) -> Result<SparseVec<S::Output>> {
        Self::rows_only(dims, stat.name())?;
        Ok(self.per_row(keepdim, |xs, cols| {
            if xs.is_empty() {
                return None;
            }
            let mut vals = xs.to_vec();
            let pos: Vec<i64> = if stat.positions() {
                cols.iter().map(|c| c.index() as i64).collect()
            } else {
                Vec::new()
            };
            Some(stat.compute_at(&mut vals, &pos))
        }))
    }

    /// Along dim 1 (rows): every row's stored values are its valid elements; the result
    /// has the input's pattern.
    fn map_lanes<M: LaneMap<T>>(&self, map: &M, dim: isize) -> Result<CsMat<M::Output>> {
        if masked_core::wrap_dim(dim, 2)? != 1 {
            return Err(MaskedError::Unsupported {
                op: map.name(),
                context: "on CSR along dim 0 in this build".into(),
            });
        }
        let (nrows, ncols) = self.mat.shape();
        let indptr = self.mat.indptr();
        let mut values = vec![M::Output::default(); self.mat.nnz()];
        // rows own disjoint ranges of `values`: split it along the indptr
        let mut pieces: Vec<&mut [M::Output]> = Vec::with_capacity(nrows);
        let mut rest: &mut [M::Output] = &mut values;
        for r in 0..nrows {
            let (a, b) = rest.split_at_mut(indptr.outer_inds_sz(r).len());
            pieces.push(a);
            rest = b;
        }
        let data = self.mat.data();
        pieces
            .into_par_iter()
            .with_min_len(ROW_GRAIN)
            .enumerate()
            .for_each(|(r, out)| {
                let range = indptr.outer_inds_sz(r);
                map.map(&data[range], None, out);
            });
        let idx = self.mat.indices();
        let mut proper = Vec::with_capacity(nrows + 1);
        let mut indices = Vec::with_capacity(self.mat.nnz());
        proper.push(0);
        for r in 0..nrows {
            indices.extend(idx[indptr.outer_inds_sz(r)].iter().map(|i| i.index()));
            proper.push(indices.len());
        }
        CsMat::try_new((nrows, ncols), proper, indices, values)
            .map_err(|(_, _, _, e)| MaskedError::InvalidData(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sprs::CsMat;

    proptest! {
        /// Every row fold equals the fold over the row's stored values (the dense oracle
        /// restricted to the pattern), on matrices with empty rows and explicit zeros.
        #[test]
        fn row_folds_equal_folds_over_stored_values(
            rows in prop::collection::vec(prop::collection::btree_map(0usize..40, -5i32..5, 0..12), 0..30)
        ) {
            let mut indptr = vec![0usize];
            let (mut ind, mut dat) = (Vec::new(), Vec::new());
            for r in &rows {
                for (&c, &v) in r {
                    ind.push(c);
                    dat.push(v as f64);
                }
                indptr.push(ind.len());
            }
            let m = CsMat::new((rows.len(), 40), indptr, ind, dat);
            let a = MaskedCsr::from_pattern(m.view()).unwrap();
            let sum = a.sum(1, false).unwrap();
            let amax = a.amax(-1, false).unwrap();
            let arg = a.argmax(1, true).unwrap();
            let cnt = a.count(1, false).unwrap();
            let nonempty: Vec<usize> = (0..rows.len()).filter(|&r| !rows[r].is_empty()).collect();
            prop_assert_eq!(sum.indices(), &nonempty[..]);
            prop_assert_eq!(arg.shape(), &[rows.len(), 1]);
            prop_assert_eq!(cnt.indices().len(), rows.len());
            for (k, &r) in nonempty.iter().enumerate() {
                let vals: Vec<(usize, f64)> = rows[r].iter().map(|(&c, &v)| (c, v as f64)).collect();
                prop_assert_eq!(sum.values()[k], vals.iter().map(|p| p.1).sum::<f64>());
                let mx = vals.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
                prop_assert_eq!(amax.values()[k], mx);
                let first = vals.iter().find(|p| p.1 == mx).unwrap().0 as i64;
                prop_assert_eq!(arg.values()[k], first);
            }
            for (r, row) in rows.iter().enumerate() {
                prop_assert_eq!(cnt.values()[r], row.len() as i64);
            }
        }
    }

    #[test]
    fn row_maps_and_stats_keep_the_pattern() {
        use masked_core::MedianMode;
        let m = CsMat::new(
            (4, 3),
            vec![0, 2, 2, 3, 5],
            vec![0, 2, 1, 0, 1],
            vec![1.0f64, 3.0, 5.0, 2.0, 2.0],
        );
        let v = m.slice_outer(1..4);
        let a = MaskedCsr::from_pattern(v.view()).unwrap();
        let sm = a.softmax(1).unwrap();
        assert_eq!(sm.indptr().raw_storage(), &[0, 0, 1, 3]);
        assert_eq!(sm.indices(), &[1, 0, 1]);
        assert_eq!(sm.data(), &[1.0, 0.5, 0.5]);
        let cs = a.cumsum(-1).unwrap();
        assert_eq!(cs.data(), &[5.0, 2.0, 4.0]);
        let med = a.median(1, false, MedianMode::Avg).unwrap();
        assert_eq!(med.indices(), &[1, 2]);
        assert_eq!(med.values(), &[5.0, 2.0]);
        assert!(a.softmax(0).is_err());
        assert!(a.nansum(1, false).is_err());
        let empty = CsMat::<f32>::zero((0, 3));
        let e = MaskedCsr::from_pattern(empty.view()).unwrap();
        assert_eq!(e.softmax(1).unwrap().nnz(), 0);
        assert!(e.sum(1, false).unwrap().indices().is_empty());
    }

    #[test]
    fn views_with_offset_indptr_and_bad_input() {
        let m = CsMat::new(
            (3, 3),
            vec![0, 1, 2, 4],
            vec![0, 1, 0, 2],
            vec![1.0f32, 2.0, 3.0, 4.0],
        );
        // rows 1..3: a view whose indptr does not start at 0
        let v = m.slice_outer(1..3);
        let a = MaskedCsr::from_pattern(v.view()).unwrap();
        assert_eq!(a.sum(1, false).unwrap().values(), &[2.0, 7.0]);
        assert!(matches!(
            a.sum(0, false),
            Err(MaskedError::Unsupported { .. })
        ));
        assert!(matches!(
            a.sum(2, false),
            Err(MaskedError::DimOutOfRange { .. })
        ));
        let csc = m.to_csc();
        assert!(MaskedCsr::from_pattern(csc.view()).is_err());
    }
}
