//! Folding the lanes of a CSR matrix: along rows, along columns (a column sweep
//! through per-column states) and over all entries.

use super::*;

impl<'a, T: Element> CsrLanes<'a, T> {
    /// Folds the entries `ents` of one lane, whose positions (from `pos`) lie in
    /// `span`; with `fill`, the positions of `span` not among them are valid zeros.
    #[inline]
    pub(super) fn fold_segment<F: Fold<T>>(
        &self, op: &F, st: &mut F::State, ents: Range<usize>, pos: impl Fn(usize) -> i64,
        span: Range<i64>,
    ) {
        if !op.positional() {
            // the values from the lane's start on: the kernel may end with whole vectors
            let n = ents.len();
            op.push_row(
                st,
                &self.values[ents.start..],
                n,
                self.bits_at(ents.start),
                0,
            );
            if self.fill {
                let zeros = (span.end - span.start) as u64 - ents.len() as u64;
                op.push_zeros(st, zeros, span.start);
            }
            return;
        }
        if !self.fill {
            // without unstored zeros, the entries alone compete, in position order
            let (e0, vals) = (ents.start, &self.values[ents.clone()]);
            if op.push_run_at(st, vals, self.bits_at(e0), &|k| pos(e0 + k)) {
                return;
            }
        }
        let mut next = span.start;
        for k in ents {
            let p = pos(k);
            if self.fill && p > next {
                op.push_zeros(st, (p - next) as u64, next);
            }
            if self.is_valid(k) {
                op.push(st, self.values[k], p);
            }
            next = p + 1;
        }
        if self.fill && span.end > next {
            op.push_zeros(st, (span.end - next) as u64, next);
        }
    }

    /// Whether a lane with these entries and `len` positions has a valid element.
    #[inline]
    pub(super) fn lane_valid(&self, ents: Range<usize>, len: usize) -> bool {
        (self.fill && len > ents.len()) || self.count_valid(ents) > 0
    }

    pub(super) fn fold_rows<F: Fold<T>>(&self, op: &F) -> Vec<Vec<Option<F::Output>>> {
        let ncols = self.shape.1;
        let fold_row = |ents: Range<usize>, span: Range<i64>| {
            let mut st = op.identity();
            self.fold_segment(op, &mut st, ents, |k| self.col(k) as i64, span);
            st
        };
        let tasks = row_tasks(self.indptr);
        let parts: Vec<Vec<Option<F::Output>>> = par::map(tasks.len(), |ti| {
            let t = &tasks[ti];
            if let Some(pieces) = t.pieces() {
                // one huge row: fold its pieces in parallel, merge them in order
                let r = t.rows.start;
                let e = self.row(r);
                let states: Vec<F::State> = par::map(pieces.len(), |pi| {
                    let p = &pieces[pi];
                    let lo = if p.start == e.start {
                        0
                    } else {
                        self.col(p.start - 1) + 1
                    };
                    let hi = if p.end == e.end {
                        ncols
                    } else {
                        self.col(p.end - 1) + 1
                    };
                    fold_row(p.clone(), lo as i64..hi as i64)
                });
                let mut it = states.into_iter();
                let mut st = it.next().unwrap_or_else(|| op.identity());
                for s in it {
                    op.merge(&mut st, s);
                }
                let ok = op.valid_everywhere() || self.lane_valid(e, ncols);
                return vec![ok.then(|| op.finish(&st))];
            }
            t.rows
                .clone()
                .map(|r| {
                    let e = self.row(r);
                    if !op.valid_everywhere() && !self.lane_valid(e.clone(), ncols) {
                        return None;
                    }
                    Some(op.finish(&fold_row(e, 0..ncols as i64)))
                })
                .collect()
        });
        parts
    }

