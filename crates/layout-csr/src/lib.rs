//! # layout-csr
//!
//! The CSR layout of the `masked` engine, over `sprs` matrices (owned or views, with
//! `u32` or `usize` column indices: `u32` halves the index bytes a kernel reads; the
//! kernels see either as [`Cols`] and are compiled once for both). Unspecified
//! (unstored) elements have value 0, and sparse in means sparse out: a reduction returns
//! a [`SparseArray`] storing exactly the lanes that have a valid element, a
//! normalization returns a CSR matrix storing exactly the valid elements.
//!
//! The mask of a [`MaskedCsr`] is one of:
//! - the input's own stored pattern ([`MaskedCsr::from_pattern`], "mask from indices",
//!   the fast path: every stored entry valid, explicit zeros included);
//! - a separate [`Pattern`] ([`MaskedCsr::with_mask`]): a valid position not stored in
//!   the input takes part as 0, a stored value outside the mask is ignored;
//! - none ([`MaskedCsr::unmasked`]): every element valid, unstored ones as 0. A reduction
//!   then stores every lane and a normalization every element (dense-sized, by the
//!   rules); medians count the unstored zeros without writing them out.
//!
//! Every op of [`MaskedOps`] runs along dim 1 (rows), dim 0 (columns) or both, with
//! keepdim either way, on all threads, with results that do not depend on the thread
//! count.
//!
//! ```
//! use masked::{MaskedCsr, Pattern};
//! use masked::MaskedOps;
//! use sprs::CsMat;
//!
//! // [[-3, ., -1], [., ., .], [., 5, 0]] with an explicit stored zero
//! let m = CsMat::new((3, 3), vec![0, 2, 2, 4], vec![0, 2, 1, 2], vec![-3.0f64, -1.0, 5.0, 0.0]);
//! let a = MaskedCsr::from_pattern(m.view()).unwrap();
//! let s = a.amax(1, false).unwrap();
//! assert_eq!(s.indices(), &[0, 2]);         // row 1 has no valid element: not stored
//! assert_eq!(s.values(), &[-1.0, 5.0]);
//! let c = a.sum(0, true).unwrap();           // column sums, shape [1, 3]
//! assert_eq!(c.shape(), &[1, 3]);
//! assert_eq!(c.values(), &[-3.0, 5.0, -1.0]);
//!
//! // a separate mask: row 0 all valid, so its unstored middle takes part as 0
//! let mask = Pattern::from_coords((3, 3), &[vec![0, 0, 0, 2], vec![0, 1, 2, 1]]).unwrap();
//! let b = MaskedCsr::with_mask(m.view(), mask).unwrap();
//! assert_eq!(b.amax(1, false).unwrap().values(), &[0.0, 5.0]);
//! ```
#![deny(missing_docs)]

mod algebra;
mod grad_zip;
mod views;

pub use algebra::select;
pub use grad_zip::CsrGradients;
pub use masked_core::SparseArray;
// the sparse lane engine's types, which this layout's results and masks are made of
pub use masked_sparse::{
    Cols, ColsBuf, CsrIndex, CsrLanes, CsrMapped, CsrMask, CsrZipView, DynEntries, EntryValues,
    FusedLanes, LanesMapped, Pattern, PatternI,
};

// named by the docs' links (a plain import: links of items inlined into the facade
// resolve against this crate as compiled, where a `cfg(doc)` import does not exist)
#[allow(unused_imports)]
use masked_core::MaskedOps;
use masked_core::{
    Element, LaneGrad, MaskRule, MaskedError, MaskedReduce, Result, Splat, Value, ZipKernels,
    ZipMap,
};
use masked_kernels::par;
use masked_sparse::{csr_parts, DenseOperand, EntryOther as Other};
use sprs::{CsMatBase, CsMatViewI, SpIndex};
use std::borrow::Cow;

/// What a [`MaskedCsr`] uses as its mask.
#[derive(Debug, Clone)]
enum Mask<T, I: SpIndex> {
    /// The input's stored pattern.
    Stored,
    /// A separate pattern, with the input's values resolved onto it (0 where unstored).
    Own {
        pattern: PatternI<I>,
        values: Vec<T>,
    },
    /// Every element valid.
    All,
}

/// A CSR matrix with a sparse mask. See the [crate docs](crate) for the three kinds of
/// mask.
#[derive(Debug, Clone)]
pub struct MaskedCsr<'a, T, I: CsrIndex = usize, Iptr: SpIndex = I> {
    mat: CsMatViewI<'a, T, I, Iptr>,
    indptr: Vec<usize>,
    mask: Mask<T, I>,
}

