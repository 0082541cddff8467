//! Fused elementwise-then-reduce: [`ZipView`], a lazy `z(a, b)` (or a lazy unary map)
//! that every reduction and normalization of the registry consumes without
//! materialising the elementwise result. The view implements [`MaskedReduce`], so
//! `a.zip_view(&b, &mul, rule)?.sum(1, false)` is the ordinary `sum`, run one of two
//! ways:
//!
//! - **Folds whose lanes are contiguous runs** (the reduced dims are the innermost
//!   ones: `sum(a * b, dim=-1)`, or all dims): the array's own run kernel, with the
//!   tasks, pieces and merge order of the materialised array, so the result is the
//!   same bit for bit (`kernels::Lazy`). Where the op has a pair path (sum and mean of
//!   `add`, `sub`, `mul` of two float operands of one shape: a dot product, a weighted
//!   sum) the fold's own kernel reads the two operands and computes the values in
//!   registers (`Fold::push_pair_run`). Otherwise each lane's values are computed a
//!   piece of at most `masked::core::RUN_BLOCK` elements at a time into an
//!   L1-resident scratch buffer and pushed into the lane's state at once (the Fold
//!   law of block-aligned pieces).
//! - **Everything else** (a fold over dim 0 with kept inner dims, the lane statistics,
//!   the normalizations): block by block, a block of whole rows along dim 0 (about
//!   [`BLOCK`] elements, L2-resident) computed into a scratch buffer and handed to the
//!   ordinary kernel; blocks run in parallel and, where dim 0 is reduced, their fold
//!   states merge in block order (results do not depend on the thread count).
//!
//! Where a kernel needs more than one block at a time (a median or quantile over dim 0,
//! a normalization along dim 0, the nan-family's NaN mask), the view materialises the
//! result once and runs the ordinary kernel on it.

use crate::array::{finish_fold, MaskedArray, MaskedArrayD, MaskedView};
use crate::compiled;
use crate::kernels::{lanes_are_runs, Fill, Lazy};
use crate::zip::{operand, out_mask, zip_values, Side};
use masked_core::binary::{broadcast_shapes, failed_at, KeepOperands};
use masked_core::binary::{unravel, DenseParts as Operand};
use masked_core::{
    wrap_dim, BitMask, Bits, Dims, Element, Fold, LaneMap, LaneStat, MaskRule, MaskedError,
    MaskedReduce, ReducePlan, Result, ZipMap,
};
use masked_kernels::fresh_vec;
use masked_kernels::par;
use ndarray::{ArrayD, Data, Dimension, IxDyn};
use std::borrow::Cow;
use std::sync::OnceLock;

pub use masked_core::binary::Unary;

/// Elements of one block of rows (a multiple of 64; at least one row).
pub const BLOCK: usize = 1 << 16;

/// The second operand of a view.
enum Rhs<'a, T: Clone> {
    Array(Operand<'a, T>),
    Scalar(T),
}

/// The operands and op of a view: its values, computed on demand.
struct Zipped<'a, T: Clone, Z> {
    a: Operand<'a, T>,
    b: Rhs<'a, T>,
    z: Z,
}

/// A view's values, computed on demand, with the op's type erased.
trait Produce<O>: Sync {
    /// Computes elements `start .. start + out.len()` of an output of `shape` into
    /// `out` where `bits` are set (or at every element); the flat position of the first
    /// element that could not be computed, if any.
    fn produce(
        &self, shape: &[usize], bits: Option<Bits<'_>>, start: usize, out: &mut [O],
    ) -> Option<usize>;

    /// The error for the element at flat position `i` that could not be computed.
    fn failure(&self, shape: &[usize], i: usize) -> MaskedError;

    /// The op and the two operands' values, where the values are a keep-family op of
    /// two operands of the output `shape` ([`Fill::pair`]).
    fn pair(&self, shape: &[usize]) -> Option<KeepOperands<'_, O>>;
}

