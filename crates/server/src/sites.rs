//! The sites a server serves: the top-level configuration is site 0, each `[[host]]`
//! adds one (`handler::Hosts` says which a request's host names). Each site has its own
//! document root (opened once), index, listing and Cache-Control rules, and its own
//! open-file cache (a path means a different file in each root).

use std::os::fd::OwnedFd;

use crate::config::{CacheControlRule, Config};
use crate::error::Error;
use crate::files::open::FileCache;
use crate::sys;

pub(crate) struct Site {
    /// The document root, if any, opened once (`O_PATH`); every file is opened beneath
    /// it with `openat2(RESOLVE_BENEATH)`, so no path or symlink can leave it. Without
    /// one, every path is missing (a proxy-only site).
    pub root: Option<OwnedFd>,
    pub index: String,
    pub autoindex: bool,
    pub cache_control: Vec<CacheControlRule>,
    /// The server-wide file settings (`precompressed`, `file_cache_valid_ms`,
    /// `sendfile_min_size`), copied to each site.
    pub precompressed: bool,
    pub file_cache_valid_ms: u64,
    pub sendfile_min_size: u64,
    /// The open-file cache every worker reads and fills for this site.
    pub files: FileCache,
    /// On-the-fly compression of handlers' responses and of static files without
    /// siblings (`[compression]`); `None` when off.
    pub compression: Option<compress::Compression>,
    /// Bytes of static files' compressed forms held in `files`.
    pub compressed_bytes: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Site {
    /// A site for an `alias` route of this one: `root` in place of its root.
    fn alias(&self, root: OwnedFd, file_cache_entries: usize) -> Site {
        Site {
            root: Some(root),
            index: self.index.clone(),
            autoindex: self.autoindex,
            cache_control: self.cache_control.clone(),
            precompressed: self.precompressed,
            file_cache_valid_ms: self.file_cache_valid_ms,
            sendfile_min_size: self.sendfile_min_size,
            files: FileCache::new(file_cache_entries),
            compression: self.compression.clone(),
            compressed_bytes: Default::default(),
        }
    }
}

pub(crate) struct Sites {
    sites: Vec<Site>,
    /// The directories of `alias` routes, by (site, route): each a site of its own (its
    /// root, its open-file cache) with its parent site's settings.
    aliases: std::collections::HashMap<(usize, usize), Site>,
    pub hosts: handler::Hosts,
}

impl Sites {
    /// The sites of a validated configuration: the top-level one first, then one per
    /// `[[host]]`, each root opened with `open_root`.
    pub fn open<E>(
        config: &Config,
        mut open_root: impl FnMut(&std::path::Path) -> Result<OwnedFd, E>,
    ) -> Result<Sites, E> {
        let mut sites = vec![Site {
            root: config.root.as_deref().map(&mut open_root).transpose()?,
            index: config.index.clone(),
            autoindex: config.autoindex,
            cache_control: config.cache_control.clone(),
            precompressed: config.precompressed,
            file_cache_valid_ms: config.file_cache_valid_ms,
            sendfile_min_size: config.sendfile_min_size,
            files: FileCache::new(config.file_cache_entries),
            compression: None,
            compressed_bytes: Default::default(),
        }];
        for h in &config.host {
            sites.push(Site {
                root: h
                    .root
                    .as_deref()
                    .or(config.root.as_deref())
                    .map(&mut open_root)
                    .transpose()?,
                index: h.index.clone().unwrap_or_else(|| config.index.clone()),
                autoindex: h.autoindex.unwrap_or(config.autoindex),
                cache_control: h
                    .cache_control
                    .clone()
                    .unwrap_or_else(|| config.cache_control.clone()),
                precompressed: config.precompressed,
                file_cache_valid_ms: config.file_cache_valid_ms,
                sendfile_min_size: config.sendfile_min_size,
                files: FileCache::new(config.file_cache_entries),
                compression: None,
                compressed_bytes: Default::default(),
            });
        }
        for (site, compression) in sites.iter_mut().zip(config.compression()) {
            site.compression = compression;
        }
        let mut aliases = std::collections::HashMap::new();
        let mut routes_of = vec![0usize; sites.len()];
        for (site, rules, _) in &config.routes {
            let rule = routes_of[*site];
            routes_of[*site] += 1;
            if let Some(dir) = &rules.alias {
                let parent = &sites[*site];
                aliases.insert(
                    (*site, rule),
                    parent.alias(open_root(dir)?, config.file_cache_entries),
                );
            }
        }
        Ok(Sites {
            sites,
            aliases,
            hosts: config.hosts(),
        })
    }

    /// The files `site` serves a request from: its own, or those of its `alias` route
    /// `alias`.
    pub fn serving(&self, site: usize, alias: Option<usize>) -> &Site {
        alias
            .and_then(|rule| self.aliases.get(&(site, rule)))
            .unwrap_or(&self.sites[site])
    }

    /// Every site, the top-level one first.
    pub fn all(&self) -> &[Site] {
        &self.sites
    }
}

/// A site's document root, opened once (`O_PATH`); every file is opened beneath it.
pub(crate) fn open_root(path: &std::path::Path) -> Result<OwnedFd, Error> {
    sys::open_dir_path(path).map_err(|source| Error::Root {
        path: path.to_owned(),
        source,
    })
}
