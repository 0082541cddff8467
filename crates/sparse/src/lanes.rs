//! The kernels of the CSR layout: fold, gather and map each lane of a resolved masked
//! CSR matrix, along dim 1 (rows), dim 0 (columns) or all dims.

// named by the docs' links (a plain import: links of items inlined into the facade
// resolve against this crate as compiled, where a `cfg(doc)` import does not exist)
use crate::cols::{with_cols, Cols, ColsBuf, LanesMapped};
use crate::compiled;
use crate::operand::EntryOther as Other;
use crate::partition::{groups, per_task, row_tasks, Task};
use masked_core::grad::{
    grad_runs, scattered_grad, sparse_lanes, sparse_lanes_ordered, LaneOrder, SparseUpstream,
};
#[allow(unused_imports)]
use masked_core::MaskedOps;
use masked_core::{
    not_nan_words, with_slots, wrap_dim, Dims, Element, Fold, LaneGrad, LaneMap, LaneStat,
    MaskedError, MaskedReduce, OutSlots, Result, SparseArray, Written,
};
use masked_kernels::pack::compress_into;
use masked_kernels::par;
use masked_kernels::{fresh_vec, Bits};
use sprs::{CsMatBase, SpIndex};
use std::borrow::Cow;
use std::mem::MaybeUninit;
use std::ops::Range;

mod fold;
mod fused;
mod map;
mod stat;
mod zip;

pub use fused::{
    computed_view, entry_view, CsrZipView, DynEntries, EntryValues, FusedLanes, ZipEntries,
};
pub use zip::Rows;

/// The output of a CSR normalization (softmax, cumsum, ...): a sprs CSR matrix whose
/// stored entries are exactly the mask's valid positions. When every stored entry is
/// valid (mask = the input's pattern, no NaN dropped) its column indices are the input's
/// own, borrowed rather than copied, as torch's sparse softmax shares its input's
/// indices; otherwise they are owned. `IntoCsMat::into_csmat` gives a plain
/// `sprs::CsMatI` (moving the values; copying the indices only when borrowed).
pub type CsrMapped<'a, O, I> = CsMatBase<O, I, Vec<usize>, Cow<'a, [I]>, Vec<O>, usize>;

/// The lanes of a masked CSR matrix as the kernels see them: a row structure whose
/// entries carry values, an optional validity bit per entry, and whether the unstored
/// positions are valid zeros.
///
/// - mask = the input's pattern: the input's entries, every one valid;
/// - a separate mask pattern: the mask's entries, with the input's value or 0;
/// - no mask: the input's entries plus every unstored position as a valid 0;
/// - the nan-family adds validity bits `!is_nan` to any of these.
///
/// Get one from `MaskedCsr::lanes`; every op of [`MaskedOps`] runs on it.
///
/// Invariant (kept by [`CsrLanes::try_new`], by sprs's safe constructors and by
/// [`crate::Pattern`]): every column index is below `shape.1`; the column fold indexes
/// its per-column arrays without bounds checks on it.
#[derive(Debug, Clone)]
pub struct CsrLanes<'a, T> {
    pub(crate) shape: (usize, usize),
    pub(crate) indptr: &'a [usize],
    pub(crate) indices: Cols<'a>,
    pub(crate) values: &'a [T],
    pub(crate) valid: Option<Cow<'a, [u64]>>,
    pub(crate) fill: bool,
}

/// The partial column fold of one row group: a state per column, a bit per column
/// saying whether it saw a valid entry, and (without a mask) a stored count per column.
struct ColGroup<S> {
    states: Vec<S>,
    seen: Vec<u64>,
    stored: Vec<u32>,
}

/// Which dims a reduction over a 2-D matrix covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Axis {
    Rows,
    Cols,
    All,
}

fn axis(dims: &Dims) -> Result<Axis> {
    Ok(match dims.canonical(2)?.as_slice() {
        [1] => Axis::Rows,
        [0] => Axis::Cols,
        _ => Axis::All,
    })
}

fn out_shape(shape: (usize, usize), ax: Axis, keepdim: bool) -> Vec<usize> {
    match (ax, keepdim) {
        (Axis::Rows, false) => vec![shape.0],
        (Axis::Rows, true) => vec![shape.0, 1],
        (Axis::Cols, false) => vec![shape.1],
        (Axis::Cols, true) => vec![1, shape.1],
        (Axis::All, false) => vec![],
        (Axis::All, true) => vec![1, 1],
    }
}

