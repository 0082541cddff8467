//! Packing a lane's valid elements together and spreading them back: the bridge between
//! a bit mask and code that wants only the valid values (an `exp` evaluated for valid
//! elements only, a selection over them). On AVX-512 a 16-bit slice of a mask word is a
//! mask register, and `vpcompressd`/`vpexpandd` (`q` for 8-byte elements) move 16 (8)
//! elements per instruction; elsewhere a portable loop does the same.

use crate::bits::Bits;

/// Whether the vector paths handle `T` (4- or 8-byte elements, moved as raw bits).
#[inline(always)]
fn packable<T>() -> bool {
    matches!(std::mem::size_of::<T>(), 4 | 8)
}

/// Whether [`compress_to`] and [`expand_to`] run as vector code on this CPU for elements
/// of type `T` (4 or 8 bytes): AVX-512 compress/expand, or AVX2 permutes from a table.
/// Folds then prefer packing valid elements to masking them, on both kinds of CPU alike,
/// so that a lane folds in the same order whether it comes packed or with a mask.
#[inline]
pub fn packs_fast<T>() -> bool {
    #[cfg(test)]
    if tests::PORTABLE.load(std::sync::atomic::Ordering::Relaxed) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use crate::cpu;
        packable::<T>() && (cpu::has_avx512() || cpu::has_avx2())
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether [`compress_to`] and [`expand_to`] run as AVX-512 VBMI2 compress/expand on
/// this CPU for 2-byte elements (the halves). Folds keep their masked kernels for those
/// ([`packs_fast`] stays false): this speeds up the explicit packing (a lane VJP's
/// gather and spread) only.
#[inline]
fn packs16_fast<T>() -> bool {
    #[cfg(test)]
    if tests::PORTABLE.load(std::sync::atomic::Ordering::Relaxed) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        std::mem::size_of::<T>() == 2 && crate::cpu::has_avx512_vbmi2()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Writes the elements of `xs` whose bit is set in `bits` (in order) to the front of
/// `out` and returns how many there are, `n`; `out[n..]` may be overwritten as well.
///
/// # Panics
/// When `out` is shorter than `xs`.
///
/// ```
/// use masked_kernels::{pack::compress_to, Bits};
/// let words = [0b1011u64];
/// let mut out = [0i32; 4];
/// let n = compress_to(&[1, 2, 3, 4], Bits::new(&words, 0), &mut out);
/// assert_eq!(&out[..n], &[1, 2, 4]);
/// ```
pub fn compress_to<T: Copy>(xs: &[T], bits: Bits<'_>, out: &mut [T]) -> usize {
    assert!(
        out.len() >= xs.len(),
        "compress_to: output shorter than input"
    );
    // SAFETY: `out` has room for `xs.len()` elements (asserted).
    unsafe { compress_raw(xs, bits, out.as_mut_ptr(), out.len()) }
}

/// [`compress_to`] into `cap` slots at `dst`, which may be uninitialised: slots past the
/// returned count may be overwritten too (with copies of input elements).
///
/// # Safety
/// `dst` is valid for writes of `cap >= xs.len()` elements.
#[inline]
unsafe fn compress_raw<T: Copy>(xs: &[T], bits: Bits<'_>, dst: *mut T, cap: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    if packs_fast::<T>() {
        // SAFETY: the CPU has AVX-512, or AVX2, and `T` is 4 or 8 bytes (checked by
        // `packs_fast`), and the caller provides `cap >= xs.len()` writable slots.
        return unsafe {
            if crate::cpu::has_avx512() {
                x86::compress(xs, bits, dst, cap)
            } else {
                x86::compress_avx2(xs, bits, dst, cap)
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    if packs16_fast::<T>() {
        // SAFETY: AVX-512 VBMI2 and a 2-byte `T`, checked by `packs16_fast`; the caller
        // provides `cap >= xs.len()` writable slots.
        return unsafe { x86::compress16(xs, bits, dst) };
    }
    let mut o = 0;
    #[allow(clippy::needless_range_loop)] // index loops, as in the kernels (run.rs)
    for c in 0..xs.len().div_ceil(64) {
        let ch = &xs[c * 64..xs.len().min(c * 64 + 64)];
        let w = bits.word_at(c * 64);
        for k in 0..ch.len() {
            // branch-free: always write, advance on a set bit (o <= k < cap)
            // SAFETY: `o` never exceeds the index of `ch[k]` in `xs`, below `cap`.
            unsafe { dst.add(o).write(ch[k]) };
            o += ((w >> k) & 1) as usize;
        }
    }
    o
}

/// Appends the valid elements of `xs` (bit set; all for `None`) to `out`: the gather of
/// a lane's values for a statistic. [`compress_to`] into the vector's spare capacity.
///
/// ```
/// use masked_kernels::{pack::compress_into, Bits};
/// let words = [0b0110u64];
/// let mut out = vec![9.0f64];
/// compress_into(&[1.0, 2.0, 3.0, 4.0], Some(Bits::new(&words, 0)), &mut out);
/// assert_eq!(out, [9.0, 2.0, 3.0]);
/// ```
#[inline]
pub fn compress_into<T: Copy>(xs: &[T], bits: Option<Bits<'_>>, out: &mut Vec<T>) {
    let Some(b) = bits else {
        out.extend_from_slice(xs);
        return;
    };
    out.reserve(xs.len());
    let len = out.len();
    let spare = out.spare_capacity_mut();
    // SAFETY: `spare` has room for `xs.len()` elements (reserved); the first `k` of them
    // are written by the compress before the length covers them.
    unsafe {
        let k = compress_raw(xs, b, spare.as_mut_ptr().cast::<T>(), spare.len());
        out.set_len(len + k);
    }
}

/// The inverse of [`compress_to`]: writes `vals` in order to the positions of `out`
/// whose bit is set in `bits` and `fill` everywhere else. `vals` must hold at least as
/// many elements as there are set bits among the first `out.len()`.
///
/// # Panics
/// When `vals` is too short.
///
/// ```
/// use masked_kernels::{pack::expand_to, Bits};
/// let words = [0b1011u64];
/// let mut out = [9.0f32; 4];
/// expand_to(&[1.0, 2.0, 4.0], Bits::new(&words, 0), 0.0, &mut out);
/// assert_eq!(out, [1.0, 2.0, 0.0, 4.0]);
/// ```
pub fn expand_to<T: Copy>(vals: &[T], bits: Bits<'_>, fill: T, out: &mut [T]) {
    assert!(
        vals.len() >= bits.count_ones(out.len()),
        "expand_to: fewer values than set bits"
    );
    // SAFETY: `vals` holds a value for every set bit (asserted) and does not overlap
    // `out` (a shared and a unique borrow).
    unsafe { expand_raw(vals.as_ptr(), bits, fill, out.as_mut_ptr(), out.len()) }
}

/// [`expand_to`] within one buffer: the values sit in `buf[from..]` (packed, as many as
/// set bits among `buf.len()`) and are spread over the whole of `buf`. Works in place
/// because the value for a position never lies before it: a lane map can write its
/// valid outputs packed at the end of its output lane, then spread them.
///
/// # Panics
/// When `buf[from..]` holds fewer values than there are set bits.
///
/// ```
/// use masked_kernels::{pack::expand_in_place, Bits};
/// let words = [0b1011u64];
/// let mut buf = [0.0f32, 1.0, 2.0, 4.0];
/// expand_in_place(&mut buf, 1, Bits::new(&words, 0), -1.0);
/// assert_eq!(buf, [1.0, 2.0, -1.0, 4.0]);
/// ```
pub fn expand_in_place<T: Copy>(buf: &mut [T], from: usize, bits: Bits<'_>, fill: T) {
    let n = buf.len();
    assert!(
        from <= n && n - from >= bits.count_ones(n),
        "expand_in_place: fewer values than set bits"
    );
    let p = buf.as_mut_ptr();
    // SAFETY: the values cover every set bit (asserted). Position `q` reads value
    // `from + v(q)` (v(q) = set bits before q) and `from + v(q) >= q`, since the
    // `n - q` positions from `q` on hold at least the `n - from - v(q)` remaining values;
    // so every value is read before its slot is overwritten, also 16 (8) at a time.
    unsafe { expand_raw(p.add(from), bits, fill, p, n) }
}

/// # Safety
/// `src` is valid for reads of as many elements as there are set bits among the first
/// `n` of `bits`, `dst` for `n` writes; if they overlap, `src` is at or after the slot
/// each value goes to (see [`expand_in_place`]).
#[inline]
unsafe fn expand_raw<T: Copy>(src: *const T, bits: Bits<'_>, fill: T, dst: *mut T, n: usize) {
    #[cfg(target_arch = "x86_64")]
    if packs_fast::<T>() {
        // SAFETY: AVX-512, or AVX2, with 4- or 8-byte elements, checked by `packs_fast`;
        // the pointers as above.
        unsafe {
            if crate::cpu::has_avx512() {
                x86::expand(src, bits, fill, dst, n)
            } else {
                x86::expand_avx2(src, bits, fill, dst, n)
            }
        };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if packs16_fast::<T>() {
        // SAFETY: AVX-512 VBMI2 and a 2-byte `T`, checked by `packs16_fast`; the
        // pointers as above.
        unsafe { x86::expand16(src, bits, fill, dst, n) };
        return;
    }
    // one mask word per 64 positions and no branch per element: every position reads a
    // value slot (the next one, or the last where none is left) and selects
    let total = bits.count_ones(n);
    if total == 0 {
        for q in 0..n {
            // SAFETY: `q < n`
            unsafe { dst.add(q).write(fill) };
        }
        return;
    }
    let last = total - 1;
    let mut o = 0;
    let mut q = 0;
    while q < n {
        let len = (n - q).min(64);
        let w = bits.word_at(q);
        for k in 0..len {
            let on = (w >> k) & 1;
            // SAFETY: `o.min(last) < total`, a value slot of `src` (read before its
            // value's own slot is written, as above; a value read at a clear bit is not
            // used); `q + k < n`
            unsafe {
                let v = src.add(o.min(last)).read();
                dst.add(q + k).write(if on == 1 { v } else { fill });
            }
            o += on as usize;
        }
        q += len;
    }
}

/// Runs `f` on the valid elements of `xs` (bit set; all for `None`) in order, as
/// contiguous slices covering at most [`crate::BLOCK`] input elements each: the
/// input's own blocks without a mask, packed copies (on the stack) with one. For ops that
/// do real work per valid element (an `exp`), so that masked-out elements cost nothing
/// past the packing pass.
///
/// ```
/// use masked_kernels::{pack::packed_blocks, Bits};
/// let words = [0b0110u64];
/// let mut seen = Vec::new();
/// packed_blocks(&[1.0f32, 2.0, 3.0, 4.0], Some(Bits::new(&words, 0)), |p| seen.extend_from_slice(p));
/// assert_eq!(seen, [2.0, 3.0]);
/// ```
#[inline(always)]
pub fn packed_blocks<T: Copy>(xs: &[T], bits: Option<Bits<'_>>, mut f: impl FnMut(&[T])) {
    const B: usize = crate::BLOCK;
    let Some(b) = bits else {
        xs.chunks(B).for_each(f);
        return;
    };
    let mut buf = block_buf();
    for (c, ch) in xs.chunks(B).enumerate() {
        let p = pack_block(ch, b.offset(c * B), &mut buf);
        if !p.is_empty() {
            f(p);
        }
    }
}

/// A block's packing buffer, uninitialised: filling 16-32 KiB per block would cost as
/// much as packing it.
#[inline(always)]
pub(crate) fn block_buf<T: Copy>() -> [std::mem::MaybeUninit<T>; crate::BLOCK] {
    [std::mem::MaybeUninit::<T>::uninit(); crate::BLOCK]
}

/// The valid elements of `ch` (bit `k` of `bits` for element `k`; at most
/// [`crate::BLOCK`] elements), packed into `buf`. The loop body of
/// [`packed_blocks`], for kernels that must not call a closure per block: a closure is
/// compiled without its caller's `#[target_feature]`s unless it is inlined.
#[inline(always)]
pub(crate) fn pack_block<'b, T: Copy>(
    ch: &[T], bits: Bits<'_>, buf: &'b mut [std::mem::MaybeUninit<T>; crate::BLOCK],
) -> &'b [T] {
    assert!(
        ch.len() <= buf.len(),
        "a block holds at most BLOCK elements"
    );
    // SAFETY: `buf` has `BLOCK >= ch.len()` writable slots.
    let k = unsafe { compress_raw(ch, bits, buf.as_mut_ptr().cast::<T>(), buf.len()) };
    // SAFETY: the first `k` slots were just written.
    unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<T>(), k) }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use crate::bits::Bits;
    use std::arch::x86_64::*;

    /// The AVX2 permutation tables (`vpermd` indices): for each mask of `lanes` bits
    /// (`N = 2^lanes` rows), to compress, the 4-byte lanes of its set lanes in order,
    /// then those of its clear lanes; to expand, for each set lane those of the packed
    /// value it takes (the set lanes below it), 0 for clear lanes. A lane is `8 / lanes`
    /// 4-byte lanes (an 8-byte value moves as a pair).
    const fn table<const N: usize>(lanes: usize, compress: bool) -> [[u32; 8]; N] {
        let w = 8 / lanes;
        let mut t = [[0u32; 8]; N];
        let mut m = 0;
        while m < N {
            let mut k = 0;
            // to compress: the set lanes (pass 0), then the clear ones (pass 1)
            let mut pass = 0;
            while pass < if compress { 2 } else { 1 } {
                let mut l = 0;
                while l < lanes {
                    if (m >> l) & 1 == 1 - pass {
                        let (to, from) = if compress { (k, l) } else { (l, k) };
                        let mut j = 0;
                        while j < w {
                            t[m][w * to + j] = (w * from + j) as u32;
                            j += 1;
                        }
                        k += 1;
                    }
                    l += 1;
                }
                pass += 1;
            }
            m += 1;
        }
        t
    }

    /// The compress table of 4-byte lanes (also the selection's compress).
    pub(crate) static COMPRESS8: [[u32; 8]; 256] = table(8, true);
    /// The expand table of 4-byte lanes.
    static EXPAND8: [[u32; 8]; 256] = table(8, false);
    /// The compress table of 8-byte lanes.
    static COMPRESS4: [[u32; 8]; 16] = table(4, true);
    /// The expand table of 8-byte lanes.
    static EXPAND4: [[u32; 8]; 16] = table(4, false);

    /// The elements of `T` (4 or 8 bytes) in one 256-bit step: 8 or 4.
    const fn step<T>() -> usize {
        32 / std::mem::size_of::<T>()
    }

    /// The compress (or expand) permutation of one step of `T` for its mask `m`.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn perm<T>(compress: bool, m: u32) -> __m256i {
        let row = match (step::<T>() == 8, compress) {
            (true, true) => &COMPRESS8[m as usize],
            (true, false) => &EXPAND8[m as usize],
            (false, true) => &COMPRESS4[m as usize],
            (false, false) => &EXPAND4[m as usize],
        };
        // SAFETY: a table row is eight `u32`s.
        unsafe { _mm256_loadu_si256(row.as_ptr() as *const __m256i) }
    }

    /// All ones in the lanes of `T` whose bit of `m` is set.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn lanes_of<T>(m: u32) -> __m256i {
        if step::<T>() == 8 {
            let b = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
            _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(m as i32), b), b)
        } else {
            let b = _mm256_setr_epi64x(1, 2, 4, 8);
            _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_set1_epi64x(m as i64), b), b)
        }
    }

    /// All ones in the lanes of `T` below `k`.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn low_lanes<T>(k: u32) -> __m256i {
        if step::<T>() == 8 {
            _mm256_cmpgt_epi32(
                _mm256_set1_epi32(k as i32),
                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
            )
        } else {
            _mm256_cmpgt_epi64(_mm256_set1_epi64x(k as i64), _mm256_setr_epi64x(0, 1, 2, 3))
        }
    }

    /// The lanes of `T` at `p` that `lanes` selects (the others 0).
    ///
    /// # Safety
    /// AVX2; the selected lanes are readable.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn load_lanes<T>(p: *const T, lanes: __m256i) -> __m256i {
        // SAFETY: the caller's
        unsafe {
            if step::<T>() == 8 {
                _mm256_maskload_epi32(p as *const i32, lanes)
            } else {
                _mm256_maskload_epi64(p as *const i64, lanes)
            }
        }
    }

    /// Stores the lanes of `T` of `v` that `lanes` selects at `p`.
    ///
    /// # Safety
    /// AVX2; the selected lanes are writable.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn store_lanes<T>(p: *mut T, lanes: __m256i, v: __m256i) {
        // SAFETY: the caller's
        unsafe {
            if step::<T>() == 8 {
                _mm256_maskstore_epi32(p as *mut i32, lanes, v)
            } else {
                _mm256_maskstore_epi64(p as *mut i64, lanes, v)
            }
        }
    }

    /// [`compress`] on AVX2 for 4- and 8-byte `T`: a step of 8 (4) lanes per 8 (4) mask
    /// bits, permuted by the table row of those bits and stored whole.
    ///
    /// # Safety
    /// AVX2; `T` is 4 or 8 bytes; `dst` is valid for `cap >= xs.len()` writes.
    #[target_feature(enable = "avx2,popcnt")]
    pub(super) unsafe fn compress_avx2<T: Copy>(
        xs: &[T], bits: Bits<'_>, dst: *mut T, cap: usize,
    ) -> usize {
        // SAFETY: as for `compress`, a step at a time: a whole store at `o <= c + l q`
        // ends by `c + 64 <= n <= cap`; the last word loads only set lanes (below `n`)
        // and stores only `k` lanes.
        debug_assert!(cap >= xs.len() && matches!(std::mem::size_of::<T>(), 4 | 8));
        let l = step::<T>();
        let all = (1u64 << l) - 1;
        unsafe {
            let n = xs.len();
            let src = xs.as_ptr();
            let mut o = 0usize;
            let mut c = 0;
            while c + 64 <= n {
                let w = bits.word_at(c);
                for q in 0..64 / l {
                    let m = ((w >> (l * q)) & all) as u32;
                    let x = _mm256_loadu_si256(src.add(c + l * q) as *const __m256i);
                    let v = _mm256_permutevar8x32_epi32(x, perm::<T>(true, m));
                    _mm256_storeu_si256(dst.add(o) as *mut __m256i, v);
                    o += m.count_ones() as usize;
                }
                c += 64;
            }
            if c < n {
                let len = n - c;
                let w = bits.word_at(c) & ((1u64 << len) - 1);
                for q in 0..len.div_ceil(l) {
                    let m = ((w >> (l * q)) & all) as u32;
                    let x = load_lanes(src.add(c + l * q), lanes_of::<T>(m));
                    let v = _mm256_permutevar8x32_epi32(x, perm::<T>(true, m));
                    let k = m.count_ones();
                    store_lanes(dst.add(o), low_lanes::<T>(k), v);
                    o += k as usize;
                }
            }
            o
        }
    }

    /// [`expand`] on AVX2 for 4- and 8-byte `T`: a step of 8 (4) lanes per 8 (4) mask
    /// bits, its `k` values loaded, permuted to their lanes and blended with the fill.
    ///
    /// # Safety
    /// AVX2; `T` is 4 or 8 bytes; the pointers as for `expand_raw`.
    #[target_feature(enable = "avx2,popcnt")]
    pub(super) unsafe fn expand_avx2<T: Copy>(
        src: *const T, bits: Bits<'_>, fill: T, dst: *mut T, n: usize,
    ) {
        // SAFETY: loads read `k` values at `o`, `o + k` at most the set bits, which
        // `src` covers; stores are whole inside whole steps below `n` and masked in the
        // last. In place, a step's values are loaded before its store and later steps'
        // values lie at or after its slots (see `expand_in_place`).
        debug_assert!(matches!(std::mem::size_of::<T>(), 4 | 8));
        let l = step::<T>();
        unsafe {
            let fill = if l == 8 {
                _mm256_set1_epi32(raw(fill) as u32 as i32)
            } else {
                _mm256_set1_epi64x(raw(fill) as i64)
            };
            let mut o = 0usize;
            let mut c = 0;
            while c < n {
                let len = (n - c).min(64);
                let w = bits.word_at(c);
                for q in 0..len.div_ceil(l) {
                    let lanes = (len - l * q).min(l) as u32;
                    let m = ((w >> (l * q)) as u32) & ((1u32 << lanes) - 1);
                    let k = m.count_ones();
                    let v = load_lanes(src.add(o), low_lanes::<T>(k));
                    let e = _mm256_permutevar8x32_epi32(v, perm::<T>(false, m));
                    let e = _mm256_blendv_epi8(fill, e, lanes_of::<T>(m));
                    let d = dst.add(c + l * q);
                    if lanes as usize == l {
                        _mm256_storeu_si256(d as *mut __m256i, e);
                    } else {
                        store_lanes(d, low_lanes::<T>(lanes), e);
                    }
                    o += k as usize;
                }
                c += 64;
            }
        }
    }

    /// The bits of a 4- or 8-byte `T`.
    #[inline(always)]
    fn raw<T: Copy>(x: T) -> u64 {
        // SAFETY: callers only pass 4- or 8-byte `T` (checked by `packable`).
        unsafe {
            if std::mem::size_of::<T>() == 4 {
                std::mem::transmute_copy::<T, u32>(&x) as u64
            } else {
                std::mem::transmute_copy::<T, u64>(&x)
            }
        }
    }

    /// Mask of the low `n` lanes (n <= 16).
    #[inline(always)]
    fn low16(n: u32) -> u16 {
        ((1u32 << n) - 1) as u16
    }

    /// The low `n` bits set (all 32 from `n >= 32`): the live lanes of 32 16-bit keys.
    #[inline(always)]
    pub(crate) fn low32(n: usize) -> u32 {
        if n >= 32 {
            u32::MAX
        } else {
            (1u32 << n) - 1
        }
    }

    /// [`compress`] for 2-byte elements: 32 at a time (`vpcompressw`). Returns the count.
    ///
    /// # Safety
    /// AVX-512 (F, BW) and VBMI2; `T` is 2 bytes; `dst` is valid for `xs.len()` writes.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi2,popcnt")]
    pub(super) unsafe fn compress16<T: Copy>(xs: &[T], bits: Bits<'_>, dst: *mut T) -> usize {
        // SAFETY: loads are masked to the elements of `xs`; each store writes the `k`
        // set lanes of a group at `o`, and `o + k` never exceeds the group's end in
        // `xs`, within the `xs.len()` writable slots.
        unsafe {
            let mut o = 0usize;
            let mut c = 0;
            while c < xs.len() {
                let len = (xs.len() - c).min(64);
                let w = bits.word_at(c);
                let mut g = 0;
                while g < len {
                    let lanes = low32(len - g);
                    let m = (w >> g) as u32 & lanes;
                    let v = _mm512_maskz_loadu_epi16(lanes, xs.as_ptr().add(c + g) as *const i16);
                    let k = m.count_ones() as usize;
                    let packed = _mm512_maskz_compress_epi16(m, v);
                    _mm512_mask_storeu_epi16(dst.add(o) as *mut i16, low32(k), packed);
                    o += k;
                    g += 32;
                }
                c += len;
            }
            o
        }
    }

    /// [`expand`] for 2-byte elements: 32 at a time (`vpexpandw`).
    ///
    /// # Safety
    /// AVX-512 (F, BW) and VBMI2; `T` is 2 bytes; the pointers as for [`expand`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi2,popcnt")]
    pub(super) unsafe fn expand16<T: Copy>(
        src: *const T, bits: Bits<'_>, fill: T, dst: *mut T, n: usize,
    ) {
        // SAFETY: loads read the `k` values of a group at `o`, within the set bits'
        // count that `src` covers; stores are masked to the group's lanes below `n`. In
        // place, a group's values are loaded before its store, and later groups' values
        // lie at or after the end of this group's slots (see `expand_in_place`).
        unsafe {
            let f = _mm512_set1_epi16(std::mem::transmute_copy::<T, u16>(&fill) as i16);
            let mut o = 0usize;
            let mut c = 0;
            while c < n {
                let len = (n - c).min(64);
                let w = bits.word_at(c);
                let mut g = 0;
                while g < len {
                    let lanes = low32(len - g);
                    let m = (w >> g) as u32 & lanes;
                    let k = m.count_ones() as usize;
                    let v = _mm512_maskz_loadu_epi16(low32(k), src.add(o) as *const i16);
                    let e = _mm512_mask_expand_epi16(f, m, v);
                    _mm512_mask_storeu_epi16(dst.add(c + g) as *mut i16, lanes, e);
                    o += k;
                    g += 32;
                }
                c += len;
            }
        }
    }

    /// # Safety
    /// AVX-512F; `T` is 4 or 8 bytes; `dst` is valid for `cap >= xs.len()` writes.
    #[target_feature(enable = "avx512f,popcnt")]
    pub(super) unsafe fn compress<T: Copy>(
        xs: &[T], bits: Bits<'_>, dst: *mut T, cap: usize,
    ) -> usize {
        // SAFETY: whole 64-element words load and store whole vectors: a store at `o`
        // (the valid lanes so far, `o <= c + 16q`) ends by `c + 64 <= n <= cap`. The
        // last, partial word loads only its valid lanes and stores only `k` lanes, and
        // `o + k` never exceeds the valid lanes, `<= n <= cap`.
        debug_assert!(cap >= xs.len());
        unsafe {
            let n = xs.len();
            let src = xs.as_ptr();
            let mut o = 0usize;
            let mut c = 0;
            // four (eight) independent compresses per word; only the offsets chain
            while c + 64 <= n {
                let w = bits.word_at(c);
                if std::mem::size_of::<T>() == 4 {
                    for q in 0..4 {
                        let m = (w >> (16 * q)) as u16;
                        let x = _mm512_loadu_si512(src.add(c + 16 * q) as *const __m512i);
                        let v = _mm512_maskz_compress_epi32(m, x);
                        _mm512_storeu_si512(dst.add(o) as *mut __m512i, v);
                        o += m.count_ones() as usize;
                    }
                } else {
                    for q in 0..8 {
                        let m = (w >> (8 * q)) as u8;
                        let x = _mm512_loadu_si512(src.add(c + 8 * q) as *const __m512i);
                        let v = _mm512_maskz_compress_epi64(m, x);
                        _mm512_storeu_si512(dst.add(o) as *mut __m512i, v);
                        o += m.count_ones() as usize;
                    }
                }
                c += 64;
            }
            if c < n {
                let len = n - c;
                let w = bits.word_at(c) & ((1u64 << len) - 1);
                if std::mem::size_of::<T>() == 4 {
                    for q in 0..len.div_ceil(16) {
                        let m = (w >> (16 * q)) as u16;
                        let x = _mm512_maskz_loadu_epi32(m, src.add(c + 16 * q) as *const i32);
                        let v = _mm512_maskz_compress_epi32(m, x);
                        let k = m.count_ones();
                        _mm512_mask_storeu_epi32(dst.add(o) as *mut i32, low16(k), v);
                        o += k as usize;
                    }
                } else {
                    for q in 0..len.div_ceil(8) {
                        let m = (w >> (8 * q)) as u8;
                        let x = _mm512_maskz_loadu_epi64(m, src.add(c + 8 * q) as *const i64);
                        let v = _mm512_maskz_compress_epi64(m, x);
                        let k = m.count_ones();
                        _mm512_mask_storeu_epi64(dst.add(o) as *mut i64, low16(k) as u8, v);
                        o += k as usize;
                    }
                }
            }
            o
        }
    }

    /// # Safety
    /// AVX-512F; `T` is 4 or 8 bytes; the pointers as for `expand_raw`.
    #[target_feature(enable = "avx512f,popcnt")]
    pub(super) unsafe fn expand<T: Copy>(
        src: *const T, bits: Bits<'_>, fill: T, dst: *mut T, n: usize,
    ) {
        // SAFETY: loads read `k` values at `o`, and `o + k` is at most the number of set
        // bits, which `src` covers; stores write whole vectors inside whole 64-element
        // words and are masked to the lanes below `n` in the last one. In place, a
        // chunk's values are loaded before its store, and later chunks' values lie at or
        // after the end of this chunk's slots (see `expand_in_place`).
        unsafe {
            let (f32s, f64s) = (
                _mm512_set1_epi32(raw(fill) as u32 as i32),
                _mm512_set1_epi64(raw(fill) as i64),
            );
            let mut o = 0usize;
            let mut c = 0;
            while c < n {
                let len = (n - c).min(64);
                let w = bits.word_at(c);
                if std::mem::size_of::<T>() == 4 {
                    for q in 0..len.div_ceil(16) {
                        let lanes = (len - 16 * q).min(16) as u32;
                        let m = (w >> (16 * q)) as u16 & low16(lanes);
                        let k = m.count_ones();
                        let v = _mm512_maskz_loadu_epi32(low16(k), src.add(o) as *const i32);
                        let e = _mm512_mask_expand_epi32(f32s, m, v);
                        let d = dst.add(c + 16 * q);
                        if len == 64 {
                            _mm512_storeu_si512(d as *mut __m512i, e);
                        } else {
                            _mm512_mask_storeu_epi32(d as *mut i32, low16(lanes), e);
                        }
                        o += k as usize;
                    }
                } else {
                    for q in 0..len.div_ceil(8) {
                        let lanes = (len - 8 * q).min(8) as u32;
                        let m = (w >> (8 * q)) as u8 & low16(lanes) as u8;
                        let k = m.count_ones();
                        let v = _mm512_maskz_loadu_epi64(low16(k) as u8, src.add(o) as *const i64);
                        let e = _mm512_mask_expand_epi64(f64s, m, v);
                        let d = dst.add(c + 8 * q);
                        if len == 64 {
                            _mm512_storeu_si512(d as *mut __m512i, e);
                        } else {
                            _mm512_mask_storeu_epi64(d as *mut i64, low16(lanes) as u8, e);
                        }
                        o += k as usize;
                    }
                }
                c += 64;
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Both paths (vector when the CPU has it, and the portable loop) against a plain
    /// filter, at every length and bit offset around the 16/64-element boundaries.
    fn check<T: Copy + PartialEq + std::fmt::Debug>(make: impl Fn(usize) -> T, fill: T) {
        let words: Vec<u64> = (0..100u64)
            .map(|i| {
                0x9e37_79b9_7f4a_7c15u64
                    .wrapping_mul(i + 1)
                    .rotate_left(i as u32 * 7)
            })
            .collect();
        for n in [0, 1, 7, 8, 15, 16, 17, 63, 64, 65, 130, 200, 5000] {
            for start in [0, 1, 5, 63] {
                let bits = Bits::new(&words, start);
                let xs: Vec<T> = (0..n).map(&make).collect();
                let want: Vec<T> = (0..n)
                    .filter(|&k| (bits.word_at(k) & 1) == 1)
                    .map(&make)
                    .collect();
                let spread: Vec<T> = (0..n)
                    .map(|k| {
                        if bits.word_at(k) & 1 == 1 {
                            make(k)
                        } else {
                            fill
                        }
                    })
                    .collect();
                let mut out = vec![fill; n];
                let k = compress_to(&xs, bits, &mut out);
                assert_eq!(&out[..k], &want[..], "compress n={n} start={start}");
                let mut back = vec![make(999); n];
                expand_to(&want, bits, fill, &mut back);
                assert_eq!(back, spread, "expand n={n} start={start}");
                let mut buf = vec![make(999); n];
                let from = n - want.len();
                buf[from..].copy_from_slice(&want);
                expand_in_place(&mut buf, from, bits, fill);
                assert_eq!(buf, spread, "in place n={n} start={start}");
                let mut app = vec![fill];
                compress_into(&xs, Some(bits), &mut app);
                assert_eq!(&app[1..], &want[..], "compress_into n={n} start={start}");
                let mut seen = Vec::new();
                packed_blocks(&xs, Some(bits), |p| seen.extend_from_slice(p));
                assert_eq!(seen, want, "packed blocks n={n} start={start}");
            }
        }
    }

    /// Makes [`packs_fast`] answer false, to run the portable loops on any CPU. Other
    /// tests running meanwhile take them too, which is harmless: both paths are exact.
    pub(super) static PORTABLE: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    /// Whether [`PORTABLE`] is set.
    pub(crate) fn forced_portable() -> bool {
        PORTABLE.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets [`PORTABLE`] (for other modules' tests of both paths).
    pub(crate) fn set_portable(portable: bool) {
        PORTABLE.store(portable, std::sync::atomic::Ordering::Relaxed);
    }

    #[test]
    fn compress_and_expand_match_a_plain_filter() {
        use std::sync::atomic::Ordering::Relaxed;
        for portable in [false, true] {
            PORTABLE.store(portable, Relaxed);
            all_types();
        }
        PORTABLE.store(false, Relaxed);
    }

    fn all_types() {
        check(|k| k as f32 + 0.5, -1.0f32);
        check(|k| k as f64 - 0.25, f64::NEG_INFINITY);
        check(|k| k as i32 * 3, 0i32);
        check(|k| (k as i64) << 33, -7i64);
        // 2 bytes: the VBMI2 path where the CPU has it, else the portable loops
        check(|k| k as u16, 0u16);
    }
}
