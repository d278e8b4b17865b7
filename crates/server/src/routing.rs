//! The sites' rules (crate `rules`: `[[route]]` matchers and actions, response edits) at
//! work on one request, before the modules and the files: a rule answers (`respond`,
//! `redirect`), rewrites the request and routes it again (`rewrite`), or lets it go to
//! whatever serves its path, with the response edits of its host and route wrapped
//! around the answer as a filter ([`EditFilter`]).

use std::sync::Arc;

use handler::{Attached, Body, Filter, Response, ResponseHead};
use rules::{Action, Ctx, Fallback, Table};

/// What the rules decided for a request. By default (no route), it goes to whatever
/// serves its path: modules by prefix, then the files.
#[derive(Default)]
pub(crate) struct Decided {
    /// A rule answered it (or a rewrite loop is answered 500).
    pub response: Option<Response>,
    /// The response edits of its host and route, around whatever answers.
    pub edits: Option<EditFilter>,
    /// The request target a rule rewrote it to (`rewrite`, `try_files`, `strip_prefix`).
    pub target: Option<Vec<u8>>,
    /// The route chosen (for a module's, its handler; for every one, its error pages).
    pub rule: Option<usize>,
    /// The route's `request_headers`, for [`edit_request`].
    pub request_edits: Option<RequestEdits>,
    /// The static files serve it (a file `try_files` found, an `alias`), whatever module
    /// a prefix of its path has.
    pub files: bool,
    /// From the directory of this `alias` route, at the path that follows its prefix.
    pub alias: Option<usize>,
}

impl Decided {
    fn answer(response: Response, edits: Option<EditFilter>, rule: usize) -> Decided {
        Decided {
            response: Some(response),
            edits,
            rule: Some(rule),
            ..Decided::default()
        }
    }
}

/// Where an error page's URI leads.
pub(crate) enum PageAt {
    /// A rule answers it (`respond`, `redirect`, a `try_files` status).
    Answer(Response),
    /// The files serve this normalised path (from the directory of this `alias` route).
    Files(Vec<u8>, Option<usize>),
}

/// Routes an error page's URI (`error_page = { "404" = "/errors/404" }`) through the
/// site's rules, as nginx's `error_page` makes an internal redirect: a GET of that URI,
/// with the request's client and scheme and no fields. A rule may answer it or rewrite
/// it (`rewrite`, `try_files`, `alias`); a route of a module (an upstream, a script)
/// does not run for a page: the files serve its path.
pub(crate) fn page(
    table: &Arc<Table>,
    uri: &[u8],
    client: (std::net::SocketAddr, bool),
    exists: &dyn Fn(&[u8]) -> bool,
) -> PageAt {
    let query_less = match memchr::memchr(b'?', uri) {
        Some(q) => &uri[..q],
        None => uri,
    };
    let mut path = Vec::new();
    if wire::normalize_path(query_less, &mut path).is_err() {
        return PageAt::Answer(Response::status_page(500));
    }
    if table.rules().is_empty() {
        return PageAt::Files(path, None);
    }
    let req = wire::Request {
        method: wire::Method::Get,
        method_token: "GET",
        target: uri,
        path: uri,
        version: wire::Version::Http11,
        headers: &[],
        head_len: 0,
        body: wire::BodyFraming::None,
        keep_alive: true,
        expect_continue: false,
    };
    let seen = Seen {
        req: &req,
        client,
        exists,
        request_id: None,
    };
    let decided = route(table, seen, &mut path);
    match decided.response {
        Some(response) => PageAt::Answer(response),
        None => PageAt::Files(path, decided.alias),
    }
}

/// What a request is known by, for the rules.
pub(crate) struct Seen<'a> {
    pub req: &'a wire::Request<'a, 'a>,
    /// The client's address and whether the connection is TLS.
    pub client: (std::net::SocketAddr, bool),
    /// Whether the static files have something at a normalised path (for `try_files`).
    pub exists: &'a dyn Fn(&[u8]) -> bool,
    /// The request's id, when its site uses one.
    pub request_id: Option<u128>,
}

