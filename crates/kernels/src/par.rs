//! Parallel loops through one non-generic entry point.
//!
//! Every rayon parallel iterator, `join` or scope used in generic code is compiled again
//! for each closure type it is given: in the engine (every op x dtype x layout) rayon's
//! job, join and bridge machinery was most of the generated code (65% of the dispatch
//! crate's LLVM IR lines, `cargo llvm-lines`). These helpers take the work as a trait
//! object (`&dyn Fn(usize)`), so that rayon is instantiated once, here, and generic code
//! only builds a small closure: a task is a chunk of work (thousands of elements), so the
//! one indirect call per task costs nothing measurable.
//!
//! ```
//! use masked_kernels::par;
//!
//! let squares = par::map(5, |i| i * i);
//! assert_eq!(squares, [0, 1, 4, 9, 16]);
//! let mut xs = vec![0u32; 10];
//! par::chunks_mut(&mut xs, 4, |c, chunk| chunk.fill(c as u32));
//! assert_eq!(xs, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]);
//! ```

use rayon::prelude::*;
use std::ops::Range;

/// A raw pointer that may cross threads: each task touches a disjoint part of what it
/// points to (the callers below guarantee it).
struct SendPtr<T>(*mut T);
// SAFETY: the pointer is only dereferenced at disjoint offsets, one task each, while the
// slice it came from is borrowed mutably by the caller for the whole parallel loop.
unsafe impl<T: Send> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    // a method, so that closures capture the wrapper (Sync), not its raw field
    fn get(&self) -> *mut T {
        self.0
    }
}

/// Runs `f(i)` for every `i` in `0..n` on the thread pool (in any order, in parallel):
/// the one place this crate's users instantiate rayon.
///
/// From outside any pool, the calling thread takes part: it runs tasks itself, beside
/// `threads() - 1` helpers on the pool, each taking the next task from a shared counter
/// (`lead`); inside a pool the loop is rayon's.
pub fn for_each_dyn(n: usize, f: &(dyn Fn(usize) + Sync)) {
    match n {
        0 => {}
        1 => f(0),
        // a task of a loop this thread leads: its own loops run here, one after another
        _ if LEADING.get() => (0..n).for_each(f),
        _ if rayon::current_thread_index().is_none() => match TEAM.get() {
            Some(team) => team.lead(n, f),
            None => lead(n, f),
        },
        _ => (0..n).into_par_iter().for_each(f),
    }
}

thread_local! {
    /// Whether this thread is running a task of a loop it leads ([`lead`]).
    static LEADING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The OpenMP team this thread's loops run on ([`with_team`]), if any.
    static TEAM: std::cell::Cell<Option<OpenMpTeam>> = const { std::cell::Cell::new(None) };
}

/// An OpenMP runtime's entry for a parallel region, `GOMP_parallel` (libgomp's; LLVM's
/// and Intel's runtimes export it too): runs `body(data)` on every thread of the calling
/// thread's team, `threads` of them (0: the team's size), the caller among them, and
/// returns when every one has.
pub type OpenMpParallel = unsafe extern "C" fn(
    body: unsafe extern "C" fn(*mut std::ffi::c_void),
    data: *mut std::ffi::c_void,
    threads: std::ffi::c_uint,
    flags: std::ffi::c_uint,
);

/// An OpenMP runtime's `omp_get_max_threads`: the size of the calling thread's next team.
pub type OpenMpMaxThreads = unsafe extern "C" fn() -> std::ffi::c_int;

/// The OpenMP runtime another library's kernels run on (torch's intra-op threads), to
/// run the engine's parallel loops on the same threads ([`with_team`]): beside torch,
/// whose OpenMP workers keep spinning on the other cores after each of its ops, loops on
/// the engine's own pool found those cores taken, and the calling thread ran most of
/// the work alone.
#[derive(Clone, Copy, Debug)]
pub struct OpenMpTeam {
    parallel: OpenMpParallel,
    max_threads: OpenMpMaxThreads,
}

impl OpenMpTeam {
    /// The runtime of these two entry points.
    ///
    /// # Safety
    /// `parallel` and `max_threads` are one loaded OpenMP runtime's `GOMP_parallel` and
    /// `omp_get_max_threads` (or functions that keep their contracts), and the runtime
    /// stays loaded while loops run on it.
    pub unsafe fn new(parallel: OpenMpParallel, max_threads: OpenMpMaxThreads) -> Self {
        OpenMpTeam {
            parallel,
            max_threads,
        }
    }

    /// The size of the calling thread's team (at least 1).
    pub fn threads(&self) -> usize {
        // SAFETY: `new`'s contract: the runtime's own `omp_get_max_threads`
        let n = unsafe { (self.max_threads)() };
        usize::try_from(n).unwrap_or(1).max(1)
    }

