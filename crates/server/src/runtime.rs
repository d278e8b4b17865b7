//! A worker thread's life: its runtime, its listeners and accept loop, and its graceful
//! shutdown. The worker's state is [`Worker`]; each accepted connection is a task
//! running [`conn::serve`].

use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use pool::Pool;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

use crate::access_log::WorkerLogs;
use crate::date::Clock;
use crate::transport::Stream;
use crate::worker::{ConnState, RateLimitedLog, Worker};
use crate::{conn, Shared};

/// Binds one listener with SO_REUSEPORT, so every worker can have its own and the kernel
/// balances new connections across them.
pub(crate) fn bind(addr: SocketAddr, backlog: u32) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        // [::]:8080 and 0.0.0.0:8080 can then both be listed.
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    // Responses go out as whole batches; Nagle would only delay the last segment. Set
    // here, not per connection: Linux gives an accepted socket its listener's
    // TCP_NODELAY, which saves a setsockopt(2) for every connection.
    socket.set_tcp_nodelay(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(socket.into())
}

pub(crate) fn run(
    id: usize,
    (listeners, tls_listeners): (Vec<std::net::TcpListener>, Vec<std::net::TcpListener>),
    shared: Arc<Shared>,
    log: Option<WorkerLogs>,
    mut shutdown: watch::Receiver<bool>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!(worker = id, error = %e, "cannot start worker runtime");
            return;
        }
    };
    let capacity = shared.slots_per_worker();
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        // Each module's service for this worker, started on its thread inside the
        // LocalSet (a service may spawn its own tasks).
        let services = shared.modules.iter().map(|m| m.start(id)).collect();
        let worker = Rc::new(Worker {
            id,
            clock: Clock::new(shared.epoch),
            path: RefCell::new(Vec::with_capacity(256)),
            cpath: RefCell::new(Vec::with_capacity(256)),
            slots: RefCell::new(Pool::new(capacity, ConnState::Free, 0, |_| -1)),
            spare: RefCell::new(Vec::with_capacity(capacity)),
            slot_freed: Notify::new(),
            shutting_down: Cell::new(false),
            evictions: RateLimitedLog::new(),
            pauses: RateLimitedLog::new(),
            timeouts: RateLimitedLog::new(),
            services,
            log: RefCell::new(log),
            drops: RateLimitedLog::new(),
            tls: Cell::new(None),
            dropped_seen: Cell::new(0),
            refusals: RateLimitedLog::new(),
            shared,
        });
        let tls = tls_listeners.into_iter().map(|l| (l, true));
        for (listener, is_tls) in listeners.into_iter().map(|l| (l, false)).chain(tls) {
            match TcpListener::from_std(listener) {
                Ok(listener) => {
                    tokio::task::spawn_local(accept_loop(
                        listener,
                        is_tls,
                        worker.clone(),
                        shutdown.clone(),
                    ));
                }
                Err(e) => tracing::error!(worker = id, error = %e, "cannot register listener"),
            }
        }
        let sweeper = tokio::task::spawn_local({
            let worker = worker.clone();
            async move {
                let mut tick = tokio::time::interval(Duration::from_millis(250));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    tick.tick().await;
                    worker.sweep();
                }
            }
        });
        while !*shutdown.borrow_and_update() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
        worker.shutting_down.set(true);
        {
            let slots = worker.slots.borrow();
            for state in ConnState::ALL {
                if state == ConnState::Free {
                    continue;
                }
                for (slot, _) in slots.iter(state) {
                    // Idle connections see end-of-file and close; busy ones finish
                    // their response first and then close because the worker is
                    // shutting down.
                    // SAFETY: the descriptor belongs to a live connection.
                    unsafe { libc::shutdown(slots[slot], libc::SHUT_RD) };
                }
            }
        }
        let grace = Duration::from_secs(worker.shared.config.shutdown_timeout);
        let drained = async {
            while worker.slots.borrow().count(ConnState::Free) < capacity {
                worker.slot_freed.notified().await;
            }
        };
        if tokio::time::timeout(grace, drained).await.is_err() {
            tracing::warn!(
                worker = id,
                open = capacity - worker.slots.borrow().count(ConnState::Free),
                "shutdown timeout: closing connections still open"
            );
        }
        sweeper.abort();
        let log = worker.log.borrow_mut().take();
        if let Some(mut log) = log {
            log.flush_blocking();
        }
    });
}

/// Accepts until shutdown. The shutdown signal is awaited once around the whole loop, not
/// once per connection (each wait registers a waiter and removes it again).
async fn accept_loop(
    listener: TcpListener,
    is_tls: bool,
    worker: Rc<Worker>,
    mut shutdown: watch::Receiver<bool>,
) {
    tokio::select! {
        _ = accept_all(&listener, is_tls, &worker) => {}
        _ = shutdown.changed() => {}
    }
}

/// Accepts connections as long as the listener has them (tokio's accept retries until
/// the kernel says EAGAIN, so one wake-up drains the queue) and spawns each one's task.
async fn accept_all(listener: &TcpListener, is_tls: bool, worker: &Rc<Worker>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors or memory: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
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
                        worker.kill(&mut slots, victim);
                        worker.evictions.event(now, |n| {
                            tracing::warn!(
                                worker = worker.id,
                                evicted = n,
                                "connection slots full: closing the oldest idle keep-alive connections"
                            );
                        });
                    } else {
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
        if worker.is_shutting_down() {
            return;
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
            slots[slot] = stream.as_raw_fd();
            slot
        };
        if is_tls {
            tokio::task::spawn_local(crate::tls::serve(stream, peer, worker.clone(), slot));
            continue;
        }
        tokio::task::spawn_local(conn::serve(conn::Conn::new(
            Stream::Plain(stream),
            peer,
            worker.clone(),
            slot,
        )));
    }
}
