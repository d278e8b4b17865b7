use std::path::PathBuf;

/// Why the scripts could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A `[[script]]` or `[[shared_dict]]` entry is wrong.
    #[error("invalid script configuration: {0}")]
    Config(String),
    /// A script file cannot be read. (The cause is in the message, not a `source`, so
    /// that printing the error's chain names it once.)
    #[error("cannot read script {path}: {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// A script does not compile or its module code fails.
    #[error("cannot load script {path}: {message}")]
    Load { path: PathBuf, message: String },
}
