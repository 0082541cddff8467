//! # layout-coo
//!
//! The n-D COO layout of the `masked` engine: coordinates + values of any rank (batch ×
//! sequence × feature, ...), accepted in any order and stored canonically (row-major
//! sorted; a repeated position is an error). Unspecified elements have value 0, and
//! sparse in means sparse out: reductions and normalizations return a [`SparseArray`]
//! storing exactly their valid outputs.
//!
//! The mask of a [`MaskedCoo`] ([`CooMask`]) is the input's own stored pattern (the
//! fast path), a separate [`CooPattern`] (a valid position not stored takes part as 0,
//! a stored value outside the mask is ignored), or none (every element valid).
//!
//! Every op of [`MaskedOps`] runs over any set of dims with keepdim either way, and
//! the normalizations along any one dim. A reduction groups the entries by their kept
//! coordinates (no data moves when the reduced dims are the trailing ones; otherwise an
//! O(nnz) counting sort by group, or an O(nnz log nnz) sort when groups far outnumber
//! entries) and runs the sparse lane engine's kernels (`masked_sparse`, which the CSR
//! layout drives too) on the groups: the ops are not written again here.
//!
//! Conversions: dense ↔ COO (any rank) with `From`/`TryFrom`, CSR parts ↔ COO with
//! [`MaskedCoo::from_csr`] / [`MaskedCoo::to_csr`], dense → CSR with [`dense_to_csr`];
//! masks are carried along. (A typed `MaskedCsr` converts with `masked::csr_to_coo` and
//! `masked::csr_to_dense`: this crate does not import the CSR layout.)
//!
//! ```
//! use masked::MaskedCoo;
//! use masked::MaskedOps;
//!
//! // a [2, 2, 3] tensor with 4 stored entries, given unsorted
//! let coords = [vec![1, 0, 0, 1], vec![1, 0, 1, 1], vec![2, 0, 2, 0]];
//! let a = MaskedCoo::from_pattern(&[2, 2, 3], &coords, vec![4.0f64, 1.0, 2.0, 3.0]).unwrap();
//! let s = a.sum([0, 2], false).unwrap();         // over dims (0, 2): shape [2]
//! assert_eq!(s.shape(), &[2]);
//! assert_eq!(s.values(), &[1.0, 9.0]);
//! let m = a.amax(1, true).unwrap();              // keepdim: shape [2, 1, 3]
//! assert_eq!(m.indices(), &[0, 2, 3, 5]);        // only lanes with a valid element
//! assert_eq!(m.values(), &[1.0, 2.0, 3.0, 4.0]);
//! let p = a.softmax(2).unwrap();                 // a MaskedCoo, the input's positions
//! assert_eq!(p.pattern().flat(), &[0, 5, 9, 11]);
//! assert!((p.values()[2] - 1.0 / (1.0 + 1f64.exp())).abs() < 1e-15);
//! ```
#![deny(missing_docs)]

mod algebra;
mod compiled;
mod convert;
mod fused;
mod grad_zip;
mod group;
mod lanes;
mod pattern;
mod zip;

pub use algebra::select;
pub use convert::dense_to_csr;
pub use fused::CooZipView;
pub use grad_zip::CooGradients;
pub use lanes::CooLanes;
pub use masked_core::SparseArray;
pub use pattern::CooPattern;

// named by the docs' links (a plain import: links of items inlined into the facade
// resolve against this crate as compiled, where a `cfg(doc)` import does not exist)
#[allow(unused_imports)]
use masked_core::MaskedOps;
use masked_core::{Element, LaneGrad, MaskedError, MaskedReduce, Result, ShapeLike};

/// The mask of a [`MaskedCoo`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CooMask {
    /// The input's own stored positions ("mask from indices"): every stored entry is
    /// valid, explicit zeros included.
    Stored,
    /// A separate pattern of the input's shape.
    Pattern(CooPattern),
    /// No mask: every element valid, unstored ones as 0.
    All,
}

/// The resolved mask: a separate pattern carries the input's values at its positions.
#[derive(Debug, Clone)]
enum Resolved<T> {
    Stored,
    Own { pattern: CooPattern, values: Vec<T> },
    All,
}