/// A CSR matrix a [`MaskedCsr`] can borrow: a `sprs` view, or a reference to any CSR
/// matrix (an owned `CsMat`, a [`CsrMapped`] result, another view).
pub trait IntoCsrView<'a, T, I: SpIndex, Iptr: SpIndex> {
    /// The matrix as a view.
    fn into_csr_view(self) -> CsMatViewI<'a, T, I, Iptr>;
}

impl<'a, T, I: SpIndex, Iptr: SpIndex> IntoCsrView<'a, T, I, Iptr> for CsMatViewI<'a, T, I, Iptr> {
    fn into_csr_view(self) -> CsMatViewI<'a, T, I, Iptr> {
        self
    }
}

impl<'a, T, I, Iptr, IptrS, IndS, DataS> IntoCsrView<'a, T, I, Iptr>
    for &'a CsMatBase<T, I, IptrS, IndS, DataS, Iptr>
where
    I: SpIndex,
    Iptr: SpIndex,
    IptrS: std::ops::Deref<Target = [Iptr]>,
    IndS: std::ops::Deref<Target = [I]>,
    DataS: std::ops::Deref<Target = [T]>,
{
    fn into_csr_view(self) -> CsMatViewI<'a, T, I, Iptr> {
        self.view()
    }
}

/// Turns a CSR result ([`CsrMapped`], whose column indices may be borrowed from the
/// input) into a plain owned `sprs` matrix: values and row pointers move, indices are
/// copied only when borrowed. In the prelude.
///
/// ```
/// use masked::prelude::*;
/// let m = sprs::CsMat::new((2, 3), vec![0, 2, 3], vec![0, 2, 1], vec![1.0f32, 2.0, 3.0]);
/// let sm: sprs::CsMat<f32> = MaskedCsr::from_pattern(&m)?.softmax(1)?.into_csmat();
/// // a result is the next op's input, by reference
/// let total = MaskedCsr::from_pattern(&sm)?.sum(1, false)?;
/// assert!((total.values()[0] - 1.0).abs() < 1e-6);
/// # Ok::<(), MaskedError>(())
/// ```
pub trait IntoCsMat<O, I: SpIndex> {
    /// The owned matrix.
    fn into_csmat(self) -> sprs::CsMatI<O, I, usize>;
}

impl<O, I: SpIndex> IntoCsMat<O, I> for CsrMapped<'_, O, I> {
    fn into_csmat(self) -> sprs::CsMatI<O, I, usize> {
        let shape = self.shape();
        let (indptr, indices, values) = self.into_raw_storage();
        // SAFETY: the parts of a CSR matrix that was valid, unchanged.
        unsafe {
            CsMatBase::new_unchecked(
                sprs::CompressedStorage::CSR,
                shape,
                indptr,
                indices.into_owned(),
                values,
            )
        }
    }
}

/// `filled` for a CSR normalization's result ([`CsrMapped`], a `sprs` matrix whose stored
/// entries are exactly the valid outputs), as every other result has it. In the prelude.
///
/// ```
/// use masked::prelude::*;
/// let m = sprs::CsMat::new((2, 3), vec![0, 2, 2], vec![0, 2], vec![1.0f64, 1.0]);
/// let p = MaskedCsr::from_pattern(&m)?.softmax(1)?;
/// // row 1 stores nothing: fully masked, so `value` everywhere
/// assert_eq!(p.filled(-1.0)?, ndarray::array![[0.5, -1.0, 0.5], [-1.0, -1.0, -1.0]]);
/// # Ok::<(), MaskedError>(())
/// ```
pub trait CsrFilled<O> {
    /// An explicit densification: a dense matrix with the valid (stored) values and
    /// `value` at every other position.
    ///
    /// # Errors
    /// [`MaskedError::TooLarge`] when the dense matrix cannot be allocated (checked before
    /// allocating), [`MaskedError::InvalidData`] when its size overflows.
    fn filled(&self, value: O) -> Result<ndarray::Array2<O>>;
}

impl<O: Element, I: SpIndex> CsrFilled<O> for CsrMapped<'_, O, I> {
    fn filled(&self, value: O) -> Result<ndarray::Array2<O>> {
        let (ip, ix, d) = (self.indptr(), self.indices(), self.data());
        dense_with(
            self.shape(),
            value,
            (0..self.rows())
                .flat_map(|i| ip.outer_inds_sz(i).map(move |k| (i, ix[k].index(), d[k]))),
        )
    }
}

