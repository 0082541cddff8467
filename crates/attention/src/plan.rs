//! [`AttentionPlan`]: the index-only half of attention (faer's symbolic step): the
//! pattern, or one per batch element, and the transpose the gradients walk by key,
//! built once on first use and reused by every later call.

use crate::kernels::Index;
use layout_csr::Pattern;
use masked_core::{MaskedError, Result};
use std::sync::OnceLock;

/// The transpose of a pattern: for each key (column), the queries (rows) that see it; and
/// for each of its entries (in column order), the stored position in the pattern's row
/// order it comes from (where the column pass reads a bias, and how values in row order
/// are put in column order).
#[derive(Debug)]
pub(crate) struct Transpose {
    pub(crate) colptr: Vec<usize>,
    pub(crate) rows: Vec<u32>,
    pub(crate) src: Vec<u32>,
}

impl Transpose {
    fn of(p: &Pattern) -> Result<Transpose> {
        let (nrows, ncols) = p.shape();
        if nrows > u32::MAX as usize || p.nnz() > u32::MAX as usize {
            return Err(MaskedError::Unsupported {
                op: "attention's gradient",
                context: format!(
                    "for a pattern of {nrows} rows and {} stored positions (at most 2^32 - 1 of each)",
                    p.nnz()
                ),
            });
        }
        let mut colptr = vec![0usize; ncols + 1];
        for &c in p.indices() {
            colptr[c + 1] += 1;
        }
        for j in 0..ncols {
            colptr[j + 1] += colptr[j];
        }
        let mut next = colptr[..ncols].to_vec();
        let (mut rows, mut src) = (vec![0u32; p.nnz()], vec![0u32; p.nnz()]);
        for (r, w) in p.indptr().windows(2).enumerate() {
            for (e, &c) in (w[0]..).zip(&p.indices()[w[0]..w[1]]) {
                let slot = next[c];
                next[c] += 1;
                rows[slot] = r as u32;
                src[slot] = e as u32;
            }
        }
        Ok(Transpose { colptr, rows, src })
    }

    /// `xs` (one value per stored position, in row order) in column order.
    pub(crate) fn to_columns<A: Copy>(&self, xs: &[A]) -> Vec<A> {
        self.src.iter().map(|&e| xs[e as usize]).collect()
    }

    pub(crate) fn index(&self) -> Index<'_, u32> {
        Index {
            ptr: &self.colptr,
            idx: &self.rows,
        }
    }

    fn bytes(&self) -> usize {
        self.colptr.len() * std::mem::size_of::<usize>() + (self.rows.len() + self.src.len()) * 4
    }
}

/// How attention and its gradient walk a pattern.
///
/// - `Rows`: one query row at a time over all its keys (and, for `dK` and `dV`, one key
///   at a time over its queries, through the plan's transpose): best where a row's keys
///   lie close together (a band, causal, padding lengths), as the rows it gathers were
///   just gathered by the previous query.
/// - `KeySlices(width)`: the keys swept in slices of `width` (0: as many as fit in about
///   1 MiB of key and value rows), each query row taking its pairs inside the slice
///   from a cursor: every key or value row a pair gathers comes from a slice that stays
///   in the second-level cache. Best where a row's keys scatter over more keys than that
///   cache holds (a random pattern, a graph); the gradient keeps two values a pair
///   instead of the transpose.
/// - `Auto` (the default): `KeySlices(0)` for a pattern whose rows each span, on
///   average, 4096 keys or more at a density under one in four; `Rows` otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Traversal {
    /// Chosen per pattern from its geometry.
    #[default]
    Auto,
    /// A query row at a time.
    Rows,
    /// Key slices of this many keys (0: chosen from the head dims).
    KeySlices(usize),
}

/// Mean span (last key − first key + 1) of a pattern's non-empty rows from which `Auto`
/// sweeps key slices.
const SCATTERED_SPAN: usize = 4096;

/// Whether a pattern's rows scatter: on average over its non-empty rows, a span of at
/// least [`SCATTERED_SPAN`] keys holding under a quarter of them.
fn scattered(p: &Pattern) -> bool {
    let (ptr, idx) = (p.indptr(), p.indices());
    let (mut span, mut rows) = (0usize, 0usize);
    for w in ptr.windows(2) {
        if w[1] > w[0] {
            span += idx[w[1] - 1] - idx[w[0]] + 1;
            rows += 1;
        }
    }
    rows > 0 && span >= SCATTERED_SPAN * rows && p.nnz() * 4 < span
}

/// Bytes of key and value rows a slice holds when its width is chosen.
const SLICE_BYTES: usize = 1 << 20;

