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
    /// Whether this kernel value type is one of `prebuilt_kernels!`'s list (the engine's
    /// own ops set it; a new op type starts unlisted): for a dtype with
    /// [`Element::PREBUILT`](crate::Element::PREBUILT), the layouts' dispatchers then call their own compiled
    /// kernel and the generic one is not instantiated in the calling crate at all. A
    /// listed type without it, or a flagged type missing from the list, fails the
    /// prebuilt test (`tests/tests/prebuilt.rs`).
    #[doc(hidden)]
    const PREBUILT: bool = false;

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

    /// [`Fold::push_run`] over `xs[..n]`, where the caller vouches that `xs[n..]` may be
    /// read (it is never combined): the rows of one array (a CSR matrix's values) pass
    /// the values from the row's start on, and an op whose kernel ends a run with whole
    /// vectors ([`fold_run_within`](masked_kernels::run::fold_run_within)) overrides
    /// this. Bit for bit `push_run(&xs[..n])`, which the default calls.
    fn push_run_within(
        &self,
        state: &mut Self::State,
        xs: &[T],
        n: usize,
        bits: Option<Bits<'_>>,
        idx0: i64,
    ) {
        self.push_run(state, &xs[..n], bits, idx0);
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
    fn push_pair_run<A: Copy, B: Copy, Z: Fn(A, B) -> T + Copy>(
        &self,
        state: &mut Self::State,
        xs: &[A],
        ys: &[B],
        f: Z,
        bits: Option<Bits<'_>>,
        idx0: i64,
    ) -> bool {
        let _ = (state, xs, ys, f, bits, idx0);
        false
    }

    /// Adds element `k` of `xs` to `states[k]`, all at lane position `idx` (the column
    /// sweep: one step along many lanes at once).
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
    /// into `states[k]` at lane position `idx0 + r`. Ops override this with a
    /// [`fold_columns`](masked_kernels::run::fold_columns) call; the default pushes row by row.
    fn push_columns(
        &self,
        states: &mut [Self::State],
        xs: &[T],
        stride: usize,
        nrows: usize,
        bits: Option<Bits<'_>>,
        idx0: i64,
    ) {
        let w = states.len();
        for r in 0..nrows {
            let row = &xs[r * stride..r * stride + w];
            self.push_each(
                states,
                row,
                bits.map(|b| b.offset(r * stride)),
                idx0 + r as i64,
            );
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
        pred_bits(xs, w, move |x: T| !x.is_nan())
    });
    if let Some(p) = prior {
        for (w, &m) in words.iter_mut().zip(p) {
            *w &= m;
        }
    }
    words
}
