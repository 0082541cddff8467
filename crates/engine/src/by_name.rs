//! Ops by name: the registry's dispatcher ([`apply_to`], in the core) with the result
//! conversions of each layout. Code that picks the op at run time (the CLI, the bench,
//! the golden tests, a config-driven pipeline) goes through here.
//!
//! ```
//! use masked::by_name::{apply_dense, OpRequest};
//! use masked::{DynVec, MaskedArray};
//! use ndarray::array;
//!
//! let x = array![[1.0f64, 2.0], [3.0, 4.0]].into_dyn();
//! let a = MaskedArray::unmasked(x.view());
//! let out = apply_dense(&a, &OpRequest::new("sum")?.dims(0).keepdim(true))?;
//! assert_eq!(out.shape, vec![1, 2]);
//! assert_eq!(out.values, DynVec::F64(vec![4.0, 6.0]));
//! # Ok::<(), masked::MaskedError>(())
//! ```

use layout_coo::{CooPattern, MaskedCoo};
use layout_csr::{ColsBuf, CsrIndex, CsrMapped, MaskedCsr};
use layout_dense::{MaskedArrayD, MaskedView};
pub use masked_core::binary::{promote, promote_scalar, BinOp};
use masked_core::binary::{CmpZip, FloatZip, KeepZip, Swapped};
pub use masked_core::registry::{
    apply_to, markdown_table, op_names, visit_grad, Discard, Forward, KeepForward, Kind, Op,
    OpRequest, Options, Sink, OPTIONS,
};
use masked_core::{
    with_dtype, with_dyn_vec, BitMask, DType, DynVec, Element, MaskedError, MaskedOps,
    MaskedReduce, SparseArray,
};
use masked_core::{MaskRule, Splat, Value, Values, ZipKernels};
use ndarray::IxDyn;
use sprs::SpIndex;
use std::borrow::Cow;

/// The result of an op on the dense layout: output shape, values, output mask. `V` is
/// [`DynVec`] for the ops of one operand, [`Values`] (numbers or bools) for the binary
/// ops ([`ZipOutcome`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome<V = DynVec> {
    /// Output shape.
    pub shape: Vec<usize>,
    /// Output values (row-major; 0 / false at invalid positions).
    pub values: V,
    /// Output mask, same shape.
    pub mask: BitMask,
}

/// The result of an op on a sparse layout: exactly the valid outputs are stored. `V` as
/// for [`Outcome`] ([`SparseZipOutcome`] for the binary ops).
#[derive(Debug, Clone, PartialEq)]
pub struct SparseOutcome<V = DynVec> {
    /// Output shape.
    pub shape: Vec<usize>,
    /// Stored (valid) positions as row-major flat indices, increasing.
    pub indices: Vec<usize>,
    /// Values at the stored positions.
    pub values: V,
}

impl<V> SparseOutcome<V> {
    /// The stored positions as coordinates, one vector per dim.
    pub fn coords(&self) -> Vec<Vec<usize>> {
        masked_core::sparse::unravel(&self.shape, &self.indices)
    }
}

/// The result of an op by name: dense in, dense out; sparse in, sparse out.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Shape, values, output mask.
    Dense(Outcome),
    /// Shape, the valid positions (row-major, increasing) and their values.
    Sparse(SparseOutcome),
    /// A CSR map's result as rows: from [`apply`] on a `MaskedCsr` and
    /// [`ArrayRef::apply_rows`](crate::ArrayRef::apply_rows) (`ArrayRef::apply` and
    /// [`ByNameSparse::to_sparse`] turn it into flat positions).
    Csr(CsrOutcome),
    /// A COO map's result on its pattern (its input's, shared): as [`Output::Csr`].
    Coo(CooOutcome),
}

/// A map's result on the COO layout: the pattern of its valid positions (a
/// normalization's or an elementwise op's is its input's: the coordinates shared, not
/// copied) and one value per entry. No flat positions are made.
#[derive(Debug, Clone, PartialEq)]
pub struct CooOutcome {
    /// The stored (valid) positions.
    pub pattern: CooPattern,
    /// Values, one per stored entry.
    pub values: DynVec,
}

