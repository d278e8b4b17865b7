//! The responses the server makes itself, whatever handler a request was meant for:
//! the start of every head it generates, and the status pages of errors, refusals and
//! redirects (the page itself is `handler::write_status_page`, shared with the modules).

use std::cell::RefCell;

use wire::{Framing, Method, Request, Version};

use crate::facts::ConnFacts;
use crate::net::output::Output;
use crate::worker::Worker;

/// Status line, Server and Date: how every response this server generates starts.
pub(crate) fn start_head(worker: &Worker, conn: &ConnFacts, buf: &mut Vec<u8>, status: u16) {
    wire::write_status_line(buf, status);
    buf.extend_from_slice(b"Server: tessera\r\n");
    worker.clock.write_date(buf);
    hsts(worker, conn, buf);
}

/// Strict-Transport-Security, on a TLS connection when `[tls] hsts` is set.
pub(crate) fn hsts(worker: &Worker, conn: &ConnFacts, buf: &mut Vec<u8>) {
    if conn.secure() {
        let current = worker.current.borrow();
        if let Some(value) = &current.gen.config.tls.hsts {
            wire::write_field(buf, b"Strict-Transport-Security", value.as_bytes());
        }
    }
}

/// What a request decides of how its response is framed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terms {
    /// A response to HEAD: no content follows the head.
    pub head_only: bool,
    pub version: Version,
    pub keep_alive: bool,
}

/// A response with a small generated HTML body (or none for 204 and 304), as nginx
/// sends for errors and redirects.
pub(crate) fn simple(
    worker: &Worker,
    conn: &ConnFacts,
    out: &mut Output,
    req: &Request<'_, '_>,
    keep_alive: bool,
    status: u16,
    extra_headers: &[u8],
) {
    let terms = Terms {
        head_only: req.method == Method::Head,
        version: req.version,
        keep_alive,
    };
    write_simple(worker, conn, out.buf(), status, extra_headers, terms);
}

/// The same, for refusals that come before a request could be parsed.
pub(crate) fn write_simple(
    worker: &Worker,
    conn: &ConnFacts,
    buf: &mut Vec<u8>,
    status: u16,
    extra_headers: &[u8],
    terms: Terms,
) {
    let Terms {
        head_only,
        version,
        keep_alive,
    } = terms;
    start_head(worker, conn, buf, status);
    buf.extend_from_slice(extra_headers);
    if wire::bodiless(status) {
        wire::write_framing(buf, Framing::None, version, keep_alive);
        return;
    }
    buf.extend_from_slice(b"Content-Type: ");
    buf.extend_from_slice(handler::STATUS_PAGE_TYPE);
    buf.extend_from_slice(b"\r\n");
    let len = handler::status_page_len(status);
    wire::write_framing(buf, Framing::Length(len as u64), version, keep_alive);
    if !head_only {
        handler::write_status_page(buf, status);
    }
}

thread_local! {
    /// Buffers of deferred responses' heads, kept for the worker's next ones.
    static SPARE_HEADS: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// The buffer a deferred response's head is written to: one of the worker's spares,
/// given back when dropped, so that the steady state allocates none for it.
pub(crate) struct HeadBuf(Vec<u8>);

impl HeadBuf {
    pub(crate) fn take() -> HeadBuf {
        let spare = SPARE_HEADS.with_borrow_mut(Vec::pop);
        HeadBuf(spare.unwrap_or_else(|| Vec::with_capacity(512)))
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
        if self.0.capacity() > 16 * 1024 {
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
