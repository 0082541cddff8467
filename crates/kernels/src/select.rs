//! Selection: the element of a given rank of a lane (and the next one), the engine of
//! median and quantile. It runs on integer order keys (masked-core's `Element::key`), so a compare
//! is one integer instruction. A round narrows the keys to a band around the rank
//! sought: with AVX2 a count pass takes 8 32-bit keys per step (two compares) and the
//! compress pass that keeps the band 8 per step as well (a compare pair, a table
//! permutation, one store).

// index loops in the kernels on purpose (see `run.rs`'s note above `map_kernel`)
#![allow(clippy::needless_range_loop)]

use crate::multiversion;
use std::fmt::Debug;

/// Ranges of at most this many keys are finished by counting ([`small_pair`]).
const SMALL: usize = 16;

/// An unsigned integer order key: the order of the values it stands for (see
/// masked-core's `Element::key`), with selection on slices of keys.
pub trait SelectKey:
    Ord
    + Copy
    + Send
    + Sync
    + Debug
    + 'static
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
{
    /// The smallest key.
    const MIN: Self;
    /// The largest key.
    const MAX: Self;
    /// The key one above `MIN`: the step between neighbouring keys.
    const ONE: Self;
    /// How many keys of `s` are `< lo`, how many `<= hi`, and the smallest key `> hi`
    /// (`MAX` when there is none): one read-only pass.
    fn count3(s: &[Self], lo: Self, hi: Self) -> (usize, usize, Self) {
        count3_scalar(s, lo, hi)
    }
    /// Moves the keys of `s` in `lo..=hi` to its front, in order, and returns how many
    /// there are; the slots after them are left unspecified.
    fn keep(s: &mut [Self], lo: Self, hi: Self) -> usize {
        keep_scalar(s, lo, hi)
    }
    /// The key before this one (`self - 1`; never called on `MIN`).
    #[inline(always)]
    fn prev(self) -> Self {
        self - Self::ONE
    }
    /// The key after this one (`self + 1`; never called on `MAX`).
    #[inline(always)]
    fn succ(self) -> Self {
        self + Self::ONE
    }
}

/// The portable [`SelectKey::count3`]: branch-free counts and minimum.
#[inline(always)]
fn count3_scalar<K: SelectKey>(s: &[K], lo: K, hi: K) -> (usize, usize, K) {
    let (mut below, mut upto, mut above_min) = (0usize, 0usize, K::MAX);
    for &x in s {
        below += (x < lo) as usize;
        upto += (x <= hi) as usize;
        above_min = if x > hi { above_min.min(x) } else { above_min };
    }
    (below, upto, above_min)
}

/// The portable [`SelectKey::keep`]: every key is written, the cursor moves on a hit.
#[inline(always)]
fn keep_scalar<K: SelectKey>(s: &mut [K], lo: K, hi: K) -> usize {
    let mut w = 0;
    for i in 0..s.len() {
        let x = s[i];
        s[w] = x;
        w += (lo <= x && x <= hi) as usize;
    }
    w
}

#[cfg(target_arch = "x86_64")]
mod avx2_band {
    use crate::pack::x86::COMPRESS8;
    use std::arch::x86_64::*;

    const L: usize = 8;

