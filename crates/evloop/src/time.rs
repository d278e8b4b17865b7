//! Timers: tokio's `sleep`, `sleep_until`, `timeout` and `timeout_at`, kept on the
//! worker loop's own timer list on a loop's thread and tokio's elsewhere (see the
//! crate's doc); and the loop's clocks, [`now`] and [`system_now`], read at most once
//! per turn.
//!
//! **The clocks of a turn.** A proxied request read the clock about ten times (its
//! deadlines, its peer's health times, its cache dates, its metrics and log line), each
//! a vDSO `clock_gettime`, 1.3% of its CPU time. On a loop's thread [`now`] and
//! [`system_now`] read their clock the first time they are asked in a turn and answer
//! with that reading for the rest of it, as nginx's cached time does (`ngx_time_update`
//! once per `epoll_wait`, `ngx_current_msec` for every timer and log time). A reading is
//! as old as the work done in the turn before it is asked: a deadline made from it is
//! that much early, a time measured with it (a log line's duration, a histogram's
//! sample) that much off, which is the turn's length at most. A turn polls each woken
//! connection and task a few rounds (`server/src/net/event_loop.rs`), a millisecond or
//! so under load; the deadlines are seconds and the times are logged to the
//! millisecond as nginx's (`$request_time`, `$upstream_header_time`). What must be
//! exact to the microsecond reads the clock itself (`std::time::Instant::now`). On a
//! thread with no loop (tests, helper threads) there are no turns and each call reads
//! the clock (tokio's `Instant::now`, so a test's paused clock is the one read).
//!
//! The list is a binary heap of deadlines over a table of timers that a sleep holds a
//! key to. A sleep dropped before its deadline (most are: a request's upstream
//! timeouts are armed for every request and almost never fire) frees its row at once
//! and leaves its heap entry behind, skipped when it comes up; the heap is rebuilt
//! without the stale entries once they outnumber the live ones, so it stays within a
//! small multiple of the timers set. Rows and heap keep their capacity: a timer set
//! and dropped allocates nothing once the worker has run a while. A timer wheel (as
//! tokio's) would make setting one O(1) instead of O(log n); with the few hundred
//! timers a worker holds the heap's few comparisons are not what a request costs.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::marker::PhantomPinned;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime};

pub use tokio::time::Instant;

/// A timeout's deadline passed before its future was ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed(());

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

/// A row of the loop's timers: which sleep holds it (its generation) and its waker.
struct Row {
    generation: u32,
    live: bool,
    waker: Option<Waker>,
}

/// A sleep's hold on its row.
#[derive(Clone, Copy)]
struct Key {
    row: u32,
    generation: u32,
}

/// The loop's timers (see the module's doc).
pub(crate) struct Timers {
    rows: Vec<Row>,
    free: Vec<u32>,
    heap: BinaryHeap<Reverse<(std::time::Instant, u32, u32)>>,
    live: usize,
    /// Wakers taken by the last `fire`, woken once the table is no longer borrowed.
    due: Vec<Waker>,
}

/// Room the tables start with, so that the first timers a worker sets and fires (the
/// sweep's, a few requests') do not allocate while it serves.
const START: usize = 64;

impl Default for Timers {
    fn default() -> Timers {
        Timers {
            rows: Vec::with_capacity(START),
            free: Vec::with_capacity(START),
            heap: BinaryHeap::with_capacity(START),
            live: 0,
            due: Vec::with_capacity(START),
        }
    }
}

impl Timers {
    fn insert(&mut self, deadline: std::time::Instant, waker: Waker) -> Key {
        let row = match self.free.pop() {
            Some(row) => row,
            None => {
                self.rows.push(Row {
                    generation: 0,
                    live: false,
                    waker: None,
                });
                (self.rows.len() - 1) as u32
            }
        };
        let r = &mut self.rows[row as usize];
        r.generation = r.generation.wrapping_add(1);
        r.live = true;
        r.waker = Some(waker);
        let generation = r.generation;
        self.live += 1;
        if self.heap.len() > 2 * self.live + 1024 {
            let rows = &self.rows;
            self.heap
                .retain(|Reverse((_, row, g))| Timers::current(rows, *row, *g));
        }
        self.heap.push(Reverse((deadline, row, generation)));
        Key { row, generation }
    }

    fn current(rows: &[Row], row: u32, generation: u32) -> bool {
        let r = &rows[row as usize];
        r.live && r.generation == generation
    }

    fn set_waker(&mut self, key: Key, waker: &Waker) {
        let r = &mut self.rows[key.row as usize];
        if r.live && r.generation == key.generation {
            match &r.waker {
                Some(w) if w.will_wake(waker) => {}
                _ => r.waker = Some(waker.clone()),
            }
        }
    }

    fn remove(&mut self, key: Key) {
        let r = &mut self.rows[key.row as usize];
        if r.generation == key.generation && r.live {
            r.live = false;
            r.waker = None;
            self.live -= 1;
            self.free.push(key.row);
        }
    }

