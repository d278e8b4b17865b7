//! Error pages (`error_page`): a response of an error status replaced by the page at a
//! URI (routed by the site's rules, then a file of the site's root; its status kept), or
//! by the answer of the request sent again to a named upstream (`@upstream:NAME`, nginx's
//! `error_page 502 = @fallback`).

use std::rc::Rc;
use std::sync::Arc;

use handler::{Answer, Attached, Body, Deferred, LocalFuture, Response, ResponseHead};
use handler::{UpstreamReply, UpstreamRequest, Upstreams};
use rules::Page;

use super::filter::filter_response;
use crate::facts::ConnFacts;
use crate::files;
use crate::generation::Generation;
use crate::net::output::{Mark, Output};
use crate::routing::{self, PageAt};
use crate::worker::Worker;

/// A route's error pages (`error_page`, its own and its host's).
#[derive(Clone)]
pub(crate) struct Pages {
    table: Arc<rules::Table>,
    rule: Option<usize>,
    site: usize,
    /// The client's address and whether the connection is TLS (for the rules that
    /// route a page's URI).
    client: (std::net::SocketAddr, bool),
}

impl Pages {
    /// The pages of the route `rule` of `site`, `None` when it and its host have none.
    pub(crate) fn of(
        gen: &Generation,
        site: usize,
        rule: Option<usize>,
        conn: &ConnFacts,
    ) -> Option<Pages> {
        let table = &gen.rules[site];
        table.has_pages(rule).then(|| Pages {
            table: table.clone(),
            rule,
            site,
            client: (conn.client, conn.secure()),
        })
    }

    /// The page for `status` as a response of that status (a redirect a rule makes of it
    /// keeps its own), when there is one: what the site's rules make of its URI, else the
    /// file there, when the site's root has it.
    pub(crate) fn page(&self, worker: &Worker, status: u16) -> Option<Response> {
        let Page::File(uri) = self.table.page(self.rule, status)? else {
            return None;
        };
        let current = worker.current();
        let sites = &current.gen.sites;
        let site = sites.all().get(self.site)?;
        let exists = |p: &[u8]| files::exists(p, worker, site);
        match routing::page(&self.table, uri, self.client, &exists) {
            PageAt::Answer(mut response) => {
                if !(300..400).contains(&response.head.status()) {
                    response.head.set_status(status);
                }
                Some(response)
            }
            PageAt::Files(path, alias) => {
                files::page(status, &path, worker, sites.serving(self.site, alias))
            }
        }
    }

    /// The upstream that answers a response of `status` in its place, if any.
    pub(crate) fn fallback(&self, status: u16) -> Option<&str> {
        match self.table.page(self.rule, status)? {
            Page::Upstream(name) => Some(name),
            Page::File(_) => None,
        }
    }

    /// Whether an upstream answers in place of some status on this route.
    pub(crate) fn any_fallback(&self) -> bool {
        self.table.upstream_page(self.rule)
    }

    /// Puts the page for `response`'s status in its place, when there is one.
    pub(crate) fn replace(&self, worker: &Worker, response: &mut Response) {
        if let Some(page) = self.page(worker, response.head.status()) {
            *response = page;
        }
    }
}

/// The site's page for the error the files just answered (a 404), taken back from the
/// output and filtered, when there is one; or, when the route's error pages name an
/// upstream for it, the request to send there instead.
pub(crate) fn error_page(
    worker: &Worker,
    (out, mark): (&mut Output, Mark),
    pages: Option<&Pages>,
    filters: &mut Option<&mut dyn Attached>,
    req: &wire::Request<'_, '_>,
) -> Option<Result<Response, handler::Later>> {
    let pages = pages?;
    let status = out
        .fields()
        .map_or_else(|| out.since(mark).0, |f| f.status());
    if let Some(Answer::Later(again)) = fallback(worker, Some(pages), status, req) {
        return out.rewind(mark).then_some(Err(again));
    }
    let mut page = pages.page(worker, status)?;
    if !out.rewind(mark) {
        return None;
    }
    if let Some(f) = filters.as_deref_mut() {
        filter_response(f, &mut page);
    }
    Some(Ok(page))
}

/// A request to send again to an upstream in place of an error response: what of it is
/// kept for that (made only on a route whose error pages name an upstream).
pub(crate) struct Again {
    method: String,
    target: String,
    headers: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Again {
    /// `req` as it would go again (its body is not kept: a fallback gets none).
    pub(crate) fn of(req: &wire::Request<'_, '_>) -> Again {
        const HOP: [&str; 7] = [
            "connection",
            "keep-alive",
            "te",
            "transfer-encoding",
            "upgrade",
            "proxy-connection",
            "content-length",
        ];
        let target = match req.path.first() {
            Some(b'?') => format!("/{}", String::from_utf8_lossy(req.path)),
            _ => String::from_utf8_lossy(req.path).into_owned(),
        };
        Again {
            method: req.method_token.to_string(),
            target,
            headers: req
                .headers
                .iter()
                .filter(|h| !HOP.iter().any(|n| h.name.eq_ignore_ascii_case(n)))
                .map(|h| (h.name.as_bytes().to_vec(), h.value.to_vec()))
                .collect(),
        }
    }

    /// Sends it to `upstream` through the worker's client; its answer as a relayed
    /// response, or 502 when it fails.
    pub(crate) async fn send(
        self,
        upstreams: Rc<dyn Upstreams>,
        upstream: String,
    ) -> Result<Response, u16> {
        let request = UpstreamRequest {
            upstream: upstream.clone(),
            method: self.method,
            target: self.target,
            headers: self.headers,
            body: bytes::Bytes::new(),
            max_body: MAX_FALLBACK_BODY,
        };
        match upstreams.call(request).await {
            Ok(reply) => Ok(relayed(reply)),
            Err(e) => {
                tracing::warn!(upstream, error = %e, "error_page: the fallback upstream failed");
                Err(502)
            }
        }
    }
}

/// Most body bytes of a fallback's answer (it is read whole).
const MAX_FALLBACK_BODY: usize = 8 << 20;

/// An upstream's whole answer as the response sent on.
fn relayed(reply: UpstreamReply) -> Response {
    let mut head = ResponseHead::new(reply.status);
    for (name, value) in &reply.headers {
        if !wire::is_framing_field(name) {
            head.append(name, value);
        }
    }
    Response {
        head,
        body: Body::Full(reply.body),
        relayed: true,
    }
}

/// The request sent again to an upstream, as the handler of a response that waits:
/// for an error the files or a handler answered at once.
struct Fallback {
    again: Again,
    upstreams: Rc<dyn Upstreams>,
    upstream: Box<str>,
}

impl Deferred for Fallback {
    fn respond(self, _body: bytes::Bytes) -> LocalFuture<Result<Response, u16>> {
        handler::local_future(self.again.send(self.upstreams, self.upstream.into()))
    }
}

/// The answer that sends `req` again to the upstream the route's error pages name for
/// `status`, when they name one and the worker has a client of upstreams.
pub(crate) fn fallback(
    worker: &Worker,
    pages: Option<&Pages>,
    status: u16,
    req: &wire::Request<'_, '_>,
) -> Option<Answer> {
    let upstream = pages?.fallback(status)?;
    let upstreams = worker.current().upstreams.clone()?;
    Some(Answer::later(Fallback {
        again: Again::of(req),
        upstreams,
        upstream: upstream.into(),
    }))
}
