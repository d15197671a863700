//! Ending a run, or a call in it, from another thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// A handle that ends a run (or a tool call in it) from any thread.
///
/// Cancelling is sticky and idempotent. A run that sees it ends as cancelled (the
/// runtime's `Trapped::Cancelled`) within a few milliseconds: at its next epoch check
/// while computing, at once while sleeping or waiting on a tool.
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
