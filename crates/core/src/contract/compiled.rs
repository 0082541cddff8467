//! Kernels compiled inside a layout's own crate for the common dtypes, reached from
//! generic code through safe enums (no type-identity casts).
//!
//! The lane kernels are generic over the element type `T` and the kernel value type `K`
//! (a [`Fold`](crate::Fold), [`LaneStat`](crate::LaneStat) or [`LaneMap`](crate::LaneMap)), so they are compiled where they are used:
//! in a dependent crate, at that crate's optimisation level, and a debug build of it runs
//! them 100x slower than release. A dependent's `[profile.dev.package."*"] opt-level = 3`
//! optimises the engine's crates, not generic code instantiated in the dependent.
//!
//! So each layout compiles its kernels, in its own crate, for every **listed** kernel
//! type and the dtypes with [`Element::PREBUILT`] (`f32`, `f64`): one non-generic
//! function per (layout entry, listed type, dtype). Generic code reaches them through
//! two enums over the listed types of a family: the kernel value borrowed,
//! [`FoldRef`](crate::fold::FoldRef) / [`StatRef`](crate::lane::StatRef) /
//! [`MapRef`](crate::lane::MapRef), and what an entry returns,
//! [`FoldOutput`](crate::fold::FoldOutput) / [`StatOutput`](crate::lane::StatOutput) /
//! [`MapOutput`](crate::lane::MapOutput). The list is one macro per family, [`fold_list!`](crate::fold_list) beside
//! the `Fold` trait and the fold values, `stat_list!` and `map_list!` in `lane`; the
//! enums and these entries are written from it. The layout's generic dispatcher, when
//! the constants `T::PREBUILT` and `K::PREBUILT` say the pair is listed,
//!
//! 1. asks the kernel value for its variant ([`Fold::listed`](crate::Fold::listed)),
//! 2. puts its input into the dtype's variant
//!    ([`Erase::erase`](crate::element::Erase::erase)) and calls that dtype's function
//!    for the value's variant, wrapping the result in the same variant of the output
//!    enum,
//! 3. takes the result back to `T`
//!    ([`Erase::unerase_owned`](crate::element::Erase::unerase_owned)) and to `K`
//!    ([`Fold::take`](crate::Fold::take): a listed type's own variant, which has its
//!    type).
//!
//! Every step is a match on a variant: safe code, no `TypeId`, no pointer cast. The tests
//! on the constants are resolved at compile time, so a listed pair never instantiates the
//! generic kernel (and its parallel plumbing) in the calling crate, which is most of a
//! dependent's compile time. A type is listed by naming it in its family's list and
//! putting the list's items in its impl (`listed!(fold T, Sum)` sets `PREBUILT`,
//! `listed` and `take` together). A type in the list whose impl lacks the items is a
//! compile error (a `const` assertion on its flag); a type left out of the list takes
//! the generic kernel, which the fallback test (`tests/tests/compiled.rs`, counting
//! `FALLBACKS`) catches. A layout's own unit-test build compiles no entries
//! (`not(test)`): its tests call the generic kernels, and the entries were most of those
//! builds' compile time. This module sits above the op modules (it names them); the
//! traits and the lists sit below, beside the types they list, so no module reaches a
//! module that reaches it back.

use crate::element::Family;
use crate::Element;
use std::marker::PhantomData;

