//! A worker thread's life: its runtime, its listeners and accept loop, and its graceful
//! shutdown. The worker's state is [`Worker`]; each accepted connection is a task
//! running [`conn::serve`] in its slot's room (`tasks`), waiting on the worker's epoll
//! (`reactor`).

use std::cell::{Cell, RefCell};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use pool::Pool;
use tokio::sync::{watch, Notify};

use crate::access_log::WorkerLogs;
use std::net::SocketAddr;

use crate::config::Kind;
use crate::conn_state::ConnState;
use crate::date::Clock;
use crate::generation::Current;
use crate::net::listeners::{Listener, Stop};
use crate::net::reactor::Listening;
use crate::session;
use crate::shared::{Phase, Shared};
use crate::worker::{RateLimitedLog, Worker};

pub(crate) fn run(
    id: usize,
    shared: Arc<Shared>,
    log: Option<WorkerLogs>,
    phase: watch::Receiver<Phase>,
) {
    let capacity = shared.slots_per_worker;
    let started = crate::net::event_loop::run(capacity, |parts| {
        // Each module's service for this worker, started on its thread with the loop
        // installed (a service may spawn its own tasks).
        let gen = shared.current.load_full();
        let services = gen.modules.iter().map(|m| m.start(id)).collect();
        let worker = Rc::new(Worker {
            id,
            clock: Clock::new(shared.epoch),
            path: RefCell::new(Vec::with_capacity(256)),
            cpath: RefCell::new(Vec::with_capacity(256)),
            headers: std::cell::Cell::new(Vec::new()),
            slots: RefCell::new(Pool::new(capacity, ConnState::Free, 0, |_| -1)),
            spare: RefCell::new(Vec::with_capacity(capacity)),
            slot_freed: Notify::new(),
            shutting_down: Cell::new(false),
            shutdown: Notify::new(),
            http2: RefCell::new(vec![false; capacity]),
            per_client: (0..capacity).map(|_| Cell::new(0)).collect(),
            http2_resets: RateLimitedLog::new(),
            evictions: RateLimitedLog::new(),
            pauses: RateLimitedLog::new(),
            timeouts: RateLimitedLog::new(),
            current: RefCell::new(Rc::new(Current {
                upstreams: crate::generation::upstreams(&gen, id),
                gen,
                services,
            })),
            accepting: RefCell::new(Vec::new()),
            listeners_seen: Cell::new(0),
            log: RefCell::new(log),
            drops: RateLimitedLog::new(),
            dropped_seen: Cell::new(0),
            refusals: RateLimitedLog::new(),
            reactor: parts.reactor.clone(),
            tasks: parts.rooms.clone(),
            shared,
        });
        // This worker's subrequests (Lua's `tessera.location.capture`), for the modules.
        let dispatcher = crate::exchange::subrequest::Dispatcher::new(Rc::downgrade(&worker));
        handler::install_subrequests(Some(Rc::new(dispatcher)));
        let panicked = {
            let worker = worker.clone();
            move |index| worker.panicked(index)
        };
        (serve(worker, phase), panicked)
    });
    if let Err(e) = started {
        tracing::error!(worker = id, error = %e, "cannot start the worker's loop");
    }
}

