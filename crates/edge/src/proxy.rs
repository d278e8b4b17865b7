//! The proxy: routing, forwarding a request to its upstream, and answering with the
//! response passed through or assembled from fragments.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::Path;
use std::rc::{Rc, Weak};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use bytes::Bytes;
use handler::FieldList;
use http::header;
use http::{Method, StatusCode};

use crate::arena::Text;
use crate::assembly::fetch::{is_esi, normalise_authority};
use crate::body::{Body, BodyKind};
use crate::cache::freshness;
use crate::cache::lookup::{self, Flight, Memory};
use crate::cache::policy::RoutePolicy;
use crate::cache::variants::Variants;
use crate::cache::{Cache, Entry, FlightGuard, Landing, Memo};
use crate::clock::now_ms;
use crate::config::{EdgeConfig, EsiMode};
use crate::error::{ConfigError, ProxyError, UpstreamError};
use crate::exchange::{CacheStatus, ProxyRequest, ProxyResponse};
use crate::headers::{self, page_headers, Forwarded};
use crate::route_compression::RouteCompression;
use crate::tunnel::{self, Upgrade};
use crate::upstream::client::pass::PassBody;
use crate::upstream::client::{Fields, Head, Outgoing, Pooled, Upstream, UpstreamStats};
use crate::upstream::tls::UpstreamTls;
use crate::worker::{RouteTo, Target, Worker};

/// The ESI proxy of one worker. Create one per worker thread (it is `!Send`: its
/// connection pools, balancers and in-flight fetches are the worker's own; peer health is
/// the process's) and call
/// [`Edge::proxy`] from tasks on that worker's `LocalSet`. Cloning is cheap and shares
/// everything.
#[derive(Clone)]
pub struct Edge {
    pub(crate) worker: Rc<Worker>,
    /// Whose compression each route's responses take, and the worker's compressed parts.
    pub(crate) compression: Rc<RouteCompression>,
}

/// An [`Edge`] that does not keep it alive.
pub(crate) struct WeakEdge {
    worker: Weak<Worker>,
    compression: Weak<RouteCompression>,
}

impl WeakEdge {
    pub(crate) fn upgrade(&self) -> Option<Edge> {
        Some(Edge {
            worker: self.worker.upgrade()?,
            compression: self.compression.upgrade()?,
        })
    }
}

impl Edge {
    pub(crate) fn downgrade(&self) -> WeakEdge {
        WeakEdge {
            worker: Rc::downgrade(&self.worker),
            compression: Rc::downgrade(&self.compression),
        }
    }
}

