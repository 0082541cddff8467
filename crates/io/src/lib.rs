//! The engine's files, read and written in one place: dense values and masks as `.npy`
//! ([`npy`]), sparse arrays as Matrix Market (2-D) and COO `.npz` (any rank)
//! ([`sparse`]), and the memory ceiling every declared size is checked against before
//! anything is allocated ([`limits`]). The `masked` command, its fuzz targets and the
//! corpus-replay tests call these readers; a Rust user reaches them as `masked::io`.
//!
//! Every reader takes the bytes (or a reader) and a path that only names the input in
//! messages, so a reader is exercised without a file system: [`npy::parse_values`],
//! [`npy::parse_mask`], [`sparse::parse_mtx`], [`sparse::parse_npz`]. Bad input is an
//! [`IoError`] naming the file and the problem, never a panic.
//!
//! ```
//! use masked::io::{npy, IoError};
//! use masked::DynVec;
//! use std::path::Path;
//!
//! let path = Path::new("x.npy");
//! let mut bytes = Vec::new();
//! npy::encode_dyn(&[2, 2], DynVec::F32(vec![1.0, 2.0, 3.0, 4.0]), &mut bytes)
//!     .map_err(|e| IoError::file(path, e))?;
//! let x = npy::parse_values(path, &bytes)?;
//! assert_eq!((x.shape, x.values), (vec![2, 2], DynVec::F32(vec![1.0, 2.0, 3.0, 4.0])));
//! # Ok::<(), IoError>(())
//! ```

pub mod error;
pub mod limits;
pub mod npy;
pub mod sparse;

pub use error::IoError;

/// The lower-case extension of a path (`""` when it has none).
pub fn extension(p: &std::path::Path) -> String {
    p.extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
}
