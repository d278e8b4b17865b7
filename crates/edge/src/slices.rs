//! Objects fetched from the origin in slices (`[cache.disk] slice`, docs/cache.md
//! "Slices"), as nginx's `slice` module does, without configuring it by hand: a cache
//! fill on a route that keeps its objects on disk asks the origin for the first
//! `slice` bytes (`Range`). A 206 that holds the whole object is stored as its 200; a
//! 200 (an origin that ignores `Range`) is the whole object, stored as without slices;
//! a 206 of a larger object makes a sliced object: its head goes to disk
//! (`cache::disk::slices`), the first slice too as it arrives, and every request for it,
//! whole or a range, is answered from its slices in order, each read from disk, or
//! from the fill of it under way, or, missing, fetched from the origin (`Range`) and
//! written to disk as it is read. A slice whose 206 does not match the object (another
//! ETag or length, or a 200) means the object changed at the origin: the object and its
//! slices are dropped, and the response breaks off (short of its length); the next
//! request fetches the object again.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use handler::Piece;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode};

use crate::arena::Text;
use crate::body::{Body, BodyKind, Pieces};
use crate::cache::disk::slices::{SliceFill, Sliced};
use crate::cache::freshness::Freshness;
use crate::cache::Entry;
use crate::error::{PageError, ProxyError};
use crate::exchange::{CacheStatus, ProxyRequest, ProxyResponse};
use crate::headers::Forwarded;
use crate::proxy::{Edge, Store};
use crate::upstream::client::{Fields, Head, Outgoing, Pooled, Upstream};

/// The request fields a slice's request leaves out (it asks for its own range).
const CONDITIONS: [header::HeaderName; 6] = [
    header::RANGE,
    header::IF_RANGE,
    header::IF_MATCH,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_UNMODIFIED_SINCE,
];

/// `fields` without the client's conditions and range, asking for `first..=last`.
fn range_fields(fields: &HeaderMap, (first, last): (u64, u64)) -> HeaderMap {
    let mut fields = fields.clone();
    for name in CONDITIONS {
        fields.remove(name);
    }
    let range = format!("bytes={first}-{last}");
    if let Ok(value) = HeaderValue::from_str(&range) {
        fields.insert(header::RANGE, value);
    }
    fields
}

/// A `Content-Range: bytes first-last/total`.
fn content_range(fields: &handler::FieldList) -> Option<(u64, u64, u64)> {
    let value = std::str::from_utf8(fields.get(b"content-range")?).ok()?;
    let (range, total) = value.trim().strip_prefix("bytes ")?.split_once('/')?;
    let (first, last) = range.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?, total.parse().ok()?))
}

impl Edge {
    /// The slice size a cache fill of `req` asks the origin for first, when it is fetched
    /// in slices: `slice` is set, the route keeps its objects on disk, and the request is
    /// a GET that is not a revalidation. (An ESI template larger than a slice is fetched
    /// again whole, and not stored: `Edge::forward`.)
    pub(crate) fn slice_for(&self, req: &ProxyRequest, s: &Store<'_>) -> Option<u64> {
        let disk = self.worker.cache.disk()?;
        let plain = req.method == Method::GET && s.validate.is_none();
        disk.slice_size().filter(|_| plain && s.disk())
    }

    /// The fields of a first slice's request: the client's, asking for `0..slice`.
    pub(crate) fn first_slice_fields(fields: &HeaderMap, slice: u64) -> HeaderMap {
        range_fields(fields, (0, slice - 1))
    }

    /// The origin's answer to a first slice's request: a 206 that holds the whole object
    /// becomes its 200; a 206 of the first bytes of a larger object becomes the 200 of
    /// the object (its length the whole's) and gives the object's length. Anything else
    /// is left as it is (a 200: an origin that ignores `Range`), but a 206 of other
    /// bytes or of an unknown length, or a 416 (an empty object), which are no answer to
    /// the client's request: `Err`, to fetch it again whole.
    pub(crate) fn first_slice(parts: &mut Head) -> Result<Option<u64>, ()> {
        if parts.status == StatusCode::RANGE_NOT_SATISFIABLE {
            return Err(());
        }
        if parts.status != StatusCode::PARTIAL_CONTENT {
            return Ok(None);
        }
        let (first, last, total) = content_range(&parts.headers).ok_or(())?;
        if first != 0 || last >= total {
            return Err(());
        }
        parts.status = StatusCode::OK;
        parts.headers.remove(b"content-range");
        let length = total.to_string();
        parts.headers.insert(b"content-length", length.as_bytes());
        Ok((last + 1 < total).then_some(total))
    }

