//! The fold contract every monoid op implements once.
//!
//! A layout never knows which op it runs: it hands each lane (or piece of a lane) to
//! [`Fold::push_run`] or [`Fold::push_each`] and merges partial states with
//! [`Fold::merge`]. An op's fast path is a [`Lanes`](masked_kernels::run::Lanes) value: an elementwise monoid that
//! [`fold_run`](masked_kernels::run::fold_run) evaluates in several independent accumulators with branch-free selects on
//! the mask bits, compiled once per CPU tier (AVX-512, AVX2, baseline) and picked at run
//! time.

use crate::element::Element;
use masked_kernels::run::pred_bits;
use masked_kernels::Bits;
use serde::{de::DeserializeOwned, Serialize};
use std::fmt::Debug;

/// Rows of the tiles of [`Fold::push_columns`]'s default (with 64 columns of `f32`:
/// 256 KiB, cache-resident): each column of a tile is pushed as one run this long.
pub const COLUMN_TILE_ROWS: usize = 1024;

/// Under this many rows, [`Fold::push_columns`] (its default and the ops that override
/// it with column passes) pushes the rows one at a time ([`Fold::push_each`]).
const FEW_ROWS: usize = 16;

/// The column sweep over a few rows: under [`FEW_ROWS`] rows (`stride` apart), each row
/// pushed with [`Fold::push_each`], and `true`; more rows are left to the caller
/// (`false`).
pub(crate) fn push_few_rows<T: Element, F: Fold<T> + ?Sized>(
    op: &F, states: &mut [F::State], xs: &[T], (stride, nrows): (usize, usize),
    bits: Option<Bits<'_>>, idx0: i64,
) -> bool {
    if nrows >= FEW_ROWS {
        return false;
    }
    let w = states.len();
    for r in 0..nrows {
        let row = &xs[r * stride..r * stride + w];
        op.push_each(
            states,
            row,
            bits.map(|b| b.offset(r * stride)),
            idx0 + r as i64,
        );
    }
    true
}

/// The block length of the Fold law of pieces (see [`Fold`]): the engine's ops fold a run
/// block by block, so a run may be handed over in pieces of a multiple of this length
/// with the same result, bit for bit.
pub const RUN_BLOCK: usize = masked_kernels::BLOCK;

