//! Mapping the lanes of a CSR matrix (softmax, cumsum, cast, ...): rows in place on
//! the stored structure, columns by the op's scattered form (the entries in storage
//! order, [`LaneMap::map_scattered`]) or else a column-order gather and scatter.

use super::*;
use crate::cols::compress_par;
use masked_core::scattered::Scattered;
use masked_kernels::BLOCK;

impl<'a, T: Element> CsrLanes<'a, T> {
    /// Every position of the matrix as an entry (the lanes of a mask-free map, which
    /// stores every element): owned indptr, indices, values and validity bits.
    pub(super) fn filled(&self) -> (Vec<usize>, Vec<usize>, Vec<T>, Vec<u64>) {
        let (nrows, ncols) = self.shape;
        let n = nrows * ncols;
        let indptr: Vec<usize> = (0..=nrows).map(|r| r * ncols).collect();
        let indices: Vec<usize> = (0..n).map(|p| p % ncols.max(1)).collect();
        let mut values = vec![T::default(); n];
        let mut words = vec![u64::MAX; n.div_ceil(64)];
        for r in 0..nrows {
            for k in self.row(r) {
                let p = r * ncols + self.col(k);
                values[p] = self.values[k];
                if !self.is_valid(k) {
                    words[p / 64] &= !(1u64 << (p % 64));
                }
            }
        }
        (indptr, indices, values, words)
    }

    /// Maps every row; the output stores the valid entries.
    pub(super) fn map_rows<M: LaneMap<T>>(
        &self, map: &M, whole: bool,
    ) -> (Vec<usize>, ColsBuf<'a>, Vec<M::Output>) {
        let out = map_rows_by(self.indptr, self.valid.as_deref(), |t, vout| {
            self.map_row_range(map, t.rows.clone(), whole, vout);
            Ok::<(), std::convert::Infallible>(())
        });
        let (indptr, values) = match out {
            Ok(o) => o,
            Err(never) => match never {},
        };
        (indptr, self.indices.kept(self.valid.as_deref()), values)
    }

    /// Maps rows `rows` into `vout` (their valid entries' values, from the first row's
    /// first valid entry): a run a row, or (`whole`: an elementwise map) their entries
    /// in runs of [`BLOCK`] whatever the rows.
    pub(super) fn map_row_range<M: LaneMap<T>>(
        &self, map: &M, rows: Range<usize>, whole: bool, vout: &mut [M::Output],
    ) {
        let mut tmp = Vec::new();
        let mut o = 0;
        let mut run = |e: Range<usize>| {
            let bits = self.bits_at(e.start);
            let len = self.count_valid(e.clone());
            masked_kernels::cpu::prefetch_ahead(&self.values[e.start..], e.len());
            if bits.is_none() {
                map.map(&self.values[e], None, &mut vout[o..o + len]);
            } else {
                tmp.clear();
                tmp.resize(e.len(), M::Output::default());
                map.map(&self.values[e.clone()], bits, &mut tmp);
                let mut j = o;
                for (q, k) in e.enumerate() {
                    if self.is_valid(k) {
                        vout[j] = tmp[q];
                        j += 1;
                    }
                }
            }
            o += len;
        };
        if whole {
            // blocks of the rows' entries, whatever the rows: the masked runs' scratch
            // stays in cache
            let (lo, hi) = (self.indptr[rows.start], self.indptr[rows.end]);
            for s in (lo..hi).step_by(BLOCK) {
                run(s..(s + BLOCK).min(hi));
            }
        } else {
            for r in rows {
                run(self.row(r));
            }
        }
    }

    /// Maps every lane along `d` (1: rows, 0: columns; `whole`: elementwise, a row
    /// task's entries as one run) into `out`, one slot per stored entry in storage
    /// order: valid or not (a masked-out entry's slot gets the op's
    /// value for a masked-out element, as a dense result's position does).
    pub(super) fn map_into<M: LaneMap<T>>(
        &self, map: &M, d: usize, whole: bool, out: &mut [M::Output],
    ) {
        if d == 1 {
            // row tasks own consecutive entry ranges of the output
            per_task(&row_tasks(self.indptr), out, |t, o| {
                let base = t.entries.start;
                if whole {
                    // elementwise: the task's entries are one run
                    let e = t.entries.clone();
                    map.map(&self.values[e], self.bits_at(base), o);
                    return;
                }
                for r in t.rows.clone() {
                    let e = self.row(r);
                    let (lo, hi) = (e.start - base, e.end - base);
                    map.map(
                        &self.values[e.clone()],
                        self.bits_at(e.start),
                        &mut o[lo..hi],
                    );
                }
            });
            return;
        }
        // columns: the op's form over the entries in storage order, else every entry
        // gathered in column order (with its validity bit), each column mapped, the
        // values scattered back to their entries' slots
        if map.scatters() && self.scattered().is_some_and(|s| map.map_scattered(s, out)) {
            return;
        }
        let (entry, colptr) = self.by_column();
        let gathered = par::gather(self.values, &entry);
        let words = self.valid.as_deref().map(|_| {
            par::collect(entry.len().div_ceil(64), |w| {
                let slots = w * 64..(w * 64 + 64).min(entry.len());
                (slots.clone())
                    .zip(&entry[slots])
                    .fold(0u64, |word, (s, &k)| {
                        word | u64::from(self.is_valid(k)) << (s % 64)
                    })
            })
        });
        let mut mapped = vec![M::Output::default(); gathered.len()];
        par::parts_mut(&mut mapped, &colptr, |c, o| {
            let bits = words.as_deref().map(|w| Bits::new(w, colptr[c]));
            map.map(&gathered[colptr[c]..colptr[c + 1]], bits, o);
        });
        scatter_back(&entry, &mapped, out);
    }

