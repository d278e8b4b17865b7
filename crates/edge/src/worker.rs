//! One worker's proxy state, which its parts share: configuration, upstreams and their
//! routes, the fragment fetches in flight, and the process's cache. The proxy (`proxy`),
//! the fragment fetcher (`assembly::fetch`) and the page assembler (`assembly::page`) all
//! read it; it depends on none of them.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use tokio::sync::watch;

use crate::cache::{Cache, Entry};
use crate::config::{EdgeConfig, EsiMode};
use crate::upstream::client::Upstream;

pub(crate) struct Worker {
    pub(crate) config: EdgeConfig,
    pub(crate) upstreams: HashMap<String, Rc<Upstream>>,
    /// Per site (see `EdgeConfig::hosts`), its routes.
    pub(crate) routes: Vec<handler::Router<RouteTo>>,
    /// Fragment fetches in flight, by key (see `assembly::fetch::fetch_key`).
    pub(crate) inflight: RefCell<HashMap<String, watch::Receiver<Option<FetchResult>>>>,
    pub(crate) fetches: Cell<u64>,
    /// The process's cache, shared with every other worker's `Edge`.
    pub(crate) cache: Arc<Cache>,
    /// See `Edge::build`.
    pub(crate) lean: bool,
    /// Per route (in `config.route`'s order), its `[route.cache]` rules compiled.
    pub(crate) policies: Vec<Option<Rc<crate::cache::policy::RoutePolicy>>>,
}

pub(crate) enum RouteTo {
    Upstream(Rc<Upstream>, EsiMode),
    Static(std::path::PathBuf),
}

pub(crate) enum Target<'a> {
    Upstream(&'a Rc<Upstream>, EsiMode),
    Static(&'a Path),
}

/// A fetched fragment, shared by every include that asked for it (and kept in the
/// cache when its response allows).
pub(crate) type Fetched = Entry;

pub(crate) type FetchResult = Result<Arc<Fetched>, FetchFailed>;

/// Why a fragment could not be had (logged; the include's failure policy applies).
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum FetchFailed {
    #[error(transparent)]
    Upstream(crate::UpstreamError),
    #[error("fragment answered {0}")]
    Status(u16),
    #[error("static fragment {0}")]
    Static(String),
    /// The fragment came compressed although identity was asked for.
    #[error("fragment came with Content-Encoding: {0} (identity was asked for)")]
    Encoded(String),
    /// The shared fetch went away without a result.
    #[error("fragment fetch abandoned")]
    Abandoned,
    /// Another request's fetch of it failed just now.
    #[error("fragment fetch failed for the request it was shared with")]
    Coalesced,
}

impl Worker {
    /// The route of a request path (no query), matched on its normalised form
    /// ([`wire::normalize_path`], as the server matches files and script mounts), so
    /// `//app/x`, `/%61pp/x` and `/y/../app/x` all take `/app`'s route. `None` when the
    /// path normalises to nothing (`..` above the root, bad escapes) or has no route.
    pub(crate) fn route(&self, path: &str) -> Option<Target<'_>> {
        self.route_on(0, path)
    }

    /// [`Worker::route`] on the site `authority` names (a page's own includes).
    pub(crate) fn route_for(&self, authority: &str, path: &str) -> Option<Target<'_>> {
        self.route_on(self.config.hosts.site(authority.as_bytes()), path)
    }

    fn route_on(&self, site: usize, path: &str) -> Option<Target<'_>> {
        let mut normal = Vec::with_capacity(path.len() + 1);
        wire::normalize_path(path.as_bytes(), &mut normal).ok()?;
        self.route_normalised(site, &normal)
    }

    /// The route of a path already normalised, on `site`.
    pub(crate) fn route_normalised(&self, site: usize, path: &[u8]) -> Option<Target<'_>> {
        self.routes.get(site)?.find(path).map(|to| match to {
            RouteTo::Upstream(u, mode) => Target::Upstream(u, *mode),
            RouteTo::Static(root) => Target::Static(root),
        })
    }
}
