//! Proves that a pool never allocates after construction. This is its own test
//! binary because it installs a counting global allocator.

use pool::{Pool, State};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts allocations per thread, so that tests running in parallel and the
/// harness's own threads cannot disturb each other's counts.
struct CountingAllocator;

thread_local! {
    // Const-initialised with no destructor: reading it never allocates, so
    // the allocator can use it.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn note_allocation() {
    // `try_with`: the slot is gone while the thread is being torn down.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every call is forwarded unchanged to the system allocator; the only
// addition is a counter bump, which neither allocates nor touches the memory.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        System.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Runs `f` and returns how many allocations it made on this thread.
fn allocations_in(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Conn {
    Free,
    ReadingHead,
    Writing,
    Idle,
}

impl State for Conn {
    const COUNT: usize = 4;
    fn index(self) -> usize {
        self as usize
    }
}

#[test]
fn the_counter_sees_allocations() {
    // Without this, a broken counter would make the real test pass vacuously.
    let n = allocations_in(|| drop(std::hint::black_box(vec![1u8; 64])));
    assert_eq!(n, 1);
}

#[test]
fn a_pool_does_not_allocate_after_construction() {
    let capacity = 1024;
    let mut pool: Pool<Conn, [u8; 32]> = Pool::new(capacity, Conn::Free, 0, |_| [0; 32]);

    let allocations = allocations_in(|| {
        let mut now = 0u64;
        // Many rounds of a server's life: accept until full, serve, go idle,
        // evict the oldest idle ones, and time out the rest by sweeping.
        for round in 0..50u64 {
            now += 1;
            while let Some(slot) = pool.take_oldest(Conn::Free, Conn::ReadingHead, now) {
                pool[slot][0] = round as u8;
            }
            let mut step = 0u64;
            while let Some(slot) = pool.oldest(Conn::ReadingHead) {
                step += 1;
                pool.touch(slot, now);
                pool.set_state(slot, Conn::ReadingHead, Conn::Writing, now);
                pool.set_state(slot, Conn::Writing, Conn::Idle, now + step / 64);
            }
            now += step / 64 + 1;
            for _ in 0..capacity / 4 {
                let slot = pool.oldest(Conn::Idle).unwrap();
                pool.set_state(slot, Conn::Idle, Conn::Free, now);
            }
            let stale = pool.iter(Conn::Idle).take_while(|&(_, t)| t < now).count();
            std::hint::black_box(stale);
            while let Some(slot) = pool.oldest_expired(Conn::Idle, now + 100, 100) {
                pool.set_state(slot, Conn::Idle, Conn::Free, now);
            }
            let oldest_free = pool.oldest(Conn::Free).unwrap();
            std::hint::black_box((pool.state(oldest_free), pool.entered(oldest_free)));
        }
    });

    assert_eq!(allocations, 0, "the pool allocated after construction");
    assert_eq!(pool.count(Conn::Free), capacity);
}
