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
        AttentionPlan {
            patterns,
            starts,
            per_batch,
            transposes,
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
    /// call), and returns their size in bytes.
    ///
    /// # Errors
    /// A pattern with 2^32 or more rows or stored positions.
    pub fn prepare_backward(&self) -> Result<usize> {
        let mut bytes = 0;
        for i in 0..self.patterns.len() {
            bytes += self.transpose(i)?.bytes();
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
