//! # layout-coo
//!
//! The n-D COO layout of the `masked` engine: coordinates + values of any rank (batch ×
//! sequence × feature, ...), accepted in any order and stored canonically (row-major
//! sorted; a repeated position is an error). Unspecified elements have value 0, and
//! sparse in means sparse out: reductions and normalizations return a [`SparseArray`]
//! storing exactly their valid outputs.
//!
//! The mask of a [`MaskedCoo`] ([`CooMask`]) is the input's own stored pattern (the
//! fast path), a separate [`CooPattern`] (a valid position not stored takes part as 0,
//! a stored value outside the mask is ignored), or none (every element valid).
//!
//! Every op of [`MaskedOps`](masked_core::MaskedOps) runs over any set of dims with keepdim either way, and
//! the normalizations along any one dim. A reduction groups the entries by their kept
//! coordinates (no data moves when the reduced dims are the trailing ones; otherwise an
//! O(nnz) counting sort by group, or an O(nnz log nnz) sort when groups far outnumber
//! entries) and runs the CSR layout's lane kernels on the groups: the ops are not
//! written again here.
//!
//! Conversions: dense ↔ COO (any rank) and CSR ↔ COO with `From`/`TryFrom`, dense ↔ CSR
//! with [`dense_to_csr`] / [`csr_to_dense`]; masks are carried along.
//!
//! ```
//! use layout_coo::MaskedCoo;
//! use masked_core::MaskedOps;
//!
//! // a [2, 2, 3] tensor with 4 stored entries, given unsorted
//! let coords = [vec![1, 0, 0, 1], vec![1, 0, 1, 1], vec![2, 0, 2, 0]];
//! let a = MaskedCoo::from_pattern(&[2, 2, 3], &coords, vec![4.0f64, 1.0, 2.0, 3.0]).unwrap();
//! let s = a.sum([0, 2], false).unwrap();         // over dims (0, 2): shape [2]
//! assert_eq!(s.shape(), &[2]);
//! assert_eq!(s.values(), &[1.0, 9.0]);
//! let m = a.amax(1, true).unwrap();              // keepdim: shape [2, 1, 3]
//! assert_eq!(m.indices(), &[0, 2, 3, 5]);        // only lanes with a valid element
//! assert_eq!(m.values(), &[1.0, 2.0, 3.0, 4.0]);
//! let p = a.softmax(2).unwrap();                 // stores exactly the valid entries
//! assert_eq!(p.indices(), &[0, 5, 9, 11]);
//! assert!((p.values()[2] - 1.0 / (1.0 + 1f64.exp())).abs() < 1e-15);
//! ```
#![deny(missing_docs)]

mod convert;
mod group;
mod pattern;

pub use convert::{csr_to_dense, dense_to_csr};
pub use masked_core::SparseArray;
pub use pattern::CooPattern;

use group::{group, Grouped};
use masked_core::{
    not_nan_words, wrap_dim, Dims, Element, Fold, LaneKernels, LaneMap, LaneStat, MaskedError,
    Result,
};
use masked_kernels::fresh_vec;
use rayon::prelude::*;
use std::borrow::Cow;

/// The mask of a [`MaskedCoo`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CooMask {
    /// The input's own stored positions ("mask from indices"): every stored entry is
    /// valid, explicit zeros included.
    Stored,
    /// A separate pattern of the input's shape.
    Pattern(CooPattern),
    /// No mask: every element valid, unstored ones as 0.
    All,
}

/// The resolved mask: a separate pattern carries the input's values at its positions.
#[derive(Debug, Clone)]
enum Resolved<T> {
    Stored,
    Own { pattern: CooPattern, values: Vec<T> },
    All,
}

/// An n-D COO array with a sparse mask. See the [crate docs](crate).
#[derive(Debug, Clone)]
pub struct MaskedCoo<T> {
    pattern: CooPattern,
    values: Vec<T>,
    mask: Resolved<T>,
}