/// Routes a request through its site's rules. `path` holds its normalised path, and
/// the normalised path of the target it is rewritten to when it is.
pub(crate) fn route(table: &Arc<Table>, seen: Seen<'_>, path: &mut Vec<u8>) -> Decided {
    let id = seen
        .request_id
        .map_or([0u8; 32], crate::facts::request_id_hex);
    let mut target: Option<Vec<u8>> = None;
    for _ in 0..=rules::MAX_REWRITES {
        let view;
        let req = match &target {
            Some(t) => {
                view = with_target(seen.req, t);
                &view
            }
            None => seen.req,
        };
        let ctx = ctx((req, seen.req.path), seen.client, path, &id);
        let Some(found) = table.find(&ctx) else {
            return Decided {
                edits: EditFilter::new(table, None, &ctx, &[]),
                target,
                ..Decided::default()
            };
        };
        let captured = (&path[..], &found.captures[..]);
        let edits = || EditFilter::new(table, Some(found.rule.index), &ctx, &found.captures);
        let new = match &found.rule.action {
            Action::Module => {
                let rule = found.rule;
                let request_edits = rule.request.as_ref().map(|e| {
                    let mut expanded = Vec::new();
                    e.expand(&ctx, captured, &mut expanded);
                    RequestEdits {
                        rule: rule.index,
                        expanded,
                    }
                });
                let (prefixed, edits) = (prefixed(rule, req.path, ctx.path), edits());
                return Decided {
                    edits,
                    target: prefixed.or(target),
                    rule: Some(rule.index),
                    request_edits,
                    ..Decided::default()
                };
            }
            Action::Respond {
                status,
                body,
                content_type,
            } => {
                let response = respond(*status, body, content_type, &ctx, captured);
                return Decided::answer(response, edits(), found.rule.index);
            }
            Action::Redirect { status, to } => {
                let mut location = Vec::new();
                to.expand(&ctx, captured, &mut location);
                rules::sanitize(&mut location);
                let mut response = Response::status_page(*status);
                response.head.append(b"Location", &location);
                return Decided::answer(response, edits(), found.rule.index);
            }
            Action::Rewrite { from, to } => {
                let mut new = Vec::new();
                match from {
                    Some(from) => {
                        let Some(caps) = from.captures(&path[..]) else {
                            // `from` does not match: the route does nothing more.
                            return Decided {
                                edits: edits(),
                                target,
                                ..Decided::default()
                            };
                        };
                        let spans: Vec<_> = caps
                            .iter()
                            .map(|m| m.map(|m| (m.start(), m.end())))
                            .collect();
                        to.expand_target(&ctx, (&path[..], &spans), &mut new);
                    }
                    None => to.expand_target(&ctx, captured, &mut new),
                }
                rewritten(&mut new, ctx.query());
                new
            }
            Action::Alias(_) => {
                let rule = found.rule;
                let edits = edits();
                if let rules::PathMatch::Prefix(prefix) = &rule.path {
                    let rest = path[prefix.len()..].to_vec();
                    path.clear();
                    if !rest.starts_with(b"/") {
                        path.push(b'/');
                    }
                    path.extend_from_slice(&rest);
                }
                return Decided {
                    edits,
                    target,
                    files: true,
                    alias: Some(rule.index),
                    rule: Some(rule.index),
                    ..Decided::default()
                };
            }
            Action::TryFiles { files, fallback } => {
                if let Some((target, normal)) = try_files(files, &ctx, captured, seen.exists) {
                    let edits = edits();
                    *path = normal;
                    return Decided {
                        edits,
                        target: Some(target),
                        files: true,
                        rule: Some(found.rule.index),
                        ..Decided::default()
                    };
                }
                match fallback {
                    Fallback::Status(status) => {
                        let page = Response::status_page(*status);
                        return Decided::answer(page, edits(), found.rule.index);
                    }
                    Fallback::Uri(uri) => {
                        let mut new = Vec::new();
                        uri.expand_target(&ctx, captured, &mut new);
                        match new.contains(&b'?') {
                            true => rewritten(&mut new, b""),
                            false => rewritten(&mut new, ctx.query()),
                        }
                        new
                    }
                }
            }
        };
        // Routed again, on the new target.
        let mut normal = Vec::new();
        if wire::normalize_path(query_less(&new), &mut normal).is_err() {
            return Decided::answer(Response::status_page(400), edits(), found.rule.index);
        }
        *path = normal;
        target = Some(new);
    }
    tracing::error!(
        "rewrite: more than {} rewrites of {:?}: answered 500",
        rules::MAX_REWRITES,
        String::from_utf8_lossy(seen.req.path)
    );
    Decided {
        response: Some(Response::status_page(500)),
        ..Decided::default()
    }
}