impl<T: Element, Z: ZipMap<T>> Produce<Z::Output> for Zipped<'_, T, Z> {
    fn produce(
        &self, shape: &[usize], bits: Option<Bits<'_>>, start: usize, out: &mut [Z::Output],
    ) -> Option<usize> {
        let a = Side::Array(&self.a);
        let b = match &self.b {
            Rhs::Array(o) => Side::Array(o),
            Rhs::Scalar(s) => Side::Scalar(*s),
        };
        zip_values(&self.z, shape, &a, &b, bits, out, start)
    }

    fn failure(&self, shape: &[usize], i: usize) -> MaskedError {
        failed_at(&self.z, unravel(shape, i))
    }

    fn pair(&self, shape: &[usize]) -> Option<KeepOperands<'_, Z::Output>> {
        match &self.b {
            Rhs::Array(b) if self.a.shape == shape && b.shape == shape => {
                self.z.keep_operands(&self.a.values, &b.values)
            }
            _ => None,
        }
    }
}

/// A lazy `z(a, b)` over dense operands (NumPy broadcasting, a mask rule), or a lazy
/// unary map: a masked container of `O` values (`O` the op's output type,
/// [`ZipMap::Output`]) that are computed only when a kernel reads them. Every reduction
/// and normalization runs on it, a block of rows at a time (see docs/semantics.md,
/// "Fused elementwise-then-reduce").
///
/// The operands and the op are held type-erased (one call per block of [`BLOCK`]
/// elements): one view type per value type, so the reduction kernels are compiled once
/// per value type rather than once per op.
pub struct ZipView<'a, O: Element> {
    src: Box<dyn Produce<O> + 'a>,
    shape: Vec<usize>,
    mask: Option<Cow<'a, BitMask>>,
    cache: OnceLock<MaskedArrayD<O>>,
}

impl<T: Element, S: Data<Elem = T>, D: Dimension> MaskedArray<S, D> {
    /// The lazy `z(self, rhs)` under `rule`: the output mask is computed now (a bit per
    /// element), the values only when a reduction or normalization reads them.
    ///
    /// # Errors
    /// Shapes that do not broadcast, masks that differ under [`MaskRule::Strict`].
    pub fn zip_view<'s, S2: Data<Elem = T>, D2: Dimension, Z: ZipMap<T> + 's>(
        &'s self, rhs: &'s MaskedArray<S2, D2>, z: Z, rule: MaskRule,
    ) -> Result<ZipView<'s, Z::Output>>
    where
        Z::Output: Element,
    {
        let a = operand(self);
        let b = operand(rhs);
        let shape = broadcast_shapes(z.name(), a.shape, b.shape)?;
        let mask = out_mask(z.name(), &shape, a.mask, b.mask, rule)?;
        Ok(ZipView {
            src: Box::new(Zipped {
                a,
                b: Rhs::Array(b),
                z,
            }),
            shape,
            mask,
            cache: OnceLock::new(),
        })
    }

    /// The lazy `z(self, s)` with a scalar (a scalar on the left is the
    /// `Swapped` op (`masked::binary::Swapped`)).
    pub fn zip_scalar_view<'s, Z: ZipMap<T> + 's>(&'s self, s: T, z: Z) -> ZipView<'s, Z::Output>
    where
        Z::Output: Element,
    {
        let a = operand(self);
        let shape = a.shape.to_vec();
        let mask = a.mask.map(Cow::Borrowed);
        ZipView {
            src: Box::new(Zipped {
                a,
                b: Rhs::Scalar(s),
                z,
            }),
            shape,
            mask,
            cache: OnceLock::new(),
        }
    }

    /// The lazy unary map `m(self)` (`abs`, `exp`, `FloatMap(FloatFn::Exp(Exp))` ...).
    pub fn map_view<'s, M: LaneMap<T> + Copy + Send + Sync + 's>(
        &'s self, m: M,
    ) -> ZipView<'s, M::Output>
    where
        M::Output: Element,
    {
        self.zip_scalar_view(T::ZERO, Unary(m))
    }
}

impl<'a, O: Element> ZipView<'a, O> {
    /// The output shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The output mask (`None`: every position valid).
    pub fn mask(&self) -> Option<&BitMask> {
        self.mask.as_deref()
    }

