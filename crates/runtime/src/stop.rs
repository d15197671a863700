//! Ending a run from outside: the deadline, the embedder's cancel, and the epoch ticker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// A handle that ends a run (or a tool call in it) from any thread.
///
/// Cancelling is sticky and idempotent. A run that sees it ends with
/// [`crate::Trapped::Cancelled`] within a few milliseconds: at its next epoch
/// check while computing, at once while sleeping or waiting on a tool.
#[derive(Clone, Debug, Default)]
pub struct CancelToken {
    inner: Arc<CancelInner>,
}

#[derive(Debug, Default)]
struct CancelInner {
    cancelled: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

impl CancelToken {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        let _guard = self.inner.lock.lock();
        self.inner.wake.notify_all();
    }
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }
    /// Sleeps up to `timeout`, waking early on cancel. Returns whether cancelled.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let mut guard = self.inner.lock.lock();
        if !self.is_cancelled() {
            self.inner.wake.wait_for(&mut guard, timeout);
        }
        self.is_cancelled()
    }
}

/// Why the host stopped a guest. Carried as the error out of the epoch callback
/// so the outcome is named by kind, never by parsing wasmtime's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Stop {
    #[error("the run's deadline passed")]
    Deadline,
    #[error("the run was cancelled")]
    Cancelled,
}

/// What a running guest checks at each epoch tick and in long host calls.
#[derive(Debug, Clone)]
pub(crate) struct StopState {
    pub(crate) deadline: Option<Instant>,
    pub(crate) cancel: CancelToken,
}

impl StopState {
    pub(crate) fn check(&self) -> Option<Stop> {
        if self.cancel.is_cancelled() {
            Some(Stop::Cancelled)
        } else if self.deadline.is_some_and(|d| Instant::now() >= d) {
            Some(Stop::Deadline)
        } else {
            None
        }
    }
}

/// The epoch tick. Deadlines and cancels are seen at this granularity while the
/// guest computes.
pub(crate) const TICK: Duration = Duration::from_millis(5);

/// One process-wide thread bumps the epoch of every engine with an active run, and
/// sleeps while there is none. It holds an engine only while a run of it is active.
#[derive(Debug)]
pub(crate) struct Ticker {
    /// Each engine with active runs, and how many.
    engines: Mutex<Vec<(wasmtime::Engine, usize)>>,
    active: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Ticker {
    pub(crate) fn global() -> &'static Ticker {
        static TICKER: std::sync::OnceLock<&'static Ticker> = std::sync::OnceLock::new();
        TICKER.get_or_init(|| {
            let t: &'static Ticker = Box::leak(Box::new(Ticker {
                engines: Mutex::new(Vec::new()),
                active: AtomicUsize::new(0),
                lock: Mutex::new(()),
                wake: Condvar::new(),
            }));
            std::thread::Builder::new()
                .name("wasi-python-epoch".into())
                .spawn(move || t.run())
                .expect("spawning the epoch ticker thread");
            t
        })
    }

    /// Ticks `engine` while the returned guard lives.
    pub(crate) fn activate(&'static self, engine: &wasmtime::Engine) -> TickerGuard {
        {
            let mut engines = self.engines.lock();
            match engines.iter_mut().find(|(e, _)| wasmtime::Engine::same(e, engine)) {
                Some((_, n)) => *n += 1,
                None => engines.push((engine.clone(), 1)),
            }
        }
        if self.active.fetch_add(1, Ordering::SeqCst) == 0 {
            let _g = self.lock.lock();
            self.wake.notify_all();
        }
        TickerGuard { ticker: self, engine: engine.clone() }
    }

    fn run(&self) {
        loop {
            {
                let mut g = self.lock.lock();
                while self.active.load(Ordering::SeqCst) == 0 {
                    self.wake.wait(&mut g);
                }
            }
            std::thread::sleep(TICK);
            for (e, _) in self.engines.lock().iter() {
                e.increment_epoch();
            }
        }
    }
}

#[derive(Debug)]
pub(crate) struct TickerGuard {
    ticker: &'static Ticker,
    engine: wasmtime::Engine,
}

impl Drop for TickerGuard {
    fn drop(&mut self) {
        let mut engines = self.ticker.engines.lock();
        if let Some(i) = engines.iter().position(|(e, _)| wasmtime::Engine::same(e, &self.engine)) {
            engines[i].1 -= 1;
            if engines[i].1 == 0 {
                engines.swap_remove(i);
            }
        }
        drop(engines);
        self.ticker.active.fetch_sub(1, Ordering::SeqCst);
    }
}
