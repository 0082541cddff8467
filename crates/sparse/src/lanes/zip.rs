//! Binary elementwise ops on CSR lanes (masked algebra, sparse in → sparse out): with a
//! scalar, with a dense operand read at the valid entries only, with another CSR matrix
//! of the same structure (values only, the structure shared) or of another (one merge
//! pass per row). Work is O(nnz + output); nothing is densified.

use super::*;
use crate::cols::{par_eq, CsrIndex};
use crate::operand::{DenseOperand, Entries};
use masked_core::binary::{failed_at, mask_mismatch, merge, MergeStop, Side, Src};
use masked_core::{MaskRule, ZipMap};

/// A zip's output rows: row pointer, column indices (shared when every entry is kept),
/// values.
pub type Rows<'a, O> = (Vec<usize>, ColsBuf<'a>, Vec<O>);

impl<'a, T: Element> CsrLanes<'a, T> {
    /// The error of the op `z` failing at entry `k` (row `r`).
    pub(super) fn fail_at<Z: ZipMap<T>>(&self, z: &Z, r: usize, k: usize) -> MaskedError {
        failed_at(z, vec![r, self.col(k)])
    }

    /// The row of entry `k`.
    pub(super) fn row_of(&self, k: usize) -> usize {
        self.indptr.partition_point(|&p| p <= k) - 1
    }