/// A reduction written once as a fold: `identity`, `push`, `merge`, `finish`.
///
/// Laws every implementation keeps (and the property tests check):
/// - folding a lane is `finish(push(... push(identity, x0) ..., xn))`;
/// - `merge(fold(a), fold(b)) == fold(a ++ b)` for a lane split into consecutive parts
///   `a`, `b` (exactly for integers and for order-free ops, up to rounding for float
///   sums), so partial states from row blocks, threads or machines combine;
/// - `finish(identity())` is the op's value for a fully masked lane (semantics table);
/// - [`Fold::push_run`] of a run equals, bit for bit, `push_run` of its pieces in order
///   when every piece but the last is a multiple of [`RUN_BLOCK`] elements long (the engine's ops fold a run block by block), so a layout may hand a
///   lane over in such pieces (a lazy view computes its values a piece at a time) with
///   the same result as the whole lane at once.
///
/// The state is serde-serialisable so partial results can travel.
pub trait Fold<T: Element>: Send + Sync + 'static {
    /// The mergeable partial result.
    type State: Clone + Send + Sync + Debug + Serialize + DeserializeOwned;
    /// The finished value of a lane.
    type Output: Element;
    crate::fold::listed!(defaults Fold<T>, fold, FoldRef, FoldOutput, FoldEntry);

    /// Name of the op, for messages.
    fn name(&self) -> &'static str;

    /// The state of an empty lane.
    fn identity(&self) -> Self::State;

    /// Adds the valid element `x`, at position `idx` along its lane, to the state.
    fn push(&self, state: &mut Self::State, x: T, idx: i64);

    /// Merges `other`, the state of the elements that follow `state`'s, into `state`.
    fn merge(&self, state: &mut Self::State, other: Self::State);

    /// The value of a lane from its state.
    fn finish(&self, state: &Self::State) -> Self::Output;

    /// Whether the op's result depends on the positions passed to `push` (argmax,
    /// argmin). A layout whose valid elements are not at consecutive positions (a sparse
    /// row) may use [`Fold::push_run`] with made-up positions only when this is false.
    fn positional(&self) -> bool {
        true
    }

    /// Whether every output position is valid, fully masked lanes included (`count`).
    /// Otherwise the output mask is `any(mask over the reduced dims)`.
    fn valid_everywhere(&self) -> bool {
        false
    }

    /// Adds a contiguous run: element `k` of `xs` is at lane position `idx0 + k` and is
    /// valid when bit `k` of `bits` is set (all valid when `bits` is `None`). Ops override
    /// this with a [`fold_run`](masked_kernels::run::fold_run) call; the default pushes element by element.
    #[inline]
    fn push_run(&self, state: &mut Self::State, xs: &[T], bits: Option<Bits<'_>>, idx0: i64) {
        match bits {
            None => {
                for (k, &x) in xs.iter().enumerate() {
                    self.push(state, x, idx0 + k as i64);
                }
            }
            Some(b) => {
                for (k, &x) in xs.iter().enumerate() {
                    if b.get(k) {
                        self.push(state, x, idx0 + k as i64);
                    }
                }
            }
        }
    }

    /// Adds a run whose element `k` is at lane position `pos(k)`, the positions
    /// increasing but not necessarily consecutive (a sparse row's stored entries), valid
    /// where bit `k` of `bits` is set. Returns `false`, having done nothing, where the op
    /// has no such path (the default): the layout then pushes element by element. The
    /// positional ops whose result depends on the positions only through their order
    /// (argmax, argmin: the first of equal candidates wins) override it with their run
    /// kernel, then map the winner's position.
    #[inline]
    fn push_run_at(
        &self, state: &mut Self::State, xs: &[T], bits: Option<Bits<'_>>,
        pos: &dyn Fn(usize) -> i64,
    ) -> bool {
        let _ = (state, xs, bits, pos);
        false
    }

    /// [`Fold::push_run`] over `xs[..n]`, where the caller vouches that `xs[n..]` may be
    /// read (it is never combined): the rows of one array (a CSR matrix's values) pass
    /// the values from the row's start on, and an op whose kernel ends a run with whole
    /// vectors ([`fold_run_within`](masked_kernels::run::fold_run_within)) overrides
    /// this. Bit for bit `push_run(&xs[..n])`, which the default calls.
    #[inline]
    fn push_run_within(
        &self, state: &mut Self::State, xs: &[T], n: usize, bits: Option<Bits<'_>>, idx0: i64,
    ) {
        self.push_run(state, &xs[..n], bits, idx0);
    }

    /// [`Fold::push_run_within`] for one of the rows of an array that are folded one
    /// after another (CSR rows, a dense array's last-dim lanes, COO groups): asks for
    /// the values ahead first ([`prefetch_ahead`](masked_kernels::cpu::prefetch_ahead):
    /// a short row ends in a mispredicted branch that drops the loads begun for the
    /// next). The layouts call this; ops override `push_run_within`, not this.
    #[inline]
    fn push_row(
        &self, state: &mut Self::State, xs: &[T], n: usize, bits: Option<Bits<'_>>, idx0: i64,
    ) {
        masked_kernels::cpu::prefetch_ahead(xs, n);
        self.push_run_within(state, xs, n, bits, idx0);
    }

    /// Adds the run of values `f(xs[k], ys[k])` (valid where bit `k` of `bits` is set, at
    /// lane positions from `idx0`) as [`Fold::push_run`] adds those values written out,
    /// bit for bit, reading the two runs in the op's own kernel: a fused
    /// elementwise-then-reduce over two operands (`sum(a * b)`) with no pass through
    /// memory in between. Returns `false`, having done nothing, where the op has no
    /// such path (the default): the layout then computes the values a piece at a time
    /// and calls `push_run`. `f` is called at masked-out positions too (its value
    /// there is not used), so it must not fail or have effects. Ops whose `push_run`
    /// folds one lane monoid a block at a time override this with
    /// [`fold_pair_run`](masked_kernels::run::fold_pair_run).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn push_pair_run<A: Copy, B: Copy, Z: Fn(A, B) -> T + Copy>(
        &self, state: &mut Self::State, xs: &[A], ys: &[B], f: Z, bits: Option<Bits<'_>>, idx0: i64,
    ) -> bool {
        let _ = (state, xs, ys, f, bits, idx0);
        false
    }

    /// Adds element `k` of `xs` to `states[k]`, all at lane position `idx` (the column
    /// sweep: one step along many lanes at once).
    #[inline]
    fn push_each(&self, states: &mut [Self::State], xs: &[T], bits: Option<Bits<'_>>, idx: i64) {
        match bits {
            None => {
                for (s, &x) in states.iter_mut().zip(xs) {
                    self.push(s, x, idx);
                }
            }
            Some(b) => {
                for (k, (s, &x)) in states.iter_mut().zip(xs).enumerate() {
                    if b.get(k) {
                        self.push(s, x, idx);
                    }
                }
            }
        }
    }

    /// The column sweep over a block: for each row `r < nrows`, element `k` of row `r`
    /// (at `xs[r * stride + k]`, valid where bit `r * stride + k` of `bits` is set) goes
    /// into `states[k]` at lane position `idx0 + r`. Ops whose lanes combine in a vector
    /// register override this with a [`fold_columns`](masked_kernels::run::fold_columns)
    /// call (norm; var, std and logsumexp: two column passes a block of rows). The
    /// default, for the rest (a state too wide for a register, or a run kernel of two
    /// passes: log-mean-exp), transposes tiles of up to 64 columns
    /// by [`COLUMN_TILE_ROWS`] rows straight from the rows (with each row's validity as
    /// one word), and pushes each column of the tile as one run with
    /// [`Fold::push_run`]: the run kernel the contiguous lanes use, where an element at
    /// a time (Welford's update, an `exp` and a merge an element) was 20-35x slower than
    /// the same op along the last dim. A few rows (under 16) are still pushed row by row.
    fn push_columns(
        &self, states: &mut [Self::State], xs: &[T], stride: usize, nrows: usize,
        bits: Option<Bits<'_>>, idx0: i64,
    ) {
        let w = states.len();
        if push_few_rows(self, states, xs, (stride, nrows), bits, idx0) {
            return;
        }
        let tr = COLUMN_TILE_ROWS.min(nrows);
        let ld = masked_kernels::transpose::lane_stride::<T>(tr);
        let (rows, run, words) = &mut (
            vec![0u64; tr],
            vec![T::default(); w.min(64) * ld],
            vec![0u64; 64 * tr.div_ceil(64)],
        );
        for c0 in (0..w).step_by(64) {
            let cw = 64.min(w - c0);
            for r0 in (0..nrows).step_by(tr) {
                let rn = tr.min(nrows - r0);
                let first = r0 * stride + c0;
                // the columns as runs, one after another (a transpose straight from the
                // rows), and their validity words (each row's word, then a bit
                // transpose)
                masked_kernels::transpose::transpose(&xs[first..], (rn, cw, stride), run, ld);
                let nw = rn.div_ceil(64);
                if let Some(b) = bits {
                    let rows = &mut rows[..rn];
                    masked_kernels::run::tile_words(b, |i| first + i * stride, rows);
                    masked_kernels::bits::columns_bits(rows, cw, &mut words[..cw * nw]);
                }
                for (j, s) in states[c0..c0 + cw].iter_mut().enumerate() {
                    let rb = bits.map(|_| Bits::new(&words[j * nw..j * nw + nw], 0));
                    self.push_run(s, &run[j * ld..j * ld + rn], rb, idx0 + r0 as i64);
                }
            }
        }
    }

    /// Adds `count` valid zeros at lane positions `idx, idx + 1, ...` (a sparse lane's
    /// unstored elements when every position is valid). The default builds the state of
    /// `count` zeros by doubling with [`Fold::merge`] (O(log count) merges, never
    /// `count` pushes) and merges it in; it is exact for every op whose merge is, and for
    /// positional ops where equal values at later positions never win (argmax, argmin:
    /// the first index among ties).
    fn push_zeros(&self, state: &mut Self::State, count: u64, idx: i64) {
        if count == 0 {
            return;
        }
        let mut unit = self.identity();
        self.push(&mut unit, T::default(), idx);
        let mut acc: Option<Self::State> = None;
        let mut n = count;
        while n > 0 {
            if n & 1 == 1 {
                acc = Some(match acc {
                    None => unit.clone(),
                    Some(mut a) => {
                        self.merge(&mut a, unit.clone());
                        a
                    }
                });
            }
            n >>= 1;
            if n > 0 {
                let copy = unit.clone();
                self.merge(&mut unit, copy);
            }
        }
        if let Some(a) = acc {
            self.merge(state, a);
        }
    }

    /// Folds one whole lane from scratch (convenience over `push_run`).
    fn fold_slice(&self, xs: &[T], bits: Option<Bits<'_>>) -> Self::State {
        let mut s = self.identity();
        self.push_run(&mut s, xs, bits, 0);
        s
    }
}