    /// [`lead`] on the team: every thread of it (the caller too) takes the next task
    /// from one counter; nested loops and joins of a task run on its thread. A panic in
    /// a task stops the others' next tasks and is raised again on the caller.
    fn lead(self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        struct Region<'a> {
            next: AtomicUsize,
            n: usize,
            f: &'a (dyn Fn(usize) + Sync),
            panic: std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>,
        }
        unsafe extern "C" fn body(data: *mut std::ffi::c_void) {
            // SAFETY: `data` is the `Region` below, alive until the region returns
            let r = unsafe { &*(data as *const Region<'_>) };
            let _lead = Leading::enter();
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loop {
                let i = r.next.fetch_add(1, Ordering::Relaxed);
                if i >= r.n {
                    break;
                }
                (r.f)(i);
            }));
            if let Err(p) = run {
                r.next.store(r.n, Ordering::Relaxed);
                r.panic
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(p);
            }
        }
        let threads = self.threads().min(n);
        if threads <= 1 {
            // a team of one (`torch.set_num_threads(1)`, as in a forked worker): no
            // region, as torch's own loops open none
            let _lead = Leading::enter();
            return (0..n).for_each(f);
        }
        let region = Region {
            next: AtomicUsize::new(0),
            n,
            f,
            panic: std::sync::Mutex::new(None),
        };
        let data = &region as *const Region<'_> as *mut std::ffi::c_void;
        // SAFETY: `new`'s contract; `body` catches every panic (none unwinds into the
        // runtime) and reads `region` only until the region returns
        unsafe { (self.parallel)(body, data, threads as std::ffi::c_uint, 0) };
        if let Some(p) = region.panic.into_inner().unwrap_or_else(|e| e.into_inner()) {
            std::panic::resume_unwind(p);
        }
    }
}

/// Whether the calling thread is a worker of one of the engine's thread pools (rayon's).
pub fn on_pool() -> bool {
    rayon::current_thread_index().is_some()
}

/// Runs `f` with the calling thread's parallel loops on `team` (`None`: on the engine's
/// pools), as torch's own ops run on it: [`threads`] is the team's size, and
/// [`set_threads`] does not apply inside. Loops on other threads are not affected.
pub fn with_team<R>(team: Option<OpenMpTeam>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<OpenMpTeam>);
    impl Drop for Restore {
        fn drop(&mut self) {
            TEAM.set(self.0);
        }
    }
    let _restore = Restore(TEAM.replace(team));
    f()
}

/// A parallel loop from outside any pool, led by the calling thread: on the pool
/// [`on_free_pool`] would take (rayon's global one or [`set_threads`]' shared one when
/// free, else the thread's own), `threads() - 1` helper jobs are spawned and the caller
/// runs tasks too, every thread taking the next task from one counter until none is
/// left; then the caller waits for the helpers' last tasks. Handing the whole loop to
/// the pool instead (the caller asleep until it ends) cost a wake-up of every worker
/// and one of the caller per loop, and beside torch, whose OpenMP workers spin on the
/// other core after each of its ops, the caller's own core idled. With one thread the
/// caller runs the loop alone. Nested loops and joins of the caller's tasks run on the
/// caller, one after another (the pool's helpers run theirs in the pool).
fn lead(n: usize, f: &(dyn Fn(usize) + Sync)) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            break;
        }
        f(i);
    };
    let work: &(dyn Fn() + Sync) = &work;
    outside_pool(|pool| {
        let count = pool.map_or_else(rayon::current_num_threads, |p| p.current_num_threads());
        let helpers = count.saturating_sub(1).min(n - 1);
        if helpers == 0 {
            let _lead = Leading::enter();
            return work();
        }
        match pool {
            Some(p) => p.in_place_scope(|s| helped(s, helpers, work)),
            None => rayon::in_place_scope(|s| helped(s, helpers, work)),
        }
    })
}

/// [`lead`]'s scope: `helpers` jobs on the pool and the caller run `work`.
fn helped<'s>(s: &rayon::Scope<'s>, helpers: usize, work: &'s (dyn Fn() + Sync)) {
    for _ in 0..helpers {
        s.spawn(move |_| work());
    }
    let _lead = Leading::enter();
    work();
}

/// Marks this thread as running tasks of a loop it leads, until dropped (on return or
/// unwind).
struct Leading;
impl Leading {
    fn enter() -> Self {
        LEADING.set(true);
        Leading
    }
}
impl Drop for Leading {
    fn drop(&mut self) {
        LEADING.set(false);
    }
}