/// The lanes, in parts (in order), of which those with a value make the sparse result.
/// Large results take two parallel passes over chunks of lanes: each chunk counts its
/// kept lanes, then writes their positions and values at its offset in the output,
/// allocated once (its fresh pages touched by every thread). Serial, this step was what
/// kept the CSR row reductions from scaling. Up to 2^16 lanes one serial pass is
/// cheaper than the two wake-ups of the pool (a 20000-row sum on 2 cores: the serial
/// fraction `2 T2 / T1 - 1` 0.19-0.26 -> -0.09).
fn collect_sparse<O: Element>(
    shape: Vec<usize>, parts: Vec<Vec<Option<O>>>,
) -> Result<SparseArray<O>> {
    const CHUNK: usize = 1 << 14;
    // writes the kept lanes of a chunk into its slots (uninitialised: no zeroing pass)
    let kept = |at: usize,
                lanes: &[Option<O>],
                idx: &mut [MaybeUninit<usize>],
                vals: &mut [MaybeUninit<O>]| {
        let mut j = 0;
        for (i, v) in lanes.iter().enumerate() {
            if let Some(v) = *v {
                idx[j].write(at + i);
                vals[j].write(v);
                j += 1;
            }
        }
    };
    let mut chunks = Vec::new();
    let mut at = 0;
    for p in &parts {
        for (c, lanes) in p.chunks(CHUNK).enumerate() {
            chunks.push((at + c * CHUNK, lanes));
        }
        at += p.len();
    }
    let count = |lanes: &[Option<O>]| lanes.iter().filter(|v| v.is_some()).count();
    // up to this many lanes one serial pass costs less than waking the pool twice
    const SERIAL: usize = 1 << 16;
    if at <= SERIAL {
        let (idx, vals) = parts
            .iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (i, v)))
            .unzip();
        return SparseArray::new(shape, idx, vals);
    }
    let counts = par::map(chunks.len(), |c| count(chunks[c].1));
    let n = counts.iter().sum();
    let (mut idx, mut vals) = (Vec::<usize>::with_capacity(n), Vec::<O>::with_capacity(n));
    let mut jobs = Vec::with_capacity(chunks.len());
    let (mut rest_i, mut rest_v) = (idx.spare_capacity_mut(), vals.spare_capacity_mut());
    for (&(at, lanes), &k) in chunks.iter().zip(&counts) {
        let (i, ri) = std::mem::take(&mut rest_i).split_at_mut(k);
        let (v, rv) = std::mem::take(&mut rest_v).split_at_mut(k);
        (rest_i, rest_v) = (ri, rv);
        jobs.push((at, lanes, i, v));
    }
    par::map_vec(jobs, |(at, lanes, i, v)| kept(at, lanes, i, v));
    // SAFETY: chunk `c` wrote its `counts[c]` slots, in order: all `n` are initialised
    unsafe {
        idx.set_len(n);
        vals.set_len(n);
    }
    SparseArray::new(shape, idx, vals)
}

/// The first position in `0..` that the increasing `stored` positions skip.
#[inline]
fn first_gap(stored: impl Iterator<Item = usize>) -> usize {
    let mut next = 0;
    for p in stored {
        if p != next {
            break;
        }
        next += 1;
    }
    next
}

/// The structure rules of [`CsrLanes::try_new`] (all but the value count).
fn check_structure(
    shape: (usize, usize), indptr: &[usize], indices: Cols<'_>, valid: Option<&[u64]>,
) -> Result<()> {
    let bad = |m: String| Err(MaskedError::InvalidData(m));
    if indptr.len() != shape.0 + 1 || indptr[0] != 0 || indptr[shape.0] != indices.len() {
        return bad(format!(
            "row pointer of length {} must run from 0 to {} over {} rows",
            indptr.len(),
            indices.len(),
            shape.0
        ));
    }
    if valid.is_some_and(|w| w.len() < indices.len().div_ceil(64)) {
        return bad("too few validity words".into());
    }
    if let Some(r) = indptr.windows(2).position(|w| w[0] > w[1]) {
        return bad(format!("row pointer decreases at row {r}"));
    }
    const ROWS: usize = 1 << 12;
    let broken = par::map(shape.0.div_ceil(ROWS), |c| {
        with_cols!(indices, ix => (c * ROWS..((c + 1) * ROWS).min(shape.0)).find(|&r| {
            let row = &ix[indptr[r]..indptr[r + 1]];
            row.windows(2).any(|w| w[0] >= w[1]) || row.last().is_some_and(|c| c.index() >= shape.1)
        }))
    })
    .into_iter()
    .flatten()
    .next();
    if let Some(r) = broken {
        return bad(format!(
            "row {r}: indices not strictly increasing and below {}",
            shape.1
        ));
    }
    Ok(())
}

