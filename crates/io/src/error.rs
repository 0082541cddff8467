//! The readers' and writers' error: one line naming the file and the problem.

use std::path::Path;
use thiserror::Error;

/// Anything wrong with a file, or a size over the memory ceiling.
#[derive(Debug, Error)]
pub enum IoError {
    /// A problem with a file, named.
    #[error("{path}: {what}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        what: String,
    },
    /// Work above the memory ceiling, refused before allocating.
    #[error("{what} needs {size}, over the memory limit of {limit} (raise it with --max-memory or MASKED_MAX_MEMORY)")]
    TooLarge {
        /// What would be allocated.
        what: String,
        /// Its size.
        size: String,
        /// The ceiling.
        limit: String,
    },
    /// A ceiling that does not parse as a byte count.
    #[error("{0}")]
    Setting(String),
    /// An error of the engine (a mask of the wrong shape...).
    #[error(transparent)]
    Engine(#[from] masked_core::MaskedError),
}

impl IoError {
    /// A file error.
    pub fn file(path: &Path, what: String) -> Self {
        IoError::File {
            path: path.display().to_string(),
            what,
        }
    }
}