/// The first of `files` the static files have: its target (the request's query kept)
/// and its normalised path.
fn try_files(
    files: &[rules::Template],
    ctx: &Ctx<'_>,
    captured: (&[u8], &rules::Captures),
    exists: &dyn Fn(&[u8]) -> bool,
) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut candidate = Vec::new();
    let mut normal = Vec::new();
    for file in files {
        candidate.clear();
        file.expand(ctx, captured, &mut candidate);
        // A value is a decoded path (`$uri` is): escaped before it is read as a target.
        let mut target = Vec::with_capacity(candidate.len());
        for &b in &candidate {
            match b {
                b'%' | b'?' | b'#' => target.extend_from_slice(format!("%{b:02X}").as_bytes()),
                b'!'..=b'~' => target.push(b),
                _ => target.extend_from_slice(format!("%{b:02X}").as_bytes()),
            }
        }
        normal.clear();
        if wire::normalize_path(&target, &mut normal).is_ok() && exists(&normal) {
            let query = ctx.query();
            if !query.is_empty() {
                target.push(b'?');
                target.extend_from_slice(query);
            }
            return Some((target, normal));
        }
    }
    None
}

/// A route's `request_headers`: the route, and the values with variables expanded when
/// it was chosen (none for literal values: nothing is allocated for those).
pub(crate) struct RequestEdits {
    rule: usize,
    expanded: Vec<Vec<u8>>,
}

/// Whether the `request_headers` of the rule that chose a request set `X-Request-Id`
/// (or remove it): then the proxy sends what they made, not the request's id.
pub(crate) fn sets_request_id(table: &Table, edits: Option<&RequestEdits>) -> bool {
    let Some(edits) = edits else {
        return false;
    };
    table.rules()[edits.rule].request.as_ref().is_some_and(|e| {
        e.list
            .iter()
            .any(|e| e.name.eq_ignore_ascii_case(b"x-request-id"))
    })
}

/// The request's fields (`fields`) as its route's `request_headers` make them, into
/// `into` (emptied first, and reused from request to request by the caller).
pub(crate) fn edit_request<'a>(
    table: &'a Table,
    edits: &'a RequestEdits,
    fields: &[wire::Header<'a>],
    into: &mut Vec<wire::Header<'a>>,
) {
    into.clear();
    into.extend_from_slice(fields);
    if let Some(e) = table.rules()[edits.rule].request.as_ref() {
        e.apply_headers(into, &mut edits.expanded.iter().map(Vec::as_slice));
    }
}

/// A `respond` rule's response.
fn respond(
    status: u16,
    body: &rules::Template,
    content_type: &[u8],
    ctx: &Ctx<'_>,
    captured: (&[u8], &rules::Captures),
) -> Response {
    let mut bytes = Vec::new();
    body.expand(ctx, captured, &mut bytes);
    let mut head = ResponseHead::new(status);
    let body = match bytes.is_empty() {
        true => Body::Empty,
        false => {
            head.append(b"Content-Type", content_type);
            Body::Full(bytes.into())
        }
    };
    Response {
        head,
        body,
        relayed: false,
    }
}

/// The target the module sees after the route's `strip_prefix` and `add_prefix` (`None`
/// without them): the prefix comes off the path as sent when it starts with it, else off
/// the normalised path; the query stays.
fn prefixed(rule: &rules::Rule, target: &[u8], normal: &[u8]) -> Option<Vec<u8>> {
    if rule.strip_prefix.is_none() && rule.add_prefix.is_none() {
        return None;
    }
    let (raw, query) = match memchr::memchr(b'?', target) {
        Some(q) => (&target[..q], &target[q..]),
        None => (target, &b""[..]),
    };
    let mut rest = raw;
    let mut encode = false;
    if let Some(strip) = &rule.strip_prefix {
        if rules::takes(strip, raw) {
            rest = &raw[strip.len()..];
        } else if rules::takes(strip, normal) {
            rest = &normal[strip.len()..];
            encode = true;
        }
    }
    let mut new = rule.add_prefix.as_deref().unwrap_or_default().to_vec();
    if !rest.starts_with(b"/") {
        new.push(b'/');
    }
    for &b in rest {
        match b {
            // From the decoded path: `%`, `?` and `#` are its own bytes, not escapes,
            // a query or a fragment.
            b'%' | b'?' | b'#' if encode => new.extend_from_slice(format!("%{b:02X}").as_bytes()),
            b'!'..=b'~' => new.push(b),
            _ => new.extend_from_slice(format!("%{b:02X}").as_bytes()),
        }
    }
    new.extend_from_slice(query);
    Some(new)
}

