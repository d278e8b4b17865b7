//! The proxy: routing, forwarding a request to its upstream, and answering with the
//! response passed through or assembled from fragments.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::Path;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderMap};
use http::{Method, StatusCode};
use http_body::Body as _;
use http_body_util::Full;
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::client::{read_template, PassBody, Upstream, UpstreamStats};
use crate::config::{EdgeConfig, EsiMode};
use crate::error::{ConfigError, PageError, ProxyError};
use crate::fetch::{is_esi, normalise_authority, FetchResult};
use crate::headers::{self, ClientInfo};

/// The ESI proxy of one worker. Create one per worker thread (it is `!Send`: its
/// connection pools, breakers and in-flight fetches are the worker's own) and call
/// [`Edge::proxy`] from tasks on that worker's `LocalSet`. Cloning is cheap and shares
/// everything.
#[derive(Clone)]
pub struct Edge {
    inner: Rc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: EdgeConfig,
    pub(crate) upstreams: HashMap<String, Rc<Upstream>>,
    /// Longest prefix first.
    routes: Vec<(String, RouteTo)>,
    /// Fragment fetches in flight, by key (see `fetch::fetch_key`).
    pub(crate) inflight: RefCell<HashMap<String, watch::Receiver<Option<FetchResult>>>>,
    pub(crate) fetches: Cell<u64>,
}

enum RouteTo {
    Upstream(Rc<Upstream>, EsiMode),
    Static(std::path::PathBuf),
}

pub(crate) enum Target<'a> {
    Upstream(&'a Rc<Upstream>, EsiMode),
    Static(&'a Path),
}

/// Where a path goes, for the server to decide between proxying and its own static files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// Proxied to the upstream of this name.
    Upstream(&'a str),
    /// Served from this directory.
    Static(&'a Path),
}

/// A request to proxy, as the server parsed it.
#[derive(Debug, Clone)]
pub struct ProxyRequest {
    pub method: Method,
    /// The request target in origin form: `/path?query`.
    pub target: String,
    pub headers: HeaderMap,
    /// The whole request body (the server reads it within its body limit first).
    pub body: Bytes,
    pub client: ClientInfo,
}

/// The response to send downstream. `headers` are final (hop-by-hop fields and
/// Surrogate-Control removed, Via added); the server adds its own framing from
/// [`Body::content_length`].
pub struct ProxyResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Body,
}

/// A response body: an upstream body passed through as it arrives, or an ESI page
/// assembled as its fragments arrive.
pub struct Body {
    kind: BodyKind,
    length: Option<u64>,
}

enum BodyKind {
    Pass(PassBody),
    Page {
        first: Option<Bytes>,
        rx: mpsc::Receiver<Result<Bytes, PageError>>,
        writer: AbortHandle,
    },
}

impl Body {
    /// The body's length when known in advance (a passed-through body with
    /// Content-Length). `None` for an assembled page or a chunked upstream body: an
    /// HTTP/1.1 client gets it chunked, an HTTP/1.0 client gets it buffered
    /// ([`Body::collect`]) or close-delimited.
    pub fn content_length(&self) -> Option<u64> {
        self.length
    }

    /// Whether this body is an ESI page being assembled.
    pub fn is_assembled(&self) -> bool {
        matches!(self.kind, BodyKind::Page { .. })
    }

    /// The next chunk, `None` at the end. An `Err` means the body broke off (an include
    /// failed after the head was sent, or the upstream body broke): the server must close
    /// the connection without ending the body properly (no final chunk), so no cache
    /// downstream stores a truncated page.
    pub async fn next_chunk(&mut self) -> Option<Result<Bytes, PageError>> {
        std::future::poll_fn(|cx| self.poll_chunk(cx)).await
    }

    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, PageError>>> {
        match &mut self.kind {
            BodyKind::Pass(p) => p
                .poll_next(cx)
                .map(|r| r.map(|r| r.map_err(PageError::from))),
            BodyKind::Page { first, rx, .. } => match first.take() {
                Some(b) => Poll::Ready(Some(Ok(b))),
                None => rx.poll_recv(cx),
            },
        }
    }

    /// The whole body, for a client that needs a length (HTTP/1.0 with keep-alive, or a
    /// cache).
    pub async fn collect(mut self) -> Result<Bytes, PageError> {
        let mut parts = Vec::new();
        while let Some(chunk) = self.next_chunk().await {
            parts.push(chunk?);
        }
        Ok(Bytes::from(parts.concat()))
    }
}

/// The same chunks as [`Body::next_chunk`], for code that composes streams.
impl futures_core::Stream for Body {
    type Item = Result<Bytes, PageError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_chunk(cx)
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        // A page nobody reads is not assembled further: its writer and include tasks stop.
        if let BodyKind::Page { writer, .. } = &self.kind {
            writer.abort();
        }
    }
}

