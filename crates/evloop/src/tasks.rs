//! Tasks spawned beside the connections (an ESI page's writer and fragment fetches, a
//! background refresh, a Lua timer, an HTTP/2 stream's answer): tokio's `spawn_local`,
//! on the loop. A task is a boxed future in a table row; its waker is an `Arc` that
//! queues the row, once, on a list any thread may push to, and wakes the loop if it is
//! parked. A spawned task allocates its box and its waker, as a tokio task does; the
//! connections themselves are not spawned (their rooms are the server's, allocated at
//! start).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use crate::Notifier;

thread_local! {
    /// The tasks of the loop installed on this thread, if one is.
    static TASKS: RefCell<Option<Rc<Tasks>>> = const { RefCell::new(None) };
}

/// Puts a loop's tasks on this thread; false if a loop is there already.
pub(crate) fn install(tasks: &Rc<Tasks>) -> bool {
    TASKS.with(|t| {
        let mut t = t.borrow_mut();
        if t.is_some() {
            return false;
        }
        *t = Some(tasks.clone());
        true
    })
}

pub(crate) fn uninstall() {
    TASKS.with(|t| t.borrow_mut().take());
}

/// Whether this thread has a loop's tasks installed.
pub(crate) fn installed() -> bool {
    TASKS.with(|t| t.try_borrow().is_ok_and(|t| t.is_some()))
}

type Boxed = Pin<Box<dyn Future<Output = ()>>>;

struct Row {
    generation: u32,
    future: Option<Boxed>,
    wake: Option<Arc<TaskWake>>,
    waker: Option<Waker>,
}

/// Rows woken, and what wakes the loop.
struct Queue {
    woken: Mutex<Vec<(u32, u32)>>,
    notifier: Arc<Notifier>,
}

struct TaskWake {
    row: u32,
    generation: u32,
    queued: AtomicBool,
    queue: Arc<Queue>,
}

impl Wake for TaskWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        self.queue
            .woken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((self.row, self.generation));
        self.queue.notifier.wake();
    }
}

/// Room the tables start with: a worker's few long-lived tasks and the first wakes
/// do not allocate while it serves.
const START: usize = 64;

pub(crate) struct Tasks {
    queue: Arc<Queue>,
    rows: RefCell<Vec<Row>>,
    free: RefCell<Vec<u32>>,
    polling: RefCell<Vec<(u32, u32)>>,
}

impl Tasks {
    pub(crate) fn new(notifier: Arc<Notifier>) -> Tasks {
        Tasks {
            queue: Arc::new(Queue {
                woken: Mutex::new(Vec::with_capacity(START)),
                notifier,
            }),
            rows: RefCell::new(Vec::with_capacity(START)),
            free: RefCell::new(Vec::with_capacity(START)),
            polling: RefCell::new(Vec::with_capacity(START)),
        }
    }

    fn spawn(&self, future: Boxed) -> Waker {
        let row = self.free.borrow_mut().pop();
        let mut rows = self.rows.borrow_mut();
        let row = match row {
            Some(row) => row,
            None => {
                rows.push(Row {
                    generation: 0,
                    future: None,
                    wake: None,
                    waker: None,
                });
                (rows.len() - 1) as u32
            }
        };
        let r = &mut rows[row as usize];
        r.generation = r.generation.wrapping_add(1);
        let wake = Arc::new(TaskWake {
            row,
            generation: r.generation,
            queued: AtomicBool::new(false),
            queue: self.queue.clone(),
        });
        let waker = Waker::from(wake.clone());
        r.wake = Some(wake);
        r.future = Some(future);
        r.waker = Some(waker.clone());
        waker
    }

