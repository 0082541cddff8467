//! Work partitions by stored entries, not by row count, so that a few huge rows do not
//! serialize the work. Every partition depends on the data only, never on the thread
//! count, so results are bit-for-bit the same for any number of threads.

use masked_kernels::par;
use std::ops::Range;

/// Target work of one task: stored entries plus one unit per row.
const TASK_WORK: usize = 1 << 15;
/// A row with more entries than this is folded in pieces of this size.
const PIECE: usize = 1 << 16;
/// Stored entries per group of a column or all-dims fold (each group holds one
/// accumulator per column, so their number stays small).
const GROUP_NNZ: usize = 1 << 21;
/// Upper bound on the number of groups (each allocates one state per column: more of
/// them cost page faults; fewer balance worse on many cores).
const MAX_GROUPS: usize = 4;

/// A range of rows processed by one task; a single row above [`PIECE`] entries is a task
/// of its own that can be split further.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Task {
    /// The rows.
    pub rows: Range<usize>,
    /// Entries of the task's rows.
    pub entries: Range<usize>,
}

impl Task {
    /// The pieces of a huge single-row task (entry ranges, in order), else `None`.
    pub fn pieces(&self) -> Option<Vec<Range<usize>>> {
        if self.rows.len() != 1 || self.entries.len() <= PIECE {
            return None;
        }
        let e = &self.entries;
        Some(
            (e.start..e.end)
                .step_by(PIECE)
                .map(|s| s..(s + PIECE).min(e.end))
                .collect(),
        )
    }
}

