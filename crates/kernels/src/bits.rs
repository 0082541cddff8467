//! [`Bits`]: a borrowed run of validity bits that the kernels read 64 at a time.
//!
//! Bits are least-significant-bit first in `u64` words: element `i` of a run is bit
//! `i % 64` of word `i / 64` (counted from the run's start), so a 64-element chunk of
//! values meets its validity as one word, which is what a vector mask register wants.

/// A borrowed run of validity bits: bit `i` of the run is bit `start + i` of `words`.
#[derive(Debug, Clone, Copy)]
pub struct Bits<'a> {
    words: &'a [u64],
    start: usize,
}

impl<'a> Bits<'a> {
    /// The run that starts at bit `start` of `words`.
    #[inline]
    pub fn new(words: &'a [u64], start: usize) -> Self {
        Bits { words, start }
    }

    /// The same words, starting `offset` bits later.
    #[inline]
    pub fn offset(self, offset: usize) -> Self {
        Bits {
            words: self.words,
            start: self.start + offset,
        }
    }

    /// Bit `i` of the run. Bits past the end of the words read as 0.
    #[inline(always)]
    pub fn get(&self, i: usize) -> bool {
        let p = self.start + i;
        self.words
            .get(p / 64)
            .is_some_and(|w| (w >> (p % 64)) & 1 == 1)
    }

    /// The 64 bits `i .. i + 64` of the run as one word (bit `k` = element `i + k`).
    /// Bits past the end of the words read as 0.
    #[inline(always)]
    pub fn word_at(&self, i: usize) -> u64 {
        let p = self.start + i;
        let (w, s) = (p / 64, p % 64);
        let lo = self.words.get(w).copied().unwrap_or(0) >> s;
        if s == 0 {
            lo
        } else {
            lo | (self.words.get(w + 1).copied().unwrap_or(0) << (64 - s))
        }
    }

    /// Words `i .. i + 64 out.len()` of the run into `out` (`out[k]` is
    /// `self.word_at(i + 64 k)`), two shifts and an OR a word where the words are all
    /// in range (a loop that vectorises), [`Bits::word_at`] a word elsewhere.
    #[inline(always)]
    pub fn words_into(&self, i: usize, out: &mut [u64]) {
        let p = self.start + i;
        let (w, s) = (p / 64, p % 64);
        match self.words.get(w..w + out.len() + 1) {
            Some(ws) => {
                for k in 0..out.len() {
                    // `<< 1 << (63 - s)`: 0 where s is 0, as `<< (64 - s)` is not
                    out[k] = (ws[k] >> s) | ((ws[k + 1] << 1) << (63 - s));
                }
            }
            None => {
                for (k, o) in out.iter_mut().enumerate() {
                    *o = self.word_at(i + 64 * k);
                }
            }
        }
    }

    /// Whether any of the first `len` bits of the run is set.
    #[inline]
    pub fn any(&self, len: usize) -> bool {
        let mut i = 0;
        while i + 64 <= len {
            if self.word_at(i) != 0 {
                return true;
            }
            i += 64;
        }
        i < len && self.word_at(i) & ((1u64 << (len - i)) - 1) != 0
    }

    /// Number of set bits among the first `len` bits of the run. A long run counts in
    /// a kernel compiled with the CPU's `popcnt` (`count_run`): a caller compiled for
    /// the baseline (the lane loops outside the vector kernels) otherwise counts each
    /// word with a dozen shifts and masks, a tenth of a 1024-wide masked softmax.
    #[inline]
    pub fn count_ones(&self, len: usize) -> usize {
        if len >= 512 {
            return count_run(*self, len);
        }
        self.count_ones_here(len)
    }

    /// [`Bits::count_ones`] in the caller's own code.
    #[inline(always)]
    fn count_ones_here(&self, len: usize) -> usize {
        let mut n = 0usize;
        let mut i = 0;
        while i + 64 <= len {
            n += self.word_at(i).count_ones() as usize;
            i += 64;
        }
        if i < len {
            let rem = len - i;
            n += (self.word_at(i) & ((1u64 << rem) - 1)).count_ones() as usize;
        }
        n
    }
}