/// Frees the global pool for the next caller, on return or unwind.
struct FreeGlobal;
impl Drop for FreeGlobal {
    fn drop(&mut self) {
        GLOBAL_BUSY.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// [`for_each_dyn`] for any closure.
#[inline]
pub fn for_each(n: usize, f: impl Fn(usize) + Sync) {
    for_each_dyn(n, &f)
}

/// `[f(0), .., f(n - 1)]`, computed in parallel, in order.
pub fn map<R: Send>(n: usize, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let mut out: Vec<R> = Vec::with_capacity(n);
    let p = SendPtr(out.as_mut_ptr());
    // SAFETY: slot `i < n` lies in the capacity and is written once, by task `i`.
    for_each_dyn(n, &|i| unsafe { p.get().add(i).write(f(i)) });
    // SAFETY: every task has run (a panic in one propagates before this line, leaking
    // the values written, never exposing an unwritten slot).
    unsafe { out.set_len(n) };
    out
}

/// `[f(items[0]), f(items[1]), ..]`, computed in parallel, in order: each item (a task
/// and the disjoint output slices it writes, say) is moved into its call.
pub fn map_vec<P: Send, R: Send>(items: Vec<P>, f: impl Fn(P) -> R + Sync) -> Vec<R> {
    let mut items = std::mem::ManuallyDrop::new(items);
    let (n, cap) = (items.len(), items.capacity());
    let p = SendPtr(items.as_mut_ptr());
    // SAFETY: item `i < n` is initialised and read (moved out) once, by task `i`.
    let out = map(n, |i| f(unsafe { p.get().add(i).read() }));
    // SAFETY: the buffer came from this Vec; length 0, as every item was moved out (a
    // panic above leaks the buffer and the unread items instead, never drops twice).
    drop(unsafe { Vec::from_raw_parts(p.get(), 0, cap) });
    out
}

/// `[src[idx[0]], src[idx[1]], ..]`, gathered in parallel chunks.
pub fn gather<T: Copy + Send + Sync>(src: &[T], idx: &[usize]) -> Vec<T> {
    const CHUNK: usize = 1 << 14;
    concat(map(idx.len().div_ceil(CHUNK), |c| {
        let r = c * CHUNK..((c + 1) * CHUNK).min(idx.len());
        idx[r].iter().map(|&i| src[i]).collect::<Vec<T>>()
    }))
}

/// `[f(0), f(1), .., f(n - 1)]`, computed in parallel chunks of thousands of calls (a
/// gather through an index map of any form, a value per slot).
pub fn collect<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    const CHUNK: usize = 1 << 14;
    concat(map(n.div_ceil(CHUNK), |c| {
        (c * CHUNK..((c + 1) * CHUNK).min(n))
            .map(&f)
            .collect::<Vec<T>>()
    }))
}

/// The sum of `f(range)` over the chunks of `0..len` cut into `chunk`-long ranges, each
/// chunk in parallel, the chunks' sums added in order (deterministic).
pub fn sum_chunks(len: usize, chunk: usize, f: impl Fn(Range<usize>) -> f64 + Sync) -> f64 {
    let chunk = chunk.max(1);
    map(len.div_ceil(chunk), |c| {
        f(c * chunk..((c + 1) * chunk).min(len))
    })
    .into_iter()
    .sum()
}

/// The items that `f` pushes for each of the chunks `0..len` cut into `chunk`-long
/// ranges, concatenated in order: a parallel filter or flat map.
pub fn flat_map_ranges<R: Send>(
    len: usize, chunk: usize, f: impl Fn(Range<usize>, &mut Vec<R>) + Sync,
) -> Vec<R> {
    let chunk = chunk.max(1);
    let parts = map(len.div_ceil(chunk), |c| {
        let mut v = Vec::new();
        f(c * chunk..((c + 1) * chunk).min(len), &mut v);
        v
    });
    concat(parts)
}

/// The vectors in order, in one allocation: one vector is returned as it is; large
/// outputs are copied in parallel, each part into its place (so that the output's fresh
/// pages are touched, and faulted in, by every thread, not one).
pub fn concat<R: Send>(mut parts: Vec<Vec<R>>) -> Vec<R> {
    /// Below this many elements a serial copy costs less than waking the pool.
    const PARALLEL: usize = 1 << 14;
    if parts.len() == 1 {
        return parts.pop().unwrap_or_default();
    }
    let total = parts.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    if total < PARALLEL {
        for p in parts {
            out.extend(p);
        }
        return out;
    }
    let mut at = 0;
    let placed: Vec<(usize, Vec<R>)> = parts
        .into_iter()
        .map(|p| {
            at += p.len();
            (at - p.len(), p)
        })
        .collect();
    let dst = SendPtr(out.as_mut_ptr());
    map_vec(placed, |(at, mut p)| {
        // SAFETY: part `i` goes to `at..at + len` of the capacity, disjoint from every
        // other part's; its elements are moved (the part's length set to 0 so that it
        // frees only its buffer).
        unsafe {
            std::ptr::copy_nonoverlapping(p.as_ptr(), dst.get().add(at), p.len());
            p.set_len(0);
        }
    });
    // SAFETY: every part has been copied in (the copies cannot panic), covering
    // `0..total`.
    unsafe { out.set_len(total) };
    out
}

/// `xs.to_vec()`, copied in parallel chunks when large: the copy's fresh pages are
/// touched (faulted in) by every thread, not one (a 32 MiB output mask copied serially
/// was a tenth of a 16-thread softmax).
pub fn copy_vec<T: Copy + Send + Sync>(xs: &[T]) -> Vec<T> {
    const CHUNK_BYTES: usize = 1 << 20;
    let bytes = std::mem::size_of_val(xs);
    if bytes < 4 * CHUNK_BYTES {
        return xs.to_vec();
    }
    let chunk = CHUNK_BYTES / std::mem::size_of::<T>();
    let mut out: Vec<T> = crate::buffer::fresh_capacity(xs.len());
    let dst = SendPtr(out.as_mut_ptr());
    for_each(xs.len().div_ceil(chunk), |c| {
        let lo = c * chunk;
        let n = chunk.min(xs.len() - lo);
        // SAFETY: chunk `c` is `lo..lo + n`, inside both `xs` and the capacity, disjoint
        // from every other chunk's
        unsafe { std::ptr::copy_nonoverlapping(xs.as_ptr().add(lo), dst.get().add(lo), n) };
    });
    // SAFETY: every chunk has been copied, covering `0..xs.len()`
    unsafe { out.set_len(xs.len()) };
    out
}

/// `[f(0, chunk 0), f(1, chunk 1), ..]` over the chunks of `xs` of `size` elements (the
/// last may be shorter; `size` 0 counts as 1), run in parallel.
pub fn chunks_mut<T: Send, R: Send>(
    xs: &mut [T], size: usize, f: impl Fn(usize, &mut [T]) -> R + Sync,
) -> Vec<R> {
    let (size, len) = (size.max(1), xs.len());
    let p = SendPtr(xs.as_mut_ptr());
    map(len.div_ceil(size), |c| {
        let lo = c * size;
        // SAFETY: chunk `c` is `lo..min(lo + size, len)` of the borrowed slice, disjoint
        // from every other task's.
        f(c, unsafe {
            std::slice::from_raw_parts_mut(p.get().add(lo), size.min(len - lo))
        })
    })
}

/// [`chunks_mut`] over two slices at once, in chunks of `sa` and `sb` elements: chunk `c`
/// of each (as many chunks as the shorter split has, as rayon's `zip`).
pub fn chunks_mut2<A: Send, B: Send, R: Send>(
    a: &mut [A], sa: usize, b: &mut [B], sb: usize,
    f: impl Fn(usize, &mut [A], &mut [B]) -> R + Sync,
) -> Vec<R> {
    let (sa, sb) = (sa.max(1), sb.max(1));
    let (la, lb) = (a.len(), b.len());
    let n = la.div_ceil(sa).min(lb.div_ceil(sb));
    let (pa, pb) = (SendPtr(a.as_mut_ptr()), SendPtr(b.as_mut_ptr()));
    map(n, |c| {
        let (lo_a, lo_b) = (c * sa, c * sb);
        // SAFETY: as in `chunks_mut`, for each slice.
        let (ca, cb) = unsafe {
            (
                std::slice::from_raw_parts_mut(pa.get().add(lo_a), sa.min(la - lo_a)),
                std::slice::from_raw_parts_mut(pb.get().add(lo_b), sb.min(lb - lo_b)),
            )
        };
        f(c, ca, cb)
    })
}

/// `[f(0, part 0), ..]`: part `c` is `xs[bounds[c]..bounds[c + 1]]` (bounds
/// non-decreasing, within the slice), run in parallel: chunks of uneven sizes (a sparse
/// matrix's rows by their stored entries).
///
/// # Panics
/// If the bounds are not as described (a caller's bug, checked before any task runs).
pub fn parts_mut<T: Send, R: Send>(
    xs: &mut [T], bounds: &[usize], f: impl Fn(usize, &mut [T]) -> R + Sync,
) -> Vec<R> {
    assert!(
        bounds.windows(2).all(|w| w[0] <= w[1]) && bounds.last().is_none_or(|&e| e <= xs.len()),
        "parts_mut: bounds out of order or out of range"
    );
    let p = SendPtr(xs.as_mut_ptr());
    map(bounds.len().saturating_sub(1), |c| {
        // SAFETY: the parts are disjoint ranges inside the slice (checked above), one task
        // each, while the slice is borrowed mutably for the whole loop.
        f(c, unsafe {
            std::slice::from_raw_parts_mut(p.get().add(bounds[c]), bounds[c + 1] - bounds[c])
        })
    })
}

/// [`parts_mut`] over two slices at once, split at the same `bounds`: part `c` of each.
///
/// # Panics
/// As [`parts_mut`], for either slice.
pub fn parts_mut2<A: Send, B: Send, R: Send>(
    a: &mut [A], b: &mut [B], bounds: &[usize], f: impl Fn(usize, &mut [A], &mut [B]) -> R + Sync,
) -> Vec<R> {
    let end = bounds.last().copied().unwrap_or(0);
    assert!(
        bounds.windows(2).all(|w| w[0] <= w[1]) && end <= a.len() && end <= b.len(),
        "parts_mut2: bounds out of order or out of range"
    );
    let (pa, pb) = (SendPtr(a.as_mut_ptr()), SendPtr(b.as_mut_ptr()));
    map(bounds.len().saturating_sub(1), |c| {
        let (lo, n) = (bounds[c], bounds[c + 1] - bounds[c]);
        // SAFETY: as in `parts_mut`, for each slice.
        let (pa, pb) = unsafe {
            (
                std::slice::from_raw_parts_mut(pa.get().add(lo), n),
                std::slice::from_raw_parts_mut(pb.get().add(lo), n),
            )
        };
        f(c, pa, pb)
    })
}

/// The lanes `0..starts.len() - 1` (lane `l` holding the entries `starts[l]..starts[l +
/// 1]`, `starts` non-decreasing) in blocks of whole lanes of about `target` entries (a
/// longer lane alone): the blocks' first lanes, then the lane count (`[0]` for no lane).
/// With the entry offsets `starts[b] - starts[0]` of these, [`parts_mut`] gives each
/// block its slots of an output with one slot per entry.
pub fn lane_blocks(starts: &[usize], target: usize) -> Vec<usize> {
    let lanes = starts.len().saturating_sub(1);
    let mut bounds = vec![0];
    let mut l0 = 0;
    while l0 < lanes {
        let mut l1 = l0 + 1;
        while l1 < lanes && starts[l1] - starts[l0] < target {
            l1 += 1;
        }
        bounds.push(l1);
        l0 = l1;
    }
    bounds
}

/// One buffer that many tasks write at distinct slots (a scatter through a
/// permutation): each slot is written by one task only, which the caller guarantees.
pub struct Scatter<'a, T> {
    ptr: *mut T,
    len: usize,
    _buf: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: writes go to distinct slots (the contract of `write`), so sharing the pointer
// between tasks is sharing disjoint parts of a slice borrowed mutably for `'a`.
unsafe impl<T: Send> Send for Scatter<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Scatter<'_, T> {}

impl<'a, T> Scatter<'a, T> {
    /// The buffer, borrowed for as long as the scatter lives.
    pub fn new(xs: &'a mut [T]) -> Self {
        Scatter {
            ptr: xs.as_mut_ptr(),
            len: xs.len(),
            _buf: std::marker::PhantomData,
        }
    }