/// A target a rewrite made, made whole: percent-encodes what cannot be in a target (a
/// decoded byte a capture brought), and appends the request's query after the new one
/// unless the rewrite ended with `?` (nginx's rule).
fn rewritten(new: &mut Vec<u8>, query: &[u8]) {
    let mut encoded = Vec::with_capacity(new.len());
    for &b in new.iter() {
        match b {
            b'!'..=b'~' => encoded.push(b),
            _ => encoded.extend_from_slice(format!("%{b:02X}").as_bytes()),
        }
    }
    *new = encoded;
    if new.last() == Some(&b'?') {
        new.pop();
        return;
    }
    if !query.is_empty() {
        new.push(if new.contains(&b'?') { b'&' } else { b'?' });
        new.extend_from_slice(query);
    }
}

fn query_less(target: &[u8]) -> &[u8] {
    match memchr::memchr(b'?', target) {
        Some(q) => &target[..q],
        None => target,
    }
}

/// `req` with another target (origin form).
pub(crate) fn with_target<'a>(
    req: &wire::Request<'a, 'a>,
    target: &'a [u8],
) -> wire::Request<'a, 'a> {
    view(req, Some(target), req.headers)
}

/// `req` as the rules made it, when they changed its target or its fields.
pub(crate) fn edited<'a>(
    req: &wire::Request<'a, 'a>,
    target: Option<&'a [u8]>,
    headers: Option<&'a [wire::Header<'a>]>,
) -> Option<wire::Request<'a, 'a>> {
    match (target, headers) {
        (None, None) => None,
        (target, headers) => Some(view(req, target, headers.unwrap_or(req.headers))),
    }
}

/// `req` with another target (origin form), when given, and other fields.
pub(crate) fn view<'a>(
    req: &wire::Request<'a, 'a>,
    target: Option<&'a [u8]>,
    headers: &'a [wire::Header<'a>],
) -> wire::Request<'a, 'a> {
    let (target, path) = match target {
        Some(t) => (t, t),
        None => (req.target, req.path),
    };
    wire::Request {
        method: req.method,
        method_token: req.method_token,
        target,
        path,
        version: req.version,
        headers,
        head_len: req.head_len,
        body: req.body,
        keep_alive: req.keep_alive,
        expect_continue: req.expect_continue,
    }
}

fn ctx<'a>(
    (req, original): (&'a wire::Request<'a, 'a>, &'a [u8]),
    (peer, secure): (std::net::SocketAddr, bool),
    path: &'a [u8],
    id: &'a [u8; 32],
) -> Ctx<'a> {
    Ctx {
        req,
        original,
        path,
        peer,
        secure,
        request_id: id,
    }
}

/// The response edits of a request's host and route, applied to whatever answers it as
/// a filter (before the route's own filter, a script's `header_filter`, which sees the
/// edited head). Values with variables are expanded when the request is routed.
pub(crate) struct EditFilter {
    table: Arc<Table>,
    rule: Option<usize>,
    expanded: Vec<Vec<u8>>,
    /// The route's own filter, run after the edits.
    pub(crate) inner: Option<Box<dyn Attached>>,
}

impl EditFilter {
    /// `None` when neither the host nor the route edits responses.
    fn new(
        table: &Arc<Table>,
        rule: Option<usize>,
        ctx: &Ctx<'_>,
        captures: &rules::Captures,
    ) -> Option<EditFilter> {
        let route = rule.and_then(|i| table.rules()[i].response.as_ref());
        if table.host_response.is_none() && route.is_none() {
            return None;
        }
        let mut expanded = Vec::new();
        for edits in table.host_response.iter().chain(route) {
            edits.expand(ctx, (ctx.path, captures), &mut expanded);
        }
        Some(EditFilter {
            table: table.clone(),
            rule,
            expanded,
            inner: None,
        })
    }
}

impl EditFilter {
    /// Whether it is the edits alone (no route filter after them), which
    /// [`EditFilter::edit_lines`] can apply: not when the route's edits set or remove a
    /// field the host's edit too (a field list gets that right, one pass over lines not).
    pub(crate) fn alone(&self) -> bool {
        let route = self
            .rule
            .and_then(|i| self.table.rules()[i].response.as_ref());
        let overlap = match (&self.table.host_response, route) {
            (Some(host), Some(route)) => route.list.iter().any(|r| {
                matches!(r.how, rules::How::Set | rules::How::Remove)
                    && host
                        .list
                        .iter()
                        .any(|h| h.name.eq_ignore_ascii_case(&r.name))
            }),
            _ => false,
        };
        self.inner.is_none() && !overlap
    }

