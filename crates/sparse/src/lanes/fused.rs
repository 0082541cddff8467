//! Fused elementwise-then-reduce on CSR: [`CsrZipView`], a lazy `z(a, b)` (or a lazy
//! unary map) on a CSR matrix's entries that the reductions and normalizations consume
//! without storing the elementwise values. Row reductions, row statistics, row
//! normalizations and order-free all-entries folds run one row task at a time: the
//! task's values are computed into a scratch buffer (about 32 Ki entries,
//! cache-resident) and the ordinary CSR kernel runs on that slice of rows. Everything
//! else (columns, an argmax over all entries, the nan-family) computes the values once,
//! one per entry on the shared structure, never a dense array.

use super::map::map_rows_by;
use super::*;
use masked_core::{MaskRule, SparseArray, ZipMap};
use std::sync::OnceLock;

// named by the docs' links
#[allow(unused_imports)]
use masked_core::{MaskedOps, ZipKernels};

use crate::operand::{Entries, EntryRhs as Rhs};

/// The values of a [`FusedLanes`] structure's entries, computed on demand: a lazy
/// elementwise op on some layout's entries.
pub trait EntryValues<O>: Sync {
    /// Computes the values of `entries` (those of the structure's rows `rows`), one per
    /// slot of `out`, where `bits` (counted from the first entry) are set, or at every
    /// entry; elsewhere `out` keeps what it held. `Err(k)`: the op fails at entry `k`
    /// (the first such entry).
    fn compute(
        &self, rows: Range<usize>, entries: Range<usize>, bits: Option<Bits<'_>>, out: &mut [O],
    ) -> std::result::Result<(), usize>;

    /// The error of the op failing at entry `k`.
    fn error_at(&self, k: usize) -> MaskedError;
}

/// Implements [`EntryValues`] for a pointer to a source by delegation.
macro_rules! delegate_entry_values {
    ($($ptr:ty),*) => {$(
        impl<O, V: EntryValues<O> + ?Sized> EntryValues<O> for $ptr {
            fn compute(
                &self,
                rows: Range<usize>,
                entries: Range<usize>,
                bits: Option<Bits<'_>>,
                out: &mut [O],
            ) -> std::result::Result<(), usize> {
                (**self).compute(rows, entries, bits, out)
            }

            fn error_at(&self, k: usize) -> MaskedError {
                (**self).error_at(k)
            }
        }
    )*};
}
delegate_entry_values!(&V, Box<V>);

/// A type-erased [`EntryValues`] source: the views hold their op behind one, so the
/// reduction kernels are compiled once per value type rather than once per op (the
/// source is called once per task of about 32 Ki entries).
pub type DynEntries<'a, O> = Box<dyn EntryValues<O> + 'a>;

/// CSR lanes whose values are computed when a kernel reads them: a row structure, a
/// validity bit per entry (or none), whether unstored positions are valid zeros, and
/// an [`EntryValues`] source. Row reductions, row statistics, row normalizations and
/// order-free all-entries folds run a row task at a time: the task's values are
/// computed into per-worker scratch (about 32 Ki entries, cache-resident) and the
/// ordinary CSR kernel runs on that slice of rows, so the values are never stored
/// whole. Every other kernel computes them once (one per entry, on the same
/// structure), keeps them, and runs the ordinary kernel.
///
/// [`CsrZipView`] is this with a CSR matrix's entries as the source; the COO layout's
/// fused view runs its in-order reductions on it.
///
/// Invariant: the structure keeps [`CsrLanes::try_new`]'s rules (the constructors take
/// it from a validated matrix, pattern or grouping).
pub struct FusedLanes<'a, O, V> {
    shape: (usize, usize),
    indptr: Cow<'a, [usize]>,
    indices: ColsBuf<'a>,
    valid: Option<Cow<'a, [u64]>>,
    fill: bool,
    /// `None`: the values were computed with the structure (`cache` holds them).
    src: Option<V>,
    cache: OnceLock<Vec<O>>,
}

/// A lazy `z(a, b)` on CSR entries: a masked CSR matrix of `O` values (`O` the op's
/// output type, [`ZipMap::Output`]) computed only when a kernel reads them, a row task at a time (see [`FusedLanes`] and
/// docs/semantics.md, "Fused elementwise-then-reduce"). Every op of [`MaskedOps`] runs
/// on it. Get one from `MaskedCsr::zip_view` (another CSR
/// matrix), `MaskedCsr::zip_dense_view`,
/// `MaskedCsr::zip_scalar_view` or
/// `MaskedCsr::map_view`.
///
/// Two matrices of different structures are merged when the view is made (the merged
/// structure is new, so its values are computed with it); every other view shares its
/// input's structure.
///
/// The op is held type-erased ([`DynEntries`]): one view type per value type.
pub type CsrZipView<'a, O> = FusedLanes<'a, O, DynEntries<'a, O>>;