/// A dense `r x c` matrix of `fill` with `entries` (row, column, value) written over it:
/// the size is checked before allocating ([`MaskedError::TooLarge`] when memory cannot
/// hold it, [`MaskedError::InvalidData`] when it overflows). Every explicit CSR
/// densification goes through here.
pub(crate) fn dense_with<T: Copy>(
    (r, c): (usize, usize), fill: T, entries: impl Iterator<Item = (usize, usize, T)>,
) -> Result<ndarray::Array2<T>> {
    let n = r.checked_mul(c).ok_or_else(|| {
        MaskedError::InvalidData(format!("a dense {r} x {c} matrix: size overflows"))
    })?;
    let mut out = masked_core::try_vec(n, || format!("a dense {r} x {c} matrix"))?;
    out.resize(n, fill);
    for (i, j, v) in entries {
        out[i * c + j] = v;
    }
    ndarray::Array2::from_shape_vec((r, c), out)
        .map_err(|e| MaskedError::InvalidData(e.to_string()))
}

impl<'a, T: Element, I: CsrIndex, Iptr: SpIndex> MaskedCsr<'a, T, I, Iptr> {
    fn build(mat: CsMatViewI<'a, T, I, Iptr>, mask: Mask<T, I>) -> Result<Self> {
        if !mat.is_csr() {
            return Err(MaskedError::InvalidData(
                "expected a CSR matrix, got CSC storage".into(),
            ));
        }
        let raw = mat.indptr();
        let raw = raw.raw_storage();
        let base = raw[0].index();
        let indptr = raw.iter().map(|p| p.index() - base).collect();
        Ok(MaskedCsr { mat, indptr, mask })
    }

    /// Masks `mat` with any kind of mask: [`MaskedCsr::from_pattern`],
    /// [`MaskedCsr::with_mask`] or [`MaskedCsr::unmasked`].
    ///
    /// # Errors
    /// As those.
    pub fn new(mat: impl IntoCsrView<'a, T, I, Iptr>, mask: CsrMask<I>) -> Result<Self> {
        match mask {
            CsrMask::Stored => Self::from_pattern(mat),
            CsrMask::Pattern(p) => Self::with_mask(mat, p),
            CsrMask::All => Self::unmasked(mat),
        }
    }

    /// The kind of mask (a separate pattern is cloned).
    pub fn mask_kind(&self) -> CsrMask<I> {
        match &self.mask {
            Mask::Stored => CsrMask::Stored,
            Mask::Own { pattern, .. } => CsrMask::Pattern(pattern.clone()),
            Mask::All => CsrMask::All,
        }
    }

