//! Output buffers.

/// A vector of `n` default (zero) values for a large output. Large ones ask Linux for
/// transparent huge pages before first touch, so writing a 64 MiB result takes 32 page
/// faults instead of 16384 (the faults, not the arithmetic, dominated the
/// normalizations).
pub fn fresh_vec<O: Clone + Default>(n: usize) -> Vec<O> {
    let v = vec![O::default(); n];
    advise_huge(v.as_ptr().cast(), std::mem::size_of_val(v.as_slice()));
    v
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