// ---------------------------------------------------------------- the engine's folds

// The kernel values of the engine's reductions, declared beside the trait (their `Fold`
// impls are in `ops` and `stats`) so that the list of kernels the layouts compile in
// their own crates (`FoldRef`, the core's `compiled` module) names them from here.

/// Masked sum. Integers accumulate in `i64` (wrapping); floats in vector blocks then `f64`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sum;

/// Masked product, accumulated in `T::Total` (f64 for floats, wrapping i64 for integers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prod;

/// Masked maximum; NaN at a valid position propagates; `-inf` / integer MIN when fully masked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AMax;

/// Masked minimum; NaN at a valid position propagates; `+inf` / integer MAX when fully masked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AMin;

/// Masked peak to peak, `amax - amin`, in the wide type (`i64` for integers, so an `i32`
/// range never overflows; `i64` wraps); NaN at a valid position propagates; 0 when fully
/// masked. The state is the pair (amax, amin), so partial states merge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ptp;

/// Index of the masked maximum along the lane (first among ties; the first valid NaN
/// wins; 0 when fully masked). Index type `i64`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArgMax;

/// Index of the masked minimum along the lane (first among ties; the first valid NaN
/// wins; 0 when fully masked). Index type `i64`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArgMin;

/// Masked mean: an exact-as-possible sum and a count; NaN when fully masked. Floats sum
/// in vector blocks then `f64`; `i32` in `i64` and `i64` in `i128`, so an integer mean
/// never wraps and is exact up to the final division.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mean;

