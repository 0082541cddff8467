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
        let nrows = self.shape.0;
        // every entry valid: the output has this structure's pattern, shared, not copied
        let shared = self.valid.is_none();
        let out_ptr = if shared {
            self.indptr.to_vec()
        } else {
            let mut p = Vec::with_capacity(nrows + 1);
            p.push(0);
            for r in 0..nrows {
                p.push(p[r] + self.count_valid(self.row(r)));
            }
            p
        };
        let nout = out_ptr[nrows];
        let mut values = fresh_vec::<M::Output>(nout);
        let mut indices = fresh_vec::<I>(if shared { 0 } else { nout });
        let tasks = row_tasks(self.indptr);
        // tasks own disjoint, consecutive ranges of the output
        let mut pieces = Vec::with_capacity(tasks.len());
        let (mut vrest, mut irest): (&mut [M::Output], &mut [I]) = (&mut values, &mut indices);
        for t in &tasks {
            let len = out_ptr[t.rows.end] - out_ptr[t.rows.start];
            let (v, vr) = vrest.split_at_mut(len);
            let (i, ir) = irest.split_at_mut(if shared { 0 } else { len });
            pieces.push((t.rows.clone(), v, i));
            vrest = vr;
            irest = ir;
        }
        pieces.into_par_iter().for_each(|(rows, vout, iout)| {
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
        });
        let indices = if shared {
            Cow::Borrowed(self.indices)
        } else {
            Cow::Owned(indices)
        };
        (out_ptr, indices, values)
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
        pieces
            .into_par_iter()
            .with_min_len(256)
            .for_each(|(c, out)| {
                map.map(&gathered[colptr[c]..colptr[c + 1]], None, out);
            });
        let mut values = fresh_vec::<M::Output>(indices.len());
        for (s, &k) in entry.iter().enumerate() {
            values[k] = mapped[s];
        }
        (out_ptr, indices, values)
    }
}
