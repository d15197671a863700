//! The tool door: where the guest's `_host.call(frame)` reaches the embedder's code.
//!
//! - [`Door`] is the raw door: a frame's bytes in, an answer's bytes out, with a
//!   [`CallContext`] (the run's deadline and [`CancelToken`]).
//! - [`ToolDoor`] is the door that speaks the tool protocol for a fixed set of
//!   [`ToolSpec`]s. A frame passes the budget (`crates/budget`), decode
//!   (`crates/protocol`), the tool's name, its fixed keywords, its schema
//!   (`crates/schema`), then the embedder's [`ToolHost`] on a thread of its own, then the
//!   answer's size cap, and every frame ends in the record (`crates/record`).
//! - [`Bound`] waits for a call on another thread until an instant or a stop, and
//!   abandons it then, counted by an [`Abandonment`] until it ends. Tool calls use it, and
//!   so do the runtime's mount providers.
//! - [`Spawn`] starts the door's threads, a new one per call: the runtime gives each door
//!   it runs its own pool ([`ToolDoor::spawn_with`]); [`StdThreads`] otherwise.
//! - [`network::NetworkDoor`] takes the guest's network requests to the embedder's
//!   [`network::NetworkHost`] before the other frames reach their door.
//!
//! This crate knows neither wasmtime nor Python, and reads no guest memory: the runtime
//! copies a frame out of the guest and the answer back in. It never interrupts embedder
//! code (a call that outlives its bound runs on, unseen, and is counted until it ends),
//! never lets a guest's frame make it panic or run unbounded, and never lets a tool's
//! failure reach the guest beyond a message: a tool's panic is an internal error.
#![forbid(unsafe_code)]

mod bounded;
mod cancel;
mod door;
mod flight;
mod spawn;
pub mod network;
mod tool;
mod tool_door;

pub use bounded::{Abandonment, Bound, Job, Unanswered};
pub use cancel::CancelToken;
pub use door::{CallContext, DEADLINE_MARGIN, Door, DoorAnswer, Stop};
pub use flight::{MAX_HELD_BYTES, MAX_IN_FLIGHT, MAX_WAIT_BYTES};
pub use spawn::{Spawn, StdThreads};
pub use tool::{Invocation, ToolHost, ToolOutput, ToolSpec, ToolSpecError};
pub use tool_door::ToolDoor;