    /// Stores a sliced object's head and its first slice (as it arrives) and answers
    /// from its slices; with a background refresh, answers nothing.
    pub(crate) async fn start_sliced(
        &self,
        req: ProxyRequest,
        (parts, pooled, freshness, now): (Head, Pooled, Freshness, u64),
        s: Store<'_>,
        upstream: &Rc<Upstream>,
        authority: Text,
        (total, expose): (u64, bool),
    ) -> Result<ProxyResponse, ProxyError> {
        let cache = &self.worker.cache;
        let slice = cache.disk().and_then(|d| d.slice_size()).unwrap_or(total);
        let mut head = crate::fill::stored_head(&parts, &freshness, now);
        (head.expose_keys, head.disk) = (expose, s.disk());
        let field = |n: &str| req.headers.get(n).cloned();
        let guard = s.guard;
        let Some(entry) = cache.start_sliced(&s.key, &field, &head, (slice, total), guard) else {
            return Err(ProxyError::BadRequest("slices without a disk tier".into()));
        };
        if let Some(status) = s.status {
            status.set(CacheStatus::Miss(true));
        }
        if let (Some(sliced), Some(disk)) = (&entry.sliced, cache.disk()) {
            let (_, len) = sliced.bounds(0);
            let key = sliced.key_of(0);
            // The object's fetch is collapsed: no other fill of its first slice.
            let started = disk.start_slice_fill((&sliced.base, &key), (&entry, len), now);
            if let Some(SliceFill::Started(fill)) = started {
                let body = crate::fill::upstream_body(pooled, Some(len));
                evloop::spawn_local(crate::body::finish_fill(body, fill));
            }
        }
        if s.refresh {
            return Ok(ProxyResponse {
                status: entry.status,
                head_h1: None,
                headers: handler::FieldList::new(),
                body: Body::ready(Vec::new()),
            });
        }
        self.serve(entry, &req, &authority, now, Some(upstream))
            .await
    }

    /// The body of a sliced object `entry` (bytes `first..=last` of it, or all), read
    /// from its slices as it is sent.
    pub(crate) fn sliced_body(
        &self,
        entry: &Arc<Entry>,
        (req, authority, upstream): (&ProxyRequest, &str, &Rc<Upstream>),
        range: Option<(u64, u64)>,
    ) -> Option<Body> {
        let sliced = entry.sliced.clone()?;
        let (first, end) = range.map_or((0, sliced.total), |(f, l)| (f, l + 1));
        let mut req = req.clone();
        (req.body, req.streamed, req.notes) = (Bytes::new(), None, None);
        let at = Rc::new(At {
            edge: self.clone(),
            upstream: upstream.clone(),
            req,
            authority: Text::from(authority),
            entry: entry.clone(),
            sliced,
        });
        Some(Body {
            length: Some(end - first),
            kind: BodyKind::Sliced(Box::new(SlicedBody {
                at,
                next: first,
                end,
                slice_end: first,
                current: None,
                opening: None,
            })),
        })
    }
}

/// What fetching a sliced object's slices needs.
struct At {
    edge: Edge,
    upstream: Rc<Upstream>,
    req: ProxyRequest,
    authority: Text,
    /// The object (its head), and its slices.
    entry: Arc<Entry>,
    sliced: Arc<Sliced>,
}

type Opening = Pin<Box<dyn Future<Output = Result<Body, String>>>>;

/// Bytes `next..end` of a sliced object, a slice's part at a time.
struct SlicedBody {
    at: Rc<At>,
    next: u64,
    end: u64,
    /// Where the part being sent ends.
    slice_end: u64,
    current: Option<Box<Body>>,
    opening: Option<Opening>,
}

impl Pieces for SlicedBody {
    /// The next piece (bytes, or a file's region when `regions`), in order.
    fn poll_piece(
        &mut self,
        cx: &mut Context<'_>,
        regions: bool,
    ) -> Poll<Option<Result<Piece, PageError>>> {
        loop {
            if let Some(body) = &mut self.current {
                let piece = match regions {
                    true => body.poll_piece(cx),
                    false => body.poll_chunk(cx).map(|c| c.map(|r| r.map(Piece::Bytes))),
                };
                match piece {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(Ok(piece))) => {
                        self.next += match &piece {
                            Piece::Bytes(b) => b.len() as u64,
                            Piece::File(r) => r.len,
                        };
                        return Poll::Ready(Some(Ok(piece)));
                    }
                    Poll::Ready(Some(Err(e))) => return self.broken(e.to_string()),
                    Poll::Ready(None) if self.next < self.slice_end => {
                        return self.broken("a slice ended short".into())
                    }
                    Poll::Ready(None) => self.current = None,
                }
            }
            if let Some(opening) = &mut self.opening {
                match opening.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(body)) => {
                        self.opening = None;
                        self.current = Some(Box::new(body));
                        continue;
                    }
                    Poll::Ready(Err(e)) => return self.broken(e),
                }
            }
            if self.next >= self.end {
                return Poll::Ready(None);
            }
            let sliced = &self.at.sliced;
            let n = self.next / sliced.slice;
            let (first, len) = sliced.bounds(n);
            self.slice_end = (first + len).min(self.end);
            let part = (self.next - first, self.slice_end - 1 - first);
            self.opening = Some(Box::pin(open(self.at.clone(), n, part)));
        }
    }
}

