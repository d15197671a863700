//! Waiting for another thread's answer.

use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// Looks for a message for up to `spin` without sleeping: on a small VM a sleep and
/// wake-up costs tens of microseconds, more than many answers take to arrive. `Empty`
/// when none came in time (then block on the channel as usual).
pub(crate) fn try_recv_spinning<T>(rx: &Receiver<T>, spin: Duration) -> Result<T, TryRecvError> {
    let until = Instant::now() + spin;
    loop {
        match rx.try_recv() {
            Err(TryRecvError::Empty) if Instant::now() < until => std::hint::spin_loop(),
            other => return other,
        }
    }
}