#[doc(hidden)]
pub static FALLBACKS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts a dispatch that found no compiled entry for an input of a dtype with entries
/// (`f32`, `f64`): the fallback test runs every op of the registry on every layout and
/// asserts that none did, so a kernel type left out of the list fails it.
#[doc(hidden)]
#[inline(always)]
pub fn fell_back<T: Element>() {
    if T::PREBUILT {
        FALLBACKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The family of `&'x I::Of<'a, T>`: a layout entry's input, borrowed, for
/// [`Erase::erase`](crate::element::Erase::erase).
pub struct InputOf<'x, 'a, I>(PhantomData<(&'x &'a (), I)>);

/// A layout's input type, generic over the dtype (`[T]`, a lanes type).
pub trait EntryInput {
    /// The input of dtype `T`.
    type Of<'a, T: Element>: ?Sized + 'a;
}

impl<'x, 'a: 'x, I: EntryInput> Family for InputOf<'x, 'a, I> {
    type Of<T: Element> = &'x I::Of<'a, T>;
}

/// Declares, inside a module, a layout's compiled entries and their generic
/// dispatchers: for each entry, one non-generic function per listed kernel type of its
/// family and dtype with [`Element::PREBUILT`] (compiled here, in the calling crate), and
/// a generic dispatcher (a function of the entry's name) that calls them for a listed
/// pair and the generic kernel otherwise. The calling crate
/// declares a `prebuilt` feature: without it the dispatchers just run the call.
///
/// ```text
/// struct Slice;                                                     // what the kernels read
/// impl EntryInput for Slice { type Of<'a, T: Element> = [T]; }
/// type FoldOut<'a, T, K> = (Vec<<K as Fold<T>>::State>, Vec<bool>); // what one returns
/// compiled_kernels! {
///     input: Slice,
///     fold fold_all(op, xs, bits: Option<Bits<'_>>, plan: &ReducePlan, pos0: i64) -> FoldOut
///         = kernels::fold_all(op, xs, bits, plan, pos0);
/// }
/// // then: compiled::fold_all(op, xs, bits, plan, pos0) wherever kernels::fold_all was called
/// ```
///
/// Each entry is `FAMILY NAME(OP, INPUT, ARGS...) -> OUT = CALL;`. `FAMILY` is `fold`,
/// `stat` or `map`. `CALL` runs the kernel with the kernel value `OP: &K` and `INPUT:
/// &INPUT::Of<'a, T>`, and `OUT<'a, T, K>` names its result (which may borrow from the
/// input).
#[macro_export]
macro_rules! compiled_kernels {
    (input: $In:ty, $($fam:ident $entry:ident $args:tt -> $Out:ident = $call:expr;)*) => {
        $( $crate::compiled_kernels!(@family $fam, $In, $entry, $args, $Out, $call); )*
    };
    (@family fold, $($rest:tt)*) => {
        $crate::fold_list!($crate::compiled_kernels, @entry fold Fold, FoldRef, FoldOutput,
            FoldOutputOf, FoldEntry, ($($rest)*));
    };
    (@family stat, $($rest:tt)*) => {
        $crate::stat_list!($crate::compiled_kernels, @entry lane LaneStat, StatRef, StatOutput,
            StatOutputOf, StatEntry, ($($rest)*));
    };
    (@family map, $($rest:tt)*) => {
        $crate::map_list!($crate::compiled_kernels, @entry lane LaneMap, MapRef, MapOutput,
            MapOutputOf, MapEntry, ($($rest)*));
    };
    (@entry $m:ident $Tr:ident, $Ref:ident, $Output:ident, $OutputOf:ident, $Entry:ident,
        ($In:ty, $entry:ident, ($op:ident, $input:ident $(, $a:ident: $at:ty)*), $Out:ident,
        $call:expr) [$($v:ident: $k:ty),* $(,)?]) => {
        /// This entry's compiled kernels (see the core's `compiled` module).
        #[cfg(all(feature = "prebuilt", not(test)))]
        mod $entry {
            #[allow(unused_imports)]
            use super::*;
            use $crate::$m::$Entry;
            use $crate::compiled::EntryInput;

            /// The entry's output type, by kernel type.
            pub(super) struct Here<'a>(std::marker::PhantomData<&'a ()>);
            impl<'a> $Entry<'a> for Here<'a> {
                type Out<T: $crate::Element, K: $crate::$Tr<T>> = $Out<'a, T, K>;
            }

            $crate::compiled_kernels!(@dtype f32, on_f32, [$($v: $k),*], $In, $Out, $op, $input,
                ($($a,)*), ($($at,)*), $call);
            $crate::compiled_kernels!(@dtype f64, on_f64, [$($v: $k),*], $In, $Out, $op, $input,
                ($($a,)*), ($($at,)*), $call);
        }

        /// The kernel, from this crate's compiled entries for a listed kernel type and a
        /// dtype with them, or the generic kernel. The test is on constants (`PREBUILT`
        /// of the dtype and of the kernel type), so after monomorphisation only one
        /// branch exists: a listed pair never instantiates the generic kernel in the
        /// calling crate.
        pub(crate) fn $entry<'a, T: $crate::Element, K: $crate::$Tr<T>>(
            $op: &K,
            $input: &<$In as $crate::compiled::EntryInput>::Of<'a, T>,
            $($a: $at),*
        ) -> $Out<'a, T, K> {
            #[cfg(all(feature = "prebuilt", not(test)))]
            {
                use $crate::element::{ByDType, Erase};
                use $crate::$m::{$Output, $OutputOf, $Ref};
                use $crate::compiled::InputOf;
                if <T as $crate::Element>::PREBUILT && <K as $crate::$Tr<T>>::PREBUILT {
                    let Some(k) = $op.listed() else {
                        unreachable!("a kernel type flagged PREBUILT but not listed")
                    };
                    let out = match T::erase::<InputOf<'_, 'a, $In>>($input) {
                        ByDType::F32(x) => T::unerase_owned::<$OutputOf<'a, $entry::Here<'a>>>(
                            ByDType::F32($crate::compiled_kernels!(@call $entry::on_f32, k, x,
                                ($($a,)*), $Ref, $Output, [$($v),*])),
                        ),
                        ByDType::F64(x) => T::unerase_owned::<$OutputOf<'a, $entry::Here<'a>>>(
                            ByDType::F64($crate::compiled_kernels!(@call $entry::on_f64, k, x,
                                ($($a,)*), $Ref, $Output, [$($v),*])),
                        ),
                        _ => None,
                    };
                    let Some(out) = out else {
                        unreachable!("a dtype flagged PREBUILT without compiled entries")
                    };
                    return K::take(out);
                }
                $crate::compiled::fell_back::<T>();
            }
            $call
        }
    };
    (@call $entry:ident :: $md:ident, $k:ident, $x:ident, $args:tt, $Ref:ident, $Output:ident,
        [$($v:ident),*]) => {
        match $k {
            $( $Ref::$v(op) => $Output::$v($entry::$md::$v(op, $x, $args)), )*
        }
    };
    (@dtype $d:ident, $md:ident, [$($v:ident: $k:ty),*], $In:ty, $Out:ident, $op:ident,
        $input:ident, $pat:tt, $pty:tt, $call:expr) => {
        /// Each listed kernel type's kernel for this dtype: one non-generic function per
        /// type, compiled in this crate, that a dependent links.
        pub(crate) mod $md {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[doc = concat!("The kernel of the listed type `", stringify!($v), "`.")]
                #[inline(never)]
                #[allow(non_snake_case)]
                pub(crate) fn $v<'a>(
                    $op: &$k,
                    $input: &<$In as EntryInput>::Of<'a, $d>,
                    $pat: $pty,
                ) -> $Out<'a, $d, $k> {
                    $call
                }
            )*
        }
    };
}

