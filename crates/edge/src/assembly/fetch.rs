//! Fragment fetches: where an include URL may go (the allow-list), what it carries, and
//! one fetch shared by every identical request in flight on this worker.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use evloop::time::Instant;
use handler::FieldList;
use http::header::HeaderMap;
use tokio::sync::watch;

use crate::cache::lookup::{self, Flight, Memory};
use crate::cache::revalidate::{conditional_request, updated_fields};
use crate::cache::{Entry, FlightGuard, Landing};
use crate::clock::now_ms;
use crate::config::EsiMode;
use crate::headers;
use crate::upstream::client::{Fields, Outgoing, Upstream};
use crate::worker::{FetchFailed, FetchResult, Fetched, Target, Worker};

/// Where one fragment comes from, decided before anything is sent.
#[derive(Clone)]
pub(crate) struct FragmentTarget {
    source: Source,
    /// Path and query, sent as the request target.
    path_and_query: String,
    /// The request headers for it.
    headers: HeaderMap,
    esi: EsiMode,
    /// Its cache key; `None` when it is not cached (a static file, the cache off, or
    /// an include with `no-store`).
    pub(crate) cache_key: Option<String>,
    /// The include's `ttl`, which replaces the response's lifetime.
    pub(crate) ttl: Option<std::time::Duration>,
    /// The page request's trace context: the fetch goes as a child span of it.
    pub(crate) trace: Option<trace::Context>,
}

#[derive(Clone)]
enum Source {
    Upstream(Rc<Upstream>),
    Static(PathBuf),
}

/// A failed fragment fetch answered by the stale copy kept for it, if there is one
/// (counted and logged), else the failure.
fn stale_or(
    cache: &crate::cache::Cache,
    key: &str,
    stale: &Option<Arc<Fetched>>,
    e: FetchFailed,
) -> FetchResult {
    match stale {
        Some(s) => {
            cache.count_stale();
            tracing::debug!(%key, error = %e, "fragment failed: serving stale");
            Ok(s.clone())
        }
        None => Err(e),
    }
}

/// A request's authority, lower-cased, without the default port.
pub(crate) fn normalise_authority(authority: &str) -> String {
    let a = authority.to_ascii_lowercase();
    match a.strip_suffix(":80") {
        Some(host) => host.to_string(),
        None => a,
    }
}

/// The cache key of `path_and_query` at `authority` (normalised as by
/// [`normalise_authority`]): the same string as `cache::key` of the normalised authority,
/// written once into the worker's block ([`crate::arena`]).
pub(crate) fn key_at(authority: &str, path_and_query: &str) -> crate::arena::Text {
    let host = match authority.len().checked_sub(3) {
        Some(at) if authority.is_char_boundary(at) && &authority[at..] == ":80" => &authority[..at],
        _ => authority,
    };
    let bytes = crate::arena::copy_with(host.len() + path_and_query.len(), |k| {
        k.extend_from_slice(host.as_bytes());
        k[..host.len()].make_ascii_lowercase();
        k.extend_from_slice(path_and_query.as_bytes());
    });
    crate::arena::Text::from_utf8(bytes).expect("a str with its ASCII lower-cased")
}

/// Where an include may be fetched from (see [`fragment_origin`]).
enum FragmentOrigin<'a> {
    /// The page's own authority: by its route.
    Page(Target<'a>),
    /// A host of `[[esi.fragment_host]]`.
    Allowed(&'a crate::config::FragmentHost),
}

/// The rules every include URL passes, for a fetch and for a cache lookup alike: an
/// `http` or `https` URL without user info, on the page's own authority (then routed) or on an
/// allowed fragment host. Returns the parsed URL and its normalised authority.
fn fragment_origin<'w>(
    worker: &'w Worker,
    url: &str,
    page_authority: &str,
) -> Option<(http::Uri, String, FragmentOrigin<'w>)> {
    let uri: http::Uri = url.parse().ok()?;
    let written = uri.authority()?.as_str();
    // An `https://` include is fetched as an `http://` one: from the upstream its host
    // goes to, over that upstream's transport (TLS when it has `tls`).
    let written = match uri.scheme_str() {
        Some("http") => written,
        Some("https") => written.strip_suffix(":443").unwrap_or(written),
        _ => return None,
    };
    let authority = normalise_authority(written);
    if authority.contains('@') {
        return None;
    }
    let origin = if authority == page_authority {
        FragmentOrigin::Page(worker.route_for(page_authority, uri.path())?)
    } else {
        FragmentOrigin::Allowed(
            worker
                .config
                .esi
                .fragment_host
                .iter()
                .find(|h| normalise_authority(&h.host) == authority)?,
        )
    };
    Some((uri, authority, origin))
}

