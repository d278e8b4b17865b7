//! Parallel assembly of one ESI page, streamed in document order.
//!
//! Every include is started the moment its template is evaluated: the page's includes
//! when the page arrives, a fragment's includes when that fragment arrives (inside the
//! include's own task, not when the writer reaches it), so all levels are fetched at
//! once. Each include is a local task that yields an [`Outcome`]. One more task, the
//! writer, walks the page's items in order: it queues bytes that are ready and, before it
//! waits on an include that is not finished, sends what it has queued, so the client gets
//! the prefix before a slow fragment. Output that might still be discarded (an
//! `esi:attempt`, or an ESI fragment whose include has `onerror="continue"`) is held until
//! it is decided.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use esi::{Evaluation, FragmentFailed, IncludeFailed, IncludeRequest, Item, Template};
use evloop::time::timeout_at;
use evloop::{AbortHandle, JoinHandle};
use http::header::{HeaderMap, HeaderValue};
use tokio::sync::{mpsc, Semaphore};

use super::fetch::{self, FragmentTarget};
use crate::config::PagePolicy;
use crate::error::PageError;
use crate::metrics;
use crate::worker::Worker;

/// What one include turned into.
enum Outcome {
    Failed,
    Body(Bytes),
    Esi(Rc<Doc>),
}

enum Slot {
    Ready(Outcome),
    Pending(JoinHandle<Outcome>),
    Taken,
}

/// One evaluated template (the page or an ESI fragment) and its includes' slots.
struct Doc {
    ev: Evaluation,
    slots: Vec<RefCell<Slot>>,
}

/// What a page's includes share.
pub(crate) struct PageCtx {
    worker: Rc<Worker>,
    page_authority: String,
    page_headers: HeaderMap,
    includes: Cell<usize>,
    concurrency: Semaphore,
    tasks: Rc<RefCell<Vec<AbortHandle>>>,
    default_timeout: Duration,
    /// Where each include's outcome is noted for the access log, when it is.
    notes: Option<handler::LogNotes>,
    /// The page request's trace context: each fragment fetch is a child span of it.
    trace: Option<trace::Context>,
}

impl PageCtx {
    /// Notes an include whose source is `src` for the access log (when it is noted).
    fn note(&self, src: &str, answered: bool) {
        if let Some(notes) = &self.notes {
            notes.fragment(src, answered);
        }
    }
}

/// Aborts a page's include tasks when the page is dropped (client gone, or done).
struct AbortAll(Rc<RefCell<Vec<AbortHandle>>>);

impl Drop for AbortAll {
    fn drop(&mut self) {
        for t in self.0.borrow().iter() {
            t.abort();
        }
    }
}

/// Starts assembling `template` for `req`: all includes are requested now, and the
/// returned channel yields the page's bytes in order, ending with `Err` if the page
/// fails. `page_headers` are the page request's forwarded headers (fragment requests
/// derive theirs from them). `notes`: where each include's outcome is noted for the
/// access log, when it is; `trace`: the page request's trace context.
pub(crate) fn start(
    worker: Rc<Worker>,
    template: &Template,
    req: &esi::Request,
    (page_authority, page_headers): (String, HeaderMap),
    (notes, trace): (Option<handler::LogNotes>, Option<trace::Context>),
) -> (mpsc::Receiver<Result<Bytes, PageError>>, AbortHandle) {
    let esi = &worker.config.esi;
    let tasks = Rc::new(RefCell::new(Vec::new()));
    let ctx = Rc::new(PageCtx {
        page_authority,
        page_headers,
        includes: Cell::new(0),
        concurrency: Semaphore::new(esi.max_concurrency),
        tasks: tasks.clone(),
        default_timeout: crate::config::secs(esi.include_timeout),
        worker: worker.clone(),
        notes,
        trace,
    });
    let policy = esi.on_failure;
    let doc = start_doc(&ctx, template, req, 0);
    // Small: the writer runs ahead of a slow client by at most this many chunks.
    let (tx, rx) = mpsc::channel(16);
    let writer = evloop::spawn_local(async move {
        let _abort = AbortAll(tasks);
        let mut sink = Sink {
            tx,
            queued: Vec::new(),
            hold: 0,
            policy,
        };
        let end = doc.ev.items().len();
        match emit(&doc, 0, end, &mut sink).await {
            Ok(()) => match sink.flush(true).await {
                Ok(()) => metrics::page(metrics::Page::Complete),
                Err(_) => metrics::page(metrics::Page::Abandoned),
            },
            Err(Stop::Failed(e)) => {
                tracing::debug!(error = %e, "ESI page failed");
                metrics::page(metrics::Page::Failed);
                let _ = sink.tx.send(Err(PageError::IncludeFailed(e))).await;
            }
            Err(Stop::ClientGone) => metrics::page(metrics::Page::Abandoned),
        }
        drop(ctx);
    });
    (rx, writer.abort_handle())
}

