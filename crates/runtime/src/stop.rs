//! The epoch ticker: what makes a computing guest look at its run's stop state (the
//! door's [`crate::CallContext`]: the deadline and the cancel) every [`TICK`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::forks::Seen;

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
    /// A forked child has no ticker thread: the first run there starts one (forks.rs).
    seen: Seen,
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
                seen: Seen::new(),
            }));
            t.seen.stale();
            t.start();
            t
        })
    }

    fn start(&'static self) {
        std::thread::Builder::new()
            .name("wasi-python-epoch".into())
            .spawn(move || self.run())
            .expect("spawning the epoch ticker thread");
    }

    /// Ticks `engine` while the returned guard lives.
    pub(crate) fn activate(&'static self, engine: &wasmtime::Engine) -> TickerGuard {
        if self.seen.stale() {
            self.start();
        }
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