    /// Whether the values are computed and held (by a kernel that needed them whole,
    /// or at construction for a merged structure); until then nothing of the size of
    /// the elementwise result is stored.
    pub fn is_materialized(&self) -> bool {
        self.cache.get().is_some()
    }

    fn bits(&self) -> Option<Bits<'_>> {
        self.mask.as_deref().map(BitMask::bits)
    }

    /// Computes elements `start .. start + out.len()` into `out`.
    fn produce(&self, start: usize, out: &mut [O]) -> Result<()> {
        match self.src.produce(&self.shape, self.bits(), start, out) {
            Some(i) => Err(self.src.failure(&self.shape, i)),
            None => Ok(()),
        }
    }

    /// The whole result, computed once (the fallback of kernels that need more than one
    /// block at a time).
    pub fn materialize(&self) -> Result<&MaskedArrayD<O>> {
        if let Some(m) = self.cache.get() {
            return Ok(m);
        }
        let n: usize = self.shape.iter().product();
        let mut out = fresh_vec(n);
        self.produce(0, &mut out)?;
        let _ = self.cache.set(self.with_mask(out)?);
        Ok(self.cache.get().expect("just set"))
    }

    /// `values` (row-major, this view's shape) with this view's mask.
    fn with_mask<P: Element>(&self, values: Vec<P>) -> Result<MaskedArrayD<P>> {
        let data = ArrayD::from_shape_vec(IxDyn(&self.shape), values)
            .map_err(|e| MaskedError::InvalidData(e.to_string()))?;
        let mask = self
            .mask
            .as_deref()
            .cloned()
            .map_or_else(|| BitMask::filled(&self.shape, true), Ok)?;
        MaskedArray::new(data, mask)
    }

    /// The row blocks along dim 0: `(first row, end row)`, about [`BLOCK`] elements each.
    fn blocks(&self) -> (Vec<(usize, usize)>, usize) {
        let rows = self.shape.first().copied().unwrap_or(1);
        let inner: usize = self.shape.iter().skip(1).product();
        let per = (BLOCK / inner.max(1)).max(1);
        let blocks = (0..rows)
            .step_by(per)
            .map(|r| (r, (r + per).min(rows)))
            .collect();
        (blocks, inner)
    }

    /// Runs `f` on every block (computed into a per-task scratch buffer) in parallel,
    /// in block order: `f(block shape, values, bits)`.
    fn each_block<R: Send>(
        &self, f: impl Fn(usize, &[usize], &[O], Option<Bits<'_>>) -> Result<R> + Sync,
    ) -> Result<Vec<R>> {
        let (blocks, inner) = self.blocks();
        par::map(blocks.len(), |i| {
            let (r0, r1) = blocks[i];
            let buf: &mut Vec<O> = &mut Vec::new();
            let n = (r1 - r0) * inner;
            // every element is written by `produce`: no clearing pass
            buf.resize(n, O::default());
            self.produce(r0 * inner, buf)?;
            let mut shape = self.shape.clone();
            if let Some(s) = shape.first_mut() {
                *s = r1 - r0;
            }
            f(r0, &shape, buf, self.bits().map(|b| b.offset(r0 * inner)))
        })
        .into_iter()
        .collect()
    }
}

impl<O: Element> Fill<O> for ZipView<'_, O> {
    fn fill(&self, start: usize, out: &mut [O]) -> Option<usize> {
        self.src
            .produce(&self.shape, self.bits(), start, out)
            .map(|i| i - start)
    }

    fn pair(&self) -> Option<KeepOperands<'_, O>> {
        self.src.pair(&self.shape)
    }
}

impl<'a, O: Element> MaskedReduce<O> for ZipView<'a, O> {
    masked_core::reduce_types!(<P> MaskedArrayD<P>, MaskedArrayD<P>, <'b> MaskedView<'b, O, IxDyn>);