impl CooOutcome {
    /// The same result as flat row-major positions (the pattern's, computed once and
    /// kept by it).
    pub fn flat(self) -> SparseOutcome {
        SparseOutcome {
            shape: self.pattern.shape().to_vec(),
            indices: self.pattern.flat(),
            values: self.values,
        }
    }
}

impl Output {
    /// The output shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            Output::Dense(o) => &o.shape,
            Output::Sparse(o) => &o.shape,
            Output::Csr(o) => &o.shape,
            Output::Coo(o) => o.pattern.shape(),
        }
    }
    /// The values (dense: every position, row-major; sparse: the stored ones).
    pub fn values(&self) -> &DynVec {
        match self {
            Output::Dense(o) => &o.values,
            Output::Sparse(o) => &o.values,
            Output::Csr(o) => &o.values,
            Output::Coo(o) => &o.values,
        }
    }
}

/// The column indices of a [`CsrOutcome`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CsrCols {
    /// The input's own column indices: the result stores exactly the input's stored
    /// entries (a map of a matrix masked by its stored entries), in the same order.
    Input,
    /// 32-bit column indices.
    U32(Vec<u32>),
    /// `usize` column indices.
    Usize(Vec<usize>),
}

/// A map's result on the CSR layout as CSR rows: the row pointer, the column indices and
/// the values of exactly the valid positions, with no flat positions computed (what a
/// front that hands CSR matrices on, as the Python package's scipy arrays, takes:
/// [`ArrayRef::apply_rows`](crate::ArrayRef::apply_rows)).
/// `V` as for [`Outcome`] ([`CsrZipOutcome`] for the binary ops).
#[derive(Debug, Clone, PartialEq)]
pub struct CsrOutcome<V = DynVec> {
    /// Output shape, `[rows, cols]`.
    pub shape: Vec<usize>,
    /// Row pointer, `rows + 1` entries.
    pub indptr: Vec<usize>,
    /// Column indices.
    pub cols: CsrCols,
    /// Values, one per stored entry.
    pub values: V,
}

/// A binary op's result on the CSR layout as CSR rows.
pub type CsrZipOutcome = CsrOutcome<Values>;

impl<V> CsrOutcome<V> {
    /// The same result as a [`SparseOutcome`] (flat row-major positions) given `input`,
    /// the matrix it was computed from (whose columns [`CsrCols::Input`] stands for).
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] where [`CsrCols::Input`] stands for a structure that
    /// is not `input`'s (its row pointer differs).
    pub fn flat<T, I: SpIndex, P: SpIndex>(
        self, input: &sprs::CsMatViewI<'_, T, I, P>,
    ) -> Result<SparseOutcome<V>, MaskedError> {
        let (ptr, ncols) = (&self.indptr[..], self.shape[1]);
        let indices = match &self.cols {
            CsrCols::Input => {
                let own = input.indptr();
                let same = own.raw_storage().len() == self.indptr.len()
                    && own
                        .raw_storage()
                        .iter()
                        .zip(&self.indptr)
                        .all(|(a, &b)| a.index() == b);
                if !same {
                    return Err(MaskedError::InvalidData(
                        "a CSR result said to share its input's structure does not".into(),
                    ));
                }
                flat_rows(ptr, ncols, input.indices(), |c| c.index())
            }
            CsrCols::U32(c) => flat_rows(ptr, ncols, c, |c| c as usize),
            CsrCols::Usize(c) => flat_rows(ptr, ncols, c, |c| c),
        };
        Ok(SparseOutcome {
            shape: self.shape,
            indices,
            values: self.values,
        })
    }

    /// `self` with [`CsrCols::Input`] replaced by a copy of `input`'s column indices:
    /// for a result computed from a temporary matrix.
    fn owning<I: CsrIndex>(mut self, input: &[I]) -> Self {
        if self.cols == CsrCols::Input {
            self.cols = cols_of(input.to_vec());
        }
        self
    }
}