/// Decides whether `url` (absolute, resolved by the esi crate) may be fetched for a
/// page on `page_authority`, and how. `None` refuses it: not `http(s)`, or a host that is
/// neither the page's own nor on the `[[esi.fragment_host]]` allow-list.
pub(crate) fn fragment_target(
    worker: &Worker,
    url: &str,
    page_authority: &str,
    page_headers: &HeaderMap,
) -> Option<FragmentTarget> {
    let (uri, authority, origin) = fragment_origin(worker, url, page_authority)?;
    let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    let (source, credentials, esi) = match origin {
        FragmentOrigin::Page(Target::Upstream(u, esi)) => (Source::Upstream(u.clone()), true, esi),
        FragmentOrigin::Page(Target::Static(root)) => (
            Source::Static(static_path(root, uri.path())?),
            true,
            EsiMode::Off,
        ),
        FragmentOrigin::Allowed(allowed) => {
            let upstream = worker.upstreams.get(&allowed.upstream)?.clone();
            (
                Source::Upstream(upstream),
                allowed.credentials,
                EsiMode::Auto,
            )
        }
    };
    let headers = headers::fragment_request(page_headers, &authority, credentials);
    let cache_key = (worker.cache.enabled() && matches!(source, Source::Upstream(_)))
        .then(|| crate::cache::key(&authority, &path_and_query));
    Some(FragmentTarget {
        source,
        path_and_query,
        headers,
        esi,
        cache_key,
        ttl: None,
        trace: None,
    })
}

/// The cache key of an include URL and the authority and credential rule its request
/// would have, for a lookup that builds no request (the rules of
/// [`fragment_target`]); `None` when it would be refused or
/// is not cached.
pub(crate) fn fragment_cache_key(
    worker: &Worker,
    url: &str,
    page_authority: &str,
) -> Option<(String, String, bool)> {
    let (uri, authority, origin) = fragment_origin(worker, url, page_authority)?;
    let credentials = match origin {
        FragmentOrigin::Page(Target::Upstream(..)) => true,
        FragmentOrigin::Page(Target::Static(_)) => return None,
        FragmentOrigin::Allowed(allowed) => allowed.credentials,
    };
    let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str());
    let key = crate::cache::key(&authority, path_and_query);
    Some((key, authority, credentials))
}

/// Whether the cache holds an object for the target that may be served when its
/// upstream fails, so an include whose upstream is down still tries.
pub(crate) fn has_stale(worker: &Worker, target: &FragmentTarget) -> bool {
    let Some(key) = &target.cache_key else {
        return false;
    };
    let now = now_ms();
    let field = |n: &str| target.headers.get(n).cloned();
    worker
        .cache
        .lookup(key, &field, now)
        .is_some_and(|e| e.may_serve_on_error(now))
}

/// Whether every peer of the target's upstream is down, so the include can fail at
/// once.
pub(crate) fn refused_now(target: &FragmentTarget) -> bool {
    match &target.source {
        Source::Upstream(u) => u.all_down(),
        Source::Static(_) => false,
    }
}

