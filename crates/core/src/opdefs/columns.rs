//! The lanes of a dim outer to the innermost, taken down the columns of a row-major
//! block: a lane map's per-lane statistics as column folds over blocks of rows (each
//! row a contiguous run, vectorised across the columns), then every row mapped with its
//! columns' statistics. Two or three streaming passes over the rows instead of tiles of
//! lanes transposed out and back ([`LaneMap::map_columns`]).
//!
//! [`LaneMap::map_columns`]: crate::lane::LaneMap::map_columns

use masked_kernels::{par, Bits};

/// Elements of one task of a column pass, about.
const TASK: usize = 1 << 16;
/// Rows of one task at the least.
const MIN_ROWS: usize = 16;
/// Columns of one task at the most (a row of accumulators in L1 or L2).
const CHUNK: usize = 1 << 12;

/// The lanes along the middle dim of a row-major block of shape `(outer, len, inner)`:
/// lane `(o, k)` is the elements `(o, r, k)` for `r < len`, valid where `bits` is set.
#[derive(Debug, Clone, Copy)]
pub struct Columns<'a, T> {
    xs: &'a [T],
    bits: Option<Bits<'a>>,
    outer: usize,
    len: usize,
    inner: usize,
}

impl<'a, T: Sync> Columns<'a, T> {
    /// The lanes of `xs` (`outer * len * inner` elements) along its middle dim.
    pub fn new(
        xs: &'a [T], bits: Option<Bits<'a>>, (outer, len, inner): (usize, usize, usize),
    ) -> Self {
        debug_assert!(xs.len() >= outer * len * inner);
        Columns {
            xs,
            bits,
            outer,
            len,
            inner,
        }
    }

    /// The distance between two rows (a lane's neighbouring elements): `inner`.
    pub fn stride(&self) -> usize {
        self.inner
    }

    /// Rows a task takes: about [`TASK`] elements of a chunk of at most [`CHUNK`]
    /// columns, at least [`MIN_ROWS`] rows. The cut depends on the shape only, so
    /// results do not depend on the thread count.
    fn rows(&self) -> usize {
        (TASK / self.inner.clamp(1, CHUNK)).max(MIN_ROWS)
    }

    /// The tasks of a pass: `(outer block, first column, first row)` of task `t`, over
    /// chunks of [`CHUNK`] columns and blocks of [`Columns::rows`] rows (outer block
    /// first, then column chunk, then row block: a lane's blocks in row order).
    fn tasks(&self) -> (usize, impl Fn(usize) -> (usize, usize, usize) + Sync) {
        let (nc, rows) = (self.inner.div_ceil(CHUNK), self.rows());
        let nb = self.len.div_ceil(rows);
        let cut = move |t: usize| (t / (nc * nb), (t / nb) % nc * CHUNK, t % nb * rows);
        (self.outer * nc * nb, cut)
    }

