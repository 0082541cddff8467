//! The CLI's error: one line naming the problem; exit status 2.

use std::path::Path;
use thiserror::Error;

/// Anything wrong with a command line or its files.
#[derive(Debug, Error)]
pub enum CliError {
    /// Bad usage: unknown op, bad option value, missing argument.
    #[error("{0}")]
    Usage(String),
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
    /// An error of the engine (bad dim, mask shape...).
    #[error(transparent)]
    Engine(#[from] masked::MaskedError),
}

impl CliError {
    /// A file error.
    pub fn file(path: &Path, what: String) -> Self {
        CliError::File {
            path: path.display().to_string(),
            what,
        }
    }
}