    /// The lanes below `rem` as all-ones (the live lanes of a last partial vector).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn live(rem: usize) -> __m256i {
        let iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_cmpgt_epi32(_mm256_set1_epi32(rem as i32), iota)
    }

    /// Keys compared in unsigned order through signed compares: sign bits flipped.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn biased(x: __m256i) -> __m256i {
        _mm256_xor_si256(x, _mm256_set1_epi32(i32::MIN))
    }

    /// The running state of [`count3_u32`]: lane counts below `lo` and above `hi`, and
    /// the lane minima above `hi`.
    struct Count3 {
        lob: __m256i,
        hib: __m256i,
        below: __m256i,
        above: __m256i,
        amin: __m256i,
    }

    impl Count3 {
        #[target_feature(enable = "avx2")]
        #[inline]
        fn step(&mut self, x: __m256i, live: __m256i) {
            let xb = biased(x);
            let lt = _mm256_and_si256(_mm256_cmpgt_epi32(self.lob, xb), live);
            let gt = _mm256_and_si256(_mm256_cmpgt_epi32(xb, self.hib), live);
            self.below = _mm256_sub_epi32(self.below, lt);
            self.above = _mm256_sub_epi32(self.above, gt);
            // keys not above `hi` (and dead lanes) count as MAX for the minimum
            let not_gt = _mm256_xor_si256(gt, _mm256_set1_epi32(-1));
            self.amin = _mm256_min_epu32(self.amin, _mm256_or_si256(x, not_gt));
        }
    }

    /// [`super::SelectKey::count3`] for `u32`, 8 keys per step.
    ///
    /// # Safety
    /// The CPU has AVX2, and `s.len() < 2^31`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn count3_u32(s: &[u32], lo: u32, hi: u32) -> (usize, usize, u32) {
        let n = s.len();
        let src = s.as_ptr();
        let mut st = Count3 {
            lob: biased(_mm256_set1_epi32(lo as i32)),
            hib: biased(_mm256_set1_epi32(hi as i32)),
            below: _mm256_setzero_si256(),
            above: _mm256_setzero_si256(),
            amin: _mm256_set1_epi32(-1),
        };
        let all = _mm256_set1_epi32(-1);
        let mut i = 0;
        // SAFETY: whole vectors load `s[i..i + 8]` with `i + 8 <= n`; the last partial
        // vector loads only its live lanes.
        unsafe {
            while i + L <= n {
                st.step(_mm256_loadu_si256(src.add(i) as *const __m256i), all);
                i += L;
            }
            if i < n {
                let m = live(n - i);
                st.step(_mm256_maskload_epi32(src.add(i) as *const i32, m), m);
            }
        }
        let (mut b, mut a, mut mn) = ([0u32; L], [0u32; L], [0u32; L]);
        // SAFETY: each store writes one vector into an 8-key array.
        unsafe {
            _mm256_storeu_si256(b.as_mut_ptr() as *mut __m256i, st.below);
            _mm256_storeu_si256(a.as_mut_ptr() as *mut __m256i, st.above);
            _mm256_storeu_si256(mn.as_mut_ptr() as *mut __m256i, st.amin);
        }
        let (mut below, mut above, mut least) = (0usize, 0usize, u32::MAX);
        for k in 0..L {
            below += b[k] as usize;
            above += a[k] as usize;
            least = least.min(mn[k]);
        }
        (below, n - above, least)
    }

    /// All ones in the lanes of `x` outside `lo..=hi` (both biased).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn outside(x: __m256i, lob: __m256i, hib: __m256i) -> __m256i {
        let xb = biased(x);
        _mm256_or_si256(_mm256_cmpgt_epi32(lob, xb), _mm256_cmpgt_epi32(xb, hib))
    }

    /// [`super::SelectKey::keep`] for `u32`: a compare pair gives an 8-bit mask whose
    /// table entry moves the kept lanes first; the vector is stored at the kept part's
    /// end, which never passes the read position.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2,popcnt")]
    pub(super) unsafe fn keep_u32(s: &mut [u32], lo: u32, hi: u32) -> usize {
        let n = s.len();
        let src = s.as_mut_ptr();
        let lob = biased(_mm256_set1_epi32(lo as i32));
        let hib = biased(_mm256_set1_epi32(hi as i32));
        let (mut w, mut i) = (0usize, 0usize);
        // SAFETY: loads read `s[i..i + 8]` with `i + 8 <= n`, stores write
        // `s[w..w + 8]` with `w <= i`, slots already read; the last partial vector
        // loads and stores only live lanes; table rows are 8 keys.
        unsafe {
            while i + L <= n {
                let x = _mm256_loadu_si256(src.add(i) as *const __m256i);
                let out = _mm256_movemask_ps(_mm256_castsi256_ps(outside(x, lob, hib)));
                let m = !out as usize & 0xff;
                let perm = _mm256_loadu_si256(COMPRESS8[m].as_ptr() as *const __m256i);
                let y = _mm256_permutevar8x32_epi32(x, perm);
                _mm256_storeu_si256(src.add(w) as *mut __m256i, y);
                w += m.count_ones() as usize;
                i += L;
            }
            if i < n {
                let lv = live(n - i);
                let x = _mm256_maskload_epi32(src.add(i) as *const i32, lv);
                let keep = _mm256_andnot_si256(outside(x, lob, hib), lv);
                let m = _mm256_movemask_ps(_mm256_castsi256_ps(keep)) as usize;
                let perm = _mm256_loadu_si256(COMPRESS8[m].as_ptr() as *const __m256i);
                let c = m.count_ones() as usize;
                let y = _mm256_permutevar8x32_epi32(x, perm);
                _mm256_maskstore_epi32(src.add(w) as *mut i32, live(c), y);
                w += c;
            }
        }
        w
    }
}

