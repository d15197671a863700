//! The door: the guest's `_host.call(frame)` reaching host code, and what a call may
//! see of its run.

use std::time::{Duration, Instant};

use crate::CancelToken;

/// How long before the run's deadline a tool or provider call must end, so the guest can
/// still read the answer and the run can end on time.
pub const DEADLINE_MARGIN: Duration = Duration::from_millis(20);

/// What a door call may see of its run: when the run must end, and its cancel.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// The run's deadline, if it has one. Host work must end before it.
    pub deadline: Option<Instant>,
    /// Cancelled when the run is cancelled.
    pub cancel: CancelToken,
}

/// Why a run must stop. The runtime carries it as the error out of its epoch callback,
/// so a run's ending is named by kind, never by parsing text.
///
/// Exhaustive on purpose: a run is stopped from outside by its cancel or its deadline,
/// and the runtime names a distinct ending for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Stop {
    #[error("the run's deadline passed")]
    Deadline,
    #[error("the run was cancelled")]
    Cancelled,
}

impl CallContext {
    /// Whether the run must stop now, and why: its cancel first, then its deadline.
    pub fn check(&self) -> Option<Stop> {
        if self.cancel.is_cancelled() {
            Some(Stop::Cancelled)
        } else if self.deadline.is_some_and(|d| Instant::now() >= d) {
            Some(Stop::Deadline)
        } else {
            None
        }
    }

    /// When a call started at `start` must end: at its `timeout`, or [`DEADLINE_MARGIN`]
    /// before the run's deadline, whichever comes first; `None` when neither is set.
    pub fn end_of_call(&self, start: Instant, timeout: Option<Duration>) -> Option<Instant> {
        let by_deadline = self.deadline.map(|d| d.checked_sub(DEADLINE_MARGIN).unwrap_or(start));
        // A timeout past what a clock can hold is no timeout (and no panic).
        let by_timeout = timeout.and_then(|t| start.checked_add(t));
        match (by_deadline, by_timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// How the host answers one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DoorAnswer {
    /// The response bytes; the guest's `_host.call` returns them.
    Reply(Vec<u8>),
    /// "No host is bound to the door": the guest raises `ConnectionRefusedError`.
    NoHost,
    /// The host faulted: the guest raises `OSError`.
    Fault,
}

/// Host code behind the door. Implementations are the embedder's: trusted, but
/// the bytes they get are the guest's and must be treated as hostile.
///
/// `call` runs on the guest's thread while the guest waits; it must bound its own
/// time by `ctx.deadline` and `ctx.cancel` (the runtime cannot interrupt host code).
pub trait Door: Send + Sync {
    fn call(&self, request: &[u8], ctx: &CallContext) -> DoorAnswer;

    /// The reply to the last call never reached the guest (it had no memory left for
    /// it, or named a bad place for it); the guest saw the door fail instead. A door that
    /// keeps a record marks that answer not delivered, with `fault`.
    fn undelivered(&self, fault: &str) {
        let _ = fault;
    }
}

impl<F> Door for F
where
    F: Fn(&[u8], &CallContext) -> DoorAnswer + Send + Sync,
{
    fn call(&self, request: &[u8], ctx: &CallContext) -> DoorAnswer {
        self(request, ctx)
    }
}
