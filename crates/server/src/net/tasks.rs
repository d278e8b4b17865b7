//! The worker's connection tasks: each connection's future lives in its slot's room in
//! a table allocated with the slots at start, and the worker's loop
//! (`event_loop.rs`) polls the ones that were woken.
//!
//! Written by hand rather than spawning a tokio task per connection because a tokio task
//! is a heap allocation per connection (its cell holds the future), and the connection
//! budget is fixed at start (issue 27: no allocation per accepted connection). A room
//! holds the largest connection future (checked when the code is compiled); the future
//! is written into it in place and never moves until it is dropped there, so it is
//! pinned. The wakers are one static record per slot (no reference count, no
//! allocation): waking pushes the slot's index, once, onto the worker's ready list.

use std::cell::{Cell, RefCell, UnsafeCell};
use std::future::Future;
use std::mem::MaybeUninit;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

/// Bytes of room for a connection's future: the largest of them fits, which
/// [`Tasks::start`] checks when the code is compiled. A TLS connection's is 408 bytes
/// (its HTTP/1 and HTTP/2 parts are boxed), a cleartext one's 272.
const ROOM: usize = 416;

#[repr(C, align(16))]
struct Room(MaybeUninit<[u8; ROOM]>);

/// Polls and drops the future of type `F` in a room (one pair per future type).
struct VTable {
    poll: unsafe fn(*mut u8, &mut Context<'_>) -> Poll<()>,
    drop: unsafe fn(*mut u8),
}

trait Erase {
    const VTABLE: VTable;
}

impl<F: Future<Output = ()>> Erase for F {
    const VTABLE: VTable = VTable {
        // SAFETY (both): called only on a room holding a live, pinned F (see `Slot`).
        poll: |room, cx| unsafe { Pin::new_unchecked(&mut *room.cast::<F>()).poll(cx) },
        drop: |room| unsafe { room.cast::<F>().drop_in_place() },
    };
}

/// One slot's room: its connection's future, pinned where it was written.
type Slot = UnsafeCell<Room>;

/// A slot's waker: where its index goes when it is woken. Shared with other threads
/// (a waker may be woken anywhere), so static: leaked once per worker with the table.
struct Wake {
    index: u32,
    queued: AtomicBool,
    ready: &'static Mutex<Ready>,
}

/// The slots woken and not polled since, and what wakes the loop when it is parked.
struct Ready {
    list: Vec<u32>,
    notifier: Option<Arc<evloop::Notifier>>,
}

pub(crate) struct Tasks {
    /// The rooms, never written before a connection uses one: the table's pages cost
    /// memory only once connections have used them (its 416 bytes a slot would
    /// otherwise all be resident from the start).
    slots: Box<[Slot]>,
    /// Per slot, set while its room holds a future, whose type it erases (apart from
    /// the rooms, so that setting them up does not touch the rooms' pages).
    vtables: Box<[Cell<Option<&'static VTable>>]>,
    wakes: &'static [Wake],
    ready: &'static Mutex<Ready>,
    /// The list being polled (swapped with the ready list; both have room for every
    /// slot, and a slot is on one at most once, so neither grows).
    polling: RefCell<Vec<u32>>,
}

static WAKE_VTABLE: RawWakerVTable = RawWakerVTable::new(
    |data| RawWaker::new(data, &WAKE_VTABLE),
    // SAFETY (both wakes): data is a &'static Wake (see `Tasks::waker`).
    |data| unsafe { &*data.cast::<Wake>() }.wake(),
    |data| unsafe { &*data.cast::<Wake>() }.wake(),
    |_| {},
);

impl Wake {
    fn wake(&self) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        ready.list.push(self.index);
        if let Some(notifier) = &ready.notifier {
            notifier.wake();
        }
    }
}

impl Tasks {
    /// A table of `slots` rooms. Its wakers are leaked: they must stay valid for as
    /// long as anything may hold one (a timer, another thread's channel), which can be
    /// after the worker ends; a worker's are a few bytes per slot, once.
    pub(crate) fn new(slots: usize, notifier: Arc<evloop::Notifier>) -> Tasks {
        let ready: &'static Mutex<Ready> = Box::leak(Box::new(Mutex::new(Ready {
            list: Vec::with_capacity(slots),
            notifier: Some(notifier),
        })));
        let wakes = (0..slots)
            .map(|index| Wake {
                index: index as u32,
                queued: AtomicBool::new(false),
                ready,
            })
            .collect::<Vec<_>>();
        Tasks {
            slots: rooms(slots),
            vtables: (0..slots).map(|_| Cell::new(None)).collect(),
            wakes: Box::leak(wakes.into_boxed_slice()),
            ready,
            polling: RefCell::new(Vec::with_capacity(slots)),
        }
    }

    /// Starts `future` as slot `index`'s task: it is polled soon by the driver. The
    /// slot's room should be empty (its previous task ended).
    pub(crate) fn start<F: Future<Output = ()> + 'static>(&self, index: usize, future: F) {
        const {
            assert!(
                std::mem::size_of::<F>() <= ROOM,
                "a connection future outgrew its room"
            );
            assert!(std::mem::align_of::<F>() <= std::mem::align_of::<Room>());
        }
        let slot = &self.slots[index];
        if self.vtables[index].get().is_some() {
            // A slot is freed as its task's last act, so this is a bug; the accept loop
            // that calls this must not die of it.
            tracing::error!(
                slot = index,
                "a new connection's slot still had a task: ended it"
            );
            self.finish(index);
        }
        // SAFETY: the room is empty, large and aligned enough for F (checked above);
        // the table never moves (a boxed slice), so the future stays where it is
        // written until `finish` drops it there.
        unsafe { slot.get().cast::<F>().write(future) };
        self.vtables[index].set(Some(&<F as Erase>::VTABLE));
        self.wakes[index].wake();
    }

    fn waker(&self, index: usize) -> Waker {
        let data: *const Wake = &self.wakes[index];
        // SAFETY: WAKE_VTABLE's functions take data as a &'static Wake, which it is.
        unsafe { Waker::from_raw(RawWaker::new(data.cast(), &WAKE_VTABLE)) }
    }

    /// Drops slot `index`'s future in place and empties its room.
    fn finish(&self, index: usize) {
        let slot = &self.slots[index];
        if let Some(vtable) = self.vtables[index].take() {
            // SAFETY: the room held a live future of the type vtable erases; it is
            // marked empty first, so a panic in its drop cannot drop it twice.
            unsafe { (vtable.drop)(slot.get().cast()) };
        }
    }

    /// Whether a task was woken and waits to be polled.
    pub(crate) fn woken(&self) -> bool {
        !self
            .ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .list
            .is_empty()
    }

    /// Polls every task woken so far, once each (one woken meanwhile waits for the
    /// loop's next round, after it has looked at its sockets), each with a fresh
    /// budget (`evloop::budget`). A task that panics is dropped and `panicked` told
    /// its slot. Whether any was polled.
    pub(crate) fn run(&self, panicked: &dyn Fn(usize)) -> bool {
        let mut polling = self.polling.borrow_mut();
        {
            let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
            if ready.list.is_empty() {
                return false;
            }
            std::mem::swap(&mut ready.list, &mut *polling);
        }
        for &index in polling.iter() {
            let index = index as usize;
            // Cleared before the poll: a wake during it queues the task again. A
            // swap, not a store: it orders the clear before what the poll reads, so
            // a wake that found the flag set has published what it woke for.
            self.wakes[index].queued.swap(false, Ordering::AcqRel);
            let slot = &self.slots[index];
            let Some(vtable) = self.vtables[index].get() else {
                // Woken after it ended (a waker outlives its task).
                continue;
            };
            let waker = self.waker(index);
            let mut task_cx = Context::from_waker(&waker);
            evloop::budget::reset();
            let _polling = evloop::current::enter(&waker);
            // SAFETY: the room holds a live future of the type vtable erases, pinned
            // (see `start`); a task is polled here only, never from inside itself.
            let polled = std::panic::catch_unwind(AssertUnwindSafe(|| unsafe {
                (vtable.poll)(slot.get().cast(), &mut task_cx)
            }));
            match polled {
                Ok(Poll::Pending) => {}
                Ok(Poll::Ready(())) => self.finish(index),
                Err(_) => {
                    // A bug in a connection must not take its worker's other
                    // connections down: it ends that connection only.
                    tracing::error!(slot = index, "a connection's task panicked; it is closed");
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| self.finish(index)));
                    panicked(index);
                }
            }
        }
        polling.clear();
        true
    }
}

