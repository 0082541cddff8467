//! Kernels instantiated inside a layout's own crate for the common dtypes.
//!
//! The lane kernels are generic over the element type and the op, so they are compiled
//! where they are used: in a dependent crate, at that crate's optimisation level, and a
//! debug build of it runs them 100x slower than release. A dependent's
//! `[profile.dev.package."*"] opt-level = 3` optimises the engine's crates, not the
//! generic code instantiated in the dependent. [`prebuilt_kernels!`](crate::prebuilt_kernels) fixes that for every
//! kernel value type of the engine (the list below, the one place it is kept) and the
//! dtypes a layout names: each pair gets a non-generic `#[inline(never)]` entry, compiled
//! in the layout's crate, which a dependent links instead of instantiating; the layout
//! calls a generic dispatcher that compares `TypeId`s and calls the entry, or the generic
//! kernel for any other type. Whether a pair is listed is also a pair of constants
//! (`Element::PREBUILT` of the dtype, `PREBUILT` of the `Fold` / `LaneStat` / `LaneMap`
//! type), tested first: after monomorphisation the other branch is gone, so a listed
//! pair does not instantiate the generic kernel (and its parallel plumbing) in the
//! calling crate, which is most of a dependent's compile time. A listed pair that is not
//! flagged is a compile error; a flagged type missing from the list fails the prebuilt
//! test (`tests/tests/prebuilt.rs`, which links the layouts as a dependent does). A
//! layout's own unit-test build compiles no entries (`not(test)`): its tests call the
//! generic kernels, and the entries were most of those builds' compile time.

pub use crate::element::{is, same};