fn start_doc(ctx: &Rc<PageCtx>, template: &Template, req: &esi::Request, depth: usize) -> Rc<Doc> {
    let ev = template.evaluate(req);
    let slots = ev
        .includes()
        .iter()
        .map(|inc| RefCell::new(start_include(ctx, inc, req, depth + 1)))
        .collect();
    Rc::new(Doc { ev, slots })
}

fn start_include(
    ctx: &Rc<PageCtx>,
    inc: &IncludeRequest,
    req: &esi::Request,
    depth: usize,
) -> Slot {
    let esi = &ctx.worker.config.esi;
    if depth > esi.max_depth {
        tracing::debug!(src = %inc.src, depth, "include too deep");
        ctx.note(&inc.src, false);
        return Slot::Ready(Outcome::Failed);
    }
    let n = ctx.includes.get() + 1;
    ctx.includes.set(n);
    if n > esi.max_includes {
        tracing::debug!(src = %inc.src, "too many includes on the page");
        ctx.note(&inc.src, false);
        return Slot::Ready(Outcome::Failed);
    }
    // Refusals are decided now, so a page whose include is refused can still get a 502
    // before any byte is sent.
    let targets: Vec<_> = std::iter::once(&inc.src)
        .chain(inc.alt.as_ref())
        .filter_map(|url| {
            // The same refusals as `tessera esi render` (esi::render_sync): a URL that
            // cannot be requested, or one that would include its own page.
            if !esi::is_valid_url(url) || req.includes_itself(url) {
                tracing::debug!(%url, "include refused: not a URL, or includes its own page");
                return None;
            }
            let mut t =
                fetch::fragment_target(&ctx.worker, url, &ctx.page_authority, &ctx.page_headers);
            if t.is_none() {
                // Debug, not warn: a cookie substituted into a URL can make any number of
                // these, and a log line each would hand attackers the log.
                tracing::debug!(%url, "include refused: host not allowed");
            }
            if let Some(t) = &mut t {
                t.ttl = inc.ttl;
                t.trace = ctx.trace;
                if inc.no_store {
                    t.cache_key = None;
                }
            }
            // An upstream whose peers are all down fails the include at once, unless the cache holds an
            // object it may serve instead (stale-if-error).
            t.filter(|t| !fetch::refused_now(t) || fetch::has_stale(&ctx.worker, t))
                .map(|t| (url.clone(), t))
        })
        .collect();
    if targets.is_empty() {
        ctx.note(&inc.src, false);
        return Slot::Ready(Outcome::Failed);
    }
    let timeout = inc.timeout.unwrap_or(ctx.default_timeout);
    // The source noted with the outcome, only when notes are kept.
    let src = ctx.notes.as_ref().map(|_| inc.src.clone());
    let resolving = resolve(ctx.clone(), targets, (timeout, src), req.clone(), depth);
    let task = evloop::spawn_local(resolving);
    ctx.tasks.borrow_mut().push(task.abort_handle());
    Slot::Pending(task)
}