/// The worker's life once started: accept and sweep until told to drain or stop, then
/// let the connections end within the grace period.
async fn serve(worker: Rc<Worker>, mut phase: watch::Receiver<Phase>) {
    let id = worker.id;
    let capacity = worker.shared.slots_per_worker;
    sync_listeners(&worker);
    let sweeper = evloop::spawn_local({
        let worker = worker.clone();
        async move {
            loop {
                evloop::time::sleep(Duration::from_millis(250)).await;
                worker.current();
                if !worker.is_shutting_down() {
                    sync_listeners(&worker);
                }
                worker.sweep();
            }
        }
    });
    while *phase.borrow_and_update() == Phase::Serve {
        if phase.changed().await.is_err() {
            break;
        }
    }
    worker.shutting_down.set(true);
    worker.shutdown.notify_waiters();
    for (_, accepting) in worker.accepting.take() {
        accepting.stop();
    }
    let grace = Duration::from_secs(worker.current().gen.config.shutdown_timeout);
    let drained = async {
        while worker.slots.borrow().count(ConnState::Free) < capacity {
            worker.slot_freed.notified().await;
        }
    };
    let mut drained = std::pin::pin!(drained);
    let mut done = false;
    if *phase.borrow_and_update() == Phase::Drain {
        // Connections end by themselves: after their next response, or when
        // `timeouts.idle` closes them. A shutdown asked meanwhile cuts this short.
        let stop = async {
            while *phase.borrow_and_update() != Phase::Stop {
                if phase.changed().await.is_err() {
                    break;
                }
            }
        };
        tokio::select! {
            _ = &mut drained => done = true,
            _ = stop => {}
            _ = evloop::time::sleep(grace) => {
                done = true;
                tracing::warn!(
                    worker = id,
                    open = capacity - worker.slots.borrow().count(ConnState::Free),
                    "shutdown timeout while draining: closing connections still open"
                );
            }
        }
    }
    if !done {
        shut_reads(&worker);
        if evloop::time::timeout(grace, drained).await.is_err() {
            tracing::warn!(
                worker = id,
                open = capacity - worker.slots.borrow().count(ConnState::Free),
                "shutdown timeout: closing connections still open"
            );
        }
    }
    sweeper.abort();
    worker.tasks.end_all();
    let log = worker.log.borrow_mut().take();
    if let Some(mut log) = log {
        log.flush_blocking();
    }
}

/// Idle connections see end-of-file and close; busy ones finish their response first
/// and then close because the worker is shutting down.
fn shut_reads(worker: &Worker) {
    let slots = worker.slots.borrow();
    let http2 = worker.http2.borrow();
    for state in ConnState::ALL {
        if state == ConnState::Free {
            continue;
        }
        for (slot, _) in slots.iter(state) {
            // HTTP/2 connections have sent GOAWAY and end when their streams finish.
            if http2.get(slot.index()).copied().unwrap_or(false) {
                continue;
            }
            crate::sys::shutdown(slots[slot], libc::SHUT_RD);
        }
    }
}

/// Makes this worker accept on exactly its share of the process's listening sockets
/// (`Shared::listeners`): an accept loop for each new one, none left for one removed.
fn sync_listeners(worker: &Rc<Worker>) {
    let listeners = &worker.shared.listeners;
    let version = listeners.version.load(Ordering::Acquire);
    if version == worker.listeners_seen.get() {
        return;
    }
    worker.listeners_seen.set(version);
    let set = listeners.set.lock().unwrap_or_else(|e| e.into_inner());
    let workers = worker.shared.workers;
    let mine: Vec<(&Listener, (Kind, SocketAddr))> = set
        .iter()
        .flat_map(|l| {
            l.sockets
                .iter()
                .enumerate()
                .map(move |(i, s)| (i, s, (l.kind, l.requested)))
        })
        .filter(|(i, _, _)| i % workers == worker.id)
        .map(|(_, s, kind)| (s, kind))
        .collect();
    let mut accepting = worker.accepting.borrow_mut();
    // Dropping the accept loop closes this worker's descriptor of the socket; the
    // socket closes with the last one (the process's own went with the set).
    accepting.retain(|(id, stop)| {
        let keep = mine.iter().any(|(s, _)| s.id == *id);
        if !keep {
            stop.stop();
        }
        keep
    });
    for (socket, kind) in mine {
        if accepting.iter().any(|(id, _)| *id == socket.id) {
            continue;
        }
        if kind.0 == Kind::Quic {
            // A UDP socket: this worker's QUIC endpoint on it, in place of an accept loop.
            match socket.fd.try_clone() {
                Ok(fd) => {
                    let stop = Rc::new(Stop::default());
                    let socket_udp = std::net::UdpSocket::from(fd);
                    let serving = crate::http3::serve(socket_udp, worker.clone(), stop.clone());
                    drop(evloop::spawn_local(serving));
                    accepting.push((socket.id, stop));
                }
                Err(e) => {
                    tracing::error!(worker = worker.id, error = %e, "cannot use a QUIC socket")
                }
            }
            continue;
        }
        let listener = socket
            .fd
            .try_clone()
            .map(std::net::TcpListener::from)
            .and_then(|l| {
                l.set_nonblocking(true)?;
                worker.reactor.listen(l)
            });
        match listener {
            Ok(listener) => {
                let stop = Rc::new(Stop::default());
                evloop::spawn_local({
                    let worker = worker.clone();
                    let stop = stop.clone();
                    async move { accept_all(&listener, kind, &worker, &stop).await }
                });
                accepting.push((socket.id, stop));
            }
            Err(e) => tracing::error!(worker = worker.id, error = %e, "cannot register listener"),
        }
    }
}