    /// When the earliest live timer is due.
    pub(crate) fn next_deadline(&mut self) -> Option<std::time::Instant> {
        while let Some(Reverse((deadline, row, g))) = self.heap.peek() {
            if Timers::current(&self.rows, *row, *g) {
                return Some(*deadline);
            }
            self.heap.pop();
        }
        None
    }
}

thread_local! {
    /// The number of this thread's loop's current turn (0: no loop, or none taken yet).
    static TURN: Cell<u64> = const { Cell::new(0) };
    /// The clocks as read in a turn of this thread's loop: (turn, reading); turn 0 is
    /// never one (no loop), so it never matches.
    static NOW: Cell<(u64, Option<std::time::Instant>)> = const { Cell::new((0, None)) };
    static SYSTEM_NOW: Cell<(u64, Option<SystemTime>)> = const { Cell::new((0, None)) };
}

/// The monotonic clock as of this turn of the thread's loop: read the first time it is
/// asked in a turn, the same reading for the rest of it (see the module's doc for why a
/// reading that old is right for deadlines and logged times). Without a loop, the clock
/// now.
pub fn now() -> Instant {
    let turn = turn();
    if turn == 0 {
        return Instant::now();
    }
    NOW.with(|cached| match cached.get() {
        (t, Some(at)) if t == turn => Instant::from_std(at),
        _ => {
            let at = Instant::now();
            cached.set((turn, Some(at.into_std())));
            at
        }
    })
}

/// The wall clock as of this turn of the thread's loop, as [`now`] is the monotonic
/// one: for dates (a cached object's age, the time a log line gives), not for durations.
pub fn system_now() -> SystemTime {
    let turn = turn();
    if turn == 0 {
        return SystemTime::now();
    }
    SYSTEM_NOW.with(|cached| match cached.get() {
        (t, Some(at)) if t == turn => at,
        _ => {
            let at = SystemTime::now();
            cached.set((turn, Some(at)));
            at
        }
    })
}

/// The number of this thread's loop's turn (`crate::turn`).
pub(crate) fn turn() -> u64 {
    TURN.with(Cell::get)
}

pub(crate) fn next_turn() {
    TURN.with(|t| t.set(t.get() + 1));
}

/// This thread's loop is going: no turn, and its readings forgotten (the next loop
/// counts its turns from 1 again).
pub(crate) fn end_turns() {
    TURN.with(|t| t.set(0));
    NOW.with(|c| c.set((0, None)));
    SYSTEM_NOW.with(|c| c.set((0, None)));
}

thread_local! {
    /// The timers of the loop installed on this thread, if one is.
    static TIMERS: RefCell<Option<Rc<RefCell<Timers>>>> = const { RefCell::new(None) };
}

/// Puts a loop's timers on this thread.
pub(crate) fn install() -> Rc<RefCell<Timers>> {
    let timers = Rc::new(RefCell::new(Timers::default()));
    TIMERS.with(|t| *t.borrow_mut() = Some(timers.clone()));
    timers
}

pub(crate) fn uninstall() {
    TIMERS.with(|t| t.borrow_mut().take());
}

/// Runs `f` with this thread's loop's timers, if a loop is installed.
fn with_timers<R>(f: impl FnOnce(Option<&RefCell<Timers>>) -> R) -> R {
    TIMERS.with(|t| match t.try_borrow() {
        Ok(t) => f(t.as_deref()),
        Err(_) => f(None),
    })
}

/// Wakes the sleeps due by now (their rows stay theirs until they are dropped).
pub(crate) fn fire(timers: &RefCell<Timers>) {
    let mut due = {
        let mut t = timers.borrow_mut();
        // The turn's reading, which its requests' deadlines and times then share.
        let due_by = now().into_std();
        let mut due = std::mem::take(&mut t.due);
        while let Some(Reverse((deadline, row, g))) = t.heap.peek().copied() {
            if deadline > due_by {
                break;
            }
            t.heap.pop();
            if Timers::current(&t.rows, row, g) {
                if let Some(w) = t.rows[row as usize].waker.take() {
                    due.push(w);
                }
            }
        }
        due
    };
    for w in due.drain(..) {
        w.wake();
    }
    if let Ok(mut t) = timers.try_borrow_mut() {
        t.due = due;
    }
}

/// Waits until `duration` has passed (from the turn's [`now`]: on a loop, as much
/// earlier as the turn has run).
pub fn sleep(duration: Duration) -> Sleep {
    sleep_until(now() + duration)
}

/// Waits until `deadline`.
pub fn sleep_until(deadline: Instant) -> Sleep {
    let kind = if with_timers(|t| t.is_some()) {
        Kind::Loop {
            deadline,
            key: None,
        }
    } else {
        Kind::Tokio(tokio::time::sleep_until(deadline))
    };
    Sleep {
        kind,
        _pinned: PhantomPinned,
    }
}