/// Whether the vector kernels run (AVX2 on x86-64; tests can force the portable ones).
#[inline]
fn vector_keys() -> bool {
    #[cfg(test)]
    if crate::pack::tests::forced_portable() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        crate::cpu::has_avx2()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl SelectKey for u32 {
    const MIN: Self = 0;
    const MAX: Self = u32::MAX;
    const ONE: Self = 1;
    #[inline]
    fn count3(s: &[Self], lo: Self, hi: Self) -> (usize, usize, Self) {
        #[cfg(target_arch = "x86_64")]
        if s.len() < 1 << 31 && vector_keys() {
            // SAFETY: AVX2 checked at run time; the length is in bounds.
            return unsafe { avx2_band::count3_u32(s, lo, hi) };
        }
        count3_scalar(s, lo, hi)
    }
    #[inline]
    fn keep(s: &mut [Self], lo: Self, hi: Self) -> usize {
        #[cfg(target_arch = "x86_64")]
        if vector_keys() {
            // SAFETY: AVX2 checked at run time.
            return unsafe { avx2_band::keep_u32(s, lo, hi) };
        }
        keep_scalar(s, lo, hi)
    }
}

/// 64-bit keys run the portable passes.
impl SelectKey for u64 {
    const MIN: Self = 0;
    const MAX: Self = u64::MAX;
    const ONE: Self = 1;
}

/// Keys of the half-precision floats: AVX-512 (BW) passes, 32 keys per step, where the
/// CPU has them (`keep` also needs VBMI2's 16-bit compress), else the portable ones.
impl SelectKey for u16 {
    const MIN: Self = 0;
    const MAX: Self = u16::MAX;
    const ONE: Self = 1;
    #[inline]
    fn count3(s: &[Self], lo: Self, hi: Self) -> (usize, usize, Self) {
        #[cfg(target_arch = "x86_64")]
        if vector_keys16(false) {
            // SAFETY: AVX-512 checked at run time.
            return unsafe { avx512_band16::count3_u16(s, lo, hi) };
        }
        count3_scalar(s, lo, hi)
    }
    #[inline]
    fn keep(s: &mut [Self], lo: Self, hi: Self) -> usize {
        #[cfg(target_arch = "x86_64")]
        if vector_keys16(true) {
            // SAFETY: AVX-512 and VBMI2 checked at run time.
            return unsafe { avx512_band16::keep_u16(s, lo, hi) };
        }
        keep_scalar(s, lo, hi)
    }
}

/// Whether the 16-bit vector passes run: AVX-512 (and VBMI2 for `compress`); tests can
/// force the portable ones.
#[inline]
fn vector_keys16(compress: bool) -> bool {
    #[cfg(test)]
    if crate::pack::tests::forced_portable() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if compress {
            crate::cpu::has_avx512_vbmi2()
        } else {
            crate::cpu::has_avx512()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = compress;
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512_band16 {
    use crate::pack::x86::low32 as live;
    use std::arch::x86_64::*;

    /// [`super::SelectKey::count3`] for `u16`, 32 keys per step: unsigned compares to
    /// masks, their popcounts, and a masked minimum of the keys above `hi`.
    ///
    /// # Safety
    /// The CPU has AVX-512 (F, BW).
    #[target_feature(enable = "avx512f,avx512bw,popcnt")]
    pub(super) unsafe fn count3_u16(s: &[u16], lo: u16, hi: u16) -> (usize, usize, u16) {
        let n = s.len();
        let (lov, hiv) = (_mm512_set1_epi16(lo as i16), _mm512_set1_epi16(hi as i16));
        let (mut below, mut above) = (0usize, 0usize);
        let mut amin = _mm512_set1_epi16(-1);
        let mut i = 0;
        // SAFETY: each load is masked to the keys of `s[i..n]`.
        unsafe {
            while i < n {
                let m = live(n - i);
                let x = _mm512_maskz_loadu_epi16(m, s.as_ptr().add(i) as *const i16);
                let lt = _mm512_mask_cmplt_epu16_mask(m, x, lov);
                let gt = _mm512_mask_cmpgt_epu16_mask(m, x, hiv);
                below += lt.count_ones() as usize;
                above += gt.count_ones() as usize;
                amin = _mm512_mask_min_epu16(amin, gt, amin, x);
                i += 32;
            }
        }
        let mut mn = [0u16; 32];
        // SAFETY: one vector into a 32-key array.
        unsafe { _mm512_storeu_epi16(mn.as_mut_ptr() as *mut i16, amin) };
        let mut least = u16::MAX;
        for k in 0..32 {
            least = least.min(mn[k]);
        }
        (below, n - above, least)
    }

    /// [`super::SelectKey::keep`] for `u16`: the kept lanes of 32 keys compressed
    /// (`vpcompressw`) and stored at the kept part's end, which never passes the
    /// keys already read.
    ///
    /// # Safety
    /// The CPU has AVX-512 (F, BW) and VBMI2.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi2,popcnt")]
    pub(super) unsafe fn keep_u16(s: &mut [u16], lo: u16, hi: u16) -> usize {
        let n = s.len();
        let p = s.as_mut_ptr();
        let (lov, hiv) = (_mm512_set1_epi16(lo as i16), _mm512_set1_epi16(hi as i16));
        let (mut w, mut i) = (0usize, 0usize);
        // SAFETY: loads are masked to `s[i..n]`; a store writes `c` keys at `w`, and
        // `w + c <= i + 32` within the slots just read (`w <= i`), masked below `n`.
        unsafe {
            while i < n {
                let m = live(n - i);
                let x = _mm512_maskz_loadu_epi16(m, p.add(i) as *const i16);
                let ge = _mm512_mask_cmpge_epu16_mask(m, x, lov);
                let keep = _mm512_mask_cmple_epu16_mask(ge, x, hiv);
                let c = keep.count_ones() as usize;
                let y = _mm512_maskz_compress_epi16(keep, x);
                _mm512_mask_storeu_epi16(p.add(w) as *mut i16, live(c), y);
                w += c;
                i += 32;
            }
        }
        w
    }
}

/// The keys of ranks `j` and `j + 1` (when there is one) of at most [`SMALL`] keys, by
/// counting rather than sorting ([`ranks2`]); padding with `MAX` changes no answer.
#[inline(always)]
fn small_pair<K: SelectKey>(s: &[K], j: usize) -> (K, Option<K>) {
    // plain loops, no iterator adapters, in this kernel (see `run.rs`'s note on them)
    let mut keys = [K::MAX; SMALL];
    #[allow(clippy::manual_memcpy)] // a few keys: no call to `memcpy`
    for k in 0..s.len().min(SMALL) {
        keys[k] = s[k];
    }
    let (a, b) = ranks2(&keys, j, j + 1);
    (a, (j + 1 < s.len()).then_some(b))
}

/// The keys of ranks `r1` and `r2` of [`SMALL`] keys: the key of rank `r` is the largest
/// `x` with at most `r` keys below it. Fixed trip counts and no branches on the data
/// (the counts vectorise).
#[inline(always)]
fn ranks2<K: SelectKey, const M: usize>(keys: &[K; M], r1: usize, r2: usize) -> (K, K) {
    // one key against all at a time: the inner loop is a vector compare per 8 keys
    let mut below = [0u32; M];
    for i in 0..M {
        for k in 0..M {
            below[k] += (keys[i] < keys[k]) as u32;
        }
    }
    let (r1, r2) = (r1.min(M) as u32, r2.min(M) as u32);
    (pick(keys, &below, r1), pick(keys, &below, r2))
}

/// The largest key with at most `r` keys below it (`below[k]` counts those of key `k`).
#[inline(always)]
fn pick<K: SelectKey, const M: usize>(keys: &[K; M], below: &[u32; M], r: u32) -> K {
    let mut a = K::MIN;
    for k in 0..M {
        a = a.max(if below[k] <= r { keys[k] } else { K::MIN });
    }
    a
}

/// Sample keys of rank `t - BAND ..= t + BAND` (of [`SAMPLE`]) bound a selection round's
/// band: it holds the rank sought most of the time, and about a quarter of the keys.
const BAND: usize = 1;
/// Keys in a band's sample.
const SAMPLE: usize = 8;

multiversion! {
/// The keys of ranks `j` and, when `next` and it exists, `j + 1` of `v` (0-based, in
/// sorted order). `v` is scratch: its contents are unspecified afterwards.
///
/// Each round takes a band around rank `j` from a sample of 8 keys (their keys
/// of sample ranks `t - 1 ..= t + 1`, `t` the sample rank matching `j`), counts the keys
/// below, in and above it in one read-only pass, and keeps only the part holding rank
/// `j` at the front (a vector compress): about a quarter of the keys after a typical
/// round, one predictable branch per round. At most 16 keys are finished by counting.
/// O(n) expected; after too many unlucky rounds the keys left are sorted, so
/// O(n log n) at worst.
///
/// # Panics
/// When `j >= v.len()`.
///
/// ```
/// use masked_kernels::select::select_pair;
/// assert_eq!(select_pair(&mut [9u32, 1, 7, 3, 3, 8], 2, true), (3, Some(7)));
/// assert_eq!(select_pair(&mut [9u32, 1, 7, 3, 3, 8], 5, true), (9, None));
/// ```
    pub fn select_pair[K: SelectKey](v: &mut [K], j: usize, next: bool) -> (K, Option<K>) = select_kernel;
}

multiversion! {
/// The key of rank `j` of the multiset `v` plus `zeros` copies of `zero` (and of rank
/// `j + 1` when `next` and it exists), without writing the copies: the implicit zeros of
/// a sparse lane. `v` is scratch, as for [`select_pair`]. The zeros are the first
/// round's band (`zero ..= zero`, counted with the explicit ones); the rounds that follow
/// are [`select_pair`]'s.
///
/// # Panics
/// When `j >= v.len() + zeros`.
///
/// ```
/// use masked_kernels::select::select_pair_with_zeros;
/// // stored [5, 0, 7] and two implicit zeros: [0, 0, 0, 5, 7]
/// assert_eq!(select_pair_with_zeros(&mut [5u32, 0, 7], 2, 0, 1, true), (0, Some(0)));
/// assert_eq!(select_pair_with_zeros(&mut [5u32, 0, 7], 2, 0, 2, true), (0, Some(5)));
/// // the "zero" key may be any key: stored [5, 1, 7] and two 3s: [1, 3, 3, 5, 7]
/// assert_eq!(select_pair_with_zeros(&mut [5u32, 1, 7], 2, 3, 2, true), (3, Some(5)));
/// assert_eq!(select_pair_with_zeros(&mut [5u32, 1, 7], 2, 3, 0, true), (1, Some(3)));
/// ```
    pub fn select_pair_with_zeros[K: SelectKey](v: &mut [K], zeros: usize, zero: K, j: usize, next: bool) -> (K, Option<K>) = zeros_kernel;
}

/// What a three-part step around a band left to do.
enum Step<K> {
    /// The rank fell among keys all equal: the answer pair.
    Done(K, Option<K>),
    /// The candidates are now `v[..n]`, the rank sought `r`, the smallest key dropped
    /// above them `upper`.
    Narrow(usize, usize, Option<K>),
}

/// One step around the band `lo..=hi` of the candidates `s` (with `extra` further
/// implicit copies of `lo` when `lo == hi`), given `count3(s, lo, hi)`: the part holding
/// rank `r` is kept at the front, or, when the band is one key, the answer is known.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn step<K: SelectKey>(
    s: &mut [K], r: usize, (lo, hi): (K, K), extra: usize,
    (below, upto, above_min): (usize, usize, K), upper: Option<K>, next: bool,
) -> Step<K> {
    let lower = |u: Option<K>, k: K| Some(u.map_or(k, |u| u.min(k)));
    let (n, upto) = (s.len(), upto + extra);
    if r < below {
        // some key is below `lo`, so `lo > MIN`
        let k = K::keep(s, K::MIN, lo.prev());
        return Step::Narrow(k, r, lower(upper, lo));
    }
    if r >= upto {
        // some key is above `hi`, so `hi < MAX`
        let k = K::keep(s, hi.succ(), K::MAX);
        return Step::Narrow(k, r - upto, upper);
    }
    let upper = if upto < n + extra {
        lower(upper, above_min)
    } else {
        upper
    };
    if lo == hi {
        let b = if r + 1 < upto { Some(lo) } else { upper };
        return Step::Done(lo, b.filter(|_| next));
    }
    Step::Narrow(K::keep(s, lo, hi), r - below, upper)
}

#[inline(always)]
fn zeros_kernel<K: SelectKey>(
    v: &mut [K], zeros: usize, zero: K, j: usize, next: bool,
) -> (K, Option<K>) {
    assert!(
        j < v.len() + zeros,
        "select_pair_with_zeros: rank {j} of {} keys",
        v.len() + zeros
    );
    if zeros == 0 {
        return select_kernel(v, j, next);
    }
    let counts = K::count3(v, zero, zero);
    match step(v, j, (zero, zero), zeros, counts, None, next) {
        Step::Done(a, b) => (a, b),
        Step::Narrow(n, r, upper) => rounds(v, n, r, upper, next),
    }
}

#[inline(always)]
fn select_kernel<K: SelectKey>(v: &mut [K], j: usize, next: bool) -> (K, Option<K>) {
    assert!(j < v.len(), "select_pair: rank {j} of {} keys", v.len());
    rounds(v, v.len(), j, None, next)
}

/// The band rounds on the candidates `v[..n]` for rank `r`, `upper` the smallest key
/// already dropped above them.
#[inline(always)]
fn rounds<K: SelectKey>(
    v: &mut [K], mut n: usize, mut r: usize, mut upper: Option<K>, next: bool,
) -> (K, Option<K>) {
    let mut rounds = 2 * (usize::BITS - n.leading_zeros()) + 4;
    loop {
        let s = &mut v[..n];
        if n <= SMALL {
            let (a, b) = small_pair(s, r);
            return (a, if next { b.or(upper) } else { None });
        }
        if rounds == 0 {
            s.sort_unstable();
            let b = s.get(r + 1).copied().or(upper);
            return (s[r], b.filter(|_| next));
        }
        rounds -= 1;
        // the band: sample keys around the rank sought
        // SAFETY: `(2i + 1) n / 16 <= 15 n / 16 < n`.
        let mut sample = [K::MIN; SAMPLE];
        for i in 0..SAMPLE {
            sample[i] = unsafe { *s.get_unchecked((2 * i + 1) * n / (2 * SAMPLE)) };
        }
        let t = r * SAMPLE / n;
        let (mut lo, mut hi) = ranks2(&sample, t.saturating_sub(BAND), (t + BAND).min(SAMPLE - 1));
        let mut counts = K::count3(s, lo, hi);
        if counts.0 == 0 && counts.1 == n && lo < hi {
            // the band holds every key (few distinct ones): one pivot, three parts
            (lo, _) = ranks2(&sample, t, t);
            hi = lo;
            counts = K::count3(s, lo, hi);
        }
        match step(s, r, (lo, hi), 0, counts, upper, next) {
            Step::Done(a, b) => return (a, b),
            Step::Narrow(k, rr, u) => (n, r, upper) = (k, rr, u),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check<K: SelectKey>(
        v: Vec<K>, zeros: usize, zero: K, j: usize,
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
        /// all three key widths and on both the vector and the portable kernels.
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
                // long: many rounds
                let more: Vec<u32> = (0..5000u32).map(|k| k.wrapping_mul(2654435761) % 3000).collect();
                v.extend(more);
            }
            let wide: Vec<u64> = v.iter().map(|&x| (x as u64) << 20 | 7).collect();
            // 16-bit keys (the halves'): the values folded into u16, MAX kept
            let narrow: Vec<u16> = v.iter().map(|&x| if x == u32::MAX { u16::MAX } else { (x * 37 % 65521) as u16 }).collect();
            run_both(|| {
                check(v.clone(), zeros, zero, j)?;
                check(narrow.clone(), zeros, (zero * 37 % 65521) as u16, j)?;
                check(wide.clone(), zeros, (zero as u64) << 20, j)
            })?;
        }
    }
}
