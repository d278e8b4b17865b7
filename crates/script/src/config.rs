//! The scripting part of tessera's TOML file: `[[script]]` mounts and `[[shared_dict]]`
//! dictionaries. Every key has a default; unknown keys are an error so a typo is caught.

use std::path::PathBuf;

use serde::Deserialize;

/// One `[[script]]`: a Lua module mounted at a path prefix.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScriptConfig {
    /// Path prefix the script handles (whole segments, like `[[route]]`). Default `"/"`.
    pub prefix: String,
    /// The Lua file: a module returning a table of phase functions. Required.
    pub path: PathBuf,
    /// Seconds one call into this script may run before it is stopped (500). Default 1:
    /// a handler that computes for a second holds up every connection of its worker.
    pub time_limit: f64,
    /// Bytes of Lua memory this script may add to its worker's Lua state; the state's
    /// limit is the sum over scripts. Default 64 MiB.
    pub memory_limit: usize,
    /// Lua module search templates (`lua/?.lua;lua/?/init.lua`), as nginx's
    /// `lua_package_path`: put before the default `package.path` of the worker's Lua
    /// state, for `require`. The state is one for every mount of a worker, so every
    /// mount's `package_path` goes in, in mount order. Default none.
    pub package_path: Option<String>,
    /// The site it is mounted on: 0 for top-level `[[script]]`s, `i + 1` for the
    /// `[[host.script]]`s of `[[host]]` number `i` (set by `cli`; no TOML key).
    #[serde(skip)]
    pub site: usize,
    /// Its place among its site's rules when they choose it by more than its prefix
    /// (`regex`, `methods`, `header`, ...: docs/config.md; set by `cli`, no TOML key).
    #[serde(skip)]
    pub rule: Option<usize>,
    /// The variables its phases may write (`r.var.NAME = v`), nginx's `set $NAME "";`:
    /// empty until written; read back with `r:var`, written to the access log with
    /// `%{var_NAME}x`. Default none.
    pub vars: Vec<String>,
    /// Its `regex` (and whether it ignores case), when the rules choose it by one: its
    /// captures are variables (`r:var("1")`, `r:var("id")`; set by `cli`, no TOML key
    /// of its own).
    #[serde(skip)]
    pub regex: Option<(String, bool)>,
}

impl Default for ScriptConfig {
    fn default() -> Self {
        ScriptConfig {
            prefix: "/".into(),
            path: PathBuf::new(),
            time_limit: 1.0,
            memory_limit: 64 << 20,
            package_path: None,
            site: 0,
            rule: None,
            vars: Vec::new(),
            regex: None,
        }
    }
}

impl ScriptConfig {
    /// Parses the command-line form `PREFIX=FILE` (`/api=handlers/api.lua`).
    pub fn from_mount(spec: &str) -> Option<ScriptConfig> {
        let (prefix, path) = spec.split_once('=')?;
        if !prefix.starts_with('/') || path.is_empty() {
            return None;
        }
        Some(ScriptConfig {
            prefix: prefix.into(),
            path: path.into(),
            ..ScriptConfig::default()
        })
    }
}

/// One `[[shared_dict]]`: a key-value dictionary every worker sees (`shared.NAME`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SharedDictConfig {
    /// The name scripts use: `shared.NAME` (a Lua identifier). Required.
    pub name: String,
    /// Most keys it holds. Default 10000; a `set` of a new key into a full dictionary
    /// first drops expired keys, then fails (returns false, "full").
    pub max_entries: usize,
}

impl Default for SharedDictConfig {
    fn default() -> Self {
        SharedDictConfig {
            name: String::new(),
            max_entries: 10_000,
        }
    }
}