/// [`compiled_kernels!`](crate::compiled_kernels) for a layout whose kernels are methods
/// of a lanes type `INPUT<'a, T>` (CSR's and COO's): the lanes type implements
/// [`MaskedReduce`](crate::MaskedReduce) by dispatching to the four functions this defines
/// (`fold_lanes`, `stat_lanes`, `map_lanes`, `map_elements`), which call its inherent
/// `kernel_fold_lanes`, `kernel_stat_lanes`, `kernel_map_lanes` and
/// `kernel_map_elements` (the trait methods' signatures; the maps also take the optional
/// [`OutSlots`](crate::OutSlots) to write into and return a [`Written`](crate::Written)),
/// and implements [`MapInto`](crate::MapInto) with them (one slot per entry: the lanes
/// type's `nnz()`).
#[macro_export]
macro_rules! compiled_lanes {
    (input: $In:ident) => {
        /// The lanes type, generic over the dtype: the entries' input.
        pub(crate) struct Lanes;
        impl $crate::compiled::EntryInput for Lanes {
            type Of<'a, T: $crate::Element> = $In<'a, T>;
        }
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
        $crate::compiled_kernels! {
            input: Lanes,
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
                &self, map: &M, dim: isize, out: $crate::OutSlots<'_, '_>,
            ) -> $crate::Result<Option<Vec<u64>>> {
                map_lanes(map, self, dim, Some(out))?.slots()
            }

            fn map_elements_into<M: $crate::LaneMap<T>>(
                &self, map: &M, zero_preserving: bool, out: $crate::OutSlots<'_, '_>,
            ) -> $crate::Result<Option<Vec<u64>>> {
                map_elements(map, self, zero_preserving, Some(out))?.slots()
            }
        }
    };
}