/// The flat row-major positions of CSR rows (`indptr`, column indices `cols` read by
/// `col`) in a matrix of `ncols` columns.
fn flat_rows<C: Copy>(
    indptr: &[usize], ncols: usize, cols: &[C], col: impl Fn(C) -> usize,
) -> Vec<usize> {
    let mut out = Vec::with_capacity(indptr[indptr.len() - 1]);
    for (r, w) in indptr.windows(2).enumerate() {
        out.extend(cols[w[0]..w[1]].iter().map(|&c| r * ncols + col(c)));
    }
    out
}

/// Owned column indices, width erased.
fn cols_of<I: CsrIndex>(ix: Vec<I>) -> CsrCols {
    match I::buf(ix) {
        ColsBuf::U32(v) => CsrCols::U32(v),
        ColsBuf::Usize(v) => CsrCols::Usize(v),
        ColsBuf::Borrowed(c) => CsrCols::Usize((0..c.len()).map(|k| c.get(k)).collect()),
    }
}

/// A CSR result as rows, its values erased by `erase` (`Element::into_dyn`, or
/// `Value::into_values` for a binary op's): the structure and values moved, not copied;
/// borrowed indices (the layout's sign that the result stores exactly its input's
/// entries) as [`CsrCols::Input`].
fn csr_rows<O, I: CsrIndex, V>(
    m: CsrMapped<'_, O, I>, erase: impl FnOnce(Vec<O>) -> V,
) -> CsrOutcome<V> {
    let shape = vec![m.rows(), m.cols()];
    let (indptr, indices, values) = m.into_raw_storage();
    CsrOutcome {
        shape,
        indptr,
        cols: match indices {
            Cow::Borrowed(_) => CsrCols::Input,
            Cow::Owned(v) => cols_of(v),
        },
        values: erase(values),
    }
}

/// A layout whose results the dispatcher can hand back in one type: the op table runs
/// on any layout that implements this.
pub trait ByName<T: Element>: MaskedReduce<T> {
    /// What a named op returns on this layout.
    type Out;
    /// Converts a reduction result.
    fn reduced<O: Element>(r: Self::Reduced<O>) -> Self::Out;
    /// Converts a normalization result.
    fn mapped<O: Element>(m: Self::Mapped<O>) -> Self::Out;
    /// Runs `req` on these values cast to `D` (the request's `dtype`): the cast result,
    /// a container of this layout, is the op's input.
    ///
    /// # Errors
    /// The cast's and the op's errors.
    fn apply_cast<D: Element>(&self, req: &OpRequest) -> Result<Self::Out, MaskedError>;
}

/// A sparse layout's results as flat positions ([`SparseOutcome`]), whatever form its
/// [`ByName::Out`] takes (a CSR map's result comes as rows, [`Output::Csr`]).
pub trait ByNameSparse<T: Element>: ByName<T> {
    /// `out`, a result computed from this array, as a [`SparseOutcome`].
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] for a result that is not this array's.
    fn to_sparse(&self, out: Self::Out) -> Result<SparseOutcome, MaskedError>;
}

impl<T: Element> ByNameSparse<T> for MaskedCoo<T> {
    fn to_sparse(&self, out: Output) -> Result<SparseOutcome, MaskedError> {
        match out {
            Output::Sparse(s) => Ok(s),
            Output::Coo(c) => Ok(c.flat()),
            _ => Err(MaskedError::InvalidData(
                "a dense or CSR result from a COO array".into(),
            )),
        }
    }
}

impl<T: Element, I: CsrIndex, Iptr: SpIndex> ByNameSparse<T> for MaskedCsr<'_, T, I, Iptr> {
    fn to_sparse(&self, out: Output) -> Result<SparseOutcome, MaskedError> {
        match out {
            Output::Sparse(s) => Ok(s),
            Output::Csr(r) => r.flat(self.matrix()),
            _ => Err(MaskedError::InvalidData(
                "a dense or COO result from a CSR matrix".into(),
            )),
        }
    }
}

