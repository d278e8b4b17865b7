//! A worker: one OS thread, one event loop (`net/event_loop.rs`), its own listeners, its own
//! connection slots, buffers and clock. Nothing here is shared with other workers
//! except [`Shared`]: the config, the open-file cache and the published connection counts.
//!
//! Memory is a budget fixed at start: `max_connections / workers` slots (allocated at
//! start by `pool`) and at most one buffer set per slot, taken only while a connection
//! has bytes in hand and recycled through a free list, never freed, so the steady state
//! allocates nothing.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pool::{Pool, SlotId};
use tokio::sync::Notify;

use crate::access_log::WorkerLogs;
use crate::conn_state::ConnState;
use crate::date::Clock;
use crate::generation::Current;
use crate::metrics::Closed;
use crate::net::output::Output;
use crate::shared::Shared;

/// A connection's read buffer and output batch, lent while it has bytes in hand.
pub(crate) struct Buffers {
    pub read: Box<[u8]>,
    pub out: Output,
}

pub(crate) struct Worker {
    pub shared: Arc<Shared>,
    pub id: usize,
    pub clock: Clock,
    /// The request's path, decoded and normalised once (by `dispatch`) for routing,
    /// the handlers and the file lookup alike; reused from request to request.
    pub path: RefCell<Vec<u8>>,
    /// The C path of a file to open beneath the root (reused).
    pub cpath: RefCell<Vec<u8>>,
    /// A request's fields as its route's `request_headers` made them: the room for them,
    /// kept empty between requests ([`Recycled`]).
    pub(crate) headers: std::cell::Cell<Vec<wire::Header<'static>>>,
    /// Connection slots; each holds its socket's descriptor.
    pub(crate) slots: RefCell<Pool<ConnState, RawFd>>,
    /// Buffer sets not lent out, most recently returned last (so the hot ones are reused
    /// and the rest stay cold, out of resident memory). Boxed so that a connection holds
    /// one pointer, not the whole set, in its future.
    #[allow(clippy::vec_box)]
    pub(crate) spare: RefCell<Vec<Box<Buffers>>>,
    pub(crate) slot_freed: Notify,
    pub(crate) shutting_down: Cell<bool>,
    /// Woken when shutting down begins: HTTP/2 connections send GOAWAY and finish their
    /// streams (HTTP/1 ones notice `shutting_down` at their next response).
    pub(crate) shutdown: Notify,
    /// Which slots hold HTTP/2 connections (by slot index): a shutdown does not shut
    /// their reading side, which would cut off the streams in flight.
    pub(crate) http2: RefCell<Vec<bool>>,
    /// Per slot, where its connection is counted among its client's
    /// (`limit_conn_per_client`: `Shared::per_client`'s slot + 1; 0 when it is not).
    pub(crate) per_client: Box<[Cell<u32>]>,
    pub(crate) http2_resets: RateLimitedLog,
    /// When the last eviction / accept-pause message was logged, and how many since.
    pub(crate) evictions: RateLimitedLog,
    pub(crate) pauses: RateLimitedLog,
    pub(crate) timeouts: RateLimitedLog,
    /// The configuration generation this worker serves with, and its services of that
    /// generation's modules ([`Worker::current`]).
    pub(crate) current: RefCell<Rc<Current>>,
    /// An accept loop per listening socket this worker accepts on, by the socket's id.
    pub(crate) accepting: RefCell<Vec<(u64, Rc<crate::net::listeners::Stop>)>>,
    /// The version of `Shared::listeners` the accept loops match.
    pub(crate) listeners_seen: Cell<u64>,
    /// The access logs (one per file; each site writes to its own), when any is on.
    pub log: RefCell<Option<WorkerLogs>>,
    pub(crate) drops: RateLimitedLog,
    pub(crate) dropped_seen: Cell<u64>,
    pub(crate) refusals: RateLimitedLog,
    /// The epoll the worker's client connections wait on (`reactor`).
    pub(crate) reactor: Rc<crate::net::reactor::Reactor>,
    /// The connections' futures, one room per slot (`tasks`).
    pub(crate) tasks: Rc<crate::net::tasks::Tasks>,
}

/// The worker's path buffer, or, while a request that holds it makes a subrequest
/// (answered inside it), a buffer of the subrequest's own.
pub(crate) enum PathBuf<'w> {
    Shared(std::cell::RefMut<'w, Vec<u8>>),
    Own(Vec<u8>),
}

impl std::ops::Deref for PathBuf<'_> {
    type Target = Vec<u8>;

    fn deref(&self) -> &Vec<u8> {
        match self {
            PathBuf::Shared(p) => p,
            PathBuf::Own(p) => p,
        }
    }
}

