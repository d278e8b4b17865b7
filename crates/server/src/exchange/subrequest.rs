//! Subrequests (`handler::Subrequests`, Lua's `tessera.location.capture`): a request
//! answered through this server's own routes on the worker's event loop, without a
//! socket. It goes through [`super::answer_in`] on the site of the request that makes it
//! (as a request routed again goes), then, when its answer waits, through the one
//! finisher ([`finish::finish`]) with a [`Capture`] as its protocol, which keeps the
//! response in memory instead of writing it. It is not written to the access log (nginx
//! logs no subrequest by default).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use handler::{Budget, LocalFuture, Response, ResponseHead, SubReply, Subrequest, Tunnel};
use wire::{BodyFraming, Version};

use super::edited::Rerouted;
use super::finish::{self, BodyRead, Pumped, Sink};
use super::served::Sent;
use super::{answer_in, Checked, Dispatched};
use crate::facts::{ConnFacts, TlsFacts};
use crate::net::output::{FieldsHead, Piece};
use crate::reply::Terms;
use crate::worker::Worker;

/// How deeply subrequests may nest (a subrequest's script making one, and so on): past
/// it, making one is an error, so a location that captures itself ends instead of
/// recursing for ever. nginx allows 50; each level here nests the worker's stack.
pub(crate) const MAX_DEPTH: usize = 16;

/// One worker's subrequests.
pub(crate) struct Dispatcher {
    worker: Weak<Worker>,
    /// How many subrequests are being answered, one inside another, on this thread now.
    depth: Rc<Cell<usize>>,
    /// The budget of the subrequest being answered now (polled), which the subrequests
    /// made meanwhile share: a tree of subrequests takes from its root's group's budget.
    ambient: Rc<RefCell<Option<Budget>>>,
}

impl Dispatcher {
    pub(crate) fn new(worker: Weak<Worker>) -> Dispatcher {
        Dispatcher {
            worker,
            depth: Rc::new(Cell::new(0)),
            ambient: Rc::default(),
        }
    }
}

impl handler::Subrequests for Dispatcher {
    fn run(&self, request: Subrequest) -> LocalFuture<Result<SubReply, String>> {
        let refused = |why: String| handler::local_future(async move { Err(why) });
        let Some(worker) = self.worker.upgrade() else {
            return refused("the worker is stopping".into());
        };
        if self.depth.get() >= MAX_DEPTH {
            return refused(format!(
                "subrequests nested more than {MAX_DEPTH} deep (does a location capture itself?)"
            ));
        }
        let mut request = request;
        let budget = self.ambient.borrow().clone();
        let budget = budget.unwrap_or_else(|| request.budget.clone());
        if !budget.take_one() {
            return refused(format!(
                "more than {} subrequests made for one capture (with those they make)",
                Budget::MAX_SUBREQUESTS
            ));
        }
        request.max_body = request.max_body.min(budget.bytes_left());
        handler::local_future(Nested {
            depth: self.depth.clone(),
            ambient: self.ambient.clone(),
            budget,
            inner: Box::pin(run(worker, request)),
        })
    }
}

/// A subrequest's work, counted as one level deeper while it runs (each poll), with its
/// budget the one the subrequests made meanwhile take from.
struct Nested<F> {
    depth: Rc<Cell<usize>>,
    ambient: Rc<RefCell<Option<Budget>>>,
    budget: Budget,
    inner: Pin<Box<F>>,
}

impl<F: Future<Output = Result<SubReply, String>>> Future for Nested<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        struct Level<'a>(&'a Cell<usize>, &'a RefCell<Option<Budget>>, Option<Budget>);
        impl Drop for Level<'_> {
            fn drop(&mut self) {
                self.0.set(self.0.get() - 1);
                *self.1.borrow_mut() = self.2.take();
            }
        }
        let (depth, ambient) = (self.depth.clone(), self.ambient.clone());
        depth.set(depth.get() + 1);
        let outer = ambient.borrow_mut().replace(self.budget.clone());
        let _level = Level(&depth, &ambient, outer);
        let polled = self.inner.as_mut().poll(cx);
        if let Poll::Ready(Ok(reply)) = &polled {
            self.budget.kept(reply.body.len());
        }
        polled
    }
}