crate::multiversion! {
/// [`Bits::count_ones`] of a run, in the fastest kernel this CPU supports.
    pub fn count_run[](bits: Bits<'_>, len: usize) -> usize = count_kernel;
}

#[inline(always)]
fn count_kernel(bits: Bits<'_>, len: usize) -> usize {
    bits.count_ones_here(len)
}

/// Rows counted into the bit-sliced counters of [`count_columns`] before they are read
/// out: eight planes hold counts up to 255.
const COUNT_ROWS: usize = 255;
/// The planes of [`count_columns`]'s counters (`2^COUNT_PLANES > COUNT_ROWS`).
const COUNT_PLANES: usize = 8;

/// Adds to `counts[k]` the number of rows `r < nrows` (`shape`: the rows' stride and
/// count) whose bit `r * stride + k` is set: the valid elements of each column of a
/// row-major block, as a mean or variance along a leading dim needs them.
///
/// The counters are bit-sliced (plane `p` of a word holds bit `p` of 64 columns'
/// counts): a row adds its words with a ripple of ANDs and XORs through eight planes,
/// 64 columns an operation (a vector of words: 512), and the planes are read out into
/// `counts` every 255 rows. Counting into an `i64` lane a column was two
/// operations an element (half of a masked mean along dim 0).
///
/// ```
/// use masked_kernels::bits::{count_columns, Bits};
/// let rows = [0b011u64, 0b110, 0b010]; // 3 rows of 3 columns, stride 64
/// let mut counts = [0i64; 3];
/// count_columns(Bits::new(&rows, 0), (64, 3), &mut counts);
/// assert_eq!(counts, [1, 3, 1]);
/// ```
pub fn count_columns(bits: Bits<'_>, shape: (usize, usize), counts: &mut [i64]) {
    let groups = counts.len().div_ceil(64 * GROUP);
    let mut planes = vec![[[0u64; GROUP]; COUNT_PLANES]; groups];
    count_columns_in(bits, shape, counts, &mut planes);
}

/// Words of [`count_columns`]'s counters added as one vector (of 512 bits).
const GROUP: usize = 8;

crate::multiversion! {
/// [`count_columns`] in the fastest kernel this CPU supports, with its counters.
    fn count_columns_in[](
        bits: Bits<'_>,
        shape: (usize, usize),
        counts: &mut [i64],
        planes: &mut [[[u64; GROUP]; COUNT_PLANES]],
    ) = count_columns_kernel;
}

#[inline(always)]
fn count_columns_kernel(
    bits: Bits<'_>, (stride, nrows): (usize, usize), counts: &mut [i64],
    planes: &mut [[[u64; GROUP]; COUNT_PLANES]],
) {
    let nw = counts.len().div_ceil(64);
    for r0 in (0..nrows).step_by(COUNT_ROWS) {
        planes.fill([[0; GROUP]; COUNT_PLANES]);
        for r in r0..nrows.min(r0 + COUNT_ROWS) {
            for (g, group) in planes.iter_mut().enumerate() {
                let j0 = g * GROUP;
                let mut c = [0u64; GROUP];
                let n = (nw - j0).min(GROUP);
                // (the bits past the last column count into counters never read out)
                bits.words_into(r * stride + 64 * j0, &mut c[..n]);
                // a ripple-carry add of one bit a column: the carry out of plane p goes
                // into plane p + 1, eight words a vector held in registers
                // (index loops: a `zip` here stays an out-of-line call in this kernel)
                for plane in group.iter_mut() {
                    for k in 0..GROUP {
                        let carry = plane[k] & c[k];
                        plane[k] ^= c[k];
                        c[k] = carry;
                    }
                }
            }
        }
        // read out 64 columns at a time, plane by plane (the loop over bits vectorises)
        for (j, out) in counts.chunks_mut(64).enumerate() {
            let mut c = [0i64; 64];
            for (p, plane) in planes[j / GROUP].iter().enumerate() {
                let word = plane[j % GROUP];
                for (b, c) in c.iter_mut().enumerate() {
                    *c |= (((word >> b) & 1) as i64) << p;
                }
            }
            for k in 0..out.len() {
                out[k] += c[k];
            }
        }
    }
}

/// The validity bits of the first `w` columns of a tile whose rows' bits are `rows`
/// (bit `j` of `rows[k]`: row `k`'s element in column `j`), column after column: bit `k`
/// of `out[j * nw..][..nw]` is bit `j` of `rows[k]`, with `nw = rows.len().div_ceil(64)`
/// words a column (bits past `rows.len()` are 0). Each group of 64 rows is one 64 x 64
/// bit-matrix transpose ([`transpose64`]: six rounds of masked swaps, about 0.1
/// operation a bit), where building each column a bit a row was one shift, mask and
/// or per element (a quarter of a masked variance along dim 0). The dense layout's
/// reductions, normalizations and gradients along outer dims.
///
/// ```
/// use masked_kernels::bits::columns_bits;
/// let rows = [0b01, 0b10, 0b11];
/// let mut out = [0u64; 2];
/// columns_bits(&rows, 2, &mut out);
/// assert_eq!(out, [0b101, 0b110]);
/// ```
///
/// # Panics
/// If `w > 64` or `out` holds fewer than `w * nw` words.
pub fn columns_bits(rows: &[u64], w: usize, out: &mut [u64]) {
    let nw = rows.len().div_ceil(64);
    assert!(
        w <= 64 && out.len() >= w * nw,
        "columns_bits: w {w} of 64, out too short"
    );
    for (g, part) in rows.chunks(64).enumerate() {
        let mut block = [0u64; 64];
        block[..part.len()].copy_from_slice(part);
        transpose64(&mut block);
        for (j, &col) in block[..w].iter().enumerate() {
            out[j * nw + g] = col;
        }
    }
}

/// Transposes a 64 x 64 bit matrix in place: bit `j` of `a[i]` and bit `i` of `a[j]`
/// swap (bit 0 the first column), by swapping off-diagonal blocks of 32, 16, ..., 1
/// (Hacker's Delight, 7-3, in least-significant-first order).
#[inline]
pub fn transpose64(a: &mut [u64; 64]) {
    let mut j = 32usize;
    let mut m: u64 = 0x0000_0000_FFFF_FFFF;
    while j != 0 {
        let mut k = 0;
        while k < 64 {
            // the high `j` bits of each `2j` group of row `k` and the low ones of row
            // `k + j` trade places
            let t = ((a[k] >> j) ^ a[k + j]) & m;
            a[k + j] ^= t;
            a[k] ^= t << j;
            k = (k + j + 1) & !j;
        }
        j >>= 1;
        m ^= m << j;
    }
}

/// Packs bools 64 to a word: bit `i % 64` of word `i / 64` is `bools[i]` (a numpy bool
/// mask as validity bits). AVX-512BW tests 64 bools an instruction, AVX2 32; elsewhere,
/// and for the tail, eight bools at a time by one multiply ([`pack_word`]).
///
/// ```
/// use masked_kernels::bits::pack_bools;
/// let mut b = vec![false; 70];
/// b[1] = true;
/// b[69] = true;
/// assert_eq!(pack_bools(&b), vec![0b10, 0b10_0000]);
/// ```
pub fn pack_bools(bools: &[bool]) -> Vec<u64> {
    let mut out = Vec::with_capacity(bools.len().div_ceil(64));
    pack_onto(bools, &mut out);
    out
}

/// [`pack_bools`] appended to `out` (the first bool at bit 0 of the next word).
fn pack_onto(bools: &[bool], out: &mut Vec<u64>) {
    let start = out.len();
    let full = &bools[..bools.len() - bools.len() % 64];
    #[cfg(target_arch = "x86_64")]
    {
        if crate::cpu::has_avx512() {
            // SAFETY: the CPU has AVX-512 (F, BW); `full` holds whole 64-bool words
            unsafe { x86::pack_avx512(full, out) };
        } else if crate::cpu::has_avx2() {
            // SAFETY: the CPU has AVX2
            unsafe { x86::pack_avx2(full, out) };
        }
    }
    for c in bools[(out.len() - start) * 64..].chunks(64) {
        out.push(pack_word(c));
    }
}

/// The row-major validity bits of the transpose of the `rows x cols` row-major bool
/// matrix `m`: bit `i * rows + j` is `m[j * cols + i]` (an F-ordered numpy mask, its
/// memory read as it lies). Each row of `m` is packed once ([`pack_bools`]), then each
/// 64 x 64 block of bits is transposed ([`transpose64`]) and its 64 runs written at
/// their place: a 4096² mask in 1.3 ms, where gathering the bools in the transpose's
/// order first took 9.
///
/// ```
/// use masked_kernels::bits::{pack_bools, pack_bools_transposed};
/// // 2 x 3, rows [t f t] and [f f t]: its transpose is 3 x 2, rows [t f] [f f] [t t]
/// let m = [true, false, true, false, false, true];
/// let t = [true, false, false, false, true, true];
/// assert_eq!(pack_bools_transposed(&m, 2, 3), pack_bools(&t));
/// ```
///
/// # Panics
/// If `m.len() != rows * cols`.
pub fn pack_bools_transposed(m: &[bool], rows: usize, cols: usize) -> Vec<u64> {
    assert_eq!(
        m.len(),
        rows * cols,
        "pack_bools_transposed: {rows} x {cols}"
    );
    let wr = cols.div_ceil(64);
    let mut rb = Vec::with_capacity(rows * wr);
    for r in m.chunks(cols.max(1)) {
        pack_onto(r, &mut rb);
    }
    transposed_blocks(rows, cols, |j, b| rb[j * wr + b])
}

/// The row-major bits of the transpose of a `rows x cols` bit matrix held row-major in
/// `words` (bit `j * cols + i` its element (j, i)): bit `i * rows + j` of the result is
/// bit `j * cols + i` of `words`; 64 x 64 blocks transposed at a time ([`transpose64`]).
/// A reduction of an F-ordered array reads its memory as it lies with its mask in that
/// order.
///
/// ```
/// use masked_kernels::bits::{pack_bools, transpose_bits};
/// let m = pack_bools(&[true, false, true, false, false, true]); // 2 x 3
/// let t = pack_bools(&[true, false, false, false, true, true]); // 3 x 2
/// assert_eq!(transpose_bits(&m, 2, 3), t);
/// ```
///
/// # Panics
/// If `words` holds fewer than `rows * cols` bits.
pub fn transpose_bits(words: &[u64], rows: usize, cols: usize) -> Vec<u64> {
    assert!(
        words.len() * 64 >= rows * cols,
        "transpose_bits: {rows} x {cols}"
    );
    let src = Bits::new(words, 0);
    transposed_blocks(rows, cols, |j, b| {
        let w = src.word_at(j * cols + 64 * b);
        match cols - 64 * b {
            n if n < 64 => w & ((1u64 << n) - 1),
            _ => w,
        }
    })
}

/// The row-major bits of the transpose of a `rows x cols` bit matrix whose row `j`,
/// bits `64 b ..`, `run(j, b)` gives (bits past the row 0): each 64 x 64 block
/// transposed and its runs written at their place.
fn transposed_blocks(rows: usize, cols: usize, run: impl Fn(usize, usize) -> u64) -> Vec<u64> {
    let mut out = vec![0u64; (rows * cols).div_ceil(64)];
    for b in 0..cols.div_ceil(64) {
        for j0 in (0..rows).step_by(64) {
            let h = 64.min(rows - j0);
            let mut block = [0u64; 64];
            for (t, x) in block[..h].iter_mut().enumerate() {
                *x = run(j0 + t, b);
            }
            transpose64(&mut block);
            // `block[k]`: bit `t` is the matrix's (j0 + t, 64 b + k), the transpose's
            // row `64 b + k` at columns `j0 + t` (bits from `h` on are 0)
            for (k, &w) in block[..64.min(cols - 64 * b)].iter().enumerate() {
                let at = (64 * b + k) * rows + j0;
                let (word, sh) = (at / 64, at % 64);
                out[word] |= w << sh;
                if sh > 0 && sh + h > 64 {
                    out[word + 1] |= w >> (64 - sh);
                }
            }
        }
    }
    out
}

/// The first `n` bits of `words` (LSB first) as bools: the inverse of [`pack_bools`].
///
/// # Panics
/// When `words` holds fewer than `n` bits.
///
/// ```
/// use masked_kernels::bits::unpack_bools;
/// let b = unpack_bools(&[0b1010, 1], 66);
/// assert_eq!(&b[..5], &[false, true, false, true, false]);
/// assert_eq!(&b[63..], &[false, true, false]);
/// ```
pub fn unpack_bools(words: &[u64], n: usize) -> Vec<bool> {
    let mut out = vec![false; n];
    unpack_bools_into(words, &mut out);
    out
}

/// The first `out.len()` bits of `words` (LSB first) written into `out`, a word at a
/// time (AVX-512: one masked byte store; else eight bools per multiply).
///
/// # Panics
/// When `words` holds fewer than `out.len()` bits.
pub fn unpack_bools_into(words: &[u64], out: &mut [bool]) {
    let n = out.len();
    assert!(
        words.len() * 64 >= n,
        "{n} bits asked of {} words",
        words.len()
    );
    // SAFETY: `bool` has `u8`'s size and alignment, and every byte written below is 0
    // or 1, a valid `bool`
    let bytes: &mut [u8] = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast(), n) };
    let whole = n / 64;
    #[cfg(target_arch = "x86_64")]
    let done = if crate::cpu::has_avx512() {
        // SAFETY: the CPU has AVX-512 (F, BW); `bytes` holds `whole` 64-byte words
        unsafe { x86::unpack_avx512(&words[..whole], &mut bytes[..whole * 64]) };
        whole
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    for (c, &w) in bytes[done * 64..].chunks_mut(64).zip(&words[done..]) {
        unpack_word(w, c);
    }
}

