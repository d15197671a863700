//! How the door starts its threads: a [`Spawn`], which the runtime gives each door it
//! runs (its own pool of call threads); [`StdThreads`] otherwise.

use std::ffi::CStr;
use std::io;

use crate::Job;

/// Starts threads for the door: each [`Spawn::spawn`] a new thread, which runs its job and
/// ends (every tool call gets a thread of its own). The embedder's preparation of that
/// thread is [`ToolHost::enter_thread`](crate::ToolHost::enter_thread), inside the job.
pub trait Spawn: Send + Sync + 'static {
    /// Starts a new thread named `name` (the kernel keeps 15 bytes) that runs `job`.
    fn spawn(&self, name: &'static CStr, job: Job) -> io::Result<()>;
}

/// A std thread per job: the door's own default.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdThreads;

impl Spawn for StdThreads {
    fn spawn(&self, name: &'static CStr, job: Job) -> io::Result<()> {
        std::thread::Builder::new().name(name.to_string_lossy().into_owned()).spawn(job).map(drop)
    }
}