/// Answers `sub` on its site, as far as it can at once, then what waits.
async fn run(worker: Rc<Worker>, sub: Subrequest) -> Result<SubReply, String> {
    let facts = ConnFacts {
        peer: sub.peer,
        client: sub.client,
        tls: sub.secure.then_some(TlsFacts {
            site: sub.site as u32,
            sni: None,
            version: "",
            cipher: "",
            h2: false,
            quic: false,
        }),
        proxied: None,
    };
    let method = wire::Method::from_token(&sub.method);
    let head_only = method == wire::Method::Head;
    let mut length = itoa::Buffer::new();
    let length = length.format(sub.body.len()).as_bytes().to_vec();
    let mut checked: Option<Checked> = None;
    loop {
        let mut fields: Vec<wire::Header<'_>> = sub
            .headers
            .iter()
            .map(|(n, v)| wire::Header {
                name: std::str::from_utf8(n).unwrap_or("x-invalid"),
                value: v,
            })
            .collect();
        let body = match sub.body.is_empty() {
            true => BodyFraming::None,
            false => {
                fields.push(wire::Header {
                    name: "content-length",
                    value: &length,
                });
                BodyFraming::Length(sub.body.len() as u64)
            }
        };
        let req = wire::Request {
            method,
            method_token: &sub.method,
            target: &sub.target,
            path: &sub.target,
            version: Version::Http11,
            headers: &fields,
            head_len: 0,
            body,
            keep_alive: true,
            expect_continue: false,
        };
        let mut buffers = worker.take_buffers();
        let out = &mut buffers.out;
        // The server's own answers (files, refusals) write their heads as fields.
        out.want_fields(ResponseHead::with_capacity(0, 12, 320));
        // On the site of the request that makes it, counted by no request limit and
        // holding no connection limit's slot (nginx's limit_req and limit_conn count the
        // main request only).
        let site = Rerouted {
            site: sub.site,
            times: 0,
            counted: true,
            sub: true,
        };
        let at = (&[][..], Some(site), checked.as_ref());
        let dispatched = answer_in(&worker, &facts, &req, true, out, at);
        let exchange = match dispatched {
            Dispatched::Done(_) => {
                let head = out.take_fields();
                let pieces = out.take_pieces(0);
                worker.give_back(buffers);
                let head = head.unwrap_or_else(|| FieldsHead::new(ResponseHead::new(500)));
                return Ok(files_reply(&head, pieces, head_only, sub.max_body));
            }
            Dispatched::Later(exchange) => exchange,
            Dispatched::Wait(check) => {
                worker.give_back(buffers);
                checked = Some(check.await);
                continue;
            }
        };
        worker.give_back(buffers);
        let mut capture = Capture {
            worker: worker.clone(),
            facts: facts.clone(),
            body: sub.body.clone(),
            max_body: sub.max_body,
            reply: None,
        };
        // `Capture` never fails: nothing is written to a peer.
        let _ = finish::finish(&mut capture, exchange).await;
        return Ok(capture.reply.unwrap_or(SubReply {
            status: 500,
            ..SubReply::default()
        }));
    }
}

/// Whether a response field is the server's framing, not the response's.
fn kept(name: &[u8]) -> bool {
    !wire::is_framing_field(name)
}