impl<'a, T: Element> CsrLanes<'a, T> {
    /// Lanes over raw parts: rows `indptr` (from 0 to `indices.len()`, non-decreasing),
    /// column `indices` strictly increasing within each row and below `shape.1`, one
    /// value per entry, optional validity bits (bit `k` of the words for entry `k`), and
    /// `fill`: whether the unstored positions are valid zeros. Other layouts run their
    /// lanes through these kernels this way (the COO layout groups its entries into
    /// such rows).
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] naming the first broken rule.
    ///
    /// ```
    /// use masked::MaskedOps;
    /// use masked::csr::{Cols, CsrLanes};
    /// let (indptr, cols, vals) = ([0, 2, 2], [1u32, 3], [4.0f64, 5.0]);
    /// let l = CsrLanes::try_new((2, 4), &indptr, Cols::U32(&cols), &vals, None, false).unwrap();
    /// assert_eq!(l.sum(1, false).unwrap().values(), &[9.0]);
    /// let bad = Cols::Usize(&[3, 1]);
    /// assert!(CsrLanes::try_new((2, 4), &indptr, bad, &vals, None, false).is_err());
    /// ```
    pub fn try_new(
        shape: (usize, usize), indptr: &'a [usize], indices: Cols<'a>, values: &'a [T],
        valid: Option<&'a [u64]>, fill: bool,
    ) -> Result<Self> {
        if values.len() != indices.len() {
            return Err(MaskedError::InvalidData(format!(
                "{} values for {} entries",
                values.len(),
                indices.len()
            )));
        }
        check_structure(shape, indptr, indices, valid)?;
        Ok(CsrLanes {
            shape,
            indptr,
            indices,
            values,
            valid: valid.map(Cow::Borrowed),
            fill,
        })
    }

    /// Lanes over raw parts that are not checked again: the trusted entry of a layout
    /// that builds the parts itself (the COO layout's grouping), so structure validated
    /// once at its public boundary is not validated in O(nnz) on every op. Debug builds
    /// (and the tests) still run [`CsrLanes::try_new`]'s checks.
    ///
    /// # Safety
    /// The parts keep every rule [`CsrLanes::try_new`] checks: `indptr` has `shape.0 + 1`
    /// non-decreasing entries from 0 to `indices.len()`, the indices of each row are
    /// strictly increasing and below `shape.1`, one value per index, and at least
    /// `indices.len().div_ceil(64)` validity words. The kernels index without bounds
    /// checks on these invariants.
    #[doc(hidden)]
    pub unsafe fn new_unchecked(
        shape: (usize, usize), indptr: &'a [usize], indices: Cols<'a>, values: &'a [T],
        valid: Option<&'a [u64]>, fill: bool,
    ) -> Self {
        debug_assert!(
            Self::try_new(shape, indptr, indices, values, valid, fill).is_ok(),
            "CsrLanes::new_unchecked: {:?}",
            Self::try_new(shape, indptr, indices, values, valid, fill).err()
        );
        CsrLanes {
            shape,
            indptr,
            indices,
            values,
            valid: valid.map(Cow::Borrowed),
            fill,
        }
    }

    /// The same lanes with validity bits `!is_nan` ANDed in (unstored zeros stay
    /// valid); the bits are owned, the structure and values still borrowed.
    pub fn nan_masked(&self) -> CsrLanes<'a, T> {
        let valid = Some(Cow::Owned(not_nan_words(
            self.values,
            self.valid.as_deref(),
        )));
        CsrLanes { valid, ..*self }
    }

    /// `(nrows, ncols)`.
    pub fn shape(&self) -> (usize, usize) {
        self.shape
    }

    /// One value per entry.
    pub fn values(&self) -> &'a [T] {
        self.values
    }

    /// The row pointer.
    pub fn indptr(&self) -> &'a [usize] {
        self.indptr
    }

    /// The column indices.
    pub fn indices(&self) -> Cols<'a> {
        self.indices
    }

    /// The validity bit of each entry (`None`: every entry valid).
    pub fn valid(&self) -> Option<&[u64]> {
        self.valid.as_deref()
    }

    /// The validity bits, moved out (`None`: every entry valid).
    pub fn into_valid(self) -> Option<Cow<'a, [u64]>> {
        self.valid
    }

    /// Whether the unstored positions are valid zeros (no mask).
    pub fn fill(&self) -> bool {
        self.fill
    }

    /// The same lanes with the unstored positions valid zeros (`true`) or not taking
    /// part (`false`): the stored entries alone, for an op that keeps 0 at 0.
    pub fn with_fill(self, fill: bool) -> Self {
        CsrLanes { fill, ..self }
    }

    /// Number of entries (stored positions of the lane structure).
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// A reduction over `dims`: `lanes` gives every output lane's value (`None` where
    /// the lane has no valid element), in parts in order, which become the sparse result.
    fn reduce<O: Element>(
        &self, dims: &Dims, keepdim: bool, lanes: impl FnOnce(Axis) -> Vec<Vec<Option<O>>>,
    ) -> Result<SparseArray<O>> {
        let ax = axis(dims)?;
        collect_sparse(out_shape(self.shape, ax, keepdim), lanes(ax))
    }

    /// The entries of row `r`.
    #[inline]
    pub fn row(&self, r: usize) -> Range<usize> {
        self.indptr[r]..self.indptr[r + 1]
    }

    #[inline]
    fn bits_at(&self, start: usize) -> Option<Bits<'_>> {
        self.valid.as_deref().map(|w| Bits::new(w, start))
    }

    /// Whether entry `k` is valid.
    #[inline]
    pub fn is_valid(&self, k: usize) -> bool {
        self.valid
            .as_deref()
            .is_none_or(|w| (w[k / 64] >> (k % 64)) & 1 == 1)
    }

    #[inline]
    fn count_valid(&self, e: Range<usize>) -> usize {
        self.bits_at(e.start)
            .map_or(e.len(), |b| b.count_ones(e.len()))
    }

    /// The column of entry `k`.
    #[inline]
    pub fn col(&self, k: usize) -> usize {
        self.indices.get(k)
    }
}