    /// Masks `mat` with its own stored pattern ("mask from indices"): every stored entry
    /// is valid, explicit zeros included; no index merging.
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] when `mat` is stored as CSC.
    pub fn from_pattern(mat: impl IntoCsrView<'a, T, I, Iptr>) -> Result<Self> {
        Self::build(mat.into_csr_view(), Mask::Stored)
    }

    /// No mask: every element is valid, unstored ones with value 0.
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] when `mat` is stored as CSC.
    pub fn unmasked(mat: impl IntoCsrView<'a, T, I, Iptr>) -> Result<Self> {
        Self::build(mat.into_csr_view(), Mask::All)
    }

    /// Masks `mat` with a separate pattern: a valid position not stored in `mat` takes
    /// part as 0, a stored value outside `mask` is ignored. The values are resolved onto
    /// the mask once (a merge of the sorted indices of every row, in parallel).
    ///
    /// # Errors
    /// CSC storage, or a mask of another shape ([`MaskedError::ShapeMismatch`]).
    pub fn with_mask(mat: impl IntoCsrView<'a, T, I, Iptr>, mask: PatternI<I>) -> Result<Self> {
        let mat = mat.into_csr_view();
        if mask.shape() != mat.shape() {
            return Err(MaskedError::ShapeMismatch {
                what: "CSR mask pattern vs input".into(),
                left: vec![mask.shape().0, mask.shape().1],
                right: vec![mat.rows(), mat.cols()],
            });
        }
        let mut me = Self::build(mat, Mask::Stored)?;
        let values = me.resolve(&mask);
        me.mask = Mask::Own {
            pattern: mask,
            values,
        };
        Ok(me)
    }

    /// The input's values at the mask's positions (0 where unstored).
    fn resolve(&self, mask: &PatternI<I>) -> Vec<T> {
        let mut values = vec![T::default(); mask.nnz()];
        let (idx, data) = (self.mat.indices(), self.mat.data());
        // each row's slots (a pattern's row pointer starts at 0)
        par::parts_mut(&mut values, mask.indptr(), |r, out| {
            let e = self.indptr[r]..self.indptr[r + 1];
            let (cols, vals) = (&idx[e.clone()], &data[e]);
            let mut j = 0;
            for (o, m) in out.iter_mut().zip(mask.row(r)) {
                while j < cols.len() && cols[j] < *m {
                    j += 1;
                }
                if j < cols.len() && cols[j] == *m {
                    *o = vals[j];
                }
            }
        });
        values
    }

    /// The matrix.
    pub fn matrix(&self) -> &CsMatViewI<'a, T, I, Iptr> {
        &self.mat
    }

    /// The separate mask pattern, if one was given.
    pub fn mask_pattern(&self) -> Option<&PatternI<I>> {
        match &self.mask {
            Mask::Own { pattern, .. } => Some(pattern),
            _ => None,
        }
    }

    /// `values` (one per valid entry, row-major) on this matrix's valid structure: the
    /// form a normalization's output takes, and so its VJP's upstream gradient.
    ///
    /// # Errors
    /// [`MaskedError::ValueCount`] for another count of values;
    /// [`MaskedError::Unsupported`] without a mask (every position valid: a structure
    /// the engine never stores).
    pub fn on_valid<R>(&self, values: Vec<R>) -> Result<CsrMapped<'_, R, I>> {
        let (ptr, idx) = self.lanes().valid_structure()?;
        if values.len() != idx.cols().len() {
            return Err(MaskedError::ValueCount {
                expected: idx.cols().len(),
                got: values.len(),
            });
        }
        LanesMapped {
            shape: self.mat.shape(),
            indptr: ptr,
            indices: idx,
            values,
        }
        .typed()
    }

    /// The VJP of a map (a normalization along one dim or an elementwise op) given the
    /// upstream gradient `g` and the saved forward output as values alone, one per
    /// valid entry in storage order (the order [`MaskedCsr::on_valid`] takes), borrowed
    /// from the caller: nothing is copied in, and the gradient comes on this matrix's
    /// valid structure, as [`MaskedOps::vjp_map_saved`] gives it.
    ///
    /// ```
    /// use masked::by_name::OpRequest;
    /// use masked::csr::{CsrMask, MaskedCsr};
    /// let m = sprs::CsMat::new((1, 3), vec![0, 2], vec![0, 2], vec![0.0f64, 0.0]);
    /// let x = MaskedCsr::new(&m, CsrMask::Stored)?;
    /// let req = OpRequest::new("softmax")?.dims(1);
    /// let dx = x.vjp_map_values(&req, Some(&[0.5, 0.5]), &[1.0, 0.0])?;
    /// // y (g - y·g) = [0.5 (1 - 0.5), 0.5 (0 - 0.5)]
    /// assert_eq!(dx.data(), &[0.25, -0.25]);
    /// # Ok::<(), masked::MaskedError>(())
    /// ```
    ///
    /// # Errors
    /// As [`MaskedOps::vjp_map`]; [`MaskedError::ValueCount`] for `g` or `saved` of
    /// another count than the valid entries.
    pub fn vjp_map_values(
        &self, req: &masked_core::OpRequest, saved: Option<&[T::Real]>, g: &[T::Real],
    ) -> Result<CsrMapped<'a, T::Real, I>> {
        struct V<'s, T: Element> {
            lanes: CsrLanes<'s, T>,
            dim: isize,
            g: &'s [T::Real],
            saved: Option<&'s [T::Real]>,
        }
        impl<'s, T: Element> masked_core::GradVisitor for V<'s, T> {
            type Out = LanesMapped<'s, T::Real>;
            fn visit<G: LaneGrad>(self, grad: &G) -> Result<Self::Out> {
                self.lanes
                    .grad_mapped_values(grad, self.dim, self.g, self.saved)
            }
        }
        let dim = masked_core::check_map_grad::<T>(req)?;
        let out = masked_core::visit_grad(
            req,
            V {
                lanes: self.lanes(),
                dim,
                g,
                saved,
            },
        )?;
        self.owned_by_input(out)
    }

    /// The lanes the kernels run on (borrowing this matrix and mask).
    pub fn lanes(&self) -> CsrLanes<'_, T> {
        let shape = self.mat.shape();
        let (indptr, indices, values, fill) = match &self.mask {
            Mask::Own { pattern, values } => {
                (pattern.indptr(), pattern.indices(), &values[..], false)
            }
            m => (
                &self.indptr[..],
                self.mat.indices(),
                self.mat.data(),
                matches!(m, Mask::All),
            ),
        };
        // SAFETY: a validated structure: a `Pattern`'s (checked when built) or a sprs
        // matrix's (sorted, in-range indices; `indptr` rebased to 0 and of `nrows + 1`
        // entries), with one value per entry (the mask's resolved values or the
        // matrix's data) and no validity bits.
        unsafe { CsrLanes::new_unchecked(shape, indptr, I::cols(indices), values, None, fill) }
    }
}

impl<'m, T: Element, I: CsrIndex, Iptr: SpIndex> MaskedReduce<T> for MaskedCsr<'m, T, I, Iptr> {
    masked_core::reduce_types!(<O> SparseArray<O>, CsrMapped<'m, O, I>, <'a> CsrLanes<'a, T>);

    masked_core::lane_methods!(lanes, owned);

    fn grad_mapped<G: LaneGrad>(
        &self, grad: &G, dim: isize, g: &CsrMapped<'m, T::Real, I>,
        saved: Option<&CsrMapped<'m, T::Real, I>>,
    ) -> Result<CsrMapped<'m, T::Real, I>> {
        let out =
            self.lanes()
                .grad_mapped_parts(grad, dim, csr_parts(g), saved.map(|y| csr_parts(y)))?;
        self.owned_by_input(out)
    }
}

