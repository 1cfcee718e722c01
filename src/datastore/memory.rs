//! Giving memory back after large commits (issue 22).
//!
//! Measured on the agent (release build, glibc 2.41): after creating and deleting 30 000
//! NACM groups RSS stayed at 297 MiB against 57 MiB fresh, and a `malloc_trim(0)` brought it
//! to 32 MiB, so the memory was not live data nor caches of ours but free chunks glibc's
//! arenas keep (libyang allocates every node, value and path string separately, and the
//! tokio worker threads spread them over several arenas). After a commit that changed many
//! nodes the datastore asks glibc to return its free memory; small commits (the usual one
//! leaf) never pay for it.

/// Commits with at least this many changed nodes trim the heap afterwards: a 1 000-node
/// edit already frees or replaces megabytes, while trimming costs a walk over the arenas'
/// free lists (well under a millisecond on a fresh agent, a few ms after a 100 000-entry
/// delete).
pub(crate) const TRIM_AFTER_CHANGES: usize = 1_000;

/// Returns free heap memory to the system soon after a commit that changed `changes`
/// nodes. Not at once: the request that made the commit (its text, the parsed edit, the
/// reply) is freed only after the datastore returns, and it is as large as the change. A
/// background thread trims after each of [`TRIM_DELAYS`]; commits meanwhile share it.
pub(crate) fn after_commit(changes: usize) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static PENDING: AtomicBool = AtomicBool::new(false);
    if changes < TRIM_AFTER_CHANGES || PENDING.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new().name("heap-trim".into()).spawn(|| {
        for (i, delay) in TRIM_DELAYS.iter().enumerate() {
            std::thread::sleep(*delay);
            if i + 1 == TRIM_DELAYS.len() {
                PENDING.store(false, Ordering::Release);
            }
            trim();
        }
    });
    if spawned.is_err() {
        PENDING.store(false, Ordering::Release);
        trim();
    }
}

/// When after a large commit the heap is trimmed (each delay after the previous trim). The
/// first is long enough for the request that made the commit to be answered and freed on
/// a quiet machine; measured in the soak on the shared 2-core machine (load 7–8), freeing
/// a 100 000-entry edit request sometimes ended later than that and its memory stayed
/// until the next round, so a second trim follows.
const TRIM_DELAYS: [std::time::Duration; 2] =
    [std::time::Duration::from_millis(500), std::time::Duration::from_millis(2500)];

/// Allocation above this size is always its own mapping, returned to the system when freed.
/// glibc's threshold otherwise starts at 128 KiB and rises to the largest chunk freed so far
/// (up to 32 MiB): after one argon2 password check (19 MiB) or one 10 MB reply, every later
/// one came from the heap and stayed in it after being freed.
const MMAP_THRESHOLD: i32 = 1 << 20;

/// At most this many malloc arenas (glibc's default is 8 per core): every tokio and
/// blocking-pool thread otherwise gets one, and freed memory scattered over many arenas is
/// what trimming cannot give back whole.
const ARENA_MAX: i32 = 4;

/// Sets the allocator up so that memory follows live data (once per process; called when
/// the datastores open, before the agent starts its transports).
pub fn configure() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: mallopt has no preconditions; both parameters take positive ints.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            libc::mallopt(libc::M_ARENA_MAX, ARENA_MAX);
        }
    });
}

/// `malloc_trim(0)`: glibc releases the free memory at the top of every arena and the free
/// whole pages inside them.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim() {
    // SAFETY: malloc_trim has no preconditions; it only takes the allocator's own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() {}
