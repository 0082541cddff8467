//! What the `masked` command's subcommands share, as a library: the CLI's error type,
//! the timing loop ([`timing`]), the counting allocator ([`alloc`]) and the sweep's plan,
//! data, records, report and plots ([`sweep`]). The binary runs the ops; keeping the
//! rest here lets its tests compile without the binary (whose by-name dispatch over
//! every op, layout and dtype is most of the build). The file formats are the engine's
//! (`masked::io`).

pub mod alloc;
pub mod error;
pub mod sweep;
pub mod timing;
