//! A configuration generation: everything a reload (SIGHUP) replaces as a whole, the
//! configuration with the modules built from it, the sites and the routing tables.
//!
//! The running generation sits in an `ArcSwap` beside a counter. A worker compares the
//! counter with the number of the generation it holds before each request (one relaxed
//! load) and, when they differ, takes the new one and starts its services of the new
//! modules; a request keeps what it started with (its exchange holds its own handles),
//! so requests in flight finish on the old configuration while the next request on the
//! same keep-alive connection uses the new one. Nothing on the request path locks.

use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use crate::access_log::{self, WorkerLogs};
use crate::config::Config;
use crate::error::Error;
use crate::routes::{self, Routed};
use crate::sites::Sites;
use crate::sys;

pub(crate) struct Generation {
    /// 1 for the configuration the server started with, one more at each reload.
    pub number: u64,
    pub config: Config,
    /// The modules (the proxy, Lua scripts): each worker starts its own service of each.
    pub modules: Vec<Arc<dyn handler::Module>>,
    /// Per site, every prefix a module answers or filters, with what each does there.
    pub routes: Vec<handler::Router<Routed>>,
    /// Per site and rule: the handler of a route its rules choose.
    pub by_rule: routes::ByRule,
    /// Per site: its rules (`[[route]]` matchers and actions, response edits).
    pub rules: Vec<Arc<rules::Table>>,
    /// Per site and rule: the route's `basic_auth` (its htpasswd file read) and `forward_auth`.
    pub auth: crate::auth::SiteAuth,
    /// `[tracing]`: how a request gets its trace context; `None`: it gets none.
    pub tracing: Option<trace::Sampler>,
    /// Per site: whether its requests get an id (its rules or the access log use it).
    pub request_ids: Vec<bool>,
    /// The request-limit zones and the lists of the routes and hosts that name them.
    pub limits: crate::limit::Limits,
    /// Whether any route or host names a zone (else a request skips the limits at once).
    pub limits_on: bool,
    /// Per site: whether its access log writes what a handler notes (upstream attempts,
    /// the cache's result), so that its requests carry a `handler::LogNotes`.
    pub log_notes: Vec<bool>,
    /// Per site: who its requests' client is behind proxies (`trusted_proxies`,
    /// `real_ip_from`); the top-level one also judges PROXY headers.
    pub identity: Vec<crate::client::Identity>,
    /// Whether any site reads a forwarding field (a request's client may then differ
    /// from its connection's).
    pub reads_fields: bool,
    /// The sites (the top-level one and one per `[[host]]`): roots, file caches, and
    /// the names that choose them.
    pub sites: Sites,
    /// Per module, its `kind` label's index in metrics.
    pub kinds: Vec<u8>,
    /// Per site, its host label in metrics (`metrics::HostLabels`).
    pub host_labels: Vec<u16>,
    /// Per worker, the access logs it switches to when it takes this generation, when
    /// they changed; `None`: it keeps those it has.
    pub logs: Vec<Mutex<Option<Option<WorkerLogs>>>>,
}

impl Generation {
    /// Checks `config`, opens its roots and builds the routing tables. `previous` is the
    /// generation it replaces (on a reload), whose limit zones carry over.
    pub fn new(
        number: u64,
        config: Config,
        modules: Vec<Arc<dyn handler::Module>>,
        workers: usize,
        (labels, kinds): (&crate::metrics::HostLabels, &crate::metrics::Kinds),
        previous: Option<&Generation>,
    ) -> Result<Generation, Error> {
        config.validate().map_err(Error::Config)?;
        let routes = routes::routes(&modules, config.host.len() + 1);
        let by_rule = routes::by_rule(&modules, config.host.len() + 1);
        let rules = config.rule_tables().map_err(Error::Config)?;
        let logged = config.log_format().is_ok_and(|f| f.uses_request_id());
        let request_ids = rules.iter().map(|t| t.request_id || logged).collect();
        let noted = config.log_format().is_ok_and(|f| f.uses_notes());
        let log_notes = std::iter::once(config.access_log.is_some())
            .chain(
                config
                    .host
                    .iter()
                    .map(|h| h.access_log.is_some() || config.access_log.is_some()),
            )
            .map(|logged| logged && noted)
            .collect();
        let identity = config.identity().map_err(Error::Config)?;
        let auth = crate::auth::load_all(&config).map_err(Error::Config)?;
        let limits = config
            .limit_zones(workers, previous.map(|p| &p.limits))
            .map_err(Error::Config)?;
        let reads_fields = identity.iter().any(|i| i.reads_fields());
        let sites = Sites::open(&config, crate::sites::open_root)?;
        if let Some(root) = sites.all().iter().find_map(|s| s.root.as_ref()) {
            use std::os::fd::AsRawFd;
            sys::probe_openat2(root.as_raw_fd()).map_err(Error::NoOpenat2)?;
        }
        let host_labels = labels.of(&config);
        let tracing = config.tracing.as_ref().map(|t| t.sampler());
        let endpoint = config.tracing.as_ref().map(|t| &t.otlp_endpoint);
        // Checked by `validate` above; the exporter's thread starts with the first
        // configuration that has `[tracing]`, and a reload changes where it sends.
        trace::export::configure(endpoint.and_then(|e| trace::export::Endpoint::parse(e).ok()))
            .map_err(Error::Thread)?;
        let kinds = modules
            .iter()
            .map(|m| kinds.index(m.kinds().answered))
            .collect();
        Ok(Generation {
            host_labels,
            kinds,
            number,
            config,
            modules,
            routes,
            by_rule,
            rules,
            request_ids,
            tracing,
            auth,
            log_notes,
            identity,
            limits_on: limits.any(),
            limits,
            reads_fields,
            sites,
            logs: (0..workers).map(|_| Mutex::new(None)).collect(),
        })
    }
}

