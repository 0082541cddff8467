//! Lane statistics (median, quantile) of a CSR matrix: the valid values of each row,
//! column (gathered in column order) or of the whole matrix, handed to the statistic.

use super::*;
use masked_kernels::ZeroBits;

impl<'a, T: Element> CsrLanes<'a, T> {
    /// The valid entries of `ents` (values, and positions from `pos` when asked).
    pub(super) fn gather(
        &self, ents: Range<usize>, pos: Option<&dyn Fn(usize) -> i64>, vals: &mut Vec<T>,
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
    /// column pointer), by [`CsrLanes::column_sort`].
    pub(super) fn by_column(&self) -> (Vec<usize>, Vec<usize>) {
        self.column_sort(|_| true, |k| k)
    }

    /// The valid values of each column in row order and the column pointer, sorted
    /// straight into their slots (gathered through [`CsrLanes::by_column`]'s entry order
    /// they were read at random a second time: the column median of 10M entries spent
    /// half its time there).
    pub(super) fn valid_by_column(&self) -> (Vec<T>, Vec<usize>) {
        self.column_sort(|k| self.is_valid(k), |k| self.values[k])
    }

    /// `pay(k)` for every entry `k` that `keep` accepts, in column-major order (columns
    /// in order, a column's entries in row order), and the column pointer: a counting
    /// sort by column, O(nnz), each part of the entries counted and moved in parallel.
    /// With few columns each entry goes straight to its slot. With many, a cursor a
    /// column outgrows the cache and nearly every write misses (a column median of 10M
    /// entries over 1M columns took 3.4x as long so); each entry then goes first to its
    /// block of
    /// [`BLOCK_COLS`] or more columns (at most [`MAX_BLOCKS`] streams of writes), then
    /// within its block, in cache, to its column (stable both times).
    fn column_sort<P: ZeroBits + Send + Sync>(
        &self, keep: impl Fn(usize) -> bool + Sync, pay: impl Fn(usize) -> P + Sync,
    ) -> (Vec<P>, Vec<usize>) {
        /// Entries a part at the least.
        const PART: usize = 1 << 18;
        let (ncols, nnz) = (self.shape.1, self.nnz());
        // a power of two: an entry's block and its column there are a shift and a mask
        let width = ncols
            .div_ceil(MAX_BLOCKS)
            .max(BLOCK_COLS)
            .next_power_of_two();
        let shift = width.trailing_zeros();
        // one block: the columns themselves
        let (width, shift) = if ncols < 2 * width {
            (1, 0)
        } else {
            (width, shift)
        };
        let blocks = ncols.div_ceil(width);
        // a count per block and part: at most a quarter of the entries in all
        let parts = (nnz / PART)
            .min(nnz / blocks.max(1).saturating_mul(4))
            .clamp(1, 16);
        let counts = par::map(parts, |p| {
            let mut n = vec![0usize; blocks];
            self.each_in_part(p, parts, |k, c| n[c >> shift] += usize::from(keep(k)));
            n
        });
        // each part's first slot in every block: the block's start, then the counts of
        // the parts before it
        let mut bounds = vec![0usize; blocks + 1];
        let mut next = vec![vec![0usize; blocks]; parts];
        for b in 0..blocks {
            let mut at = bounds[b];
            for (p, n) in counts.iter().enumerate() {
                (next[p][b], at) = (at, at + n[b]);
            }
            bounds[b + 1] = at;
        }
        let total = bounds[blocks];
        let mut out = fresh_vec::<P>(total);
        // each kept entry to its slot in `dst` (its block's next), with its column in
        // the block where `cols` is given
        let scatter = |dst: &par::Scatter<'_, P>, cols: Option<&par::Scatter<'_, u32>>| {
            par::map_vec(next.into_iter().enumerate().collect(), |(p, mut next)| {
                self.each_in_part(p, parts, |k, c| {
                    if keep(k) {
                        let s = &mut next[c >> shift];
                        // SAFETY: slot `*s` lies in block `c >> shift`'s range for this
                        // part (its offset there plus fewer than its count): every slot
                        // is written once, by one part
                        unsafe {
                            dst.write(*s, pay(k));
                            if let Some(cols) = cols {
                                cols.write(*s, (c & (width - 1)) as u32);
                            }
                        }
                        *s += 1;
                    }
                });
            });
        };
        if width == 1 {
            scatter(&par::Scatter::new(&mut out), None);
            return (out, bounds);
        }
        // first to the blocks, each part's entries of a block after those of the parts
        // before it
        let (mut staged, mut col_of) = (fresh_vec::<P>(total), fresh_vec::<u32>(total));
        scatter(
            &par::Scatter::new(&mut staged),
            Some(&par::Scatter::new(&mut col_of)),
        );
        // then within each block, in cache, to the columns: counted, and moved in order
        let sizes = par::parts_mut(&mut out, &bounds, |b, out| {
            let span = bounds[b]..bounds[b + 1];
            let mut next = vec![0usize; width.min(ncols - b * width) + 1];
            for &c in &col_of[span.clone()] {
                next[c as usize + 1] += 1;
            }
            let sizes = next[1..].to_vec();
            for c in 1..next.len() {
                next[c] += next[c - 1];
            }
            for (&v, &c) in staged[span.clone()].iter().zip(&col_of[span]) {
                let s = &mut next[c as usize];
                out[*s] = v;
                *s += 1;
            }
            sizes
        });
        let mut colptr = Vec::with_capacity(ncols + 1);
        colptr.push(0);
        for n in sizes.iter().flatten() {
            colptr.push(colptr[colptr.len() - 1] + n);
        }
        (out, colptr)
    }

    /// `f(k, column)` for each entry `k` of part `p` of `parts` (consecutive ranges of
    /// the entries), in order.
    #[inline(always)]
    fn each_in_part(&self, p: usize, parts: usize, mut f: impl FnMut(usize, usize)) {
        let nnz = self.nnz();
        let r = p * nnz / parts..(p + 1) * nnz / parts;
        crate::cols::with_cols!(self.indices, cols => {
            for (k, &c) in r.clone().zip(&cols[r]) {
                f(k, sprs::SpIndex::index(c));
            }
        });
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
        if !stat.positions() && (!self.fill || self.valid.is_none()) {
            // the valid values alone, sorted into columns and each column's statistic
            // computed in place (they are this call's scratch), in chunks of columns;
            // without a mask every stored entry is valid and the rest of a column zeros
            const CHUNK: usize = 256;
            let (ncols, fill) = (self.shape.1, self.fill);
            let (mut vals, colptr) = self.valid_by_column();
            let first = |i: usize| (i * CHUNK).min(ncols);
            let bounds: Vec<usize> = (0..=ncols.div_ceil(CHUNK))
                .map(|i| colptr[first(i)])
                .collect();
            let parts = par::parts_mut(&mut vals, &bounds, |i, vals| {
                (first(i)..first(i + 1))
                    .map(|c| {
                        let lane = &mut vals[colptr[c] - bounds[i]..colptr[c + 1] - bounds[i]];
                        let zeros = if fill { nrows - lane.len() } else { 0 };
                        (lane.len() + zeros > 0).then(|| stat.compute_sparse(lane, &[], zeros, -1))
                    })
                    .collect()
            });
            return par::concat(parts);
        }
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

/// The fewest columns of a block of [`CsrLanes::column_sort`]'s first pass.
const BLOCK_COLS: usize = 1024;
/// The most blocks of that pass (its streams of writes).
const MAX_BLOCKS: usize = 512;