/// The source of a fused view ([`CsrZipView`], COO's `CooZipView`): `z(x, rhs)` on the
/// entries of a sparse layout's lanes `L`.
pub struct ZipEntries<'a, L, T: Element, Z> {
    lanes: L,
    rhs: Rhs<'a, T>,
    z: Z,
}

impl<'a, L: Entries<T>, T: Element, Z: ZipMap<T>> ZipEntries<'a, L, T, Z> {
    /// `z(x, rhs)` on the entries of `lanes`.
    pub fn new(lanes: L, rhs: Rhs<'a, T>, z: Z) -> Self {
        ZipEntries { lanes, rhs, z }
    }
}

impl<L: Entries<T>, T: Element, Z: ZipMap<T>> EntryValues<Z::Output> for ZipEntries<'_, L, T, Z> {
    fn compute(
        &self, rows: Range<usize>, entries: Range<usize>, bits: Option<Bits<'_>>,
        out: &mut [Z::Output],
    ) -> std::result::Result<(), usize> {
        let other = self.rhs.other();
        let bad = self
            .lanes
            .zip_part(&other, &self.z, rows, entries, bits, out);
        bad.map_or(Ok(()), Err)
    }

    fn error_at(&self, k: usize) -> MaskedError {
        masked_core::binary::failed_at(&self.z, self.lanes.entry_coords(k))
    }
}

/// A view of `z(x, rhs)` on the entries of `l` under `rule`: the rule's checks and the
/// entries' validity now, the values later (what a layout's `zip_view` returns when the
/// result keeps its structure).
///
/// # Errors
/// As the rule's checks: masks that differ under [`MaskRule::Strict`]; lanes without a
/// mask and an operand that would make every position valid
/// ([`EntryRhs::keeps_unstored`](crate::EntryRhs::keeps_unstored)).
pub fn entry_view<'a, T: Element, Z: ZipMap<T> + 'a>(
    l: CsrLanes<'a, T>, rhs: Rhs<'a, T>, z: Z, rule: MaskRule,
) -> Result<CsrZipView<'a, Z::Output>> {
    rhs.keeps_unstored(l.fill, &z)?;
    let valid = l.validity(&rhs.other(), z.name(), rule)?.map(Cow::Owned);
    Ok(FusedLanes {
        shape: l.shape,
        indptr: Cow::Borrowed(l.indptr),
        indices: ColsBuf::Borrowed(l.indices),
        valid,
        fill: l.fill,
        src: Some(Box::new(ZipEntries::new(l, rhs, z))),
        cache: OnceLock::new(),
    })
}

/// A view whose values are already computed, on a structure of its own (two
/// structures merged when the view was made).
pub fn computed_view<'a, O>(
    shape: (usize, usize), indptr: Vec<usize>, indices: ColsBuf<'static>, values: Vec<O>,
    fill: bool,
) -> CsrZipView<'a, O> {
    let cache = OnceLock::new();
    let _ = cache.set(values);
    FusedLanes {
        shape,
        indptr: Cow::Owned(indptr),
        indices,
        valid: None,
        fill,
        src: None,
        cache,
    }
}

/// Per-worker scratch of a fused task: values, rebased row pointer, rebased bits.
type Scratch<O> = (Vec<O>, Vec<usize>, Vec<u64>);