impl<'a, T: Element> MaskedReduce<T> for CsrLanes<'a, T> {
    masked_core::reduce_types!(<O> SparseArray<O>, LanesMapped<'a, O>, <'b> CsrLanes<'b, T>);

    // `without_nans`: the same lanes with validity bits `!is_nan` ANDed in (unstored
    // zeros stay valid). Maps: along dim 1 or 0, the output storing exactly the valid entries (every
    // element without a mask: dense-sized); rows are runs of consecutive elements.
    // Without a mask (`fill`), an elementwise op that keeps 0 at 0 maps the stored
    // entries only (unstored ones stay the implicit 0), and any other op is an error
    // rather than a result storing every position.
    masked_core::lane_methods!(compiled);

    /// Over rows, columns or all entries; the gradient stores exactly the valid entries
    /// (sharing this structure's indices when every entry is valid). Without a mask the
    /// gradient would store every position: an error.
    fn grad_reduced<G: LaneGrad>(
        &self, grad: &G, dims: &Dims, keepdim: bool, g: &SparseArray<T::Real>,
        saved: Option<&SparseArray<T::Real>>,
    ) -> Result<LanesMapped<'a, T::Real>> {
        let want = out_shape(self.shape, axis(dims)?, keepdim);
        let up = SparseUpstream::reduced(grad.name(), g, want.clone())?;
        let saved = match saved.filter(|_| grad.uses_output()) {
            Some(y) => Some(SparseUpstream::reduced(grad.name(), y, want)?),
            None => None,
        };
        self.grad_entries(grad, &dims.canonical(2)?, up, saved)
    }

    /// Along dim 1 or 0; `g` stores exactly the valid entries (as the forward map's
    /// output does).
    fn grad_mapped<G: LaneGrad>(
        &self, grad: &G, dim: isize, g: &LanesMapped<'a, T::Real>,
        saved: Option<&LanesMapped<'a, T::Real>>,
    ) -> Result<LanesMapped<'a, T::Real>> {
        self.grad_mapped_parts(grad, dim, g.parts(), saved.map(LanesMapped::parts))
    }
}

/// A map's result borrowed as its parts (a typed or an erased one): what a map's VJP
/// checks the upstream gradient and saved output against.
pub struct MappedParts<'m, R> {
    /// `(nrows, ncols)`.
    pub shape: (usize, usize),
    /// Row pointer.
    pub indptr: &'m [usize],
    /// Column indices.
    pub indices: Cols<'m>,
    /// One value per entry.
    pub values: &'m [R],
}

impl<R> LanesMapped<'_, R> {
    /// The result borrowed as its parts.
    pub fn parts(&self) -> MappedParts<'_, R> {
        MappedParts {
            shape: self.shape,
            indptr: &self.indptr,
            indices: self.indices.cols(),
            values: &self.values,
        }
    }
}

/// A typed CSR result borrowed as its parts.
pub fn csr_parts<'m, R, I: crate::CsrIndex>(m: &'m CsrMapped<'_, R, I>) -> MappedParts<'m, R> {
    let (indptr, indices, values) = m.view().into_raw_storage();
    MappedParts {
        shape: m.shape(),
        indptr,
        indices: I::cols(indices),
        values,
    }
}