impl<T: Element> MaskedCoo<T> {
    /// A masked COO array from a shape, one coordinate array per dim (any order), the
    /// values of the entries, and the mask.
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] for mismatched lengths,
    /// [`MaskedError::IndexOutOfRange`] / [`MaskedError::DuplicateIndex`] naming the
    /// entry, [`MaskedError::ShapeMismatch`] for a mask pattern of another shape.
    pub fn try_new<C: AsRef<[usize]>>(
        shape: &[usize],
        coords: &[C],
        values: Vec<T>,
        mask: CooMask,
    ) -> Result<Self> {
        let (pattern, perm) = CooPattern::canonical(shape, coords, values.len())?;
        let values = match perm {
            Some(p) => p.par_iter().map(|&e| values[e]).collect(),
            None => values,
        };
        Self::from_parts(pattern, values, mask)
    }

    /// A masked COO array over a canonical pattern and its values (in the pattern's
    /// order).
    ///
    /// # Errors
    /// A value count other than the pattern's, a mask pattern of another shape.
    pub fn from_parts(pattern: CooPattern, values: Vec<T>, mask: CooMask) -> Result<Self> {
        if values.len() != pattern.nnz() {
            return Err(MaskedError::InvalidData(format!(
                "{} values for {} stored positions",
                values.len(),
                pattern.nnz()
            )));
        }
        let mask = match mask {
            CooMask::Stored => Resolved::Stored,
            CooMask::All => Resolved::All,
            CooMask::Pattern(m) => {
                if m.shape() != pattern.shape() {
                    return Err(MaskedError::ShapeMismatch {
                        what: "COO mask pattern vs input".into(),
                        left: m.shape().to_vec(),
                        right: pattern.shape().to_vec(),
                    });
                }
                let values = resolve(&pattern, &values, &m);
                Resolved::Own { pattern: m, values }
            }
        };
        Ok(MaskedCoo {
            pattern,
            values,
            mask,
        })
    }

    /// Masks the entries with their own positions ("mask from indices"): every stored
    /// entry is valid, explicit zeros included.
    ///
    /// # Errors
    /// As [`MaskedCoo::try_new`].
    pub fn from_pattern<C: AsRef<[usize]>>(
        shape: &[usize],
        coords: &[C],
        values: Vec<T>,
    ) -> Result<Self> {
        Self::try_new(shape, coords, values, CooMask::Stored)
    }

    /// No mask: every element valid, unstored ones with value 0.
    ///
    /// # Errors
    /// As [`MaskedCoo::try_new`].
    pub fn unmasked<C: AsRef<[usize]>>(
        shape: &[usize],
        coords: &[C],
        values: Vec<T>,
    ) -> Result<Self> {
        Self::try_new(shape, coords, values, CooMask::All)
    }

    /// A separate mask pattern: a valid position not stored takes part as 0, a stored
    /// value outside the mask is ignored.
    ///
    /// # Errors
    /// As [`MaskedCoo::try_new`].
    pub fn with_mask<C: AsRef<[usize]>>(
        shape: &[usize],
        coords: &[C],
        values: Vec<T>,
        mask: CooPattern,
    ) -> Result<Self> {
        Self::try_new(shape, coords, values, CooMask::Pattern(mask))
    }

    /// Logical shape.
    pub fn shape(&self) -> &[usize] {
        self.pattern.shape()
    }
    /// The stored positions (canonical order).
    pub fn pattern(&self) -> &CooPattern {
        &self.pattern
    }
    /// The stored values, in the pattern's order.
    pub fn values(&self) -> &[T] {
        &self.values
    }
    /// Number of stored entries.
    pub fn nnz(&self) -> usize {
        self.pattern.nnz()
    }
    /// The mask.
    pub fn mask(&self) -> CooMask {
        match &self.mask {
            Resolved::Stored => CooMask::Stored,
            Resolved::Own { pattern, .. } => CooMask::Pattern(pattern.clone()),
            Resolved::All => CooMask::All,
        }
    }

    /// The lanes the kernels run on: the valid positions (a separate mask's positions
    /// with the input's values resolved onto them) and whether unstored positions are
    /// valid zeros.
    pub fn lanes(&self) -> CooLanes<'_, T> {
        match &self.mask {
            Resolved::Own { pattern, values } => CooLanes {
                pattern,
                values,
                valid: None,
                fill: false,
            },
            m => CooLanes {
                pattern: &self.pattern,
                values: &self.values,
                valid: None,
                fill: matches!(m, Resolved::All),
            },
        }
    }
}

