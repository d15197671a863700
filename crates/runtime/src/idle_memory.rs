//! The memory idle pool slots keep, bounded in total by the launch policy's
//! [`idle_memory`](crate::LaunchPolicy::idle_memory): past it, the slots idle longest give
//! their pages back to the system once idle for [`GIVE_BACK_AFTER`].
//!
//! Why: a pool slot keeps the pages its last run wrote (up to the pool's per-slot
//! `linear_memory_keep_resident`, engine.rs), reset from the image, so the next run in it
//! takes no page faults. That is what makes fresh runs fast, but after a burst of large
//! runs (8 sessions of 500 MB: 64 MiB in each of their slots) a long-lived process would
//! keep it all for its life. Here one thread per runtime, started by the first store to
//! end with the slots over the budget, waits [`GIVE_BACK_AFTER`], asks each pool to give
//! back the slots unused that long, least recently used first, until they keep at most
//! the budget (`PoolingAllocatorMetrics::trim_unused_memories`, the wasmtime patch in
//! third_party/README.md), and waits again while they are over it. A slot given back is
//! what a reset leaves (`MADV_DONTNEED`: the image's pages read from its mapping, the
//! rest zero), so the run that takes it next faults its pages in once.
//!
//! **Invariant:** only unused slots are given back, each under its pool's allocator lock
//! (wasmtime's own), so no store's memory is ever touched: a slot's reuse by a store, or
//! by wasmtime for a GC heap during a run, cannot race with it. A store's end costs a look
//! at an atomic, and, only when the slots are over the budget and the thread is not
//! already counting down, a look at the pools' counts and a wake.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use wasmtime::PoolingAllocatorMetrics;

use wasi_python_sched::forks;

/// How long a slot past the budget stays unused before it gives its memory back.
pub(crate) const GIVE_BACK_AFTER: Duration = Duration::from_secs(1);

/// One runtime's bound on what its pools' idle slots keep: dropped with the runtime,
/// it ends the thread.
pub(crate) struct IdleMemory(Arc<Shared>);

/// What a pool slot tells when its store ends (cheap to clone; it may outlive the
/// runtime, a store in progress then, and then does nothing).
#[derive(Clone)]
pub(crate) struct Notice(Arc<Shared>);

impl std::fmt::Debug for IdleMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdleMemory").field("budget", &self.0.budget).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("idle_memory::Notice")
    }
}

struct Shared {
    /// Bytes the idle slots of all pools may keep.
    budget: usize,
    /// The runtime's pools (a pooled engine each: plain, metered).
    pools: Mutex<Vec<PoolingAllocatorMetrics>>,
    /// `forks::generation() + 1` while this process's thread counts down to a give-back
    /// (0: it waits for a store's end, or there is none).
    armed: AtomicU64,
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    /// The fork generation the thread was started in (`None`: none started).
    thread: Option<u64>,
    /// The runtime is gone: the thread ends, and no other starts.
    gone: bool,
}

impl IdleMemory {
    pub(crate) fn new(budget: u64) -> IdleMemory {
        IdleMemory(Arc::new(Shared {
            budget: usize::try_from(budget).unwrap_or(usize::MAX),
            pools: Mutex::new(Vec::new()),
            armed: AtomicU64::new(0),
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        }))
    }

    /// Bounds the idle slots of `engine`'s pool too (none without a pool).
    pub(crate) fn add(&self, engine: &wasmtime::Engine) {
        if let Some(m) = engine.pooling_allocator_metrics() {
            self.0.pools.lock().push(m);
        }
    }

    /// The bytes the runtime's idle slots keep now.
    pub(crate) fn kept(&self) -> u64 {
        self.0.kept() as u64
    }

    /// What the pools' slots tell.
    pub(crate) fn notice(&self) -> Notice {
        Notice(self.0.clone())
    }
}

impl Drop for IdleMemory {
    fn drop(&mut self) {
        self.0.state.lock().gone = true;
        self.0.wake.notify_all();
    }
}

impl Notice {
    /// A store of one of the pools ended (its slot is idle now): counts down to a
    /// give-back if the slots are over the budget.
    pub(crate) fn store_ended(&self) {
        let s = &self.0;
        let generation = forks::generation();
        if s.armed.load(Ordering::SeqCst) == generation + 1 || s.kept() <= s.budget {
            return;
        }
        let mut state = s.state.lock();
        if state.gone {
            return;
        }
        if state.thread != Some(generation) {
            // None yet, or the one started belongs to the parent of this forked process.
            let shared = s.clone();
            let started = std::thread::Builder::new()
                .name("wasi-python-idle-memory".into())
                .stack_size(64 << 10)
                .spawn(move || shared.serve());
            if started.is_err() {
                // Nothing is given back until a later store's end starts one.
                return;
            }
            state.thread = Some(generation);
        }
        s.armed.store(generation + 1, Ordering::SeqCst);
        s.wake.notify_one();
    }
}

impl Shared {
    fn kept(&self) -> usize {
        self.pools.lock().iter().map(|p| p.unused_memory_bytes_resident()).sum()
    }

    /// Gives back what is past the budget and idle for [`GIVE_BACK_AFTER`], the pools
    /// sharing the budget: each keeps at most what the others leave of it.
    fn give_back(&self) {
        let pools = self.pools.lock().clone();
        let mut kept: Vec<usize> = pools.iter().map(|p| p.unused_memory_bytes_resident()).collect();
        for i in 0..pools.len() {
            let others: usize = kept.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, k)| k).sum();
            pools[i].trim_unused_memories(self.budget.saturating_sub(others), GIVE_BACK_AFTER);
            kept[i] = pools[i].unused_memory_bytes_resident();
        }
    }

    /// The thread: waits to be armed, then gives back every [`GIVE_BACK_AFTER`] until the
    /// idle slots keep no more than the budget.
    fn serve(self: Arc<Shared>) {
        let generation = forks::generation();
        let mut state = self.state.lock();
        loop {
            if state.gone {
                return;
            }
            if self.armed.load(Ordering::SeqCst) != generation + 1 {
                self.wake.wait(&mut state);
                continue;
            }
            let timed_out = self.wake.wait_for(&mut state, GIVE_BACK_AFTER).timed_out();
            if state.gone {
                return;
            }
            if !timed_out {
                // Woken early (armed again): the count down goes on.
                continue;
            }
            drop(state);
            self.give_back();
            // Disarmed first, then looked at: a store that ended meanwhile either sees
            // it disarmed and arms it again, or is counted here.
            self.armed.store(0, Ordering::SeqCst);
            if self.kept() > self.budget {
                self.armed.store(generation + 1, Ordering::SeqCst);
            }
            state = self.state.lock();
        }
    }
}
