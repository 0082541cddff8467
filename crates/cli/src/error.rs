//! The CLI's error: one line naming the problem; exit status 2.

use std::path::Path;
use thiserror::Error;

/// Anything wrong with a command line or its files.
#[derive(Debug, Error)]
pub enum CliError {
    /// Bad usage: unknown op, bad option value, missing argument.
    #[error("{0}")]
    Usage(String),
    /// A file's problem, or a size over the memory ceiling (the readers' error).
    #[error(transparent)]
    Io(#[from] masked::io::IoError),
    /// An error of the engine (bad dim, mask shape...).
    #[error(transparent)]
    Engine(#[from] masked::MaskedError),
}

impl CliError {
    /// A file error.
    pub fn file(path: &Path, what: String) -> Self {
        CliError::Io(masked::io::IoError::file(path, what))
    }
}