/// An n-D COO array with a sparse mask. See the [crate docs](crate).
///
/// Serialised (serde) as `{"pattern", "values", "mask"}` ([`CooPattern`], the values in
/// its sorted order, each through `masked::Num`: in JSON a NaN is `"NaN"`, an
/// infinity `"inf"` or `"-inf"`; a [`CooMask`]); deserialising re-validates the pattern and goes
/// through [`MaskedCoo::from_parts`] (one value per stored position, a mask pattern of
/// the same shape).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(
    try_from = "CooArrayRepr<T>",
    into = "CooArrayRepr<T>",
    bound(serialize = "T: Element", deserialize = "T: Element")
)]
pub struct MaskedCoo<T> {
    pattern: CooPattern,
    values: Vec<T>,
    mask: Resolved<T>,
}

impl<T: Element> MaskedCoo<T> {
    /// A masked COO array from a shape, one coordinate array per dim (any order), the
    /// values of the entries, and the mask.
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] for mismatched lengths,
    /// [`MaskedError::IndexOutOfRange`] / [`MaskedError::DuplicateIndex`] naming the
    /// entry, [`MaskedError::ShapeMismatch`] for a mask pattern of another shape.
    pub fn try_new<C: AsRef<[usize]>>(
        shape: impl ShapeLike, coords: &[C], values: Vec<T>, mask: CooMask,
    ) -> Result<Self> {
        // the coordinates give the entry count (a 0-d array has no coordinate arrays)
        let nnz = coords.first().map_or(values.len(), |c| c.as_ref().len());
        if values.len() != nnz && coords.iter().all(|c| c.as_ref().len() == nnz) {
            return Err(MaskedError::ValueCount {
                expected: nnz,
                got: values.len(),
            });
        }
        let (pattern, perm) = CooPattern::canonical(&shape.to_shape(), coords, nnz)?;
        let values = match perm {
            Some(p) => masked_kernels::par::gather(&values, &p),
            None => values,
        };
        Self::from_parts(pattern, values, mask)
    }

    /// A masked COO array over a canonical pattern and its values (in the pattern's
    /// order).
    ///
    /// # Errors
    /// A value count other than the pattern's, a mask pattern of another shape.
    pub fn from_parts(pattern: CooPattern, values: Vec<T>, mask: CooMask) -> Result<Self> {
        if values.len() != pattern.nnz() {
            return Err(MaskedError::ValueCount {
                expected: pattern.nnz(),
                got: values.len(),
            });
        }
        let mask = match mask {
            CooMask::Stored => Resolved::Stored,
            CooMask::All => Resolved::All,
            CooMask::Pattern(m) => {
                if m.shape() != pattern.shape() {
                    return Err(MaskedError::ShapeMismatch {
                        what: "COO mask pattern vs input".into(),
                        left: m.shape().to_vec(),
                        right: pattern.shape().to_vec(),
                    });
                }
                let values = resolve(&pattern, &values, &m);
                Resolved::Own { pattern: m, values }
            }
        };
        Ok(MaskedCoo {
            pattern,
            values,
            mask,
        })
    }

    /// Masks the entries with their own positions ("mask from indices"): every stored
    /// entry is valid, explicit zeros included.
    ///
    /// # Errors
    /// As [`MaskedCoo::try_new`].
    pub fn from_pattern<C: AsRef<[usize]>>(
        shape: impl ShapeLike, coords: &[C], values: Vec<T>,
    ) -> Result<Self> {
        Self::try_new(shape, coords, values, CooMask::Stored)
    }

    /// No mask: every element valid, unstored ones with value 0.
    ///
    /// # Errors
    /// As [`MaskedCoo::try_new`].
    pub fn unmasked<C: AsRef<[usize]>>(
        shape: impl ShapeLike, coords: &[C], values: Vec<T>,
    ) -> Result<Self> {
        Self::try_new(shape, coords, values, CooMask::All)
    }

    /// A separate mask pattern: a valid position not stored takes part as 0, a stored
    /// value outside the mask is ignored.
    ///
    /// # Errors
    /// As [`MaskedCoo::try_new`].
    pub fn with_mask<C: AsRef<[usize]>>(
        shape: impl ShapeLike, coords: &[C], values: Vec<T>, mask: CooPattern,
    ) -> Result<Self> {
        Self::try_new(shape, coords, values, CooMask::Pattern(mask))
    }

    /// Logical shape.
    pub fn shape(&self) -> &[usize] {
        self.pattern.shape()
    }
    /// The stored positions (canonical order).
    pub fn pattern(&self) -> &CooPattern {
        &self.pattern
    }
    /// The stored values, in the pattern's order.
    pub fn values(&self) -> &[T] {
        &self.values
    }
    /// Number of stored entries.
    pub fn nnz(&self) -> usize {
        self.pattern.nnz()
    }
    /// The mask.
    pub fn mask(&self) -> CooMask {
        match &self.mask {
            Resolved::Stored => CooMask::Stored,
            Resolved::Own { pattern, .. } => CooMask::Pattern(pattern.clone()),
            Resolved::All => CooMask::All,
        }
    }

    /// The parts: the stored pattern, its values, the mask ([`MaskedCoo::from_parts`]
    /// takes them back).
    pub fn into_parts(self) -> (CooPattern, Vec<T>, CooMask) {
        let mask = self.mask();
        (self.pattern, self.values, mask)
    }

    /// The lanes the kernels run on: the valid positions (a separate mask's positions
    /// with the input's values resolved onto them) and whether unstored positions are
    /// valid zeros.
    pub fn lanes(&self) -> CooLanes<'_, T> {
        match &self.mask {
            Resolved::Own { pattern, values } => CooLanes {
                pattern,
                values,
                valid: None,
                fill: false,
            },
            m => CooLanes {
                pattern: &self.pattern,
                values: &self.values,
                valid: None,
                fill: matches!(m, Resolved::All),
            },
        }
    }
}

