//! One frame's outcome.

use std::fmt;

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

/// How a frame ended: `ok`, or the error kind its answer carried on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OutcomeKind {
    Ok,
    Protocol,
    UnknownTool,
    InvalidArguments,
    Denied,
    ToolError,
    Timeout,
    Cancelled,
    TooLarge,
    BudgetExceeded,
}

impl OutcomeKind {
    /// The name on the wire and in the record: `"ok"`, `"protocol"`, `"unknown_tool"`,
    /// `"invalid_arguments"`, `"denied"`, `"tool_error"`, `"timeout"`, `"cancelled"`,
    /// `"too_large"` or `"budget_exceeded"`.
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Ok => "ok",
            OutcomeKind::Protocol => "protocol",
            OutcomeKind::UnknownTool => "unknown_tool",
            OutcomeKind::InvalidArguments => "invalid_arguments",
            OutcomeKind::Denied => "denied",
            OutcomeKind::ToolError => "tool_error",
            OutcomeKind::Timeout => "timeout",
            OutcomeKind::Cancelled => "cancelled",
            OutcomeKind::TooLarge => "too_large",
            OutcomeKind::BudgetExceeded => "budget_exceeded",
        }
    }

    /// The kind named `name` (the inverse of [`as_str`](OutcomeKind::as_str)), e.g. from the
    /// budget's wire kind; `None` for any other text.
    pub fn from_wire(name: &str) -> Option<Self> {
        Some(match name {
            "ok" => OutcomeKind::Ok,
            "protocol" => OutcomeKind::Protocol,
            "unknown_tool" => OutcomeKind::UnknownTool,
            "invalid_arguments" => OutcomeKind::InvalidArguments,
            "denied" => OutcomeKind::Denied,
            "tool_error" => OutcomeKind::ToolError,
            "timeout" => OutcomeKind::Timeout,
            "cancelled" => OutcomeKind::Cancelled,
            "too_large" => OutcomeKind::TooLarge,
            "budget_exceeded" => OutcomeKind::BudgetExceeded,
            _ => return None,
        })
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
}