/// [`apply`] on a sparse layout, the result as flat positions.
///
/// # Errors
/// As [`apply`].
pub fn apply_sparse<T: Element, L: ByNameSparse<T>>(
    a: &L, req: &OpRequest,
) -> Result<SparseOutcome, MaskedError> {
    a.to_sparse(apply(a, req)?)
}

/// The sink of [`apply`] and of a benchmark's run: the layout's [`ByName`] conversion
/// ([`Convert::KEEP`]), or the typed result dropped unconverted ([`Convert::DROP`]: what
/// a benchmark times). One sink type for both uses keeps [`apply_to`] (a match over
/// every op of the registry) compiled once per layout and dtype; a second sink type
/// compiled it again.
#[derive(Debug, Clone, Copy)]
pub struct Convert {
    keep: bool,
}

impl Convert {
    /// Converts the result.
    pub const KEEP: Convert = Convert { keep: true };
    /// Drops the result unconverted (`None`).
    pub const DROP: Convert = Convert { keep: false };

    /// `convert(r)`, or `None` with `r` dropped.
    fn apply<R, O>(self, r: R, convert: impl FnOnce(R) -> O) -> Option<O> {
        if self.keep {
            Some(convert(r))
        } else {
            drop(std::hint::black_box(r));
            None
        }
    }
}

impl<T: Element, L: ByName<T>> Sink<T, L> for Convert {
    type Out = Option<L::Out>;
    fn reduced<O: Element>(&self, r: L::Reduced<O>) -> Option<L::Out> {
        self.apply(r, L::reduced)
    }
    fn mapped<O: Element>(&self, m: L::Mapped<O>) -> Option<L::Out> {
        self.apply(m, L::mapped)
    }
}

/// [`apply_to`] with [`Convert::KEEP`]: the request's result in the layout's
/// [`ByName::Out`].
fn converted<T: Element, L: ByName<T>>(a: &L, req: &OpRequest) -> Result<L::Out, MaskedError> {
    Ok(apply_to(a, req, &Convert::KEEP)?.expect("Convert::KEEP converts every result"))
}

impl<T: Element> ByName<T> for MaskedView<'_, T, IxDyn> {
    type Out = Outcome;
    fn reduced<O: Element>(r: MaskedArrayD<O>) -> Outcome {
        dense_outcome(r, O::into_dyn)
    }
    fn mapped<O: Element>(m: MaskedArrayD<O>) -> Outcome {
        Self::reduced(m)
    }
    fn apply_cast<D: Element>(&self, req: &OpRequest) -> Result<Outcome, MaskedError> {
        let c = self.cast::<D>()?;
        converted(&c.view(), req)
    }
}

/// A sparse result's parts: shape, row-major flat positions, values.
type Parts<O> = (Vec<usize>, Vec<usize>, Vec<O>);

/// A sparse result of parts, its values erased by `erase` (`Element::into_dyn`, or
/// `Value::into_values` for a binary op's).
/// A dense result as an outcome: its shape, its values (row-major) erased by `erase`,
/// and its mask (all valid where it has none).
fn dense_outcome<O: Value, V>(r: MaskedArrayD<O>, erase: impl FnOnce(Vec<O>) -> V) -> Outcome<V> {
    let shape = r.shape().to_vec();
    let (vals, mask) = r.into_parts();
    let mask = mask.unwrap_or_else(|| all_valid(&shape));
    let (v, _) = vals.into_raw_vec_and_offset();
    Outcome {
        shape,
        values: erase(v),
        mask,
    }
}

fn sparse_outcome<O, V>(
    (shape, indices, values): Parts<O>, erase: impl FnOnce(Vec<O>) -> V,
) -> SparseOutcome<V> {
    SparseOutcome {
        shape,
        indices,
        values: erase(values),
    }
}

fn sparse_reduced<O: Element>(r: SparseArray<O>) -> SparseOutcome {
    sparse_outcome(r.into_parts(), O::into_dyn)
}

