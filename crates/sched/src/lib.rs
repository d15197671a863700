//! Scheduling primitives that know no wasmtime: what the runtime's launcher
//! (crates/runtime, launch.rs) builds its runs' threads from.
//!
//! - [`KeptThreads`]: threads kept for the next job, each waiting idle on a [`Waiters`]
//!   list, with a [`Finishing`] guard for a thread still finishing its last job.
//! - [`CallThreads`]: a new thread per call on a stack kept from an ended one.
//! - [`wake`]: a waiting thread woken on its waker's CPU, and kept off it after; only the
//!   caller's own threads move unless the embedder asks, and what it set is never undone.
//! - [`try_recv_spinning`]: a wait that spins before it sleeps.
//! - [`stack::give_back`]: a resting thread's stack pages below its frame given back.
//! - [`forks`]: a forked child's lists notice they hold their parent's entries.
//!
//! Every pool here is a value its owner holds (the runtime's `Launcher`): two owners
//! share no thread, stack or count. The process-wide state is the fork count alone.

pub mod call_threads;
pub mod forks;
pub mod stack;
pub mod threads;
pub mod wait;
pub mod wake;

pub use call_threads::CallThreads;
pub use forks::{Count, Counted, Seen, generation};
pub use threads::{Finishing, KeptThreads, Waiters};
pub use wait::try_recv_spinning;

/// A job handed to a thread: run once.
pub type Job = Box<dyn FnOnce() + Send>;
