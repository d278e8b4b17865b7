//! The responses the server makes itself, whatever handler a request was meant for:
//! the start of every head it generates, and the status pages of errors, refusals and
//! redirects (the page itself is `handler::write_status_page`, shared with the modules).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use wire::{Framing, Method, Request, Version};

use crate::facts::ConnFacts;
use crate::files::open::{EntryFields, FileEntry};
use crate::generation::Current;
use crate::net::output::Output;
use crate::worker::Worker;

/// Status line, Server and Date: how every response this server generates starts.
pub(crate) fn start_head(worker: &Worker, conn: &ConnFacts, buf: &mut Vec<u8>, status: u16) {
    wire::write_status_line(buf, status);
    buf.extend_from_slice(b"Server: tessera\r\n");
    worker.clock.write_date(buf);
    hsts(worker, conn, buf);
    write_alt_svc(worker, conn, buf);
}

/// Strict-Transport-Security, on a TLS connection when `[tls] hsts` is set.
pub(crate) fn hsts(worker: &Worker, conn: &ConnFacts, buf: &mut Vec<u8>) {
    if conn.secure() {
        let current = worker.current.borrow();
        if let Some(value) = &current.gen.config.tls.hsts {
            wire::write_field(buf, HSTS, value.as_bytes());
        }
    }
}

/// Alt-Svc, on a TLS connection over TCP when `quic_listen` is on (docs/http3.md).
pub(crate) fn write_alt_svc(worker: &Worker, conn: &ConnFacts, buf: &mut Vec<u8>) {
    if let Some(value) = conn.tls.as_ref().and_then(|tls| alt_svc(worker, tls)) {
        wire::write_field(buf, ALT_SVC, value);
    }
}

/// The Alt-Svc value a response on this TLS connection carries: none over QUIC itself,
/// or without `quic_listen`.
pub(crate) fn alt_svc<'w>(worker: &'w Worker, tls: &crate::facts::TlsFacts) -> Option<&'w [u8]> {
    worker.shared.alt_svc.as_deref().filter(|_| !tls.quic)
}

const HSTS: &[u8] = b"Strict-Transport-Security";
const ALT_SVC: &[u8] = b"Alt-Svc";

/// What a request decides of how its response is framed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terms {
    /// A response to HEAD: no content follows the head.
    pub head_only: bool,
    pub version: Version,
    pub keep_alive: bool,
}

/// Writes the head of a response the server makes itself (a file, a refusal, a
/// redirect): as HTTP/1 lines into the output batch, or, when the output takes fields
/// ([`Output::want_fields`], HTTP/2), as fields, which HTTP/2 encodes without reading
/// lines back. The body goes into the batch either way.
pub(crate) struct HeadWriter<'o> {
    out: &'o mut Output,
    /// The response edits applied as the lines are written ([`Output::edits`]): the
    /// generation that holds them, the site and the route.
    edits: Option<(Rc<Current>, usize, Option<usize>, u16)>,
}

impl<'o> HeadWriter<'o> {
    /// Starts a head: its status, then Server, Date, and HSTS on TLS when set.
    pub(crate) fn start(
        worker: &Worker,
        conn: &ConnFacts,
        out: &'o mut Output,
        status: u16,
    ) -> HeadWriter<'o> {
        let edits = match (out.fields(), out.edits) {
            (None, Some((site, rule))) => {
                let current = worker.current.borrow().clone();
                let has = current.gen.rules[site].line_plan(rule, status).is_some();
                has.then_some((current, site, rule, status))
            }
            _ => None,
        };
        match out.fields_mut() {
            None if edits.is_some() => {
                let writer = HeadWriter { out, edits };
                let keep_hsts = writer.plan().is_none_or(|p| p.keeps(HSTS));
                let buf = writer.out.buf();
                wire::write_status_line(buf, status);
                buf.extend_from_slice(b"Server: tessera\r\n");
                worker.clock.write_date(buf);
                if keep_hsts {
                    hsts(worker, conn, buf);
                }
                if writer.plan().is_none_or(|p| p.keeps(ALT_SVC)) {
                    write_alt_svc(worker, conn, writer.out.buf());
                }
                return writer;
            }
            None => start_head(worker, conn, out.buf(), status),
            Some(head) => {
                head.reset(status);
                head.append(b"Server", b"tessera");
                head.append(b"Date", &worker.clock.date_value());
                if let Some(tls) = &conn.tls {
                    let current = worker.current.borrow();
                    if let Some(value) = &current.gen.config.tls.hsts {
                        head.append(b"Strict-Transport-Security", value.as_bytes());
                    }
                    if let Some(value) = alt_svc(worker, tls) {
                        head.append(b"Alt-Svc", value);
                    }
                }
            }
        }
        HeadWriter { out, edits }
    }

    /// The response edits applied to this head as it is written, if any.
    fn plan(&self) -> Option<&rules::LinePlan> {
        let (current, site, rule, status) = self.edits.as_ref()?;
        current.gen.rules[*site].line_plan(*rule, *status)
    }

    pub(crate) fn field(&mut self, name: &[u8], value: &[u8]) {
        if !self.plan().is_none_or(|p| p.keeps(name)) {
            return;
        }
        match self.out.fields_mut() {
            None => wire::write_field(self.out.buf(), name, value),
            Some(head) => head.append(name, value),
        }
    }

    /// An open file's fields, kept pre-encoded in its cache entry: `lines`, one of the
    /// entry's blocks, copied whole as HTTP/1 writes them, or, for HTTP/2, shared with
    /// the entry and encoded from it.
    pub(crate) fn block(&mut self, entry: &Arc<FileEntry>, lines: &[u8]) {
        if let Some((current, site, rule, status)) = &self.edits {
            if let Some(plan) = current.gen.rules[*site].line_plan(*rule, *status) {
                if !plan.keeps_all() {
                    let buf = self.out.buf();
                    for line in lines.split_inclusive(|&b| b == b'\n') {
                        let name = &line[..memchr::memchr(b':', line).unwrap_or(0)];
                        if plan.keeps(name) {
                            buf.extend_from_slice(line);
                        }
                    }
                    return;
                }
            }
        }
        match self.out.fields_mut() {
            None => self.out.buf().extend_from_slice(lines),
            Some(head) => head.set_block(EntryFields::new(entry, lines)),
        }
    }

    /// Ends the head with its framing (HTTP/1: and the connection's fate).
    pub(crate) fn end(self, framing: Framing, version: Version, keep_alive: bool) {
        if let Some((current, site, rule, status)) = &self.edits {
            if let Some(plan) = current.gen.rules[*site].line_plan(*rule, *status) {
                self.out.buf().extend_from_slice(plan.lines());
                self.out.edited = true;
            }
        }
        match self.out.fields_mut() {
            None => wire::write_framing(self.out.buf(), framing, version, keep_alive),
            Some(head) => {
                if let Framing::Length(length) = framing {
                    head.append(
                        b"Content-Length",
                        itoa::Buffer::new().format(length).as_bytes(),
                    );
                }
            }
        }
    }
}