/// Number of valid elements (valid everywhere, even for a fully masked lane).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count;

/// Masked variance `sum((x - mean)^2) / max(count - correction, 0)`; NaN when fully
/// masked. Stable (two passes per block, Chan merges), mergeable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Var {
    /// Subtracted from the count in the denominator (1 = Bessel's correction).
    pub correction: f64,
}

/// Masked standard deviation: the square root of [`Var`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Std {
    /// Subtracted from the count in the denominator (1 = Bessel's correction).
    pub correction: f64,
}

/// Masked vector norm of order `ord` over the valid elements: `ord` > 0 finite
/// `(sum |x|^ord)^(1/ord)`; 0 counts non-zero elements; `inf` is max |x|; `-inf` min |x|;
/// a negative finite `ord` uses the valid elements only (torch returns 0 there because
/// masked-out zeros take part: not copied). Fully masked: 0, or `+inf` for `-inf` and
/// negative `ord`. Computed in f64.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Norm {
    pub(crate) kind: u8,
    pub(crate) ord: f64,
}

/// Masked `log(sum(exp(x)))`, overflow-safe (max-shifted), mergeable: the state is the
/// running max and the sum of `exp(x - max)`. A valid `+inf` gives `+inf`, a valid NaN
/// NaN; a lane whose valid values are all `-inf`, or a fully masked lane, gives `-inf`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogSumExp;