impl Edge {
    /// Builds the proxy from a validated configuration.
    pub fn new(config: EdgeConfig) -> Result<Edge, ConfigError> {
        config.validate()?;
        let upstreams: HashMap<String, Rc<Upstream>> = config
            .upstream
            .iter()
            .map(|u| (u.name.clone(), Rc::new(Upstream::new(u))))
            .collect();
        let mut routes: Vec<(String, RouteTo)> = config
            .route
            .iter()
            .map(|r| {
                let to = match (&r.upstream, &r.root) {
                    (Some(name), _) => RouteTo::Upstream(upstreams[name].clone(), r.esi),
                    (None, Some(root)) => RouteTo::Static(root.clone()),
                    (None, None) => unreachable!("validate() requires upstream or root"),
                };
                (r.prefix.clone(), to)
            })
            .collect();
        routes.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        Ok(Edge {
            inner: Rc::new(Inner {
                config,
                upstreams,
                routes,
                inflight: RefCell::new(HashMap::new()),
                fetches: Cell::new(0),
            }),
        })
    }

    /// The route for a request path (longest prefix; a prefix matches whole segments
    /// unless it ends with `/`).
    pub fn route(&self, path: &str) -> Option<Route<'_>> {
        self.inner.route(path).map(|t| match t {
            Target::Upstream(u, _) => Route::Upstream(&u.name),
            Target::Static(root) => Route::Static(root),
        })
    }

    /// Counters of one upstream.
    pub fn upstream_stats(&self, name: &str) -> Option<UpstreamStats> {
        self.inner.upstreams.get(name).map(|u| u.stats())
    }

    /// Fragment fetches sent since start (identical concurrent includes count once).
    pub fn fragment_fetches(&self) -> u64 {
        self.inner.fetches.get()
    }

    /// Proxies one request. Returns once the response head is known: for an ESI page,
    /// once its first bytes are ready (so a page that fails before that is an error, to
    /// be answered with [`ProxyError::status`], 502), with the rest streaming in
    /// [`ProxyResponse::body`].
    pub async fn proxy(&self, req: ProxyRequest) -> Result<ProxyResponse, ProxyError> {
        let inner = &self.inner;
        if !req.target.starts_with('/') {
            return Err(ProxyError::BadRequest(
                "request target must be a path".into(),
            ));
        }
        let path = req.target.split(['?', '#']).next().unwrap_or("/");
        let (upstream, mode) = match inner.route(path) {
            None => return Err(ProxyError::NoRoute { path: path.into() }),
            Some(Target::Static(_)) => return Err(ProxyError::StaticRoute { path: path.into() }),
            Some(Target::Upstream(u, mode)) => (u.clone(), mode),
        };
        let token = inner.config.esi.device_token.as_str();
        let forwarded = headers::forward_request(&req.headers, &req.client, token);
        let mut up = http::Request::new(Full::new(req.body));
        *up.method_mut() = req.method.clone();
        *up.uri_mut() = req
            .target
            .parse()
            .map_err(|_| ProxyError::BadRequest("unparsable request target".into()))?;
        *up.headers_mut() = forwarded.clone();
        // The body is whole: its length is known, whatever framing the client used.
        let up_headers = up.headers_mut();
        up_headers.remove(header::CONTENT_LENGTH);
        let body_len = up.body().size_hint().exact().unwrap_or(0);
        if body_len > 0 || matches!(req.method, Method::POST | Method::PUT | Method::PATCH) {
            up.headers_mut()
                .insert(header::CONTENT_LENGTH, header::HeaderValue::from(body_len));
        }
        let deadline = Instant::now() + upstream.response_timeout;
        let (resp, pooled) = upstream.send(up, deadline).await?;
        let (parts, body) = resp.into_parts();
        let bodiless = req.method == Method::HEAD
            || parts.status.is_informational()
            || parts.status == StatusCode::NO_CONTENT
            || parts.status == StatusCode::NOT_MODIFIED;
        let mut out_headers = headers::forward_response(&parts.headers, parts.version, token);
        if bodiless || !is_esi(mode, &parts.headers, token) {
            let length = if bodiless {
                Some(0)
            } else {
                parts
                    .headers
                    .get(header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok())
            };
            return Ok(ProxyResponse {
                status: parts.status,
                headers: out_headers,
                body: Body {
                    kind: BodyKind::Pass(PassBody::new(body, pooled)),
                    length,
                },
            });
        }

        // An ESI page: read and compile it, start every include, answer when the first
        // bytes are ready.
        let template = read_template(
            body,
            pooled,
            inner.config.esi.max_fragment_size,
            Instant::now() + upstream.response_timeout,
        )
        .await?;
        let authority = req
            .headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map_or_else(|| upstream.name.clone(), |h| h.trim().to_string());
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
        let (rx, writer) = crate::page::start(
            inner.clone(),
            &template,
            &esi_req,
            normalise_authority(&authority),
            forwarded,
        );
        // The assembled page is new content: the upstream's length and validators do not
        // describe it.
        for name in [
            header::CONTENT_LENGTH,
            header::ETAG,
            header::LAST_MODIFIED,
            header::ACCEPT_RANGES,
        ] {
            out_headers.remove(name);
        }
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
            status: parts.status,
            headers: out_headers,
            body,
        })
    }
}