/// Fetches a fragment, or joins the identical fetch already in flight. The key is the
/// source, target and every header sent but X-Forwarded-For, so two users'
/// personalised fragments (Cookie, Authorization, ...) never share a fetch. The fetch itself ends by `deadline` (the first asker's), so a
/// never-answering server costs each page at most its own timeouts.
pub(crate) async fn fragment(
    worker: &Rc<Worker>,
    target: FragmentTarget,
    deadline: Instant,
) -> FetchResult {
    let (mut stale, mut validate) = (None, None);
    if let Some(key) = &target.cache_key {
        let field = |n: &str| target.headers.get(n).cloned();
        match lookup::memory(&worker.cache, key, &field) {
            Memory::Fresh(e) => return Ok(e),
            Memory::Stale(e, guard) => {
                if let Some(guard) = guard {
                    refresh_in_background(worker, target.clone(), guard, e.clone());
                }
                return Ok(e);
            }
            Memory::Miss(s, v) => (stale, validate) = (s, v),
            Memory::Pass => stale = None,
        }
    }
    let key = fetch_key(&target);
    let existing = worker.inflight.borrow().get(&key).cloned();
    let mut rx = match existing {
        // A memory miss that waits for this worker's fetch of the same fragment.
        Some(rx) if target.cache_key.is_some() => {
            worker.cache.count_miss();
            rx
        }
        Some(rx) => rx,
        None => {
            let (tx, rx) = watch::channel(None);
            worker.inflight.borrow_mut().insert(key.clone(), rx.clone());
            worker.fetches.set(worker.fetches.get() + 1);
            let worker = worker.clone();
            evloop::spawn_local(async move {
                let kept = (stale, validate);
                let result = fetch_cached(&worker, target, deadline, kept).await;
                worker.inflight.borrow_mut().remove(&key);
                let _ = tx.send(Some(result));
            });
            rx
        }
    };
    let result = match rx.wait_for(Option::is_some).await {
        Ok(v) => v.clone().unwrap_or(Err(FetchFailed::Abandoned)),
        Err(_) => Err(FetchFailed::Abandoned),
    };
    result
}

/// Fetches a cacheable fragment once for the whole process: joins another worker's
/// fetch of the key, or leads one (Redis, then the origin) and stores the result.
/// A failure is answered with `stale` when it may be served on error; `validate` is an
/// expired object to revalidate (`lookup::Memory::Miss`).
async fn fetch_cached(
    worker: &Rc<Worker>,
    target: FragmentTarget,
    deadline: Instant,
    (stale, validate): (Option<Arc<Entry>>, Option<Arc<Entry>>),
) -> FetchResult {
    let Some(key) = target.cache_key.clone() else {
        return fetch_now(worker, target, deadline, None).await;
    };
    let cache = &worker.cache;
    let headers = target.headers.clone();
    let field = |n: &str| headers.get(n).cloned();
    let flight = lookup::fly(cache, &key, &field, deadline, (stale, validate)).await;
    let (guard, stale, validate) = match flight {
        // A body left on disk or in slices (a page's object too large for memory, as a
        // fragment): fetched whole for the page.
        Flight::Hit(e) | Flight::Joined(e) if e.on_disk.is_some() || e.sliced.is_some() => {
            (None, None, None)
        }
        Flight::Hit(e) | Flight::Joined(e) | Flight::StaleOnError(e) => return Ok(e),
        Flight::Refresh(e, guard) => {
            refresh_in_background(worker, target, guard, e.clone());
            return Ok(e);
        }
        Flight::Failed => return Err(FetchFailed::Coalesced),
        Flight::Fetch {
            guard,
            stale,
            validate,
        } => (guard, stale, validate),
    };
    match fetch_now(worker, target, deadline, validate.as_ref()).await {
        Ok(e) => {
            if e.storable() {
                cache.insert(&key, &field, e.clone(), now_ms());
                if let Some(g) = guard {
                    g.land(Landing::Stored(e.clone()));
                }
            }
            Ok(e)
        }
        Err(err) => {
            if let Some(g) = guard {
                g.land(Landing::Failed);
            }
            stale_or(cache, &key, &stale, err)
        }
    }
}