/// Accepts connections as long as the listener has them (one wake-up drains the queue:
/// the listener's readiness is cleared only when accept4 says EAGAIN) and spawns each
/// one's task.
async fn accept_all(
    listener: &Listening,
    (kind, requested): (Kind, SocketAddr),
    worker: &Rc<Worker>,
    stop: &Stop,
) {
    loop {
        // Stopping is looked at only here, before a connection is taken: one accepted is
        // always served (during a shutdown, with `Connection: close`), never dropped.
        // The flag first, then the accept; the wait for a stop is registered only when
        // no connection is ready (not once per connection).
        if stop.stopped.get() {
            return;
        }
        let accepted = tokio::select! {
            biased;
            accepted = listener.accept() => accepted,
            _ = stop.stopped() => return,
        };
        let (fd, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors or memory: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                evloop::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // A slot for it. When none is free, make room by closing the oldest idle
        // keep-alive connection; when none is idle, hold this one and accept nothing
        // more until a slot frees (the listen backlog absorbs the rest).
        loop {
            {
                let mut slots = worker.slots.borrow_mut();
                if slots.count(ConnState::Free) > 0 {
                    break;
                }
                worker.clock.refresh();
                let now = worker.clock.millis();
                if slots.count(ConnState::Closing) == 0 {
                    if let Some(victim) = slots.oldest(ConnState::Idle) {
                        if let Some(metrics) = worker.metrics() {
                            metrics.closed(crate::metrics::Closed::Evicted);
                        }
                        worker.kill(&mut slots, victim);
                        worker.evictions.event(now, |n| {
                            tracing::warn!(
                                worker = worker.id,
                                evicted = n,
                                "connection slots full: closing the oldest idle keep-alive connections"
                            );
                        });
                    } else {
                        if let Some(metrics) = worker.metrics() {
                            metrics.accept_paused();
                        }
                        worker.pauses.event(now, |n| {
                            tracing::warn!(
                                worker = worker.id,
                                pauses = n,
                                "connection slots full and none idle: accepting paused until one frees"
                            );
                        });
                    }
                }
            }
            worker.slot_freed.notified().await;
        }
        worker.clock.refresh();
        let slot = {
            let mut slots = worker.slots.borrow_mut();
            let Some(slot) = slots.take_oldest(
                ConnState::Free,
                ConnState::ReadingHead,
                worker.clock.millis(),
            ) else {
                continue;
            };
            slots[slot] = fd.as_raw_fd();
            slot
        };
        let socket = match worker.reactor.register(fd, slot.index()) {
            Ok(socket) => socket,
            Err(e) => {
                tracing::warn!(error = %e, "cannot add a connection to the worker's epoll");
                worker.free(slot);
                continue;
            }
        };
        if let Some(metrics) = worker.metrics() {
            metrics.accepted();
        }
        // Looked up per connection, so that a reload that changes the list applies to the
        // listeners it keeps; an empty list costs one test.
        let proxied = {
            let listed = &worker.current.borrow().gen.config.proxy_protocol;
            !listed.is_empty() && listed.contains(&requested)
        };
        session::start((kind, proxied), socket, peer, worker.clone(), slot);
    }
}
