//! The one error type of the crate: what went wrong, and for I/O, with which input.

use std::path::PathBuf;

/// An error from reading or analysing logs. Malformed log lines are never errors: they are
/// counted and skipped (see [`crate::Analysis::malformed`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An input could not be opened, mapped or read (including a corrupt gzip stream).
    #[error("reading {}", display_input(.input))]
    Io {
        /// The file, or `None` for standard input.
        input: Option<PathBuf>,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The `--pattern` of `logs top` is not a valid regular expression.
    #[error("invalid pattern")]
    Pattern(#[from] regex::Error),
    /// A log format string could not be understood.
    #[error("invalid log format {format:?}: {reason}")]
    Format {
        /// The format string as given.
        format: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `--format auto` found no known format matching the first line of the input.
    #[error("could not detect the log format from the first line; pass --format")]
    UnknownFormat,
}

fn display_input(input: &Option<PathBuf>) -> String {
    match input {
        Some(path) => path.display().to_string(),
        None => "<stdin>".to_string(),
    }
}

impl Error {
    pub(crate) fn io(input: Option<&std::path::Path>, source: std::io::Error) -> Self {
        Error::Io {
            input: input.map(|p| p.to_path_buf()),
            source,
        }
    }
}