impl SlicedBody {
    fn broken(&mut self, why: String) -> Poll<Option<Result<Piece, PageError>>> {
        (self.next, self.current, self.opening) = (self.end, None, None);
        Poll::Ready(Some(Err(PageError::Disk(format!("sliced object: {why}")))))
    }
}

/// Bytes `a..=b` of slice `n`: from disk, from its fill under way, or fetched (and
/// written to disk as it is read, when the tier takes it).
async fn open(at: Rc<At>, n: u64, (a, b): (u64, u64)) -> Result<Body, String> {
    let sliced = &at.sliced;
    let Some(disk) = at.edge.worker.cache.disk() else {
        return Err("no disk tier".into());
    };
    let now = crate::clock::now_ms();
    let key = sliced.key_of(n);
    let base = sliced.base.as_str();
    if let Some(on_disk) = disk
        .slice_body((base, &key), sliced.etag.as_ref(), now)
        .await
    {
        return Ok(Body::disk(on_disk.stream(Some((a, b)))));
    }
    let (first, len) = sliced.bounds(n);
    let fill = match disk.start_slice_fill((base, &key), (&at.entry, len), now) {
        Some(SliceFill::Filling(reader)) => {
            return Ok(Body::disk(reader.body(key).stream(Some((a, b)))));
        }
        Some(SliceFill::Started(fill)) => Some(fill),
        None => None,
    };
    if let Some(fill) = fill {
        let reader = fill.reader().body(key);
        let fetching = at.clone();
        evloop::spawn_local(async move {
            match fetch(&fetching, (first, first + len - 1)).await {
                Ok(pooled) => {
                    let body = crate::fill::upstream_body(pooled, Some(len));
                    crate::body::finish_fill(body, fill).await;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "slice not fetched");
                    drop(fill);
                }
            }
        });
        return Ok(Body::disk(reader.stream(Some((a, b)))));
    }
    // The tier does not take it: these bytes alone, passed through.
    let pooled = fetch(&at, (first + a, first + b)).await?;
    Ok(crate::fill::upstream_body(pooled, Some(b - a + 1)))
}

/// Asks the origin for bytes `first..=last` of the object: its 206 of them, of the
/// object's length and ETag. Anything else means the object changed: it is dropped from
/// disk (its head and slices).
async fn fetch(at: &At, (first, last): (u64, u64)) -> Result<Pooled, String> {
    let worker = &at.edge.worker;
    let fields = range_fields(&at.req.headers, (first, last));
    let out = Outgoing {
        method: &Method::GET,
        target: &at.req.target,
        fields: Fields::Forwarded(Forwarded {
            client_headers: &fields,
            client: &at.req.client,
            token: worker.config.esi.device_token.as_str(),
            identity: false,
            whole: false,
            revalidate: None,
            host: &at.authority,
            request_id: at.req.request_id,
        }),
        body: &at.req.body,
        streamed: None,
        upgrade: None,
        notes: None,
        trace: None,
    };
    let deadline = evloop::time::now() + at.upstream.response_timeout;
    let (parts, pooled) = at
        .upstream
        .send(&out, deadline)
        .await
        .map_err(|e| e.to_string())?;
    let sliced = &at.sliced;
    let etag = parts.headers.get(b"etag");
    let same = parts.status == StatusCode::PARTIAL_CONTENT
        && content_range(&parts.headers) == Some((first, last, sliced.total))
        && sliced.etag.as_deref().map_or(true, |e| etag == Some(e));
    if !same {
        if let Some(disk) = worker.cache.disk() {
            disk.purge(&sliced.base);
        }
        return Err(format!(
            "changed at the origin: {} to bytes {first}-{last}",
            parts.status
        ));
    }
    Ok(pooled)
}