impl<'a, T: Element> CsrLanes<'a, T> {
    /// [`MaskedReduce::grad_mapped`] on the parts of the upstream gradient and saved
    /// output.
    pub fn grad_mapped_parts<G: LaneGrad>(
        &self, grad: &G, dim: isize, g: MappedParts<'_, T::Real>,
        saved: Option<MappedParts<'_, T::Real>>,
    ) -> Result<LanesMapped<'a, T::Real>> {
        let d = wrap_dim(dim, 2)?;
        let (ptr, idx) = self.valid_structure()?;
        let saved = saved.filter(|_| grad.uses_output());
        for (m, what) in [
            (Some(&g), "upstream gradient"),
            (saved.as_ref(), "saved output"),
        ] {
            let Some(m) = m else { continue };
            // the same arrays (the forward output shares them) or equal ones
            let same = |a: &[usize], b: &[usize]| std::ptr::eq(a, b) || a == b;
            if m.shape != self.shape || !same(m.indptr, &ptr) || !m.indices.same_as(&idx.cols()) {
                return Err(MaskedError::InvalidArgument {
                    name: what,
                    value: grad.name().to_string(),
                    reason: "a map's VJP takes values stored exactly at the input's valid \
                             positions",
                });
            }
        }
        let saved = saved.map(|y| SparseUpstream::PerElement(y.values));
        self.grad_entries(grad, &[d], SparseUpstream::PerElement(g.values), saved)
    }

    /// [`CsrLanes::grad_mapped_parts`] given the upstream gradient (and the saved
    /// output) as values alone, one per valid entry in storage order, borrowed (a
    /// caller's buffers): their counts are checked, no structure is compared.
    ///
    /// # Errors
    /// A value count other than the valid entries'; no mask (every position valid:
    /// the gradient would store them all); the op's own errors.
    pub fn grad_mapped_values<G: LaneGrad>(
        &self, grad: &G, dim: isize, g: &[T::Real], saved: Option<&[T::Real]>,
    ) -> Result<LanesMapped<'a, T::Real>> {
        let d = wrap_dim(dim, 2)?;
        if self.fill {
            return Err(MaskedError::densifying("a gradient"));
        }
        let n = match self.valid.as_deref() {
            None => self.values.len(),
            Some(w) => Bits::new(w, 0).count_ones(self.values.len()),
        };
        for v in [Some(g), saved].into_iter().flatten() {
            if v.len() != n {
                return Err(MaskedError::ValueCount {
                    expected: n,
                    got: v.len(),
                });
            }
        }
        let saved = saved
            .filter(|_| grad.uses_output())
            .map(SparseUpstream::PerElement);
        self.grad_entries(grad, &[d], SparseUpstream::PerElement(g), saved)
    }

    /// The structure of the valid entries: row pointers and column indices (this
    /// structure's own, borrowed, when every entry is valid). Without a mask every
    /// position is valid, and a gradient would store them all: an error.
    pub fn valid_structure(&self) -> Result<(Vec<usize>, ColsBuf<'a>)> {
        if self.fill {
            return Err(MaskedError::densifying("a gradient"));
        }
        Ok((
            self.valid_indptr(),
            self.indices.kept(self.valid.as_deref()),
        ))
    }

    /// The row pointer of the valid entries (this structure's own when all are valid).
    pub fn valid_indptr(&self) -> Vec<usize> {
        self.valid
            .as_deref()
            .map_or_else(|| self.indptr.to_vec(), |w| valid_ptr(self.indptr, w))
    }

    /// A gradient over the valid entries, stored on their structure.
    fn grad_entries<G: LaneGrad>(
        &self, grad: &G, reduced: &[usize], g: SparseUpstream<'_, T::Real>,
        saved: Option<SparseUpstream<'_, T::Real>>,
    ) -> Result<LanesMapped<'a, T::Real>> {
        let (ptr, idx) = self.valid_structure()?;
        let ncols = self.shape.1;
        // the valid values, in order: the stored ones themselves when the mask is the
        // pattern, else packed by the mask bits
        let xs: Cow<'_, [T]> = match self.valid.as_deref() {
            None => Cow::Borrowed(self.values),
            Some(w) => {
                let mut v = Vec::new();
                compress_into(self.values, Some(Bits::new(w, 0)), &mut v);
                Cow::Owned(v)
            }
        };
        let values = if reduced == [1] {
            // rows are the lanes, already runs: no keys, no positions, no sort
            let rows = self.shape.0;
            let yl = saved.map(|y| y.by_lane(rows)).transpose()?;
            let yl = yl.as_deref().unwrap_or(&[]);
            grad_runs(grad, &ptr, &xs, &g.by_lane(rows)?, yl)?
        } else if let Some(values) = (reduced == [0])
            .then(|| scattered_grad(grad, &xs, idx.cols().lane_ids(), ncols, &g, saved.as_ref()))
            .flatten()
        {
            values
        } else if reduced == [0] {
            // columns are the lanes: the valid entries in column order by a counting sort
            // of their columns (no flat positions, no keys divided out of them)
            let valid = CsrLanes {
                shape: self.shape,
                indptr: &ptr,
                indices: idx.cols(),
                values: &[] as &[T],
                valid: None,
                fill: false,
            };
            let (entry, colptr) = valid.by_column();
            let keys: Vec<usize> = (0..ncols).filter(|&c| colptr[c + 1] > colptr[c]).collect();
            let starts: Vec<usize> = keys
                .iter()
                .map(|&c| colptr[c])
                .chain([entry.len()])
                .collect();
            let lanes = LaneOrder {
                order: Some(Cow::Owned(entry)),
                starts: Cow::Owned(starts),
                keys: Cow::Owned(keys),
            };
            sparse_lanes_ordered(grad, &lanes, &xs, g, saved)?
        } else {
            let cols = idx.cols();
            let mut flat = Vec::with_capacity(cols.len());
            for r in 0..self.shape.0 {
                flat.extend((ptr[r]..ptr[r + 1]).map(|k| r * ncols + cols.get(k)));
            }
            sparse_lanes(grad, &[self.shape.0, ncols], reduced, &flat, &xs, g, saved)?
        };
        Ok(LanesMapped {
            shape: self.shape,
            indptr: ptr,
            indices: idx,
            values,
        })
    }
}

/// The row pointer of the valid entries (bits `valid`) of the rows of `indptr`.
pub(crate) fn valid_ptr(indptr: &[usize], valid: &[u64]) -> Vec<usize> {
    let nrows = indptr.len() - 1;
    let mut p = Vec::with_capacity(nrows + 1);
    p.push(0);
    for r in 0..nrows {
        let e = indptr[r]..indptr[r + 1];
        p.push(p[r] + Bits::new(valid, e.start).count_ones(e.len()));
    }
    p
}

/// The lane kernels themselves; the trait methods above dispatch to them through
/// `prebuilt` (compiled in this crate for `f32`/`f64`).
impl<'a, T: Element> CsrLanes<'a, T> {
    pub(crate) fn kernel_fold_lanes<F: Fold<T>>(
        &self, op: &F, dims: &Dims, keepdim: bool,
    ) -> Result<SparseArray<F::Output>> {
        self.reduce(dims, keepdim, |ax| match ax {
            Axis::Rows => self.fold_rows(op),
            Axis::Cols => vec![self.fold_cols(op)],
            Axis::All => vec![vec![self.fold_all(op)]],
        })
    }

    pub(crate) fn kernel_stat_lanes<S: LaneStat<T>>(
        &self, stat: &S, dims: &Dims, keepdim: bool,
    ) -> Result<SparseArray<S::Output>> {
        self.reduce(dims, keepdim, |ax| match ax {
            Axis::Rows => self.stat_rows(stat),
            Axis::Cols => vec![self.stat_cols(stat)],
            Axis::All => vec![vec![self.stat_all(stat)]],
        })
    }