/// Where a path goes, for the server to decide between proxying and its own static files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// Proxied to the upstream of this name.
    Upstream(&'a str),
    /// Served from this directory.
    Static(&'a Path),
}

impl<'a> Route<'a> {
    fn of(target: Target<'a>) -> Route<'a> {
        match target {
            Target::Upstream(u, _) => Route::Upstream(&u.name),
            Target::Static(root) => Route::Static(root),
        }
    }
}

impl Edge {
    /// Builds the proxy from a validated configuration, with a cache of its own (see
    /// [`Edge::with_cache`] to share one).
    pub fn new(config: EdgeConfig) -> Result<Edge, ConfigError> {
        config.validate()?;
        let cache = Cache::new(&config.cache)?;
        Edge::with_cache(config, cache)
    }

    /// Builds the proxy with the process's cache: build it once with [`Cache::new`] from
    /// `config.cache`, and give it to every worker's `Edge`.
    pub fn with_cache(config: EdgeConfig, cache: Arc<Cache>) -> Result<Edge, ConfigError> {
        let opened = opened_totals(&config);
        let figures = crate::metrics::UpstreamFigures::new(config.upstream.len()).for_worker(0);
        let sets = peer_sets(&config, &Default::default(), &tls_of(&config)?);
        Edge::build(config, cache, false, opened, figures, sets, 0)
    }

    /// `lean`: a cache hit's `headers` hold Age alone, its other fields being only in
    /// `head_h1` (for the server's module, which encodes those; see `module.rs`), so a
    /// hit does not copy every field into a list nobody reads.
    /// `opened`: per upstream (in `config.upstream`'s order), the connections every
    /// worker opened ([`opened_totals`]). `figures`: this worker's counters per upstream,
    /// in the same order. `sets`: the peers and their health per upstream, shared by
    /// every worker ([`peer_sets`]). `worker` seeds the balancers' random choices.
    pub(crate) fn build(
        config: EdgeConfig,
        cache: Arc<Cache>,
        lean: bool,
        opened: Arc<[Arc<AtomicU64>]>,
        figures: Arc<[crate::metrics::UpstreamCounts]>,
        sets: Arc<[Arc<crate::upstream::peers::PeerSet>]>,
        worker: usize,
    ) -> Result<Edge, ConfigError> {
        config.validate()?;
        let upstreams: HashMap<String, Rc<Upstream>> = config
            .upstream
            .iter()
            .zip(opened.iter())
            .enumerate()
            .map(|(i, (u, o))| {
                let seed = crate::upstream::peers::hash(format!("{worker}-{i}").as_bytes());
                let upstream =
                    Upstream::new(u, sets[i].clone(), o.clone(), figures.clone(), i, seed);
                (u.name.clone(), Rc::new(upstream))
            })
            .collect();
        let sites = config.route.iter().map(|r| r.site + 1).max().unwrap_or(1);
        let routes = (0..sites)
            .map(|site| {
                // A route the server's rules choose (a regex, a header...) is not found by
                // its prefix, for a fragment either.
                let by_prefix = |r: &&crate::RouteConfig| r.site == site && r.rule.is_none();
                handler::Router::new(config.route.iter().filter(by_prefix).map(|r| {
                    let to = match (&r.upstream, &r.root) {
                        (Some(name), _) => RouteTo::Upstream(upstreams[name].clone(), r.esi),
                        (None, Some(root)) => RouteTo::Static(root.clone()),
                        (None, None) => unreachable!("validate() requires upstream or root"),
                    };
                    (r.prefix.clone(), to)
                }))
            })
            .collect();
        let policies = (config.route.iter().enumerate())
            .map(|(i, r)| {
                let at = format!("{}.cache", r.key_or(i));
                r.cache
                    .as_ref()
                    .map(|c| RoutePolicy::build(c, &at).map(Rc::new))
                    .transpose()
            })
            .collect::<Result<_, _>>()?;
        Ok(Edge {
            compression: Rc::new(RouteCompression::new(&config)),
            worker: Rc::new(Worker {
                config,
                upstreams,
                routes,
                inflight: RefCell::new(HashMap::new()),
                fetches: Cell::new(0),
                cache,
                lean,
                policies,
            }),
        })
    }

    /// The route for a request path (longest prefix; a prefix matches whole segments
    /// unless it ends with `/`), matched on the normalised path (see `Worker::route`).
    pub fn route(&self, path: &str) -> Option<Route<'_>> {
        self.worker.route(path).map(Route::of)
    }

    /// [`Edge::route`] of a path the caller already normalised with
    /// [`wire::normalize_path`] (no allocation).
    pub fn route_normalised(&self, path: &[u8]) -> Option<Route<'_>> {
        self.worker.route_normalised(0, path).map(Route::of)
    }

    /// Counters of one upstream.
    pub fn upstream_stats(&self, name: &str) -> Option<UpstreamStats> {
        self.worker.upstreams.get(name).map(|u| u.stats())
    }

    /// The cache's counters and sizes.
    pub fn cache_stats(&self) -> crate::CacheStats {
        self.worker.cache.stats()
    }

    /// Fragment fetches sent since start (identical concurrent includes count once).
    pub fn fragment_fetches(&self) -> u64 {
        self.worker.fetches.get()
    }

    /// Proxies one request. Returns once the response head is known: for an ESI page,
    /// once its first bytes are ready (so a page that fails before that is an error, to
    /// be answered with [`ProxyError::status`], 502), with the rest streaming in
    /// [`ProxyResponse::body`]. GET and HEAD are answered from the cache when it holds a
    /// fresh object (docs/cache.md); `PURGE` and `BAN` invalidate it.
    pub async fn proxy(&self, req: ProxyRequest) -> Result<ProxyResponse, ProxyError> {
        origin_form(&req)?;
        let path = req.target.split(['?', '#']).next().unwrap_or("/");
        let (upstream, mode) = match self.worker.route(path) {
            None => return Err(ProxyError::NoRoute { path: path.into() }),
            Some(Target::Static(_)) => return Err(ProxyError::StaticRoute { path: path.into() }),
            Some(Target::Upstream(u, mode)) => (u.clone(), mode),
        };
        self.proxy_to(upstream, mode, None, &Cell::default(), req)
            .await
    }

    /// Whether route number `route` serves files (`root`) rather than an upstream.
    pub(crate) fn route_is_files(&self, route: usize) -> bool {
        self.worker
            .config
            .route
            .get(route)
            .is_some_and(|r| r.upstream.is_none())
    }

    /// Whether `config.route[route]` reads a request's body whole before proxying it
    /// (`request_buffering = true`).
    pub(crate) fn route_buffers_body(&self, route: usize) -> bool {
        self.worker
            .config
            .route
            .get(route)
            .is_some_and(|r| r.request_buffering)
    }

    /// The upstream, ESI mode and cache rules of `config.route[route]`, for a request
    /// the server routed (on its normalised path) to that route.
    pub(crate) fn route_upstream(&self, route: usize) -> Option<(Rc<Upstream>, EsiMode, Policy)> {
        let r = self.worker.config.route.get(route)?;
        let upstream = self.worker.upstreams.get(r.upstream.as_deref()?)?;
        let policy = self.worker.policies.get(route).cloned().flatten();
        Some((upstream.clone(), r.esi, policy))
    }

    /// [`Edge::proxy`] of a request already routed to `upstream`, with its route's
    /// cache rules (`policy`).
    pub(crate) async fn proxy_to(
        &self,
        upstream: Rc<Upstream>,
        mode: EsiMode,
        policy: Policy,
        status: &Cell<CacheStatus>,
        req: ProxyRequest,
    ) -> Result<ProxyResponse, ProxyError> {
        let worker = &self.worker;
        origin_form(&req)?;
        let authority = authority_of(&req, &upstream);
        let key = match policy.as_ref().and_then(|p| p.key.as_ref()) {
            Some(rule) => rule.key(&authority, &req.target, &req.headers),
            None => crate::assembly::fetch::key_at(&authority, &req.target),
        };
        let cache = &worker.cache;
        if matches!(req.method.as_str(), "PURGE" | "BAN") {
            // A BAN's path is a prefix of URL keys, whatever key rule follows them.
            let ban = (req.method.as_str() == "BAN")
                .then(|| crate::assembly::fetch::key_at(&authority, &req.target));
            return Ok(self.invalidate(&req, ban.as_deref().unwrap_or(&key)));
        }
        if let Some(protocol) = tunnel::upgrade_of(&req).cloned() {
            let config = &self.worker.config;
            return match tunnel::upgrade(config, &req, &upstream, protocol).await? {
                Upgrade::Switched(response) => Ok(response),
                Upgrade::Refused(parts, pooled) => {
                    self.answer(req, parts, pooled, false, authority).await
                }
            };
        }
        let bypass = policy.as_ref().is_some_and(|p| p.bypasses(&req.headers));
        let expose = policy.as_ref().is_some_and(|p| p.expose_keys);
        if !cache.enabled() || !matches!(req.method, Method::GET | Method::HEAD) || bypass {
            crate::metrics::passed();
            status.set(CacheStatus::Bypass);
            return self
                .forward(req, &upstream, mode, (authority, expose), None)
                .await;
        }
        let field = |n: &str| req.headers.get(n).cloned();
        let found = lookup::memory(cache, &key, &field);
        let now = now_ms();
        if let Memory::Fresh(e) | Memory::Stale(e, _) = &found {
            status.set(CacheStatus::of(e, now_ms()));
        }
        let (stale, passes) = match found {
            Memory::Fresh(e) => {
                return self
                    .serve(e, &req, &authority, now_ms(), Some(&upstream))
                    .await
            }
            Memory::Stale(e, guard) => {
                if let Some(guard) = guard {
                    let validate = Some(e.clone()).filter(|e| e.may_revalidate(now));
                    let fill = (key, guard, policy, validate);
                    self.refresh_in_background(&req, &upstream, mode, &authority, fill);
                }
                return self
                    .serve(e, &req, &authority, now_ms(), Some(&upstream))
                    .await;
            }
            Memory::Miss(stale, validate) => ((stale, validate), false),
            Memory::Pass => ((None, None), true),
        };
        if freshness::request_no_store(&req.headers) {
            // Not to be stored, so neither a fill nor a flight for others to wait on.
            crate::metrics::passed();
            status.set(CacheStatus::Bypass);
            return self
                .forward(req, &upstream, mode, (authority, expose), None)
                .await;
        }
        // A HEAD, or a GET for a key whose last response could not be stored: straight
        // to the origin, storing what comes back if it can be.
        if req.method == Method::HEAD || passes {
            crate::metrics::passed();
            status.set(if passes {
                CacheStatus::Bypass
            } else {
                CacheStatus::Miss(false)
            });
            let store = Store {
                key,
                guard: None,
                stale: stale.0,
                validate: None,
                refresh: false,
                policy,
                status: Some(status),
            };
            return self
                .forward(req, &upstream, mode, (authority, expose), Some(store))
                .await;
        }
        let deadline = evloop::time::now() + upstream.response_timeout;
        let flight = lookup::fly(cache, &key, &field, deadline, stale).await;
        status.set(match &flight {
            Flight::Hit(e) | Flight::StaleOnError(e) | Flight::Refresh(e, _) => {
                CacheStatus::of(e, now_ms())
            }
            Flight::Joined(_) | Flight::Failed => CacheStatus::Collapsed,
            Flight::Fetch { .. } => CacheStatus::Miss(false),
        });
        let (guard, stale, validate) = match flight {
            Flight::Hit(e) | Flight::Joined(e) | Flight::StaleOnError(e) => {
                return self
                    .serve(e, &req, &authority, now_ms(), Some(&upstream))
                    .await
            }
            Flight::Refresh(e, guard) => {
                let validate = Some(e.clone()).filter(|e| e.may_revalidate(now_ms()));
                let fill = (key, guard, policy, validate);
                self.refresh_in_background(&req, &upstream, mode, &authority, fill);
                return self
                    .serve(e, &req, &authority, now_ms(), Some(&upstream))
                    .await;
            }
            // The origin failed the leader: asking it again per waiter would only
            // multiply the load on a failing origin.
            Flight::Failed => {
                return Err(ProxyError::Upstream(UpstreamError::Coalesced {
                    upstream: upstream.name.clone(),
                }));
            }
            Flight::Fetch {
                guard,
                stale,
                validate,
            } => (guard, stale, validate),
        };
        let store = Store {
            key,
            guard,
            stale,
            validate,
            refresh: false,
            policy,
            status: Some(status),
        };
        self.forward(req, &upstream, mode, (authority, expose), Some(store))
            .await
    }

    /// Refetches a stale object for `key` as the flight leader (`guard`), storing it
    /// and landing it for waiters, while the stale one is served.
    fn refresh_in_background(
        &self,
        req: &ProxyRequest,
        upstream: &Rc<Upstream>,
        mode: EsiMode,
        authority: &Text,
        (key, guard, policy, validate): (Text, FlightGuard, Policy, Option<Arc<Entry>>),
    ) {
        let this = self.clone();
        let expose = policy.as_ref().is_some_and(|p| p.expose_keys);
        let mut refresh = req.clone();
        refresh.method = Method::GET;
        refresh.notes = None;
        refresh.streamed = None;
        let (upstream, authority) = (upstream.clone(), authority.clone());
        evloop::spawn_local(async move {
            let store = Store {
                key,
                guard: Some(guard),
                stale: None,
                validate,
                refresh: true,
                policy,
                status: None,
            };
            let _ = this
                .forward(refresh, &upstream, mode, (authority, expose), Some(store))
                .await;
        });
    }

    /// Sends the request upstream and answers with the response. With `store`, a
    /// cacheable response is stored (and landed for the waiters), and a failure is
    /// answered with the stale object when `stale-if-error` allows.
    async fn forward(
        &self,
        req: ProxyRequest,
        upstream: &Rc<Upstream>,
        mode: EsiMode,
        (authority, expose): (Text, bool),
        mut store: Option<Store<'_>>,
    ) -> Result<ProxyResponse, ProxyError> {
        let worker = &self.worker;
        let token = worker.config.esi.device_token.as_str();
        let deadline = evloop::time::now() + upstream.response_timeout;
        // An object fetched in slices: its first slice asked for (`crate::slices`).
        let slice = store.as_ref().and_then(|s| self.slice_for(&req, s));
        let sliced_fields = slice.map(|n| Self::first_slice_fields(&req.headers, n));
        let out = Outgoing {
            method: &req.method,
            target: &req.target,
            fields: Fields::Forwarded(Forwarded {
                client_headers: sliced_fields.as_ref().unwrap_or(&req.headers),
                client: &req.client,
                token,
                // The response may be a template to assemble, which must be text: until
                // the proxy can decode (on-the-fly compression), ask for identity.
                identity: mode != EsiMode::Off,
                // The response is to fill the cache for every client: ask for the whole
                // object, not this client's 304 or 206 (the client gets the full 200).
                whole: store.is_some() && slice.is_none(),
                revalidate: store
                    .as_ref()
                    .and_then(|s| Some(&s.validate.as_ref()?.headers)),
                host: &authority,
                request_id: req.request_id,
            }),
            body: &req.body,
            streamed: req.streamed.as_deref(),
            upgrade: None,
            notes: req.notes.as_ref(),
            trace: req.trace,
        };
        let sent = upstream.send(&out, deadline).await;
        if let Some(stale) = self.stale_on_failure(&sent, &mut store) {
            return self
                .serve(stale, &req, &authority, now_ms(), Some(upstream))
                .await;
        }
        let (mut parts, pooled) = sent?;
        let sliced = match slice.map(|_| Self::first_slice(&mut parts)) {
            Some(Err(())) => {
                return Box::pin(self.forward(req, upstream, mode, (authority, expose), None)).await
            }
            first => first.and_then(Result::ok).flatten(),
        };
        if let Some(s) = store.take_if(|s| s.validate.is_some() && parts.status.as_u16() == 304) {
            // The origin confirmed the expired object: refreshed, not fetched again.
            return self.revalidated(req, parts, pooled, s, authority).await;
        }
        let bodiless = wire::no_body(req.method == Method::HEAD, parts.status.as_u16());
        let esi = !bodiless && is_esi(mode, &parts.headers, token);
        if sliced.is_some() && esi {
            // A template larger than a slice: assembled from the whole, not stored.
            return Box::pin(self.forward(req, upstream, mode, (authority, expose), None)).await;
        }
        if req.method == Method::HEAD && is_esi(mode, &parts.headers, token) {
            // The template's length, validators and ranges are not the page's: a HEAD
            // gets the fields its GET would (an assembled page's).
            parts.headers = page_headers(parts.headers);
        }
        let now = now_ms();
        let authorized = req.headers.contains_key(header::AUTHORIZATION);
        let freshness = store
            .as_ref()
            .filter(|_| req.method == Method::GET)
            .and_then(|s| self.to_store(s, &parts, token, authorized));
        let limit = worker.cache.config.max_object_size;
        let length = content_length(&parts.headers);
        let storable = freshness.is_some();
        if let (Some(f), Some(s)) = (freshness, store.take_if(|_| storable)) {
            if let Some(total) = sliced {
                let head = (parts, pooled, f, now);
                let at = (total, expose);
                return self
                    .start_sliced(req, head, s, upstream, authority, at)
                    .await;
            }
            let mut stored = parts.headers.clone();
            headers::strip_hop_by_hop(&mut stored);
            let mut entry = if esi {
                let (template, source) = crate::assembly::decode::read_template_with_source(
                    pooled,
                    crate::assembly::decode::coding(&parts.headers),
                    worker.config.esi.max_fragment_size,
                    evloop::time::now() + upstream.response_timeout,
                )
                .await?;
                let template = Some((template, source));
                Entry::new(parts.status, stored, Bytes::new(), template, Some(&f), now)
            } else if length.is_some_and(|l| l <= limit as u64) {
                let deadline = evloop::time::now() + upstream.response_timeout;
                let bytes = crate::upstream::read::read_bytes(pooled, limit, deadline).await?;
                Entry::new(parts.status, stored, bytes, None, Some(&f), now)
            } else {
                // Too large (or of unknown length) to buffer: passed through, and written
                // to disk as it passes when the disk tier takes it.
                let head = (parts, pooled, f, now);
                return self
                    .pass_or_fill(req, head, s, (esi, expose), authority)
                    .await;
            };
            (entry.expose_keys, entry.disk) = (expose, s.disk());
            let entry = Arc::new(entry);
            let field = |n: &str| req.headers.get(n).cloned();
            worker.cache.insert(&s.key, &field, entry.clone(), now);
            if let Some(status) = s.status {
                status.set(CacheStatus::Miss(true));
            }
            if let Some(g) = s.guard {
                g.land(Landing::Stored(entry.clone()));
            }
            if s.refresh {
                return Ok(ProxyResponse {
                    status: entry.status,
                    head_h1: None,
                    headers: FieldList::new(),
                    body: Body::ready(Vec::new()),
                });
            }
            return self
                .serve(entry, &req, &authority, now, Some(upstream))
                .await;
        }
        // Not stored: waiters fetch their own, now rather than after this response, and
        // the next requests for the key do not wait on one another; unless it was this
        // request's credentials that kept the response from being stored (another
        // client's may be).
        if let Some(s) = store.filter(|_| req.method == Method::GET && !authorized) {
            worker.cache.mark_pass(&s.key, now);
        }
        if sliced.is_some() {
            // Only its first slice came, and it is not to be stored: the whole, as asked.
            return Box::pin(self.forward(req, upstream, mode, (authority, expose), None)).await;
        }
        if !esi && !expose {
            return Ok(self.answer_passed(req, parts, pooled));
        }
        self.answer_exposing(req, parts, pooled, (esi, expose), authority)
            .await
    }

    /// When the origin failed (an error, or a 5xx the route does not store): the flight
    /// told, and the stale object to serve instead when there is one (`stale-if-error`).
    fn stale_on_failure(
        &self,
        sent: &Result<(Head, Pooled), UpstreamError>,
        store: &mut Option<Store<'_>>,
    ) -> Option<Arc<Entry>> {
        let failed = match sent {
            Err(_) => true,
            // An error the route stores (`cache_errors`), when nothing stale may be
            // served instead, is stored like any response.
            Ok((head, _)) => {
                let kept =
                    |s: &Store<'_>| s.stale.is_none() && RoutePolicy::keeps(&s.policy, head.status);
                head.status.is_server_error() && !store.as_ref().is_some_and(kept)
            }
        };
        if !failed {
            return None;
        }
        let s = store.take()?;
        if let Some(g) = s.guard {
            g.land(Landing::Failed);
        }
        let stale = s.stale?;
        if let Some(status) = s.status {
            status.set(CacheStatus::of(&stale, now_ms()));
        }
        self.worker.cache.count_stale();
        tracing::debug!(key = %s.key, "origin failed: serving stale");
        Some(stale)
    }

    /// How long a response may be stored for the store `s`, when it may be at all.
    fn to_store(
        &self,
        s: &Store<'_>,
        parts: &Head,
        token: &str,
        authorized: bool,
    ) -> Option<freshness::Freshness> {
        let rules = freshness::Rules {
            route: s.policy.as_deref(),
            ..self.worker.cache.rules(token)
        };
        let now = evloop::time::system_now();
        let f = freshness::decide(parts.status, &parts.headers, &rules, None, authorized, now);
        f.store.then_some(f)
    }

    /// Answers with an upstream response as it arrives: passed through, or assembled
    /// when it is ESI.
    pub(crate) async fn answer(
        &self,
        req: ProxyRequest,
        parts: Head,
        pooled: Pooled,
        esi: bool,
        authority: Text,
    ) -> Result<ProxyResponse, ProxyError> {
        if !esi {
            return Ok(self.answer_passed(req, parts, pooled));
        }
        let worker = &self.worker;
        let token = worker.config.esi.device_token.as_str();
        let upstream_timeout = pooled.response_timeout();
        let coding = crate::assembly::decode::coding(&parts.headers);
        let out_headers = headers::forward_response_owned(parts.headers, parts.version, token);
        // An ESI page (in a coding the proxy reads): read and compile it, then assemble it.
        let template = crate::assembly::decode::read_template(
            pooled,
            Some(coding.unwrap_or(compress::Coding::Identity)),
            worker.config.esi.max_fragment_size,
            evloop::time::now() + upstream_timeout,
        )
        .await?;
        let out_headers = page_headers(out_headers);
        self.assemble(&req, &template, parts.status, out_headers, &authority, None)
            .await
    }

    /// [`Edge::answer`] for a response passed on as it is (not an ESI page): nothing to
    /// wait for, so not a future, which callers on the common path call directly rather
    /// than make and move `answer`'s (3.5 KB copied per request, perf's `memmove`).
    pub(crate) fn answer_passed(
        &self,
        req: ProxyRequest,
        parts: Head,
        mut pooled: Pooled,
    ) -> ProxyResponse {
        let token = self.worker.config.esi.device_token.as_str();
        let bodiless = wire::no_body(req.method == Method::HEAD, parts.status.as_u16());
        let length = if bodiless {
            Some(0)
        } else {
            content_length(&parts.headers)
        };
        let out_headers = headers::forward_response_owned(parts.headers, parts.version, token);
        // A small body came with its head: the connection is free at once, and the
        // response goes out in one write.
        let body = match pooled.take_whole() {
            Some(whole) => Body::whole(whole),
            None => Body {
                kind: BodyKind::Pass(PassBody::new(pooled)),
                length,
            },
        };
        headers::give_map(req.headers);
        ProxyResponse {
            status: parts.status,
            head_h1: None,
            headers: out_headers,
            body,
        }
    }

    /// Assembles a page from its template: at once from the cache when every fragment
    /// is fresh in memory (one ready body, its length known), else by starting every
    /// include and answering when the first bytes are ready.
    pub(crate) async fn assemble(
        &self,
        req: &ProxyRequest,
        template: &esi::Template,
        status: StatusCode,
        out_headers: FieldList,
        authority: &str,
        entry: Option<&Arc<Entry>>,
    ) -> Result<ProxyResponse, ProxyError> {
        let worker = &self.worker;
        let generation = worker.cache.generation();
        let mut esi_req = esi::Request::new(format!("http://{authority}{}", req.target));
        for name in [
            header::HOST,
            header::REFERER,
            header::USER_AGENT,
            header::ACCEPT_LANGUAGE,
            header::COOKIE,
        ] {
            for v in req.headers.get_all(&name) {
                if let Ok(v) = v.to_str() {
                    esi_req.set_header(name.as_str(), v);
                }
            }
        }
        let page_authority = normalise_authority(authority);
        if worker.cache.enabled() {
            if let Some(page) = crate::assembly::page::assemble_cached(
                worker,
                template,
                &esi_req,
                &page_authority,
                &req.headers,
                now_ms(),
            ) {
                if let Some(notes) = &req.notes {
                    notes.fragments(page.includes);
                }
                let chunks: Arc<[Bytes]> = page.chunks.into();
                if let Some(entry) = entry.filter(|_| page.request_independent) {
                    entry.set_memo(Memo {
                        chunks: chunks.clone(),
                        fresh_until: page.fresh_until.min(entry.fresh_until()),
                        generation,
                        variants: Arc::new(Variants::counted_in(entry.forms.clone())),
                    });
                }
                return Ok(ProxyResponse {
                    status,
                    head_h1: None,
                    headers: out_headers,
                    body: Body::ready(chunks),
                });
            }
        }
        let token = worker.config.esi.device_token.as_str();
        let forwarded = headers::forward_request(&req.headers, &req.client, token);
        let (rx, writer) = crate::assembly::page::start(
            worker.clone(),
            template,
            &esi_req,
            (page_authority, forwarded),
            (req.notes.clone(), req.trace),
        );
        // From here the page belongs to a Body, whose drop stops the assembly, also when
        // this future is dropped while waiting (the client went away).
        let mut body = Body {
            kind: BodyKind::Page {
                first: None,
                rx,
                writer,
            },
            length: None,
        };
        match body.next_chunk().await {
            None => body.length = Some(0),
            Some(Err(e)) => return Err(ProxyError::Page(e)),
            Some(Ok(b)) => {
                if let BodyKind::Page { first, .. } = &mut body.kind {
                    *first = Some(b);
                }
            }
        }
        Ok(ProxyResponse {
            status,
            head_h1: None,
            headers: out_headers,
            body,
        })
    }
}