    /// `z(x, other)` at every entry valid under `rule`; the output stores exactly those
    /// entries (this structure, shared, when all are).
    pub fn zip_entries<Z: ZipMap<T>>(
        &self, other: Other<'_, T>, z: &Z, rule: MaskRule,
    ) -> Result<Rows<'a, Z::Output>> {
        let Some(bits) = self.validity(&other, z.name(), rule)? else {
            let mut values = fresh_vec::<Z::Output>(self.nnz());
            self.zip_shared(&other, z, None, &mut values)?;
            return Ok((
                self.indptr.to_vec(),
                ColsBuf::Borrowed(self.indices),
                values,
            ));
        };
        let nrows = self.shape.0;
        let tasks = row_tasks(self.indptr);
        // some entries drop out: each task keeps its valid entries' values, then they are
        // joined (their column indices are those where `bits` are set: no index is read
        // here, so this kernel is the same for every index width)
        let parts: Vec<_> = par::map(tasks.len(), |ti| {
            let t = &tasks[ti];
            let (mut ptr, mut val) = (Vec::new(), Vec::new());
            let (mut ys, mut tmp, mut rb) = (Vec::new(), Vec::new(), Vec::new());
            for r in t.rows.clone() {
                let e = self.row(r);
                let y = self.other_run(&other, r, e.clone(), &mut ys);
                // this row's validity bits, from bit 0
                let b = Bits::new(&bits, e.start);
                rb.clear();
                rb.extend((0..e.len().div_ceil(64)).map(|w| b.word_at(w * 64)));
                tmp.clear();
                tmp.resize(e.len(), Z::Output::default());
                let rbits = Some(Bits::new(&rb, 0));
                if let Some(q) = z.run(Src::Slice(&self.values[e.clone()]), y, rbits, &mut tmp) {
                    return Err((r, e.start + q));
                }
                compress_into(&tmp, Some(Bits::new(&rb, 0)), &mut val);
                ptr.push(val.len());
            }
            // no index part: a zero-sized vector
            Ok((ptr, Vec::<()>::new(), val))
        });
        let mut out = (Vec::with_capacity(nrows + 1), Vec::new(), Vec::new());
        join_parts(parts, &mut out).map_err(|(r, k)| self.fail_at(z, r, k))?;
        Ok((out.0, self.indices.kept(Some(&bits)), out.2))
    }

    /// `z(x, other)` at every entry valid by `bits` (`None`: all), written into `out`
    /// (one value per entry; invalid entries keep what `out` held).
    pub(super) fn zip_shared<Z: ZipMap<T>>(
        &self, other: &Other<'_, T>, z: &Z, bits: Option<&[u64]>, out: &mut [Z::Output],
    ) -> Result<()> {
        let bad = per_task(&row_tasks(self.indptr), out, |t, out| {
            let rows = t.rows.clone();
            let b = bits.map(|w| Bits::new(w, self.indptr[rows.start]));
            self.zip_rows(other, z, rows, b, out, &mut Vec::new())
        })
        .into_iter()
        .flatten()
        .min_by_key(|&(_, k)| k);
        match bad {
            Some((r, k)) => Err(self.fail_at(z, r, k)),
            None => Ok(()),
        }
    }

    /// `z(x, other)` over the entries of `rows`, written into `out` (one value per
    /// entry, from the rows' first entry), computed where `bits` (counted from that
    /// entry) are set, or everywhere; `ys` is scratch for a dense operand. At the first
    /// entry where `z` fails: `Some((row, entry))`.
    pub(super) fn zip_rows<Z: ZipMap<T>>(
        &self, other: &Other<'_, T>, z: &Z, rows: Range<usize>, bits: Option<Bits<'_>>,
        out: &mut [Z::Output], ys: &mut Vec<T>,
    ) -> Option<(usize, usize)> {
        let base = self.indptr[rows.start];
        // a scalar or an operand on the same entries: the rows' entries are one
        // contiguous run (no per-row calls)
        let whole = match other {
            Other::Scalar(s) => Some(Src::Splat(*s)),
            Other::Same(v, _) => Some(Src::Slice(&v[base..base + out.len()])),
            Other::Dense(_) => None,
        };
        if let Some(y) = whole {
            let x = Src::Slice(&self.values[base..base + out.len()]);
            return z
                .run(x, y, bits, out)
                .map(|k| (self.row_of(base + k), base + k));
        }
        for r in rows {
            let e = self.row(r);
            let o = &mut out[e.start - base..e.end - base];
            let y = self.other_run(other, r, e.clone(), ys);
            let b = bits.map(|b| b.offset(e.start - base));
            if let Some(k) = z.run(Src::Slice(&self.values[e.clone()]), y, b, o) {
                return Some((r, e.start + k));
            }
        }
        None
    }

    /// As [`CsrLanes::zip_entries`] when the result keeps every entry, its values written
    /// into `out` (one per entry); an error when some entry is not valid under `rule`.
    pub fn zip_entries_into<Z: ZipMap<T>>(
        &self, other: Other<'_, T>, z: &Z, rule: MaskRule, out: &mut [Z::Output],
    ) -> Result<()> {
        if out.len() != self.nnz() {
            return Err(MaskedError::InvalidData(format!(
                "{}: an output buffer of {} values for {} entries",
                z.name(),
                out.len(),
                self.nnz()
            )));
        }
        if self.validity(&other, z.name(), rule)?.is_some() {
            return Err(MaskedError::InvalidData(format!(
                "{}: the result does not keep every entry of this structure (some are not \
                 valid under the mask rule): use the allocating form",
                z.name()
            )));
        }
        self.zip_shared(&other, z, None, out)
    }

    /// The other operand's run for row `r` (entries `e`): gathered from a dense operand
    /// into `ys`.
    pub(super) fn other_run<'y>(
        &self, other: &'y Other<'_, T>, r: usize, e: Range<usize>, ys: &'y mut Vec<T>,
    ) -> Src<'y, T> {
        match other {
            Other::Scalar(s) => Src::Splat(*s),
            Other::Same(v, _) => Src::Slice(&v[e]),
            Other::Dense(d) => {
                ys.clear();
                let st = d.strides();
                let base = r * st[0];
                ys.extend(e.map(|k| d.value(base + self.col(k) * st[1])));
                Src::Slice(ys)
            }
        }
    }

    /// `z(self, other)` for two structures of one shape: one merge pass per row, over
    /// column indices of type `I` (both sides have them: they come from one typed
    /// matrix type).
    pub fn zip_merge<I: CsrIndex, Z: ZipMap<T>>(
        &self, other: &CsrLanes<'_, T>, z: &Z, rule: MaskRule,
    ) -> Result<Rows<'a, Z::Output>> {
        if self.fill && other.fill && !z.keeps_zero(T::ZERO, T::ZERO) {
            return Err(MaskedError::densifying(z.name()));
        }
        let (Some(ia), Some(ib)) = (I::of(self.indices), I::of(other.indices)) else {
            return Err(MaskedError::InvalidData(
                "column indices of another width than the matrix type's".into(),
            ));
        };
        let ncols = self.shape.1;
        let tasks = row_tasks(self.indptr);
        let parts: Vec<_> = par::map(tasks.len(), |ti| {
            let t = &tasks[ti];
            let (mut ptr, mut idx, mut val) = (Vec::new(), Vec::new(), Vec::new());
            for r in t.rows.clone() {
                let (ea, eb) = (self.row(r), other.row(r));
                merge(
                    self.side(ia, ea),
                    other.side(ib, eb),
                    z,
                    rule,
                    ncols,
                    |i: I| i.index_unchecked(),
                    &mut idx,
                    &mut val,
                )
                .map_err(|s| (r, s))?;
                ptr.push(idx.len());
            }
            Ok((ptr, idx, val))
        });
        let mut out = (Vec::with_capacity(self.shape.0 + 1), Vec::new(), Vec::new());
        join_parts(parts, &mut out).map_err(|(r, s)| match s {
            MergeStop::Mismatch { pos, left_valid } => {
                mask_mismatch(z.name(), vec![r, pos], left_valid)
            }
            MergeStop::Fails { pos } => failed_at(z, vec![r, pos]),
        })?;
        Ok((out.0, I::buf(out.1), out.2))
    }

    /// Entries `e` (one row, column indices `ix`: this structure's) as a side of a merge.
    #[inline]
    pub fn side<'s, I: SpIndex>(&'s self, ix: &'s [I], e: Range<usize>) -> Side<'s, I, T> {
        Side::new(
            &ix[e.clone()],
            &self.values[e.clone()],
            self.valid.as_deref(),
            e.start,
            self.fill,
        )
    }

    /// Whether two lane structures have the same entries (the same rows and columns).
    pub fn same_structure(&self, other: &CsrLanes<'_, T>) -> bool {
        self.shape == other.shape
            && self.fill == other.fill
            && par_eq(self.indptr, other.indptr)
            && self.indices.same_as(&other.indices)
    }
}