    /// `map` over every element: into `into` (one slot per stored entry) where given.
    pub(crate) fn kernel_map_elements<M: LaneMap<T>>(
        &self, map: &M, zero_preserving: bool, into: Option<OutSlots<'_, '_>>,
    ) -> Result<Written<LanesMapped<'a, O<M, T>>>> {
        if self.fill {
            if !zero_preserving {
                return Err(MaskedError::densifying(map.name()));
            }
            let stored = CsrLanes {
                fill: false,
                ..self.clone()
            };
            return stored.map_along(map, None, into);
        }
        self.map_along(map, None, into)
    }

    /// `map` along `dim`: into `into` (one slot per stored entry) where given.
    pub(crate) fn kernel_map_lanes<M: LaneMap<T>>(
        &self, map: &M, dim: isize, into: Option<OutSlots<'_, '_>>,
    ) -> Result<Written<LanesMapped<'a, O<M, T>>>> {
        self.map_along(map, Some(dim), into)
    }

    /// `map` along `dim`, or elementwise (`None`): then a row task's entries are mapped
    /// in blocks whatever the rows, not a call a row (rows of a few entries would pay
    /// each call's set-up).
    fn map_along<M: LaneMap<T>>(
        &self, map: &M, dim: Option<isize>, into: Option<OutSlots<'_, '_>>,
    ) -> Result<Written<LanesMapped<'a, O<M, T>>>> {
        let d = dim.map_or(Ok(1), |dim| wrap_dim(dim, 2))?;
        let whole = dim.is_none();
        if let Some(out) = into {
            if self.fill {
                return Err(MaskedError::Unsupported {
                    op: map.name(),
                    context: "into a caller's buffer on sparse input without a mask (the \
                              result would store every position)"
                        .into(),
                });
            }
            with_slots(out, self.nnz(), |o| self.map_into(map, d, whole, o))?;
            return Ok(Written::Slots(self.valid.as_deref().map(<[u64]>::to_vec)));
        }
        if self.fill {
            let (indptr, indices, values, words) = self.filled();
            let full = CsrLanes {
                shape: self.shape,
                indptr: &indptr,
                indices: Cols::Usize(&indices),
                values: &values,
                valid: Some(Cow::Owned(words)),
                fill: false,
            };
            let out = full.map_along(map, dim, None)?.fresh()?;
            return Ok(Written::Fresh(LanesMapped {
                indices: out.indices.into_owned(),
                ..out
            }));
        }
        let (indptr, indices, values) = if d == 1 {
            self.map_rows(map, whole)
        } else {
            self.map_cols(map)
        };
        if indptr.len() != self.shape.0 + 1
            || indices.cols().len() != values.len()
            || indptr.last() != Some(&values.len())
        {
            return Err(MaskedError::InvalidData(
                "inconsistent mapped structure".into(),
            ));
        }
        // the structure is a subset, in order, of this lane structure's entries: the row
        // pointer is non-decreasing from 0 to the entry count (checked just above for its
        // ends and length; built by prefix sums), and every row's indices are a
        // subsequence of a validated row (a sprs matrix or a `Pattern`): sorted, without
        // duplicates, below `ncols`.
        Ok(Written::Fresh(LanesMapped {
            shape: self.shape,
            indptr,
            indices,
            values,
        }))
    }
}

/// Output type of a lane map.
type O<M, T> = <M as LaneMap<T>>::Output;

#[cfg(test)]
mod tests {
    use super::*;

