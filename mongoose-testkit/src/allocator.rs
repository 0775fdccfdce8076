//! The counting global allocator of the hot-path allocation tests.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting every allocation and reallocation (frees are not
/// counted). A test binary installs it as its global allocator and reads the count
/// around the code under test:
///
/// ```
/// use mongoose_testkit::CountingAllocator;
///
/// #[global_allocator]
/// static GLOBAL: CountingAllocator = CountingAllocator::new();
///
/// let before = GLOBAL.allocations();
/// let boxed = Box::new(7_u64);
/// assert!(GLOBAL.allocations() - before >= 1);
/// # drop(boxed);
/// ```
#[derive(Debug)]
pub struct CountingAllocator {
    allocations: AtomicUsize,
}

impl CountingAllocator {
    /// An allocator that has counted nothing yet (a `const fn`, for a `static`).
    pub const fn new() -> Self {
        CountingAllocator {
            allocations: AtomicUsize::new(0),
        }
    }

    /// How many allocations and reallocations this allocator has served so far, on
    /// every thread.
    pub fn allocations(&self) -> usize {
        self.allocations.load(Ordering::Relaxed)
    }
}

impl Default for CountingAllocator {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: delegates every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.allocations.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's layout contract is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: ptr was allocated by System with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.allocations.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
