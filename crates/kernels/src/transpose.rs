//! Tile transposes: a row-major `rows x width` tile into its columns, one after another
//! (`dst[j * rows + k] = src[k * width + j]`), so that the lanes of a reduction or a
//! normalization along a leading dim, gathered a tile of rows at a time, are read as
//! runs. Values are moved as bits (never through float arithmetic: NaN payloads and
//! signed zeros stay), 4- and 8-byte values in 8 x 8 and 4 x 4 blocks of AVX shuffles
//! where the CPU has AVX, everything else (the halves, the edges, other CPUs) a value at
//! a time in cache-sized blocks. A column read one value a row (`read_column`) was one
//! scalar store an element: 4096² softmax along dim 0 spent a third of its time there.

/// The row stride to give the transpose of a tile with `rows` rows (its lanes' stride
/// in [`transpose`]'s `dst`): `rows`, one cache line more where that is a multiple of
/// 256 bytes. A power-of-two stride puts every lane's start in one cache set, and eight
/// stores a block to eight lanes 4 KiB apart (1024 rows of `f32`) evicted each other: the
/// transposes ran 2x slower than a column read a value at a time.
pub fn lane_stride<T>(rows: usize) -> usize {
    let size = std::mem::size_of::<T>().max(1);
    if rows * size >= 256 && (rows * size).is_multiple_of(256) {
        rows + 64 / size
    } else {
        rows
    }
}

/// `dst[j * ld + k] = src[k * ls + j]` for `k < rows`, `j < width`: the tile `src`
/// (`rows` rows `width` wide, rows `ls` apart) transposed into `dst` (`width` rows
/// `rows` wide, rows `ld` apart; [`lane_stride`] gives a good `ld`).
///
/// # Panics
/// If `ls < width`, `ld < rows`, or `src` or `dst` is too short for its rows.
pub fn transpose<T: Copy>(src: &[T], shape: (usize, usize, usize), dst: &mut [T], ld: usize) {
    let (rows, width, _) = shape;
    if rows == 0 || width == 0 {
        return;
    }
    assert!(
        dst.len() >= (width - 1) * ld + rows,
        "transpose: a tile too short"
    );
    // SAFETY: `dst` holds every position written (checked), borrowed mutably.
    unsafe { transpose_raw(src, shape, dst.as_mut_ptr(), ld) }
}

/// [`transpose`] into rows of a buffer that other tasks write between them (a tile of
/// columns of a larger array): `dst[j * ld + k]`, `j < width`, `k < rows`, from `dst`.
///
/// # Safety
/// `dst` is valid for writes at every such position, and no other access to them
/// happens during the call.
///
/// # Panics
/// If `ls < width`, `ld < rows`, or `src` is too short for its rows.
pub unsafe fn transpose_raw<T: Copy>(
    src: &[T], (rows, width, ls): (usize, usize, usize), dst: *mut T, ld: usize,
) {
    if rows == 0 || width == 0 {
        return;
    }
    assert!(
        ls >= width && ld >= rows,
        "transpose: strides shorter than rows"
    );
    assert!(
        src.len() >= (rows - 1) * ls + width,
        "transpose: a tile too short"
    );
    let (mut r8, mut w8) = (0, 0);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        let size = std::mem::size_of::<T>();
        if size == 4 || size == 8 {
            let b = if size == 4 { 8 } else { 4 };
            (r8, w8) = (rows / b * b, width / b * b);
            let shape = (r8, w8, ls, ld);
            // SAFETY: AVX is present; every block read lies in the rows of `src` (the
            // length checked above) and every block written at a position the caller
            // gives (whole blocks within `r8 x w8`); `T` is `Copy` and of the size of
            // the lanes moved, which are moved as bits.
            unsafe {
                if size == 4 {
                    x86::blocks8(src.as_ptr().cast(), shape, dst.cast());
                } else {
                    x86::blocks4(src.as_ptr().cast(), shape, dst.cast());
                }
            }
        }
    }
    // the columns beyond the blocks, then the rows beyond them under the blocks' columns
    // SAFETY: positions the caller gives
    unsafe {
        plain(src, ls, dst, ld, 0..rows, w8..width);
        plain(src, ls, dst, ld, r8..rows, 0..w8);
    }
}

