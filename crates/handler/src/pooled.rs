//! [`Pooled`]: a box whose memory goes back to its thread's free list when it is dropped,
//! for what a request puts on the heap on its way through the seam (a handler's
//! deferred response and its future, the connection's exchange).
//!
//! Written by hand because these are on the hot path of every proxied request (issue
//! 26: no heap allocation per request in the steady state) and the global allocator is
//! not ours to count on: a worker takes a block of the next power-of-two size from its
//! own list and gives it back, so after the first requests of a given concurrency a
//! request's boxes cost two pointer moves each. Values larger than the largest class,
//! or aligned beyond 128 bytes, go to the global allocator as a `Box` would.

use std::alloc::{self, Layout};
use std::cell::UnsafeCell;
use std::future::Future;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::ptr::{self, NonNull};

/// Block sizes: 128 bytes to 16 KiB, doubling, aligned to 128 bytes (a future holding
/// a cache-padded value is aligned to more than 16).
const CLASSES: usize = 8;
const SMALLEST: usize = 128;
const ALIGN: usize = 128;
/// At most this many bytes of free blocks per thread (more than a worker's requests in
/// flight at ordinary concurrency need); blocks beyond it go back to the allocator.
const MAX_SPARE_BYTES: usize = 2 << 20;

struct FreeLists {
    /// Per class, the first free block; each free block holds the next one's address.
    heads: [*mut u8; CLASSES],
    spare_bytes: usize,
}

impl Drop for FreeLists {
    fn drop(&mut self) {
        for (class, head) in self.heads.iter().enumerate() {
            let mut block = *head;
            while !block.is_null() {
                // SAFETY: a free block of this class, its first word the next one.
                unsafe {
                    let next = block.cast::<*mut u8>().read();
                    alloc::dealloc(block, layout_of(class));
                    block = next;
                }
            }
        }
    }
}

thread_local! {
    static FREE: UnsafeCell<FreeLists> = const {
        UnsafeCell::new(FreeLists { heads: [ptr::null_mut(); CLASSES], spare_bytes: 0 })
    };
}

fn layout_of(class: usize) -> Layout {
    // SAFETY: a power of two times 128, aligned to 128.
    unsafe { Layout::from_size_align_unchecked(SMALLEST << class, ALIGN) }
}

/// The class of blocks that holds `layout`, if one does.
fn class_for(layout: Layout) -> Option<usize> {
    if layout.align() > ALIGN || layout.size() > SMALLEST << (CLASSES - 1) {
        return None;
    }
    let size = layout.size().max(SMALLEST).next_power_of_two();
    Some((size / SMALLEST).trailing_zeros() as usize)
}

/// Memory for `layout` (not zero-sized): a free block of its class, or new.
fn take(layout: Layout) -> NonNull<u8> {
    let class = class_for(layout);
    let reused = class.and_then(|class| {
        FREE.try_with(|free| {
            // SAFETY: the lists are this thread's, and no reference to them outlives
            // this block (nothing here calls out).
            let free = unsafe { &mut *free.get() };
            let block = free.heads[class];
            if block.is_null() {
                return None;
            }
            // SAFETY: a free block, its first word the next one.
            free.heads[class] = unsafe { block.cast::<*mut u8>().read() };
            free.spare_bytes -= SMALLEST << class;
            NonNull::new(block)
        })
        .ok()
        .flatten()
    });
    if let Some(block) = reused {
        return block;
    }
    let layout = class.map_or(layout, layout_of);
    // SAFETY: not zero-sized (the caller's promise; classes never are).
    NonNull::new(unsafe { alloc::alloc(layout) })
        .unwrap_or_else(|| alloc::handle_alloc_error(layout))
}