/// A CSR reduction's result (sparse lanes), or a map's as rows.
impl<T: Element, I: CsrIndex, Iptr: SpIndex> ByName<T> for MaskedCsr<'_, T, I, Iptr> {
    type Out = Output;
    fn reduced<O: Element>(r: SparseArray<O>) -> Output {
        Output::Sparse(sparse_reduced(r))
    }
    fn mapped<O: Element>(m: CsrMapped<'_, O, I>) -> Output {
        Output::Csr(csr_rows(m, O::into_dyn))
    }
    fn apply_cast<D: Element>(&self, req: &OpRequest) -> Result<Output, MaskedError> {
        // stored exactly at the valid positions: its own pattern is the mask; a map's
        // result sharing that temporary's structure gets a copy of it
        let c = self.cast::<D>()?;
        Ok(match converted(&MaskedCsr::from_pattern(c.view())?, req)? {
            Output::Csr(r) => Output::Csr(r.owning(c.indices())),
            other => other,
        })
    }
}

/// A COO reduction's result (flat lanes), or a map's on its pattern.
impl<T: Element> ByName<T> for MaskedCoo<T> {
    type Out = Output;
    fn reduced<O: Element>(r: SparseArray<O>) -> Output {
        Output::Sparse(sparse_reduced(r))
    }
    fn mapped<O: Element>(m: MaskedCoo<O>) -> Output {
        let (pattern, values, _) = m.into_parts();
        Output::Coo(CooOutcome {
            pattern,
            values: O::into_dyn(values),
        })
    }
    fn apply_cast<D: Element>(&self, req: &OpRequest) -> Result<Output, MaskedError> {
        // stored exactly at the valid positions, with those as its mask
        converted(&self.cast::<D>()?, req)
    }
}

/// Runs the request on a dense masked array. `nan*` ops AND the mask `!is_nan(x)` into
/// the array's mask first.
///
/// # Errors
/// The op's own errors (bad dims, bad option values).
pub fn apply_dense<T: Element>(
    a: &MaskedView<'_, T, IxDyn>, req: &OpRequest,
) -> Result<Outcome, MaskedError> {
    apply(a, req)
}

/// Runs the request on any layout (dense, CSR) and converts the result to the layout's
/// [`ByName::Out`].
///
/// # Errors
/// The op's own errors (bad dims, bad option values).
pub fn apply<T: Element, L: ByName<T>>(a: &L, req: &OpRequest) -> Result<L::Out, MaskedError> {
    match req.dtype {
        Some(d) if d != T::DTYPE => with_dtype!(d, D => a.apply_cast::<D>(req)),
        _ => converted(a, req),
    }
}

/// The values of `a` cast to `dtype` ([`MaskedOps::cast`] with the dtype picked at run
/// time), in the layout's [`ByName::Out`]: the mask and (sparse) the positions are kept.
///
/// # Errors
/// [`MaskedError::CastOutOfRange`] where a valid value has no `dtype` value.
pub fn cast<T: Element, L: ByName<T>>(a: &L, dtype: DType) -> Result<L::Out, MaskedError> {
    with_dtype!(dtype, D => Ok(L::mapped(a.cast::<D>()?)))
}

/// Values converted to `to` (promotion before a binary op: [`promote`]); the same
/// conversion as [`MaskedOps::cast`] on every value.
///
/// # Errors
/// [`MaskedError::CastOutOfRange`] for a value `to` cannot hold (NaN or an infinity into
/// an integer type, an out-of-range value).
pub fn cast_values(v: &DynVec, to: DType) -> Result<DynVec, MaskedError> {
    fn conv<S: Element, D: Element>(v: &[S]) -> Result<DynVec, MaskedError> {
        v.iter()
            .map(|&x| {
                D::from_scalar(x.to_scalar()).ok_or_else(|| MaskedError::CastOutOfRange {
                    from: S::DTYPE,
                    to: D::DTYPE,
                    value: format!("{x:?}"),
                })
            })
            .collect::<Result<Vec<D>, _>>()
            .map(D::into_dyn)
    }
    if v.dtype() == to {
        return Ok(v.clone());
    }
    with_dyn_vec!(v, v => with_dtype!(to, D => conv::<_, D>(v)))
}