/// Worker `worker`'s client of named upstreams, made only when an error page of the
/// generation names an upstream (`@upstream:NAME`) or a route has `forward_auth`: the
/// first module's that has one.
pub(crate) fn upstreams(gen: &Generation, worker: usize) -> Option<Rc<dyn handler::Upstreams>> {
    let forward =
        |a: &Option<Arc<crate::auth::RouteAuth>>| a.as_ref().is_some_and(|a| a.forward.is_some());
    if !gen.rules.iter().any(|t| t.upstream_pages()) && !gen.auth.iter().flatten().any(forward) {
        return None;
    }
    gen.modules.iter().find_map(|m| m.upstreams(worker))
}

/// What a worker runs: the generation it took and its services of that generation's
/// modules, in the order of `Generation::modules`.
pub(crate) struct Current {
    pub gen: Arc<Generation>,
    pub services: Vec<Rc<dyn handler::Service>>,
    /// This worker's client of named upstreams, when an error page names one.
    pub upstreams: Option<Rc<dyn handler::Upstreams>>,
}

/// Per worker its access logs (`None` when nothing is logged), and the writer threads.
pub(crate) type StartedLogs = (Vec<Option<WorkerLogs>>, Vec<std::thread::JoinHandle<()>>);

/// The access logs a configuration asks for: each distinct file once, which one each
/// site writes to (its `[[host]]` `access_log`, else the top-level one), and the format.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LogPlan {
    paths: Vec<PathBuf>,
    by_site: Vec<Option<usize>>,
    format: String,
    json_fields: Option<Vec<String>>,
}

impl LogPlan {
    pub fn of(config: &Config) -> LogPlan {
        let mut paths: Vec<PathBuf> = Vec::new();
        let by_site: Vec<Option<usize>> = std::iter::once(config.access_log.as_ref())
            .chain(
                config
                    .host
                    .iter()
                    .map(|h| h.access_log.as_ref().or(config.access_log.as_ref())),
            )
            .map(|path| {
                let path = path?;
                Some(paths.iter().position(|p| p == path).unwrap_or_else(|| {
                    paths.push(path.clone());
                    paths.len() - 1
                }))
            })
            .collect();
        LogPlan {
            // No log at all: nothing to compare (a host added changes nothing).
            by_site: if paths.is_empty() {
                Vec::new()
            } else {
                by_site
            },
            paths,
            format: config.access_log_format.clone(),
            json_fields: config.json_fields.clone(),
        }
    }

    /// Opens every file and starts its writer thread: per worker its logs (`None` when
    /// nothing is logged), and the writer threads.
    pub fn start(
        &self,
        workers: usize,
        shared: &Arc<access_log::Shared>,
    ) -> Result<StartedLogs, Error> {
        let config = Config {
            access_log_format: self.format.clone(),
            json_fields: self.json_fields.clone(),
            ..Config::default()
        };
        let format = config.log_format().map_err(Error::Config)?;
        let by_site: Arc<[Option<usize>]> = self.by_site.clone().into();
        let mut per_worker: Vec<Vec<access_log::WorkerLog>> =
            (0..workers).map(|_| Vec::new()).collect();
        let mut writers = Vec::new();
        for path in &self.paths {
            let (logs, writer) = access_log::start(path, &format, workers, shared.clone())
                .map_err(|source| Error::AccessLog {
                    path: path.clone(),
                    source,
                })?;
            for (w, log) in logs.into_iter().enumerate() {
                per_worker[w].push(log);
            }
            writers.push(writer);
        }
        let logs = per_worker
            .into_iter()
            .map(|logs| (!logs.is_empty()).then(|| WorkerLogs::new(logs, by_site.clone())))
            .collect();
        Ok((logs, writers))
    }
}
