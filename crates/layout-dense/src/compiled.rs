//! The dense lane kernels compiled in this crate for `f32` and `f64`, for every listed
//! kernel value type (the core's `compiled` module says why): the layout calls these
//! dispatchers where it would call `kernels::*`.

use crate::kernels::{self, Lazy};
use masked_core::compiled::EntryInput;
use masked_core::{Element, Fold, LaneMap, LaneStat, ReducePlan};
use masked_kernels::Bits;

/// What the kernels read: the values in row-major order.
pub(crate) struct Slice;
impl EntryInput for Slice {
    type Of<'a, T: Element> = [T];
}
type FoldOut<'a, T, K> = (Vec<<K as Fold<T>>::State>, Vec<bool>);
type StatOut<'a, T, K> = (Vec<<K as LaneStat<T>>::Output>, Vec<bool>);
type MapOut<'a, T, K> = Vec<<K as LaneMap<T>>::Output>;

masked_core::compiled_kernels! {
    input: Slice,
    fold fold_all(op, xs, bits: Option<Bits<'_>>, plan: &ReducePlan, pos0: i64) -> FoldOut
        = kernels::fold_all(op, xs, bits, plan, pos0);
    stat stat_all(op, xs, bits: Option<Bits<'_>>, plan: &ReducePlan) -> StatOut
        = kernels::stat_all(op, xs, bits, plan);
    map map_all(op, xs, bits: Option<Bits<'_>>, shape: &[usize], dim: usize) -> MapOut
        = kernels::map_all(op, xs, bits, shape, dim);
}

/// What the lazy kernel reads: values computed on demand (a `ZipView`'s).
pub(crate) struct LazyValues;
impl EntryInput for LazyValues {
    type Of<'a, T: Element> = Lazy<'a, T>;
}
type LazyFoldOut<'a, T, K> = (Vec<<K as Fold<T>>::State>, Vec<bool>, Option<usize>);

masked_core::compiled_kernels! {
    input: LazyValues,
    fold fold_lazy(op, src, bits: Option<Bits<'_>>, plan: &ReducePlan) -> LazyFoldOut
        = kernels::fold_lazy(op, src, bits, plan);
}