impl<'m, T: Element, I: CsrIndex, Iptr: SpIndex> MaskedCsr<'m, T, I, Iptr> {
    /// A map of this value's lanes as a typed result tied to the input's lifetime:
    /// indices borrowed from the lanes are the input's own (kept borrowed) or the mask
    /// pattern's, which this value owns (copied).
    fn owned<O>(&self, out: Result<LanesMapped<'_, O>>) -> Result<CsrMapped<'m, O, I>> {
        self.owned_by_input(out?)
    }

    /// [`MaskedCsr::owned`] of a result that did not fail.
    fn owned_by_input<O>(&self, out: LanesMapped<'_, O>) -> Result<CsrMapped<'m, O, I>> {
        let LanesMapped {
            indptr,
            indices,
            values,
            ..
        } = out;
        let indices: Cow<'m, [I]> = match (indices, &self.mask) {
            (ColsBuf::Borrowed(_), Mask::Own { pattern, .. }) => {
                // the lanes' own indices are the mask pattern's, which this value owns
                Cow::Owned(pattern.indices().to_vec())
            }
            // ... or the input's, which live as long as the input
            (ColsBuf::Borrowed(_), _) => Cow::Borrowed(self.mat.into_raw_storage().1),
            (owned, _) => Cow::Owned(I::typed(owned)?.into_owned()),
        };
        if indptr.len() != self.mat.rows() + 1
            || indices.len() != values.len()
            || indptr.last() != Some(&indices.len())
        {
            return Err(MaskedError::InvalidData(
                "inconsistent CSR result structure".into(),
            ));
        }
        // SAFETY: a kernel's output: a subset, in order, of validated rows (this input's
        // structure or its mask pattern, or a merge of two such): sorted, unique, in
        // range; borrowed indices are the very slice the lanes used; the row pointer was
        // just checked for its length and ends.
        Ok(unsafe {
            CsMatBase::new_unchecked(
                sprs::CompressedStorage::CSR,
                self.mat.shape(),
                indptr,
                indices,
                values,
            )
        })
    }

    /// A zip's rows as this input's result (see [`MaskedCsr::owned_by_input`]).
    fn zipped<O>(&self, rows: (Vec<usize>, ColsBuf<'_>, Vec<O>)) -> Result<CsrMapped<'m, O, I>> {
        let (indptr, indices, values) = rows;
        self.owned_by_input(LanesMapped {
            shape: self.mat.shape(),
            indptr,
            indices,
            values,
        })
    }
    /// The binary op `z(self, rhs)` on two matrices of one structure, its values written
    /// into `out`, a caller's buffer of one value per entry (no fresh pages for a large
    /// result, and nothing allocated in a loop over a fixed pattern). The result's
    /// structure is this matrix's valid entries, all kept, which the caller already
    /// holds: its stored entries, or its mask pattern.
    ///
    /// # Errors
    /// As [`ZipKernels::zip_elements`]; [`MaskedError::InvalidData`] when the two
    /// structures differ, when an entry is not valid under `rule` (the result would drop
    /// it: use `zip_elements`), or for a buffer of another length.
    pub fn zip_into<Iptr2: SpIndex, Z: ZipMap<T>>(
        &self, rhs: &MaskedCsr<'_, T, I, Iptr2>, z: &Z, rule: MaskRule, out: &mut [Z::Output],
    ) -> Result<()> {
        let (a, b) = (self.lanes(), rhs.lanes());
        if a.fill() && !z.keeps_zero(T::ZERO, T::ZERO) {
            return Err(MaskedError::densifying(z.name()));
        }
        // two mask-free matrices of one structure under a zero-keeping op: the stored
        // entries
        let a = a.with_fill(false);
        let b = b.with_fill(false);
        if !a.same_structure(&b) || self.lanes().fill() != rhs.lanes().fill() {
            return Err(MaskedError::InvalidData(format!(
                "{}: the two matrices' structures differ (or have no mask): the result \
                 does not keep this structure, use zip_elements",
                z.name()
            )));
        }
        a.zip_entries_into(Other::Same(b.values(), b.valid()), z, rule, out)
    }

    /// The binary op `z(self, s)` with a scalar, its values written into `out` as
    /// [`MaskedCsr::zip_into`] (a scalar on the left is the `Swapped` op).
    ///
    /// # Errors
    /// As [`MaskedCsr::zip_into`].
    pub fn zip_scalar_into<Z: ZipMap<T>>(&self, s: T, z: &Z, out: &mut [Z::Output]) -> Result<()> {
        let l = self.lanes();
        if l.fill() && !z.keeps_zero(T::ZERO, s) {
            return Err(MaskedError::densifying(z.name()));
        }
        let l = l.with_fill(false);
        l.zip_entries_into(Other::Scalar(s), z, MaskRule::Strict, out)
    }
}

/// With a scalar: the result stores this matrix's valid positions. Without a mask, the
/// stored entries are kept when `z(0, s) == 0`, and any other op is an error.
impl<'m, T: Element, I: CsrIndex, Iptr: SpIndex> ZipKernels<T, Splat<T>>
    for MaskedCsr<'m, T, I, Iptr>
{
    type Zipped<O: Value> = CsrMapped<'m, O, I>;
    fn zip_elements<Z: ZipMap<T>>(
        &self, s: &Splat<T>, z: &Z, rule: MaskRule,
    ) -> Result<CsrMapped<'m, Z::Output, I>> {
        let s = &s.0;
        let l = self.lanes();
        if l.fill() && !z.keeps_zero(T::ZERO, *s) {
            return Err(MaskedError::densifying(z.name()));
        }
        let l = l.with_fill(false);
        self.zipped(l.zip_entries(Other::Scalar(*s), z, rule)?)
    }
}

/// With another CSR matrix of the same shape: values only on a shared structure (the
/// result shares it too), else one merge pass per row.
impl<'m, 'b, T: Element, I: CsrIndex, Iptr: SpIndex, Iptr2: SpIndex>
    ZipKernels<T, MaskedCsr<'b, T, I, Iptr2>> for MaskedCsr<'m, T, I, Iptr>
{
    type Zipped<O: Value> = CsrMapped<'m, O, I>;
    fn zip_elements<Z: ZipMap<T>>(
        &self, rhs: &MaskedCsr<'b, T, I, Iptr2>, z: &Z, rule: MaskRule,
    ) -> Result<CsrMapped<'m, Z::Output, I>> {
        if self.mat.shape() != rhs.mat.shape() {
            let (a, b) = (self.mat.shape(), rhs.mat.shape());
            return Err(MaskedError::ShapeMismatch {
                what: format!("{}: sparse operands must have one shape", z.name()),
                left: vec![a.0, a.1],
                right: vec![b.0, b.1],
            });
        }
        let (a, b) = (self.lanes(), rhs.lanes());
        if a.same_structure(&b) && !a.fill() {
            self.zipped(a.zip_entries(Other::Same(b.values(), b.valid()), z, rule)?)
        } else {
            self.zipped(a.zip_merge::<I, _>(&b, z, rule)?)
        }
    }
}

/// With a dense array broadcastable to this matrix's shape: read only at the valid
/// entries (under `and`, those where the dense operand is valid too). A mask-free CSR
/// matrix is an error: every position would be valid and stored.
impl<'m, T, I, Iptr, S, D> ZipKernels<T, layout_dense::MaskedArray<S, D>>
    for MaskedCsr<'m, T, I, Iptr>
where
    T: Element,
    I: CsrIndex,
    Iptr: SpIndex,
    S: ndarray::Data<Elem = T>,
    D: ndarray::Dimension,
{
    type Zipped<O: Value> = CsrMapped<'m, O, I>;
    fn zip_elements<Z: ZipMap<T>>(
        &self, rhs: &layout_dense::MaskedArray<S, D>, z: &Z, rule: MaskRule,
    ) -> Result<CsrMapped<'m, Z::Output, I>> {
        let l = self.lanes();
        if l.fill() {
            return Err(MaskedError::densifying(z.name()));
        }
        let (r, c) = self.mat.shape();
        let d = DenseOperand::new(z.name(), rhs.dense_parts(), &[r, c])?;
        self.zipped(l.zip_entries(Other::Dense(&d), z, rule)?)
    }
}