#[doc(hidden)]
pub static FALLBACKS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts a dispatch that found no prebuilt entry for an `f32`/`f64` input: the layouts'
/// tests assert that every op of the registry finds one, so a kernel type missing from
/// [`prebuilt_kernels!`](crate::prebuilt_kernels)'s list fails them.
#[doc(hidden)]
#[inline(always)]
pub fn fell_back<T: 'static>() {
    if is::<T, f32>() || is::<T, f64>() {
        FALLBACKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Instantiates a layout's kernels for every kernel value type of the engine and the
/// given dtypes inside the calling crate, and defines one generic dispatcher per kernel
/// (a function of the entry's name) that calls them. The calling crate declares a
/// `prebuilt` feature: without it the dispatchers just run the call. Invoke once per
/// module:
///
/// ```text
/// type Input<'a, T> = [T];                                          // what the kernels read
/// type FoldOut<'a, T, K> = (Vec<<K as Fold<T>>::State>, Vec<bool>); // what one returns
/// prebuilt_kernels! {
///     input: Input,
///     dtypes: [f32, f64],
///     fold fold_all(op, xs, bits: Option<Bits<'_>>, plan: &ReducePlan, pos0: i64) -> FoldOut
///         = kernels::fold_all(op, xs, bits, plan, pos0);
/// }
/// // then: prebuilt::fold_all(op, xs, bits, plan, pos0) wherever kernels::fold_all was called
/// ```
///
/// Each entry is `FAMILY NAME(OP, INPUT, ARGS...) -> OUT = CALL;`. `FAMILY` is `fold`,
/// `stat` or `map` (the `Fold`, `LaneStat` or `LaneMap` types of the list). `CALL` runs
/// the kernel with the kernel value `OP: &K` and `INPUT: &INPUT_TYPE<'a, T>`, and
/// `OUT<'a, T, K>` names its result (which may borrow from the input). The list: a new
/// `Fold` / `LaneStat` / `LaneMap` type of the engine goes here (the prebuilt test fails
/// until it does).
#[macro_export]
macro_rules! prebuilt_kernels {
    (input: $In:ident, dtypes: $dl:tt,
        $($fam:ident $entry:ident $args:tt -> $Out:ident = $call:expr;)*) => {
        $( $crate::prebuilt_kernels!(@family $fam ($In, $dl, $entry, $args, $args, $Out, $call)); )*
    };

    (@family fold $cfg:tt) => {
        $crate::prebuilt_kernels!(@entry $cfg, Fold, [
            $crate::ops::Sum, $crate::ops::Prod, $crate::ops::AMax, $crate::ops::AMin,
            $crate::ops::Ptp, $crate::ops::ArgMax, $crate::ops::ArgMin, $crate::ops::Mean,
            $crate::ops::Count, $crate::stats::Var, $crate::stats::Std, $crate::stats::Norm,
            $crate::stats::LogSumExp, $crate::stats::LogMeanExp
        ]);
    };
    (@family stat $cfg:tt) => {
        $crate::prebuilt_kernels!(@entry $cfg, LaneStat, [
            $crate::lane::Quantile, $crate::lane::MedianIndex
        ]);
    };
    (@family map $cfg:tt) => {
        $crate::prebuilt_kernels!(@entry $cfg, LaneMap, [
            $crate::lane::Softmax, $crate::lane::Normalize, $crate::lane::Cumulative,
            $crate::unary::FloatMap<$crate::unary::FloatFn>,
            $crate::unary::KeepMap<$crate::unary::KeepFn>,
            $crate::cast::Cast<f32>, $crate::cast::Cast<f64>
        ]);
    };

    (@entry ($In:ident, $dl:tt, $entry:ident, ($op:ident, $input:ident $(, $a:ident: $at:ty)*),
        $params:tt, $Out:ident, $call:expr), $Tr:ident, [$($k:ty),*]) => {
        /// This entry's kernels, compiled here (see the core's `prebuilt` module).
        #[cfg(all(feature = "prebuilt", not(test)))]
        mod $entry {
            #[allow(unused_imports)]
            use super::*;
            /// One kernel value type's kernel for dtype `T`, implemented for concrete `T`
            /// only: a non-generic item a dependent links.
            pub(super) trait Here<T: $crate::Element>: $crate::$Tr<T> {
                /// The kernel type's flag for `T`.
                const FLAGGED: bool = <Self as $crate::$Tr<T>>::PREBUILT;
                fn here<'a>(&self, input: &$In<'a, T>, $($a: $at),*) -> $Out<'a, T, Self>;
            }
            $( $crate::prebuilt_kernels!(@impls $k, $dl, $In, $params, $Out, $call); )*
        }

        /// The kernel, from this crate's instantiation for the listed types and dtypes.
        /// The test is on constants (`PREBUILT` of the dtype and of the kernel type), so
        /// after monomorphisation only one branch exists: a listed pair calls its entry
        /// and never instantiates the generic kernel in the calling crate.
        pub(crate) fn $entry<'a, T: $crate::Element, K: $crate::$Tr<T>>(
            $op: &K,
            $input: &$In<'a, T>,
            $($a: $at),*
        ) -> $Out<'a, T, K> {
            #[cfg(all(feature = "prebuilt", not(test)))]
            {
                if <T as $crate::Element>::PREBUILT && <K as $crate::$Tr<T>>::PREBUILT {
                    $( $crate::prebuilt_kernels!(@try $k, $dl, $In, $entry, T, K, $params); )*
                    // a type flagged PREBUILT without an entry in the list: the layouts'
                    // prebuilt tests run every op of the registry and fail here
                    unreachable!(
                        "{} is flagged PREBUILT but has no prebuilt entry for {}",
                        std::any::type_name::<K>(),
                        std::any::type_name::<T>()
                    );
                }
                $crate::prebuilt::fell_back::<T>();
            }
            $call
        }
    };

    (@impls $k:ty, [$($d:ty),*], $In:ident, $params:tt, $Out:ident, $call:expr) => {
        $( $crate::prebuilt_kernels!(@impl $k, $d, $In, $params, $Out, $call); )*
    };
    (@impl $k:ty, $d:ty, $In:ident, ($op:ident, $input:ident $(, $a:ident: $at:ty)*),
        $Out:ident, $call:expr) => {
        // a listed pair must be flagged, or the dispatcher would never call its entry
        const _: () = assert!(
            <$d as $crate::Element>::PREBUILT && <$k as Here<$d>>::FLAGGED,
            "a prebuilt_kernels! entry whose kernel type or dtype is not flagged PREBUILT"
        );
        impl Here<$d> for $k {
            #[inline(never)]
            fn here<'a>(&self, $input: &$In<'a, $d>, $($a: $at),*) -> $Out<'a, $d, Self> {
                let $op = self;
                $call
            }
        }
    };

    (@try $k:ty, [$($d:ty),*], $In:ident, $entry:ident, $T:ident, $K:ident, $params:tt) => {
        if $crate::prebuilt::is::<$K, $k>() {
            $( $crate::prebuilt_kernels!(@try_d $k, $d, $In, $entry, $T, $K, $params); )*
        }
    };
    (@try_d $k:ty, $d:ty, $In:ident, $entry:ident, $T:ident, $K:ident,
        ($op:ident, $input:ident $(, $a:ident: $at:ty)*)) => {
        if $crate::prebuilt::is::<$T, $d>() {
            // SAFETY: K is $k and T is $d (equal TypeIds): the casts are identities.
            return unsafe {
                let op = &*($op as *const $K as *const $k);
                let input = &*($input as *const $In<'_, $T> as *const $In<'_, $d>);
                $crate::prebuilt::same(<$k as $entry::Here<$d>>::here(op, input, $($a),*))
            };
        }
    };
}