    /// The route (`None`: no route, the host's edits) whose edits `reply::HeadWriter`
    /// can apply to a head as it writes it (`rules::LinePlan`), when it is the edits
    /// alone and they have such a plan.
    pub(crate) fn as_written(&self) -> Option<Option<usize>> {
        let planned = self.table.line_plan(self.rule, 200).is_some();
        (self.inner.is_none() && planned).then_some(self.rule)
    }

    /// Applies the edits to a head written as HTTP/1 lines (status line to blank line),
    /// writing the edited head into `out`: the lines they replace or remove left out,
    /// theirs appended. `false`, `out` untouched, when none applies to its status. A
    /// file's head is edited so, line by line, without being read into fields.
    pub(crate) fn edit_lines(&self, head: &[u8], out: &mut Vec<u8>) -> bool {
        let status = head
            .get(9..12)
            .and_then(|d| std::str::from_utf8(d).ok()?.parse::<u16>().ok())
            .unwrap_or(0);
        let route = self
            .rule
            .and_then(|i| self.table.rules()[i].response.as_ref());
        let host = self.table.host_response.as_ref();
        // The lists that apply to this status (at most two: the host's, the route's).
        let lists = [host, route].map(|l| l.filter(|e| e.apply_to(status)));
        if lists.iter().all(Option::is_none) {
            return false;
        }
        let Some(first) = memchr::memchr(b'\n', head) else {
            return false;
        };
        out.extend_from_slice(&head[..first + 1]);
        // Per edit (numbered across the lists, at most 64 tracked): whether a field of
        // its name is in the head, for `default`.
        let mut present = 0u64;
        for line in head[first + 1..].split_inclusive(|&b| b == b'\n') {
            if line == b"\r\n" {
                break;
            }
            let name = &line[..memchr::memchr(b':', line).unwrap_or(0)];
            let mut dropped = false;
            let edits = lists.iter().flatten().flat_map(|e| e.list.iter());
            for (index, edit) in edits.enumerate() {
                if edit.name.len() == name.len() && edit.name.eq_ignore_ascii_case(name) {
                    match edit.how {
                        rules::How::Set | rules::How::Remove => dropped = true,
                        _ if index < 64 => present |= 1 << index,
                        _ => {}
                    }
                }
            }
            if !dropped {
                out.extend_from_slice(line);
            }
        }
        let mut values = self.expanded.iter().map(Vec::as_slice);
        let mut index = 0;
        for (edits, applies) in [(host, lists[0].is_some()), (route, lists[1].is_some())] {
            for e in edits.iter().flat_map(|e| e.list.iter()) {
                let value = match (e.how, e.value.literal()) {
                    (rules::How::Remove, _) => None,
                    (_, Some(literal)) => Some(literal),
                    (_, None) => values.next(),
                };
                if !applies {
                    continue;
                }
                let here = index < 64 && present & (1 << index) != 0;
                index += 1;
                match (e.how, value) {
                    (rules::How::Default, _) if here => {}
                    (rules::How::Remove, _) | (_, None) => {}
                    (_, Some(value)) => {
                        wire::write_field(out, &e.name, value);
                        // A later `default` of the same name finds it there.
                        let later = lists.iter().flatten().flat_map(|l| l.list.iter());
                        for (j, l) in later.enumerate().skip(index).take(64 - index.min(64)) {
                            if l.name.eq_ignore_ascii_case(&e.name) {
                                present |= 1 << j;
                            }
                        }
                    }
                }
            }
        }
        out.extend_from_slice(b"\r\n");
        true
    }
}

impl Attached for EditFilter {
    fn response(&mut self, head: &mut ResponseHead, framed: bool) -> Filter {
        let status = head.status();
        let route = self
            .rule
            .and_then(|i| self.table.rules()[i].response.as_ref());
        let mut values = self.expanded.iter().map(Vec::as_slice);
        for edits in self.table.host_response.iter().chain(route) {
            if edits.apply_to(status) {
                edits.apply(head, &mut values);
            } else {
                // Skip its values, so the next list's line up.
                for _ in edits.expand_count() {
                    values.next();
                }
            }
        }
        match &mut self.inner {
            Some(inner) => inner.response(head, framed),
            None => Filter::Done,
        }
    }

    fn filters_body(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|inner| inner.filters_body())
    }

    fn body_filter(&mut self) -> Option<Box<dyn handler::BodyFilter>> {
        self.inner.as_mut().and_then(|inner| inner.body_filter())
    }
}
