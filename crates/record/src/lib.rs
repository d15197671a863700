//! The record of a run's tool door: one [`Outcome`] per frame the guest sent, gathered by a
//! [`Recorder`] into the [`ToolRecord`] the embedder reads (`done.tools`).
//!
//! The recorder counts every frame, lists the first `max_listed` (1,000 by default), counts
//! the rest as unlisted, and keeps every abandoned call whatever its position. It numbers the
//! frames itself, 1, 2, 3… in arrival order, so the runtime can learn a call's `seq` with
//! [`Recorder::next_seq`] before the call runs.
//!
//! This crate only keeps values: it does no I/O, reads no clock, takes no lock, cuts no
//! message, and knows neither wasmtime nor Python. The runtime decides each outcome and
//! shares the recorder behind its own mutex when it must.
#![forbid(unsafe_code)]

mod outcome;
mod recorder;

pub use outcome::{Op, Outcome, OutcomeKind};
pub use recorder::{DEFAULT_MAX_LISTED, Recorder, ToolRecord};