/// Masked `log(mean(exp(x)))`: logsumexp minus the log of the valid count, overflow-safe
/// and mergeable (logsumexp's state and the count). A valid `+inf` gives `+inf`, a valid
/// NaN NaN, valid values all `-inf` give `-inf`; a fully masked lane gives NaN (the mean
/// of nothing, as `mean`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogMeanExp;

/// Declares one family of the kernel list: the borrowed value enum, the trait a layout
/// entry's output implements, the output enum and its [`Family`](crate::element::Family).
/// The lists: [`fold_list!`](crate::fold_list) here, `stat_list!` and `map_list!` in
/// `lane` (the core's `compiled` module says how the layouts use them).
macro_rules! kernel_enums {
    ($fam:literal $Tr:ident, $Ref:ident, $Output:ident, $OutputOf:ident, $Entry:ident
        [$($var:ident: $k:ty),* $(,)?]) => {
        #[doc = concat!("A listed [`", stringify!($Tr), "`] value, borrowed: what a layout's ",
            "compiled entries dispatch on.")]
        #[derive(Debug, Clone, Copy)]
        pub enum $Ref<'k> {
            $( #[doc = concat!("The listed type `", stringify!($var), "` (its type in the list).")]
                $var(&'k $k), )*
        }

        #[doc = concat!("What a layout entry of the ", $fam, " family computes: its `Out` type ",
            "for `T` and each listed kernel type.")]
        pub trait $Entry<'a> {
            /// The entry's result for dtype `T` and kernel type `K`.
            type Out<T: Element, K: $Tr<T>>;
        }

        #[doc = concat!("A layout entry's result for one listed [`", stringify!($Tr),
            "`] type: the variant is the kernel type's.")]
        pub enum $Output<'a, T: Element, E: $Entry<'a>> {
            $( #[doc = concat!("The result for the listed type `", stringify!($var), "`.")]
                $var(E::Out<T, $k>), )*
        }

        #[doc = concat!("The family of [`", stringify!($Output), "`] over the dtype.")]
        pub struct $OutputOf<'a, E>(std::marker::PhantomData<(&'a (), E)>);

        impl<'a, E: $Entry<'a>> crate::element::Family for $OutputOf<'a, E> {
            type Of<T: Element> = $Output<'a, T, E>;
        }

        // a type named in the list must be flagged (or its entries would never be called)
        $( const _: () = assert!(<$k as $Tr<f32>>::PREBUILT, "a listed type not flagged"); )*
    };
}
pub(crate) use kernel_enums;