    /// The columns as lanes of the entries in storage order (`None` where the columns
    /// far outnumber the entries).
    fn scattered(&self) -> Option<Scattered<'_, T>> {
        Scattered::new(
            self.values,
            self.bits_at(0),
            self.indices.lane_ids(),
            self.shape.1,
        )
    }

    /// Maps every column: the op's form over the entries in storage order
    /// ([`LaneMap::map_scattered`]), else the entries gathered by an O(nnz) counting
    /// sort; the output stores the valid entries in row order.
    pub(super) fn map_cols<M: LaneMap<T>>(
        &self, map: &M,
    ) -> (Vec<usize>, ColsBuf<'a>, Vec<M::Output>) {
        if let Some(s) = self.scattered().filter(|_| map.scatters()) {
            let mut slots = fresh_vec::<M::Output>(self.nnz());
            if map.map_scattered(s, &mut slots) {
                let Some(w) = self.valid.as_deref() else {
                    return (self.indptr.to_vec(), ColsBuf::Borrowed(self.indices), slots);
                };
                let values = compress_par(&slots, w);
                return (
                    valid_ptr(self.indptr, w),
                    self.indices.kept(Some(w)),
                    values,
                );
            }
        }
        let nrows = self.shape.0;
        // the valid entries, numbered in row order (all of them: this very structure)
        let (out_ptr, keep, indices) = if self.valid.is_none() {
            (self.indptr.to_vec(), None, ColsBuf::Borrowed(self.indices))
        } else {
            let mut out_ptr = Vec::with_capacity(nrows + 1);
            out_ptr.push(0);
            let mut keep = Vec::with_capacity(self.nnz());
            for r in 0..nrows {
                keep.extend(self.row(r).filter(|&k| self.is_valid(k)));
                out_ptr.push(keep.len());
            }
            let sub = self.indices.kept(self.valid.as_deref());
            (out_ptr, Some(keep), sub)
        };
        let (entry, colptr) = CsrLanes {
            shape: self.shape,
            indptr: &out_ptr,
            indices: indices.cols(),
            values: &[] as &[T],
            valid: None,
            fill: false,
        }
        .by_column();
        let gathered = match &keep {
            None => par::gather(self.values, &entry),
            Some(keep) => par::collect(entry.len(), |s| self.values[keep[entry[s]]]),
        };
        let mut mapped = vec![M::Output::default(); gathered.len()];
        par::parts_mut(&mut mapped, &colptr, |c, out| {
            map.map(&gathered[colptr[c]..colptr[c + 1]], None, out);
        });
        let mut values = fresh_vec::<M::Output>(out_ptr[nrows]);
        scatter_back(&entry, &mapped, &mut values);
        (out_ptr, indices, values)
    }
}

/// `out[entry[s]] = mapped[s]` for every column-major slot `s` (values mapped in column
/// order back to their entries), in parallel chunks of slots.
fn scatter_back<O: Copy + Send + Sync>(entry: &[usize], mapped: &[O], out: &mut [O]) {
    const CHUNK: usize = 1 << 14;
    debug_assert_eq!(entry.len(), mapped.len());
    let dst = par::Scatter::new(out);
    par::for_each(entry.len().div_ceil(CHUNK), |c| {
        let r = c * CHUNK..((c + 1) * CHUNK).min(entry.len());
        for (&k, &v) in entry[r.clone()].iter().zip(&mapped[r]) {
            // SAFETY: `entry` comes from `CsrLanes::by_column`, a permutation of the
            // entries (each written to one slot of the counting sort): no slot of `out`
            // is written twice
            unsafe { dst.write(k, v) };
        }
    });
}

/// The output of a row map over the entries of `indptr` with validity `valid` (`None`:
/// all valid): the row pointer of the valid entries and their values, which `task`
/// writes for each row task (the task's rows' valid values), tasks in parallel. The
/// first task error (in row order) is returned. The column indices of the valid
/// entries are the caller's (`Cols::kept`): they do not depend on the map.
pub(super) fn map_rows_by<O: masked_kernels::ZeroBits + Send, E: Send>(
    indptr: &[usize], valid: Option<&[u64]>,
    task: impl Fn(&Task, &mut [O]) -> std::result::Result<(), E> + Sync,
) -> std::result::Result<(Vec<usize>, Vec<O>), E> {
    let nrows = indptr.len() - 1;
    let out_ptr = valid.map_or_else(|| indptr.to_vec(), |w| valid_ptr(indptr, w));
    let nout = out_ptr[nrows];
    let mut values = fresh_vec::<O>(nout);
    let tasks = row_tasks(indptr);
    // tasks own disjoint, consecutive ranges of the output
    let mut pieces = Vec::with_capacity(tasks.len());
    let mut vrest: &mut [O] = &mut values;
    for t in &tasks {
        let len = out_ptr[t.rows.end] - out_ptr[t.rows.start];
        let (v, vr) = vrest.split_at_mut(len);
        pieces.push((t, v));
        vrest = vr;
    }
    let results: Vec<std::result::Result<(), E>> = par::map_vec(pieces, |(t, vout)| task(t, vout));
    results
        .into_iter()
        .collect::<std::result::Result<(), E>>()?;
    Ok((out_ptr, values))
}