impl std::ops::DerefMut for PathBuf<'_> {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        match self {
            PathBuf::Shared(p) => p,
            PathBuf::Own(p) => p,
        }
    }
}

impl Worker {
    /// The buffer a request's normalised path is kept in while it is answered.
    pub(crate) fn path_buf(&self) -> PathBuf<'_> {
        match self.path.try_borrow_mut() {
            Ok(path) => PathBuf::Shared(path),
            Err(_) => PathBuf::Own(Vec::with_capacity(256)),
        }
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.get()
    }

    /// The configuration to answer a request with: the one this worker holds, unless a
    /// reload replaced it (then this worker takes the new generation first, starting
    /// its services of the new modules and switching access logs if they changed).
    pub fn current(&self) -> Rc<Current> {
        let number = self.shared.generation.load(Ordering::Acquire);
        if number != self.current.borrow().gen.number {
            let gen = self.shared.current.load_full();
            let services = gen.modules.iter().map(|m| m.start(self.id)).collect();
            let upstreams = crate::generation::upstreams(&gen, self.id);
            let logs = gen.logs[self.id]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(logs) = logs {
                let old = std::mem::replace(&mut *self.log.borrow_mut(), logs);
                if let Some(mut old) = old {
                    // The old writer ends once every worker has let go of it.
                    old.flush_blocking();
                }
            }
            *self.current.borrow_mut() = Rc::new(Current {
                gen,
                services,
                upstreams,
            });
        }
        self.current.borrow().clone()
    }

    /// This worker's counters for `/metrics`, when an admin listener is configured.
    pub fn metrics(&self) -> Option<&crate::metrics::WorkerMetrics> {
        self.shared
            .metrics_on
            .then(|| &self.shared.metrics[self.id])
    }

    /// Moves a connection to `to` (a no-op if it is there already, so the time it
    /// entered is kept). Returns false if the connection was closed by a timeout or
    /// eviction: its task should end.
    pub fn enter(&self, slot: SlotId, to: ConnState) -> bool {
        let mut slots = self.slots.borrow_mut();
        let from = slots.state(slot);
        if from == ConnState::Closing {
            return false;
        }
        if from != to {
            slots.set_state(slot, from, to, self.clock.millis());
            if to == ConnState::Idle && slots.count(ConnState::Free) == 0 {
                // An accept may be waiting for a slot: this one can now be evicted.
                self.slot_freed.notify_one();
            }
        }
        true
    }

    /// Records progress in the current state (a write that moved bytes).
    pub fn touch(&self, slot: SlotId) {
        let mut slots = self.slots.borrow_mut();
        if slots.state(slot) != ConnState::Closing {
            slots.touch(slot, self.clock.millis());
        }
    }

    /// Counts a refused request and logs it (at most one line every 10 s per worker,
    /// with the number refused since the last line).
    pub fn refused(&self, client: SocketAddr, error: wire::Error) {
        self.shared.refusals[error.index()].fetch_add(1, Ordering::Relaxed);
        self.refusals.event(self.clock.millis(), |n| {
            tracing::info!(
                worker = self.id,
                %client,
                reason = error.name(),
                status = error.status(),
                refused_since_last_line = n,
                "refused a request: {error}"
            );
        });
    }

    /// Marks a slot as holding an HTTP/2 connection, or no longer.
    pub(crate) fn mark_http2(&self, slot: SlotId, on: bool) {
        if let Some(mark) = self.http2.borrow_mut().get_mut(slot.index()) {
            *mark = on;
        }
    }

    pub fn take_buffers(&self) -> Box<Buffers> {
        self.spare.borrow_mut().pop().unwrap_or_else(|| {
            // First use of this buffer set: bounded by the slot count, since each
            // connection holds at most one (and each subrequest nested inside its
            // answer one more while it is routed, `exchange::subrequest::MAX_DEPTH`
            // deep at most); recycled forever after.
            Box::new(Buffers {
                read: vec![0u8; self.shared.limits.max_head_size].into_boxed_slice(),
                out: Output::new(self.shared.limits.max_uri_length + 1024),
            })
        })
    }

    pub fn give_back(&self, mut buffers: Box<Buffers>) {
        // Emptied here, whatever the connection left in it: a write that ended in an
        // error (a timed-out writer) may leave part of a response, which must never go
        // out on the next connection that takes this set, nor its `close_after`.
        buffers.out.clear();
        self.spare.borrow_mut().push(buffers);
    }

    /// Closes a connection from outside its task: both directions are shut down, so
    /// whatever it waits on wakes with an error or end-of-file, and it frees its slot.
    pub(crate) fn kill(&self, slots: &mut Pool<ConnState, RawFd>, slot: SlotId) {
        let fd = slots[slot];
        crate::sys::shutdown(fd, libc::SHUT_RDWR);
        let from = slots.state(slot);
        slots.set_state(slot, from, ConnState::Closing, self.clock.millis());
    }

    /// A connection's task panicked and was dropped: its socket is closed; its slot,
    /// unless the task freed it before, is freed here (a bug in one connection costs
    /// no slot).
    pub(crate) fn panicked(&self, index: usize) {
        let slot = SlotId::from_index(index);
        if self.slots.borrow().state(slot) != ConnState::Free {
            self.free(slot);
        }
    }

    pub(crate) fn free(&self, slot: SlotId) {
        if let Some(counted) = self.per_client.get(slot.index()) {
            if counted.get() != 0 {
                self.shared.per_client.give_back(counted.replace(0) - 1);
            }
        }
        let mut slots = self.slots.borrow_mut();
        let from = slots.state(slot);
        slots.set_state(slot, from, ConnState::Free, self.clock.millis());
        drop(slots);
        self.slot_freed.notify_one();
    }

    /// The periodic timeout check: for each timed state, close connections from the
    /// oldest while they have expired; stop at the first that has not.
    pub(crate) fn sweep(&self) {
        self.clock.refresh();
        let now = self.clock.millis();
        let current = self.current.borrow().clone();
        let t = &current.gen.config.timeouts;
        let mut slots = self.slots.borrow_mut();
        for (state, seconds) in [
            (ConnState::ReadingHead, t.head),
            (ConnState::ReadingBody, t.body),
            (ConnState::Idle, t.idle),
            (ConnState::Writing, t.write),
        ] {
            let timeout = (seconds * 1000.0) as u64;
            while let Some(slot) = slots.oldest_expired(state, now, timeout) {
                // Counted before the close, so that a client that sees the close and
                // then asks for the metrics finds it counted.
                if let Some(metrics) = self.metrics() {
                    metrics.closed(match state {
                        ConnState::ReadingHead => Closed::HeadTimeout,
                        ConnState::ReadingBody => Closed::BodyTimeout,
                        ConnState::Idle => Closed::IdleTimeout,
                        _ => Closed::WriteTimeout,
                    });
                }
                self.kill(&mut slots, slot);
                self.timeouts.event(now, |n| {
                    tracing::info!(worker = self.id, ?state, closed = n, "connection timeouts");
                });
            }
        }
        if let Some(log) = self.log.borrow_mut().as_mut() {
            log.hand_off();
        }
        let dropped = self.shared.log.dropped.load(Ordering::Relaxed);
        if self.id == 0 && dropped > self.dropped_seen.get() {
            self.drops.event(now, |_| {
                tracing::warn!(
                    dropped_total = dropped,
                    "access log lines dropped: the disk does not keep up"
                );
            });
            self.dropped_seen.set(dropped);
        }
        let counts = &self.shared.counts[self.id];
        for state in ConnState::ALL {
            counts[state as usize].store(slots.count(state), Ordering::Relaxed);
        }
    }
}

