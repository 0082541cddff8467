//! Segment (message-passing) reductions over a [`Pattern`]: row `i`'s stored pairs are
//! the edges into node `i` (one segment), so per-pair values `[nnz]` (in pattern order)
//! reduce into per-node values `[n]`, or normalise within each node's edges (a graph
//! attention layer's coefficients). Each is the CSR layout's row op on the pattern
//! holding the values (the registry's `sum`, `mean`, `amax` or `softmax` over dim 1, and
//! its VJP): the same kernels as `MaskedCsr::from_pattern(..).sum(1)`, with node-shaped
//! results. A node with no edge gives 0 and passes no gradient, never NaN.
//!
//! ```
//! use masked::attention::segment::{segment, segment_vjp, Segment};
//! use masked::attention::Pattern;
//!
//! // node 0 receives edges from 0 and 2, node 1 from 1, node 2 none
//! let p = Pattern::from_bools([3, 3], [true, false, true, false, true, false, false, false, false])?;
//! let w = [1.0f64, 3.0, 5.0]; // one value per edge, in pattern order
//! assert_eq!(segment(Segment::Sum, &p, &w)?, vec![4.0, 5.0, 0.0]);
//! assert_eq!(segment(Segment::AMax, &p, &w)?, vec![3.0, 5.0, 0.0]);
//! let a = segment(Segment::Softmax, &p, &[0.0f64, 0.0, 7.0])?; // per edge
//! assert_eq!(a, vec![0.5, 0.5, 1.0]);
//! // d(sum of node 0's mean) / d(edge values): 1/2 to each of its edges
//! assert_eq!(segment_vjp(Segment::Mean, &p, &w, &[1.0, 0.0, 0.0])?, vec![0.5, 0.5, 0.0]);
//! # Ok::<(), masked::MaskedError>(())
//! ```

use crate::Pattern;
use layout_csr::{CsrMapped, MaskedCsr};
use masked_core::registry::OpRequest;
use masked_core::{Element, MaskedError, MaskedOps, Result, SparseArray};
use sprs::{CompressedStorage, CsMatBase, CsMatView};
use std::borrow::Cow;

/// A segment op: what each node's incoming edge values become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    /// The sum of the node's edge values (one value per node).
    Sum,
    /// Their mean (one value per node).
    Mean,
    /// Their largest (one value per node; ties share the gradient, as the registry's
    /// `amax`).
    AMax,
    /// The softmax of the node's edge values among themselves (one value per edge).
    Softmax,
}

impl Segment {
    /// The registry op it runs over dim 1 of the pattern.
    pub fn op(self) -> &'static str {
        match self {
            Segment::Sum => "sum",
            Segment::Mean => "mean",
            Segment::AMax => "amax",
            Segment::Softmax => "softmax",
        }
    }

    /// Whether it gives one value per edge (a normalization) rather than per node.
    pub fn per_edge(self) -> bool {
        self == Segment::Softmax
    }
}

/// The pattern holding `values` as a masked CSR matrix whose mask is its pattern.
fn on_pattern<'a, T: Element>(p: &'a Pattern, values: &'a [T]) -> Result<MaskedCsr<'a, T>> {
    if values.len() != p.nnz() {
        return Err(MaskedError::ValueCount {
            expected: p.nnz(),
            got: values.len(),
        });
    }
    // SAFETY: a Pattern's structure is a valid CSR structure (checked when it was made),
    // and there is one value per stored position (checked above).
    let mat: CsMatView<'a, T> = unsafe {
        CsMatBase::new_unchecked(
            CompressedStorage::CSR,
            p.shape(),
            p.indptr(),
            p.indices(),
            values,
        )
    };
    MaskedCsr::from_pattern(mat)
}

/// The node-shaped values of a per-node result: 0 where a node has no edge.
fn per_node<T: Element>(r: &SparseArray<T>, n: usize) -> Vec<T> {
    let mut out = vec![T::ZERO; n];
    for (&i, &v) in r.indices().iter().zip(r.values()) {
        out[i] = v;
    }
    out
}

/// `op` of each node's edge values `values` (a float dtype) (one per stored pair of `pattern`, in its
/// order): `n` values for [`Segment::Sum`], [`Segment::Mean`] and [`Segment::AMax`] (0
/// for a node with no edge), `nnz` for [`Segment::Softmax`].
///
/// # Errors
/// [`MaskedError::ValueCount`] when `values` does not hold one value per pair.
pub fn segment<T: Element<Real = T, Wide = T>>(
    op: Segment, pattern: &Pattern, values: &[T],
) -> Result<Vec<T>> {
    let x = on_pattern(pattern, values)?;
    let n = pattern.shape().0;
    Ok(match op {
        Segment::Sum => per_node(&x.sum(1, false)?, n),
        Segment::Mean => per_node(&x.mean(1, false)?, n),
        Segment::AMax => per_node(&x.amax(1, false)?, n),
        // the result's own values, handed over (no copy)
        Segment::Softmax => x.softmax(1)?.into_raw_storage().2,
    })
}

/// The gradient of `Σ segment(op, pattern, values) ⊙ g` with respect to `values`: `g`
/// has one value per node (or per edge for [`Segment::Softmax`]); the result one per
/// edge. A node with no edge passes nothing.
///
/// # Errors
/// [`MaskedError::ValueCount`] when `values` or `g` has the wrong length.
pub fn segment_vjp<T: Element<Real = T, Wide = T>>(
    op: Segment, pattern: &Pattern, values: &[T], g: &[T],
) -> Result<Vec<T>> {
    let x = on_pattern(pattern, values)?;
    let (n, m) = pattern.shape();
    let want = if op.per_edge() { pattern.nnz() } else { n };
    if g.len() != want {
        return Err(MaskedError::ValueCount {
            expected: want,
            got: g.len(),
        });
    }
    let req = OpRequest::new(op.op())?.dims(1);
    let dx = if op.per_edge() {
        let g: CsrMapped<'_, T, usize> = CsMatBase::new(
            (n, m),
            pattern.indptr().to_vec(),
            Cow::Borrowed(pattern.indices()),
            g.to_vec(),
        );
        x.vjp_map(&req, &g)?
    } else {
        // the upstream at the nodes with an edge (the forward output's valid positions)
        let nodes: Vec<usize> = (0..n).filter(|&i| !pattern.row(i).is_empty()).collect();
        let gv = nodes.iter().map(|&i| g[i]).collect();
        x.vjp_reduce(&req, &SparseArray::new(vec![n], nodes, gv)?)?
    };
    Ok(dx.into_raw_storage().2)
}