impl<'a, O: Element, V: EntryValues<O>> FusedLanes<'a, O, V> {
    /// Lanes over a structure (with [`CsrLanes::try_new`]'s rules, checked here), an
    /// optional validity bit per entry, `fill` (unstored positions are valid zeros),
    /// and the source of the entries' values.
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] naming the first broken rule.
    pub fn try_new(
        shape: (usize, usize), indptr: Cow<'a, [usize]>, indices: ColsBuf<'a>,
        valid: Option<Cow<'a, [u64]>>, fill: bool, src: V,
    ) -> Result<Self> {
        check_structure(shape, &indptr, indices.cols(), valid.as_deref())?;
        // SAFETY: just checked.
        Ok(unsafe { Self::new_unchecked(shape, indptr, indices, valid, fill, src) })
    }

    /// As [`FusedLanes::try_new`], the structure not checked again: the trusted entry
    /// of a layout that builds the structure itself (the COO layout's grouping). Debug
    /// builds still check it.
    ///
    /// # Safety
    /// The structure keeps every rule [`CsrLanes::try_new`] checks.
    #[doc(hidden)]
    pub unsafe fn new_unchecked(
        shape: (usize, usize), indptr: Cow<'a, [usize]>, indices: ColsBuf<'a>,
        valid: Option<Cow<'a, [u64]>>, fill: bool, src: V,
    ) -> Self {
        debug_assert!(
            check_structure(shape, &indptr, indices.cols(), valid.as_deref()).is_ok(),
            "FusedLanes::new_unchecked: {:?}",
            check_structure(shape, &indptr, indices.cols(), valid.as_deref()).err()
        );
        FusedLanes {
            shape,
            indptr,
            indices,
            valid,
            fill,
            src: Some(src),
            cache: OnceLock::new(),
        }
    }

    /// `(nrows, ncols)`.
    pub fn shape(&self) -> (usize, usize) {
        self.shape
    }

    /// Number of entries (stored positions of the structure).
    pub fn nnz(&self) -> usize {
        self.indices.cols().len()
    }

    /// Whether the values are computed and held (by a kernel that needed them whole,
    /// or at construction for a merged structure); until then nothing of the size of
    /// the elementwise result is stored.
    pub fn is_materialized(&self) -> bool {
        self.cache.get().is_some()
    }

    /// The lazy source, unless the values are already computed.
    fn lazy(&self) -> Option<&V> {
        self.src.as_ref().filter(|_| self.cache.get().is_none())
    }

    /// The lanes over every value, computed once and kept (the fallback of kernels
    /// that are not run a row task at a time).
    ///
    /// # Errors
    /// The source's error at the first entry where the op fails.
    pub fn materialize(&self) -> Result<CsrLanes<'_, O>> {
        if let Some(src) = self.lazy() {
            let mut out = fresh_vec::<O>(self.nnz());
            let bad = per_task(&row_tasks(&self.indptr), &mut out, |t, o| {
                let bits = self.valid.as_deref().map(|w| Bits::new(w, t.entries.start));
                src.compute(t.rows.clone(), t.entries.clone(), bits, o)
                    .err()
            })
            .into_iter()
            .flatten()
            .min();
            if let Some(k) = bad {
                return Err(src.error_at(k));
            }
            let _ = self.cache.set(out);
        }
        let values = self.cache.get().map_or(&[][..], Vec::as_slice);
        Ok(CsrLanes {
            shape: self.shape,
            indptr: &self.indptr,
            indices: self.indices.cols(),
            values,
            valid: self.valid.as_deref().map(Cow::Borrowed),
            fill: self.fill,
        })
    }

    /// Runs `f` on every row task, in parallel, in row order: the task's rows as lanes
    /// (row pointer rebased to 0) over their values, computed into per-worker scratch.
    fn each_task<R: Send>(
        &self, src: &V, f: impl Fn(&CsrLanes<'_, O>) -> R + Sync,
    ) -> Result<Vec<R>> {
        let tasks = row_tasks(&self.indptr);
        let parts: Vec<std::result::Result<R, usize>> = par::map(tasks.len(), |ti| {
            let (vals, ptr, words) = &mut Scratch::default();
            Ok(f(&self.task_lanes(src, &tasks[ti], vals, ptr, words)?))
        });
        parts
            .into_iter()
            .map(|p| p.map_err(|k| src.error_at(k)))
            .collect()
    }

    /// The rows of task `t` as lanes over their values, computed into `vals`.
    fn task_lanes<'s>(
        &'s self, src: &V, t: &Task, vals: &'s mut Vec<O>, ptr: &'s mut Vec<usize>,
        words: &'s mut Vec<u64>,
    ) -> std::result::Result<CsrLanes<'s, O>, usize> {
        let e = t.entries.clone();
        let bits = self.valid.as_deref().map(|w| Bits::new(w, e.start));
        vals.clear();
        vals.resize(e.len(), O::default());
        src.compute(t.rows.clone(), e.clone(), bits, vals)?;
        ptr.clear();
        ptr.extend(
            self.indptr[t.rows.start..=t.rows.end]
                .iter()
                .map(|p| p - e.start),
        );
        let valid = bits.map(|b| {
            words.clear();
            words.extend((0..e.len().div_ceil(64)).map(|i| b.word_at(i * 64)));
            Cow::Borrowed(&words[..])
        });
        Ok(CsrLanes {
            shape: (t.rows.len(), self.shape.1),
            indptr: ptr,
            indices: self.indices.cols().slice(e),
            values: vals,
            valid,
            fill: self.fill,
        })
    }

    /// A map result on this structure, its indices borrowed for `'a` when they are
    /// this structure's borrowed ones.
    fn owned_by_input<P>(&self, m: LanesMapped<'_, P>) -> LanesMapped<'a, P> {
        let indices = match (m.indices, &self.indices) {
            (ColsBuf::Borrowed(_), ColsBuf::Borrowed(own)) => ColsBuf::Borrowed(*own),
            (idx, _) => idx.into_owned(),
        };
        LanesMapped {
            shape: m.shape,
            indptr: m.indptr,
            indices,
            values: m.values,
        }
    }
}