/// `future`, or [`Elapsed`] if it is not ready within `duration` (from the turn's
/// [`now`], as [`sleep`]).
pub fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    timeout_at(now() + duration, future)
}

/// `future`, or [`Elapsed`] if it is not ready by `deadline`.
pub fn timeout_at<F: Future>(deadline: Instant, future: F) -> Timeout<F> {
    Timeout {
        future,
        sleep: sleep_until(deadline),
    }
}

enum Kind {
    Loop { deadline: Instant, key: Option<Key> },
    Tokio(tokio::time::Sleep),
}

/// A timer (see [`sleep`]). Setting one on the loop costs nothing until it is first
/// polled.
pub struct Sleep {
    kind: Kind,
    _pinned: PhantomPinned,
}

impl Sleep {
    /// When it is due.
    pub fn deadline(&self) -> Instant {
        match &self.kind {
            Kind::Loop { deadline, .. } => *deadline,
            Kind::Tokio(s) => s.deadline(),
        }
    }

    /// Sets it again, to `deadline`.
    pub fn reset(self: Pin<&mut Self>, deadline: Instant) {
        // SAFETY: only the tokio sleep is structurally pinned, and it is re-pinned in
        // place; nothing is moved out.
        let this = unsafe { self.get_unchecked_mut() };
        match &mut this.kind {
            Kind::Loop { deadline: d, key } => {
                if let Some(key) = key.take() {
                    release(key);
                }
                *d = deadline;
            }
            Kind::Tokio(s) => unsafe { Pin::new_unchecked(s) }.reset(deadline),
        }
    }
}

fn release(key: Key) {
    with_timers(|t| {
        if let Some(Ok(mut t)) = t.map(RefCell::try_borrow_mut) {
            t.remove(key);
        }
    });
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: as in `reset`.
        let this = unsafe { self.get_unchecked_mut() };
        match &mut this.kind {
            Kind::Loop { deadline, key } => {
                let deadline = deadline.into_std();
                // Due by the turn's reading. One due only by the clock read since goes
                // on the list, and the loop's wait for it (timed by the clock itself)
                // is 0: it fires in the next turn.
                if now().into_std() >= deadline {
                    if let Some(key) = key.take() {
                        release(key);
                    }
                    return Poll::Ready(());
                }
                with_timers(|t| {
                    let Some(t) = t else {
                        // Polled on a thread with no loop (it was made on one): wake
                        // again soon rather than never.
                        cx.waker().wake_by_ref();
                        return;
                    };
                    let mut t = t.borrow_mut();
                    match key {
                        Some(k) => t.set_waker(*k, cx.waker()),
                        None => *key = Some(t.insert(deadline, cx.waker().clone())),
                    }
                });
                Poll::Pending
            }
            Kind::Tokio(s) => unsafe { Pin::new_unchecked(s) }.poll(cx),
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Kind::Loop { key: Some(key), .. } = &self.kind {
            release(*key);
        }
    }
}

/// A future with a deadline (see [`timeout`]).
pub struct Timeout<F> {
    future: F,
    sleep: Sleep,
}

impl<F> Timeout<F> {
    /// The future inside.
    pub fn get_mut(self: Pin<&mut Self>) -> Pin<&mut F> {
        // SAFETY: structural pinning of `future`, which is never moved out.
        unsafe { self.map_unchecked_mut(|t| &mut t.future) }
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: both fields are structurally pinned and never moved out.
        let this = unsafe { self.get_unchecked_mut() };
        if let Poll::Ready(v) = unsafe { Pin::new_unchecked(&mut this.future) }.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        match unsafe { Pin::new_unchecked(&mut this.sleep) }.poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed(()))),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn dropped_timers_leave_the_heap_bounded_and_due_ones_fire_in_order() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut t = Timers::default();
        let now = std::time::Instant::now();
        for i in 0..100_000u64 {
            let k = t.insert(now + Duration::from_secs(60 + i), waker.clone());
            t.remove(k);
        }
        assert!(t.heap.len() <= 2 * t.live + 1025, "heap {}", t.heap.len());
        assert_eq!(t.next_deadline(), None);
        let late = t.insert(now + Duration::from_secs(3600), waker.clone());
        let soon = t.insert(now, waker.clone());
        assert_eq!(t.next_deadline(), Some(now));
        let cell = RefCell::new(t);
        fire(&cell);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        let mut t = cell.into_inner();
        t.remove(soon);
        assert_eq!(t.next_deadline(), Some(now + Duration::from_secs(3600)));
        t.remove(late);
        assert_eq!((t.live, t.next_deadline()), (0, None));
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_loop_timers_are_tokios() {
        let start = Instant::now();
        sleep(Duration::from_secs(5)).await;
        assert_eq!(Instant::now() - start, Duration::from_secs(5));
        let r = timeout(Duration::from_secs(1), std::future::pending::<()>()).await;
        assert_eq!(r, Err(Elapsed(())));
        assert_eq!(timeout(Duration::from_secs(1), async { 7 }).await, Ok(7));
    }
}