    /// Writes slot `i` (checked against the length).
    ///
    /// # Safety
    /// No other write to slot `i` happens while this scatter lives (in any task).
    #[inline(always)]
    pub unsafe fn write(&self, i: usize, v: T) {
        assert!(i < self.len, "scatter slot {i} out of {}", self.len);
        // SAFETY: in bounds (checked); no other task touches slot `i` (the contract).
        unsafe { self.ptr.add(i).write(v) }
    }

    /// Slot `i`, to read and update in place (checked against the length).
    ///
    /// # Safety
    /// No other access to slot `i` happens while the returned borrow lives (in any
    /// task).
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slot(&self, i: usize) -> &mut T {
        assert!(i < self.len, "scatter slot {i} out of {}", self.len);
        // SAFETY: in bounds (checked); this task has slot `i` alone (the contract).
        unsafe { &mut *self.ptr.add(i) }
    }

    /// [`transpose`](crate::transpose::transpose) of `src` (`rows` rows `width` wide,
    /// rows `ls` apart) into the slots `at + j * ld + k` (`j < width`, `k < rows`;
    /// checked against the length): a tile of lanes written back as a tile of columns.
    ///
    /// # Safety
    /// No other access to those slots happens during the call (in any task).
    pub unsafe fn transposed(
        &self, src: &[T], (rows, width, ls): (usize, usize, usize), at: usize, ld: usize,
    ) where
        T: Copy,
    {
        if rows == 0 || width == 0 {
            return;
        }
        assert!(
            ld >= rows && at + (width - 1) * ld + rows <= self.len,
            "scatter transpose out of {}",
            self.len
        );
        // SAFETY: every slot written is in bounds (checked) and this task's alone (the
        // contract).
        unsafe { crate::transpose::transpose_raw(src, (rows, width, ls), self.ptr.add(at), ld) }
    }