/// The items of a listed kernel type's impl: `listed!(fold T, Variant)` (or `stat`, `map`)
/// in `impl<T: Element> Fold<T> for Type` sets `PREBUILT` and names the variant of the
/// family's value and output enums that holds the type. A fold declares its name there
/// too, and whether it is order-free (not [`Fold::positional`]):
/// `listed!(fold T, Sum, "sum", order_free)`. In a kernel trait's definition,
/// `listed!(defaults Trait<T>, family, Ref, Output, Entry)` declares those items with
/// their defaults (an unlisted type).
macro_rules! listed {
    (defaults $Tr:ident<$T:ident>, $family:ident, $Ref:ident, $Output:ident, $Entry:ident) => {
        /// Whether this kernel value type is listed (the core's `compiled` module: the
        /// engine's own ops are; a new op type starts unlisted): for a dtype with
        /// [`Element::PREBUILT`](crate::Element::PREBUILT), the layouts' dispatchers then
        /// call the kernel compiled in their own crate and the generic one is not
        /// instantiated in the calling crate at all.
        #[doc = concat!(
            "Set with [`", stringify!($Tr), "::listed`] and [`", stringify!($Tr),
            "::take`] by the list's items (`listed!(", stringify!($family), " T, Variant)`)."
        )]
        #[doc(hidden)]
        const PREBUILT: bool = false;
        /// This value as its variant of the list (`None`: not listed).
        #[doc(hidden)]
        fn listed(&self) -> Option<$Ref<'_>> {
            None
        }
        /// A compiled entry's result for this listed type, out of its variant.
        #[doc(hidden)]
        fn take<'a, E: $Entry<'a>>(out: $Output<'a, $T, E>) -> E::Out<$T, Self>
        where
            Self: Sized,
        {
            drop(out);
            unreachable!("take on an unlisted kernel type")
        }
    };
    (fold $T:ident, $v:ident) => {
        $crate::fold::listed!(@items $T, $v, fold, FoldRef, FoldOutput, FoldEntry);
    };
    (fold $T:ident, $v:ident, $name:expr) => {
        $crate::fold::listed!(fold $T, $v);
        fn name(&self) -> &'static str {
            $name
        }
    };
    (fold $T:ident, $v:ident, $name:expr, order_free) => {
        $crate::fold::listed!(fold $T, $v, $name);
        fn positional(&self) -> bool {
            false
        }
    };
    (stat $T:ident, $v:ident) => {
        $crate::fold::listed!(@items $T, $v, lane, StatRef, StatOutput, StatEntry);
    };
    (map $T:ident, $v:ident) => {
        $crate::fold::listed!(@items $T, $v, lane, MapRef, MapOutput, MapEntry);
    };
    (@items $T:ident, $v:ident, $m:ident, $Ref:ident, $Output:ident, $Entry:ident) => {
        const PREBUILT: bool = true;
        fn listed(&self) -> Option<$crate::$m::$Ref<'_>> {
            Some($crate::$m::$Ref::$v(self))
        }
        fn take<'a, E: $crate::$m::$Entry<'a>>(out: $crate::$m::$Output<'a, $T, E>) -> E::Out<$T, Self> {
            match out {
                $crate::$m::$Output::$v(o) => o,
                #[allow(unreachable_patterns)]
                _ => unreachable!("an output of another kernel type"),
            }
        }
    };
}
pub(crate) use listed;

/// The fold family of the kernel list: every [`Fold`] type the layouts compile in their
/// own crates, as `Variant: type`. It calls back `$cb!` with its tokens followed by the
/// list in brackets. A new `Fold` type of the engine goes here, and `listed!(fold T,
/// Name)` in its impl.
#[doc(hidden)]
#[macro_export]
macro_rules! fold_list {
    ($cb:path, $($args:tt)*) => {
        $cb! { $($args)* [
            Sum: $crate::fold::Sum, Prod: $crate::fold::Prod, AMax: $crate::fold::AMax,
            AMin: $crate::fold::AMin, Ptp: $crate::fold::Ptp, ArgMax: $crate::fold::ArgMax,
            ArgMin: $crate::fold::ArgMin, Mean: $crate::fold::Mean, Count: $crate::fold::Count,
            Var: $crate::fold::Var, Std: $crate::fold::Std, Norm: $crate::fold::Norm,
            LogSumExp: $crate::fold::LogSumExp, LogMeanExp: $crate::fold::LogMeanExp,
        ] }
    };
}

crate::fold_list!(kernel_enums, "fold" Fold, FoldRef, FoldOutput, FoldOutputOf, FoldEntry);

/// The validity words of the nan-family's extra mask: bit `k` is `!values[k].is_nan()`,
/// ANDed with bit `k` of `prior` when a mask is already there. Every layout's
/// `without_nans` calls this: 64 compares per word in the vector kernel, 64K elements
/// per parallel task.
///
/// ```
/// use masked::core::not_nan_words;
/// let w = not_nan_words(&[1.0f64, f64::NAN, 3.0, 4.0], Some(&[0b0111]));
/// assert_eq!(w, vec![0b0101]);
/// ```
pub fn not_nan_words<T: crate::Element>(values: &[T], prior: Option<&[u64]>) -> Vec<u64> {
    let mut words = vec![0u64; values.len().div_ceil(64)];
    let chunk = 1 << 16;
    masked_kernels::par::chunks_mut(&mut words, chunk / 64, |c, w| {
        let xs = &values[c * chunk..((c + 1) * chunk).min(values.len())];
        pred_bits(
            xs,
            w,
            #[inline(always)]
            move |x: T| !x.is_nan(),
        )
    });
    if let Some(p) = prior {
        for (w, &m) in words.iter_mut().zip(p) {
            *w &= m;
        }
    }
    words
}
