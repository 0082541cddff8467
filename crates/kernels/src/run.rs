//! The run kernels: an elementwise monoid ([`Lanes`]) folded over a contiguous run of
//! values under a bit mask ([`fold_run`]), across the columns of a block of rows
//! ([`fold_columns`]), and the elementwise map, update, predicate and search loops, each
//! compiled per CPU tier by [`multiversion!`](crate::multiversion).

// index loops on purpose (the note above `map_kernel`)
#![allow(clippy::needless_range_loop)]

use crate::bits::Bits;
use crate::multiversion;

/// How far ahead of a masked loop's reads [`prefetch_chunk`] asks for the data: 4 KiB
/// (one page; 1, 2 and 4 KiB measured, 4 the fastest).
const PREFETCH_AHEAD: usize = 4096;

/// Prefetches the cache lines of the 64-element chunk starting at `xs[at]`,
/// [`PREFETCH_AHEAD`] bytes ahead, on x86 (nothing elsewhere). The masked loops call it
/// once per chunk: selecting a loaded value or a constant by a mask bit is what LLVM
/// compiles to a masked load (`vmovups (mem), zmm{k}{z}`), and on AMD Zen those stream
/// from memory at half the speed of plain loads (cache-resident, all forms ran alike;
/// the hardware prefetcher, as far as the numbers show, does not follow them). Streaming
/// 64 MiB under a 50% mask at one thread (EPYC, AVX-512): masked loads 21 GB/s, with
/// this 53 GB/s, plain loads without a mask 43 GB/s. Only in a run of at least [`PREFETCH_AHEAD`] bytes, which reads on past
/// its end (a block of a longer array, a row of a matrix: its successor is next in
/// memory); a short run (a sparse row, a stack block of widened halves) is in cache
/// already (f16 `add`, whose f32 blocks are 2 KiB, was 1.5x slower prefetching past
/// them). Not for 2-byte values (the halves): their loads widen (F16C) and are not
/// masked, and the prefetches cost an f16 sum 1.12x. A prefetch never faults, whatever
/// the address.
#[inline(always)]
fn prefetch_chunk<T>(xs: &[T], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if size_of::<T>() >= 4 && size_of_val(xs) >= PREFETCH_AHEAD {
        let base = xs
            .as_ptr()
            .wrapping_add(at)
            .cast::<i8>()
            .wrapping_add(PREFETCH_AHEAD);
        let mut line = 0;
        while line < 64 * size_of::<T>() {
            // SAFETY: SSE is baseline on x86_64; a prefetch reads nothing the program
            // sees and never faults
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                    base.wrapping_add(line),
                )
            };
            line += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (xs, at);
}

/// Copies a tile of `w <= 64` neighbouring columns a row at a time: row `i` of the tile
/// (`tile[i * w..i * w + w]`, `tile.len() / w` rows) is `xs[row(i)..row(i) + w]`, and
/// `rows[i]` its validity bits, bit `k` for column `k` (left as it is without `bits`).
/// The statistics along outer dims whose lanes' elements are not a constant stride
/// apart read their lanes out of it ([`crate::transpose::transpose`],
/// [`crate::bits::columns_bits`]): one contiguous copy and one word a row, where a lane
/// at a time read a cache line and tested a bit per element. Lanes a stride apart are
/// transposed straight from the rows, with [`tile_words`] (a copy a row first cost a
/// `memcpy` call a row: a quarter of a variance over dim 0).
#[inline]
pub fn gather_tile<T: Copy>(
    xs: &[T], bits: Option<Bits<'_>>, w: usize, row: impl Fn(usize) -> usize, tile: &mut [T],
    rows: &mut [u64],
) {
    // the word read beside its row's copy ([`tile_words`] in a second pass over the
    // rows measured 5-7% slower on a 4096² median and variance along dim 0)
    for i in 0..tile.len() / w {
        let at = row(i);
        tile[i * w..i * w + w].copy_from_slice(&xs[at..at + w]);
        if let Some(b) = bits {
            rows[i] = b.word_at(at);
        }
    }
}

/// The validity word of each row of a tile read in place (no copy of its values, as
/// [`gather_tile`] makes): `rows[i]` holds the 64 bits of `bits` from `row(i)` (bit `k`
/// for the tile's column `k`), what [`crate::bits::columns_bits`] turns into each
/// column's bits.
#[inline]
pub fn tile_words(bits: Bits<'_>, row: impl Fn(usize) -> usize, rows: &mut [u64]) {
    for (i, r) in rows.iter_mut().enumerate() {
        *r = bits.word_at(row(i));
    }
}

/// An elementwise monoid the vector kernel evaluates: `lift` each valid element,
/// `comb`ine with the accumulator, `id` for masked-out ones. `comb` must be associative
/// and commutative (the kernel keeps independent accumulators and combines them in a
/// tree), and `id` must be its identity.
pub trait Lanes<T> {
    /// Accumulator of one vector lane.
    type A: Copy;
    /// Whether `lift` is expensive (an `exp`, a polynomial). With a mask, the kernel then
    /// packs the valid elements together first (AVX-512 compress) and lifts only those,
    /// or, without AVX-512, lifts 64 elements in a plain loop (which the loop vectoriser
    /// handles) before combining. A HEAVY `lift` must not depend on the position.
    const HEAVY: bool = false;
    /// Whether `comb` gives the same value in any order and grouping (a maximum, a
    /// minimum: up to the sign of a zero that ties with its negation and the payload of
    /// a NaN; not a float sum, whose rounding depends on the order). The kernel then
    /// keeps twice the accumulators, two chunks' worth, so that the compare-and-select
    /// chains overlap (a masked maximum is a compare, an OR and a blend deep: with one
    /// chunk's accumulators the chain, not the loads, set the pace).
    const ORDER_FREE: bool = false;
    /// Identity of `comb`.
    fn id(&self) -> Self::A;
    /// A valid element at lane position `idx`.
    fn lift(&self, x: T, idx: i64) -> Self::A;
    /// Combines two accumulators.
    fn comb(&self, a: Self::A, b: Self::A) -> Self::A;
}

/// Independent accumulators per kernel call: enough to hide add latency and fill two
/// 512-bit registers for 32-bit lanes.
const W: usize = 32;
// the masked kernel tests a 32-bit half word per group of `W` lanes
const _: () = assert!(W == 32);

/// The function [`map_run`] applies at each element: any `Fn(T, bool) -> O` closure, or
/// a type whose `at` is an `#[inline(always)]` method. A large closure (erf, asinh: a
/// hundred-odd instructions after inlining) is compiled once, in one codegen unit, and
/// the kernels in another call it out of line, element by element (measured: f32 erf
/// 4x slower); an inlined method is copied into every unit, so the loop vectorises.
pub trait ElemMap<T, O>: Copy {
    /// The output at an element `x`, valid or not.
    fn at(&self, x: T, valid: bool) -> O;
}

impl<T, O, F: Fn(T, bool) -> O + Copy> ElemMap<T, O> for F {
    #[inline(always)]
    fn at(&self, x: T, valid: bool) -> O {
        self(x, valid)
    }
}

// The kernels below index their slices in plain loops, with no iterator adapters (`zip`,
// `enumerate`, `chunks_exact`, `array::from_fn`): those are std functions without the
// kernel's CPU features, and LLVM does not inline a function of fewer features into a
// kernel while it still calls one it cannot see with two-word values (a slice, an
// `Option<usize>`), as some of them do (`Zip::new` through `size`, `ChunksExact`'s
// `__iterator_get_unchecked`) where another codegen unit holds that one. They were then
// called out of line, element by element or chunk by chunk, and the loops not
// vectorised (f32 `exp` 3x, sparse attention 17x slower), since the crate's units are
// not optimised together (`lto = "off"`; docs/internals.md).

#[inline(always)]
fn map_kernel<T: Copy, O: Copy, F: ElemMap<T, O>>(
    xs: &[T], bits: Option<Bits<'_>>, out: &mut [O], f: F,
) {
    let n = xs.len().min(out.len());
    let (xs, out) = (&xs[..n], &mut out[..n]);
    match bits {
        None => {
            for k in 0..n {
                out[k] = f.at(xs[k], true);
            }
        }
        Some(b) => {
            let full = n - n % 64;
            for c in 0..full / 64 {
                prefetch_chunk(xs, c * 64);
                let w = b.word_at(c * 64);
                let r = c * 64..c * 64 + 64;
                let (xc, oc) = (&xs[r.clone()], &mut out[r]);
                for h in 0..2 {
                    // 32-bit half words: the bit tests become 32-bit vector shifts
                    let hw = (w >> (32 * h)) as u32;
                    for j in 0..32 {
                        oc[32 * h + j] = f.at(xc[32 * h + j], (hw >> j) & 1 == 1);
                    }
                }
            }
            if full < n {
                let w = b.word_at(full);
                for k in full..n {
                    out[k] = f.at(xs[k], (w >> (k - full)) & 1 == 1);
                }
            }
        }
    }
}

