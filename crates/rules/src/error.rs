//! What goes wrong compiling rules, said with the key it is about.

/// A configuration the rules cannot compile, said so that the user finds it: the key it
/// is about (`route[2].redirect.to`), then what is wrong.
#[derive(Debug)]
pub struct Error {
    key: String,
    message: String,
}

impl Error {
    pub fn new(message: impl Into<String>) -> Error {
        Error {
            key: String::new(),
            message: message.into(),
        }
    }

    /// The same error, about `sub`, a key inside the one it will be said to be under
    /// (the line finder of `check-config` knows one level of keys: `route[2].redirect`).
    pub fn about(mut self, sub: &str) -> Error {
        self.message = format!("`{sub}`: {}", self.message);
        self
    }

    /// What is wrong, without the key.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error, said to be under `key` (a route, a key of it; `""`: the top
    /// level, which changes nothing).
    pub fn at(mut self, key: &str) -> Error {
        self.key = match (self.key.is_empty(), key.is_empty()) {
            (_, true) => self.key,
            (true, false) => key.to_string(),
            (false, false) => format!("{key}.{}", self.key),
        };
        self
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.key.is_empty() {
            true => f.write_str(&self.message),
            false => write!(f, "`{}`: {}", self.key, self.message),
        }
    }
}

impl std::error::Error for Error {}
