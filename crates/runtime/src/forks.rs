//! A process forked after it ran guests (Python's `multiprocessing` forks by default on
//! Linux up to 3.13): the child holds copies of the runtime's process-wide lists, whose
//! entries name threads that do not exist in it (guests on standby, idle guest threads,
//! the epoch ticker, call threads) and private folders that are the parent's.
//!
//! A `pthread_atfork` child handler counts forks ([`generation`]); each list compares the
//! count with its own where it is used, and the child forgets, never removes, what its
//! parent left: jobs go only to threads of this process, the ticker is started again, and
//! no folder is shared with, or removed from under, the parent. The handler only
//! increments an atomic, which is safe between `fork` and the child's next steps; the
//! lists are mended lazily, by threads of the child, under their own locks.
#![allow(
    unsafe_code,
    reason = "registers a pthread_atfork handler, which only increments an atomic"
)]

use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

static GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// How many forks this process's line has been through since the runtime was first used
/// (0 in a process that never forked after it).
pub(crate) fn generation() -> u64 {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: the handler is a plain function that touches only an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
    GENERATION.load(Ordering::SeqCst)
}

/// A mark of the generation a process-wide list was last used in: `stale()` says once
/// per fork that what the list holds is the parent's.
#[derive(Debug)]
pub(crate) struct Seen(AtomicU64);

impl Seen {
    pub(crate) const fn new() -> Seen {
        Seen(AtomicU64::new(0))
    }

    /// True the first time it is asked in a process forked since the last time.
    pub(crate) fn stale(&self) -> bool {
        self.stale_at(generation())
    }

    fn stale_at(&self, now: u64) -> bool {
        // Read first: a run's path asks this of shared lists, and a write each time
        // would bounce their cache line between CPUs.
        self.0.load(Ordering::SeqCst) != now && self.0.swap(now, Ordering::SeqCst) != now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Against explicit generations: counting a fork for real would make the other tests'
    // lists in this binary forget their entries.
    #[test]
    fn a_list_hears_once_per_fork_that_it_holds_the_parents() {
        let (seen, other) = (Seen::new(), Seen::new());
        assert!(!seen.stale_at(0) && !seen.stale_at(0), "a process that did not fork");
        assert!(seen.stale_at(1), "the first use after a fork");
        assert!(!seen.stale_at(1), "then not again");
        assert!(other.stale_at(1) && !other.stale_at(1), "each list hears it itself");
        assert!(seen.stale_at(2), "and again after the next fork");
    }
}