/// Index of the first row whose cumulative work `indptr[r] + r` reaches `target`.
fn row_at_work(indptr: &[usize], target: usize) -> usize {
    let nrows = indptr.len() - 1;
    let (mut lo, mut hi) = (0, nrows);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if indptr[mid] + mid < target {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Splits rows `0..nrows` into consecutive ranges of about `work` entries + rows each,
/// cut at the first row at or past each multiple of `work` (cumulative entries + rows):
/// the cuts do not depend on one another, so a large matrix finds them in parallel (one
/// binary search each; found one after another they were a serial step of every row
/// op). A row of more than `work` entries is always the last of its range (the next
/// multiple falls inside it), and is cut off into a range of its own.
fn split(indptr: &[usize], work: usize) -> Vec<Range<usize>> {
    /// Fewer cuts than this are found serially (cheaper than waking the pool).
    const SERIAL: usize = 64;
    let nrows = indptr.len() - 1;
    let k = (indptr[nrows] + nrows).div_ceil(work);
    let cut = |i: usize| row_at_work(indptr, i * work);
    let mut cuts: Vec<usize> = if k < SERIAL {
        (0..=k).map(cut).collect()
    } else {
        par::map(k + 1, cut)
    };
    cuts.dedup();
    let mut out = Vec::with_capacity(cuts.len() + 1);
    for w in cuts.windows(2) {
        let (start, end) = (w[0], w[1]);
        if end > start + 1 && indptr[end] - indptr[end - 1] > work {
            out.push(start..end - 1);
            out.push(end - 1..end);
        } else {
            out.push(start..end);
        }
    }
    out
}

/// Row tasks of about [`TASK_WORK`] entries + rows each.
pub(crate) fn row_tasks(indptr: &[usize]) -> Vec<Task> {
    split(indptr, TASK_WORK)
        .into_iter()
        .map(|rows| Task {
            entries: indptr[rows.start]..indptr[rows.end],
            rows,
        })
        .collect()
}

/// `[f(task 0, its slots of out), ..]`, run in parallel: `out` holds one slot per entry
/// of `tasks` (consecutive, from the first task's first entry) and each task gets its
/// own entries' slots.
pub(crate) fn per_task<O: Send, R: Send>(
    tasks: &[Task], out: &mut [O], f: impl Fn(&Task, &mut [O]) -> R + Sync,
) -> Vec<R> {
    let base = tasks.first().map_or(0, |t| t.entries.start);
    let bounds: Vec<usize> = tasks
        .iter()
        .map(|t| t.entries.start - base)
        .chain(tasks.last().map(|t| t.entries.end - base))
        .collect();
    par::parts_mut(out, &bounds, |i, o| f(&tasks[i], o))
}

/// At most [`MAX_GROUPS`] row groups of about equal stored entries (one group for a
/// small matrix), for folds that keep per-group accumulators.
pub(crate) fn groups(indptr: &[usize]) -> Vec<Range<usize>> {
    let nrows = indptr.len() - 1;
    let nnz = indptr[nrows];
    let k = (nnz / GROUP_NNZ).clamp(1, MAX_GROUPS);
    if nrows == 0 {
        return Vec::new();
    }
    let work = (nnz + nrows).div_ceil(k);
    let mut out = Vec::with_capacity(k);
    let mut start = 0;
    for g in 1..=k {
        let end = if g == k {
            nrows
        } else {
            row_at_work(indptr, g * work).clamp(start, nrows)
        };
        if end > start {
            out.push(start..end);
        }
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covers(parts: &[Range<usize>], nrows: usize) -> bool {
        parts.first().map_or(nrows == 0, |p| p.start == 0)
            && parts.last().is_none_or(|p| p.end == nrows)
            && parts
                .windows(2)
                .all(|w| w[0].end == w[1].start && w[0].start < w[0].end)
    }

    #[test]
    fn tasks_cover_rows_and_isolate_heavy_ones() {
        // 10 light rows, one row of 3 * PIECE entries, 5 empty rows
        let mut indptr = vec![0];
        for _ in 0..10 {
            indptr.push(indptr.last().unwrap() + 3);
        }
        indptr.push(indptr.last().unwrap() + 3 * PIECE);
        for _ in 0..5 {
            indptr.push(*indptr.last().unwrap());
        }
        let tasks = row_tasks(&indptr);
        let rows: Vec<_> = tasks.iter().map(|t| t.rows.clone()).collect();
        assert!(covers(&rows, 16));
        let heavy = tasks
            .iter()
            .find(|t| t.rows == (10..11))
            .expect("heavy row alone");
        let pieces = heavy.pieces().unwrap();
        assert_eq!(pieces.len(), 3);
        assert_eq!(pieces[0].start, 30);
        assert_eq!(pieces[2].end, 30 + 3 * PIECE);
        let g = groups(&indptr);
        assert!(covers(&g, 16));
        assert!(groups(&[0]).is_empty());
        assert!(row_tasks(&[0]).is_empty());
    }

    #[test]
    fn tasks_are_bounded_on_a_large_irregular_matrix() {
        // enough work for the parallel cut search; row lengths from an LCG, every 997th
        // row heavy
        let mut x = 12345u64;
        let mut indptr = vec![0usize];
        for r in 0..200_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = if r % 997 == 0 {
                TASK_WORK + (x >> 50) as usize
            } else {
                (x >> 57) as usize
            };
            indptr.push(indptr.last().unwrap() + len);
        }
        let tasks = row_tasks(&indptr);
        let rows: Vec<_> = tasks.iter().map(|t| t.rows.clone()).collect();
        assert!(covers(&rows, 200_000));
        assert!(tasks.len() > 64, "{}", tasks.len());
        for t in &tasks {
            assert_eq!(t.entries, indptr[t.rows.start]..indptr[t.rows.end]);
            let heavy = t
                .rows
                .clone()
                .any(|r| indptr[r + 1] - indptr[r] > TASK_WORK);
            if heavy {
                assert_eq!(t.rows.len(), 1, "a heavy row shares {:?}", t.rows);
            } else {
                assert!(t.entries.len() + t.rows.len() <= 2 * TASK_WORK, "{t:?}");
            }
        }
    }

    #[test]
    fn groups_balance_entries() {
        // 100 rows of GROUP_NNZ / 10 entries: 10 groups wanted, capped at MAX_GROUPS
        let indptr: Vec<usize> = (0..=100).map(|r| r * (GROUP_NNZ / 10)).collect();
        let g = groups(&indptr);
        assert_eq!(g.len(), MAX_GROUPS);
        assert!(covers(&g, 100));
        let sizes: Vec<usize> = g.iter().map(|r| r.len()).collect();
        let even = 100 / MAX_GROUPS;
        assert!(
            sizes.iter().all(|&s| s + 2 >= even && s <= even + 2),
            "{sizes:?}"
        );
    }
}
