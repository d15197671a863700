//! The epoch ticker: what makes a computing guest look at its run's stop state (the
//! door's [`crate::CallContext`]: the deadline and the cancel) every [`TICK`].

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use wasi_python_sched::Seen;

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
    /// Its thread runs: started by the first run, and again by the next run should that
    /// fail (no thread could be made) or in a forked child, which has none (forks.rs).
    started: AtomicBool,
    seen: Seen,
}

impl Ticker {
    pub(crate) fn global() -> &'static Ticker {
        // Process-wide by nature, not launch state: one thread bumps every engine's epoch.
        static TICKER: std::sync::OnceLock<&'static Ticker> = std::sync::OnceLock::new();
        TICKER.get_or_init(|| {
            let t: &'static Ticker = Box::leak(Box::new(Ticker {
                engines: Mutex::new(Vec::new()),
                active: AtomicUsize::new(0),
                lock: Mutex::new(()),
                wake: Condvar::new(),
                started: AtomicBool::new(false),
                seen: Seen::new(),
            }));
            t.seen.stale();
            t
        })
    }

    /// Starts the ticker's thread unless it runs. `Err` if none could be made.
    fn start(&'static self) -> std::io::Result<()> {
        if self.seen.stale() {
            self.started.store(false, Ordering::SeqCst);
        }
        if self.started.load(Ordering::SeqCst) {
            return Ok(());
        }
        let _one = self.lock.lock();
        if !self.started.load(Ordering::SeqCst) {
            std::thread::Builder::new().name("wasi-python-epoch".into()).spawn(move || self.run())?;
            self.started.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Ticks `engine` while the returned guard lives. `Err` if the ticker's thread could
    /// not be started: a run must not compute unticked, past its deadline and cancel.
    pub(crate) fn activate(&'static self, engine: &wasmtime::Engine) -> wasmtime::Result<TickerGuard> {
        self.start().map_err(|e| wasmtime::format_err!("could not start the epoch ticker thread: {e}"))?;
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
        Ok(TickerGuard { ticker: self, engine: engine.clone() })
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