    /// Slots `lo..hi` as a slice (checked against the length).
    ///
    /// # Safety
    /// No other access to those slots happens while the returned borrow lives (in any
    /// task).
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn part(&self, lo: usize, hi: usize) -> &mut [T] {
        assert!(
            lo <= hi && hi <= self.len,
            "scatter part {lo}..{hi} out of {}",
            self.len
        );
        // SAFETY: in bounds (checked); this task has these slots alone (the contract).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(lo), hi - lo) }
    }
}

/// The number of worker threads parallel loops run on: inside a pool its own count;
/// in a [`with_team`] call its team's size; else the count [`set_threads`] chose, else
/// rayon's global pool's.
pub fn threads() -> usize {
    use std::sync::atomic::Ordering;
    if let Some(team) = TEAM.get()
        && rayon::current_thread_index().is_none()
    {
        return team.threads();
    }
    match THREADS.load(Ordering::Acquire) {
        n if n > 0 && rayon::current_thread_index().is_none() => n,
        _ => rayon::current_num_threads(),
    }
}

/// The thread count of [`set_threads`] (0: the default, rayon's global pool).
static THREADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The shared pool of [`set_threads`]' count, used in place of rayon's global pool.
static SHARED: std::sync::Mutex<Option<std::sync::Arc<rayon::ThreadPool>>> =
    std::sync::Mutex::new(None);

/// Sets how many threads each parallel loop of the engine runs on from now on, as
/// torch's `set_num_threads` does (`n` = 1: every call on one core, so that calls from
/// `k` threads of a server use `k` cores side by side); `0` restores the default
/// (rayon's global pool: `RAYON_NUM_THREADS` threads, else one per core). Loops already
/// running keep their pool.
///
/// # Errors
/// The operating system refused the pool's threads.
///
/// ```
/// use masked_kernels::par;
///
/// par::set_threads(1).unwrap();
/// assert_eq!(par::threads(), 1);
/// assert_eq!(par::map(4, |i| i * 2), [0, 2, 4, 6]);
/// par::set_threads(0).unwrap();
/// assert_eq!(par::threads(), rayon::current_num_threads());
/// ```
pub fn set_threads(n: usize) -> Result<(), rayon::ThreadPoolBuildError> {
    use std::sync::atomic::Ordering;
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if n > 0 && shared.as_ref().map(|p| p.current_num_threads()) != Some(n) {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("masked-shared-{i}"))
            .build()?;
        *shared = Some(std::sync::Arc::new(pool));
    }
    if n == 0 {
        *shared = None;
    }
    THREADS.store(n, Ordering::Release);
    Ok(())
}

/// `(a(), b())`, run in parallel where a thread is free (rayon's `join`).
pub fn join<RA: Send, RB: Send>(
    a: impl FnOnce() -> RA + Send, b: impl FnOnce() -> RB + Send,
) -> (RA, RB) {
    let (mut a, mut b) = (Some(a), Some(b));
    let (mut ra, mut rb) = (None, None);
    join_dyn(&mut || ra = a.take().map(|f| f()), &mut || {
        rb = b.take().map(|f| f())
    });
    match (ra, rb) {
        (Some(x), Some(y)) => (x, y),
        // both closures ran (a panic in either propagates out of join_dyn)
        _ => unreachable!("join ran both halves"),
    }
}

fn join_dyn(a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
    if LEADING.get() {
        // a task of a loop this thread leads: one after the other
        a();
        b();
        return;
    }
    on_free_pool(|| rayon::join(a, b));
}

