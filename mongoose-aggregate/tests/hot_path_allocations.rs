//! A CSV line applied to a key the state has allocates nothing (STYLE: hot paths
//! allocate nothing per event). One test in this binary: the count is global.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use mongoose_aggregate::{LinePosition, Outcome};

/// The system allocator, counting allocations and reallocations (as
/// `mongoose_testkit::CountingAllocator`, without that crate's TLS dependencies).
struct Counting(AtomicUsize);

// SAFETY: delegates every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.0.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's layout contract is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: ptr was allocated by System with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.0.fetch_add(1, Ordering::Relaxed);
        // SAFETY: ptr was allocated by System with this layout; the caller's contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting(AtomicUsize::new(0));

#[test]
fn a_csv_line_of_a_known_key_allocates_nothing() {
    let mut aggregate = common::aggregate(
        r#"
        format = "csv"
        columns = ["account", "a", "b", "c"]
        fields = { account = "string", a = "integer", b = "integer", c = "decimal" }
        group_by = ["account"]
        aggregates = { sa = "sum(a)", sb = "sum(b)", sc = "sum(c)", n = "count", hi = "max(c)" }
        rules = [{ name = "negative", when = "sa < -1000000", emit = "{account}" }]
        "#,
    );
    let lines: Vec<String> = (0..2_000)
        .map(|index| {
            format!(
                "acc{},{},{},\"{}.{:02}\"",
                index % 50,
                index,
                -index,
                index % 7,
                index % 100
            )
        })
        .collect();
    for (index, line) in lines.iter().enumerate().take(200) {
        aggregate.apply(LinePosition::at(1, index as u64 + 1), line.as_bytes());
    }
    let before = GLOBAL.0.load(Ordering::Relaxed);
    for (index, line) in lines.iter().enumerate().skip(200) {
        let outcome = aggregate.apply(LinePosition::at(1, index as u64 + 1), line.as_bytes());
        assert!(matches!(outcome, Outcome::Applied { .. }));
    }
    let allocations = GLOBAL.0.load(Ordering::Relaxed) - before;
    assert_eq!(
        allocations, 0,
        "1,800 lines of known keys allocated {allocations} times"
    );
}
