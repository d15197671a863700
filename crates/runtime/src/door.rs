//! The door: the guest's `_host.call(frame)` reaching host code.

use std::time::Instant;

use crate::CancelToken;

/// What a door call may see of its run: when the run must end, and its cancel.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// The run's deadline, if it has one. Host work must end before it.
    pub deadline: Option<Instant>,
    /// Cancelled when the run is cancelled.
    pub cancel: CancelToken,
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
}

impl<F> Door for F
where
    F: Fn(&[u8], &CallContext) -> DoorAnswer + Send + Sync,
{
    fn call(&self, request: &[u8], ctx: &CallContext) -> DoorAnswer {
        self(request, ctx)
    }
}