/// Joins per-task rows (`ptr`: the running entry count after each row) into one
/// structure, or passes on the first task's error.
#[allow(clippy::type_complexity)]
fn join_parts<O, I, E>(
    parts: Vec<std::result::Result<(Vec<usize>, Vec<I>, Vec<O>), E>>,
    out: &mut (Vec<usize>, Vec<I>, Vec<O>),
) -> std::result::Result<(), E> {
    out.0.push(0);
    for p in parts {
        let (ptr, idx, val) = p?;
        let base = out.2.len();
        out.0.extend(ptr.iter().map(|&c| base + c));
        out.1.extend(idx);
        out.2.extend(val);
    }
    Ok(())
}

/// Part of the strict check: runs of 1024 rows.
const STRICT_ROWS: usize = 1 << 10;

impl<T: Element> Entries<T> for CsrLanes<'_, T> {
    /// By rows.
    fn zip_part<Z: ZipMap<T>>(
        &self, other: &Other<'_, T>, z: &Z, rows: Range<usize>, _: Range<usize>,
        bits: Option<Bits<'_>>, out: &mut [Z::Output],
    ) -> Option<usize> {
        let mut ys = Vec::new();
        self.zip_rows(other, z, rows, bits, out, &mut ys)
            .map(|(_, k)| k)
    }
    fn entry_count(&self) -> usize {
        self.nnz()
    }
    fn entry_bits(&self) -> Option<&[u64]> {
        self.valid.as_deref()
    }
    fn entry_shape(&self) -> Vec<usize> {
        vec![self.shape.0, self.shape.1]
    }
    fn entry_coords(&self, k: usize) -> Vec<usize> {
        vec![self.row_of(k), self.col(k)]
    }
    fn strict_parts(&self) -> usize {
        self.shape.0.div_ceil(STRICT_ROWS)
    }
    fn strict_part<'s>(
        &'s self, i: usize, d: &'s DenseOperand<'_, T>,
    ) -> impl Iterator<Item = [usize; 3]> + 's {
        let rows = i * STRICT_ROWS..((i + 1) * STRICT_ROWS).min(self.shape.0);
        rows.flat_map(move |r| {
            self.row(r).map(move |k| {
                let c = self.col(k);
                [k, r * self.shape.1 + c, d.offset([r, c])]
            })
        })
    }
    fn dense_offsets<'s>(
        &'s self, d: &'s DenseOperand<'_, T>, e: Range<usize>,
    ) -> impl Iterator<Item = usize> + 's {
        let mut r = self.row_of(e.start);
        e.map(move |k| {
            while self.indptr[r + 1] <= k {
                r += 1;
            }
            d.offset([r, self.col(k)])
        })
    }
}