/// What the static files (or the server itself) answered at once: its head, and its
/// body read from the pieces (a file's read from the file), at most `max`.
fn files_reply(head: &FieldsHead, pieces: Vec<Piece>, head_only: bool, max: usize) -> SubReply {
    let mut reply = SubReply {
        status: head.status(),
        headers: head
            .iter()
            .filter(|(n, _)| kept(n))
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect(),
        ..SubReply::default()
    };
    if head_only || wire::no_body(false, reply.status) {
        return reply;
    }
    let mut body = BytesMut::new();
    for piece in pieces {
        let room = max - body.len();
        if piece.len() > room as u64 {
            reply.truncated = true;
        }
        match piece {
            Piece::Bytes(b) => body.extend_from_slice(&b[..b.len().min(room)]),
            Piece::Memory { entry, start, end } => {
                body.extend_from_slice(&entry.body()[start..end.min(start + room)])
            }
            Piece::File { entry, offset, len } => {
                let n = (len as usize).min(room);
                let at = body.len();
                body.resize(at + n, 0);
                if entry.file.read_exact_at(&mut body[at..], offset).is_err() {
                    body.truncate(at);
                    reply.truncated = true;
                    break;
                }
            }
        }
        if reply.truncated {
            break;
        }
    }
    reply.body = body.freeze();
    reply
}

/// The protocol of a subrequest answered later: its body is the one given, and its
/// response is kept in memory (at most `max_body` bytes of its body).
struct Capture {
    worker: Rc<Worker>,
    facts: ConnFacts,
    body: Bytes,
    max_body: usize,
    reply: Option<SubReply>,
}

impl Sink for Capture {
    type Gone = ();
    type Head = Vec<u8>;
    const SWITCHES: bool = false;

    fn worker(&self) -> &Rc<Worker> {
        &self.worker
    }

    fn facts(&self) -> ConnFacts {
        self.facts.clone()
    }

    fn read_at(&self) -> Option<Instant> {
        None
    }

    async fn read_body(&mut self, _: BodyFraming, _: bool) -> Result<BodyRead, ()> {
        Ok(BodyRead::Body(self.body.clone()))
    }

    async fn pump_body(
        &mut self,
        _: BodyFraming,
        _: bool,
        writer: handler::BodyWriter,
    ) -> Result<Pumped, ()> {
        if !self.body.is_empty() {
            writer.push(self.body.clone());
        }
        writer.finish();
        Ok(Pumped::Done)
    }

    fn abandon_body(&mut self) {}

    async fn skip_body(&mut self, _: BodyFraming) {}

    async fn respond(
        &mut self,
        responding: LocalFuture<Result<Response, u16>>,
    ) -> Result<Result<Response, u16>, ()> {
        Ok(responding.await)
    }

    async fn send(&mut self, response: Response, terms: Terms) -> Result<Sent<Vec<u8>>, ()> {
        let status = response.head.status();
        let mut reply = SubReply {
            status,
            headers: response
                .head
                .iter()
                .filter(|(n, _)| kept(n))
                .map(|(n, v)| (n.to_vec(), v.to_vec()))
                .collect(),
            ..SubReply::default()
        };
        let mut complete = true;
        if !wire::no_body(terms.head_only, status) {
            let mut body = response.body;
            let mut all = BytesMut::new();
            while let Some(chunk) = body.next_chunk().await {
                let Ok(chunk) = chunk else {
                    reply.truncated = true;
                    complete = false;
                    break;
                };
                let room = self.max_body - all.len();
                if chunk.len() > room {
                    all.extend_from_slice(&chunk[..room]);
                    reply.truncated = true;
                    break;
                }
                all.extend_from_slice(&chunk);
            }
            reply.body = all.freeze();
        }
        let sent = reply.body.len() as u64;
        self.reply = Some(reply);
        Ok(Sent {
            status,
            head: Vec::new(),
            head_len: 0,
            body: sent,
            complete,
        })
    }

    async fn switch(&mut self, _: Response) -> Result<(Sent<Vec<u8>>, Option<Tunnel>), ()> {
        unreachable!("a subrequest does not switch protocols: finish answers a 101 with 502")
    }

    async fn tunnel(&mut self, _: Tunnel) {
        unreachable!("a subrequest does not switch protocols: finish answers a 101 with 502")
    }

    /// Records nothing: a subrequest is not written to the access log.
    fn with_request(&self, _: &[u8], _: &mut dyn FnMut(Option<&wire::Request<'_, '_>>)) {}
}
