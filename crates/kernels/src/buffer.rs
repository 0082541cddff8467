//! Output buffers.

/// A value type whose all-zero bit pattern is a valid value, equal to its `Default`:
/// `fresh_vec` can then take zeroed memory from the allocator (for a large vector,
/// fresh pages nobody has touched) instead of writing every element.
///
/// # Safety
/// Implement only for types where every byte 0 is a valid value and that value is
/// `Default::default()` (numbers, and the `half` crate's two floats).
pub unsafe trait ZeroBits: Copy + Default {}

macro_rules! zero_bits {
    ($($t:ty),*) => { $(
        // SAFETY: zero bytes are the number 0 (for floats +0.0; for bool false), the
        // type's default.
        unsafe impl ZeroBits for $t {}
    )* };
}
zero_bits!(
    bool,
    u8,
    u16,
    u32,
    u64,
    usize,
    i8,
    i16,
    i32,
    i64,
    isize,
    f32,
    f64,
    half::f16,
    half::bf16
);

/// A vector of `n` zero values for an output. Its memory comes zeroed from the allocator
/// (as `vec![0.0; n]` does for `f32`, which `vec!` cannot do for the `half` crate's
/// types: it wrote every element, touching every 4 KiB page of a large output before
/// the advice below, a page fault each: a fresh 4096² f16 sqrt took 28 ms, 7 without).
/// Large ones ask Linux for transparent huge pages before first touch, so
/// writing a 64 MiB result takes 32 page faults instead of 16384 (the faults, not the
/// arithmetic, dominated the normalizations).
pub fn fresh_vec<O: ZeroBits>(n: usize) -> Vec<O> {
    let layout = match std::alloc::Layout::array::<O>(n) {
        Ok(l) if l.size() > 0 => l,
        // empty, or too large to ask for (what `vec!` does then: its own error)
        _ => return vec![O::default(); n],
    };
    // SAFETY: `layout` has a non-zero size; a null result is handled below.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    advise_huge(ptr, layout.size());
    // SAFETY: `ptr` was allocated by the global allocator with the layout of `n`
    // values of `O` (so its capacity is `n`), and its `n` values are initialised: zero
    // bytes, a valid `O` (`ZeroBits`).
    unsafe { Vec::from_raw_parts(ptr.cast::<O>(), n, n) }
}

/// An empty vector with room for `n` values, for a writer that fills all of them
/// itself (through `spare_capacity_mut`, then `set_len`): nothing is zeroed first (an
/// output the size of a few MiB comes back from the heap after the first call, where a
/// zeroed one costs a pass of writes), and large ones get the huge-page advice of
/// [`fresh_vec`].
pub fn fresh_capacity<T>(n: usize) -> Vec<T> {
    let out: Vec<T> = Vec::with_capacity(n);
    advise_huge(
        out.as_ptr().cast(),
        n.saturating_mul(std::mem::size_of::<T>()),
    );
    out
}

/// Asks Linux for transparent huge pages over the whole 2 MiB pages inside
/// `start..start + bytes` of a large allocation not yet touched (elsewhere: nothing).
pub(crate) fn advise_huge(start: *const u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        if bytes >= 2 * HUGE {
            let start = start as usize;
            let lo = start.next_multiple_of(HUGE);
            let hi = (start + bytes) / HUGE * HUGE;
            if hi > lo {
                // SAFETY: advice only, on a range inside a live allocation; it changes
                // no contents and failure is harmless (the kernel may decline).
                unsafe {
                    libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE);
                }
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, bytes);
}