/// Refetches a stale fragment as the flight leader (`guard`) while the stale one is
/// served (revalidating it when it has validators): stores it and lands it for the
/// waiters.
fn refresh_in_background(
    worker: &Rc<Worker>,
    target: FragmentTarget,
    guard: FlightGuard,
    stale: Arc<Entry>,
) {
    let worker = worker.clone();
    let timeout = crate::config::secs(worker.config.esi.include_timeout);
    evloop::spawn_local(async move {
        let Some(key) = target.cache_key.clone() else {
            return;
        };
        let headers = target.headers.clone();
        let validate = Some(stale).filter(|e| e.may_revalidate(now_ms()));
        let deadline = evloop::time::now() + timeout;
        match fetch_now(&worker, target, deadline, validate.as_ref()).await {
            Ok(e) if e.storable() => {
                let field = |n: &str| headers.get(n).cloned();
                worker.cache.insert(&key, &field, e.clone(), now_ms());
                guard.land(Landing::Stored(e));
            }
            Ok(_) => guard.land(Landing::NotStored),
            Err(err) => {
                tracing::debug!(%key, error = %err, "fragment refresh failed");
                guard.land(Landing::Failed);
            }
        }
    });
}

/// Fetches a fragment from its source; with `validate`, a conditional request whose 304
/// refreshes that object (docs/cache.md, "Revalidation").
async fn fetch_now(
    worker: &Worker,
    target: FragmentTarget,
    deadline: Instant,
    validate: Option<&Arc<Entry>>,
) -> FetchResult {
    let limit = worker.config.esi.max_fragment_size;
    let upstream = match target.source {
        Source::Static(path) => {
            let body = tokio::fs::read(&path)
                .await
                .map_err(|e| FetchFailed::Static(format!("{}: {e}", path.display())))?;
            if body.len() > limit {
                return Err(FetchFailed::Static(format!(
                    "{}: too large",
                    path.display()
                )));
            }
            return Ok(Arc::new(Entry::new(
                http::StatusCode::OK,
                FieldList::new(),
                Bytes::from(body),
                None,
                None,
                now_ms(),
            )));
        }
        Source::Upstream(u) => u,
    };
    if !target.path_and_query.starts_with('/') {
        return Err(FetchFailed::Status(400));
    }
    let authorized = target.headers.contains_key(http::header::AUTHORIZATION);
    let conditional = validate.map(|e| conditional_request(&target.headers, &e.headers));
    let out = Outgoing {
        method: &http::Method::GET,
        target: &target.path_and_query,
        fields: Fields::Plain(conditional.as_ref().unwrap_or(&target.headers)),
        body: &Bytes::new(),
        streamed: None,
        upgrade: None,
        notes: None,
        trace: target.trace,
    };
    let (parts, pooled) = upstream
        .send(&out, deadline)
        .await
        .map_err(FetchFailed::Upstream)?;
    let status = parts.status;
    if let Some(stored) = validate.filter(|_| status == http::StatusCode::NOT_MODIFIED) {
        // No body: the connection goes back to the pool.
        let mut pooled = pooled;
        let _ = pooled.take_whole();
        let rules = (target.ttl, authorized);
        return Ok(Arc::new(refreshed(worker, rules, stored, parts.headers)));
    }
    let esi = is_esi(target.esi, &parts.headers, &worker.config.esi.device_token);
    if !status.is_success() {
        // The connection is not worth keeping for an error page's body.
        return Err(FetchFailed::Status(status.as_u16()));
    }
    let coding = super::decode::coding(&parts.headers);
    if coding.is_none() {
        // Asked for identity, got a coding the proxy cannot decode: encoded bytes
        // must never be spliced into a page. A failed include (its alt, onerror,
        // try apply).
        let coding = parts.headers.get(b"content-encoding");
        return Err(FetchFailed::Encoded(
            String::from_utf8_lossy(coding.unwrap_or_default()).into_owned(),
        ));
    }
    let freshness = target
        .cache_key
        .as_ref()
        .map(|_| {
            crate::cache::freshness::decide(
                status,
                &parts.headers,
                &worker.cache.rules(&worker.config.esi.device_token),
                target.ttl,
                authorized,
                evloop::time::system_now(),
            )
        })
        .filter(|f| f.store);
    // A gzip, br or zstd body (the origin ignored `identity`) is decoded within the
    // limit; what is stored and spliced is the identity body.
    let (body, template) = if esi {
        let t = super::decode::read_template_with_source(pooled, coding, limit, deadline);
        (Bytes::new(), Some(t.await.map_err(FetchFailed::Upstream)?))
    } else {
        let b = super::decode::read_bytes(pooled, coding, limit, deadline).await;
        (b.map_err(FetchFailed::Upstream)?, None)
    };
    let mut stored = parts.headers;
    headers::strip_hop_by_hop(&mut stored);
    stored.remove(b"content-encoding");
    Ok(Arc::new(Entry::new(
        status,
        stored,
        body,
        template,
        freshness.as_ref(),
        now_ms(),
    )))
}