/// The peers and their health per upstream of `config` (in its order), to share between
/// workers; a peer of `inherited` (the configuration a reload replaced) keeps its health.
/// `tls`: each upstream's ([`tls_of`]).
pub(crate) fn peer_sets(
    config: &EdgeConfig,
    inherited: &crate::upstream::peers::Inherited,
    tls: &[Option<Arc<UpstreamTls>>],
) -> Arc<[Arc<crate::upstream::peers::PeerSet>]> {
    let epoch = inherited.epoch();
    config
        .upstream
        .iter()
        .zip(tls)
        .map(|(u, tls)| {
            let ring = u.balance == crate::config::Balance::Hash;
            Arc::new(crate::upstream::peers::PeerSet::inheriting(
                u,
                ring,
                inherited,
                epoch,
                tls.clone(),
            ))
        })
        .collect()
}

/// Each upstream's TLS (in `config.upstream`'s order), its files read now.
pub(crate) fn tls_of(config: &EdgeConfig) -> Result<Vec<Option<Arc<UpstreamTls>>>, ConfigError> {
    config.upstream.iter().map(UpstreamTls::build).collect()
}

/// A counter of opened connections per upstream of `config`, to share between workers.
pub(crate) fn opened_totals(config: &EdgeConfig) -> Arc<[Arc<AtomicU64>]> {
    config.upstream.iter().map(|_| Arc::default()).collect()
}