thread_local! {
    /// The calling thread's own pool ([`on_free_pool`]): made on its first use, again
    /// when the thread count it should have changes; `None` when it could not be made
    /// (then the loop runs on the global pool, queueing behind the other caller).
    static OWN_POOL: std::cell::RefCell<Option<rayon::ThreadPool>> =
        const { std::cell::RefCell::new(None) };
}

/// Whether a parallel loop from outside any pool is running on rayon's global pool.
static GLOBAL_BUSY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Runs the parallel loop `f` from outside any pool so that loops from different
/// threads (Python threads with the GIL released, a server's threads) run side by side
/// instead of queueing on one shared pool: on rayon's global pool (or [`set_threads`]'
/// shared pool) when it is free (a single caller runs exactly as before), else on a
/// pool of the calling thread's own, made on its first such loop with as many threads
/// as [`threads`] says (a user's `build_global`, else `RAYON_NUM_THREADS`, else the
/// cores; or [`set_threads`]' count), as each thread's OpenMP team does in numpy's and
/// torch's kernels; the pool lives as long as the thread. Every parallel loop of the
/// engine takes one of these pools ([`for_each_dyn`] with the caller taking part); a
/// call that runs none never leaves its thread. Inside a pool already (a task, or a
/// caller's `ThreadPool::install`), or in a task of a loop this thread leads, `f` runs
/// where it is.
///
/// (A pool of its own for every caller, the single one too, measured 45 against 26 ms
/// for a 4096² softmax beside torch in one process, in one A/B on a noisy machine that
/// did not settle it: so a single caller keeps the global pool, as before.)
pub fn on_free_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    // inside a pool, or in a task of a loop this thread leads (whose pool is taken):
    // where it is
    if rayon::current_thread_index().is_some() || LEADING.get() {
        return f();
    }
    outside_pool(|pool| match pool {
        Some(p) => p.install(f),
        None => rayon::scope(|_| f()),
    })
}