/// The result of a binary op on the dense layout: values are numbers or bools.
pub type ZipOutcome = Outcome<Values>;

/// The result of a binary op on a sparse layout: exactly the valid outputs are stored.
pub type SparseZipOutcome = SparseOutcome<Values>;

/// The result of a binary op by name: values are numbers or (comparisons) bools.
#[derive(Debug, Clone, PartialEq)]
pub enum ZipOutput {
    /// Shape, values, output mask.
    Dense(ZipOutcome),
    /// Shape, the valid positions and their values.
    Sparse(SparseZipOutcome),
    /// A CSR result as rows: only from
    /// [`ArrayRef::binary_rows`](crate::ArrayRef::binary_rows).
    Csr(CsrZipOutcome),
}

/// A layout and operand kind whose binary results the dispatcher hands back in one type.
pub trait ZipByName<T: Element, R: ?Sized>: ZipKernels<T, R> {
    /// What a named binary op returns.
    type Out;
    /// Converts a binary op's result.
    fn zipped<O: Value>(z: Self::Zipped<O>) -> Self::Out;
}

/// The all-valid mask of a result array's shape (whose size fits: the array exists).
fn all_valid(shape: &[usize]) -> BitMask {
    BitMask::filled(shape, true).expect("the shape of an allocated array has a size that fits")
}

fn dense_zipped<O: Value>(r: MaskedArrayD<O>) -> ZipOutcome {
    dense_outcome(r, O::into_values)
}

fn sparse_zipped<O: Value>(r: SparseArray<O>) -> SparseZipOutcome {
    sparse_outcome(r.into_parts(), O::into_values)
}

/// A CSR binary op's result as rows (see [`csr_rows`]).
fn csr_zipped<O: Value, I: CsrIndex>(m: CsrMapped<'_, O, I>) -> ZipOutput {
    ZipOutput::Csr(csr_rows(m, O::into_values))
}

/// A sparse layout's binary results as flat positions ([`SparseZipOutcome`]), whatever
/// form its [`ZipByName::Out`] takes (a CSR result comes as rows, [`ZipOutput::Csr`]).
pub trait ZipByNameSparse<T: Element, R: ?Sized>: ZipByName<T, R> {
    /// `out`, a result computed from this array (the left operand), as a
    /// [`SparseZipOutcome`].
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] for a result that is not this array's.
    fn zip_to_sparse(&self, out: Self::Out) -> Result<SparseZipOutcome, MaskedError>;
}

/// `out` of the CSR matrix `a` as flat positions.
pub(crate) fn csr_zip_flat<T: Element, I: CsrIndex, P: SpIndex>(
    a: &MaskedCsr<'_, T, I, P>, out: ZipOutput,
) -> Result<SparseZipOutcome, MaskedError> {
    match out {
        ZipOutput::Sparse(s) => Ok(s),
        ZipOutput::Csr(r) => r.flat(a.matrix()),
        ZipOutput::Dense(_) => Err(MaskedError::InvalidData(
            "a dense result from a CSR matrix".into(),
        )),
    }
}

/// A COO result as it is.
fn as_is<L: ?Sized>(_: &L, out: SparseZipOutcome) -> Result<SparseZipOutcome, MaskedError> {
    Ok(out)
}

/// `impl ZipByName` for a layout and operand kind with one conversion, and for a sparse
/// layout `impl ZipByNameSparse` with its flattening.
macro_rules! zip_by_name {
    (@sparse [$($g:tt)*] $l:ty, $r:ty => $out:ty) => {};
    (@sparse [$($g:tt)*] $l:ty, $r:ty => $out:ty, $flat:ident) => {
        impl<$($g)*> ZipByNameSparse<T, $r> for $l {
            fn zip_to_sparse(&self, out: $out) -> Result<SparseZipOutcome, MaskedError> {
                $flat(self, out)
            }
        }
    };
    ($([$($g:tt)*] $l:ty, $r:ty => $out:ty, $conv:ident $(, $flat:ident)?;)*) => {$(
        impl<$($g)*> ZipByName<T, $r> for $l {
            type Out = $out;
            fn zipped<O: Value>(z: Self::Zipped<O>) -> $out {
                $conv(z)
            }
        }
        zip_by_name!(@sparse [$($g)*] $l, $r => $out $(, $flat)?);
    )*};
}

