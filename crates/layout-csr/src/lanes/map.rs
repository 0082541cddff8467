//! Mapping the lanes of a CSR matrix (softmax, cumsum, cast, ...): rows in place on
//! the stored structure, columns through a column-order gather and scatter.

use super::*;

impl<'a, T: Element, I: SpIndex> CsrLanes<'a, T, I> {
    /// Every position of the matrix as an entry (the lanes of a mask-free map, which
    /// stores every element): owned indptr, indices, values and validity bits.
    pub(super) fn filled(&self) -> (Vec<usize>, Vec<I>, Vec<T>, Vec<u64>) {
        let (nrows, ncols) = self.shape;
        let n = nrows * ncols;
        let indptr: Vec<usize> = (0..=nrows).map(|r| r * ncols).collect();
        let indices: Vec<I> = (0..n)
            .map(|p| I::from_usize_unchecked(p % ncols.max(1)))
            .collect();
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
        &self,
        map: &M,
    ) -> (Vec<usize>, Cow<'a, [I]>, Vec<M::Output>) {
        let shared = self.valid.is_none();
        let out = map_rows_by(
            self.indptr,
            self.indices,
            self.valid.as_deref(),
            |t, vout, iout| {
                self.map_row_range(map, t.rows.clone(), vout, iout, shared);
                Ok::<(), std::convert::Infallible>(())
            },
        );
        match out {
            Ok(o) => o,
            Err(never) => match never {},
        }
    }

    /// Maps rows `rows` into `vout` (and, unless `shared`, their valid entries' column
    /// indices into `iout`), both from the first row's first valid entry.
    pub(super) fn map_row_range<M: LaneMap<T>>(
        &self,
        map: &M,
        rows: Range<usize>,
        vout: &mut [M::Output],
        iout: &mut [I],
        shared: bool,
    ) {
        let mut tmp = Vec::new();
        let mut o = 0;
        for r in rows {
            let e = self.row(r);
            let bits = self.bits_at(e.start);
            let len = self.count_valid(e.clone());
            if bits.is_none() {
                map.map(&self.values[e.clone()], None, &mut vout[o..o + len]);
                if !shared {
                    iout[o..o + len].copy_from_slice(&self.indices[e]);
                }
            } else {
                tmp.clear();
                tmp.resize(e.len(), M::Output::default());
                map.map(&self.values[e.clone()], bits, &mut tmp);
                let mut j = o;
                for (q, k) in e.enumerate() {
                    if self.is_valid(k) {
                        vout[j] = tmp[q];
                        iout[j] = self.indices[k];
                        j += 1;
                    }
                }
            }
            o += len;
        }
    }

    /// Maps every column (gathered by an O(nnz) counting sort); the output stores the
    /// valid entries in row order.
    pub(super) fn map_cols<M: LaneMap<T>>(
        &self,
        map: &M,
    ) -> (Vec<usize>, Cow<'a, [I]>, Vec<M::Output>) {
        let nrows = self.shape.0;
        // the valid entries, numbered in row order (all of them: this very structure)
        let (out_ptr, keep, indices) = if self.valid.is_none() {
            (self.indptr.to_vec(), None, Cow::Borrowed(self.indices))
        } else {
            let mut out_ptr = Vec::with_capacity(nrows + 1);
            out_ptr.push(0);
            let mut keep = Vec::with_capacity(self.nnz());
            for r in 0..nrows {
                keep.extend(self.row(r).filter(|&k| self.is_valid(k)));
                out_ptr.push(keep.len());
            }
            let sub: Vec<I> = keep.iter().map(|&k| self.indices[k]).collect();
            (out_ptr, Some(keep), Cow::Owned(sub))
        };
        let src = |k: usize| keep.as_ref().map_or(k, |v| v[k]);
        let (entry, colptr) = CsrLanes {
            shape: self.shape,
            indptr: &out_ptr,
            indices: &indices,
            values: &[] as &[T],
            valid: None,
            fill: false,
        }
        .by_column();
        let gathered: Vec<T> = entry.iter().map(|&k| self.values[src(k)]).collect();
        let mut mapped = vec![M::Output::default(); gathered.len()];
        let mut pieces = Vec::with_capacity(self.shape.1);
        let mut rest: &mut [M::Output] = &mut mapped;
        for c in 0..self.shape.1 {
            let (a, b) = rest.split_at_mut(colptr[c + 1] - colptr[c]);
            pieces.push((c, a));
            rest = b;
        }
        par::map_vec(pieces, |(c, out)| {
            map.map(&gathered[colptr[c]..colptr[c + 1]], None, out);
        });
        let mut values = fresh_vec::<M::Output>(indices.len());
        for (s, &k) in entry.iter().enumerate() {
            values[k] = mapped[s];
        }
        (out_ptr, indices, values)
    }
}

/// The output of a row map over the entries `indptr`/`indices` with validity `valid`
/// (`None`: all valid, and the output shares `indices`): its row pointer, its column
/// indices and its values, which `task` writes for each row task (the task's rows'
/// valid values into the first slice, their column indices into the second unless
/// shared), tasks in parallel. The first task error (in row order) is returned.
#[allow(clippy::type_complexity)]
pub(super) fn map_rows_by<'i, I: SpIndex, O: Clone + Default + Send, E: Send>(
    indptr: &[usize],
    indices: &'i [I],
    valid: Option<&[u64]>,
    task: impl Fn(&Task, &mut [O], &mut [I]) -> std::result::Result<(), E> + Sync,
) -> std::result::Result<(Vec<usize>, Cow<'i, [I]>, Vec<O>), E> {
    let nrows = indptr.len() - 1;
    // every entry valid: the output has this structure's pattern, shared, not copied
    let shared = valid.is_none();
    let out_ptr = match valid {
        None => indptr.to_vec(),
        Some(w) => {
            let mut p = Vec::with_capacity(nrows + 1);
            p.push(0);
            for r in 0..nrows {
                let e = indptr[r]..indptr[r + 1];
                p.push(p[r] + Bits::new(w, e.start).count_ones(e.len()));
            }
            p
        }
    };
    let nout = out_ptr[nrows];
    let mut values = fresh_vec::<O>(nout);
    let mut out_idx = fresh_vec::<I>(if shared { 0 } else { nout });
    let tasks = row_tasks(indptr);
    // tasks own disjoint, consecutive ranges of the output
    let mut pieces = Vec::with_capacity(tasks.len());
    let (mut vrest, mut irest): (&mut [O], &mut [I]) = (&mut values, &mut out_idx);
    for t in &tasks {
        let len = out_ptr[t.rows.end] - out_ptr[t.rows.start];
        let (v, vr) = vrest.split_at_mut(len);
        let (i, ir) = irest.split_at_mut(if shared { 0 } else { len });
        pieces.push((t, v, i));
        vrest = vr;
        irest = ir;
    }
    let results: Vec<std::result::Result<(), E>> =
        par::map_vec(pieces, |(t, vout, iout)| task(t, vout, iout));
    results
        .into_iter()
        .collect::<std::result::Result<(), E>>()?;
    let indices = if shared {
        Cow::Borrowed(indices)
    } else {
        Cow::Owned(out_idx)
    };
    Ok((out_ptr, indices, values))
}
