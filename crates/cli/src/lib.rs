//! The file formats of the `masked` command as a library: the `.npy`, Matrix Market and
//! COO `.npz` readers and writers, the memory ceiling they check sizes against, and the
//! CLI's error type. The `masked` binary is built on it; the fuzz targets (`fuzz/`) and
//! the corpus-replay tests call the same readers on bytes.
//!
//! It also holds what `masked sweep` and `masked bench` share that is not the by-name
//! dispatch itself: the timing loop ([`timing`]), the counting allocator ([`alloc`]) and
//! the sweep's plan, data, records, report and plots ([`sweep`]). The binary runs the
//! ops; keeping the rest here lets its tests compile without the binary (whose by-name
//! dispatch over every op, layout and dtype is most of the build).
//!
//! Every reader takes the bytes (or a reader) and a path that only names the input in
//! messages, so a reader is exercised without a file system: `parse_values`,
//! `parse_mask` ([`npy`]), `parse_mtx`, `parse_npz` ([`sparse_io`]).

pub mod alloc;
pub mod error;
pub mod limits;
pub mod npy;
pub mod sparse_io;
pub mod sweep;
pub mod timing;

/// The lower-case extension of a path (`""` when it has none).
pub fn extension(p: &std::path::Path) -> String {
    p.extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
}