/// Which (query, key) pairs attend: one `nq × nk` [`Pattern`] shared by every batch
/// element and head, or one per batch element (the first leading dim of the operands),
/// each shared by that element's heads. Build it once and reuse it: it holds the
/// transpose that gradients need, computed on the first gradient call (an index-only
/// step, as faer's symbolic factorisation; [`AttentionPlan::prepare_backward`] does it
/// ahead).
///
/// ```
/// use masked::attention::{AttentionPlan, Pattern};
/// let plan = AttentionPlan::new(Pattern::causal(4).unwrap());
/// assert_eq!(plan.shape(), (4, 4));
/// assert_eq!(plan.nnz(), 10);
/// ```
#[derive(Debug)]
pub struct AttentionPlan {
    patterns: Vec<Pattern>,
    /// Where each pattern's positions start in a value vector holding every pattern's.
    starts: Vec<usize>,
    per_batch: bool,
    transposes: Vec<OnceLock<Transpose>>,
    /// Whether each pattern's rows scatter ([`Traversal::Auto`]'s choice).
    scattered: Vec<bool>,
    traversal: Traversal,
}

impl AttentionPlan {
    /// One pattern for every batch element and head.
    pub fn new(pattern: Pattern) -> AttentionPlan {
        AttentionPlan::build(vec![pattern], false)
    }

    /// One pattern per batch element (the first leading dim of the operands), each
    /// shared by that element's heads.
    ///
    /// # Errors
    /// No pattern, or patterns of different shapes.
    pub fn per_batch(patterns: Vec<Pattern>) -> Result<AttentionPlan> {
        let Some(first) = patterns.first() else {
            return Err(MaskedError::InvalidArgument {
                name: "patterns",
                value: "[]".into(),
                reason: "one pattern per batch element, at least one",
            });
        };
        let shape = first.shape();
        if let Some(p) = patterns.iter().find(|p| p.shape() != shape) {
            return Err(MaskedError::ShapeMismatch {
                what: "patterns of one plan".into(),
                left: vec![shape.0, shape.1],
                right: vec![p.shape().0, p.shape().1],
            });
        }
        Ok(AttentionPlan::build(patterns, true))
    }

    fn build(patterns: Vec<Pattern>, per_batch: bool) -> AttentionPlan {
        let mut starts = Vec::with_capacity(patterns.len() + 1);
        starts.push(0);
        for p in &patterns {
            starts.push(starts.last().copied().unwrap_or(0) + p.nnz());
        }
        let transposes = patterns.iter().map(|_| OnceLock::new()).collect();
        let scattered = patterns.iter().map(scattered).collect();
        AttentionPlan {
            patterns,
            starts,
            per_batch,
            transposes,
            scattered,
            traversal: Traversal::Auto,
        }
    }

    /// The plan with this [`Traversal`] (the default: `Auto`). Every traversal computes
    /// the same values, up to rounding.
    pub fn with_traversal(mut self, traversal: Traversal) -> AttentionPlan {
        self.traversal = traversal;
        self
    }

    /// Its [`Traversal`].
    pub fn traversal(&self) -> Traversal {
        self.traversal
    }

    /// The key slices pattern `i` is swept in, for key and value rows of `row_bytes`
    /// together; `None`: a row at a time.
    pub(crate) fn slice_width(&self, i: usize, row_bytes: usize) -> Option<usize> {
        let auto = || (SLICE_BYTES / row_bytes.max(1)).clamp(64, 1 << 16);
        match self.traversal {
            Traversal::Rows => None,
            Traversal::KeySlices(0) => Some(auto()),
            Traversal::KeySlices(w) => Some(w),
            Traversal::Auto => self.scattered[i].then(auto),
        }
    }

    /// `(queries, keys)`.
    pub fn shape(&self) -> (usize, usize) {
        self.patterns[0].shape()
    }

    /// Stored positions of every pattern together (the length of a bias).
    pub fn nnz(&self) -> usize {
        self.starts[self.patterns.len()]
    }

    /// The patterns (one, or one per batch element).
    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    /// Whether there is one pattern per batch element.
    pub fn is_per_batch(&self) -> bool {
        self.per_batch
    }

    /// Builds the transposes the gradients walk (otherwise built by the first gradient
    /// call), and returns their size in bytes: those of the patterns walked a row at a
    /// time ([`Traversal`]; key slices need none).
    ///
    /// # Errors
    /// A pattern with 2^32 or more rows or stored positions.
    pub fn prepare_backward(&self) -> Result<usize> {
        let mut bytes = 0;
        for i in 0..self.patterns.len() {
            if self.slice_width(i, 1).is_none() {
                bytes += self.transpose(i)?.bytes();
            }
        }
        Ok(bytes)
    }

    pub(crate) fn transpose(&self, i: usize) -> Result<&Transpose> {
        if let Some(t) = self.transposes[i].get() {
            return Ok(t);
        }
        let t = Transpose::of(&self.patterns[i])?;
        Ok(self.transposes[i].get_or_init(|| t))
    }

    pub(crate) fn index(&self, i: usize) -> Index<'_, usize> {
        Index {
            ptr: self.patterns[i].indptr(),
            idx: self.patterns[i].indices(),
        }
    }

    /// The first stored position of pattern `i` in a vector of every pattern's.
    pub(crate) fn start(&self, i: usize) -> usize {
        self.starts[i]
    }
}