/// The input's values at the positions of `mask` (0 where not stored): a merge of the
/// two sorted position lists.
fn resolve<T: Element>(pattern: &CooPattern, values: &[T], mask: &CooPattern) -> Vec<T> {
    let (have, want) = (pattern.flat_slice(), mask.flat_slice());
    let mut out = vec![T::default(); want.len()];
    let mut j = 0;
    for (o, w) in out.iter_mut().zip(want) {
        while j < have.len() && have[j] < *w {
            j += 1;
        }
        if j < have.len() && have[j] == *w {
            *o = values[j];
        }
    }
    out
}

impl<T: Element> MaskedCoo<T> {
    /// A result of the lanes as this layout's: the same type (`lane_methods!`).
    fn as_is<O>(&self, out: Result<MaskedCoo<O>>) -> Result<MaskedCoo<O>> {
        out
    }
}

impl<T: Element> MaskedReduce<T> for MaskedCoo<T> {
    masked_core::reduce_types!(<O> SparseArray<O>, MaskedCoo<O>, <'a> CooLanes<'a, T>);

    masked_core::lane_methods!(lanes, as_is);

    fn grad_mapped<G: LaneGrad>(
        &self, grad: &G, dim: isize, g: &MaskedCoo<T::Real>, saved: Option<&MaskedCoo<T::Real>>,
    ) -> Result<MaskedCoo<T::Real>> {
        self.lanes().grad_mapped(grad, dim, g, saved)
    }
}

/// A sparse result (a reduction, a normalization, an elementwise op) as a masked COO
/// array stored exactly at its valid positions, with those positions as its mask: the
/// input of the next op.
///
/// ```
/// use masked::prelude::*;
/// let x = MaskedCoo::from_pattern([2, 3], &[vec![0, 0, 1], vec![0, 2, 1]], vec![1.0f64, 3.0, 5.0])?;
/// let s = x.softmax(1)?; // a MaskedCoo again
/// let total: MaskedCoo<f64> = s.sum(1, false)?.into();
/// assert!(total.values().iter().all(|v| (v - 1.0).abs() < 1e-12));
/// # Ok::<(), MaskedError>(())
/// ```
impl<O: Element> From<SparseArray<O>> for MaskedCoo<O> {
    fn from(a: SparseArray<O>) -> Self {
        let (shape, flat, values) = a.into_parts();
        MaskedCoo {
            pattern: CooPattern::from_sorted_flat(&shape, &flat),
            values,
            mask: Resolved::Stored,
        }
    }
}

