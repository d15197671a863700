//! One frame's outcome.

use std::fmt;

use wasi_python_protocol::ErrorKind;

/// What a frame asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// The discovery frame, which lists the tools.
    List,
    /// A tool call.
    Call,
    /// A frame whose `op` was not read: refused unread, not decodable, or an unknown op.
    Unknown,
}

impl Op {
    /// `"list"`, `"call"` or `"unknown"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::List => "list",
            Op::Call => "call",
            Op::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a frame ended: `ok`, or an error of the kind its answer carried on the wire.
///
/// The error kinds are crates/protocol's [`ErrorKind`], held as they are: a kind the protocol
/// gains is recorded as itself, under its own wire name, with nothing to add here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OutcomeKind {
    /// The guest got what it asked for.
    Ok,
    /// The answer was a failure of this kind.
    Error(ErrorKind),
}

impl OutcomeKind {
    /// The name on the wire and in the record: `"ok"`, or the error kind's wire name
    /// (`"protocol"`, `"unknown_tool"`, ...), which crates/protocol owns.
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Ok => "ok",
            OutcomeKind::Error(kind) => kind.as_str(),
        }
    }

    /// The kind named `name` (the inverse of [`as_str`](OutcomeKind::as_str)); `None` for
    /// any other text.
    pub fn from_wire(name: &str) -> Option<Self> {
        match name {
            "ok" => Some(OutcomeKind::Ok),
            _ => ErrorKind::from_wire(name).map(OutcomeKind::Error),
        }
    }

    /// The error kind the answer carried; `None` for `ok`.
    pub fn error_kind(self) -> Option<ErrorKind> {
        match self {
            OutcomeKind::Ok => None,
            OutcomeKind::Error(kind) => Some(kind),
        }
    }

    /// `true` for `ok`.
    pub fn is_ok(self) -> bool {
        self == OutcomeKind::Ok
    }
}

impl From<ErrorKind> for OutcomeKind {
    fn from(kind: ErrorKind) -> Self {
        OutcomeKind::Error(kind)
    }
}

impl fmt::Display for OutcomeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One frame, as the record lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The frame's number in its run or turn, from 1; set by [`Recorder::record`](crate::Recorder::record).
    pub seq: u64,
    pub op: Op,
    /// The tool a call named, when it was read.
    pub tool: Option<String>,
    pub outcome: OutcomeKind,
    /// The error message the guest read; `None` for `ok`.
    pub message: Option<String>,
    /// Length of the request frame, in bytes (read or not).
    pub request_bytes: u64,
    /// Length of the answer sent, in bytes.
    pub response_bytes: u64,
    /// Host-side detail the guest never sees, such as an exception's type and first line
    /// (`KeyError: 'x'`).
    pub fault: Option<String>,
    /// The call was answered while its tool ran on; its effect may still land.
    pub abandoned: bool,
    /// The guest received the answer. `false` when the host could not hand it over (the
    /// guest had no memory left for it, or gave a bad place to put it): the guest saw a
    /// failure of the door instead, and `fault` says why. The tool's effect stands.
    pub delivered: bool,
}