/// Fetches src, then alt, each within the include's timeout (waiting for the page's
/// concurrency limit counts), and starts the includes of an ESI fragment at once.
/// `src`: the include's source, when its outcome is noted for the access log.
async fn resolve(
    ctx: Rc<PageCtx>,
    targets: Vec<(String, FragmentTarget)>,
    (timeout, src): (Duration, Option<String>),
    req: esi::Request,
    depth: usize,
) -> Outcome {
    let note = |answered: bool| {
        if let Some(src) = &src {
            ctx.note(src, answered);
        }
    };
    for (i, (url, target)) in targets.into_iter().enumerate() {
        let started = evloop::time::now();
        let deadline = started + timeout;
        let fetched = timeout_at(deadline, async {
            let _permit = ctx.concurrency.acquire().await;
            fetch::fragment(&ctx.worker, target, deadline).await
        })
        .await;
        let micros = evloop::time::now()
            .saturating_duration_since(started)
            .as_micros() as u64;
        metrics::fragment(
            match &fetched {
                Ok(Ok(_)) => metrics::Fragment::Ok,
                Ok(Err(_)) => metrics::Fragment::Error,
                Err(_) => metrics::Fragment::Timeout,
            },
            micros,
        );
        match fetched {
            Ok(Ok(f)) => {
                if i > 0 {
                    metrics::absorbed(metrics::Absorbed::Alt);
                }
                note(true);
                return match &f.template {
                    Some(t) => Outcome::Esi(start_doc(&ctx, t, &req.for_fragment(&url), depth)),
                    None => Outcome::Body(f.body.clone()),
                };
            }
            Ok(Err(e)) => tracing::debug!(%url, error = %e, "fragment failed"),
            Err(_) => tracing::debug!(%url, ?timeout, "fragment timed out"),
        }
    }
    note(false);
    Outcome::Failed
}

enum Stop {
    /// An include failed with nothing to absorb it.
    Failed(IncludeFailed),
    /// The receiver is gone.
    ClientGone,
}

struct Sink {
    tx: mpsc::Sender<Result<Bytes, PageError>>,
    queued: Vec<Bytes>,
    /// Enclosing constructs that may still discard output (attempts, continue-on-error
    /// ESI fragments). While it is above zero nothing is sent.
    hold: usize,
    policy: PagePolicy,
}

impl Sink {
    async fn flush(&mut self, force: bool) -> Result<(), Stop> {
        if self.hold > 0 && !force {
            return Ok(());
        }
        for b in self.queued.drain(..) {
            if !b.is_empty() {
                self.tx.send(Ok(b)).await.map_err(|_| Stop::ClientGone)?;
            }
        }
        Ok(())
    }
}

type Emit<'a> = Pin<Box<dyn Future<Output = Result<(), Stop>> + 'a>>;

