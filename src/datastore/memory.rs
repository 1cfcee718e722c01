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

/// Returns free heap memory to the system when `changes` nodes changed (call it after the
/// old data was freed).
pub(crate) fn after_commit(changes: usize) {
    if changes >= TRIM_AFTER_CHANGES {
        trim();
    }
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