/// The input's values at the positions of `mask` (0 where not stored): a merge of the
/// two sorted position lists.
fn resolve<T: Element>(pattern: &CooPattern, values: &[T], mask: &CooPattern) -> Vec<T> {
    let (have, want) = (pattern.flat(), mask.flat());
    let mut out = vec![T::default(); want.len()];
    let mut j = 0;
    for (o, w) in out.iter_mut().zip(&want) {
        while j < have.len() && have[j] < *w {
            j += 1;
        }
        if j < have.len() && have[j] == *w {
            *o = values[j];
        }
    }
    out
}

/// The lanes of a masked COO array as the kernels see them: entries (positions and
/// values), optional validity bits per entry, and whether the unstored positions are
/// valid zeros. Get one from [`MaskedCoo::lanes`]; every op of [`MaskedOps`](masked_core::MaskedOps) runs on
/// it.
#[derive(Debug, Clone)]
pub struct CooLanes<'a, T> {
    pattern: &'a CooPattern,
    values: &'a [T],
    valid: Option<Cow<'a, [u64]>>,
    fill: bool,
}

impl<'a, T: Element> CooLanes<'a, T> {
    /// The same lanes with validity bits `!is_nan` ANDed in.
    pub fn nan_masked(&self) -> CooLanes<'a, T> {
        CooLanes {
            valid: Some(Cow::Owned(not_nan_words(
                self.values,
                self.valid.as_deref(),
            ))),
            ..*self
        }
    }

    /// Logical shape.
    pub fn shape(&self) -> &[usize] {
        self.pattern.shape()
    }

    /// The entries grouped by the dims not in `reduced`.
    fn grouped(&self, reduced: &[usize], full: bool) -> Result<Grouped<'_, T>> {
        let coords: Vec<&[usize]> = (0..self.pattern.ndim())
            .map(|d| self.pattern.coords(d))
            .collect();
        group(
            self.shape(),
            &coords,
            self.values,
            self.valid.as_deref(),
            reduced,
            full || self.fill,
        )
    }

    /// A reduction over `dims`: `run` reduces the rows of the grouped lanes, whose
    /// stored rows become the kept positions of the output.
    fn reduce<O>(
        &self,
        dims: &Dims,
        keepdim: bool,
        full: bool,
        run: impl FnOnce(&layout_csr::CsrLanes<'_, T, usize>) -> Result<SparseArray<O>>,
    ) -> Result<SparseArray<O>> {
        let reduced = dims.canonical(self.shape().len())?;
        let g = self.grouped(&reduced, full)?;
        let rows = run(&g.lanes(self.fill)?)?;
        let (_, rows_at, values) = rows.into_parts();
        let ids = rows_at.into_iter().map(|r| g.id(r)).collect();
        SparseArray::new(self.out_shape(&reduced, keepdim), ids, values)
    }

    /// The shape of a reduction over `reduced`.
    fn out_shape(&self, reduced: &[usize], keepdim: bool) -> Vec<usize> {
        let shape = self.shape();
        (0..shape.len())
            .filter_map(|d| match (reduced.contains(&d), keepdim) {
                (false, _) => Some(shape[d]),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect()
    }

    /// A fold by scattering: every entry, in stored order, is pushed into the state of
    /// its kept position, so nothing is sorted. The entries are cut into at most
    /// [`SCATTER_PARTS`] contiguous parts (fixed by the entry count, not the thread
    /// count), each with a state per kept position, merged in order afterwards: the
    /// result does not depend on the thread count, and within a lane the positions
    /// still arrive in order (stored order is row-major).
    ///
    /// `None` where the grouped row kernels apply instead: the reduced dims trailing (no
    /// reordering needed), no mask (unstored zeros count), or more kept positions than
    /// entries (the states would outweigh the data).
    fn scatter_fold<F: Fold<T>>(
        &self,
        op: &F,
        reduced: &[usize],
        keepdim: bool,
    ) -> Result<Option<SparseArray<F::Output>>> {
        let shape = self.shape();
        let nnz = self.values.len();
        let kept: Vec<usize> = (0..shape.len()).filter(|d| !reduced.contains(d)).collect();
        let nkept = kept.iter().map(|&d| shape[d]).product::<usize>();
        let in_order = kept.iter().enumerate().all(|(i, &d)| i == d);
        if in_order || self.fill || nkept > nnz.max(1 << 12) {
            return Ok(None);
        }
        let coords = || (0..shape.len()).map(|d| self.pattern.coords(d));
        let keys = pattern::flat_of(coords(), &group::sub_strides(shape, &kept), nnz);
        let pos = op
            .positional()
            .then(|| pattern::flat_of(coords(), &group::sub_strides(shape, reduced), nnz));
        let parts = nnz.div_ceil(1 << 16).clamp(1, SCATTER_PARTS);
        let per = nnz.div_ceil(parts);
        let valid = self.valid.as_deref();
        let mut states: Vec<(Vec<F::State>, Vec<u64>)> = (0..parts)
            .into_par_iter()
            .map(|p| {
                let mut st: Vec<F::State> = (0..nkept).map(|_| op.identity()).collect();
                let mut seen = vec![0u64; nkept.div_ceil(64)];
                for e in p * per..((p + 1) * per).min(nnz) {
                    if valid.is_some_and(|w| (w[e / 64] >> (e % 64)) & 1 == 0) {
                        continue;
                    }
                    let k = keys[e];
                    let at = pos.as_ref().map_or(0, |c| c[e] as i64);
                    op.push(&mut st[k], self.values[e], at);
                    seen[k / 64] |= 1 << (k % 64);
                }
                (st, seen)
            })
            .collect();
        let (mut st, mut seen) = states.remove(0);
        for (other, other_seen) in states {
            st.par_iter_mut()
                .zip(other.into_par_iter())
                .with_min_len(1 << 12)
                .for_each(|(a, b)| op.merge(a, b));
            for (a, b) in seen.iter_mut().zip(other_seen) {
                *a |= b;
            }
        }
        let every = op.valid_everywhere();
        let (ids, values): (Vec<usize>, Vec<F::Output>) = st
            .par_iter()
            .enumerate()
            .with_min_len(1 << 12)
            .filter(|(k, _)| every || (seen[k / 64] >> (k % 64)) & 1 == 1)
            .map(|(k, s)| (k, op.finish(s)))
            .unzip();
        SparseArray::new(self.out_shape(reduced, keepdim), ids, values).map(Some)
    }

    /// A map along `d` straight over the groups (no validity bits, no unstored valid
    /// positions: every entry is mapped and stored), scattered back to stored order.
    fn map_groups<M: LaneMap<T>>(&self, map: &M, d: usize) -> Result<SparseArray<M::Output>> {
        let nnz = self.values.len();
        let ndim = self.shape().len();
        let g = if d + 1 == ndim {
            let others: Vec<&[usize]> = (0..d).map(|k| self.pattern.coords(k)).collect();
            group::along_last(&others, self.shape()[d], self.values)
        } else {
            self.grouped(&[d], false)?
        };
        let mut out: Vec<M::Output> = fresh_vec(nnz);
        // blocks of whole groups of about 2^15 entries, mapped in parallel
        let mut blocks = Vec::new();
        let ngroups = g.indptr.len() - 1;
        let (mut rest, mut r0): (&mut [M::Output], usize) = (&mut out, 0);
        while r0 < ngroups {
            let mut r1 = r0 + 1;
            while r1 < ngroups && g.indptr[r1] - g.indptr[r0] < 1 << 15 {
                r1 += 1;
            }
            let (a, b) = rest.split_at_mut(g.indptr[r1] - g.indptr[r0]);
            blocks.push((r0..r1, a));
            rest = b;
            r0 = r1;
        }
        blocks.into_par_iter().for_each(|(rows, o)| {
            let base = g.indptr[rows.start];
            for r in rows {
                let e = g.indptr[r]..g.indptr[r + 1];
                map.map(
                    &g.values[e.clone()],
                    None,
                    &mut o[e.start - base..e.end - base],
                );
            }
        });
        let values = match &g.perm {
            None => out,
            Some(perm) => {
                let mut v: Vec<M::Output> = fresh_vec(nnz);
                for (k, &p) in perm.iter().enumerate() {
                    v[p] = out[k];
                }
                v
            }
        };
        SparseArray::new(self.shape().to_vec(), self.pattern.flat(), values)
    }
}

/// At most this many parts in a scatter fold (each holds a state per kept position).
const SCATTER_PARTS: usize = 4;

impl<'a, T: Element> LaneKernels<T> for CooLanes<'a, T> {
    type Reduced<O: Element> = SparseArray<O>;
    type Mapped<O: Element> = SparseArray<O>;
    type NanMasked<'b>
        = CooLanes<'b, T>
    where
        Self: 'b;

    fn without_nans(&self) -> Result<CooLanes<'_, T>> {
        Ok(self.nan_masked())
    }

    fn fold_lanes<F: Fold<T>>(
        &self,
        op: &F,
        dims: &Dims,
        keepdim: bool,
    ) -> Result<SparseArray<F::Output>> {
        let reduced = dims.canonical(self.shape().len())?;
        if let Some(r) = self.scatter_fold(op, &reduced, keepdim)? {
            return Ok(r);
        }
        self.reduce(dims, keepdim, op.valid_everywhere(), |l| {
            l.fold_lanes(op, &Dims::from(1), false)
        })
    }

    fn stat_lanes<S: LaneStat<T>>(
        &self,
        stat: &S,
        dims: &Dims,
        keepdim: bool,
    ) -> Result<SparseArray<S::Output>> {
        self.reduce(dims, keepdim, false, |l| {
            l.stat_lanes(stat, &Dims::from(1), false)
        })
    }

    /// Along any one dim; the output stores exactly the valid entries (every element
    /// without a mask).
    fn map_lanes<M: LaneMap<T>>(&self, map: &M, dim: isize) -> Result<SparseArray<M::Output>> {
        let shape = self.shape();
        if shape.is_empty() {
            return Err(MaskedError::Unsupported {
                op: "a normalization",
                context: "on a 0-d array".into(),
            });
        }
        let d = wrap_dim(dim, shape.len())?;
        if !self.fill && self.valid.is_none() {
            return self.map_groups(map, d);
        }
        let g = self.grouped(&[d], false)?;
        let out = g.lanes(self.fill)?.map_lanes(map, 1)?;
        let (len, inner) = (shape[d], shape[d + 1..].iter().product::<usize>());
        let indptr = out.indptr();
        let indptr = indptr.raw_storage();
        let cols = out.indices();
        let flat: Vec<usize> = (0..indptr.len() - 1)
            .into_par_iter()
            .with_min_len(1 << 12)
            .flat_map_iter(|r| {
                let gid = g.id(r);
                let (outer, low) = if inner == 1 {
                    (gid, 0)
                } else {
                    (gid / inner, gid % inner)
                };
                cols[indptr[r]..indptr[r + 1]]
                    .iter()
                    .map(move |&c| (outer * len + c) * inner + low)
            })
            .collect();
        let (_, _, values) = out.into_raw_storage();
        if inner == 1 {
            return SparseArray::new(shape.to_vec(), flat, values);
        }
        // entries are in (kept, position) order; the output is row-major
        let mut order: Vec<usize> = (0..flat.len()).collect();
        order.par_sort_unstable_by_key(|&k| flat[k]);
        let f = order.iter().map(|&k| flat[k]).collect();
        let v = order.iter().map(|&k| values[k]).collect();
        SparseArray::new(shape.to_vec(), f, v)
    }
}

impl<T: Element> LaneKernels<T> for MaskedCoo<T> {
    type Reduced<O: Element> = SparseArray<O>;
    type Mapped<O: Element> = SparseArray<O>;
    type NanMasked<'a>
        = CooLanes<'a, T>
    where
        Self: 'a;

    fn without_nans(&self) -> Result<CooLanes<'_, T>> {
        Ok(self.lanes().nan_masked())
    }

    fn fold_lanes<F: Fold<T>>(
        &self,
        op: &F,
        dims: &Dims,
        keepdim: bool,
    ) -> Result<SparseArray<F::Output>> {
        self.lanes().fold_lanes(op, dims, keepdim)
    }

    fn stat_lanes<S: LaneStat<T>>(
        &self,
        stat: &S,
        dims: &Dims,
        keepdim: bool,
    ) -> Result<SparseArray<S::Output>> {
        self.lanes().stat_lanes(stat, dims, keepdim)
    }

    fn map_lanes<M: LaneMap<T>>(&self, map: &M, dim: isize) -> Result<SparseArray<M::Output>> {
        self.lanes().map_lanes(map, dim)
    }
}
