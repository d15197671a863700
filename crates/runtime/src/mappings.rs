//! The share of this process's memory mappings that guests over a snapshot's layers may
//! hold (fork.rs, delta.rs).
//!
//! A fork of a layered snapshot maps its base and each run of pages over it: up to
//! 2 × [`crate::delta::FIRST_RUNS`] + 1 = 257 mappings a guest for a session's first
//! snapshot, 2 × [`crate::delta::MAX_RUNS`] + 1 = 385 for its later ones, against the kernel's limit
//! per process (`vm.max_map_count`, 65,530 by default), which the embedder's own
//! allocations, threads and libraries share. Unchecked, about 260 live forks of one
//! pandas session took the whole process to its limit, where any mmap fails, the
//! embedder's included. So guests over layers hold at most half the limit together
//! ([`budget`]); past that a snapshot's forks start from its flattened copy instead (one
//! file of its whole memory, made once and shared: one mapping a guest), which costs the
//! memory of one such copy rather than none, and reads the same bytes.
//!
//! A layout's view in the host (delta.rs, `View`: what a pool's reset copies back from,
//! and what snapshots and rests compare with) maps the same way, once per layout, and
//! counts with them.
//!
//! **Invariant:** every guest made over layers holds a [`Held`] for its mappings while its
//! store lives, and every view while it is mapped; [`fits`] is only advice (two guests opening at once may both pass it), so
//! the budget is exceeded at most by the guests opening at the same moment. Mappings
//! that a pool's idle slot keeps after its store ended are not counted: at most
//! [`crate::engine::POOL_SLOTS`] slots, bounded apart.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Mappings held by live guests over layers.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Sets the budget, in mappings, for tests (read once per process).
pub(crate) const BUDGET_ENV: &str = "WASI_PYTHON_FORK_MAPPINGS";

/// The kernel's default `vm.max_map_count`.
const DEFAULT_MAX_MAP_COUNT: usize = 65_530;

/// The mappings live guests over layers may hold together: half of `vm.max_map_count`,
/// or [`BUDGET_ENV`] if set to a number.
pub(crate) fn budget() -> usize {
    static BUDGET: OnceLock<usize> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        if let Some(n) = std::env::var(BUDGET_ENV).ok().and_then(|v| v.trim().parse::<usize>().ok()) {
            return n;
        }
        let max = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(DEFAULT_MAX_MAP_COUNT);
        max / 2
    })
}

/// Whether a guest holding `n` more mappings fits in the budget now.
pub(crate) fn fits(n: usize) -> bool {
    HELD.load(Ordering::SeqCst).saturating_add(n) <= budget()
}

/// `n` mappings a guest holds, given back when dropped (with its store).
#[derive(Debug)]
pub(crate) struct Held {
    n: usize,
    count: &'static AtomicUsize,
}

impl Held {
    pub(crate) fn take(n: usize) -> Held {
        Held::take_in(&HELD, n)
    }

    fn take_in(count: &'static AtomicUsize, n: usize) -> Held {
        count.fetch_add(n, Ordering::SeqCst);
        Held { n, count }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.count.fetch_sub(self.n, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_mappings_count_until_dropped() {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let a = Held::take_in(&COUNT, 257);
        let b = Held::take_in(&COUNT, 3);
        assert_eq!(COUNT.load(Ordering::SeqCst), 260);
        drop(a);
        assert_eq!(COUNT.load(Ordering::SeqCst), 3);
        drop(b);
        assert_eq!(COUNT.load(Ordering::SeqCst), 0);
    }
}
