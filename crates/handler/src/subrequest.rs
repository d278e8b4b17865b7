//! Subrequests: a request a module makes to this server's own routes, answered on the
//! worker's event loop without a socket (Lua's `tessera.location.capture`, nginx's
//! `ngx.location.capture`). The server installs one [`Subrequests`] per worker thread
//! ([`install_subrequests`]); a module below the server (`script`) finds it with
//! [`subrequests`], so that neither crate depends on the other.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

use bytes::Bytes;

use crate::pooled::LocalFuture;

/// A request to the server's own routes, on the site of the request that makes it.
#[derive(Debug, Clone)]
pub struct Subrequest {
    /// The method token (`GET`, `POST`...).
    pub method: String,
    /// Origin form: a path starting with `/`, and a query after `?`.
    pub target: Vec<u8>,
    /// Its fields (name, value); a body's `Content-Length` is the server's to add.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub body: Bytes,
    /// The site it is answered on: the one of the request that makes it.
    pub site: usize,
    /// The client and peer of the request that makes it, and whether it came over TLS.
    pub client: SocketAddr,
    pub peer: SocketAddr,
    pub secure: bool,
    /// Most body bytes kept: the rest is dropped and the reply marked `truncated`.
    pub max_body: usize,
    /// What the subrequests made together with this one may still take ([`Budget`]).
    pub budget: Budget,
}

/// What a group of subrequests may take together: those of one `capture_multi` (or one
/// `capture`) and every subrequest made, at any depth, while they are answered. Without
/// it, a location that captures itself several times would make a tree of subrequests
/// growing with each level (3 a level, 16 levels: 43 million).
#[derive(Debug, Clone, Default)]
pub struct Budget(Rc<BudgetLeft>);

#[derive(Debug, Default)]
struct BudgetLeft {
    made: std::cell::Cell<usize>,
    bytes: std::cell::Cell<usize>,
}

impl Budget {
    /// Subrequests one group may make at most.
    pub const MAX_SUBREQUESTS: usize = 1000;
    /// Body bytes the replies of one group keep at most, together.
    pub const MAX_BYTES: usize = 64 << 20;

    /// Counts one more subrequest; `false` when the group made its most already.
    pub fn take_one(&self) -> bool {
        let made = self.0.made.get();
        self.0.made.set(made + 1);
        made < Self::MAX_SUBREQUESTS
    }

    /// The body bytes the group may still keep.
    pub fn bytes_left(&self) -> usize {
        Self::MAX_BYTES.saturating_sub(self.0.bytes.get())
    }

    /// Counts `n` body bytes kept.
    pub fn kept(&self, n: usize) {
        self.0.bytes.set(self.0.bytes.get().saturating_add(n));
    }
}

/// What a subrequest was answered with.
#[derive(Debug, Clone, Default)]
pub struct SubReply {
    pub status: u16,
    /// Its fields as sent, without the framing ones (`Content-Length`,
    /// `Transfer-Encoding`, `Connection`).
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub body: Bytes,
    /// The body was longer than `max_body` (or broke off): `body` is what came before.
    pub truncated: bool,
}

/// A worker's way to answer subrequests.
pub trait Subrequests {
    /// Answers `request` through the server's routes; `Err` when it cannot be made (too
    /// deeply nested, the worker stopping).
    fn run(&self, request: Subrequest) -> LocalFuture<Result<SubReply, String>>;
}

thread_local! {
    static SUBREQUESTS: RefCell<Option<Rc<dyn Subrequests>>> = const { RefCell::new(None) };
}

/// Makes `subrequests` this thread's (the server calls it on each worker thread as the
/// worker starts; `None` removes it).
pub fn install_subrequests(subrequests: Option<Rc<dyn Subrequests>>) {
    SUBREQUESTS.with(|s| *s.borrow_mut() = subrequests);
}

/// This thread's subrequests, when the server installed them.
pub fn subrequests() -> Option<Rc<dyn Subrequests>> {
    SUBREQUESTS.with(|s| s.borrow().clone())
}
