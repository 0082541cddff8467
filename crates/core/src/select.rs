//! Selection: the element of a given rank of a lane (and the next one), the engine of
//! median and quantile. It runs on integer order keys ([`Element::key`]), so a compare
//! is one integer instruction; with AVX2 a partition round moves 8 32-bit keys per step
//! (a compare, a table permutation, two stores).
//!
//! [`Element::key`]: crate::Element::key

#[cfg(target_arch = "x86_64")]
use crate::fold::cpu;
use crate::fold::multiversion;
use std::fmt::Debug;

/// Ranges of at most this many keys are finished by counting ([`small_pair`]).
const SMALL: usize = 16;
/// The vector partition's scratch (on the stack, in keys): longer ranges take scalar
/// rounds until they fit.
const SCRATCH: usize = 4096;

/// An unsigned integer order key: the order of the values it stands for (see
/// [`Element::key`](crate::Element::key)), with selection on slices of keys.
pub trait SelectKey: Ord + Copy + Send + Sync + Debug + 'static {
    /// The smallest key.
    const MIN: Self;
    /// The largest key.
    const MAX: Self;
    /// Partitions `s` around `p`: the keys `< p` (`<= p` when `le`) first, the rest
    /// after. Returns how many come first and the smallest of the rest (`MAX` when there
    /// are none).
    fn partition(s: &mut [Self], p: Self, le: bool) -> (usize, Self);
}

/// The portable partition: branch-free Lomuto (a swap and a counter per key).
#[inline]
fn partition_scalar<K: SelectKey>(s: &mut [K], p: K, le: bool) -> (usize, K) {
    let mut store = 0;
    let mut rest_min = K::MAX;
    for i in 0..s.len() {
        let x = s[i];
        s.swap(i, store);
        let first = if le { x <= p } else { x < p };
        store += first as usize;
        rest_min = if first { rest_min } else { rest_min.min(x) };
    }
    (store, rest_min)
}

/// The AVX2 partition of 32-bit keys, 8 per step: a compare gives an 8-bit mask, whose
/// table entry is the permutation putting the first part's lanes first. The permuted
/// vector is stored twice: at the first part's end (a write never passes the read
/// position) and, ending at the rest's start, into a stack scratch the rest fills from
/// its end down; the rest is then copied back after the first part.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::SCRATCH;
    use crate::pack::x86::COMPRESS8;
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;

    /// [`super::SelectKey::partition`] for `u32`.
    ///
    /// # Safety
    /// The CPU has AVX2, and `s.len() <= SCRATCH`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn partition_u32(s: &mut [u32], p: u32, le: bool) -> (usize, u32) {
        const L: usize = 8;
        let n = s.len();
        debug_assert!(n <= SCRATCH);
        let end = SCRATCH + L;
        let mut rest = [MaybeUninit::<u32>::uninit(); SCRATCH + L];
        let (src, rp) = (s.as_mut_ptr(), rest.as_mut_ptr() as *mut u32);
        // SAFETY: loads read `s[i..i + L]` with `i + L <= n`; the first part is stored
        // at `s[first..first + L]` with `first <= i`, slots already read; the rest's
        // store covers `rest[r - L..r]`, and `r - L >= SCRATCH - (rest so far) >= 0`;
        // the last partial vector loads and stores only its live lanes.
        unsafe {
            // unsigned order through a signed compare: flip the sign bits
            let bias = _mm256_set1_epi32(i32::MIN);
            let pb = _mm256_xor_si256(_mm256_set1_epi32(p as i32), bias);
            let ones = _mm256_set1_epi32(-1);
            let mut rmin = ones;
            let (mut first, mut r, mut i) = (0usize, end, 0usize);
            while i + L <= n {
                let x = _mm256_loadu_si256(src.add(i) as *const __m256i);
                let xb = _mm256_xor_si256(x, bias);
                // all ones in the lanes of the first part
                let f = if le {
                    _mm256_xor_si256(_mm256_cmpgt_epi32(xb, pb), ones)
                } else {
                    _mm256_cmpgt_epi32(pb, xb)
                };
                let m = _mm256_movemask_ps(_mm256_castsi256_ps(f)) as usize;
                let perm = _mm256_loadu_si256(COMPRESS8[m].as_ptr() as *const __m256i);
                let y = _mm256_permutevar8x32_epi32(x, perm);
                _mm256_storeu_si256(src.add(first) as *mut __m256i, y);
                _mm256_storeu_si256(rp.add(r - L) as *mut __m256i, y);
                rmin = _mm256_min_epu32(rmin, _mm256_or_si256(x, f));
                let c = m.count_ones() as usize;
                first += c;
                r -= L - c;
                i += L;
            }
            if i < n {
                // the last partial vector: lanes at and past `n - i` are neither part;
                // the table lists a mask's clear lanes in order, so those come last
                let iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                let live = _mm256_cmpgt_epi32(_mm256_set1_epi32((n - i) as i32), iota);
                let x = _mm256_maskload_epi32(src.add(i) as *const i32, live);
                let xb = _mm256_xor_si256(x, bias);
                let f = if le {
                    _mm256_andnot_si256(_mm256_cmpgt_epi32(xb, pb), live)
                } else {
                    _mm256_and_si256(_mm256_cmpgt_epi32(pb, xb), live)
                };
                let m = _mm256_movemask_ps(_mm256_castsi256_ps(f)) as usize;
                let perm = _mm256_loadu_si256(COMPRESS8[m].as_ptr() as *const __m256i);
                let y = _mm256_permutevar8x32_epi32(x, perm);
                let (c, rem) = (m.count_ones() as i32, (n - i) as i32);
                // lanes below `c` to the first part, lanes `c..rem` to the rest
                let to_first = _mm256_cmpgt_epi32(_mm256_set1_epi32(c), iota);
                let to_rest = _mm256_andnot_si256(to_first, live);
                _mm256_maskstore_epi32(src.add(first) as *mut i32, to_first, y);
                _mm256_maskstore_epi32(rp.add(r - rem as usize) as *mut i32, to_rest, y);
                let skip = _mm256_or_si256(f, _mm256_xor_si256(live, ones));
                rmin = _mm256_min_epu32(rmin, _mm256_or_si256(x, skip));
                first += c as usize;
                r -= (rem - c) as usize;
            }
            let mut lanes = [0u32; L];
            _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, rmin);
            let min = lanes.into_iter().fold(u32::MAX, u32::min);
            // the rest after the first part: whole vectors, then single keys
            let (mut k, count) = (0, end - r);
            while k + L <= count {
                let x = _mm256_loadu_si256(rp.add(r + k) as *const __m256i);
                _mm256_storeu_si256(src.add(first + k) as *mut __m256i, x);
                k += L;
            }
            for k in k..count {
                *src.add(first + k) = *rp.add(r + k);
            }
            (first, min)
        }
    }
}

