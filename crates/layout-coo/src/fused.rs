//! Fused elementwise-then-reduce on COO: [`CooZipView`], a lazy `z(a, b)` (or a lazy
//! unary map) on a COO array's entries. A reduction over trailing dims (a 2-D array's
//! rows, an n-D array's last dims: the entries are already in lane order) groups the
//! entries without their values and runs on the CSR layout's fused lanes, a row task
//! at a time, so the values are never stored whole. Other reductions (their lanes need
//! the entries reordered) and every normalization compute the values once, one per
//! entry on the shared pattern, and run the ordinary kernels.

use crate::group::rows_in_order;
use crate::lanes::{out_shape, CooLanes};
use crate::zip::fill_chunks;
use crate::{CooPattern, MaskedCoo};
use layout_dense::{MaskedArray, Unary};
use masked_core::{
    Dims, Element, Fold, LaneMap, LaneStat, MaskRule, MaskedReduce, Result, SparseArray, Value,
    ZipMap,
};
use masked_kernels::fresh_vec;
use masked_sparse::{Cols, ColsBuf, DynEntries, EntryValues, FusedLanes, ZipEntries};
use masked_sparse::{DenseOperand, Entries, EntryRhs as Rhs};
use ndarray::{Data, Dimension};
use std::borrow::Cow;
use std::sync::OnceLock;

// named by the docs' links
#[allow(unused_imports)]
use masked_core::{MaskedError, MaskedOps, ZipKernels};

/// A lazy `z(a, b)` on COO entries: a masked COO array of `O` values (`O` the op's
/// output type, [`ZipMap::Output`]) computed only when a kernel reads them (see the module docs and docs/semantics.md, "Fused
/// elementwise-then-reduce"). Every op of [`MaskedOps`] runs on
/// it. Get one from [`MaskedCoo::zip_view`], [`MaskedCoo::zip_dense_view`],
/// [`MaskedCoo::zip_scalar_view`] or [`MaskedCoo::map_view`].
///
/// Two arrays of different patterns are merged when the view is made (the merged
/// pattern is new, so its values are computed with it); every other view shares its
/// input's pattern.
///
/// The op is held type-erased ([`DynEntries`]): one view type per value type, so the
/// reduction kernels are compiled once per value type rather than once per op.
pub struct CooZipView<'a, O: Element> {
    pattern: Cow<'a, CooPattern>,
    /// Validity bit per entry under the mask rule (`None`: every entry valid).
    valid: Option<Vec<u64>>,
    /// Whether the unstored positions are valid zeros (inputs without a mask).
    fill: bool,
    /// `None`: the values were computed with the pattern (`cache` holds them).
    src: Option<DynEntries<'a, O>>,
    cache: OnceLock<Vec<O>>,
}

impl<T: Element> MaskedCoo<T> {
    /// The lazy `z(self, rhs)` under `rule` with another COO array of this shape. On
    /// one pattern the output validity is computed now (a bit per entry) and the values
    /// when a reduction or normalization reads them; two patterns are merged now,
    /// values included.
    ///
    /// # Errors
    /// As [`ZipKernels::zip_elements`]: shapes that
    /// differ, masks that differ under [`MaskRule::Strict`], an op that does not keep 0
    /// on arrays without a mask, an integer op undefined at a valid entry (for the lazy
    /// values: when they are read).
    ///
    /// ```
    /// use masked::binary::{KeepBin, KeepZip};
    /// use masked::{MaskRule, MaskedCoo, MaskedOps};
    /// let coords = [vec![0usize, 0, 1], vec![0usize, 2, 1]];
    /// let a = MaskedCoo::from_pattern([2, 3], &coords, vec![1.0f64, 2.0, 3.0]).unwrap();
    /// let w = MaskedCoo::from_pattern([2, 3], &coords, vec![4.0f64, 5.0, 6.0]).unwrap();
    /// let aw = a.zip_view(&w, KeepZip(KeepBin::Mul), MaskRule::Strict).unwrap();
    /// assert_eq!(aw.sum(1, false).unwrap().values(), &[14.0, 18.0]); // never stores a * w
    /// ```
    pub fn zip_view<'s, Z: ZipMap<T> + 's>(
        &'s self, rhs: &'s MaskedCoo<T>, z: Z, rule: MaskRule,
    ) -> Result<CooZipView<'s, Z::Output>>
    where
        Z::Output: Element,
    {
        let (a, b, same) = crate::zip::pair(z.name(), self, rhs)?;
        if same && a.fill == b.fill {
            let rhs = Rhs::Same(b.values, b.valid);
            return entries(a, rhs, z, rule);
        }
        let fill = a.fill && b.fill;
        let (_, flat, values) = a.zip_merge(&b, &z, rule)?.into_parts();
        let cache = OnceLock::new();
        let _ = cache.set(values);
        Ok(CooZipView {
            pattern: Cow::Owned(CooPattern::from_flat(self.shape(), &flat)?),
            valid: None,
            fill,
            src: None,
            cache,
        })
    }