    /// Checked lanes over `u32` columns with validity bits (no unstored valid zeros).
    fn masked_lanes<'a>(
        shape: (usize, usize), indptr: &'a [usize], cols: &'a [u32], vals: &'a [f64],
        valid: &'a [u64],
    ) -> CsrLanes<'a, f64> {
        CsrLanes::try_new(shape, indptr, Cols::U32(cols), vals, Some(valid), false).unwrap()
    }

    /// Validity bits of `n` entries, set where `valid(k)`.
    fn valid_words(n: usize, valid: impl Fn(usize) -> bool) -> Vec<u64> {
        let mut w = vec![0u64; n.div_ceil(64)];
        for k in (0..n).filter(|&k| valid(k)) {
            w[k / 64] |= 1 << (k % 64);
        }
        w
    }

    /// A `nrows x ncols` structure storing `(r, c)` where `stored(r, c)`, each entry's
    /// value `value(p)` of its flat position `p`: (row pointer, columns, values).
    fn structure(
        (nrows, ncols): (usize, usize), stored: impl Fn(usize, usize) -> bool,
        value: impl Fn(usize) -> f64,
    ) -> (Vec<usize>, Vec<u32>, Vec<f64>) {
        let (mut indptr, mut cols, mut vals) = (vec![0usize], Vec::new(), Vec::new());
        for r in 0..nrows {
            for c in (0..ncols).filter(|&c| stored(r, c)) {
                cols.push(c as u32);
                vals.push(value(r * ncols + c));
            }
            indptr.push(cols.len());
        }
        (indptr, cols, vals)
    }

    /// The same matrix dense (unstored and masked-out positions masked out), and each
    /// entry's flat position.
    fn dense_twin(
        (nrows, ncols): (usize, usize), (indptr, cols, vals): (&[usize], &[u32], &[f64]),
        valid_at: impl Fn(usize) -> bool,
    ) -> (
        masked::MaskedArray<ndarray::OwnedRepr<f64>, ndarray::Ix2>,
        Vec<usize>,
    ) {
        let (mut full, mut mask) = (vec![0.0; nrows * ncols], vec![false; nrows * ncols]);
        let mut pos = Vec::new();
        for r in 0..nrows {
            for k in indptr[r]..indptr[r + 1] {
                let p = r * ncols + cols[k] as usize;
                (full[p], mask[p]) = (vals[k], valid_at(k));
                pos.push(p);
            }
        }
        let dense = masked::MaskedArray::from_bool_mask(
            ndarray::Array2::from_shape_vec((nrows, ncols), full).unwrap(),
            ndarray::Array2::from_shape_vec((nrows, ncols), mask).unwrap(),
        )
        .unwrap();
        (dense, pos)
    }

    /// Maps into one slot per stored entry with validity bits (some entries masked
    /// out): each slot holds what the dense layout writes at that entry's position (a
    /// masked-out entry's the op's value for masked-out elements: a cumsum's running
    /// value, log_softmax's -inf, ...), along rows, columns and elementwise, and the
    /// slots' validity is the input's.
    #[test]
    fn maps_into_slots_with_validity_bits_equal_the_dense_layout() {
        use masked::dense::{OutMask, WriteInto};
        use masked_core::registry::{apply_to, OpRequest};
        use masked_core::{ByDType, EntriesInto, Kind, Op, SlotMask};
        use std::cell::RefCell;
        let (nrows, ncols) = (5, 6);
        let stored = |r: usize, c: usize| (r * 5 + c * 3) % 4 != 1;
        let value = |p: usize| (p as f64 * 0.61).sin() * 2.0;
        let (indptr, cols, vals) = structure((nrows, ncols), stored, value);
        let nnz = cols.len();
        let valid_at = |k: usize| k % 3 != 2;
        let valid = valid_words(nnz, valid_at);
        let lanes = masked_lanes((nrows, ncols), &indptr, &cols, &vals, &valid);
        let (dense, pos) = dense_twin((nrows, ncols), (&indptr, &cols, &vals), valid_at);
        let mut checked = 0;
        for &op in Op::ALL {
            let reqs = match op.kind() {
                Kind::Normalize => vec![
                    OpRequest::from_op(op).dims(1),
                    OpRequest::from_op(op).dims(0),
                ],
                Kind::Unary => vec![OpRequest::from_op(op)],
                _ => continue,
            };
            for req in reqs {
                let mut want = vec![f64::NAN; nrows * ncols];
                let w = RefCell::new(ByDType::F64(&mut want[..]));
                if apply_to(&WriteInto::new(&dense, &w), &req, &OutMask).is_err() {
                    continue; // an op whose result is not f64 (or that needs options)
                }
                let _ = w.into_inner(); // `want` is read below
                let mut got = vec![f64::NAN; nnz];
                let out = RefCell::new(ByDType::F64(&mut got[..]));
                let m = apply_to(&EntriesInto::new(lanes.clone(), &out), &req, &SlotMask)
                    .unwrap_or_else(|e| panic!("{op}: {e}"));
                assert_eq!(
                    m.to_vec(),
                    (0..nnz).map(valid_at).collect::<Vec<_>>(),
                    "{op}"
                );
                // equal but for the summation order (a dense lane also spans the gaps)
                for (k, &p) in pos.iter().enumerate() {
                    let (g, w) = (got[k], want[p]);
                    let close = g.to_bits() == w.to_bits() || (g - w).abs() <= 1e-13 * w.abs();
                    assert!(close, "{op} {:?} entry {k}: {g} vs {w}", req.dims);
                }
                checked += 1;
            }
        }
        assert!(checked > 40, "checked only {checked}");
    }

    /// Lane maps with a fresh output over lanes with validity bits (the output stores the
    /// valid entries in row order): along the columns (gathered in column order, mapped,
    /// scattered back) and the rows, each valid entry's value is the dense layout's at
    /// its position.
    #[test]
    fn fresh_maps_with_validity_bits_equal_the_dense_layout() {
        use masked_core::MaskedOps;
        let (nrows, ncols) = (9, 7);
        let stored = |r: usize, c: usize| (r * 3 + c * 5) % 4 != 2;
        let value = |p: usize| (p as f64 * 0.37).cos() * 3.0;
        let (indptr, cols, vals) = structure((nrows, ncols), stored, value);
        // column 0 and row 2 keep no valid entry
        let (full_row, row_of) = (2, |k: usize| indptr.partition_point(|&p| p <= k) - 1);
        let valid_at = |k: usize| k % 4 != 1 && cols[k] != 0 && row_of(k) != full_row;
        let valid = valid_words(cols.len(), valid_at);
        let lanes = masked_lanes((nrows, ncols), &indptr, &cols, &vals, &valid);
        let (dense, pos) = dense_twin((nrows, ncols), (&indptr, &cols, &vals), valid_at);
        type Map<'a> = fn(&CsrLanes<'a, f64>, isize) -> Result<LanesMapped<'a, f64>>;
        type Dense = masked::MaskedArray<ndarray::OwnedRepr<f64>, ndarray::Ix2>;
        type DenseMap = fn(&Dense, isize) -> Result<Dense>;
        let ops: [(&str, Map<'_>, DenseMap); 5] = [
            ("softmax", |l, d| l.softmax(d), |a, d| a.softmax(d)),
            (
                "log_softmax",
                |l, d| l.log_softmax(d),
                |a, d| a.log_softmax(d),
            ),
            ("softmin", |l, d| l.softmin(d), |a, d| a.softmin(d)),
            ("cumsum", |l, d| l.cumsum(d), |a, d| a.cumsum(d)),
            ("cumprod", |l, d| l.cumprod(d), |a, d| a.cumprod(d)),
        ];
        let kept: Vec<usize> = (0..cols.len()).filter(|&k| valid_at(k)).collect();
        for (name, sparse, dense_op) in ops {
            for dim in [0, 1] {
                let got = sparse(&lanes, dim).unwrap();
                let want = dense_op(&dense, dim).unwrap();
                assert_eq!(got.values.len(), kept.len(), "{name} dim {dim}");
                for (j, &k) in kept.iter().enumerate() {
                    let w = want.values().as_slice().unwrap()[pos[k]];
                    let g = got.values[j];
                    let close = g.to_bits() == w.to_bits() || (g - w).abs() <= 1e-13 * w.abs();
                    assert!(close, "{name} dim {dim} entry {k}: {g} vs {w}");
                }
            }
        }
    }

    /// The column order of the entries (the lanes of every op along dim 0) equals a
    /// stable sort of the entries by column, over enough entries to be cut into parts
    /// counted and written in parallel, for either index width: with few columns (each
    /// entry straight to its column) and with many (through blocks of columns, the last
    /// one short, some columns empty); and so do the valid values alone.
    #[test]
    fn column_order_is_a_stable_sort_by_column_in_parts() {
        for (nrows, ncols) in [(3000, 257), (300, 5000)] {
            let (mut indptr, mut cols) = (vec![0usize], Vec::new());
            for r in 0..nrows {
                let kept = |c: &u32| !(r as u32 * 7 + c * 3).is_multiple_of(5) && c % 97 != 13;
                cols.extend((0..ncols as u32).filter(kept));
                indptr.push(cols.len());
            }
            let nnz = cols.len();
            assert!(nnz > 2 << 18, "{nnz} entries: a single part");
            let mut want: Vec<usize> = (0..nnz).collect();
            want.sort_by_key(|&k| cols[k]);
            let colptr_of = |keep: &dyn Fn(usize) -> bool| {
                let mut colptr = vec![0usize; ncols + 1];
                for (_, &c) in cols.iter().enumerate().filter(|&(k, _)| keep(k)) {
                    colptr[c as usize + 1] += 1;
                }
                for c in 0..ncols {
                    colptr[c + 1] += colptr[c];
                }
                colptr
            };
            let wide: Vec<usize> = cols.iter().map(|&c| c as usize).collect();
            let vals: Vec<f64> = (0..nnz).map(|k| k as f64).collect();
            let valid = valid_words(nnz, |k| k % 3 != 0);
            for ix in [Cols::U32(&cols), Cols::Usize(&wide)] {
                let shape = (nrows, ncols);
                let lanes = CsrLanes::try_new(shape, &indptr, ix, &vals, None, false).unwrap();
                let (entry, ptr) = lanes.by_column();
                assert_eq!(ptr, colptr_of(&|_| true), "{shape:?}");
                assert!(entry == want, "{shape:?}: entries out of column order");
                let lanes = CsrLanes::try_new(shape, &indptr, ix, &vals, Some(&valid), false);
                let (got, ptr) = lanes.unwrap().valid_by_column();
                assert_eq!(ptr, colptr_of(&|k| k % 3 != 0), "{shape:?}");
                let want: Vec<f64> = want
                    .iter()
                    .filter(|&&k| k % 3 != 0)
                    .map(|&k| vals[k])
                    .collect();
                assert!(got == want, "{shape:?}: valid values out of column order");
            }
        }
    }

    #[test]
    fn large_row_reductions_keep_every_valid_lane_in_place() {
        // 70000 rows (the parallel collection), row r holding r % 5 entries (so every
        // fifth row is empty and has no value), validity bits masking rows r % 7 == 3
        // entirely
        let (nrows, ncols) = (70_000, 8);
        let mut indptr = vec![0usize];
        let (mut cols, mut vals) = (Vec::new(), Vec::new());
        for r in 0..nrows {
            for c in 0..r % 5 {
                cols.push(c as u32);
                vals.push((r * 10 + c) as f64);
            }
            indptr.push(cols.len());
        }
        let row_of = |k: usize| indptr.partition_point(|&p| p <= k) - 1;
        let valid = valid_words(cols.len(), |k| row_of(k) % 7 != 3);
        let lanes = masked_lanes((nrows, ncols), &indptr, &cols, &vals, &valid);
        let got = lanes.sum(1, false).unwrap();
        let (mut want_at, mut want) = (Vec::new(), Vec::new());
        for r in (0..nrows).filter(|r| r % 5 != 0 && r % 7 != 3) {
            want_at.push(r);
            want.push((0..r % 5).map(|c| (r * 10 + c) as f64).sum::<f64>());
        }
        assert_eq!(got.shape(), [nrows]);
        assert_eq!(got.indices(), want_at);
        assert_eq!(got.values(), want);
        // along the columns (one small part): columns 4.. hold no entry, so no value
        let cols_sum = lanes.sum(0, false).unwrap();
        assert_eq!(cols_sum.indices(), [0, 1, 2, 3]);
        // count is defined on every lane, the empty ones too
        assert_eq!(
            lanes.count(0, false).unwrap().indices(),
            [0, 1, 2, 3, 4, 5, 6, 7]
        );
    }
}
