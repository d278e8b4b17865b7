//! A worker: one OS thread, one single-threaded tokio runtime, its own listeners, its own
//! file cache and date header. Nothing here is shared with other workers except the
//! read-only [`Shared`].

use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

use crate::date::DateCache;
use crate::files::FileCache;
use crate::{conn, Shared};

pub(crate) struct Worker {
    pub shared: Arc<Shared>,
    pub date: DateCache,
    pub files: RefCell<FileCache>,
    /// Reused buffers for path handling: the normalised path and the C path to open.
    pub scratch: RefCell<(Vec<u8>, Vec<u8>)>,
    shutting_down: Cell<bool>,
    /// The sockets of open connections, to half-close them on shutdown.
    connections: RefCell<slab::Slab<RawFd>>,
    drained: Notify,
}

impl Worker {
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.get()
    }
}

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
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(socket.into())
}

pub(crate) fn run(
    id: usize,
    listeners: Vec<std::net::TcpListener>,
    shared: Arc<Shared>,
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
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let worker = Rc::new(Worker {
            date: DateCache::new(),
            files: RefCell::new(FileCache::new(shared.config.file_cache_entries)),
            scratch: RefCell::new((Vec::with_capacity(256), Vec::with_capacity(256))),
            shutting_down: Cell::new(false),
            connections: RefCell::new(slab::Slab::with_capacity(64)),
            drained: Notify::new(),
            shared,
        });
        for listener in listeners {
            match TcpListener::from_std(listener) {
                Ok(listener) => {
                    tokio::task::spawn_local(accept_loop(
                        listener,
                        worker.clone(),
                        shutdown.clone(),
                    ));
                }
                Err(e) => tracing::error!(worker = id, error = %e, "cannot register listener"),
            }
        }
        while !*shutdown.borrow_and_update() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
        worker.shutting_down.set(true);
        for (_, &fd) in worker.connections.borrow().iter() {
            // Idle connections see end-of-file and close; busy ones finish their
            // response first and then close because the worker is shutting down.
            // SAFETY: fd belongs to a live connection of this worker.
            unsafe { libc::shutdown(fd, libc::SHUT_RD) };
        }
        let grace = Duration::from_secs(worker.shared.config.shutdown_timeout);
        let drained = async {
            while !worker.connections.borrow().is_empty() {
                worker.drained.notified().await;
            }
        };
        if tokio::time::timeout(grace, drained).await.is_err() {
            tracing::warn!(
                worker = id,
                open = worker.connections.borrow().len(),
                "shutdown timeout: closing connections still open"
            );
        }
    });
}

async fn accept_loop(
    listener: TcpListener,
    worker: Rc<Worker>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.changed() => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors or memory: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if worker.is_shutting_down() {
            return;
        }
        // Responses go out as whole batches; Nagle would only delay the last segment.
        let _ = stream.set_nodelay(true);
        let key = worker.connections.borrow_mut().insert(stream.as_raw_fd());
        let worker = worker.clone();
        tokio::task::spawn_local(async move {
            conn::serve(stream, &worker).await;
            worker.connections.borrow_mut().remove(key);
            if worker.is_shutting_down() {
                worker.drained.notify_one();
            }
        });
    }
}