/// Writes items `start..end` of `doc` to `sink`, in order.
fn emit<'a>(doc: &'a Doc, start: usize, end: usize, sink: &'a mut Sink) -> Emit<'a> {
    Box::pin(async move {
        let items = doc.ev.items();
        let mut i = start;
        while i < end {
            match &items[i] {
                Item::Bytes(b) => sink.queued.push(b.clone()),
                Item::Include(id) => {
                    let inc = &doc.ev.includes()[*id];
                    let slot = doc.slots[*id].replace(Slot::Taken);
                    let outcome = match slot {
                        Slot::Ready(o) => o,
                        Slot::Pending(task) => {
                            if !task.is_finished() {
                                sink.flush(false).await?;
                            }
                            task.await.unwrap_or(Outcome::Failed)
                        }
                        Slot::Taken => Outcome::Failed,
                    };
                    let ok = match outcome {
                        Outcome::Body(b) => {
                            sink.queued.push(b);
                            true
                        }
                        Outcome::Esi(child) => {
                            let absorb = inc.continue_on_error;
                            if absorb && any_pending(&child, 0, child.ev.items().len()) {
                                sink.flush(false).await?;
                            }
                            let mark = sink.queued.len();
                            sink.hold += usize::from(absorb);
                            let r = emit(&child, 0, child.ev.items().len(), sink).await;
                            sink.hold -= usize::from(absorb);
                            match r {
                                Ok(()) => true,
                                Err(Stop::ClientGone) => return Err(Stop::ClientGone),
                                Err(Stop::Failed(e)) if !absorb => return Err(Stop::Failed(e)),
                                Err(Stop::Failed(_)) => {
                                    sink.queued.truncate(mark);
                                    false
                                }
                            }
                        }
                        Outcome::Failed => false,
                    };
                    if !ok {
                        count_failure(inc.continue_on_error, sink);
                    }
                    if !ok && !inc.continue_on_error {
                        // Unabsorbed here: an enclosing try (or include) may absorb it;
                        // at the top, the page policy decides.
                        if sink.hold > 0 || sink.policy == PagePolicy::Fail {
                            return Err(Stop::Failed(IncludeFailed {
                                include: *id,
                                src: inc.src.clone(),
                            }));
                        }
                    }
                }
                Item::Try {
                    attempt_end,
                    end: block_end,
                } => {
                    // The attempt is held until decided: send the prefix first if the
                    // attempt will have to wait.
                    if any_pending(doc, i + 1, *attempt_end) {
                        sink.flush(false).await?;
                    }
                    let mark = sink.queued.len();
                    sink.hold += 1;
                    let r = emit(doc, i + 1, *attempt_end, sink).await;
                    sink.hold -= 1;
                    match r {
                        Ok(()) => {}
                        Err(Stop::ClientGone) => return Err(Stop::ClientGone),
                        Err(Stop::Failed(_)) => {
                            metrics::absorbed(metrics::Absorbed::Except);
                            sink.queued.truncate(mark);
                            // Its includes were started with the page; they are not
                            // needed now.
                            abort_range(doc, i + 1, *attempt_end);
                            emit(doc, *attempt_end, *block_end, sink).await?;
                        }
                    }
                    i = *block_end;
                    continue;
                }
            }
            i += 1;
        }
        Ok(())
    })
}

/// Counts a failed include where its failure is decided: its own `onerror="continue"`,
/// or at the top the page policy. Inside an attempt or an absorbing fragment the
/// enclosing construct decides (and counts).
fn count_failure(continue_on_error: bool, sink: &Sink) {
    let how = if continue_on_error {
        metrics::Absorbed::Continue
    } else if sink.hold > 0 {
        return;
    } else if sink.policy == PagePolicy::Fail {
        metrics::Absorbed::PageFailed
    } else {
        metrics::Absorbed::Omitted
    };
    metrics::absorbed(how);
}

fn any_pending(doc: &Doc, start: usize, end: usize) -> bool {
    doc.ev.items()[start..end].iter().any(|item| match item {
        Item::Include(id) => {
            matches!(&*doc.slots[*id].borrow(), Slot::Pending(t) if !t.is_finished())
        }
        _ => false,
    })
}

fn abort_range(doc: &Doc, start: usize, end: usize) {
    for item in &doc.ev.items()[start..end] {
        if let Item::Include(id) = item {
            if let Slot::Pending(t) = &*doc.slots[*id].borrow() {
                t.abort();
            }
        }
    }
}