/// Gives back memory [`take`] gave for `layout`.
///
/// # Safety
/// `block` came from `take(layout)` and is no longer used.
unsafe fn give(block: NonNull<u8>, layout: Layout) {
    let Some(class) = class_for(layout) else {
        // SAFETY: allocated with this layout by `take`.
        unsafe { alloc::dealloc(block.as_ptr(), layout) };
        return;
    };
    let kept = FREE
        .try_with(|free| {
            // SAFETY: as in `take`.
            let free = unsafe { &mut *free.get() };
            if free.spare_bytes + (SMALLEST << class) > MAX_SPARE_BYTES {
                return false;
            }
            // SAFETY: the block is at least 128 bytes and 128-aligned: room for a pointer.
            unsafe { block.as_ptr().cast::<*mut u8>().write(free.heads[class]) };
            free.heads[class] = block.as_ptr();
            free.spare_bytes += SMALLEST << class;
            true
        })
        .unwrap_or(false);
    if !kept {
        // SAFETY: allocated with its class's layout by `take`.
        unsafe { alloc::dealloc(block.as_ptr(), layout_of(class)) };
    }
}

/// A value on the heap, in memory recycled by its thread (see the module's doc). Like a
/// `Box`: it owns its value, which never moves while it lives (so a pinned one may be
/// polled), and drops it when dropped.
pub struct Pooled<T: ?Sized> {
    ptr: NonNull<T>,
    _owns: PhantomData<T>,
}

impl<T> Pooled<T> {
    pub fn new(value: T) -> Pooled<T> {
        Pooled::new_with(|| value)
    }

    /// The value `make` returns, made once its memory is taken, so that the compiler
    /// can build it there: a large value made first and then moved in is copied whole
    /// (a proxied request's 5.5 KB future was 2% of its instructions, callgrind). If
    /// `make` panics, the memory taken for the value is not given back (a leak, never a
    /// double free).
    #[inline(always)]
    pub fn new_with(make: impl FnOnce() -> T) -> Pooled<T> {
        let layout = Layout::new::<T>();
        let ptr = if layout.size() == 0 {
            NonNull::dangling()
        } else {
            take(layout).cast::<T>()
        };
        // SAFETY: memory for a `T`, unused.
        unsafe { ptr.as_ptr().write(make()) };
        Pooled {
            ptr,
            _owns: PhantomData,
        }
    }

    /// The value, out of its memory (which goes back to the list).
    pub fn into_inner(self) -> T {
        let this = ManuallyDrop::new(self);
        // SAFETY: ours and alive; read once, and the memory given back without dropping
        // the value again.
        unsafe {
            let value = this.ptr.as_ptr().read();
            let layout = Layout::new::<T>();
            if layout.size() != 0 {
                give(this.ptr.cast::<u8>(), layout);
            }
            value
        }
    }

    /// The same value seen through an unsized type (a trait object): what the compiler
    /// does for `Box<T>` to `Box<dyn Trait>`, done by hand for this pointer.
    ///
    /// # Safety
    /// `unsize` must be that coercion (`|p| p as *mut dyn Trait`): the same address, the
    /// same value.
    pub(crate) unsafe fn unsize<U: ?Sized>(
        self,
        unsize: impl FnOnce(*mut T) -> *mut U,
    ) -> Pooled<U> {
        let this = ManuallyDrop::new(self);
        let ptr = unsize(this.ptr.as_ptr());
        debug_assert_eq!(ptr.cast::<u8>(), this.ptr.as_ptr().cast::<u8>());
        Pooled {
            // SAFETY: the address of `this.ptr`, which is not null.
            ptr: unsafe { NonNull::new_unchecked(ptr) },
            _owns: PhantomData,
        }
    }
}

impl<T: ?Sized> Drop for Pooled<T> {
    fn drop(&mut self) {
        // SAFETY: the value is ours and alive; its memory came from `take` with the
        // layout of its (concrete) type, which `for_value` reads back.
        unsafe {
            let layout = Layout::for_value(self.ptr.as_ref());
            ptr::drop_in_place(self.ptr.as_ptr());
            if layout.size() != 0 {
                give(self.ptr.cast::<u8>(), layout);
            }
        }
    }
}

impl<T: ?Sized> Deref for Pooled<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: ours and alive.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: ?Sized> DerefMut for Pooled<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: ours, alive and not shared.
        unsafe { self.ptr.as_mut() }
    }
}

/// Moving a `Pooled` never moves its value (as for `Box`).
impl<T: ?Sized> Unpin for Pooled<T> {}