/// A response with a small generated HTML body (or none for 204 and 304), as nginx
/// sends for errors and redirects. `extra`: fields before the body's (Allow, Location,
/// Content-Range).
pub(crate) fn simple(
    worker: &Worker,
    conn: &ConnFacts,
    out: &mut Output,
    req: &Request<'_, '_>,
    keep_alive: bool,
    status: u16,
    extra: &[(&[u8], &[u8])],
) {
    let terms = Terms {
        head_only: req.method == Method::Head,
        version: req.version,
        keep_alive,
    };
    write_simple(worker, conn, out, status, extra, terms);
}

/// The same, for refusals that come before a request could be parsed.
pub(crate) fn write_simple(
    worker: &Worker,
    conn: &ConnFacts,
    out: &mut Output,
    status: u16,
    extra: &[(&[u8], &[u8])],
    terms: Terms,
) {
    let Terms {
        head_only,
        version,
        keep_alive,
    } = terms;
    let mut head = HeadWriter::start(worker, conn, out, status);
    for &(name, value) in extra {
        head.field(name, value);
    }
    if wire::bodiless(status) {
        head.end(Framing::None, version, keep_alive);
        return;
    }
    head.field(b"Content-Type", handler::STATUS_PAGE_TYPE);
    let len = handler::status_page_len(status);
    head.end(Framing::Length(len as u64), version, keep_alive);
    if !head_only {
        handler::write_status_page(out.buf(), status);
    }
}

thread_local! {
    /// Buffers of deferred responses' heads, kept for the worker's next ones.
    static SPARE_HEADS: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// The buffer a deferred response's head is written to (and, for the access log, the
/// head of the request it answers): one of the worker's spares, given back when
/// dropped, so that the steady state allocates none for it.
pub(crate) struct HeadBuf(Vec<u8>);

impl HeadBuf {
    pub(crate) fn take() -> HeadBuf {
        let spare = SPARE_HEADS.with_borrow_mut(Vec::pop);
        HeadBuf(spare.unwrap_or_else(|| Vec::with_capacity(512)))
    }

    /// A spare holding a copy of `bytes`.
    pub(crate) fn copy(bytes: &[u8]) -> HeadBuf {
        let mut buf = HeadBuf::take();
        buf.extend_from_slice(bytes);
        buf
    }

    /// A buffer that holds nothing and allocates nothing (where no head is kept).
    pub(crate) const fn none() -> HeadBuf {
        HeadBuf(Vec::new())
    }
}

impl std::ops::Deref for HeadBuf {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl AsRef<[u8]> for HeadBuf {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::DerefMut for HeadBuf {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

impl Drop for HeadBuf {
    fn drop(&mut self) {
        // As many as the worker has responses in flight, each no larger than a big head.
        if self.0.capacity() > 16 * 1024 || self.0.capacity() == 0 {
            return;
        }
        let mut buf = std::mem::take(&mut self.0);
        buf.clear();
        let _ = SPARE_HEADS.try_with(|s| {
            if let Ok(mut spares) = s.try_borrow_mut() {
                if spares.len() < 256 {
                    spares.push(buf);
                }
            }
        });
    }
}
