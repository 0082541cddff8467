//! Shapes: the leading (batch, head) dims of the operands, broadcast as NumPy's are, and
//! where each batch element's matrices start.

use crate::kernels::Mat;
use crate::AttentionPlan;
use masked_core::{MaskedError, Result};
use ndarray::ArrayViewD;

/// A dense `[..., rows, cols]` operand's shape.
#[derive(Debug, Clone)]
pub(crate) struct Operand {
    pub(crate) lead: Vec<usize>,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

impl Operand {
    pub(crate) fn of<T>(x: &ArrayViewD<'_, T>, name: &'static str) -> Result<Operand> {
        Operand::from_shape(x.shape(), name)
    }

    pub(crate) fn from_shape(s: &[usize], name: &'static str) -> Result<Operand> {
        if s.len() < 2 {
            return Err(MaskedError::InvalidArgument {
                name,
                value: format!("shape {s:?}"),
                reason: "needs at least 2 dims: [..., n, d]",
            });
        }
        let n = s.len();
        Ok(Operand {
            lead: s[..n - 2].to_vec(),
            rows: s[n - 2],
            cols: s[n - 1],
        })
    }

    /// The matrix starting at element `off`.
    pub(crate) fn mat<'a, A>(&self, data: &'a [A], off: usize) -> Mat<'a, A> {
        Mat {
            data: &data[off..off + self.rows * self.cols],
            cols: self.cols,
        }
    }
}

/// The broadcast leading dims of the operands.
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    pub(crate) lead: Vec<usize>,
    pub(crate) count: usize,
}

impl Batch {
    /// NumPy broadcasting of the operands' leading dims.
    pub(crate) fn of(ops: &[(&Operand, &'static str)]) -> Result<Batch> {
        let rank = ops.iter().map(|(o, _)| o.lead.len()).max().unwrap_or(0);
        let mut lead = vec![1usize; rank];
        for (o, _) in ops {
            for (i, &s) in o.lead.iter().rev().enumerate() {
                let l = &mut lead[rank - 1 - i];
                if *l == 1 {
                    *l = s;
                } else if s != 1 && s != *l {
                    return Err(MaskedError::ShapeMismatch {
                        what: format!(
                            "leading (batch, head) dims of {} do not broadcast",
                            ops.iter().map(|(_, n)| *n).collect::<Vec<_>>().join(", ")
                        ),
                        left: ops[0].0.lead.clone(),
                        right: o.lead.clone(),
                    });
                }
            }
        }
        let count = lead.iter().try_fold(1usize, |a, &s| a.checked_mul(s));
        let count = count.ok_or_else(|| MaskedError::TooLarge {
            what: format!("a batch of shape {lead:?}"),
            bytes: u128::MAX,
        })?;
        Ok(Batch { lead, count })
    }

    /// The batch of attention's operands, checked against each other and the plan.
    pub(crate) fn attention(
        q: &Operand, k: &Operand, v: &Operand, plan: &AttentionPlan,
    ) -> Result<Batch> {
        let (nq, nk) = plan.shape();
        let mismatch = |what: &str, left: usize, right: usize| MaskedError::ShapeMismatch {
            what: what.into(),
            left: vec![left],
            right: vec![right],
        };
        if q.rows != nq {
            return Err(mismatch("q's rows and the pattern's rows", q.rows, nq));
        }
        if k.rows != nk {
            return Err(mismatch("k's rows and the pattern's columns", k.rows, nk));
        }
        if v.rows != nk {
            return Err(mismatch("v's rows and the pattern's columns", v.rows, nk));
        }
        if k.cols != q.cols {
            return Err(mismatch("the head dim (last) of q and k", q.cols, k.cols));
        }
        let batch = Batch::of(&[(q, "q"), (k, "k"), (v, "v")])?;
        batch.fits(plan)?;
        batch.elements(nq, v.cols)?;
        Ok(batch)
    }

    /// Checks that a per-batch plan has one pattern per element of the first leading dim.
    pub(crate) fn fits(&self, plan: &AttentionPlan) -> Result<()> {
        if plan.is_per_batch() && self.lead.first() != Some(&plan.patterns().len()) {
            return Err(MaskedError::ShapeMismatch {
                what: "one pattern per batch element: the first leading dim and the patterns"
                    .into(),
                left: self.lead.first().map_or(vec![], |&b| vec![b]),
                right: vec![plan.patterns().len()],
            });
        }
        Ok(())
    }

    /// `count · rows · cols`, or an error if it overflows.
    pub(crate) fn elements(&self, rows: usize, cols: usize) -> Result<usize> {
        self.count
            .checked_mul(rows)
            .and_then(|n| n.checked_mul(cols))
            .ok_or_else(|| MaskedError::TooLarge {
                what: format!("an output of shape {:?}", self.shape(rows, cols)),
                bytes: u128::MAX,
            })
    }

    /// `[lead..., rows, cols]`.
    pub(crate) fn shape(&self, rows: usize, cols: usize) -> Vec<usize> {
        let mut s = self.lead.clone();
        s.extend([rows, cols]);
        s
    }

    /// Where batch element `b`'s matrix of `op` starts (broadcast dims repeat it).
    pub(crate) fn offset(&self, b: usize, op: &Operand) -> usize {
        let (mut rem, mut idx, mut stride) = (b, 0usize, 1usize);
        let skip = self.lead.len() - op.lead.len();
        for (i, &s) in self.lead.iter().enumerate().rev() {
            let coord = rem % s.max(1);
            rem /= s.max(1);
            if i >= skip {
                let os = op.lead[i - skip];
                if os != 1 {
                    idx += coord * stride;
                }
                stride *= os;
            }
        }
        idx * op.rows * op.cols
    }

    /// The plan's pattern of batch element `b`.
    pub(crate) fn pattern(&self, b: usize, plan: &AttentionPlan) -> usize {
        if plan.is_per_batch() {
            b / (self.count / self.lead[0]).max(1)
        } else {
            0
        }
    }

    /// Values on the pattern of every batch element together.
    pub(crate) fn value_total(&self, plan: &AttentionPlan) -> usize {
        if plan.is_per_batch() {
            (self.count / self.lead[0].max(1)) * plan.nnz()
        } else {
            self.count * plan.nnz()
        }
    }

    /// Where batch element `b`'s values on the pattern start in a vector of every
    /// element's (each element's stored positions, element after element).
    pub(crate) fn value_start(&self, b: usize, plan: &AttentionPlan) -> usize {
        if plan.is_per_batch() {
            let inner = (self.count / self.lead[0]).max(1);
            let pi = b / inner;
            let nnz = plan.start(pi + 1) - plan.start(pi);
            inner * plan.start(pi) + (b % inner) * nnz
        } else {
            b * plan.nnz()
        }
    }
}