impl Edge {
    /// One request to the upstream named `upstream`, for a script: no routing, no header
    /// forwarding and no ESI, the whole response body read (at most `max_body` bytes)
    /// within the upstream's timeouts, through its pool and breaker.
    pub async fn call(
        &self,
        upstream: &str,
        method: Method,
        target: &str,
        headers: HeaderMap,
        body: Bytes,
        max_body: usize,
    ) -> Result<(StatusCode, HeaderMap, Bytes), ProxyError> {
        let Some(upstream) = self.inner.upstreams.get(upstream).cloned() else {
            return Err(ProxyError::BadRequest(format!("no upstream `{upstream}`")));
        };
        let body_len = body.len();
        let mut up = http::Request::new(Full::new(body));
        *up.method_mut() = method.clone();
        *up.uri_mut() = target
            .parse()
            .map_err(|_| ProxyError::BadRequest("unparsable request target".into()))?;
        *up.headers_mut() = headers;
        if !up.headers().contains_key(header::HOST) {
            if let Ok(host) = header::HeaderValue::from_str(&upstream.name) {
                up.headers_mut().insert(header::HOST, host);
            }
        }
        up.headers_mut().remove(header::CONTENT_LENGTH);
        if body_len > 0 || matches!(method, Method::POST | Method::PUT | Method::PATCH) {
            up.headers_mut()
                .insert(header::CONTENT_LENGTH, header::HeaderValue::from(body_len));
        }
        let deadline = Instant::now() + upstream.response_timeout;
        let (resp, pooled) = upstream.send(up, deadline).await?;
        let (parts, body) = resp.into_parts();
        let bytes = crate::client::read_bytes(
            body,
            pooled,
            max_body,
            Instant::now() + upstream.response_timeout,
        )
        .await?;
        Ok((parts.status, parts.headers, bytes))
    }
}

impl Inner {
    pub(crate) fn route(&self, path: &str) -> Option<Target<'_>> {
        self.routes
            .iter()
            .find(|(prefix, _)| {
                path.starts_with(prefix.as_str())
                    && (prefix.ends_with('/')
                        || path.len() == prefix.len()
                        || path.as_bytes()[prefix.len()] == b'/')
            })
            .map(|(_, to)| match to {
                RouteTo::Upstream(u, mode) => Target::Upstream(u, *mode),
                RouteTo::Static(root) => Target::Static(root),
            })
    }
}
