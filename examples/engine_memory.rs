//! Memory per SCI of the metric engine (issues 4 and 14 goal: ≤ 300 B per SCI at 1 000 000
//! SCIs): a counting global allocator measures the bytes the engine's `Core` holds for N
//! registered SCIs (one slot each in the metric cache: registration and ACTIVE entry), then
//! after one accepted report each (metrics, per-service membership and aggregates, LRU and
//! timers).
//!
//! ```sh
//! cargo run --release --example engine_memory            # 1 000 000 SCIs
//! cargo run --release --example engine_memory -- 100000  # another count
//! ```
//!
//! Bytes are what the program asked the allocator for and has not freed (live heap), so
//! allocator overhead per block (8–16 B in glibc) is not included; the resident set size
//! from `/proc/self/statm` is printed beside it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use cats_sma::engine::clock::Clock;
use cats_sma::engine::core::{Core, SciConfig};
use cats_sma::engine::report::RawReport;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the counter is only
// arithmetic on the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` with `layout`; forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .map(|pages| pages * 4096)
        .unwrap_or(0)
}

fn csci_id(i: usize) -> String {
    format!("10.{}.{}.{}:8080", (i >> 16) & 255, (i >> 8) & 255, i & 255)
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let services = 100;
    let base = (live(), rss());
    let mut core = Core::new(Clock::new());
    let mut cfg = core.cache_config.clone();
    cfg.max_entries = n;
    core.set_cache_config(cfg);
    let t0 = Instant::now();
    for i in 0..n {
        core.set_sci(
            &csci_id(i),
            SciConfig {
                cs_ids: vec![format!("CS{}", i % services)],
                credential_ref: None,
                unauthenticated: true,
                expected_interval: Duration::from_secs(10),
            },
        );
        if i % 10_000 == 0 {
            core.events.clear();
        }
    }
    core.events.clear();
    core.events.shrink_to_fit();
    let registered = (live(), rss());
    eprintln!("{n} SCIs registered in {:.1} s", t0.elapsed().as_secs_f64());

    let wall = core.clock.wall();
    let t0 = Instant::now();
    for i in 0..n {
        let r = RawReport {
            csci_id: csci_id(i),
            cs_id: format!("CS{}", i % services),
            sequence: 1,
            timestamp: wall,
            gas: 400,
            computing_time: 5,
            health: "HEALTHY".into(),
            cost: Some(10),
            reputation: None,
            security_label: None,
        };
        core.ingest(&r, None).expect("accepted");
        if i % 1000 == 0 {
            core.settle();
            core.events.clear();
        }
    }
    core.settle();
    core.events.clear();
    core.events.shrink_to_fit();
    let reported = (live(), rss());
    eprintln!("{n} reports ingested in {:.1} s", t0.elapsed().as_secs_f64());
    assert_eq!(core.stats.accepted as usize, n);

    let per = |a: isize, b: isize| (b - a) as f64 / n as f64;
    let mb = |b: isize| b as f64 / 1e6;
    println!("SCIs: {n} ({services} CS-IDs)");
    println!(
        "registered (slots: registration + ACTIVE entry): live heap {:.1} MB = {:.0} B/SCI; RSS +{:.1} MB",
        mb(registered.0 - base.0),
        per(base.0, registered.0),
        (registered.1 - base.1) as f64 / 1e6
    );
    println!(
        "after one report each:                        live heap {:.1} MB = {:.0} B/SCI; RSS +{:.1} MB",
        mb(reported.0 - base.0),
        per(base.0, reported.0),
        (reported.1 - base.1) as f64 / 1e6
    );
    println!("  of which the reports added {:.0} B/SCI", per(registered.0, reported.0));
    println!(
        "size_of: Entry (one slot per SCI: registration + cache entry) {} B, SciConfig {} B, RawReport {} B",
        std::mem::size_of::<cats_sma::engine::cache::Entry>(),
        std::mem::size_of::<SciConfig>(),
        std::mem::size_of::<RawReport>()
    );
    drop(core);
}
