//! Lane statistics (median, quantile) of a CSR matrix: the valid values of each row,
//! column (gathered in column order) or of the whole matrix, handed to the statistic.

use super::*;

impl<'a, T: Element> CsrLanes<'a, T> {
    /// The valid entries of `ents` (values, and positions from `pos` when asked).
    pub(super) fn gather(
        &self,
        ents: Range<usize>,
        pos: Option<&dyn Fn(usize) -> i64>,
        vals: &mut Vec<T>,
        at: &mut Vec<i64>,
    ) {
        vals.clear();
        at.clear();
        compress_into(&self.values[ents.clone()], self.bits_at(ents.start), vals);
        if let Some(pos) = pos {
            at.extend(ents.filter(|&k| self.is_valid(k)).map(pos));
        }
    }

    pub(super) fn stat_rows<S: LaneStat<T>>(&self, stat: &S) -> Vec<Vec<Option<S::Output>>> {
        let ncols = self.shape.1;
        let tasks = row_tasks(self.indptr);
        let parts: Vec<Vec<Option<S::Output>>> = par::map(tasks.len(), |ti| {
            let t = &tasks[ti];
            let (mut vals, mut at) = (Vec::new(), Vec::new());
            t.rows
                .clone()
                .map(|r| {
                    let e = self.row(r);
                    if !self.lane_valid(e.clone(), ncols) {
                        return None;
                    }
                    let col = |k: usize| self.col(k) as i64;
                    self.gather(
                        e.clone(),
                        stat.positions().then_some(&col as _),
                        &mut vals,
                        &mut at,
                    );
                    let (zeros, first) = if self.fill {
                        (ncols - e.len(), first_gap(e.map(|k| self.col(k))) as i64)
                    } else {
                        (0, -1)
                    };
                    Some(stat.compute_sparse(&mut vals, &at, zeros, first))
                })
                .collect()
        });
        parts
    }

    /// The entries of each column in row order: (entry index by column-major slot,
    /// column pointer), by a counting sort of the columns (O(nnz)), each entry written
    /// straight to its slot (a slot an entry, then inverted, took two more passes over
    /// memory). Many entries a column: the entries cut into consecutive parts, each
    /// counted and written in parallel from its own offset in every column (the same
    /// order: a column's entries part by part, each part's in order).
    pub(super) fn by_column(&self) -> (Vec<usize>, Vec<usize>) {
        /// Entries a part at the least.
        const PART: usize = 1 << 18;
        let (ncols, nnz) = (self.shape.1, self.nnz());
        // a count per column and part: at most a quarter of the entries in all
        let parts = (nnz / PART)
            .min(nnz / ncols.max(1).saturating_mul(4))
            .clamp(1, 16);
        let cut = |p: usize| p * nnz / parts..(p + 1) * nnz / parts;
        let mut counts = par::map(parts, |p| {
            let mut n = vec![0usize; ncols];
            crate::cols::with_cols!(self.indices, cols => {
                for &c in &cols[cut(p)] {
                    n[sprs::SpIndex::index(c)] += 1;
                }
            });
            n
        });
        // each part's first slot in every column: the column's start, then the counts
        // of the parts before it (`counts` turned into those offsets in place)
        let mut colptr = vec![0usize; ncols + 1];
        for c in 0..ncols {
            let mut at = colptr[c];
            for n in counts.iter_mut() {
                (n[c], at) = (at, at + n[c]);
            }
            colptr[c + 1] = at;
        }
        let mut entry = fresh_vec::<usize>(nnz);
        let dst = par::Scatter::new(&mut entry);
        let offsets: Vec<(usize, Vec<usize>)> = counts.into_iter().enumerate().collect();
        par::map_vec(offsets, |(p, mut next)| {
            crate::cols::with_cols!(self.indices, cols => {
                let r = cut(p);
                for (k, &c) in r.clone().zip(&cols[r]) {
                    let s = &mut next[sprs::SpIndex::index(c)];
                    // SAFETY: slot `*s` lies in column `c`'s range for this part (its
                    // offset there plus fewer than its count): every slot is written
                    // once, by one part
                    unsafe { dst.write(*s, k) };
                    *s += 1;
                }
            });
        });
        (entry, colptr)
    }

    pub(super) fn row_of_entries(&self) -> Vec<u32> {
        let mut rows = vec![0u32; self.nnz()];
        for r in 0..self.shape.0 {
            rows[self.row(r)].fill(r as u32);
        }
        rows
    }

    pub(super) fn stat_cols<S: LaneStat<T>>(&self, stat: &S) -> Vec<Option<S::Output>> {
        let nrows = self.shape.0;
        let (entry, colptr) = self.by_column();
        let row_of = self.row_of_entries();
        par::flat_map_ranges(self.shape.1, 256, |cs, out| {
            let (vals, at) = &mut (Vec::new(), Vec::new());
            out.extend(cs.map(|c| {
                let ents = &entry[colptr[c]..colptr[c + 1]];
                vals.clear();
                at.clear();
                for &k in ents {
                    if self.is_valid(k) {
                        vals.push(self.values[k]);
                        if stat.positions() {
                            at.push(row_of[k] as i64);
                        }
                    }
                }
                let (zeros, first) = if self.fill {
                    (
                        nrows - ents.len(),
                        first_gap(ents.iter().map(|&k| row_of[k] as usize)) as i64,
                    )
                } else {
                    (0, -1)
                };
                (vals.len() + zeros > 0).then(|| stat.compute_sparse(vals, at, zeros, first))
            }))
        })
    }

    pub(super) fn stat_all<S: LaneStat<T>>(&self, stat: &S) -> Option<S::Output> {
        let (nrows, ncols) = self.shape;
        let total = nrows * ncols;
        if !self.lane_valid(0..self.nnz(), total) {
            return None;
        }
        let (mut vals, mut at) = (Vec::with_capacity(self.nnz()), Vec::new());
        let mut first = -1i64;
        for r in 0..nrows {
            let e = self.row(r);
            let base = r * ncols;
            let flat = |k: usize| (base + self.col(k)) as i64;
            compress_into(&self.values[e.clone()], self.bits_at(e.start), &mut vals);
            if stat.positions() {
                at.extend(e.clone().filter(|&k| self.is_valid(k)).map(flat));
            }
            if self.fill && first < 0 {
                let g = first_gap(e.map(|k| self.col(k)));
                if g < ncols {
                    first = (base + g) as i64;
                }
            }
        }
        let zeros = if self.fill { total - self.nnz() } else { 0 };
        Some(stat.compute_sparse(&mut vals, &at, zeros, first))
    }
}