    pub(super) fn fold_cols<F: Fold<T>>(&self, op: &F) -> Vec<Option<F::Output>> {
        let (nrows, ncols) = self.shape;
        let positional_fill = self.fill && op.positional();
        let gs = groups(self.indptr);
        let parts: Vec<ColGroup<F::State>> = par::map(gs.len(), |gi| {
            let rows = gs[gi].clone();
            let mut states = vec![op.identity(); ncols];
            // one bit per column: any valid entry seen (L1-resident, unlike a count)
            let mut seen = vec![0u64; ncols.div_ceil(64)];
            let mut stored = if self.fill {
                vec![0u32; ncols]
            } else {
                Vec::new()
            };
            let mut next = if positional_fill {
                vec![rows.start as u32; ncols]
            } else {
                Vec::new()
            };
            if self.valid.is_none() && !self.fill {
                // the fast path (mask = a pattern): every entry valid, no zeros
                with_cols!(self.indices, ix => for r in rows.clone() {
                    let e = self.row(r);
                    for (x, c) in self.values[e.clone()].iter().zip(&ix[e]) {
                        let c = c.index_unchecked();
                        // SAFETY: every column index is below `ncols` (the
                        // struct's invariant): `states` has `ncols` slots and
                        // `seen` a bit for each.
                        unsafe {
                            op.push(states.get_unchecked_mut(c), *x, r as i64);
                            *seen.get_unchecked_mut(c / 64) |= 1 << (c % 64);
                        }
                    }
                })
            } else {
                // validity bits or unstored zeros: entry by entry
                for r in rows.clone() {
                    for k in self.row(r) {
                        let c = self.col(k);
                        if positional_fill && (r as u32) > next[c] {
                            let gap = r as u32 - next[c];
                            op.push_zeros(&mut states[c], gap as u64, next[c] as i64);
                        }
                        if self.is_valid(k) {
                            op.push(&mut states[c], self.values[k], r as i64);
                            seen[c / 64] |= 1 << (c % 64);
                        }
                        if self.fill {
                            stored[c] += 1;
                        }
                        if positional_fill {
                            next[c] = r as u32 + 1;
                        }
                    }
                }
            }
            if positional_fill {
                for c in 0..ncols {
                    let gap = rows.end as u32 - next[c];
                    op.push_zeros(&mut states[c], gap as u64, next[c] as i64);
                }
            }
            ColGroup {
                states,
                seen,
                stored,
            }
        });
        par::flat_map_ranges(ncols, 1024, |cs, out| {
            out.extend(cs.map(|c| {
                let mut st = op.identity();
                let (mut any, mut ns) = (false, 0u64);
                for ColGroup {
                    states,
                    seen,
                    stored,
                } in &parts
                {
                    op.merge(&mut st, states[c].clone());
                    any |= (seen[c / 64] >> (c % 64)) & 1 == 1;
                    if self.fill {
                        ns += stored[c] as u64;
                    }
                }
                let zeros = if self.fill { nrows as u64 - ns } else { 0 };
                if self.fill && !op.positional() {
                    op.push_zeros(&mut st, zeros, 0);
                }
                (op.valid_everywhere() || any || zeros > 0).then(|| op.finish(&st))
            }))
        })
    }

    pub(super) fn fold_all<F: Fold<T>>(&self, op: &F) -> Option<F::Output> {
        let ncols = self.shape.1 as i64;
        let gs = groups(self.indptr);
        let states: Vec<F::State> = par::map(gs.len(), |gi| {
            let rows = gs[gi].clone();
            let mut st = op.identity();
            if op.positional() {
                for r in rows {
                    let base = r as i64 * ncols;
                    self.fold_segment(
                        op,
                        &mut st,
                        self.row(r),
                        |k| base + self.col(k) as i64,
                        base..base + ncols,
                    );
                }
            } else {
                let ents = self.indptr[rows.start]..self.indptr[rows.end];
                let span = rows.start as i64 * ncols..rows.end as i64 * ncols;
                self.fold_segment(op, &mut st, ents, |_| 0, span);
            }
            st
        });
        let mut st = op.identity();
        for s in states {
            op.merge(&mut st, s);
        }
        let total = self.shape.0 * self.shape.1;
        let ok = op.valid_everywhere() || self.lane_valid(0..self.nnz(), total);
        ok.then(|| op.finish(&st))
    }
}