    /// The lazy `z(self, rhs)` under `rule` with a dense array broadcastable to this
    /// array's shape, read only at the valid entries.
    ///
    /// # Errors
    /// As [`MaskedCoo::zip_view`]; an array without a mask
    /// ([`MaskedError::Unsupported`]: every position would be valid).
    pub fn zip_dense_view<'s, S: Data<Elem = T>, D: Dimension, Z: ZipMap<T> + 's>(
        &'s self, rhs: &'s MaskedArray<S, D>, z: Z, rule: MaskRule,
    ) -> Result<CooZipView<'s, Z::Output>>
    where
        Z::Output: Element,
    {
        let d = DenseOperand::new(z.name(), rhs.dense_parts(), self.shape())?;
        entries(self.lanes(), Rhs::Dense(d), z, rule)
    }

    /// The lazy `z(self, s)` with a scalar (a scalar on the left is the `Swapped` op).
    ///
    /// # Errors
    /// Without a mask, an op with `z(0, s) != 0` ([`MaskedError::Unsupported`]).
    pub fn zip_scalar_view<'s, Z: ZipMap<T> + 's>(
        &'s self, s: T, z: Z,
    ) -> Result<CooZipView<'s, Z::Output>>
    where
        Z::Output: Element,
    {
        entries(self.lanes(), Rhs::Scalar(s), z, MaskRule::Strict)
    }

    /// The lazy unary map `m(self)` (`abs`, `exp`, ...).
    ///
    /// # Errors
    /// As [`MaskedCoo::zip_scalar_view`]: without a mask, a map that does not keep 0.
    pub fn map_view<'s, M: LaneMap<T> + Copy + Send + Sync + 's>(
        &'s self, m: M,
    ) -> Result<CooZipView<'s, M::Output>>
    where
        M::Output: Value + Element,
    {
        self.zip_scalar_view(T::ZERO, Unary(m))
    }
}

/// A view of `z(x, rhs)` on the entries of `l` under `rule`: the rule's checks and the
/// entries' validity now, the values later.
fn entries<'a, T: Element, Z: ZipMap<T> + 'a>(
    l: CooLanes<'a, T>, rhs: Rhs<'a, T>, z: Z, rule: MaskRule,
) -> Result<CooZipView<'a, Z::Output>>
where
    Z::Output: Element,
{
    rhs.keeps_unstored(l.fill, &z)?;
    let valid = l.validity(&rhs.other(), z.name(), rule)?;
    Ok(CooZipView {
        pattern: Cow::Borrowed(l.pattern),
        valid,
        fill: l.fill,
        src: Some(Box::new(ZipEntries::new(l, rhs, z))),
        cache: OnceLock::new(),
    })
}

impl<'a, O: Element> CooZipView<'a, O> {
    /// The logical shape.
    pub fn shape(&self) -> &[usize] {
        self.pattern.shape()
    }

    /// Whether the values are computed and held (by a kernel that needed them whole,
    /// or at construction for a merged structure); until then nothing of the size of
    /// the elementwise result is stored.
    pub fn is_materialized(&self) -> bool {
        self.cache.get().is_some()
    }

    /// The lazy source, unless the values are already computed.
    fn lazy(&self) -> Option<&(dyn EntryValues<O> + 'a)> {
        self.src.as_deref().filter(|_| self.cache.get().is_none())
    }