/// A 2-D reduction result (`keepdim`: `[nrows, 1]` or `[1, ncols]`) as a CSR matrix
/// storing exactly its valid outputs.
///
/// # Errors
/// [`MaskedError::InvalidData`] when `a` is not 2-D.
///
/// ```
/// use masked::{to_csmat, MaskedCsr};
/// use masked::MaskedOps;
/// use sprs::CsMat;
/// let m = CsMat::new((3, 2), vec![0, 1, 1, 3], vec![1, 0, 1], vec![2.0f64, 3.0, 4.0]);
/// let s = MaskedCsr::from_pattern(m.view()).unwrap().sum(1, true).unwrap();
/// let c = to_csmat(&s).unwrap();              // a 3 x 1 CSR: row 1 is not stored
/// assert_eq!(c.shape(), (3, 1));
/// assert_eq!(c.indptr().raw_storage(), &[0, 1, 1, 2]);
/// assert_eq!(c.data(), &[2.0, 7.0]);
/// ```
pub fn to_csmat<O: Clone>(a: &SparseArray<O>) -> Result<sprs::CsMat<O>> {
    let &[nrows, ncols] = a.shape() else {
        return Err(MaskedError::InvalidData(format!(
            "a {}-d result is not a matrix",
            a.shape().len()
        )));
    };
    let mut indptr = vec![0usize; nrows + 1];
    let mut indices = Vec::with_capacity(a.nnz());
    for &flat in a.indices() {
        indptr[flat / ncols.max(1) + 1] += 1;
        indices.push(flat % ncols.max(1));
    }
    for r in 0..nrows {
        indptr[r + 1] += indptr[r];
    }
    sprs::CsMat::try_new((nrows, ncols), indptr, indices, a.values().to_vec())
        .map_err(|(_, _, _, e)| MaskedError::InvalidData(e.to_string()))
}