#[inline(always)]
fn zip_kernel<A: Copy, B: Copy, O: Copy, F: Fn(A, B, bool) -> O + Copy>(
    xs: &[A], ys: &[B], bits: Option<Bits<'_>>, out: &mut [O], f: F,
) {
    let n = xs.len().min(ys.len()).min(out.len());
    let (xs, ys, out) = (&xs[..n], &ys[..n], &mut out[..n]);
    match bits {
        None => {
            for k in 0..n {
                out[k] = f(xs[k], ys[k], true);
            }
        }
        Some(b) => {
            let full = n - n % 64;
            for c in 0..full / 64 {
                prefetch_chunk(xs, c * 64);
                prefetch_chunk(ys, c * 64);
                let w = b.word_at(c * 64);
                let r = c * 64..c * 64 + 64;
                let (xc, yc, oc) = (&xs[r.clone()], &ys[r.clone()], &mut out[r]);
                for h in 0..2 {
                    let hw = (w >> (32 * h)) as u32;
                    for j in 0..32 {
                        oc[32 * h + j] = f(xc[32 * h + j], yc[32 * h + j], (hw >> j) & 1 == 1);
                    }
                }
            }
            if full < n {
                let w = b.word_at(full);
                for k in full..n {
                    out[k] = f(xs[k], ys[k], (w >> (k - full)) & 1 == 1);
                }
            }
        }
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn pair_kernel<
    A: Copy,
    B: Copy,
    C: Copy,
    P: Copy,
    Q: Copy,
    F: Fn(A, B, C, bool) -> (P, Q) + Copy,
>(
    xs: &[A], ys: &[B], zs: &[C], bits: Option<Bits<'_>>, out_p: &mut [P], out_q: &mut [Q], f: F,
) {
    let n = xs
        .len()
        .min(ys.len())
        .min(zs.len())
        .min(out_p.len())
        .min(out_q.len());
    let (xs, ys, zs, out_p, out_q) = (
        &xs[..n],
        &ys[..n],
        &zs[..n],
        &mut out_p[..n],
        &mut out_q[..n],
    );
    let full = n - n % 64;
    for c in 0..full / 64 {
        if bits.is_some() {
            prefetch_chunk(xs, c * 64);
            prefetch_chunk(ys, c * 64);
            prefetch_chunk(zs, c * 64);
        }
        let w = bits.map_or(u64::MAX, |b| b.word_at(c * 64));
        let r = c * 64..c * 64 + 64;
        let (xc, yc, zc) = (&xs[r.clone()], &ys[r.clone()], &zs[r.clone()]);
        let (pc, qc) = (&mut out_p[r.clone()], &mut out_q[r]);
        for h in 0..2 {
            // 32-bit half words, as in `map_kernel`
            let hw = (w >> (32 * h)) as u32;
            for j in 0..32 {
                let k = 32 * h + j;
                let (p, q) = f(xc[k], yc[k], zc[k], (hw >> j) & 1 == 1);
                pc[k] = p;
                qc[k] = q;
            }
        }
    }
    if full < n {
        let w = bits.map_or(u64::MAX, |b| b.word_at(full));
        for k in full..n {
            let (p, q) = f(xs[k], ys[k], zs[k], (w >> (k - full)) & 1 == 1);
            out_p[k] = p;
            out_q[k] = q;
        }
    }
}

#[inline(always)]
fn around_kernel<T: Copy, K: Copy + PartialOrd, F: Fn(T) -> K + Copy>(
    xs: &[T], v: K, lo: K, hi: K, key: F,
) -> (usize, usize, K, K) {
    // independent accumulators of selects, which vectorise (a branch per element
    // mispredicts half the time on random data); 32-bit counts, flushed per block
    const W: usize = 16;
    const BLOCK: usize = W << 20;
    let (mut less, mut eq) = (0usize, 0usize);
    let (mut bm, mut am) = ([lo; W], [hi; W]);
    let mut start = 0;
    while start < xs.len() {
        let block = &xs[start..xs.len().min(start + BLOCK)];
        start += block.len();
        let (mut lc, mut ec) = ([0u32; W], [0u32; W]);
        let full = block.len() - block.len() % W;
        for c in 0..full / W {
            let ch = &block[c * W..c * W + W];
            for k in 0..W {
                let x = key(ch[k]);
                lc[k] += (x < v) as u32;
                ec[k] += (x == v) as u32;
                let b = if x < v { x } else { lo };
                let a = if x > v { x } else { hi };
                bm[k] = if b > bm[k] { b } else { bm[k] };
                am[k] = if a < am[k] { a } else { am[k] };
            }
        }
        for k in 0..block.len() - full {
            let x = key(block[full + k]);
            lc[k] += (x < v) as u32;
            ec[k] += (x == v) as u32;
            if x < v && x > bm[k] {
                bm[k] = x;
            }
            if x > v && x < am[k] {
                am[k] = x;
            }
        }
        for k in 0..W {
            less += lc[k] as usize;
            eq += ec[k] as usize;
        }
    }
    let (mut below, mut above) = (lo, hi);
    for k in 0..W {
        below = if bm[k] > below { bm[k] } else { below };
        above = if am[k] < above { am[k] } else { above };
    }
    (less, eq, below, above)
}

#[inline(always)]
fn pred_kernel<T: Copy, P: Fn(T) -> bool + Copy>(xs: &[T], out: &mut [u64], pred: P) {
    // whole words as chunks of 64 (a constant trip count: a chunk of variable length
    // compiled to a slower loop), then the partial one
    let (chunks, tail) = xs.as_chunks::<64>();
    let full = chunks.len().min(out.len());
    for c in 0..full {
        let ch = &chunks[c];
        let mut bits = 0u64;
        for k in 0..64 {
            bits |= (pred(ch[k]) as u64) << k;
        }
        out[c] = bits;
    }
    if full == chunks.len() && full < out.len() && !tail.is_empty() {
        let mut bits = 0u64;
        for k in 0..tail.len() {
            bits |= (pred(tail[k]) as u64) << k;
        }
        out[full] = bits;
    }
}

#[inline(always)]
fn update_kernel<O: Copy, F: Fn(O, bool) -> O + Copy>(out: &mut [O], bits: Option<Bits<'_>>, f: F) {
    let Some(b) = bits else {
        // a loop of its own: through the masked one below, with an all-ones word, the
        // vectoriser made gathers and scatters of a scale in place (a 4096-wide softmax
        // lane 1.6x slower)
        for o in out.iter_mut() {
            *o = f(*o, true);
        }
        return;
    };
    let n = out.len();
    let full = n - n % 64;
    for c in 0..full / 64 {
        prefetch_chunk(out, c * 64);
        let w = b.word_at(c * 64);
        let oc = &mut out[c * 64..c * 64 + 64];
        for h in 0..2 {
            // 32-bit half words, as in `map_kernel`
            let hw = (w >> (32 * h)) as u32;
            for j in 0..32 {
                oc[32 * h + j] = f(oc[32 * h + j], (hw >> j) & 1 == 1);
            }
        }
    }
    if full < n {
        let w = b.word_at(full);
        for k in full..n {
            out[k] = f(out[k], (w >> (k - full)) & 1 == 1);
        }
    }
}

#[inline(always)]
fn update_zip_kernel<O: Copy, B: Copy, F: Fn(O, B, bool) -> O + Copy>(
    out: &mut [O], ys: &[B], bits: Option<Bits<'_>>, f: F,
) {
    let n = out.len().min(ys.len());
    let (out, ys) = (&mut out[..n], &ys[..n]);
    let Some(b) = bits else {
        for k in 0..n {
            out[k] = f(out[k], ys[k], true);
        }
        return;
    };
    let full = n - n % 64;
    for c in 0..full / 64 {
        prefetch_chunk(out, c * 64);
        let w = b.word_at(c * 64);
        let (oc, yc) = (&mut out[c * 64..c * 64 + 64], &ys[c * 64..c * 64 + 64]);
        for h in 0..2 {
            // 32-bit half words, as in `map_kernel`
            let hw = (w >> (32 * h)) as u32;
            for j in 0..32 {
                oc[32 * h + j] = f(oc[32 * h + j], yc[32 * h + j], (hw >> j) & 1 == 1);
            }
        }
    }
    if full < n {
        let w = b.word_at(full);
        for k in full..n {
            out[k] = f(out[k], ys[k], (w >> (k - full)) & 1 == 1);
        }
    }
}

#[inline(always)]
fn sum8_kernel<A: Copy, B: Copy, F: Fn(A, B) -> f64 + Copy>(xs: &[A], ys: &[B], f: F) -> [f64; 8] {
    // accumulator `k % 8` takes term `k`, in order: eight independent sums that fill one
    // 512-bit (two 256-bit) registers, and the same sums as a scalar loop would give
    let n = xs.len().min(ys.len());
    let (xs, ys) = (&xs[..n], &ys[..n]);
    let full = n - n % 8;
    // two halves of four: the loop vectoriser keeps them in whole registers (one
    // array of eight was split 2 + 4 + 1 + 1)
    let (mut lo, mut hi) = ([0.0f64; 4], [0.0f64; 4]);
    for c in 0..full / 8 {
        let (xc, yc) = (&xs[c * 8..c * 8 + 8], &ys[c * 8..c * 8 + 8]);
        let mut t = [0.0f64; 8];
        for i in 0..8 {
            t[i] = f(xc[i], yc[i]);
        }
        for i in 0..4 {
            lo[i] += t[i];
            hi[i] += t[i + 4];
        }
    }
    let mut acc = [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]];
    for k in full..n {
        acc[k - full] += f(xs[k], ys[k]);
    }
    acc
}

#[inline(always)]
fn fill_kernel<O: Copy>(out: &mut [O], bits: Bits<'_>, on: O, off: O) {
    // a fixed-size chunk per mask word: the loop vectoriser then blends and stores along
    // the chunk (the half-word form of `update_kernel`, with no load to tie it there,
    // was vectorised across chunks instead, into scatters)
    let n = out.len();
    let full = n - n % 64;
    for c in 0..full / 64 {
        let oc = &mut out[c * 64..c * 64 + 64];
        let w = bits.word_at(c * 64);
        for j in 0..64 {
            oc[j] = if (w >> j) & 1 == 1 { on } else { off };
        }
    }
    if full < n {
        let w = bits.word_at(full);
        for k in full..n {
            out[k] = if (w >> (k - full)) & 1 == 1 { on } else { off };
        }
    }
}

#[inline(always)]
fn first_kernel<T: Copy, P: Fn(T) -> bool + Copy>(
    xs: &[T], bits: Option<Bits<'_>>, pred: P,
) -> Option<usize> {
    let (chunks, tail) = xs.as_chunks::<64>();
    for c in 0..chunks.len() {
        let ch = &chunks[c];
        // the compares' OR first (one mask-register test a chunk); the exact bits only
        // where some element matches. Building the 64 bits in every chunk compiled to
        // a horizontal OR of shifted vectors
        let mut any = false;
        for k in 0..64 {
            any |= pred(ch[k]);
        }
        if any && let Some(k) = first_in(ch, bits.map(|b| b.word_at(c * 64)), pred) {
            return Some(c * 64 + k);
        }
    }
    let base = chunks.len() * 64;
    first_in(tail, bits.map(|b| b.word_at(base)), pred).map(|k| base + k)
}

/// The first element of `ch` (at most 64) valid by `word` (`None`: all) that
/// satisfies `pred`.
#[inline(always)]
fn first_in<T: Copy, P: Fn(T) -> bool + Copy>(
    ch: &[T], word: Option<u64>, pred: P,
) -> Option<usize> {
    let mut hit = 0u64;
    for k in 0..ch.len() {
        hit |= (pred(ch[k]) as u64) << k;
    }
    hit &= word.unwrap_or(u64::MAX);
    (hit != 0).then(|| hit.trailing_zeros() as usize)
}

#[inline(always)]
fn columns_kernel<T: Copy, L: Lanes<T>>(
    l: &L, acc: &mut [L::A], xs: &[T], stride: usize, nrows: usize, bits: Option<Bits<'_>>,
    idx0: i64,
) {
    let w = acc.len();
    let full = w - w % 64;
    for r in 0..nrows {
        let row = &xs[r * stride..r * stride + w];
        let idx = idx0 + r as i64;
        match bits {
            None => {
                for k in 0..w {
                    acc[k] = l.comb(acc[k], l.lift(row[k], idx));
                }
            }
            Some(b) => {
                let b = b.offset(r * stride);
                for c in 0..full / 64 {
                    prefetch_chunk(row, c * 64);
                    let cr = c * 64..c * 64 + 64;
                    let (ac, xc) = (&mut acc[cr.clone()], &row[cr]);
                    let word = b.word_at(c * 64);
                    for k in 0..64 {
                        let v = if (word >> k) & 1 == 1 {
                            l.lift(xc[k], idx)
                        } else {
                            l.id()
                        };
                        ac[k] = l.comb(ac[k], v);
                    }
                }
                if full < w {
                    let word = b.word_at(full);
                    for k in full..w {
                        if (word >> (k - full)) & 1 == 1 {
                            acc[k] = l.comb(acc[k], l.lift(row[k], idx));
                        }
                    }
                }
            }
        }
    }
}

/// Folds `xs` (element `k` at lane position `idx0 + k`, valid where bit `k` of `bits` is
/// set) with the monoid `L`, in the fastest kernel this CPU supports. A run of at most
/// [`SHORT`] elements (a sparse lane of a few entries) takes [`short_kernel`] inline:
/// the same result as every tier gives, without the tier dispatch and its call.
#[inline(always)]
pub fn fold_run<T: Copy, L: Lanes<T>>(l: &L, xs: &[T], bits: Option<Bits<'_>>, idx0: i64) -> L::A {
    fold_run_within(l, xs, xs.len(), bits, idx0)
}

/// [`fold_run`] over the run `xs[..n]` of a longer slice: the elements past `n` are never
/// combined, but a run's last partial step may read them as whole vectors and select
/// (where they are not there, that step is a conditional load per lane, or with a mask
/// a branch per element). Bit for bit `fold_run(l, &xs[..n], bits, idx0)`. For the rows
/// of one array (a CSR matrix's values, a dense array's lanes), pass the values from the
/// row's start on: one thread's sum over CSR rows of 100 entries took 0.66x the time,
/// over masked dense rows of 100 0.23x.
///
/// # Panics
/// If `n > xs.len()`.
#[inline(always)]
pub fn fold_run_within<T: Copy, L: Lanes<T>>(
    l: &L, xs: &[T], n: usize, bits: Option<Bits<'_>>, idx0: i64,
) -> L::A {
    if n <= SHORT {
        return short_kernel(l, &xs[..n], bits, idx0);
    }
    fold_wide_run(l, xs, n, bits, idx0)
}

multiversion! {
/// [`fold_run`] through the CPU tiers (the runs longer than [`SHORT`]).
    fn fold_wide_run[T: Copy, L: Lanes<T>](l: &L, xs: &[T], n: usize, bits: Option<Bits<'_>>, idx0: i64) -> L::A = wide_kernel;
}

multiversion! {
/// The column kernel: for each row `r < nrows`, combines element `k` of the row
/// (`xs[r * stride + k]`, at lane position `idx0 + r`, valid where bit `r * stride + k`
/// of `bits` is set) into `acc[k]`. Vectorises across the columns.
    pub fn fold_columns[T: Copy, L: Lanes<T>](
        l: &L,
        acc: &mut [L::A],
        xs: &[T],
        stride: usize,
        nrows: usize,
        bits: Option<Bits<'_>>,
        idx0: i64,
    ) = columns_kernel;
}

#[inline(always)]
fn columns_by_kernel<T: Copy, C: Copy, A: Copy, F: Fn(A, T, C) -> A + Copy>(
    f: F, acc: &mut [A], cs: &[C], xs: &[T], (stride, nrows): (usize, usize),
    bits: Option<Bits<'_>>,
) {
    let w = acc.len().min(cs.len());
    for r in 0..nrows {
        let at = r * stride;
        let xr = &xs[at..at + w];
        for lo in (0..w).step_by(64) {
            let word = bits.map_or(u64::MAX, |b| b.word_at(at + lo));
            if w - lo >= 64 {
                // a constant trip count: the loop vectorises
                let (xc, ac, cc) = (&xr[lo..lo + 64], &mut acc[lo..lo + 64], &cs[lo..lo + 64]);
                for k in 0..64 {
                    let v = f(ac[k], xc[k], cc[k]);
                    ac[k] = if (word >> k) & 1 == 1 { v } else { ac[k] };
                }
            } else {
                for k in lo..w {
                    if (word >> (k - lo)) & 1 == 1 {
                        acc[k] = f(acc[k], xr[k], cs[k]);
                    }
                }
            }
        }
    }
}

multiversion! {
/// The column kernel with a value of each column's own: for each row `r` (`shape`: the
/// rows' stride and count), `acc[k] = f(acc[k], xs[r * stride + k], cs[k])` where bit
/// `r * stride + k` of `bits` is set, in row order, in the fastest kernel this CPU
/// supports (the squared deviations of a variance from each column's mean).
    pub fn fold_columns_by[T: Copy, C: Copy, A: Copy, F: Fn(A, T, C) -> A + Copy](
        f: F,
        acc: &mut [A],
        cs: &[C],
        xs: &[T],
        shape: (usize, usize),
        bits: Option<Bits<'_>>,
    ) = columns_by_kernel;
}

/// The kernel of [`arg_columns`].
#[inline(always)]
fn arg_columns_kernel<T: Copy, B: Fn(T, T) -> bool + Copy, N: Fn(T) -> bool + Copy>(
    (better, nan): (B, N), best: &mut [T], row: &mut [u32], xs: &[T],
    (stride, nrows): (usize, usize), bits: Option<Bits<'_>>, r0: u32,
) {
    let w = best.len().min(row.len());
    #[inline(always)]
    fn step<T: Copy>(
        (better, nan): (impl Fn(T, T) -> bool, impl Fn(T) -> bool), valid: bool,
        (x, b, i): (T, &mut T, &mut u32), r: u32,
    ) {
        let (an, bn) = (nan(*b), nan(x));
        let take = valid & ((*i == u32::MAX) | (!an & bn) | (!an & !bn & better(x, *b)));
        *b = if take { x } else { *b };
        *i = if take { r } else { *i };
    }
    let f = (better, nan);
    for r in 0..nrows {
        let at = r * stride;
        let xr = &xs[at..at + w];
        let rr = r0 + r as u32;
        for lo in (0..w).step_by(64) {
            let word = bits.map_or(u64::MAX, |b| b.word_at(at + lo));
            if w - lo >= 64 {
                // a constant trip count: the loop vectorises
                let (xc, bc, ic) = (
                    &xr[lo..lo + 64],
                    &mut best[lo..lo + 64],
                    &mut row[lo..lo + 64],
                );
                for k in 0..64 {
                    step(f, (word >> k) & 1 == 1, (xc[k], &mut bc[k], &mut ic[k]), rr);
                }
            } else {
                for k in lo..w {
                    let v = (word >> (k - lo)) & 1 == 1;
                    step(f, v, (xr[k], &mut best[k], &mut row[k]), rr);
                }
            }
        }
    }
}

multiversion! {
/// The column sweep of an argmax / argmin over scratch rows, in the fastest kernel this
/// CPU supports (`cmp`: `better` and the NaN test; `shape`: the rows' stride and count):
/// for each row `r`, element `k` (`xs[r * stride + k]`, valid where bit `r * stride + k`
/// of `bits` is set) replaces `best[k]` and `row[k] = r0 + r` where the column has
/// nothing yet (`row[k] == u32::MAX`), or where it is a NaN and `best[k]` is not, or
/// where neither is a NaN and `better(x, best[k])`: a later row never wins a tie, a first
/// NaN stays.
    pub fn arg_columns[T: Copy, B: Fn(T, T) -> bool + Copy, N: Fn(T) -> bool + Copy](
        cmp: (B, N),
        best: &mut [T],
        row: &mut [u32],
        xs: &[T],
        shape: (usize, usize),
        bits: Option<Bits<'_>>,
        r0: u32,
    ) = arg_columns_kernel;
}

multiversion! {
/// Writes `out[k] = f(xs[k], valid_k)` for a run (valid where bit `k` of `bits` is set;
/// all valid for `None`), 64 elements per mask word, in the fastest kernel this CPU
/// supports: the per-element work of a lane map (softmax, normalize) vectorises here.
/// Pass a `move` closure: values captured by reference are reloaded after every store
/// to `out` (they might alias it), which keeps the loop scalar (8x slower for
/// log_softmax).
    pub fn map_run[T: Copy, O: Copy, F: ElemMap<T, O>](xs: &[T], bits: Option<Bits<'_>>, out: &mut [O], f: F) = map_kernel;
}

multiversion! {
/// Writes `out[k] = f(xs[k], ys[k], valid_k)` for two runs of one length: the binary
/// elementwise ops (`add`, `mul`, comparisons). As for [`map_run`], pass a `move`
/// closure.
    pub fn zip_run[A: Copy, B: Copy, O: Copy, F: Fn(A, B, bool) -> O + Copy](xs: &[A], ys: &[B], bits: Option<Bits<'_>>, out: &mut [O], f: F) = zip_kernel;
}

multiversion! {
/// Writes `(out_p[k], out_q[k]) = f(xs[k], ys[k], zs[k], valid_k)` for three runs of one
/// length: an elementwise map with two outputs (the two gradients of a binary op, from
/// both operands and the upstream). As for [`map_run`], pass a `move` closure.
    pub fn pair_run[A: Copy, B: Copy, C: Copy, P: Copy, Q: Copy, F: Fn(A, B, C, bool) -> (P, Q) + Copy](xs: &[A], ys: &[B], zs: &[C], bits: Option<Bits<'_>>, out_p: &mut [P], out_q: &mut [Q], f: F) = pair_kernel;
}

multiversion! {
/// Where `v` falls among the keys of `xs`: the number of keys below `v` and equal to
/// it, the largest key below (`lo` if none) and the smallest above (`hi` if none), by
/// `<` and `==` (NaN keys count nowhere). One pass of branch-free compares: a saved
/// median's or quantile's rank in its lane.
    pub fn around[T: Copy, K: Copy + PartialOrd, F: Fn(T) -> K + Copy](xs: &[T], v: K, lo: K, hi: K, key: F) -> (usize, usize, K, K) = around_kernel;
}

multiversion! {
/// In place: `out[k] = f(out[k], valid_k)`, in the fastest kernel this CPU supports.
    pub fn update_run[O: Copy, F: Fn(O, bool) -> O + Copy](out: &mut [O], bits: Option<Bits<'_>>, f: F) = update_kernel;
}

multiversion! {
/// In place with a second run: `out[k] = f(out[k], ys[k], valid_k)` over the common
/// length (a scale per column of values already written). As for [`map_run`], pass a
/// `move` closure.
    pub fn update_zip_run[O: Copy, B: Copy, F: Fn(O, B, bool) -> O + Copy](out: &mut [O], ys: &[B], bits: Option<Bits<'_>>, f: F) = update_zip_kernel;
}

multiversion! {
/// The eight partial sums of `f(xs[k], ys[k])` over the common length: term `k` is added,
/// in order, to partial sum `k % 8`. The same eight sums as that scalar loop gives, bit
/// for bit (no reassociation, no fused multiply-add), in vector registers. Pass a `move`
/// closure.
    pub fn sum8_run[A: Copy, B: Copy, F: Fn(A, B) -> f64 + Copy](xs: &[A], ys: &[B], f: F) -> [f64; 8] = sum8_kernel;
}

multiversion! {
/// [`fold_run`] over the values `f(xs[k], ys[k])` of two runs (over the common length),
/// computed in registers and never written out: the same result, bit for bit, as
/// [`fold_run`] over those values in a slice (positions without a valid bit are not
/// combined, whatever `f` gives there). For lanes that are not `HEAVY` (those fold
/// packed values). A fused elementwise-then-reduce reads its two operands here.
    pub fn fold_pair_run[A: Copy, B: Copy, T: Copy, L: Lanes<T>, F: Fn(A, B) -> T + Copy](l: &L, xs: &[A], ys: &[B], f: F, bits: Option<Bits<'_>>, idx0: i64) -> L::A = pair_fold_kernel;
}

multiversion! {
/// Writes `out[k] = on` where bit `k` of `bits` is set and `off` elsewhere, without
/// reading `out`: a write-only masked fill (the gradient of a sum or a mean).
    pub fn fill_run[O: Copy](out: &mut [O], bits: Bits<'_>, on: O, off: O) = fill_kernel;
}

multiversion! {
/// Packs `pred(x)` of every element of `xs` into bit words (bit `k % 64` of word
/// `k / 64`), 64 compares per word; `out` needs `xs.len().div_ceil(64)` words.
    pub fn pred_bits[T: Copy, P: Fn(T) -> bool + Copy](xs: &[T], out: &mut [u64], pred: P) = pred_kernel;
}

multiversion! {
/// Index of the first element of `xs` that is valid (bit set, or all valid without
/// bits) and satisfies `pred`. Scans 64 elements per step with branch-free compares.
    pub fn first_match[T: Copy, P: Fn(T) -> bool + Copy](xs: &[T], bits: Option<Bits<'_>>, pred: P) -> Option<usize> = first_kernel;
}

/// Runs at most this long take the short kernel.
pub const SHORT: usize = 8;

/// The kernel for runs of at most [`SHORT`] elements (sparse lanes of a few entries):
/// the same combination tree as the `W`-wide kernel, bit for bit, without its
/// accumulator array. Element `k` sits in accumulator `k`; the tree levels that only
/// meet identities are replayed so that even the sign of a zero sum matches.
#[inline(always)]
pub fn short_kernel<T: Copy, L: Lanes<T>>(
    l: &L, xs: &[T], bits: Option<Bits<'_>>, idx0: i64,
) -> L::A {
    short_load(l, xs.len(), bits, idx0, |k| xs[k])
}

/// [`short_kernel`] over the `n` elements `load(0) .. load(n - 1)`.
#[inline(always)]
fn short_load<T, L: Lanes<T>>(
    l: &L, n: usize, bits: Option<Bits<'_>>, idx0: i64, load: impl Fn(usize) -> T,
) -> L::A {
    let w = bits.map_or(u64::MAX, |b| b.word_at(0));
    let n = n.min(SHORT);
    let mut a = [l.id(); SHORT];
    if n > 0 {
        // Every one of the SHORT slots is computed (positions past the run load its last
        // element, then select the identity): a loop of constant trip count, unrolled,
        // keeps `a` in registers. A loop to `n` with conditional stores spilled `a` to the
        // stack, and the tree's wider reloads of those narrow stores stalled store
        // forwarding (half the time of a COO reduction over lanes of one or two entries).
        for k in 0..SHORT {
            let v = l.comb(l.id(), l.lift(load(k.min(n - 1)), idx0 + k as i64));
            a[k] = if k < n && (w >> k) & 1 == 1 {
                v
            } else {
                l.id()
            };
        }
    }
    let mut h = W / 2;
    while h >= SHORT {
        for j in 0..SHORT {
            a[j] = l.comb(a[j], l.id());
        }
        h /= 2;
    }
    while h > 0 {
        for j in 0..h {
            a[j] = l.comb(a[j], a[j + h]);
        }
        h /= 2;
    }
    a[0]
}

/// [`wide_kernel`] over the values `f(xs[k], ys[k])` of two runs, computed in registers:
/// the same accumulators, selects and tree as [`wide_kernel`] over those values written out
/// (for lanes that are not `HEAVY`, which fold packed values instead).
#[inline(always)]
fn pair_fold_kernel<A: Copy, B: Copy, T: Copy, L: Lanes<T>, F: Fn(A, B) -> T + Copy>(
    l: &L, xs: &[A], ys: &[B], f: F, bits: Option<Bits<'_>>, idx0: i64,
) -> L::A {
    debug_assert!(!L::HEAVY, "a HEAVY lane folds packed values");
    let n = xs.len().min(ys.len());
    let (xs, ys) = (&xs[..n], &ys[..n]);
    if n <= SHORT {
        return short_load(l, n, bits, idx0, |k| f(xs[k], ys[k]));
    }
    let mut acc = [l.id(); W];
    match bits {
        None => {
            let full = n - n % W;
            for c in 0..full / W {
                let (xc, yc) = (&xs[c * W..c * W + W], &ys[c * W..c * W + W]);
                step(l, &mut acc, idx0 + (c * W) as i64, |j| f(xc[j], yc[j]));
            }
            if full < n {
                let (xt, yt) = (&xs[full..], &ys[full..]);
                padded_step(l, &mut acc, n - full, idx0 + full as i64, |j| {
                    f(xt[j], yt[j])
                });
            }
        }
        Some(b) => {
            let full = n - n % 64;
            // a copy in registers for the loop, as in `wide_kernel`
            let mut a = acc;
            for c in 0..full / 64 {
                prefetch_chunk(xs, c * 64);
                prefetch_chunk(ys, c * 64);
                let (xc, yc) = (&xs[c * 64..c * 64 + 64], &ys[c * 64..c * 64 + 64]);
                let w = b.word_at(c * 64);
                if w != 0 {
                    chunk64(l, &mut a, w, idx0 + (c * 64) as i64, |k| f(xc[k], yc[k]));
                }
            }
            acc = a;
            if full < n {
                let (xt, yt) = (&xs[full..], &ys[full..]);
                let base = idx0 + full as i64;
                tail(l, &mut acc, n - full, b.word_at(full), base, |k| {
                    f(xt[k], yt[k])
                });
            }
        }
    }
    tree(l, acc)
}

/// The portable kernel: `W` accumulators, 64 elements per mask word, branch-free
/// selects, for runs of any length (those of at most [`SHORT`] elements take
/// [`short_kernel`] before the tier dispatch, bit for bit the same). Index loops on
/// purpose: fixed-trip loops over fixed-size arrays are what the vectoriser turns into
/// registers.
#[inline(always)]
fn wide_kernel<T: Copy, L: Lanes<T>>(
    l: &L, within: &[T], n: usize, bits: Option<Bits<'_>>, idx0: i64,
) -> L::A {
    let xs = &within[..n];
    let mut acc = [l.id(); W];
    let full = n - n % 64;
    match bits {
        None => push_within(l, &mut acc, within, n, idx0),
        Some(b) if L::HEAVY && crate::pack::packs_fast::<T>() => {
            // lift (an `exp`) only the valid elements: pack them (a vector compress),
            // then fold the packed run unmasked. HEAVY lifts ignore positions. No
            // closure here: it would be compiled without this kernel's features.
            let mut buf = crate::pack::block_buf();
            for c in 0..n.div_ceil(crate::BLOCK) {
                let ch = &xs[c * crate::BLOCK..n.min(c * crate::BLOCK + crate::BLOCK)];
                let p = crate::pack::pack_block(ch, b.offset(c * crate::BLOCK), &mut buf);
                push_all(l, &mut acc, p, 0);
            }
        }
        Some(b) if L::HEAVY => {
            let mut v = [l.id(); 64];
            // a copy in registers for the loop (see the masked branch below)
            let mut a = acc;
            for c in 0..full / 64 {
                prefetch_chunk(xs, c * 64);
                let ch = &xs[c * 64..c * 64 + 64];
                let w = b.word_at(c * 64);
                if w == 0 {
                    continue;
                }
                let base = idx0 + (c * 64) as i64;
                for k in 0..64 {
                    let y = l.lift(ch[k], base + k as i64);
                    v[k] = if (w >> k) & 1 == 1 { y } else { l.id() };
                }
                for h in 0..64 / W {
                    for j in 0..W {
                        a[j] = l.comb(a[j], v[h * W + j]);
                    }
                }
            }
            acc = a;
            if full < n {
                let (xt, base) = (&xs[full..], idx0 + full as i64);
                tail(l, &mut acc, n - full, b.word_at(full), base, |k| xt[k]);
            }
        }
        Some(b) => {
            // with 64 elements readable from the last partial chunk's start, that chunk
            // is one more whole chunk, its elements past the run masked out: one loop
            let chunks = if full < n && within.len() >= full + 64 {
                full / 64 + 1
            } else {
                full / 64
            };
            // the loop's own copy of the accumulators, indexed by constants only, stays
            // in registers: `acc` itself is indexed by `k % W` in `tail`, which keeps it
            // in memory, and the loop then stored it to the stack at every chunk
            let mut a = acc;
            // no closures here: they would be compiled without this kernel's features
            if L::ORDER_FREE {
                // even chunks into `a`, odd ones into `a2`: two independent chains
                let mut a2 = acc;
                for c in 0..chunks / 2 {
                    masked_chunk(l, &mut a, within, n, b, idx0, 2 * c);
                    masked_chunk(l, &mut a2, within, n, b, idx0, 2 * c + 1);
                }
                if chunks % 2 == 1 {
                    masked_chunk(l, &mut a, within, n, b, idx0, chunks - 1);
                }
                for j in 0..W {
                    a[j] = l.comb(a[j], a2[j]);
                }
            } else {
                for c in 0..chunks {
                    masked_chunk(l, &mut a, within, n, b, idx0, c);
                }
            }
            acc = a;
            if chunks * 64 < n {
                let (xt, base) = (&xs[full..], idx0 + full as i64);
                tail(l, &mut acc, n - full, b.word_at(full), base, |k| xt[k]);
            }
        }
    }
    tree(l, acc)
}

/// Chunk `c` (elements `64c..64c + 64` of `within`, those at or past `n` masked out) of
/// [`wide_kernel`]'s masked loop into the accumulators.
#[inline(always)]
fn masked_chunk<T: Copy, L: Lanes<T>>(
    l: &L, a: &mut [L::A; W], within: &[T], n: usize, b: Bits<'_>, idx0: i64, c: usize,
) {
    prefetch_chunk(within, c * 64);
    let ch = &within[c * 64..c * 64 + 64];
    let past = (c * 64 + 64).saturating_sub(n) as u32;
    let w = b.word_at(c * 64) & (u64::MAX >> past);
    if w != 0 {
        chunk64(l, a, w, idx0 + (c * 64) as i64, |k| ch[k]);
    }
}

/// One 64-element chunk under its mask word `w`, element `k` being `load(k)` at lane
/// position `base + k`, into the accumulators (element `k` into `k % W`).
#[inline(always)]
fn chunk64<T, L: Lanes<T>>(
    l: &L, acc: &mut [L::A; W], w: u64, base: i64, load: impl Fn(usize) -> T,
) {
    for h in 0..64 / W {
        // a 32-bit half word: the lane tests become 32-bit vector shifts (AVX2 has no
        // 64-bit lane masks for 32-bit elements), and the value is loaded
        // unconditionally and selected (no masked loads)
        let hw = (w >> (h * W)) as u32;
        for j in 0..W {
            let k = h * W + j;
            let y = l.lift(load(k), base + k as i64);
            let v = if (hw >> j) & 1 == 1 { y } else { l.id() };
            acc[j] = l.comb(acc[j], v);
        }
    }
}

/// The last `n < 64` elements of a masked run (mask word `w`), element `k` into
/// accumulator `k % W`: as [`chunk64`], with a conditional load per lane and the lanes
/// past `n` selecting the identity. Constant accumulator indices: one index `k % W`
/// here kept the kernel's accumulators on the stack outside its main loops (the
/// partial last step added to them there, and the tree read them back in 8-byte pieces
/// just after 64-byte stores, a store-forwarding stall at every run's end; an argmax
/// over rows of 100 took 1.25x the time, a sum 1.05x).
#[inline(always)]
fn tail<T: Copy, L: Lanes<T>>(
    l: &L, acc: &mut [L::A; W], n: usize, w: u64, base: i64, load: impl Fn(usize) -> T,
) {
    debug_assert!(0 < n && n < 64);
    let x0 = load(0);
    for h in 0..64 / W {
        let hw = (w >> (h * W)) as u32;
        for j in 0..W {
            let k = h * W + j;
            let x = if k < n { load(k) } else { x0 };
            let y = l.lift(x, base + k as i64);
            let v = if k < n && (hw >> j) & 1 == 1 {
                y
            } else {
                l.id()
            };
            acc[j] = l.comb(acc[j], v);
        }
    }
}

/// `W` valid elements, element `j` into accumulator `j`.
#[inline(always)]
fn step<T, L: Lanes<T>>(l: &L, acc: &mut [L::A; W], base: i64, load: impl Fn(usize) -> T) {
    for j in 0..W {
        acc[j] = l.comb(acc[j], l.lift(load(j), base + j as i64));
    }
}

/// The last `rem < W` valid elements as one more step padded with identities (a
/// fixed-trip step: it vectorises, a HEAVY lift included): lift a padded copy, keep the
/// identity past the end.
#[inline(always)]
fn padded_step<T: Copy, L: Lanes<T>>(
    l: &L, acc: &mut [L::A; W], rem: usize, base: i64, load: impl Fn(usize) -> T,
) {
    // a conditional load per lane (masked loads where the CPU has them): copying the
    // tail into a padded buffer first was scalar stores read back as vectors, a
    // store-forwarding stall on every short run's tail
    let x0 = load(0);
    for j in 0..W {
        let x = if j < rem { load(j) } else { x0 };
        let y = l.lift(x, base + j as i64);
        acc[j] = l.comb(acc[j], if j < rem { y } else { l.id() });
    }
}

/// The accumulators combined in a tree (halves, then quarters ...).
#[inline(always)]
fn tree<T, L: Lanes<T>>(l: &L, acc: [L::A; W]) -> L::A {
    // each level a fresh array of half the length (the same combinations in the same
    // order as halving one array in place), written as an array expression with
    // constant indices: LLVM keeps the levels in registers. An in-place loop, or a loop
    // filling each level, kept them in memory and read them back in pairs just after
    // storing them whole, a store-forwarding stall at every run's end (a CSR row sum
    // over rows of 100 entries 1.5x slower); `array::from_fn` did as well where it was
    // not inlined (`W` is 32, asserted above)
    macro_rules! half {
        ($a:expr, $h:expr; $($j:expr),*) => { [$(l.comb($a[$j], $a[$j + $h])),*] };
    }
    let a16 = half!(acc, 16; 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let a8 = half!(a16, 8; 0, 1, 2, 3, 4, 5, 6, 7);
    let a4 = half!(a8, 4; 0, 1, 2, 3);
    let a2 = half!(a4, 2; 0, 1);
    l.comb(a2[0], a2[1])
}

/// Combines every element of `xs` into `acc` (element `k` into accumulator `k % W`):
/// whole `W`-element steps, then the tail as one more step padded with identities.
#[inline(always)]
fn push_all<T: Copy, L: Lanes<T>>(l: &L, acc: &mut [L::A; W], xs: &[T], idx0: i64) {
    push_within(l, acc, xs, xs.len(), idx0);
}

/// [`push_all`] over `xs[..n]`; with `W` elements readable from the tail's start, the
/// tail is one whole step whose lanes past `n` select the identity.
#[inline(always)]
fn push_within<T: Copy, L: Lanes<T>>(l: &L, acc: &mut [L::A; W], xs: &[T], n: usize, idx0: i64) {
    // the loop's own copy of the accumulators, as in `wide_kernel`'s masked branch:
    // through `acc` itself the loop stored them to the stack at every step, and the
    // tail read them back in pieces (a CSR row sum over rows of 100 entries 2x slower)
    let mut a = *acc;
    let full = n - n % W;
    if L::ORDER_FREE {
        // two independent chains, as in `wide_kernel`'s masked branch
        let mut a2 = [l.id(); W];
        for c in 0..full / W / 2 {
            let ch = &xs[2 * c * W..2 * c * W + 2 * W];
            step(l, &mut a, idx0 + (2 * c * W) as i64, |j| ch[j]);
            step(l, &mut a2, idx0 + ((2 * c + 1) * W) as i64, |j| ch[W + j]);
        }
        if (full / W) % 2 == 1 {
            let c = full / W - 1;
            let ch = &xs[c * W..c * W + W];
            step(l, &mut a, idx0 + (c * W) as i64, |j| ch[j]);
        }
        for j in 0..W {
            a[j] = l.comb(a[j], a2[j]);
        }
    } else {
        for c in 0..full / W {
            let ch = &xs[c * W..c * W + W];
            step(l, &mut a, idx0 + (c * W) as i64, |j| ch[j]);
        }
    }
    *acc = a;
    if full < n {
        let (rem, base) = (n - full, idx0 + full as i64);
        if xs.len() >= full + W {
            // the masked chunks' half-word select (a lane test per element, the
            // value loaded whole), which keeps the accumulators in two registers
            let ch = &xs[full..full + W];
            let hw = (1u32 << rem) - 1;
            for j in 0..W {
                let y = l.lift(ch[j], base + j as i64);
                let v = if (hw >> j) & 1 == 1 { y } else { l.id() };
                acc[j] = l.comb(acc[j], v);
            }
        } else {
            let xt = &xs[full..n];
            padded_step(l, acc, rem, base, |j| xt[j]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Eight mask words of mixed bits, for runs of every length and offset.
    fn words8() -> Vec<u64> {
        (0..8u64)
            .map(|i| 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i + 1))
            .collect()
    }

    /// `first_match` against the scalar search, for every length up to three chunks,
    /// offsets into the bits, with and without them, hits inside and outside the mask.
    #[test]
    fn first_match_equals_the_scalar_search() {
        let words = words8();
        let xs: Vec<u32> = (0..200u32).map(|i| (i * 37) % 23).collect();
        for n in 0..xs.len() {
            for off in [0, 5, 64] {
                let b = Bits::new(&words, off);
                for target in [0u32, 7, 22, 99] {
                    let pred = move |x: u32| x == target;
                    let want = (0..n).find(|&k| b.get(k) && pred(xs[k]));
                    assert_eq!(
                        first_match(&xs[..n], Some(b), pred),
                        want,
                        "{n} {off} {target}"
                    );
                    let want = (0..n).find(|&k| pred(xs[k]));
                    assert_eq!(first_match(&xs[..n], None, pred), want, "{n} {target}");
                }
            }
        }
    }

    /// `pred_bits` against the bits written one by one, for every length up to three
    /// words and outputs shorter than the words needed.
    #[test]
    fn pred_bits_equals_the_scalar_packing() {
        let xs: Vec<u32> = (0..200u32).map(|i| (i * 37) % 23).collect();
        for n in 0..xs.len() {
            for words in [n.div_ceil(64), n / 64] {
                let mut want = vec![7u64; words];
                for k in 0..n.min(64 * words) {
                    if k % 64 == 0 {
                        want[k / 64] = 0;
                    }
                    want[k / 64] |= u64::from(xs[k] > 11) << (k % 64);
                }
                let mut out = vec![7u64; words];
                pred_bits(&xs[..n], &mut out, |x: u32| x > 11);
                assert_eq!(out, want, "{n} {words}");
            }
        }
    }

    struct Add;
    impl Lanes<i64> for Add {
        type A = i64;
        fn id(&self) -> i64 {
            0
        }
        fn lift(&self, x: i64, _: i64) -> i64 {
            x
        }
        fn comb(&self, a: i64, b: i64) -> i64 {
            a.wrapping_add(b)
        }
    }
    struct IdxSum;
    impl Lanes<i64> for IdxSum {
        type A = i64;
        fn id(&self) -> i64 {
            0
        }
        fn lift(&self, _: i64, i: i64) -> i64 {
            i
        }
        fn comb(&self, a: i64, b: i64) -> i64 {
            a + b
        }
    }

    /// A plain `f32` sum: the sign of a zero and the order of the adds show in its bits.
    struct FSum;
    impl Lanes<f32> for FSum {
        type A = f32;
        fn id(&self) -> f32 {
            0.0
        }
        fn lift(&self, x: f32, _: i64) -> f32 {
            x
        }
        fn comb(&self, a: f32, b: f32) -> f32 {
            a + b
        }
    }

    /// The wide kernel's order, pinned against its definition written out serially:
    /// element `k` into accumulator `k % W`, then the halves combined into the lower
    /// half, then the quarters, and so on; bit for bit on values whose sums round.
    #[test]
    fn wide_kernel_folds_in_its_documented_order() {
        let xs: Vec<f32> = (0..300u32)
            .map(|k| {
                (k.wrapping_mul(2_654_435_761) >> 8) as f32 * 1e-3 - 7000.0 + 1e7 * (k % 7) as f32
            })
            .collect();
        let words = words8();
        for n in [33, 64, 95, 100, 257, 300] {
            // unmasked, then masked (a run's last partial word takes the tail, the
            // elements past it too when the run is the whole slice)
            for bits in [None, Some(Bits::new(&words, 3))] {
                let mut acc = [0.0f32; W];
                for (k, &x) in xs[..n].iter().enumerate() {
                    if bits.is_none_or(|b| b.get(k)) {
                        acc[k % W] += x;
                    }
                }
                let mut h = W / 2;
                while h > 0 {
                    for j in 0..h {
                        acc[j] += acc[j + h];
                    }
                    h /= 2;
                }
                let got = wide_kernel(&FSum, &xs[..n], n, bits, 0);
                assert_eq!(got.to_bits(), acc[0].to_bits(), "n = {n}, {bits:?}");
                let got = wide_kernel(&FSum, &xs, n, bits, 0);
                assert_eq!(got.to_bits(), acc[0].to_bits(), "within, n = {n}");
            }
        }
    }

    #[test]
    fn a_run_within_a_longer_slice_folds_as_the_run_alone() {
        // mixed magnitudes (the order of the adds shows), negative zeros, and values
        // past the run that would change any sum they entered
        let mut xs: Vec<f32> = (0..400)
            .map(|i| match i % 5 {
                0 => -0.0,
                1 => 1e8,
                2 => -1e8 + i as f32,
                3 => 0.1 * i as f32,
                _ => f32::NAN,
            })
            .collect();
        let zeros = vec![-0.0f32; 300];
        let words = words8();
        for len in 0..=140 {
            for slack in [0, 1, 7, 31, 32, 33, 100] {
                for off in [0, 5, 64] {
                    let b = Bits::new(&words, off);
                    for bits in [None, Some(b)] {
                        // NaN past the run only: the run itself is finite
                        for x in &mut xs[..len] {
                            if x.is_nan() {
                                *x = 2.5;
                            }
                        }
                        let within = &xs[..len + slack];
                        let want = fold_run(&FSum, &xs[..len], bits, 3);
                        let got = fold_run_within(&FSum, within, len, bits, 3);
                        assert_eq!(got.to_bits(), want.to_bits(), "len {len} slack {slack}");
                        let want = fold_run(&PosSum, &xs[..len], bits, 3);
                        let got = fold_run_within(&PosSum, within, len, bits, 3);
                        assert_eq!(got.to_bits(), want.to_bits(), "pos: len {len}");
                        let want = fold_run(&FSum, &zeros[..len], bits, 0);
                        let got = fold_run_within(&FSum, &zeros[..len + slack], len, bits, 0);
                        assert_eq!(got.to_bits(), want.to_bits(), "zeros: len {len}");
                    }
                }
            }
        }
    }

    /// Float sums are order-sensitive: the short kernel must give the wide kernel's
    /// result bit for bit (signed zeros included) at every length it takes.
    #[test]
    fn short_kernel_is_the_wide_kernel_bit_for_bit() {
        let xs = [1e8f32, -0.0, 3.3, -1e8, 0.7, -0.0, 1e-3, 2.5e7];
        let words = [0u64, 0b1010_0110, u64::MAX, 0b0010_0010];
        for n in 0..=SHORT {
            for w in words {
                for bits in [None, Some(Bits::new(std::slice::from_ref(&w), 0))] {
                    let a = short_kernel(&FSum, &xs[..n], bits, 0);
                    let b = wide_kernel(&FSum, &xs[..n], n, bits, 0);
                    assert_eq!(a.to_bits(), b.to_bits(), "n {n} bits {bits:?}");
                }
            }
        }
        // all negative zeros: the sign survives neither kernel's identity levels
        let z = [-0.0f32; 3];
        assert_eq!(
            short_kernel(&FSum, &z, None, 0).to_bits(),
            wide_kernel(&FSum, &z, z.len(), None, 0).to_bits()
        );
    }

    #[test]
    fn kernel_matches_scalar_at_every_length_and_offset() {
        let xs: Vec<i64> = (0..300).map(|i| (i * 7919) % 113 - 50).collect();
        let words = words8();
        for len in [0, 1, 31, 63, 64, 65, 128, 200, 300] {
            for off in [0, 1, 13, 64, 70] {
                let b = Bits::new(&words, off);
                let want: i64 = (0..len).filter(|&k| b.get(k)).map(|k| xs[k]).sum();
                assert_eq!(fold_run(&Add, &xs[..len], Some(b), 0), want);
                assert_eq!(wide_kernel(&Add, &xs[..len], len, Some(b), 0), want);
                let wi: i64 = (0..len).filter(|&k| b.get(k)).map(|k| k as i64 + 5).sum();
                assert_eq!(fold_run(&IdxSum, &xs[..len], Some(b), 5), wi);
            }
            let all: i64 = xs[..len].iter().sum();
            assert_eq!(fold_run(&Add, &xs[..len], None, 0), all);
        }
    }

    /// A HEAVY monoid (the kernel packs valid elements first where it can): 4- and
    /// 8-byte elements take the packing path on an AVX-512 CPU, 2-byte ones always the
    /// masked 64-element lift; both must equal a plain filter, across the 1024-element
    /// packing blocks.
    struct Heavy;
    impl<T: Copy + Into<i64>> Lanes<T> for Heavy {
        type A = i64;
        const HEAVY: bool = true;
        fn id(&self) -> i64 {
            0
        }
        fn lift(&self, x: T, _: i64) -> i64 {
            let x: i64 = x.into();
            x * x + 1
        }
        fn comb(&self, a: i64, b: i64) -> i64 {
            a + b
        }
    }

    #[test]
    fn heavy_kernel_matches_scalar_across_packing_blocks() {
        let words: Vec<u64> = (0..48u64)
            .map(|i| {
                0x9E37_79B9_7F4A_7C15u64
                    .wrapping_mul(i + 1)
                    .rotate_left(i as u32)
            })
            .collect();
        let x64: Vec<i64> = (0..3000).map(|i| (i * 7919) % 113 - 50).collect();
        let x32: Vec<i32> = x64.iter().map(|&x| x as i32).collect();
        let x16: Vec<i16> = x64.iter().map(|&x| x as i16).collect();
        for len in [9, 63, 64, 65, 1023, 1024, 1025, 2100, 3000] {
            for off in [0, 3, 64, 200] {
                let b = Bits::new(&words, off);
                let want: i64 = (0..len)
                    .filter(|&k| b.get(k))
                    .map(|k| x64[k] * x64[k] + 1)
                    .sum();
                assert_eq!(fold_run(&Heavy, &x64[..len], Some(b), 0), want);
                assert_eq!(fold_run(&Heavy, &x32[..len], Some(b), 0), want);
                assert_eq!(fold_run(&Heavy, &x16[..len], Some(b), 0), want);
            }
            let all: i64 = x64[..len].iter().map(|x| x * x + 1).sum();
            assert_eq!(fold_run(&Heavy, &x32[..len], None, 0), all);
        }
    }
    /// An f32 sum with positions folded in (so a wrong position shows).
    struct PosSum;
    impl Lanes<f32> for PosSum {
        type A = f32;
        fn id(&self) -> f32 {
            0.0
        }
        fn lift(&self, x: f32, idx: i64) -> f32 {
            x + idx as f32 * 1e-3
        }
        fn comb(&self, a: f32, b: f32) -> f32 {
            a + b
        }
    }

    #[test]
    fn fold_pair_run_equals_fold_run_over_the_written_values() {
        let words = words8();
        let xs: Vec<f32> = (0..300)
            .map(|i| ((i * 7919) % 113) as f32 * 0.37 - 20.0)
            .collect();
        // NaN and inf where the mask is clear must not leak into the result
        let ys: Vec<f32> = (0..300)
            .map(|i| match i % 29 {
                3 => f32::NAN,
                5 => f32::INFINITY,
                _ => ((i * 31) % 17) as f32 * 0.11 - 0.9,
            })
            .collect();
        let f = |x: f32, y: f32| x * y;
        for len in [0, 1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 200, 300] {
            for off in [0, 13, 64] {
                let b = Bits::new(&words, off);
                // the values a zip writes: f at valid positions, 0 elsewhere
                let z: Vec<f32> = (0..len)
                    .map(|k| if b.get(k) { f(xs[k], ys[k]) } else { 0.0 })
                    .collect();
                let want = fold_run(&PosSum, &z, Some(b), 5);
                let got = fold_pair_run(&PosSum, &xs[..len], &ys[..len], f, Some(b), 5);
                if want.is_nan() {
                    assert!(got.is_nan(), "len {len} off {off}");
                } else {
                    assert_eq!(got.to_bits(), want.to_bits(), "len {len} off {off}");
                }
            }
            // unmasked: every value, NaN included
            let z: Vec<f32> = (0..len).map(|k| f(xs[k], ys[k])).collect();
            let (want, got) = (
                fold_run(&PosSum, &z, None, 2),
                fold_pair_run(&PosSum, &xs[..len], &ys[..len], f, None, 2),
            );
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "len {len}"
            );
        }
        // masked, without NaN in the valid values: the sums are finite and compared
        let clean: Vec<f32> = ys
            .iter()
            .map(|&y| if y.is_finite() { y } else { 0.5 })
            .collect();
        let b = Bits::new(&words, 0);
        let z: Vec<f32> = (0..300)
            .map(|k| if b.get(k) { xs[k] * clean[k] } else { 0.0 })
            .collect();
        let want = fold_run(&PosSum, &z, Some(b), 0);
        assert!(want.is_finite());
        assert_eq!(
            fold_pair_run(&PosSum, &xs, &clean, f, Some(b), 0).to_bits(),
            want.to_bits()
        );
    }

    #[test]
    fn sum8_run_matches_the_scalar_partial_sums() {
        let xs: Vec<f32> = (0..301)
            .map(|i| ((i * 7919) % 113) as f32 * 0.37 - 20.0)
            .collect();
        let ys: Vec<f32> = (0..301)
            .map(|i| ((i * 31) % 17) as f32 * 1.1e-3 - 0.004)
            .collect();
        for len in [0, 1, 7, 8, 9, 64, 300, 301] {
            let got = sum8_run(&xs[..len], &ys[..len], |x: f32, y: f32| x as f64 * y as f64);
            let mut want = [0.0f64; 8];
            for k in 0..len {
                want[k % 8] += xs[k] as f64 * ys[k] as f64;
            }
            assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits), "len {len}");
        }
    }

    #[test]
    fn fill_run_matches_scalar_at_every_length_and_offset() {
        let words = words8();
        for len in [0, 1, 31, 63, 64, 65, 128, 200, 300] {
            for off in [0, 1, 13, 64, 70] {
                let b = Bits::new(&words, off);
                let mut f = vec![f32::NAN; len];
                fill_run(&mut f, b, 2.5f32, -0.0);
                let mut d = vec![f64::NAN; len];
                fill_run(&mut d, b, -1.0f64, 7.0);
                let mut h = vec![9u16; len];
                fill_run(&mut h, b, 1u16, 0);
                for k in 0..len {
                    let v = b.get(k);
                    let want = if v { 2.5f32 } else { -0.0 };
                    assert_eq!(f[k].to_bits(), want.to_bits(), "len {len} off {off} k {k}");
                    assert_eq!(
                        d[k],
                        if v { -1.0 } else { 7.0 },
                        "len {len} off {off} k {k}"
                    );
                    assert_eq!(h[k], v as u16, "len {len} off {off} k {k}");
                }
            }
        }
    }

    #[test]
    fn pair_run_matches_scalar_at_every_length_and_offset() {
        let xs: Vec<i64> = (0..300).map(|i| (i * 7919) % 113 - 50).collect();
        let ys: Vec<i32> = (0..300).map(|i| (i * 31) % 17 - 8).collect();
        let zs: Vec<i16> = (0..300).map(|i| (i % 5) as i16).collect();
        let words = words8();
        let f = |x: i64, y: i32, z: i16, v: bool| {
            if v {
                (x * y as i64 + z as i64, y as f64 - z as f64)
            } else {
                (-1, f64::NAN)
            }
        };
        for len in [0, 1, 31, 63, 64, 65, 128, 200, 300] {
            for off in [0, 1, 13, 64, 70] {
                let b = Bits::new(&words, off);
                for bits in [Some(b), None] {
                    let (mut p, mut q) = (vec![0i64; len], vec![0f64; len]);
                    pair_run(&xs[..len], &ys[..len], &zs[..len], bits, &mut p, &mut q, f);
                    for k in 0..len {
                        let (wp, wq) = f(xs[k], ys[k], zs[k], bits.is_none_or(|b| b.get(k)));
                        assert_eq!(p[k], wp, "len {len} off {off} k {k}");
                        assert_eq!(q[k].to_bits(), wq.to_bits(), "len {len} off {off} k {k}");
                    }
                }
            }
        }
    }

    #[test]
    fn update_zip_run_matches_scalar_at_every_length_and_offset() {
        let ys: Vec<i32> = (0..300).map(|i| (i * 31) % 17 - 8).collect();
        let start: Vec<i64> = (0..300).map(|i| (i * 7919) % 113 - 50).collect();
        let words = words8();
        let f = |o: i64, y: i32, v: bool| if v { o * 3 + y as i64 } else { -o };
        for len in [0, 1, 31, 63, 64, 65, 128, 200, 300] {
            for off in [0, 1, 13, 64, 70] {
                let b = Bits::new(&words, off);
                for bits in [Some(b), None] {
                    let mut out = start[..len].to_vec();
                    // a longer `ys`: the common length is the output's
                    update_zip_run(&mut out, &ys, bits, f);
                    for k in 0..len {
                        let want = f(start[k], ys[k], bits.is_none_or(|b| b.get(k)));
                        assert_eq!(out[k], want, "len {len} off {off} k {k}");
                    }
                }
            }
        }
    }

    #[test]
    fn around_counts_and_neighbours() {
        let xs: Vec<f32> = (0..1000)
            .map(|i| ((i * 7919) % 113) as f32 - 50.0)
            .collect();
        for v in [-50.0f32, -3.0, 0.5, 62.0, 100.0] {
            let (l, e, b, a) = around(&xs, v, f32::NEG_INFINITY, f32::INFINITY, |x| x);
            assert_eq!(l, xs.iter().filter(|&&x| x < v).count());
            assert_eq!(e, xs.iter().filter(|&&x| x == v).count());
            let below = xs
                .iter()
                .copied()
                .filter(|&x| x < v)
                .fold(f32::NEG_INFINITY, f32::max);
            let above = xs
                .iter()
                .copied()
                .filter(|&x| x > v)
                .fold(f32::INFINITY, f32::min);
            assert_eq!((b, a), (below, above), "v {v}");
            // the same through a widening key
            let w = around(&xs, v as f64, f64::NEG_INFINITY, f64::INFINITY, |x| {
                x as f64
            });
            assert_eq!(w, (l, e, b as f64, a as f64));
        }
    }
}