    /// Materialises the values (the NaN mask needs them).
    fn without_nans(&self) -> Result<MaskedView<'_, O, IxDyn>> {
        Ok(self.materialize()?.and_not_nan())
    }

    fn fold_lanes<F: Fold<O>>(
        &self, op: &F, dims: &Dims, keepdim: bool,
    ) -> Result<MaskedArrayD<F::Output>> {
        let plan = ReducePlan::new(&self.shape, dims, keepdim)?;
        if self.shape.is_empty() {
            return self.materialize()?.fold_lanes(op, dims, keepdim);
        }
        if lanes_are_runs(&plan) {
            // each lane computed a piece at a time into an L1 scratch and folded at
            // once, by the array kernel's own tasks: its states, bit for bit
            let (states, any, failed) =
                compiled::fold_lazy(op, &Lazy::new(self), self.bits(), &plan);
            if let Some(i) = failed {
                return Err(self.src.failure(&self.shape, i));
            }
            return finish_fold(op, &plan, &states, any);
        }
        let across = plan.reduced[0];
        // where dim 0 is reduced, a block's lanes continue the lanes of the blocks
        // before it: their positions (argmax, argmin) start at its first row's
        let per_row = (plan.lane_len / self.shape[0].max(1)) as i64;
        let parts = self.each_block(|r0, shape, xs, bits| {
            let sub = ReducePlan::new(shape, dims, keepdim)?;
            let pos0 = if across { r0 as i64 * per_row } else { 0 };
            Ok(compiled::fold_all(op, xs, bits, &sub, pos0))
        })?;
        let (states, any) = if across {
            // every block folds into the same outputs: merge in block order
            let mut it = parts.into_iter();
            let (mut states, mut any) = it
                .next()
                .unwrap_or_else(|| (vec![op.identity(); plan.lanes], vec![false; plan.lanes]));
            for (s, a) in it {
                for (x, y) in states.iter_mut().zip(s) {
                    op.merge(x, y);
                }
                for (x, y) in any.iter_mut().zip(a) {
                    *x |= y;
                }
            }
            (states, any)
        } else {
            let mut states = Vec::with_capacity(plan.lanes);
            let mut any = Vec::with_capacity(plan.lanes);
            for (s, a) in parts {
                states.extend(s);
                any.extend(a);
            }
            (states, any)
        };
        finish_fold(op, &plan, &states, any)
    }

    fn stat_lanes<St: LaneStat<O>>(
        &self, stat: &St, dims: &Dims, keepdim: bool,
    ) -> Result<MaskedArrayD<St::Output>> {
        let plan = ReducePlan::new(&self.shape, dims, keepdim)?;
        if self.shape.is_empty() || plan.reduced[0] {
            return self.materialize()?.stat_lanes(stat, dims, keepdim);
        }
        let parts = self.each_block(|_, shape, xs, bits| {
            let sub = ReducePlan::new(shape, dims, keepdim)?;
            Ok(compiled::stat_all(stat, xs, bits, &sub))
        })?;
        let (mut values, mut any) = (
            Vec::with_capacity(plan.lanes),
            Vec::with_capacity(plan.lanes),
        );
        for (v, a) in parts {
            values.extend(v);
            any.extend(a);
        }
        let data = ArrayD::from_shape_vec(IxDyn(&plan.out_shape), values)
            .map_err(|e| MaskedError::InvalidData(e.to_string()))?;
        MaskedArray::new(data, BitMask::from_bools(&plan.out_shape, any)?)
    }

    fn map_lanes<M: LaneMap<O>>(&self, map: &M, dim: isize) -> Result<MaskedArrayD<M::Output>> {
        let d = wrap_dim(dim, self.shape.len())?;
        if self.shape.len() < 2 || d == 0 {
            return self.materialize()?.map_lanes(map, dim);
        }
        let parts =
            self.each_block(|_, shape, xs, bits| Ok(compiled::map_all(map, xs, bits, shape, d)))?;
        let values: Vec<M::Output> = parts.into_iter().flatten().collect();
        self.with_mask(values)
    }
}