/// Calls `g` with the pool a loop from outside any pool runs on: rayon's global pool
/// (`None`) or [`set_threads`]' shared one when free (held busy until `g` returns), else
/// the calling thread's own pool, made on its first use with [`threads`]' count (`None`
/// too, the global pool, when it could not be made).
fn outside_pool<R>(g: impl FnOnce(Option<&rayon::ThreadPool>) -> R) -> R {
    use std::sync::atomic::Ordering;
    let n = THREADS.load(Ordering::Acquire);
    if GLOBAL_BUSY
        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        let _free = FreeGlobal;
        let shared = (n > 0)
            .then(|| SHARED.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .flatten();
        return g(shared.as_deref());
    }
    let want = if n > 0 {
        n
    } else {
        rayon::current_num_threads()
    };
    OWN_POOL.with(|cell| {
        let mut pool = cell.borrow_mut();
        if pool.as_ref().map(|p| p.current_num_threads()) != Some(want) {
            *pool = rayon::ThreadPoolBuilder::new()
                .num_threads(want)
                .thread_name(|i| format!("masked-{i}"))
                .build()
                .ok();
        }
        g(pool.as_ref())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_threads_sizes_the_pools_of_later_loops() {
        // each task's count: a helper's pool's, or on the leading caller `threads()`
        let count = || map(2, |_| threads());
        let other = || std::thread::spawn(count).join().unwrap();
        set_threads(3).unwrap();
        assert_eq!((threads(), count(), other()), (3, vec![3, 3], vec![3, 3]));
        set_threads(1).unwrap();
        assert_eq!((threads(), count(), other()), (1, vec![1, 1], vec![1, 1]));
        // the same thread's own pool made again at the new count: two callers at once
        let (ta, ra) = std::sync::mpsc::channel();
        let (tb, rb) = std::sync::mpsc::channel();
        let meet = |tx: std::sync::mpsc::Sender<()>, rx: std::sync::mpsc::Receiver<()>| {
            on_free_pool(move || {
                tx.send(()).unwrap();
                let met = rx.recv_timeout(std::time::Duration::from_secs(30)).is_ok();
                (met, rayon::current_num_threads())
            })
        };
        let a = std::thread::spawn(move || meet(ta, rb));
        let b = std::thread::spawn(move || meet(tb, ra));
        assert_eq!(
            (a.join().unwrap(), b.join().unwrap()),
            ((true, 1), (true, 1))
        );
        // with one thread a loop from outside any pool runs on its caller alone, its
        // nested loops and joins too
        let me = std::thread::current().id();
        let on_caller = map(8, |_| {
            let inner = map(3, |_| std::thread::current().id() == me);
            let (a, b) = join(
                || std::thread::current().id() == me,
                || std::thread::current().id() == me,
            );
            std::thread::current().id() == me && a && b && inner.iter().all(|&x| x)
        });
        assert_eq!(on_caller, [true; 8]);
        // with two, the caller and a helper on the pool both run tasks: each task
        // waits (30 s at most, all of them) until one task has run on each side
        set_threads(2).unwrap();
        let (mine, theirs, gave_up) = (
            std::sync::atomic::AtomicBool::new(false),
            std::sync::atomic::AtomicBool::new(false),
            std::sync::atomic::AtomicBool::new(false),
        );
        let met = map(16, |_| {
            use std::sync::atomic::Ordering::SeqCst;
            let here = std::thread::current().id() == me;
            assert!(
                here || rayon::current_thread_index().is_some(),
                "a task off the pools"
            );
            if here { &mine } else { &theirs }.store(true, SeqCst);
            let t0 = std::time::Instant::now();
            while !(mine.load(SeqCst) && theirs.load(SeqCst)) {
                if gave_up.load(SeqCst) || t0.elapsed() > std::time::Duration::from_secs(30) {
                    gave_up.store(true, SeqCst);
                    return false;
                }
                std::thread::yield_now();
            }
            true
        });
        assert!(met.iter().all(|&m| m));
        set_threads(0).unwrap();
        let all = rayon::current_num_threads();
        assert_eq!((threads(), count()), (all, vec![all, all]));
    }

    /// A stand-in OpenMP runtime: a team of `FAKE_TEAM` threads, the caller and scoped
    /// threads, each running `body` once.
    const FAKE_TEAM: usize = 3;
    unsafe extern "C" fn fake_parallel(
        body: unsafe extern "C" fn(*mut std::ffi::c_void), data: *mut std::ffi::c_void,
        threads: std::ffi::c_uint, _flags: std::ffi::c_uint,
    ) {
        let n = if threads == 0 {
            FAKE_TEAM
        } else {
            threads as usize
        };
        let data = data as usize;
        // SAFETY (both calls): the runtime's contract, `data` alive until we return
        std::thread::scope(|s| {
            for _ in 1..n {
                s.spawn(move || unsafe { body(data as *mut std::ffi::c_void) });
            }
            unsafe { body(data as *mut std::ffi::c_void) };
        });
    }
    unsafe extern "C" fn fake_max_threads() -> std::ffi::c_int {
        FAKE_TEAM as std::ffi::c_int
    }
    /// Whether [`lone_parallel`] was called: a team of one opens no region.
    static LONE_CALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    unsafe extern "C" fn lone_parallel(
        body: unsafe extern "C" fn(*mut std::ffi::c_void), data: *mut std::ffi::c_void,
        _threads: std::ffi::c_uint, _flags: std::ffi::c_uint,
    ) {
        LONE_CALLED.store(true, std::sync::atomic::Ordering::SeqCst);
        // SAFETY: the runtime's contract
        unsafe { body(data) };
    }
    unsafe extern "C" fn lone_max_threads() -> std::ffi::c_int {
        1
    }

    #[test]
    fn loops_in_a_team_run_on_its_threads() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        // SAFETY: the stand-in keeps the two entry points' contracts
        let team = unsafe { OpenMpTeam::new(fake_parallel, fake_max_threads) };
        let me = std::thread::current().id();
        let ids = std::sync::Mutex::new(Vec::new());
        let started = AtomicUsize::new(0);
        let gave_up = std::sync::atomic::AtomicBool::new(false);
        let (n, hits) = with_team(Some(team), || {
            let hits: Vec<AtomicUsize> = (0..12).map(|_| AtomicUsize::new(0)).collect();
            for_each(12, |i| {
                hits[i].fetch_add(1, SeqCst);
                let t = std::thread::current().id();
                assert!(rayon::current_thread_index().is_none(), "a task on a pool");
                // nested loops run on the task's thread
                assert!(map(3, |_| std::thread::current().id() == t)
                    .iter()
                    .all(|&x| x));
                let mut seen = ids.lock().unwrap();
                if !seen.contains(&t) {
                    seen.push(t);
                    started.fetch_add(1, SeqCst);
                }
                drop(seen);
                // each task waits (30 s at most, all of them) until every thread of
                // the team has run one: all three take part
                let t0 = std::time::Instant::now();
                while started.load(SeqCst) < FAKE_TEAM && !gave_up.load(SeqCst) {
                    if t0.elapsed() > std::time::Duration::from_secs(30) {
                        gave_up.store(true, SeqCst);
                    }
                    std::thread::yield_now();
                }
            });
            (threads(), hits)
        });
        assert_eq!(n, FAKE_TEAM);
        assert!(hits.iter().all(|h| h.load(SeqCst) == 1));
        let ids = ids.into_inner().unwrap();
        assert_eq!(ids.len(), FAKE_TEAM);
        assert!(ids.contains(&me));
        // a panic in a task surfaces on the caller, and the team is left as it was
        let caught = std::panic::catch_unwind(|| {
            with_team(Some(team), || {
                for_each(8, |i| assert!(i != 5, "task five fails"));
            })
        });
        let payload = caught.unwrap_err();
        let text = (payload.downcast_ref::<String>().map(String::as_str))
            .or_else(|| payload.downcast_ref::<&str>().copied());
        assert_eq!(text, Some("task five fails"));
        assert!(TEAM.get().is_none());
        // a team of one: every task on the caller, no region opened
        // SAFETY: the stand-in keeps the two entry points' contracts
        let lone = unsafe { OpenMpTeam::new(lone_parallel, lone_max_threads) };
        let here = with_team(Some(lone), || {
            map(5, |_| {
                std::thread::current().id() == me
                    && map(2, |_| std::thread::current().id() == me) == [true; 2]
            })
        });
        assert_eq!(here, [true; 5]);
        assert!(!LONE_CALLED.load(SeqCst));
        assert_ne!(
            with_team(None, || map(4, |_| rayon::current_thread_index().is_some()
                || std::thread::current().id() == me)),
            [false; 4]
        );
    }

    #[test]
    fn calls_from_two_threads_run_side_by_side() {
        // each call waits inside its pool for the other's to start: both must be
        // running at once, one on the global pool and one on its thread's own (on one
        // shared single-thread pool they would queue and time out), whatever the count
        let (ta, ra) = std::sync::mpsc::channel();
        let (tb, rb) = std::sync::mpsc::channel();
        let meet = |tx: std::sync::mpsc::Sender<()>, rx: std::sync::mpsc::Receiver<()>| {
            on_free_pool(move || {
                assert!(rayon::current_thread_index().is_some(), "not on a pool");
                tx.send(()).unwrap();
                rx.recv_timeout(std::time::Duration::from_secs(30)).is_ok()
            })
        };
        let a = std::thread::spawn(move || meet(ta, rb));
        let b = std::thread::spawn(move || meet(tb, ra));
        assert!(a.join().unwrap() && b.join().unwrap());
        // nested: inside a pool the work runs where it is
        assert_eq!(on_free_pool(|| on_free_pool(|| map(3, |i| i))), [0, 1, 2]);
        // every parallel loop runs its tasks on a pool (the global one or the caller's
        // own) or on the caller leading it; a join runs on a pool
        let me = std::thread::current().id();
        for_each(4, |_| {
            let here = std::thread::current().id() == me;
            assert!(here || rayon::current_thread_index().is_some());
        });
        join(
            || assert!(rayon::current_thread_index().is_some()),
            || assert!(rayon::current_thread_index().is_some()),
        );
    }

    #[test]
    fn large_concats_and_copies_keep_every_element_in_order() {
        // parts of uneven lengths (empty ones too) above the parallel threshold, with
        // owned elements: each moved once (a double drop or a leak would show in Miri,
        // a misplaced part here)
        let parts: Vec<Vec<String>> = (0..40)
            .map(|p| (0..(p * 97) % 1500).map(|i| format!("{p}:{i}")).collect())
            .collect();
        let want: Vec<String> = parts.iter().flatten().cloned().collect();
        assert!(want.len() >= 1 << 14);
        assert_eq!(concat(parts), want);
        assert_eq!(concat(vec![vec![1, 2], vec![], vec![3]]), [1, 2, 3]);
        assert_eq!(concat(vec![vec![7u8; 3]]), [7, 7, 7]);
        assert!(concat::<u8>(vec![]).is_empty());
        let xs: Vec<u64> = (0..(5 << 17) + 3).map(|i| i * 2654435761).collect();
        assert_eq!(copy_vec(&xs), xs);
        assert_eq!(copy_vec(&xs[..10]), &xs[..10]);
    }

    #[test]
    fn parts_mut_splits_at_the_bounds() {
        let mut a = vec![0usize; 6];
        let lens = parts_mut(&mut a, &[0, 1, 1, 6], |c, x| {
            x.fill(c + 1);
            x.len()
        });
        assert_eq!(lens, [1, 0, 5]);
        assert_eq!(a, [1, 3, 3, 3, 3, 3]);
        // two slices (the second longer) split at the same bounds
        let (mut a, mut b) = (vec![0usize; 6], vec![0u8; 8]);
        let lens = parts_mut2(&mut a, &mut b, &[0, 1, 1, 6], |c, x, y| {
            x.fill(c + 1);
            y.fill(c as u8 + 10);
            (x.len(), y.len())
        });
        assert_eq!(lens, [(1, 1), (0, 0), (5, 5)]);
        assert_eq!(
            (&a[..], &b[..]),
            (&[1, 3, 3, 3, 3, 3][..], &[10, 12, 12, 12, 12, 12, 0, 0][..])
        );
        let caught = std::panic::catch_unwind(|| {
            parts_mut2(&mut [0u8; 2], &mut [0u8; 4], &[0, 3], |_, _, _| ())
        });
        assert!(caught.is_err(), "a bound past the shorter slice");
    }

    #[test]
    fn helpers_cover_every_index_once_in_order() {
        for n in [0usize, 1, 2, 7, 1000] {
            assert_eq!(map(n, |i| i * 3), (0..n).map(|i| i * 3).collect::<Vec<_>>());
            let hits: Vec<std::sync::atomic::AtomicUsize> =
                (0..n).map(|_| Default::default()).collect();
            for_each(n, |i| {
                hits[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            });
            assert!(hits
                .iter()
                .all(|h| h.load(std::sync::atomic::Ordering::Relaxed) == 1));
            let evens = flat_map_ranges(n, 64, |r, out| out.extend(r.filter(|i| i % 2 == 0)));
            assert_eq!(evens, (0..n).filter(|i| i % 2 == 0).collect::<Vec<_>>());
            let mut xs = vec![usize::MAX; n];
            let mut ys = vec![0u8; n.div_ceil(3)];
            chunks_mut2(&mut xs, 9, &mut ys, 3, |c, x, y| {
                x.iter_mut().enumerate().for_each(|(k, v)| *v = c * 9 + k);
                y.fill(c as u8);
            });
            assert_eq!(xs, (0..n).collect::<Vec<_>>());
            let mut zs = vec![0usize; n];
            chunks_mut(&mut zs, 0, |c, z| z[0] = c);
            assert_eq!(zs, (0..n).collect::<Vec<_>>());
        }
        assert_eq!(join(|| 1, || "b"), (1, "b"));
        assert_eq!(gather(&[10, 20, 30], &[2, 0, 2]), [30, 10, 30]);
        assert_eq!(sum_chunks(10, 3, |r| r.map(|i| i as f64).sum()), 45.0);
        let strings: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        assert_eq!(
            map_vec(strings, |s| s.len()),
            (0..100)
                .map(|i: usize| i.to_string().len())
                .collect::<Vec<_>>()
        );
    }
}