    pub(crate) fn woken(&self) -> bool {
        !self
            .queue
            .woken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Polls every task woken so far, once each (one woken while this runs waits for
    /// the next call, after the loop has looked at its sockets). A task that panics is
    /// dropped, and its join handle says so.
    pub(crate) fn run(&self) -> bool {
        let mut polling = std::mem::take(&mut *self.polling.borrow_mut());
        std::mem::swap(
            &mut *self.queue.woken.lock().unwrap_or_else(|e| e.into_inner()),
            &mut polling,
        );
        let any = !polling.is_empty();
        for &(row, generation) in &polling {
            let (mut future, waker) = {
                let mut rows = self.rows.borrow_mut();
                let r = &mut rows[row as usize];
                if r.generation != generation {
                    continue;
                }
                match (r.future.take(), &r.wake, r.waker.clone()) {
                    (Some(f), Some(wake), Some(w)) => {
                        // Cleared before the poll: a wake during it queues the task
                        // again.
                        wake.queued.store(false, Ordering::Release);
                        (f, w)
                    }
                    _ => continue,
                }
            };
            crate::budget::reset();
            let _polling = crate::current::enter(&waker);
            let mut cx = Context::from_waker(&waker);
            let done = match std::panic::catch_unwind(AssertUnwindSafe(|| {
                future.as_mut().poll(&mut cx)
            })) {
                Ok(Poll::Pending) => false,
                Ok(Poll::Ready(())) => true,
                Err(_) => {
                    tracing_free_log("a spawned task panicked; dropped it");
                    true
                }
            };
            if done {
                drop(future);
                let mut rows = self.rows.borrow_mut();
                let r = &mut rows[row as usize];
                r.waker = None;
                r.wake = None;
                r.generation = r.generation.wrapping_add(1);
                self.free.borrow_mut().push(row);
            } else {
                self.rows.borrow_mut()[row as usize].future = Some(future);
            }
        }
        polling.clear();
        *self.polling.borrow_mut() = polling;
        any
    }

    /// Drops every task's future (the loop is ending).
    pub(crate) fn drop_all(&self) {
        loop {
            let future = {
                let mut rows = self.rows.borrow_mut();
                rows.iter_mut().find_map(|r| r.future.take())
            };
            match future {
                Some(f) => drop(f),
                None => break,
            }
        }
    }
}

/// Panics are rare and the crate has no logger of its own: standard error, as the
/// default panic hook has already done with the message.
fn tracing_free_log(what: &str) {
    eprintln!("tessera: {what}");
}

/// A spawned task's end: its output, and who waits for it.
struct JoinState<T> {
    output: RefCell<Option<Result<T, JoinError>>>,
    finished: Cell<bool>,
    aborted: Cell<bool>,
    joiner: RefCell<Option<Waker>>,
    task: RefCell<Option<Waker>>,
}

impl<T> JoinState<T> {
    fn finish(&self, result: Result<T, JoinError>) {
        if self.finished.replace(true) {
            return;
        }
        *self.output.borrow_mut() = Some(result);
        self.task.borrow_mut().take();
        if let Some(w) = self.joiner.borrow_mut().take() {
            w.wake();
        }
    }
}

trait Control {
    fn abort(&self);
    fn is_finished(&self) -> bool;
}

impl<T> Control for JoinState<T> {
    fn abort(&self) {
        if self.finished.get() {
            return;
        }
        self.aborted.set(true);
        let task = self.task.borrow().clone();
        if let Some(w) = task {
            w.wake();
        }
    }

    fn is_finished(&self) -> bool {
        self.finished.get()
    }
}

/// The spawned future and where its output goes; if it is dropped before it ends
/// (aborted, panicked, the loop ending) the join handle hears so.
struct Spawned<F: Future> {
    future: F,
    state: Rc<JoinState<F::Output>>,
}

impl<F: Future> Future for Spawned<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: `future` is structurally pinned, never moved out.
        let this = unsafe { self.get_unchecked_mut() };
        if this.state.aborted.get() {
            this.state.finish(Err(JoinError { cancelled: true }));
            return Poll::Ready(());
        }
        match unsafe { Pin::new_unchecked(&mut this.future) }.poll(cx) {
            Poll::Ready(v) => {
                this.state.finish(Ok(v));
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F: Future> Drop for Spawned<F> {
    fn drop(&mut self) {
        let cancelled = self.state.aborted.get();
        self.state.finish(Err(JoinError { cancelled }));
    }
}

/// Runs `future` on this thread's loop (or, with none, tokio's `spawn_local`, inside
/// a LocalSet).
pub fn spawn_local<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    let tasks = TASKS.with(|t| t.try_borrow().ok().and_then(|t| t.clone()));
    let Some(tasks) = tasks else {
        return JoinHandle(Handle::Tokio(tokio::task::spawn_local(future)));
    };
    let state = Rc::new(JoinState {
        output: RefCell::new(None),
        finished: Cell::new(false),
        aborted: Cell::new(false),
        joiner: RefCell::new(None),
        task: RefCell::new(None),
    });
    let waker = tasks.spawn(Box::pin(Spawned {
        future,
        state: state.clone(),
    }));
    *state.task.borrow_mut() = Some(waker.clone());
    waker.wake();
    JoinHandle(Handle::Loop(state))
}

/// Why a spawned task gave no output.
#[derive(Debug)]
pub struct JoinError {
    cancelled: bool,
}

impl JoinError {
    /// It was aborted.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }
}

impl std::fmt::Display for JoinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.cancelled {
            "task was cancelled"
        } else {
            "task panicked or its loop ended"
        })
    }
}

impl std::error::Error for JoinError {}

enum Handle<T> {
    Loop(Rc<JoinState<T>>),
    Tokio(tokio::task::JoinHandle<T>),
}

/// Awaits a spawned task's output; dropping it lets the task run on.
pub struct JoinHandle<T>(Handle<T>);

impl<T: 'static> JoinHandle<T> {
    /// Ends the task at its next turn (its future is dropped).
    pub fn abort(&self) {
        match &self.0 {
            Handle::Loop(s) => s.abort(),
            Handle::Tokio(h) => h.abort(),
        }
    }

    /// Whether it has ended.
    pub fn is_finished(&self) -> bool {
        match &self.0 {
            Handle::Loop(s) => s.is_finished(),
            Handle::Tokio(h) => h.is_finished(),
        }
    }

    /// A handle that can only end the task.
    pub fn abort_handle(&self) -> AbortHandle {
        match &self.0 {
            Handle::Loop(s) => AbortHandle(Abort::Loop(s.clone())),
            Handle::Tokio(h) => AbortHandle(Abort::Tokio(h.abort_handle())),
        }
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().0 {
            Handle::Loop(s) => match s.output.borrow_mut().take() {
                Some(r) => Poll::Ready(r),
                None => {
                    *s.joiner.borrow_mut() = Some(cx.waker().clone());
                    Poll::Pending
                }
            },
            Handle::Tokio(h) => match Pin::new(h).poll(cx) {
                Poll::Ready(Ok(v)) => Poll::Ready(Ok(v)),
                Poll::Ready(Err(e)) => Poll::Ready(Err(JoinError {
                    cancelled: e.is_cancelled(),
                })),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

enum Abort {
    Loop(Rc<dyn Control>),
    Tokio(tokio::task::AbortHandle),
}

/// Ends a spawned task (see [`JoinHandle::abort_handle`]).
pub struct AbortHandle(Abort);

impl AbortHandle {
    pub fn abort(&self) {
        match &self.0 {
            Abort::Loop(s) => s.abort(),
            Abort::Tokio(h) => h.abort(),
        }
    }

    pub fn is_finished(&self) -> bool {
        match &self.0 {
            Abort::Loop(s) => s.is_finished(),
            Abort::Tokio(h) => h.is_finished(),
        }
    }
}