/// The low `c.len()` (at most 64) bits of `w` as bytes 0 or 1, eight a multiply: the
/// byte repeated in every byte of a `u64`, each byte `i` keeping bit `i`, and `+ 0x7f`
/// carrying a set bit into the byte's top bit (no carry leaves the byte).
fn unpack_word(w: u64, c: &mut [u8]) {
    const PICK: u64 = 0x8040_2010_0804_0201;
    const ONES: u64 = 0x0101_0101_0101_0101;
    for (g, eight) in c.chunks_mut(8).enumerate() {
        let x = (((w >> (8 * g)) & 0xff) * ONES) & PICK;
        let spread = ((x + 0x7f7f_7f7f_7f7f_7f7f) >> 7) & ONES;
        eight.copy_from_slice(&spread.to_le_bytes()[..eight.len()]);
    }
}

/// Up to 64 bools as one word, eight at a time: eight bool bytes (each 0 or 1) read as
/// a little-endian `u64` and multiplied by `0x0102040810204080` put byte `i`'s bit at bit
/// `56 + i` (every other product term lands below bit 56, each at its own position, so no
/// carry reaches the top byte).
pub fn pack_word(c: &[bool]) -> u64 {
    const SPREAD: u64 = 0x0102_0408_1020_4080;
    let mut w = 0u64;
    for (g, eight) in c.chunks(8).enumerate() {
        let mut bytes = [0u8; 8];
        for (b, &v) in bytes.iter_mut().zip(eight) {
            *b = u8::from(v);
        }
        w |= (u64::from_le_bytes(bytes).wrapping_mul(SPREAD) >> 56) << (8 * g);
    }
    w
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// One word per 64 bools of `bools` (a multiple of 64 long) onto `out`.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn pack_avx512(bools: &[bool], out: &mut Vec<u64>) {
        // a bool is one byte, 0 or 1: a byte test against itself is its bit
        let p = bools.as_ptr().cast::<u8>();
        for c in 0..bools.len() / 64 {
            // SAFETY: bytes c * 64 .. c * 64 + 64 lie in `bools`
            let v = unsafe { _mm512_loadu_si512(p.add(c * 64).cast()) };
            out.push(_mm512_test_epi8_mask(v, v));
        }
    }

    /// `words` as 64 bytes 0 or 1 each into `bytes` (64 per word).
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn unpack_avx512(words: &[u64], bytes: &mut [u8]) {
        let one = _mm512_set1_epi8(1);
        let p = bytes.as_mut_ptr();
        for (c, &w) in words.iter().enumerate().take(bytes.len() / 64) {
            // SAFETY: bytes c * 64 .. c * 64 + 64 lie in `bytes`
            unsafe { _mm512_storeu_si512(p.add(c * 64).cast(), _mm512_maskz_mov_epi8(w, one)) };
        }
    }

    /// As [`pack_avx512`], 32 bools an instruction.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pack_avx2(bools: &[bool], out: &mut Vec<u64>) {
        let p = bools.as_ptr().cast::<u8>();
        for c in 0..bools.len() / 64 {
            // SAFETY: bytes c * 64 .. c * 64 + 64 lie in `bools`
            let (lo, hi) = unsafe {
                (
                    _mm256_loadu_si256(p.add(c * 64).cast()),
                    _mm256_loadu_si256(p.add(c * 64 + 32).cast()),
                )
            };
            // bit 0 of each byte to its top bit, where movemask reads it
            let ml = _mm256_movemask_epi8(_mm256_slli_epi16::<7>(lo)) as u32;
            let mh = _mm256_movemask_epi8(_mm256_slli_epi16::<7>(hi)) as u32;
            out.push(u64::from(ml) | (u64::from(mh) << 32));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bit-sliced column counts equal counting each column's bits one by one: widths
    /// below, at and past a word, strides past the width, runs not starting on a word,
    /// more rows than one read-out of the counters holds (255), all-set rows (every
    /// plane carries), and counts added to what the slice held.
    #[test]
    fn count_columns_equals_counting_each_column() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for (w, stride, nrows, start, dense) in [
            (1usize, 1usize, 5usize, 0usize, false),
            (3, 7, 300, 5, false),
            (64, 64, 256, 0, true),
            (65, 70, 511, 63, false),
            (200, 203, 600, 1, true),
            (1024, 1024, 260, 0, false),
            (0, 3, 4, 0, false),
        ] {
            let nbits = stride * nrows + start + 64;
            let words: Vec<u64> = (0..nbits.div_ceil(64))
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    if dense {
                        u64::MAX
                    } else {
                        seed
                    }
                })
                .collect();
            let bits = Bits::new(&words, start);
            let mut want = vec![7i64; w];
            for r in 0..nrows {
                for (k, n) in want.iter_mut().enumerate() {
                    *n += bits.get(r * stride + k) as i64;
                }
            }
            let mut got = vec![7i64; w];
            count_columns(bits, (stride, nrows), &mut got);
            assert_eq!(got, want, "{w} columns, stride {stride}, {nrows} rows");
        }
    }

    /// The transposed packing equals packing the transpose's bools, over shapes below,
    /// at and past a word on either side (runs that cross a word or not).
    #[test]
    fn pack_bools_transposed_equals_packing_the_transpose() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for (rows, cols) in [
            (1, 1),
            (3, 5),
            (64, 64),
            (65, 63),
            (130, 200),
            (7, 129),
            (200, 1),
            (0, 4),
        ] {
            let m: Vec<bool> = (0..rows * cols)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    !seed.is_multiple_of(3)
                })
                .collect();
            let t: Vec<bool> = (0..rows * cols)
                .map(|p| m[(p % rows) * cols + p / rows])
                .collect();
            assert_eq!(
                pack_bools_transposed(&m, rows, cols),
                pack_bools(&t),
                "{rows} x {cols}"
            );
            // and from the packed matrix (its rows not word-aligned)
            assert_eq!(transpose_bits(&pack_bools(&m), rows, cols), pack_bools(&t));
        }
    }

    /// Every column's bits equal the rows' bit at that column, read one at a time, for
    /// row counts below, at and past a word and widths up to 64.
    #[test]
    fn columns_bits_equal_each_bit_read_alone() {
        for (n, w) in [
            (1usize, 1usize),
            (3, 2),
            (64, 64),
            (65, 7),
            (130, 64),
            (1000, 33),
        ] {
            let rows: Vec<u64> = (0..n as u64)
                .map(|k| {
                    0x9E37_79B9_7F4A_7C15u64
                        .wrapping_mul(k + 1)
                        .rotate_left(k as u32)
                })
                .collect();
            let nw = n.div_ceil(64);
            let mut out = vec![u64::MAX; w * nw];
            columns_bits(&rows, w, &mut out);
            for j in 0..w {
                for k in 0..nw * 64 {
                    let want = k < n && (rows[k] >> j) & 1 == 1;
                    let got = (out[j * nw + k / 64] >> (k % 64)) & 1 == 1;
                    assert_eq!(got, want, "{n} rows, column {j}, row {k}");
                }
            }
        }
    }

    fn one_bit_at_a_time(b: &[bool]) -> Vec<u64> {
        b.chunks(64)
            .map(|c| {
                c.iter()
                    .enumerate()
                    .fold(0u64, |w, (i, &v)| w | (u64::from(v) << i))
            })
            .collect()
    }

    #[test]
    fn every_packing_path_gives_the_bits() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let bools: Vec<bool> = (0..64 * 5 + 13)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x & 1 == 1
            })
            .collect();
        let full = &bools[..64 * 5];
        let want = one_bit_at_a_time(full);
        // the portable word, on whole and partial words
        let portable: Vec<u64> = full.chunks(64).map(pack_word).collect();
        assert_eq!(portable, want);
        assert_eq!(
            pack_word(&bools[64 * 5..]),
            one_bit_at_a_time(&bools[64 * 5..])[0]
        );
        #[cfg(target_arch = "x86_64")]
        {
            if crate::cpu::has_avx2() {
                let mut out = Vec::new();
                // SAFETY: AVX2 checked
                unsafe { x86::pack_avx2(full, &mut out) };
                assert_eq!(out, want);
            }
            if crate::cpu::has_avx512() {
                let mut out = Vec::new();
                // SAFETY: AVX-512 checked
                unsafe { x86::pack_avx512(full, &mut out) };
                assert_eq!(out, want);
            }
        }
        // unpacking, every path and length, inverts packing
        for n in 0..=bools.len() {
            let words = one_bit_at_a_time(&bools[..n]);
            assert_eq!(unpack_bools(&words, n), &bools[..n], "n = {n}");
            let mut b = vec![0u8; n];
            for (c, &w) in b.chunks_mut(64).zip(&words) {
                unpack_word(w, c);
            }
            assert!(
                b.iter().zip(&bools).all(|(&x, &y)| x == u8::from(y)),
                "n = {n}"
            );
        }
        // the dispatcher, every length
        for n in 0..=bools.len() {
            assert_eq!(
                pack_bools(&bools[..n]),
                one_bit_at_a_time(&bools[..n]),
                "n = {n}"
            );
        }
    }
}