/// A stored fragment as its origin's 304 (`not_modified`, its fields) refreshed it: the
/// 304's fields in place of the stored ones, its lifetime decided again (with the
/// include's `ttl`; `authorized`: the request carried Authorization).
fn refreshed(
    worker: &Worker,
    (ttl, authorized): (Option<std::time::Duration>, bool),
    stored: &Entry,
    mut not_modified: FieldList,
) -> Entry {
    headers::strip_hop_by_hop(&mut not_modified);
    let fields = updated_fields(&stored.headers, &not_modified);
    let freshness = crate::cache::freshness::decide(
        stored.status,
        &fields,
        &worker.cache.rules(&worker.config.esi.device_token),
        ttl,
        authorized,
        evloop::time::system_now(),
    );
    crate::metrics::revalidated();
    stored.refreshed(fields, &freshness, now_ms())
}

/// Whether a response is to be processed as ESI, per the route's mode. A body in a
/// coding the proxy cannot decode never is (gzip, br and zstd are decoded first).
pub(crate) fn is_esi(mode: EsiMode, fields: &FieldList, token: &str) -> bool {
    super::decode::readable(fields)
        && match mode {
            EsiMode::Off => false,
            EsiMode::Auto => headers::surrogate_esi(fields, token),
            EsiMode::Html => fields
                .get(b"content-type")
                .and_then(headers::field_text)
                .and_then(|v| v.trim_start().as_bytes().get(..9))
                .is_some_and(|v| v.eq_ignore_ascii_case(b"text/html")),
        }
}

fn fetch_key(t: &FragmentTarget) -> String {
    let mut key = match &t.source {
        Source::Upstream(u) => format!("{}\n", u.name),
        Source::Static(p) => format!("{}\n", p.display()),
    };
    key.push_str(&t.path_and_query);
    for (name, value) in &t.headers {
        // The client's address is not what a fragment varies on; keying on it would
        // keep different clients from sharing a fetch. The shared fetch carries the
        // first asker's X-Forwarded-For.
        if name == "x-forwarded-for" {
            continue;
        }
        key.push('\n');
        key.push_str(name.as_str());
        key.push(':');
        key.push_str(&String::from_utf8_lossy(value.as_bytes()));
    }
    key
}

/// The file under `root` for a URL path: percent-decoded, and refused when a segment is
/// `.` or `..`, empty inside the path, or holds a NUL or backslash, so it cannot leave the
/// root by name.
fn static_path(root: &Path, url_path: &str) -> Option<PathBuf> {
    let decoded = percent_decode(url_path)?;
    let mut path = root.to_path_buf();
    let rel = decoded.strip_prefix('/')?;
    for seg in rel.split('/') {
        if seg.is_empty() || seg == "." || seg == ".." || seg.contains(['\0', '\\']) {
            return None;
        }
        path.push(seg);
    }
    Some(path)
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_paths_stay_under_the_root() {
        let root = Path::new("/srv/frag");
        assert_eq!(
            static_path(root, "/a/b%20c.html"),
            Some(PathBuf::from("/srv/frag/a/b c.html"))
        );
        assert_eq!(static_path(root, "/a/%2e%2e/%2e%2e/etc/passwd"), None);
        assert_eq!(static_path(root, "/a//b"), None);
        assert_eq!(static_path(root, "/a/..%5cx"), None);
        assert_eq!(static_path(root, "/a%00"), None);
    }

    #[test]
    fn key_at_is_the_key_of_the_normalised_authority() {
        for a in [
            "Example.COM:80",
            "example.com",
            "h:8080",
            ":80",
            "",
            "É:80",
            "x:80:80",
        ] {
            let expected = crate::cache::key(&normalise_authority(a), "/p?q");
            assert_eq!(key_at(a, "/p?q").as_str(), expected, "{a}");
        }
    }
}