/// The serialised form of a [`MaskedCoo`].
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(bound(serialize = "T: Element", deserialize = "T: Element"))]
struct CooArrayRepr<T> {
    pattern: CooPattern,
    #[serde(with = "masked_core::wire::nums")]
    values: Vec<T>,
    mask: CooMask,
}

impl<T: Element> TryFrom<CooArrayRepr<T>> for MaskedCoo<T> {
    type Error = MaskedError;
    fn try_from(r: CooArrayRepr<T>) -> Result<Self> {
        MaskedCoo::from_parts(r.pattern, r.values, r.mask)
    }
}

impl<T: Element> From<MaskedCoo<T>> for CooArrayRepr<T> {
    fn from(a: MaskedCoo<T>) -> Self {
        let mask = a.mask();
        CooArrayRepr {
            pattern: a.pattern,
            values: a.values,
            mask,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use masked_core::{Dims, MaskedOps};

    /// A statistic along a dim whose grouping moves entries (median) builds the
    /// pattern's plan once; later calls (and ops on results sharing the pattern) reuse
    /// it, with the same values as a grouping done afresh. The lane maps stream the
    /// entries in stored order (`map_scattered`) and build none.
    #[test]
    fn the_grouping_plan_is_built_once_and_reused() {
        use masked_core::lane::MedianMode;
        let coords = [
            vec![0, 0, 1, 1, 1],
            vec![0, 2, 0, 1, 2],
            vec![1, 0, 1, 0, 1],
        ];
        let vals = vec![1.0f64, -2.0, 3.0, 0.5, 4.0];
        let x = MaskedCoo::from_pattern([2, 3, 2], &coords, vals.clone()).unwrap();
        let fresh = MaskedCoo::from_pattern([2, 3, 2], &coords, vals).unwrap();
        let memo = |m: &MaskedCoo<f64>| format!("{:?}", m.pattern().memo);
        let built = |dims: &str, across: &str| {
            format!(
                "plans built along dims {dims}, flat positions built: false, last-dim lanes \
                 built: false, lane ids built along dims {across}"
            )
        };
        assert_eq!(memo(&x), built("[]", "[]"));
        let m = x.median(0, false, MedianMode::Avg).unwrap();
        assert_eq!(memo(&x), built("[0]", "[]"));
        // maps build no plan but their lanes' ids (kept too), and their results share
        // the pattern, plans and ids included
        let a = x.softmax(0).unwrap();
        x.cumsum(0).unwrap();
        assert_eq!(memo(&x), built("[0]", "[0]"));
        assert_eq!(memo(&a), built("[0]", "[0]"));
        let again = a.median(0, false, MedianMode::Avg).unwrap();
        assert_eq!(memo(&x), built("[0]", "[0]"));
        let m_fresh = fresh.median(0, false, MedianMode::Avg).unwrap();
        assert_eq!(m.values(), m_fresh.values());
        let a_fresh = fresh.softmax(0).unwrap();
        assert_eq!(
            again.values(),
            a_fresh.median(0, false, MedianMode::Avg).unwrap().values()
        );
        x.median(1, false, MedianMode::Avg).unwrap();
        assert_eq!(memo(&x), built("[0, 1]", "[0]"));
        // the last dim groups in stored order: no plan
        x.median(2, false, MedianMode::Avg).unwrap();
        assert_eq!(memo(&x), built("[0, 1]", "[0]"));
        let y = MaskedCoo::from_pattern([2, 3, 2], &coords, vec![1.0f64; 5]).unwrap();
        y.softmax(0).unwrap();
        y.normalize(1, 2.0, 1e-12).unwrap();
        y.cumprod(1).unwrap();
        assert_eq!(memo(&y), built("[]", "[0, 1]"));
    }

    /// The VJPs along a dim with a plan run through it (and along the last dim through
    /// the runs of stored entries) and give the general path's gradients (the same lanes
    /// ordered from flat positions), stored on the pattern. Softmax's across the entries
    /// takes its scattered form on both sides, the lanes named from the coordinates on
    /// one and from the flat positions on the other.
    #[test]
    fn planned_vjps_equal_the_general_path() {
        use masked_core::grad::{SoftmaxGrad, SumGrad};
        use masked_core::lane::SoftmaxKind;
        let coords = [
            vec![0, 0, 1, 1, 1, 2],
            vec![0, 2, 0, 1, 2, 2],
            vec![1, 0, 1, 0, 1, 1],
        ];
        let vals = vec![1.0f64, -2.0, 3.0, 0.5, 4.0, -1.5];
        let x = MaskedCoo::from_pattern([3, 3, 2], &coords, vals).unwrap();
        // the general path: every validity bit set, so no plan is used
        let mut general = x.lanes();
        general.valid = Some(std::borrow::Cow::Owned(vec![u64::MAX; 1]));
        let sm = SoftmaxGrad {
            kind: SoftmaxKind::Softmax,
        };
        for dim in [0isize, 1, 2] {
            let y = x.softmax(dim).unwrap();
            let g =
                MaskedCoo::from_pattern([3, 3, 2], &coords, vec![0.3, -1.0, 2.0, 0.7, -0.2, 1.1])
                    .unwrap();
            let planned = x.lanes().grad_mapped(&sm, dim, &g, Some(&y)).unwrap();
            let want = general.grad_mapped(&sm, dim, &g, Some(&y)).unwrap();
            assert!(std::ptr::eq(
                planned.pattern().coords(0),
                x.pattern().coords(0)
            ));
            assert_eq!(planned.pattern(), want.pattern());
            for (a, b) in planned.values().iter().zip(want.values()) {
                assert!((a - b).abs() < 1e-15, "{a} {b}");
            }
            // a reduction's VJP: the upstream per kept position
            let s = x.sum(dim, false).unwrap();
            let up = SparseArray::new(
                s.shape().to_vec(),
                s.indices().to_vec(),
                (0..s.nnz()).map(|i| i as f64 + 0.5).collect(),
            )
            .unwrap();
            let dims = Dims::from(dim);
            let planned = x
                .lanes()
                .grad_reduced(&SumGrad, &dims, false, &up, None)
                .unwrap();
            let want = general
                .grad_reduced(&SumGrad, &dims, false, &up, None)
                .unwrap();
            assert_eq!(planned.values(), want.values());
        }
    }

    /// A map over every stored entry (mask = the stored pattern) returns a result on the
    /// input's pattern itself: the coordinates are shared (the same memory), and the
    /// values equal a result built from flat positions.
    #[test]
    fn a_map_of_every_stored_entry_shares_the_pattern() {
        let coords = [vec![0, 0, 1, 1], vec![0, 2, 1, 2], vec![1, 0, 1, 0]];
        let x = MaskedCoo::from_pattern([2, 3, 2], &coords, vec![1.0f64, -2.0, 3.0, 0.5]).unwrap();
        for dim in [0, 1, 2] {
            let s = x.softmax(dim).unwrap();
            for d in 0..3 {
                assert!(std::ptr::eq(s.pattern().coords(d), x.pattern().coords(d)));
            }
            let op = masked_core::lane::Softmax {
                kind: masked_core::lane::SoftmaxKind::Softmax,
            };
            // the same map through the general path (grouped, flat positions, a
            // pattern rebuilt from them): every validity bit set
            let mut all_valid = x.lanes();
            all_valid.valid = Some(std::borrow::Cow::Owned(vec![u64::MAX; 1]));
            let rebuilt = all_valid.map_lanes(&op, dim).unwrap();
            assert!(!std::ptr::eq(
                rebuilt.pattern().coords(0),
                x.pattern().coords(0)
            ));
            assert_eq!(s.values(), rebuilt.values());
            assert_eq!(s.pattern(), rebuilt.pattern());
        }
        // a separate mask pattern: the result is stored at the mask's positions
        let mask = CooPattern::from_lengths([2, 3, 2], &[2, 3]).unwrap();
        let y = MaskedCoo::with_mask(
            [2, 3, 2],
            &coords,
            vec![1.0f64, -2.0, 3.0, 0.5],
            mask.clone(),
        )
        .unwrap();
        assert_eq!(y.softmax(2).unwrap().pattern(), &mask);
    }
}
