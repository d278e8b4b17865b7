//! [`Scripts`]: what every worker's scripts share, the configuration (checked, every
//! script compiled once at start and at each reload), the shared dictionaries and the
//! watchdog thread. Each worker's [`crate::Engine`] loads the scripts from it.

use std::path::Path;
use std::sync::Arc;

use mlua::{Function, Lua};

use crate::config::{ScriptConfig, SharedDictConfig};
use crate::guard::Watchdog;
use crate::shared::SharedDicts;
use crate::Error;

/// What every worker shares.
pub struct Scripts {
    pub(crate) configs: Vec<ScriptConfig>,
    /// A digest of the source each mount's file held when it was compiled here, by
    /// mount index: what tells a reload that a script changed when its configuration
    /// did not.
    digests: Vec<u64>,
    dict_configs: Vec<SharedDictConfig>,
    pub(crate) dicts: Arc<SharedDicts>,
    pub(crate) watchdog: Arc<Watchdog>,
}

impl Scripts {
    /// Checks the configuration and that every script compiles (so a typo stops the
    /// server at start, not at the first request).
    pub fn new(
        configs: Vec<ScriptConfig>,
        dicts: &[SharedDictConfig],
    ) -> Result<Arc<Scripts>, Error> {
        Scripts::replacing(configs, dicts, None)
    }

    /// As [`Scripts::new`], for a reload: the shared dictionaries of `previous`, with
    /// what they hold, are kept when their configuration did not change (else they
    /// start empty), and so is its watchdog thread. Every worker's scripts are loaded
    /// anew from their files.
    pub fn replacing(
        configs: Vec<ScriptConfig>,
        dicts: &[SharedDictConfig],
        previous: Option<&Scripts>,
    ) -> Result<Arc<Scripts>, Error> {
        for (i, c) in configs.iter().enumerate() {
            if !c.prefix.starts_with('/') {
                return Err(Error::Config(format!(
                    "script prefix `{}` must start with /",
                    c.prefix
                )));
            }
            // Mounts the rules choose (`rule`) may share a prefix: their matchers tell
            // them apart.
            let by_prefix = |o: &ScriptConfig| o.rule.is_none() && o.site == c.site;
            if by_prefix(c)
                && configs[..i]
                    .iter()
                    .any(|o| by_prefix(o) && o.prefix == c.prefix)
            {
                return Err(Error::Config(format!(
                    "two scripts are mounted at `{}`",
                    c.prefix
                )));
            }
            if !(c.time_limit.is_finite() && c.time_limit > 0.0) {
                return Err(Error::Config(format!(
                    "script `{}`: time_limit must be > 0",
                    c.prefix
                )));
            }
            if let Some(bad) = c.vars.iter().find(|v| !crate::vars::declarable(v)) {
                return Err(Error::Config(format!(
                    "script `{}`: `vars` entry `{bad}` must be a name of letters, digits and `_`, not starting with a digit, that is not one of tessera's variables (`host`, `arg_...`)",
                    c.prefix
                )));
            }
            if c.memory_limit < 1 << 20 {
                return Err(Error::Config(format!(
                    "script `{}`: memory_limit must be at least 1 MiB",
                    c.prefix
                )));
            }
        }
        let mut mounts = Vec::with_capacity(configs.len());
        for c in configs {
            let source = read(&c.path)?;
            load(&Lua::new(), &c.path, &source)?;
            mounts.push((c, digest(&source)));
        }
        for (i, d) in dicts.iter().enumerate() {
            let ident = !d.name.is_empty()
                && !d.name.starts_with(|c: char| c.is_ascii_digit())
                && d.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ident {
                return Err(Error::Config(format!(
                    "shared_dict name `{}` must be a Lua identifier",
                    d.name
                )));
            }
            if dicts[..i].iter().any(|o| o.name == d.name) {
                return Err(Error::Config(format!(
                    "shared_dict `{}` is defined twice",
                    d.name
                )));
            }
            if d.max_entries == 0 {
                return Err(Error::Config(format!(
                    "shared_dict `{}`: max_entries must be > 0",
                    d.name
                )));
            }
        }
        // Longest prefix first, so a mount's index is the same in every worker's engine
        // and in the routes the server is given (`Module::routes`).
        mounts.sort_by_key(|(c, _)| std::cmp::Reverse(c.prefix.len()));
        let (configs, digests) = mounts.into_iter().unzip();
        let (dicts_kept, watchdog) = match previous {
            Some(p) if p.dict_configs == dicts => (Some(p.dicts.clone()), p.watchdog.clone()),
            Some(p) => (None, p.watchdog.clone()),
            None => (None, Watchdog::start()),
        };
        Ok(Arc::new(Scripts {
            configs,
            digests,
            dict_configs: dicts.to_vec(),
            dicts: dicts_kept.unwrap_or_else(|| Arc::new(SharedDicts::new(dicts))),
            watchdog,
        }))
    }

    pub fn is_empty(&self) -> bool {
        self.configs.is_empty()
    }

    /// Each mount's configuration and a digest of the source compiled for it at load (equal
    /// digests: the same source, within this process).
    pub fn mounts(&self) -> impl Iterator<Item = (&ScriptConfig, u64)> {
        self.configs.iter().zip(self.digests.iter().copied())
    }

    /// The mounts' prefixes and sites, by mount index.
    pub fn prefixes(&self) -> impl Iterator<Item = (&str, usize, Option<usize>)> {
        self.configs
            .iter()
            .map(|c| (c.prefix.as_str(), c.site, c.rule))
    }
}

pub(crate) fn compile(lua: &Lua, path: &Path) -> Result<Function, Error> {
    load(lua, path, &read(path)?)
}

pub(crate) fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|cause| Error::Read {
        path: path.to_owned(),
        cause,
    })
}

/// SipHash with fixed keys: the same source gives the same digest in this process.
fn digest(source: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    source.hash(&mut hasher);
    hasher.finish()
}

pub(crate) fn load(lua: &Lua, path: &Path, source: &[u8]) -> Result<Function, Error> {
    lua.load(source)
        .set_name(format!("@{}", path.display()))
        .into_function()
        .map_err(|e| Error::Load {
            path: path.to_owned(),
            message: e.to_string(),
        })
}
