//! The dense lane kernels instantiated in this crate for `f32` and `f64`, for every
//! kernel value type of the engine (the core's `prebuilt_kernels!` says why): the
//! layout calls these dispatchers where it would call `kernels::*`.

use crate::kernels::{self, Lazy};
use masked_core::{Fold, LaneMap, LaneStat, ReducePlan};
use masked_kernels::Bits;

/// What the kernels read: the values in row-major order.
type Input<'a, T> = [T];
type FoldOut<'a, T, K> = (Vec<<K as Fold<T>>::State>, Vec<bool>);
type StatOut<'a, T, K> = (Vec<<K as LaneStat<T>>::Output>, Vec<bool>);
type MapOut<'a, T, K> = Vec<<K as LaneMap<T>>::Output>;

masked_core::prebuilt_kernels! {
    input: Input,
    dtypes: [f32, f64],
    fold fold_all(op, xs, bits: Option<Bits<'_>>, plan: &ReducePlan, pos0: i64) -> FoldOut
        = kernels::fold_all(op, xs, bits, plan, pos0);
    stat stat_all(op, xs, bits: Option<Bits<'_>>, plan: &ReducePlan) -> StatOut
        = kernels::stat_all(op, xs, bits, plan);
    map map_all(op, xs, bits: Option<Bits<'_>>, shape: &[usize], dim: usize) -> MapOut
        = kernels::map_all(op, xs, bits, shape, dim);
}

/// What the lazy kernel reads: values computed on demand (a `ZipView`'s).
type LazyInput<'a, T> = Lazy<'a, T>;
type LazyFoldOut<'a, T, K> = (Vec<<K as Fold<T>>::State>, Vec<bool>, Option<usize>);

masked_core::prebuilt_kernels! {
    input: LazyInput,
    dtypes: [f32, f64],
    fold fold_lazy(op, src, bits: Option<Bits<'_>>, plan: &ReducePlan) -> LazyFoldOut
        = kernels::fold_lazy(op, src, bits, plan);
}
