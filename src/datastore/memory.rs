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
/// background thread trims once that has happened; commits meanwhile share its one trim.
pub(crate) fn after_commit(changes: usize) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static PENDING: AtomicBool = AtomicBool::new(false);
    if changes < TRIM_AFTER_CHANGES || PENDING.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new().name("heap-trim".into()).spawn(|| {
        std::thread::sleep(TRIM_DELAY);
        PENDING.store(false, Ordering::Release);
        trim();
    });
    if spawned.is_err() {
        PENDING.store(false, Ordering::Release);
        trim();
    }
}

/// How long after a large commit the heap is trimmed: long enough for the request that
/// made it to be answered and freed (a 100 000-entry edit-config's reply is sent within
/// milliseconds of the commit), short enough that RSS follows the data at once for anyone
/// watching.
const TRIM_DELAY: std::time::Duration = std::time::Duration::from_millis(500);

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