/// The kernel methods of [`MaskedReduce`](crate::MaskedReduce) for a sparse layout,
/// invoked inside its `impl<T: Element> MaskedReduce<T>`:
///
/// - `lane_methods!(compiled)` for a lanes type whose crate invoked
///   [`compiled_lanes!`](crate::compiled_lanes) and which is its own `NanMasked` (its
///   method `nan_masked`): `without_nans` and the four kernel methods, each calling its
///   `compiled` dispatcher (the maps hand back a fresh result);
/// - `lane_methods!(lanes, wrap)` for a layout that runs every op on its lanes
///   (`self.lanes()`, whose `Reduced` outputs are the layout's own and whose type is the
///   layout's `NanMasked`): `without_nans`, the four kernel methods and `grad_reduced`,
///   each calling the lanes' method, the maps' and the gradient's results going through
///   the layout's method `wrap` (a `Result` of the lanes' mapped type in, of the
///   layout's out).
#[macro_export]
macro_rules! lane_methods {
    (compiled) => {
        fn without_nans(&self) -> $crate::Result<Self::NanMasked<'_>> {
            Ok(self.nan_masked())
        }

        $crate::lane_methods!(@kernels [compiled]);
    };
    (lanes, $wrap:ident) => {
        fn without_nans(&self) -> $crate::Result<Self::NanMasked<'_>> {
            Ok(self.lanes().nan_masked())
        }

        fn grad_reduced<G: $crate::LaneGrad>(
            &self, grad: &G, dims: &$crate::Dims, keepdim: bool, g: &Self::Reduced<T::Real>,
            saved: Option<&Self::Reduced<T::Real>>,
        ) -> $crate::Result<Self::Mapped<T::Real>> {
            self.$wrap(self.lanes().grad_reduced(grad, dims, keepdim, g, saved))
        }

        $crate::lane_methods!(@kernels [lanes $wrap]);
    };
    (@kernels $via:tt) => {
        fn fold_lanes<F: $crate::Fold<T>>(
            &self, op: &F, dims: &$crate::Dims, keepdim: bool,
        ) -> $crate::Result<Self::Reduced<F::Output>> {
            $crate::lane_methods!(@reduce $via fold_lanes, self, op, dims, keepdim)
        }

        fn stat_lanes<S: $crate::LaneStat<T>>(
            &self, stat: &S, dims: &$crate::Dims, keepdim: bool,
        ) -> $crate::Result<Self::Reduced<S::Output>> {
            $crate::lane_methods!(@reduce $via stat_lanes, self, stat, dims, keepdim)
        }

        fn map_elements<M: $crate::LaneMap<T>>(
            &self, map: &M, zero_preserving: bool,
        ) -> $crate::Result<Self::Mapped<M::Output>> {
            $crate::lane_methods!(@map $via map_elements, self, map, zero_preserving)
        }

        fn map_lanes<M: $crate::LaneMap<T>>(
            &self, map: &M, dim: isize,
        ) -> $crate::Result<Self::Mapped<M::Output>> {
            $crate::lane_methods!(@map $via map_lanes, self, map, dim)
        }
    };
    // the bodies: `self` and the parameters are passed in from the arm that declared them
    (@reduce [compiled] $m:ident, $s:tt, $k:ident, $($a:ident),*) => {
        compiled::$m($k, $s, $($a),*)
    };
    (@reduce [lanes $w:ident] $m:ident, $s:tt, $k:ident, $($a:ident),*) => {
        $s.lanes().$m($k, $($a),*)
    };
    (@map [compiled] $m:ident, $s:tt, $k:ident, $($a:ident),*) => {
        compiled::$m($k, $s, $($a,)* None)?.fresh()
    };
    (@map [lanes $w:ident] $m:ident, $s:tt, $k:ident, $($a:ident),*) => {
        $s.$w($s.lanes().$m($k, $($a),*))
    };
}

/// Runs every one-operand op of the registry on `a` along the last dim, the first dim and
/// all dims, plus the casts to `f32` and `f64`, discarding the results (errors too: an
/// op that refuses an option-less call ran no kernel). The fallback test calls it with
/// `f32` and `f64` inputs of every layout and then asserts that [`FALLBACKS`] is still 0.
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