    /// One value a lane (`outer * inner` of them, lane `(o, k)` at `o * inner + k`):
    /// tasks of rows and columns in parallel, each folded from `id` by
    /// `fold(lane, acc, xs, bits, n)` (the `n` rows from `xs[0]`, `inner` apart, into
    /// `acc`, one value a column, `lane` the index of its first column's lane), the
    /// blocks' values merged in row order by `merge` (each chunk of columns in
    /// parallel).
    pub fn fold<A: Clone + Send + Sync>(
        &self, id: A, fold: impl Fn(usize, &mut [A], &[T], Option<Bits<'_>>, usize) + Sync,
        merge: impl Fn(&mut A, A) + Sync,
    ) -> Vec<A> {
        let (n, cut) = self.tasks();
        let parts = par::map(n, |t| {
            let (o, j0, r0) = cut(t);
            let (w, rows) = self.rect(j0, r0);
            let at = (o * self.len + r0) * self.inner + j0;
            let mut acc = vec![id.clone(); w];
            let xs = &self.xs[at..];
            fold(o * self.inner + j0, &mut acc, xs, self.bits_at(at), rows);
            acc
        });
        self.merge_tasks(parts, id, merge)
    }

    /// As [`Columns::fold`], a row at a time, each row written too: `row(lane, acc, xs,
    /// bits, out)` folds one row's part of a chunk of columns (`xs`, `bits`) into `acc`
    /// and writes that part of `out` (shaped as the block). A pass that writes what its
    /// fold computes (softmax's exps) rather than computing it again.
    pub fn fold_rows_into<A: Clone + Send + Sync, O: Send>(
        &self, id: A, out: &mut [O],
        row: impl Fn(usize, &mut [A], &[T], Option<Bits<'_>>, &mut [O]) + Sync,
        merge: impl Fn(&mut A, A) + Sync,
    ) -> Vec<A> {
        let (n, cut) = self.tasks();
        let dst = par::Scatter::new(out);
        let parts = par::map(n, |t| {
            let (o, j0, _) = cut(t);
            let mut acc = vec![id.clone(); self.rect(j0, 0).0];
            self.task_rows(t, &cut, &dst, |at, xs, out| {
                row(o * self.inner + j0, &mut acc, xs, self.bits_at(at), out);
            });
            acc
        });
        self.merge_tasks(parts, id, merge)
    }

    /// The tasks' values merged in row order: the tasks of one outer block and chunk of
    /// columns are consecutive, so each chunk is merged from the identity, in
    /// parallel, and the chunks come in lane order.
    fn merge_tasks<A: Clone + Send + Sync>(
        &self, parts: Vec<Vec<A>>, id: A, merge: impl Fn(&mut A, A) + Sync,
    ) -> Vec<A> {
        let nb = self.len.div_ceil(self.rows());
        if nb == 0 {
            return vec![id; self.outer * self.inner];
        }
        let chunks = par::map(parts.len() / nb, |c| {
            let mut out = vec![id.clone(); parts[c * nb].len()];
            for p in &parts[c * nb..(c + 1) * nb] {
                for (s, a) in out.iter_mut().zip(p) {
                    merge(s, a.clone());
                }
            }
            out
        });
        chunks.concat()
    }

    /// The width of the chunk of columns from `j0` and the rows of the block from `r0`.
    fn rect(&self, j0: usize, r0: usize) -> (usize, usize) {
        (
            CHUNK.min(self.inner - j0),
            self.rows().min(self.len.saturating_sub(r0)),
        )
    }

    /// The validity bits from element `at`.
    fn bits_at(&self, at: usize) -> Option<Bits<'a>> {
        self.bits.map(|b| b.offset(at))
    }

    /// `f(at, xs, out)` for each row of task `t` (`cut` as [`Columns::tasks`] gives it),
    /// in order: `at` the row's first element in the block, `xs` and `out` its part of
    /// the task's chunk of columns.
    fn task_rows<O>(
        &self, t: usize, cut: impl Fn(usize) -> (usize, usize, usize), dst: &par::Scatter<'_, O>,
        mut f: impl FnMut(usize, &[T], &mut [O]),
    ) {
        let (o, j0, r0) = cut(t);
        let (w, rows) = self.rect(j0, r0);
        for r in r0..r0 + rows {
            let at = (o * self.len + r) * self.inner + j0;
            // SAFETY: this task's rows `r0..` and columns `j0..j0 + w` of block `o` are
            // its alone: the tasks cut every block into disjoint rectangles
            let row = unsafe { dst.part(at, at + w) };
            f(at, &self.xs[at..at + w], row);
        }
    }

    /// Writes every row of `out` (shaped as the block): `f(xs, bits, out, cs)` maps one
    /// row's part of a chunk of columns with those columns' values `cs` (one a lane, as
    /// [`Columns::fold`] returns them), tasks of rows and columns in parallel.
    pub fn map_rows<C: Sync, O: Send>(
        &self, cs: &[C], out: &mut [O], f: impl Fn(&[T], Option<Bits<'_>>, &mut [O], &[C]) + Sync,
    ) {
        let (n, cut) = self.tasks();
        let dst = par::Scatter::new(out);
        par::for_each(n, |t| {
            let (o, j0, _) = cut(t);
            let lanes = &cs[o * self.inner + j0..][..self.rect(j0, 0).0];
            self.task_rows(t, &cut, &dst, |at, xs, out| {
                f(xs, self.bits_at(at), out, lanes);
            });
        });
    }

    /// Walks the rows in order, one task an outer block and chunk of columns (a chunk
    /// a thread, in words): `f(state, xs, bits, out)` for each row, `xs`, `bits` and
    /// `out` that row's part of the chunk, `state` the task's, from `init(w)` for a
    /// chunk `w` columns wide. Each column's elements come in row order, whatever the
    /// cut: a scan (cumsum) computes each lane as the lane alone does.
    pub fn scan_rows<S, O: Send>(
        &self, out: &mut [O], init: impl Fn(usize) -> S + Sync,
        f: impl Fn(&mut S, &[T], Option<Bits<'_>>, &mut [O]) + Sync,
    ) {
        let (len, inner) = (self.len, self.inner);
        if inner == 0 {
            return;
        }
        let chunk = inner
            .div_ceil(par::threads())
            .next_multiple_of(64)
            .min(1 << 12);
        let nc = inner.div_ceil(chunk);
        let dst = par::Scatter::new(out);
        par::for_each(self.outer * nc, |t| {
            let (o, j0) = (t / nc, t % nc * chunk);
            let w = chunk.min(inner - j0);
            let mut state = init(w);
            for r in 0..len {
                let at = (o * len + r) * inner + j0;
                // SAFETY: columns `j0..j0 + w` of each row of block `o` are this task's
                // alone: the tasks cut every block's columns into disjoint chunks
                let row = unsafe { dst.part(at, at + w) };
                f(
                    &mut state,
                    &self.xs[at..at + w],
                    self.bits.map(|b| b.offset(at)),
                    row,
                );
            }
        });
    }
}