/// [`transpose_raw`] over rows `ks` and columns `js`, a value at a time in blocks of
/// 16 x 16.
///
/// # Safety
/// As [`transpose_raw`], for these rows and columns.
unsafe fn plain<T: Copy>(
    src: &[T], ls: usize, dst: *mut T, ld: usize, ks: std::ops::Range<usize>,
    js: std::ops::Range<usize>,
) {
    const B: usize = 16;
    for k0 in ks.clone().step_by(B) {
        let k1 = (k0 + B).min(ks.end);
        for j0 in js.clone().step_by(B) {
            for j in j0..(j0 + B).min(js.end) {
                for k in k0..k1 {
                    // SAFETY: a position the caller gives
                    unsafe { dst.add(j * ld + k).write(src[k * ls + j]) };
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Declares `$name`: the `$b x $b` blocks of `$t` values within `rb x wb` (source
    /// rows `ls` apart, destination rows `ld` apart), each block's rows `$r` loaded,
    /// turned into its columns by `$shuffle`, stored. The loads and stores are written
    /// out by the macro: a closure or an array `map` is not inlined into an AVX
    /// function, and each load became a call.
    ///
    /// The functions' safety contract: AVX present; `src` valid for `rb` rows of `ls`
    /// (the last `wb` long), `dst` for `wb` rows of `ld` (the last `rb` long); `rb` and
    /// `wb` multiples of `$b`.
    macro_rules! blocks {
        ($(#[$doc:meta])* $name:ident: $t:ty, $b:literal, $load:ident, $store:ident,
         [$($i:literal),*], |$r:ident| $shuffle:block) => {
            $(#[$doc])*
            #[target_feature(enable = "avx")]
            pub(super) unsafe fn $name(
                src: *const $t,
                (rb, wb, ls, ld): (usize, usize, usize, usize),
                dst: *mut $t,
            ) {
                for k0 in (0..rb).step_by($b) {
                    for j0 in (0..wb).step_by($b) {
                        // SAFETY: rows k0.. and columns j0.. of one block lie in the
                        // tile (the caller's bounds); loads and stores are unaligned.
                        unsafe {
                            let p = src.add(k0 * ls + j0);
                            let $r = [$($load(p.add($i * ls))),*];
                            let c = $shuffle;
                            let q = dst.add(j0 * ld + k0);
                            $($store(q.add($i * ld), c[$i]);)*
                        }
                    }
                }
            }
        };
    }

    blocks! {
        /// The 8 x 8 blocks of 32-bit values (the macro's contract).
        blocks8: f32, 8, _mm256_loadu_ps, _mm256_storeu_ps, [0, 1, 2, 3, 4, 5, 6, 7], |r| {
            let t0 = _mm256_unpacklo_ps(r[0], r[1]);
            let t1 = _mm256_unpackhi_ps(r[0], r[1]);
            let t2 = _mm256_unpacklo_ps(r[2], r[3]);
            let t3 = _mm256_unpackhi_ps(r[2], r[3]);
            let t4 = _mm256_unpacklo_ps(r[4], r[5]);
            let t5 = _mm256_unpackhi_ps(r[4], r[5]);
            let t6 = _mm256_unpacklo_ps(r[6], r[7]);
            let t7 = _mm256_unpackhi_ps(r[6], r[7]);
            let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            [
                _mm256_permute2f128_ps::<0x20>(u0, u4),
                _mm256_permute2f128_ps::<0x20>(u1, u5),
                _mm256_permute2f128_ps::<0x20>(u2, u6),
                _mm256_permute2f128_ps::<0x20>(u3, u7),
                _mm256_permute2f128_ps::<0x31>(u0, u4),
                _mm256_permute2f128_ps::<0x31>(u1, u5),
                _mm256_permute2f128_ps::<0x31>(u2, u6),
                _mm256_permute2f128_ps::<0x31>(u3, u7),
            ]
        }
    }

    blocks! {
        /// The 4 x 4 blocks of 64-bit values (the macro's contract).
        blocks4: f64, 4, _mm256_loadu_pd, _mm256_storeu_pd, [0, 1, 2, 3], |r| {
            let t0 = _mm256_unpacklo_pd(r[0], r[1]);
            let t1 = _mm256_unpackhi_pd(r[0], r[1]);
            let t2 = _mm256_unpacklo_pd(r[2], r[3]);
            let t3 = _mm256_unpackhi_pd(r[2], r[3]);
            [
                _mm256_permute2f128_pd::<0x20>(t0, t2),
                _mm256_permute2f128_pd::<0x20>(t1, t3),
                _mm256_permute2f128_pd::<0x31>(t0, t2),
                _mm256_permute2f128_pd::<0x31>(t1, t3),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value lands at its transposed place, bit for bit, for 2-, 4- and 8-byte
    /// values, shapes with and without whole blocks, NaN payloads and -0 among them; the
    /// transpose of the transpose is the tile.
    #[test]
    fn transposes_every_shape_and_size_bit_for_bit() {
        fn check<T: Copy + PartialEq + std::fmt::Debug>(of: impl Fn(usize) -> T) {
            let shapes = [
                (1, 1),
                (8, 8),
                (16, 32),
                (37, 20),
                (64, 3),
                (5, 70),
                (100, 33),
            ];
            for (rows, width) in shapes {
                // packed and strided sources, packed and padded destinations
                for (ls, ld) in [(width, rows), (width + 3, lane_stride::<T>(rows) + 5)] {
                    let src: Vec<T> = (0..rows * ls).map(&of).collect();
                    let mut dst = vec![of(usize::MAX); width * ld];
                    transpose(&src, (rows, width, ls), &mut dst, ld);
                    for k in 0..rows {
                        for j in 0..width {
                            let (got, want) = (dst[j * ld + k], src[k * ls + j]);
                            assert_eq!(got, want, "{rows}x{width} ({k}, {j})");
                        }
                    }
                    let mut back = vec![of(usize::MAX); rows * ls];
                    transpose(&dst, (width, rows, ld), &mut back, ls);
                    for k in 0..rows {
                        assert_eq!(back[k * ls..k * ls + width], src[k * ls..k * ls + width]);
                    }
                }
            }
        }
        // values compared as bits: a NaN with a payload, -0.0
        let f32_bits = |i: usize| match i % 7 {
            0 => 0x7fc0_1234u32,
            1 => 0x8000_0000,
            _ => (i as u32).wrapping_mul(2_654_435_761),
        };
        check(|i| f32::from_bits(f32_bits(i)).to_bits());
        check(|i| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        check(|i| i as u16);
        check(|i| [i as u8; 3]);
        // into a tile of columns of a larger buffer: those slots written, no other
        let (rows, width, ld) = (9, 5, 13);
        let src: Vec<u32> = (0..(rows * width) as u32).collect();
        let mut big = vec![u32::MAX; 3 + (width - 1) * ld + rows + 4];
        let scatter = crate::par::Scatter::new(&mut big);
        // SAFETY: one task; the slots are the buffer's
        unsafe { scatter.transposed(&src, (rows, width, width), 3, ld) };
        for (p, &v) in big.iter().enumerate() {
            let (j, k) = ((p.wrapping_sub(3)) / ld, (p.wrapping_sub(3)) % ld);
            if p >= 3 && j < width && k < rows {
                assert_eq!(v, src[k * width + j], "slot {p}");
            } else {
                assert_eq!(v, u32::MAX, "slot {p} written");
            }
        }
        // a stride of 1024 f32 (4 KiB) gets a line more; odd ones stay
        assert_eq!(lane_stride::<f32>(1024), 1040);
        assert_eq!(lane_stride::<f32>(1000), 1000);
        assert_eq!(lane_stride::<u16>(20), 20);
    }
}