impl<'a, O: Element, V: EntryValues<O>> MaskedReduce<O> for FusedLanes<'a, O, V> {
    masked_core::reduce_types!(<P> SparseArray<P>, LanesMapped<'a, P>, <'b> CsrLanes<'b, O>);

    /// Computes the values (the NaN mask needs them).
    fn without_nans(&self) -> Result<CsrLanes<'_, O>> {
        Ok(self.materialize()?.nan_masked())
    }

    fn fold_lanes<F: Fold<O>>(
        &self, op: &F, dims: &Dims, keepdim: bool,
    ) -> Result<SparseArray<F::Output>> {
        let ax = axis(dims)?;
        let Some(src) = self.lazy() else {
            return self.materialize()?.fold_lanes(op, dims, keepdim);
        };
        match ax {
            Axis::Rows => {
                let parts = self.each_task(src, |sub| sub.fold_rows(op))?;
                collect_sparse(
                    out_shape(self.shape, ax, keepdim),
                    parts.into_iter().flatten().collect(),
                )
            }
            Axis::All if !op.positional() => {
                // task states merged in row order
                let states = self.each_task(src, |sub| {
                    let mut st = op.identity();
                    let span = (sub.shape.0 * sub.shape.1) as i64;
                    sub.fold_segment(op, &mut st, 0..sub.nnz(), |_| 0, 0..span);
                    st
                })?;
                let mut st = op.identity();
                for s in states {
                    op.merge(&mut st, s);
                }
                let n = self.nnz();
                let any = (self.fill && self.shape.0 * self.shape.1 > n)
                    || self
                        .valid
                        .as_deref()
                        .map_or(n > 0, |w| Bits::new(w, 0).any(n));
                let out = (op.valid_everywhere() || any).then(|| op.finish(&st));
                collect_sparse(out_shape(self.shape, ax, keepdim), vec![vec![out]])
            }
            _ => self.materialize()?.fold_lanes(op, dims, keepdim),
        }
    }

    fn stat_lanes<S: LaneStat<O>>(
        &self, stat: &S, dims: &Dims, keepdim: bool,
    ) -> Result<SparseArray<S::Output>> {
        let ax = axis(dims)?;
        match (ax, self.lazy()) {
            (Axis::Rows, Some(src)) => {
                let parts = self.each_task(src, |sub| sub.stat_rows(stat))?;
                collect_sparse(
                    out_shape(self.shape, ax, keepdim),
                    parts.into_iter().flatten().collect(),
                )
            }
            _ => self.materialize()?.stat_lanes(stat, dims, keepdim),
        }
    }

    /// Along dim 1 a row task at a time, written into the output directly; along dim 0,
    /// or without a mask (the output stores every position), the values are computed
    /// first.
    fn map_lanes<M: LaneMap<O>>(&self, map: &M, dim: isize) -> Result<LanesMapped<'a, M::Output>> {
        let d = wrap_dim(dim, 2)?;
        let (Some(src), 1, false, ColsBuf::Borrowed(indices)) =
            (self.lazy(), d, self.fill, &self.indices)
        else {
            let m = self
                .materialize()?
                .kernel_map_lanes(map, dim, None)?
                .fresh()?;
            return Ok(self.owned_by_input(m));
        };
        let out = map_rows_by(&self.indptr, self.valid.as_deref(), |t, vout| {
            let (mut vals, mut ptr, mut words) = Scratch::<O>::default();
            let sub = self.task_lanes(src, t, &mut vals, &mut ptr, &mut words)?;
            sub.map_row_range(map, 0..t.rows.len(), false, vout);
            Ok(())
        });
        let (indptr, values) = out.map_err(|k| src.error_at(k))?;
        // the valid entries of this validated structure, in order, with prefix-sum row
        // pointers (`map_rows_by`)
        Ok(LanesMapped {
            shape: self.shape,
            indptr,
            indices: indices.kept(self.valid.as_deref()),
            values,
        })
    }

    /// As [`MaskedReduce::map_lanes`] along dim 1; without a mask, a map that does not
    /// keep 0 is an error (the result would store every position).
    fn map_elements<M: LaneMap<O>>(
        &self, map: &M, zero_preserving: bool,
    ) -> Result<LanesMapped<'a, M::Output>> {
        if self.fill {
            let m = self
                .materialize()?
                .kernel_map_elements(map, zero_preserving, None)?
                .fresh()?;
            return Ok(self.owned_by_input(m));
        }
        self.map_lanes(map, 1)
    }
}