/// What [`Edge::forward`] does with a cacheable response.
pub(crate) struct Store<'a> {
    pub(crate) key: Text,
    /// The flight to land, when this request leads one.
    pub(crate) guard: Option<FlightGuard>,
    /// Served if the origin fails.
    pub(crate) stale: Option<Arc<Entry>>,
    /// The expired object this request revalidates: its validators go upstream as
    /// conditionals, and a 304 refreshes it (`crate::revalidation`).
    pub(crate) validate: Option<Arc<Entry>>,
    /// A background refresh: store, then answer nothing.
    pub(crate) refresh: bool,
    /// The route's cache rules.
    pub(crate) policy: Policy,
    /// Where the request's `Cache-Status` is kept (not for a background refresh).
    pub(crate) status: Option<&'a Cell<CacheStatus>>,
}

/// A route's `[route.cache]` rules, when it has some.
pub(crate) type Policy = Option<Rc<RoutePolicy>>;

/// The request's authority: its Host field, trimmed, or the upstream's name when it has
/// none (copied into the worker's block: no allocation).
fn authority_of(req: &ProxyRequest, upstream: &Upstream) -> Text {
    let host = req.headers.get(header::HOST).and_then(|v| v.to_str().ok());
    Text::copy(host.map_or(upstream.name.as_str(), str::trim))
}

/// A response's Content-Length, when it has one that reads as a number.
pub(crate) fn content_length(fields: &FieldList) -> Option<u64> {
    fields
        .get(b"content-length")
        .and_then(headers::field_text)
        .and_then(|v| v.parse().ok())
}

/// Only origin-form targets (`/path?query`) are proxied.
fn origin_form(req: &ProxyRequest) -> Result<(), ProxyError> {
    if is_origin_form(&req.target) {
        return Ok(());
    }
    Err(ProxyError::BadRequest(
        "request target must be a path".into(),
    ))
}

/// `/path?query` with nothing in it that could end the request line early.
pub(crate) fn is_origin_form(target: &str) -> bool {
    target.starts_with('/') && target.bytes().all(|b| b > b' ' && b != 0x7f)
}