/// A future on the worker's own thread (handlers hold `Rc` state, so nothing is `Send`),
/// in recycled memory.
pub type LocalFuture<T> = Pin<Pooled<dyn Future<Output = T>>>;

/// `future`, pinned in recycled memory: what `Box::pin` is for a `Pin<Box<dyn Future>>`.
pub fn local_future<T, F: Future<Output = T> + 'static>(future: F) -> LocalFuture<T> {
    local_future_with(|| future)
}

/// [`local_future`] of the future `make` returns, made in its memory ([`Pooled::new_with`]).
#[inline(always)]
pub fn local_future_with<T, F: Future<Output = T> + 'static>(
    make: impl FnOnce() -> F,
) -> LocalFuture<T> {
    // SAFETY: the unsizing coercion; the value never moves (see `Pooled`).
    unsafe {
        Pin::new_unchecked(Pooled::new_with(make).unsize(|p| p as *mut dyn Future<Output = T>))
    }
}

/// `future`, pinned in recycled memory, for a concrete future type (one too large to
/// carry inline in another).
pub fn pin<F: Future>(future: F) -> Pin<Pooled<F>> {
    // SAFETY: the value never moves (see `Pooled`).
    unsafe { Pin::new_unchecked(Pooled::new(future)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn blocks_are_reused_by_size_class() {
        let a = Pooled::new([1u8; 200]);
        let first = a.ptr.cast::<u8>();
        drop(a);
        let b = Pooled::new([2u64; 20]); // 160 bytes: the same 256-byte class
        assert_eq!(b.ptr.cast::<u8>(), first);
        assert_eq!(b[19], 2);
        let c = Pooled::new([3u8; 200]);
        assert_ne!(c.ptr.cast::<u8>(), first);
        drop(b);
        let d = Pooled::new((String::from("moved out"), [0u8; 150]));
        assert_eq!(d.ptr.cast::<u8>(), first);
        assert_eq!(d.into_inner().0, "moved out");
        assert_eq!(Pooled::new([4u8; 200]).ptr.cast::<u8>(), first);
    }

    #[test]
    fn values_are_dropped_once_and_large_ones_work() {
        let counted = Rc::new(());
        let held = Pooled::new(counted.clone());
        assert_eq!(Rc::strong_count(&counted), 2);
        drop(held);
        assert_eq!(Rc::strong_count(&counted), 1);
        let big = Pooled::new([7u8; 100_000]);
        assert_eq!(big[99_999], 7);
        let unit = Pooled::new(());
        assert_eq!(*unit, ());
        let aligned = Pooled::new(Aligned([5; 256]));
        assert_eq!(aligned.ptr.as_ptr() as usize % 256, 0);
        assert_eq!(aligned.0[255], 5);
    }

    #[repr(align(256))]
    struct Aligned([u8; 256]);

    #[test]
    fn trait_objects_drop_their_concrete_value() {
        let counted = Rc::new(());
        let c = counted.clone();
        let future = local_future(async move {
            let _c = c;
            42
        });
        assert_eq!(Rc::strong_count(&counted), 2);
        drop(future);
        assert_eq!(Rc::strong_count(&counted), 1);
        let mut future = local_future(async { 7 });
        struct Noop;
        impl std::task::Wake for Noop {
            fn wake(self: std::sync::Arc<Self>) {}
        }
        let waker = std::task::Waker::from(std::sync::Arc::new(Noop));
        let mut cx = std::task::Context::from_waker(&waker);
        assert_eq!(future.as_mut().poll(&mut cx), std::task::Poll::Ready(7));
    }

    #[test]
    fn spare_blocks_are_bounded() {
        let many: Vec<Pooled<[u8; 16 * 1024]>> =
            (0..200).map(|_| Pooled::new([0u8; 16 * 1024])).collect();
        drop(many);
        FREE.with(|free| {
            // SAFETY: this thread's lists, nothing else holds them now.
            let free = unsafe { &*free.get() };
            assert!(free.spare_bytes <= MAX_SPARE_BYTES);
        });
    }
}