/// The page assembled at once when every include, at every level, is fresh in the
/// memory cache: the chunks are the template's literal bytes and the cached bodies
/// themselves, nothing is spawned and nothing copied. `None` as soon as one include is
/// not (or is not cacheable, or would be refused): the caller assembles the page the
/// streaming way, which applies the failure policy.
pub(crate) fn assemble_cached(
    worker: &Worker,
    template: &Template,
    req: &esi::Request,
    page_authority: &str,
    page_headers: &HeaderMap,
    now: u64,
) -> Option<CachedPage> {
    let mut includes = 0;
    let mut out = Vec::new();
    let walk = CachedWalk {
        worker,
        page_authority,
        page_headers,
        now,
        request_independent: Cell::new(true),
        fresh_until: Cell::new(u64::MAX),
    };
    walk.walk(template, req, 0, &mut includes, &mut out)?;
    metrics::page(metrics::Page::Complete);
    Some(CachedPage {
        includes,
        chunks: out,
        request_independent: walk.request_independent.get(),
        fresh_until: walk.fresh_until.get(),
    })
}

/// A page assembled from the cache.
pub(crate) struct CachedPage {
    /// Its includes, at every level.
    pub(crate) includes: usize,
    pub(crate) chunks: Vec<Bytes>,
    /// No template read a variable and no fragment varies: any request for this page
    /// would get the same chunks.
    pub(crate) request_independent: bool,
    /// When the first of its fragments stops being fresh (Unix ms).
    pub(crate) fresh_until: u64,
}

struct CachedWalk<'a> {
    worker: &'a Worker,
    page_authority: &'a str,
    page_headers: &'a HeaderMap,
    now: u64,
    request_independent: Cell<bool>,
    fresh_until: Cell<u64>,
}

impl CachedWalk<'_> {
    fn walk(
        &self,
        template: &Template,
        req: &esi::Request,
        depth: usize,
        includes: &mut usize,
        out: &mut Vec<Bytes>,
    ) -> Option<()> {
        let esi = &self.worker.config.esi;
        if !template.variables().is_empty() {
            self.request_independent.set(false);
        }
        let ev = template.evaluate(req);
        let mut missing = false;
        let chunks = ev.assemble(|_, inc, chunks| {
            *includes += 1;
            let found = (depth < esi.max_depth && *includes <= esi.max_includes && !inc.no_store)
                .then(|| fetch::fragment_cache_key(self.worker, &inc.src, self.page_authority))
                .flatten()
                .and_then(|(key, authority, credentials)| {
                    let field =
                        |n: &str| fragment_field(self.page_headers, n, &authority, credentials);
                    self.worker.cache.lookup(&key, &field, self.now)
                })
                .filter(|e| e.is_fresh(self.now));
            let done = match &found {
                None => None,
                Some(e) => {
                    if e.headers.contains(b"vary") {
                        self.request_independent.set(false);
                    }
                    self.fresh_until
                        .set(self.fresh_until.get().min(e.fresh_until()));
                    match &e.template {
                        None => {
                            chunks.push(e.body.clone());
                            Some(())
                        }
                        Some(t) => {
                            let fragment_req = req.for_fragment(&inc.src);
                            self.walk(t, &fragment_req, depth + 1, includes, chunks)
                        }
                    }
                }
            };
            if done.is_none() {
                missing = true;
                return Err(FragmentFailed);
            }
            Ok(())
        });
        if missing {
            return None;
        }
        out.extend(chunks.ok()?);
        Some(())
    }
}

/// The value a fragment request would carry for `name` (the rules of
/// `headers::fragment_request`), from the page request's own headers. The fields the
/// proxy adds when forwarding (X-Forwarded-For, Via, Surrogate-Capability) are answered
/// `None`: a stored object that varies on them has a non-empty value there, so it never
/// matches and the streaming path, which has the real values, decides.
fn fragment_field(
    page_headers: &HeaderMap,
    name: &str,
    authority: &str,
    credentials: bool,
) -> Option<HeaderValue> {
    match name {
        "host" => HeaderValue::from_str(authority).ok(),
        "x-forwarded-proto" => Some(HeaderValue::from_static("http")),
        "x-forwarded-for" | "via" | "surrogate-capability" => None,
        "cookie" | "authorization" if !credentials => None,
        _ if crate::headers::NOT_FOR_FRAGMENTS.contains(&name) => None,
        _ => page_headers.get(name).cloned(),
    }
}