/// Whether the vector partition runs (AVX2 on x86-64; tests can force the portable one).
#[inline]
fn vector_partition() -> bool {
    #[cfg(test)]
    if crate::pack::tests::forced_portable() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        crate::fold::cpu::has_avx2()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl SelectKey for u32 {
    const MIN: Self = 0;
    const MAX: Self = u32::MAX;
    #[inline]
    fn partition(s: &mut [Self], p: Self, le: bool) -> (usize, Self) {
        #[cfg(target_arch = "x86_64")]
        if s.len() <= SCRATCH && vector_partition() {
            // SAFETY: AVX2 checked at run time; the length is in bounds.
            return unsafe { avx2::partition_u32(s, p, le) };
        }
        partition_scalar(s, p, le)
    }
}

impl SelectKey for u64 {
    const MIN: Self = 0;
    const MAX: Self = u64::MAX;
    #[inline]
    fn partition(s: &mut [Self], p: Self, le: bool) -> (usize, Self) {
        partition_scalar(s, p, le)
    }
}

/// The keys of ranks `j` and `j + 1` (when there is one) of at most [`SMALL`] keys, by
/// counting rather than sorting: the key of rank `r` is the largest `x` with at most `r`
/// keys below it. Fixed trip counts and no branches on the data (the counts vectorise);
/// padding with `MAX` changes no answer.
#[inline(always)]
fn small_pair<K: SelectKey>(s: &[K], j: usize) -> (K, Option<K>) {
    let keys: [K; SMALL] = std::array::from_fn(|k| s.get(k).copied().unwrap_or(K::MAX));
    let (mut a, mut b) = (K::MIN, K::MIN);
    for &x in &keys {
        let below = keys.iter().fold(0u32, |c, &y| c + (y < x) as u32) as usize;
        a = if below <= j { a.max(x) } else { a };
        b = if below <= j + 1 { b.max(x) } else { b };
    }
    (a, (j + 1 < s.len()).then_some(b))
}

multiversion! {
/// The keys of ranks `j` and, when `next` and it exists, `j + 1` of `v` (0-based, in
/// sorted order), by quickselect: `v` is reordered. O(n) expected; after too many
/// unlucky rounds the range left is sorted, so O(n log n) at worst.
///
/// # Panics
/// When `j >= v.len()`.
///
/// ```
/// use masked_core::select::select_pair;
/// let mut v = [9u32, 1, 7, 3, 3, 8];
/// assert_eq!(select_pair(&mut v, 2, true), (3, Some(7)));
/// assert_eq!(select_pair(&mut v, 5, true), (9, None));
/// ```
    pub fn select_pair[K: SelectKey](v: &mut [K], j: usize, next: bool) -> (K, Option<K>) = select_kernel;
}

#[inline(always)]
fn select_kernel<K: SelectKey>(v: &mut [K], j: usize, next: bool) -> (K, Option<K>) {
    assert!(j < v.len(), "select_pair: rank {j} of {} keys", v.len());
    let (mut lo, mut hi) = (0, v.len());
    // the smallest key right of `hi` (all of them rank above `j`), when `hi < len`
    let mut upper = K::MAX;
    let mut rounds = 2 * (usize::BITS - v.len().leading_zeros()) + 4;
    let len = v.len();
    let right = |hi: usize, upper: K| (hi < len).then_some(upper);
    loop {
        let n = hi - lo;
        let s = &mut v[lo..hi];
        if n <= SMALL {
            let (a, b) = small_pair(s, j - lo);
            let b = if next { b.or(right(hi, upper)) } else { None };
            return (a, b);
        }
        if rounds == 0 {
            s.sort_unstable();
            let a = s[j - lo];
            let b = next.then(|| s.get(j + 1 - lo).copied()).flatten();
            return (a, b.or(if next { right(hi, upper) } else { None }));
        }
        rounds -= 1;
        let med3 = |a: K, b: K, c: K| a.max(b).min(a.min(b).max(c));
        let p = if n >= 64 {
            // Tukey's ninther: a pivot nearer the middle, fewer rounds
            let q = n / 8;
            med3(
                med3(s[0], s[q], s[2 * q]),
                med3(s[3 * q], s[4 * q], s[5 * q]),
                med3(s[6 * q], s[7 * q], s[n - 1]),
            )
        } else {
            med3(s[0], s[n / 2], s[n - 1])
        };
        let (below, rest_min) = K::partition(s, p, false);
        if below == 0 {
            // p is the minimum: split off the keys equal to it
            let (eq, rest_min) = K::partition(s, p, true);
            if j - lo < eq {
                let b = if j + 1 - lo < eq {
                    Some(p)
                } else if eq < n {
                    Some(rest_min.min(upper))
                } else {
                    right(hi, upper)
                };
                return (p, b.filter(|_| next));
            }
            lo += eq;
        } else if j - lo < below {
            hi = lo + below;
            upper = upper.min(rest_min);
        } else {
            lo += below;
        }
    }
}

/// The key of rank `j` of the multiset `v` plus `zeros` copies of `zero` (and of rank
/// `j + 1` when `next` and it exists), without writing the copies: the implicit zeros of
/// a sparse lane. `v` is reordered.
///
/// # Panics
/// When `j >= v.len() + zeros`.
pub fn select_pair_with_zeros<K: SelectKey>(
    v: &mut [K],
    zeros: usize,
    zero: K,
    j: usize,
    next: bool,
) -> (K, Option<K>) {
    if zeros == 0 {
        return select_pair(v, j, next);
    }
    // keys below zero first, then the rest: the zeros sit between the two parts
    let (below, _) = K::partition(v, zero, false);
    let n = v.len() + zeros;
    let b_exists = next && j + 1 < n;
    if j < below {
        let (a, b) = select_pair(&mut v[..below], j, next);
        (a, b.or(b_exists.then_some(zero)))
    } else if j < below + zeros {
        let b = if j + 1 < below + zeros {
            zero
        } else {
            // the smallest key at or above zero
            v[below..].iter().copied().min().unwrap_or(zero)
        };
        (zero, b_exists.then_some(b))
    } else {
        select_pair(&mut v[below..], j - below - zeros, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check<K: SelectKey>(
        v: Vec<K>,
        zeros: usize,
        zero: K,
        j: usize,
    ) -> Result<(), TestCaseError> {
        let mut sorted = v.clone();
        sorted.extend(std::iter::repeat_n(zero, zeros));
        sorted.sort();
        let j = j % sorted.len();
        let mut w = v.clone();
        let (a, b) = select_pair_with_zeros(&mut w, zeros, zero, j, true);
        prop_assert_eq!(a, sorted[j]);
        prop_assert_eq!(b, sorted.get(j + 1).copied());
        let mut w = v.clone();
        let (a, b) = select_pair_with_zeros(&mut w, zeros, zero, j, false);
        prop_assert_eq!((a, b), (sorted[j], None));
        // the keys are only reordered
        w.sort();
        let mut v = v;
        v.sort();
        prop_assert_eq!(w, v);
        Ok(())
    }

    fn run_both(f: impl Fn() -> Result<(), TestCaseError>) -> Result<(), TestCaseError> {
        for portable in [false, true] {
            crate::pack::tests::set_portable(portable);
            let r = f();
            crate::pack::tests::set_portable(false);
            r?;
        }
        Ok(())
    }

    proptest! {
        /// Both ranks equal a sort's, with and without implicit zeros, on inputs with many
        /// ties (the minimum as pivot included), short and long (past the scratch), for
        /// both key widths and on both the vector and the portable partition.
        #[test]
        fn select_pair_matches_a_sort(
            v in prop::collection::vec(prop_oneof![0u32..4, 0u32..1000, Just(u32::MAX)], 1..700),
            long in any::<bool>(),
            zeros in prop_oneof![Just(0usize), 0usize..50],
            zero in 0u32..1000,
            j in any::<usize>(),
        ) {
            let mut v = v;
            if long {
                // longer than the vector partition's scratch
                let more: Vec<u32> = (0..5000u32).map(|k| k.wrapping_mul(2654435761) % 3000).collect();
                v.extend(more);
            }
            let wide: Vec<u64> = v.iter().map(|&x| (x as u64) << 20 | 7).collect();
            run_both(|| {
                check(v.clone(), zeros, zero, j)?;
                check(wide.clone(), zeros, (zero as u64) << 20, j)
            })?;
        }
    }
}
