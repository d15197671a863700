//! Accounting for the tool door of one run (or one session turn): frames and request bytes
//! spent, the length of a single request or answer, and the tool threads abandoned while
//! still running.
//!
//! Values in, verdicts out. The runtime measures each amount and asks [`Budget`]; a refusal
//! is an [`Exceeded`] naming the [`Resource`], its limit and the amount the refused request
//! would have used, and [`Resource::wire_kind`] names the error kind the guest is answered
//! with.
//!
//! This crate never reads a clock, does no I/O, starts no thread and takes no lock: the
//! runtime wraps a [`Budget`] in its own mutex and enforces time itself. It knows neither
//! wasmtime nor Python.
#![forbid(unsafe_code)]

mod budget;
mod exceeded;
mod limits;

pub use budget::{Budget, Used};
pub use exceeded::{Exceeded, Resource};
pub use limits::{
    DEFAULT_MAX_ABANDONED, DEFAULT_MAX_ANSWER_LEN, DEFAULT_MAX_FRAMES, DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_REQUEST_LEN, Limits,
};