/// Logs at most once every 10 s, with how many events happened since the last line.
pub(crate) struct RateLimitedLog {
    last: Cell<Option<u64>>,
    pending: Cell<u64>,
}

impl RateLimitedLog {
    pub(crate) fn new() -> Self {
        RateLimitedLog {
            last: Cell::new(None),
            pending: Cell::new(0),
        }
    }

    pub(crate) fn event(&self, now: u64, log: impl FnOnce(u64)) {
        self.pending.set(self.pending.get() + 1);
        if self.last.get().is_none_or(|last| now >= last + 10_000) {
            log(self.pending.get());
            self.pending.set(0);
            self.last.set(Some(now));
        }
    }
}

/// A list borrowed from the worker for one request and given back, empty, when dropped:
/// the steady state allocates none. The list's items borrow from the request, which the
/// worker outlives; they are gone before the list goes back.
pub(crate) struct Recycled<'w, 'a> {
    worker: &'w Worker,
    pub(crate) list: Vec<wire::Header<'a>>,
}

impl<'w> Recycled<'w, '_> {
    pub(crate) fn headers(worker: &'w Worker) -> Self {
        Recycled {
            worker,
            list: relifetime(worker.headers.take()),
        }
    }
}

impl Drop for Recycled<'_, '_> {
    fn drop(&mut self) {
        let list = relifetime(std::mem::take(&mut self.list));
        self.worker.headers.set(list);
    }
}

/// An empty list of fields with another lifetime, in the same allocation: collecting a
/// mapped `vec::IntoIter` into a vector of a type of the same layout reuses the source's
/// buffer (std's in-place collection; the zero-allocation test holds it).
fn relifetime<'b>(mut list: Vec<wire::Header<'_>>) -> Vec<wire::Header<'b>> {
    list.clear();
    list.into_iter()
        .map(|_| -> wire::Header<'b> { unreachable!("the list is empty") })
        .collect()
}