/// [`prebuilt_kernels!`](crate::prebuilt_kernels) for a layout whose kernels are methods
/// of a lanes type `INPUT<'a, T>` (CSR's and COO's): the lanes type implements
/// [`MaskedReduce`](crate::MaskedReduce) by dispatching to the four functions this defines
/// (`fold_lanes`, `stat_lanes`, `map_lanes`, `map_elements`), which call its inherent
/// `kernel_fold_lanes`, `kernel_stat_lanes`, `kernel_map_lanes` and
/// `kernel_map_elements` (the trait methods' signatures; the maps also take the optional
/// [`OutSlots`](crate::OutSlots) to write into and return a [`Written`](crate::Written)),
/// and implements [`MapInto`](crate::MapInto) with them (one slot per entry: the lanes
/// type's `nnz()`).
#[macro_export]
macro_rules! prebuilt_lanes {
    (input: $In:ident, dtypes: $dl:tt) => {
        type FoldOut<'a, T, K> = $crate::Result<
            <$In<'a, T> as $crate::MaskedReduce<T>>::Reduced<<K as $crate::Fold<T>>::Output>,
        >;
        type StatOut<'a, T, K> = $crate::Result<
            <$In<'a, T> as $crate::MaskedReduce<T>>::Reduced<<K as $crate::LaneStat<T>>::Output>,
        >;
        type MapOut<'a, T, K> = $crate::Result<
            $crate::Written<
                <$In<'a, T> as $crate::MaskedReduce<T>>::Mapped<<K as $crate::LaneMap<T>>::Output>,
            >,
        >;
        $crate::prebuilt_kernels! {
            input: $In,
            dtypes: $dl,
            fold fold_lanes(op, l, dims: &$crate::Dims, keepdim: bool) -> FoldOut
                = l.kernel_fold_lanes(op, dims, keepdim);
            stat stat_lanes(op, l, dims: &$crate::Dims, keepdim: bool) -> StatOut
                = l.kernel_stat_lanes(op, dims, keepdim);
            map map_lanes(op, l, dim: isize, into: Option<$crate::OutSlots<'_, '_>>) -> MapOut
                = l.kernel_map_lanes(op, dim, into);
            map map_elements(op, l, zero_preserving: bool, into: Option<$crate::OutSlots<'_, '_>>)
                -> MapOut = l.kernel_map_elements(op, zero_preserving, into);
        }

        /// The maps into a caller's slots, one per stored entry (`nnz`), through the
        /// same dispatchers.
        impl<T: $crate::Element> $crate::MapInto<T> for $In<'_, T> {
            fn slots(&self) -> usize {
                self.nnz()
            }

            fn map_lanes_into<M: $crate::LaneMap<T>>(
                &self,
                map: &M,
                dim: isize,
                out: $crate::OutSlots<'_, '_>,
            ) -> $crate::Result<Option<Vec<u64>>> {
                map_lanes(map, self, dim, Some(out))?.slots()
            }

            fn map_elements_into<M: $crate::LaneMap<T>>(
                &self,
                map: &M,
                zero_preserving: bool,
                out: $crate::OutSlots<'_, '_>,
            ) -> $crate::Result<Option<Vec<u64>>> {
                map_elements(map, self, zero_preserving, Some(out))?.slots()
            }
        }
    };
}

/// Runs every one-operand op of the registry on `a` along the last dim, the first dim and
/// all dims, plus the casts to `f32` and `f64`, discarding the results (errors too: an
/// op that refuses an option-less call ran no kernel). The prebuilt test calls it with
/// `f32` and `f64` inputs of every layout and then assert that [`FALLBACKS`] is still 0.
#[doc(hidden)]
pub fn run_every_op<T: crate::Element, L: crate::MaskedReduce<T>>(a: &L) {
    use crate::registry::{apply_to, Discard, Kind, Op, OpRequest};
    use crate::MaskedOps;
    for &op in Op::ALL {
        if op.kind() == Kind::Binary {
            continue;
        }
        for dims in [Some(-1isize), Some(0), None] {
            let Ok(mut r) = OpRequest::new(op.name()) else {
                continue;
            };
            if let Some(d) = dims.or((op.kind() == Kind::Normalize).then_some(-1)) {
                r.dims = crate::Dims::from(d);
            }
            let _ = apply_to(a, &r, &Discard);
        }
    }
    let _ = a.cast::<f32>();
    let _ = a.cast::<f64>();
}