/// A 1-D reduction result (no `keepdim`) as a sparse vector storing exactly its valid
/// outputs.
///
/// # Errors
/// [`MaskedError::InvalidData`] when `a` is not 1-D.
pub fn to_csvec<O: Clone>(a: &SparseArray<O>) -> Result<sprs::CsVec<O>> {
    let &[n] = a.shape() else {
        return Err(MaskedError::InvalidData(format!(
            "a {}-d result is not a vector",
            a.shape().len()
        )));
    };
    sprs::CsVec::try_new(n, a.indices().to_vec(), a.values().to_vec())
        .map_err(|(_, _, e)| MaskedError::InvalidData(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use masked_core::{Dims, MaskedOps};
    use proptest::prelude::*;
    use sprs::CsMat;

    proptest! {
        /// Every row fold equals the fold over the row's stored values (the dense oracle
        /// restricted to the pattern), on matrices with empty rows and explicit zeros.
        #[test]
        fn row_folds_equal_folds_over_stored_values(
            rows in prop::collection::vec(prop::collection::btree_map(0usize..40, -5i32..5, 0..12), 0..30)
        ) {
            let mut indptr = vec![0usize];
            let (mut ind, mut dat) = (Vec::new(), Vec::new());
            for r in &rows {
                for (&c, &v) in r {
                    ind.push(c);
                    dat.push(v as f64);
                }
                indptr.push(ind.len());
            }
            let m = CsMat::new((rows.len(), 40), indptr, ind, dat);
            let a = MaskedCsr::from_pattern(m.view()).unwrap();
            let sum = a.sum(1, false).unwrap();
            let amax = a.amax(-1, false).unwrap();
            let arg = a.argmax(1, true).unwrap();
            let cnt = a.count(1, false).unwrap();
            let nonempty: Vec<usize> = (0..rows.len()).filter(|&r| !rows[r].is_empty()).collect();
            prop_assert_eq!(sum.indices(), &nonempty[..]);
            prop_assert_eq!(arg.shape(), &[rows.len(), 1]);
            prop_assert_eq!(cnt.indices().len(), rows.len());
            for (k, &r) in nonempty.iter().enumerate() {
                let vals: Vec<(usize, f64)> = rows[r].iter().map(|(&c, &v)| (c, v as f64)).collect();
                prop_assert_eq!(sum.values()[k], vals.iter().map(|p| p.1).sum::<f64>());
                let mx = vals.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
                prop_assert_eq!(amax.values()[k], mx);
                let first = vals.iter().find(|p| p.1 == mx).unwrap().0 as i64;
                prop_assert_eq!(arg.values()[k], first);
            }
            for (r, row) in rows.iter().enumerate() {
                prop_assert_eq!(cnt.values()[r], row.len() as i64);
            }
        }
    }

    #[test]
    fn row_maps_and_stats_keep_the_pattern() {
        use masked_core::MedianMode;
        let m = CsMat::new(
            (4, 3),
            vec![0, 2, 2, 3, 5],
            vec![0, 2, 1, 0, 1],
            vec![1.0f64, 3.0, 5.0, 2.0, 2.0],
        );
        let v = m.slice_outer(1..4);
        let a = MaskedCsr::from_pattern(v.view()).unwrap();
        let sm = a.softmax(1).unwrap();
        assert_eq!(sm.indptr().raw_storage(), &[0, 0, 1, 3]);
        assert_eq!(sm.indices(), &[1, 0, 1]);
        assert_eq!(sm.data(), &[1.0, 0.5, 0.5]);
        let cs = a.cumsum(-1).unwrap();
        assert_eq!(cs.data(), &[5.0, 2.0, 4.0]);
        let med = a.median(1, false, MedianMode::Avg).unwrap();
        assert_eq!(med.indices(), &[1, 2]);
        assert_eq!(med.values(), &[5.0, 2.0]);
        // along dim 0: column 0 holds one valid element, column 1 holds 5 and 2
        let s0 = a.softmax(0).unwrap();
        assert_eq!(s0.indices(), &[1, 0, 1]);
        let p5 = 1.0 / (1.0 + (-3.0f64).exp());
        assert!((s0.data()[0] - p5).abs() < 1e-15);
        assert_eq!(s0.data()[1], 1.0);
        assert!((s0.data()[2] - (1.0 - p5)).abs() < 1e-15);
        assert_eq!(a.nansum(1, false).unwrap().values(), &[5.0, 4.0]);
        let empty = CsMat::<f32>::zero((0, 3));
        let e = MaskedCsr::from_pattern(empty.view()).unwrap();
        assert_eq!(e.softmax(1).unwrap().nnz(), 0);
        assert!(e.sum(1, false).unwrap().indices().is_empty());
    }

    #[test]
    fn normalizations_share_the_input_pattern_when_every_entry_is_valid() {
        let m = CsMat::new(
            (3, 4),
            vec![0, 2, 2, 5],
            vec![0, 3, 0, 1, 2],
            vec![1.0f64, f64::NAN, 2.0, 3.0, 4.0],
        );
        let same = |out: &CsrMapped<'_, f64, usize>| out.indices().as_ptr() == m.indices().as_ptr();
        // mask = the input's pattern: the output borrows the input's column indices
        let a = MaskedCsr::from_pattern(m.view()).unwrap();
        for dim in [0, 1] {
            let out = a.softmax(dim).unwrap();
            assert!(same(&out), "dim {dim}");
            assert_eq!(out.indices(), m.indices());
        }
        // the nan-family's dropped NaN, a separate mask, no mask: owned, own pattern
        let nan = a.without_nans().unwrap().cumsum(1).unwrap();
        assert!(!nan.indices.is_borrowed());
        let nan = nan.typed::<usize>().unwrap();
        assert!(!same(&nan));
        assert_eq!(nan.indices(), &[0, 0, 1, 2]);
        assert_eq!(nan.data(), &[1.0, 2.0, 5.0, 9.0]);
        let p = PatternI::from_coords((3, 4), &[vec![0, 2], vec![3, 1]]).unwrap();
        let b = MaskedCsr::with_mask(m.view(), p).unwrap();
        let out = b.cumsum(1).unwrap();
        assert!(!same(&out));
        assert_eq!(out.indices(), &[3, 1]);
        assert!(out.data()[0].is_nan());
        assert_eq!(out.data()[1], 3.0);
        let u = MaskedCsr::unmasked(m.view()).unwrap().cumsum(1).unwrap();
        assert_eq!(u.nnz(), 12);
        let owned: sprs::CsMatI<f64, usize> = out.to_owned();
        assert_eq!(owned.indices(), &[3, 1]);
    }

    #[test]
    fn results_convert_to_sprs() {
        let m = CsMat::new((2, 3), vec![0, 2, 2], vec![0, 2], vec![1.0f32, 2.0]);
        let a = MaskedCsr::from_pattern(m.view()).unwrap();
        let v = to_csvec(&a.amax(0, false).unwrap()).unwrap();
        assert_eq!(v.dim(), 3);
        assert_eq!(v.indices(), &[0, 2]);
        assert_eq!(v.data(), &[1.0, 2.0]);
        let c = to_csmat(&a.amax(0, true).unwrap()).unwrap();
        assert_eq!(c.shape(), (1, 3));
        assert_eq!(c.indices(), &[0, 2]);
        assert!(to_csmat(&a.sum(1, false).unwrap()).is_err());
        assert!(to_csvec(&a.sum(Dims::all(), false).unwrap()).is_err());
    }

    #[test]
    fn views_with_offset_indptr_and_bad_input() {
        let m = CsMat::new(
            (3, 3),
            vec![0, 1, 2, 4],
            vec![0, 1, 0, 2],
            vec![1.0f32, 2.0, 3.0, 4.0],
        );
        // rows 1..3: a view whose indptr does not start at 0
        let v = m.slice_outer(1..3);
        let a = MaskedCsr::from_pattern(v.view()).unwrap();
        assert_eq!(a.sum(1, false).unwrap().values(), &[2.0, 7.0]);
        assert_eq!(a.sum(0, false).unwrap().values(), &[3.0, 2.0, 4.0]);
        assert_eq!(a.sum(Dims::all(), false).unwrap().values(), &[9.0]);
        assert!(matches!(
            a.sum(2, false),
            Err(MaskedError::DimOutOfRange { .. })
        ));
        let csc = m.to_csc();
        assert!(MaskedCsr::from_pattern(csc.view()).is_err());
    }
}