zip_by_name! {
    ['a, 'b, T: Element] MaskedView<'a, T, IxDyn>, MaskedView<'b, T, IxDyn> => ZipOutcome, dense_zipped;
    ['a, T: Element] MaskedView<'a, T, IxDyn>, Splat<T> => ZipOutcome, dense_zipped;
    ['a, 'b, T: Element, I: CsrIndex, P: SpIndex, P2: SpIndex] MaskedCsr<'a, T, I, P>, MaskedCsr<'b, T, I, P2> => ZipOutput, csr_zipped, csr_zip_flat;
    ['a, T: Element, I: CsrIndex, P: SpIndex] MaskedCsr<'a, T, I, P>, Splat<T> => ZipOutput, csr_zipped, csr_zip_flat;
    ['a, 'b, T: Element, I: CsrIndex, P: SpIndex] MaskedCsr<'a, T, I, P>, MaskedView<'b, T, IxDyn> => ZipOutput, csr_zipped, csr_zip_flat;
    [T: Element] MaskedCoo<T>, MaskedCoo<T> => SparseZipOutcome, sparse_zipped, as_is;
    [T: Element] MaskedCoo<T>, Splat<T> => SparseZipOutcome, sparse_zipped, as_is;
    ['b, T: Element] MaskedCoo<T>, MaskedView<'b, T, IxDyn> => SparseZipOutcome, sparse_zipped, as_is;
}

/// [`apply_binary`] with a sparse left operand, the result as flat positions.
///
/// # Errors
/// As [`apply_binary`].
pub fn apply_binary_sparse<T: Element, R: ?Sized, L: ZipByNameSparse<T, R>>(
    a: &L, b: &R, op: BinOp, rule: MaskRule, swapped: bool,
) -> Result<SparseZipOutcome, MaskedError> {
    a.zip_to_sparse(apply_binary(a, b, op, rule, swapped)?)
}

/// Runs the binary op `op` on `a` and `b` (`op(b, a)` when `swapped`: a scalar or dense
/// operand on the left of a sparse one) under `rule`. Both operands have one type here:
/// promote first ([`promote`], [`promote_scalar`], then [`cast`]).
///
/// ```
/// use masked::by_name::{apply_binary, BinOp};
/// use masked::{MaskRule, MaskedArray, Splat, Values, DynVec};
/// use masked::binary::KeepBin;
/// use ndarray::array;
///
/// let x = array![1.0f64, 2.0, 3.0].into_dyn();
/// let a = MaskedArray::from_bool_mask(x.view(), array![true, false, true].view())?;
/// // 1 - x (the scalar on the left), valid where x is
/// let out = apply_binary(&a, &Splat(1.0), BinOp::Keep(KeepBin::Sub), MaskRule::Strict, true)?;
/// assert_eq!(out.values, Values::Num(DynVec::F64(vec![0.0, 0.0, -2.0])));
/// assert_eq!(out.mask.to_vec(), vec![true, false, true]);
/// # Ok::<(), masked::MaskedError>(())
/// ```
///
/// # Errors
/// As [`ZipKernels::zip_elements`].
pub fn apply_binary<T: Element, R: ?Sized, L: ZipByName<T, R>>(
    a: &L, b: &R, op: BinOp, rule: MaskRule, swapped: bool,
) -> Result<L::Out, MaskedError> {
    // one kernel per family: the operand order is a run-time flag
    Ok(match op {
        BinOp::Keep(k) => L::zipped(a.zip_elements(b, &Swapped(KeepZip(k), swapped), rule)?),
        BinOp::Float(f) => L::zipped(a.zip_elements(b, &Swapped(FloatZip(f), swapped), rule)?),
        BinOp::Cmp(c) => L::zipped(a.zip_elements(b, &Swapped(CmpZip(c), swapped), rule)?),
    })
}