impl Drop for Tasks {
    /// The futures are pinned in the rooms: they are dropped in place before the rooms'
    /// memory goes.
    fn drop(&mut self) {
        self.end_all();
        // The ready list outlives the table (it is leaked with the wakers); the loop's
        // notifier in it must not, or its eventfd stays open after the worker ends.
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .notifier
            .take();
    }
}

/// `count` rooms, allocated without being written: uninitialised memory needs no
/// initialising, so the allocator's fresh pages stay untouched until a room is used.
fn rooms(count: usize) -> Box<[Slot]> {
    let rooms = Box::<[Slot]>::new_uninit_slice(count);
    // SAFETY: a room is an UnsafeCell of MaybeUninit bytes, for which any contents,
    // uninitialised included, are a valid value.
    unsafe { rooms.assume_init() }
}

impl Tasks {
    /// Drops every task still running (when the worker ends: their futures hold the
    /// worker, so nothing else would).
    pub(crate) fn end_all(&self) {
        for index in 0..self.slots.len() {
            self.finish(index);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// Counts its drops; ready after `polls` polls, waking itself in between.
    struct Probe {
        polls: usize,
        dropped: Rc<Cell<usize>>,
    }

    impl Future for Probe {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.polls == 0 {
                return Poll::Ready(());
            }
            self.polls -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            self.dropped.set(self.dropped.get() + 1);
        }
    }

    fn tasks(slots: usize) -> Tasks {
        Tasks::new(slots, Arc::new(evloop::Notifier::new().unwrap()))
    }

    /// Polls what `tasks` has woken until `done` holds.
    fn drive(tasks: &Tasks, panicked: &Cell<Vec<usize>>, done: impl Fn() -> bool) {
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_secs(10) {
            if done() {
                return;
            }
            tasks.run(&|i| {
                let mut seen = panicked.take();
                seen.push(i);
                panicked.set(seen);
            });
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("the tasks did not finish");
    }

    #[test]
    fn tasks_run_to_the_end_and_are_dropped_in_place() {
        let tasks = tasks(4);
        let dropped = Rc::new(Cell::new(0));
        for (slot, polls) in [(0, 0), (2, 3), (3, 50)] {
            let dropped = dropped.clone();
            tasks.start(slot, Probe { polls, dropped });
        }
        let panicked = Cell::new(Vec::new());
        drive(&tasks, &panicked, || dropped.get() == 3);
        assert!(tasks.vtables.iter().all(|v| v.get().is_none()));
        // A room is used again once its task ended.
        let again = dropped.clone();
        tasks.start(
            2,
            Probe {
                polls: 1,
                dropped: again,
            },
        );
        drive(&tasks, &panicked, || dropped.get() == 4);
        assert!(panicked.take().is_empty());
    }

    #[test]
    fn a_task_that_panics_is_dropped_and_reported_and_the_others_go_on() {
        let tasks = tasks(3);
        let dropped = Rc::new(Cell::new(0));
        let guard = Probe {
            polls: 0,
            dropped: dropped.clone(),
        };
        tasks.start(1, async move {
            let _guard = guard;
            tokio::task::yield_now().await;
            panic!("a bug in one connection");
        });
        tasks.start(
            2,
            Probe {
                polls: 5,
                dropped: dropped.clone(),
            },
        );
        let panicked = Cell::new(Vec::new());
        drive(&tasks, &panicked, || dropped.get() == 2);
        assert_eq!(panicked.take(), vec![1]);
        assert!(tasks.vtables[1].get().is_none());
    }

    #[test]
    fn a_wake_from_another_thread_reaches_the_task() {
        let tasks = tasks(2);
        let done = Rc::new(Cell::new(false));
        let woken = Arc::new(AtomicUsize::new(0));
        let (send, receive) = std::sync::mpsc::channel::<Waker>();
        let thread = std::thread::spawn({
            let woken = woken.clone();
            move || {
                let waker = receive.recv().unwrap();
                woken.store(1, Ordering::SeqCst);
                waker.wake();
            }
        });
        let mut send = Some(send);
        let finished = done.clone();
        tasks.start(
            1,
            std::future::poll_fn(move |cx| {
                if woken.load(Ordering::SeqCst) == 1 {
                    finished.set(true);
                    return Poll::Ready(());
                }
                if let Some(send) = send.take() {
                    send.send(cx.waker().clone()).unwrap();
                }
                Poll::Pending
            }),
        );
        drive(&tasks, &Cell::new(Vec::new()), || done.get());
        thread.join().unwrap();
    }

    #[test]
    fn a_waker_wakes_its_own_slot_only() {
        let tasks = tasks(3);
        let polls: Rc<[Cell<usize>; 3]> = Rc::default();
        for slot in [0, 2] {
            let polls = polls.clone();
            tasks.start(
                slot,
                std::future::poll_fn(move |_| {
                    polls[slot].set(polls[slot].get() + 1);
                    Poll::<()>::Pending
                }),
            );
        }
        tasks.run(&|_| {});
        assert_eq!(polls.iter().map(Cell::get).collect::<Vec<_>>(), [1, 0, 1]);
        tasks.waker(2).wake_by_ref();
        // Woken twice before a poll: queued once.
        tasks.waker(2).wake();
        tasks.run(&|_| {});
        assert_eq!(polls.iter().map(Cell::get).collect::<Vec<_>>(), [1, 0, 2]);
        tasks.run(&|_| {});
        assert_eq!(polls[2].get(), 2);
    }

    #[test]
    fn end_all_drops_the_tasks_still_running() {
        let tasks = tasks(2);
        let dropped = Rc::new(Cell::new(0));
        tasks.start(0, std::future::pending::<()>());
        tasks.start(
            1,
            Probe {
                polls: usize::MAX,
                dropped: dropped.clone(),
            },
        );
        tasks.end_all();
        assert_eq!(dropped.get(), 1);
        assert!(tasks.vtables.iter().all(|v| v.get().is_none()));
    }
}