    /// The lanes over every value, computed once and kept (the fallback of kernels
    /// that do not run on the grouped fused lanes).
    ///
    /// # Errors
    /// An integer op undefined at a valid entry.
    pub fn materialize(&self) -> Result<CooLanes<'_, O>> {
        if let Some(src) = self.lazy() {
            let mut out = fresh_vec::<O>(self.pattern.nnz());
            let bad = fill_chunks(&mut out, self.valid.as_deref(), |lo, bits, o| {
                src.compute(0..0, lo..lo + o.len(), bits, o).err()
            });
            if let Some(k) = bad {
                return Err(src.error_at(k));
            }
            let _ = self.cache.set(out);
        }
        Ok(CooLanes {
            pattern: &self.pattern,
            values: self.cache.get().map_or(&[][..], Vec::as_slice),
            valid: self.valid.as_deref().map(Cow::Borrowed),
            fill: self.fill,
        })
    }

    /// A reduction over trailing `dims` on the fused lanes of the entries' rows (found
    /// by a scan of the coordinates; no values stored); `None` where the lanes need the
    /// entries reordered, or the values are computed already.
    fn fused<R>(
        &self, dims: &Dims, keepdim: bool, full: bool,
        run: impl FnOnce(&FusedLanes<'_, O, &(dyn EntryValues<O> + 'a)>) -> Result<SparseArray<R>>,
    ) -> Result<Option<SparseArray<R>>> {
        let Some(src) = self.lazy() else {
            return Ok(None);
        };
        let shape = self.shape();
        let reduced = dims.canonical(shape.len())?;
        let nkept = shape.len() - reduced.len();
        if shape.is_empty() || reduced.iter().enumerate().any(|(i, &d)| d != nkept + i) {
            return Ok(None);
        }
        let coords: Vec<&[usize]> = (0..shape.len()).map(|d| self.pattern.coords(d)).collect();
        let g = rows_in_order(shape, &coords, self.pattern.nnz(), nkept, full || self.fill)?;
        // SAFETY: `rows_in_order` builds the rows of a validated pattern (row pointer
        // from 0 to nnz without decreasing; within a row the reduced positions are
        // distinct, increasing and below `ncols`); the validity bits (one per entry, in
        // the same order) are as many words as the entries need.
        let lanes = unsafe {
            FusedLanes::new_unchecked(
                (g.indptr.len() - 1, g.ncols),
                Cow::Borrowed(&g.indptr[..]),
                ColsBuf::Borrowed(Cols::Usize(&g.cols[..])),
                self.valid.as_deref().map(Cow::Borrowed),
                self.fill,
                src,
            )
        };
        let rows = run(&lanes)?;
        g.ungroup(out_shape(shape, &reduced, keepdim), rows)
            .map(Some)
    }
}

impl<'a, O: Element> MaskedReduce<O> for CooZipView<'a, O> {
    masked_core::reduce_types!(<P> SparseArray<P>, MaskedCoo<P>, <'b> CooLanes<'b, O>);

    /// Computes the values (the NaN mask needs them).
    fn without_nans(&self) -> Result<CooLanes<'_, O>> {
        Ok(self.materialize()?.nan_masked())
    }

    fn fold_lanes<F: Fold<O>>(
        &self, op: &F, dims: &Dims, keepdim: bool,
    ) -> Result<SparseArray<F::Output>> {
        let every = op.valid_everywhere();
        match self.fused(dims, keepdim, every, |l| {
            l.fold_lanes(op, &Dims::from(1), false)
        })? {
            Some(r) => Ok(r),
            None => self.materialize()?.fold_lanes(op, dims, keepdim),
        }
    }

    fn stat_lanes<S: LaneStat<O>>(
        &self, stat: &S, dims: &Dims, keepdim: bool,
    ) -> Result<SparseArray<S::Output>> {
        match self.fused(dims, keepdim, false, |l| {
            l.stat_lanes(stat, &Dims::from(1), false)
        })? {
            Some(r) => Ok(r),
            None => self.materialize()?.stat_lanes(stat, dims, keepdim),
        }
    }

    /// Computes the values, then maps the lanes.
    fn map_lanes<M: LaneMap<O>>(&self, map: &M, dim: isize) -> Result<MaskedCoo<M::Output>> {
        self.materialize()?.map_lanes(map, dim)
    }

    /// Computes the values, then maps them.
    fn map_elements<M: LaneMap<O>>(
        &self, map: &M, zero_preserving: bool,
    ) -> Result<MaskedCoo<M::Output>> {
        self.materialize()?.map_elements(map, zero_preserving)
    }
}
