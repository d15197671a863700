//! A process forked after it ran guests (Python's `multiprocessing` forks by default on
//! Linux up to 3.13): the child holds copies of the runtime's lists, whose entries name
//! threads that do not exist in it (guests on standby, idle guest threads, the epoch
//! ticker, call threads) and private folders that are the parent's.
//!
//! A `pthread_atfork` child handler counts forks ([`generation`]); each list compares the
//! count with its own where it is used, and the child forgets, never removes, what its
//! parent left: jobs go only to threads of this process, the ticker is started again, and
//! no folder is shared with, or removed from under, the parent. The counts of what threads
//! hold ([`Count`]) start again from zero in the child. The handler only
//! increments an atomic, which is safe between `fork` and the child's next steps; the
//! lists are mended lazily, by threads of the child, under their own locks.
#![allow(
    unsafe_code,
    reason = "registers a pthread_atfork handler, which only increments an atomic"
)]

use std::sync::{Arc, Once};
use std::sync::atomic::{AtomicU64, Ordering};

/// Process-wide by nature, not launch state: what the fork handler counts.
static GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// How many forks this process's line has been through since the runtime was first used
/// (0 in a process that never forked after it).
pub fn generation() -> u64 {
    // Process-wide by nature: a pthread_atfork handler is registered once per process.
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: the handler is a plain function that touches only an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
    GENERATION.load(Ordering::SeqCst)
}

/// A mark of the generation a list was last used in: `stale()` says once
/// per fork that what the list holds is the parent's.
#[derive(Debug)]
pub struct Seen(AtomicU64);

impl Default for Seen {
    fn default() -> Self {
        Seen::new()
    }
}

impl Seen {
    pub const fn new() -> Seen {
        Seen(AtomicU64::new(0))
    }

    /// True the first time it is asked in a process forked since the last time.
    pub fn stale(&self) -> bool {
        self.stale_at(generation())
    }

    /// [`Seen::stale`] at the fork count `now` (tests give it explicitly).
    pub fn stale_at(&self, now: u64) -> bool {
        // Read first: a run's path asks this of shared lists, and a write each time
        // would bounce their cache line between CPUs.
        self.0.load(Ordering::SeqCst) != now && self.0.swap(now, Ordering::SeqCst) != now
    }
}

/// A count of what this process's threads hold (runs in progress), which a
/// forked child starts again from zero: the threads that held its parent's share are not
/// in it. Its generation and its count share one word, so a change can never pair a
/// count with the wrong generation.
#[derive(Debug)]
pub struct Count(AtomicU64);

impl Default for Count {
    fn default() -> Self {
        Count::new()
    }
}

impl Count {
    pub const fn new() -> Count {
        Count(AtomicU64::new(0))
    }

    /// How many hold it in this process.
    pub fn get(&self) -> i64 {
        self.get_at(generation())
    }

    fn get_at(&self, now: u64) -> i64 {
        match split(self.0.load(Ordering::SeqCst)) {
            (g, n) if g == now as u32 => i64::from(n),
            _ => 0,
        }
    }

    fn add_at(&self, now: u64, delta: i32) {
        let now = now as u32;
        let _ = self.0.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |word| {
            let (g, n) = split(word);
            let n = if g == now { n } else { 0 };
            Some((u64::from(now) << 32) | u64::from(n.wrapping_add(delta) as u32))
        });
    }
}

/// (generation, count) of a [`Count`]'s word.
fn split(word: u64) -> (u32, i32) {
    ((word >> 32) as u32, word as u32 as i32)
}

/// While it lives, a [`Count`] holds one more in the process that made it; dropped in a
/// forked child, it changes nothing there.
#[derive(Debug)]
pub struct Counted {
    count: Arc<Count>,
    held: bool,
    generation: u64,
}

impl Counted {
    pub fn more(count: &Arc<Count>) -> Counted {
        Counted::at(count, generation())
    }

    fn at(count: &Arc<Count>, now: u64) -> Counted {
        count.add_at(now, 1);
        Counted { count: count.clone(), held: true, generation: now }
    }

    fn end_at(&mut self, now: u64) {
        if now == self.generation && self.held {
            self.count.add_at(now, -1);
        }
        self.held = false;
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.end_at(generation());
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

    // Against explicit generations, as above.
    #[test]
    fn a_forked_child_counts_only_what_its_own_threads_hold() {
        let held = Arc::new(Count::new());
        let mut parents = Counted::at(&held, 0);
        let mut busy = Counted::at(&held, 0);
        assert_eq!(held.get_at(0), 2);
        // Forked: the child's own threads count from zero.
        assert_eq!(held.get_at(1), 0, "the parent's threads are not in the child");
        let mut childs = Counted::at(&held, 1);
        assert_eq!(held.get_at(1), 1);
        busy.end_at(1); // held across the fork by the thread that forked, ended in the child
        assert_eq!(held.get_at(1), 1, "a guard from before the fork changes nothing");
        childs.end_at(1);
        assert_eq!(held.get_at(1), 0);
        // The parent's other guard ends with its thread, which the child does not run.
        parents.end_at(1);
        assert_eq!(held.get_at(1), 0);
    }
}
