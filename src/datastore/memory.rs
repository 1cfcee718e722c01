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

/// libyang data a commit no longer needs, freed by [`free_later`].
pub(crate) enum Garbage {
    /// An unlinked subtree (its node and everything below).
    Subtree(*mut yang2::ffi::lyd_node),
    /// A whole tree: the node and all its siblings, with everything below them.
    Tree(*mut yang2::ffi::lyd_node),
}

// SAFETY: a Garbage value owns data nothing else points at (an unlinked subtree, a tree
// its owner gave up). Freeing it touches only its own nodes, the context's dictionary
// (which has its own lock) and the schema's type refcounts (atomic): the context is not
// created with LY_CTX_LEAFREF_LINKING (freeing would then edit back-links held by live
// nodes) and no data of ours holds schema-mount or extension data.
unsafe impl Send for Garbage {}

impl Garbage {
    fn is_null(&self) -> bool {
        match self {
            Garbage::Subtree(n) | Garbage::Tree(n) => n.is_null(),
        }
    }

    /// # Safety
    /// Frees what the value owns; called once.
    unsafe fn free(self) {
        match self {
            Garbage::Subtree(n) => yang2::ffi::lyd_free_tree(n),
            Garbage::Tree(n) => yang2::ffi::lyd_free_all(n),
        }
    }
}

/// Below this many items, [`free_later`] frees at once: handing over costs more than it saves.
const FREE_AT_ONCE: usize = 64;

/// Frees libyang data off the request's path: a commit that deleted 100 000 entries owns
/// 100 000 unlinked subtrees, and freeing them took 275 ms of a 0.9 s delete, under the
/// datastore lock and before the reply. A background thread frees them instead (in the
/// order given); small batches are freed at once. What waits here was allocated already;
/// the trims [`after_commit`] schedules (0.5 s and 3 s after the commit) usually come after
/// the frees, and the next large commit trims again.
pub(crate) fn free_later(items: Vec<Garbage>) {
    use std::sync::mpsc::{channel, Sender};
    use std::sync::{Mutex, OnceLock};
    static REAPER: OnceLock<Option<Mutex<Sender<Vec<Garbage>>>>> = OnceLock::new();
    // A whole tree may be as large as its request: it always goes.
    if items.len() < FREE_AT_ONCE && !items.iter().any(|g| matches!(g, Garbage::Tree(_))) {
        free_now(items);
        return;
    }
    let reaper = REAPER.get_or_init(|| {
        let (tx, rx) = channel::<Vec<Garbage>>();
        std::thread::Builder::new()
            .name("ly-free".into())
            .spawn(move || {
                for batch in rx {
                    free_now(batch);
                }
            })
            .ok()
            .map(|_| Mutex::new(tx))
    });
    let rejected = match reaper {
        Some(tx) => tx.lock().unwrap_or_else(|e| e.into_inner()).send(items).err().map(|e| e.0),
        None => Some(items),
    };
    if let Some(items) = rejected {
        free_now(items);
    }
}

fn free_now(items: Vec<Garbage>) {
    for g in items {
        if !g.is_null() {
            // SAFETY: each item is owned by the batch alone and freed once, here.
            unsafe { g.free() };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use yang2::data::{Data, DataTree};

    /// Trees handed to the background thread are freed there, small batches at once, and
    /// the data the caller keeps is untouched.
    #[test]
    fn trees_are_freed_off_the_callers_path_and_the_rest_is_untouched() {
        let ctx = crate::yang::context();
        let kept = {
            let mut t = DataTree::new(ctx);
            t.new_path("/cats-sma:cats-sma/scis/sci[csci-id='kept']/cs-id", Some("AR1"), false).unwrap();
            t
        };
        for n in [1usize, FREE_AT_ONCE, 3 * FREE_AT_ONCE] {
            let mut garbage = Vec::new();
            for i in 0..n {
                let mut t = DataTree::new(ctx);
                let path = format!("/cats-sma:cats-sma/scis/sci[csci-id='g{i}']/cs-id");
                t.new_path(&path, Some("AR1"), false).unwrap();
                let sci = t.find_path(&format!("/cats-sma:cats-sma/scis/sci[csci-id='g{i}']")).unwrap().as_raw();
                // SAFETY: `sci` is a live node of `t`; once unlinked it is owned by the batch.
                unsafe { yang2::ffi::lyd_unlink_tree(sci) };
                garbage.push(Garbage::Subtree(sci));
                garbage.push(Garbage::Tree(t.into_raw()));
            }
            garbage.push(Garbage::Tree(std::ptr::null_mut()));
            free_later(garbage);
        }
        // Freeing runs beside new data of the same context.
        for i in 0..1000 {
            let mut t = DataTree::new(ctx);
            t.new_path(&format!("/cats-sma:cats-sma/scis/sci[csci-id='n{i}']/cs-id"), Some("AR1"), false).unwrap();
        }
        assert!(kept.find_path("/cats-sma:cats-sma/scis/sci[csci-id='kept']").is_ok());
    }
}
