//! Error kinds on the wire, and the decoder's typed error.

use std::fmt;
use std::str::FromStr;

/// The `error.kind` of a failure answer (§6.3), one per guest exception class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A malformed or unsupported frame; the guest raises `ToolProtocolError`.
    Protocol,
    /// No tool has that name; the guest raises `ToolArgumentError` with `.kind == "unknown_tool"`.
    UnknownTool,
    /// The arguments do not fit the tool's input schema; `ToolArgumentError`.
    InvalidArguments,
    /// A gate or the tool refused the call; `ToolDenied` (also a `PermissionError`).
    Denied,
    /// The tool raised; `ToolError`.
    ToolError,
    /// The call ran out of time; `ToolTimeout` (also a `TimeoutError`).
    Timeout,
    /// The run was cancelled; `ToolCancelled`.
    Cancelled,
    /// A request over 1 MiB or an answer over 16 MiB; `ToolTooLarge`.
    TooLarge,
    /// The run's frame or request-byte budget is spent, or a start finds the most calls
    /// in flight; `ToolBudgetExceeded`.
    BudgetExceeded,
}

impl ErrorKind {
    /// Every kind, in the order of the protocol's table.
    pub const ALL: [ErrorKind; 9] = [
        ErrorKind::Protocol,
        ErrorKind::UnknownTool,
        ErrorKind::InvalidArguments,
        ErrorKind::Denied,
        ErrorKind::ToolError,
        ErrorKind::Timeout,
        ErrorKind::Cancelled,
        ErrorKind::TooLarge,
        ErrorKind::BudgetExceeded,
    ];

    /// The wire string, such as `"unknown_tool"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Protocol => "protocol",
            ErrorKind::UnknownTool => "unknown_tool",
            ErrorKind::InvalidArguments => "invalid_arguments",
            ErrorKind::Denied => "denied",
            ErrorKind::ToolError => "tool_error",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::BudgetExceeded => "budget_exceeded",
        }
    }

    /// The kind named by a wire string, or `None` for a string this version does not know.
    pub fn from_wire(text: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A wire string that names no [`ErrorKind`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown error kind {0:?}")]
#[non_exhaustive]
pub struct UnknownErrorKind(pub String);

impl FromStr for ErrorKind {
    type Err = UnknownErrorKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ErrorKind::from_wire(s).ok_or_else(|| UnknownErrorKind(s.to_owned()))
    }
}

/// The kind of a failure answer as the guest side reads it: a known kind, or the unknown
/// string kept as sent (the guest raises a plain `ToolError` whose `.kind` is that string).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AnswerKind {
    Known(ErrorKind),
    Other(String),
}

impl AnswerKind {
    pub fn from_wire(text: &str) -> AnswerKind {
        match ErrorKind::from_wire(text) {
            Some(k) => AnswerKind::Known(k),
            None => AnswerKind::Other(text.to_owned()),
        }
    }
    pub fn as_str(&self) -> &str {
        match self {
            AnswerKind::Known(k) => k.as_str(),
            AnswerKind::Other(s) => s,
        }
    }
}

impl From<ErrorKind> for AnswerKind {
    fn from(k: ErrorKind) -> Self {
        AnswerKind::Known(k)
    }
}

impl fmt::Display for AnswerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is wrong with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// A request longer than [`MAX_REQUEST_BYTES`](crate::MAX_REQUEST_BYTES); wire kind `too_large`.
    TooLarge,
    /// Not UTF-8; the offset is the first bad byte.
    Utf8,
    /// Not JSON (includes control characters in strings, bad escapes, trailing data, a BOM).
    Syntax,
    /// Containers nested deeper than [`MAX_DEPTH`](crate::MAX_DEPTH).
    Depth,
    /// `NaN`, `Infinity`, `-Infinity`, or a number that overflows to infinity.
    NonFinite,
    /// An integer literal longer than [`MAX_INT_CHARS`](crate::MAX_INT_CHARS) characters.
    IntTooLong,
    /// An object names one key twice.
    DuplicateKey,
    /// A `\uD800`-`\uDFFF` escape that is not half of a pair.
    LoneSurrogate,
    /// A `"$bytes"` object that is not exactly one key holding strict standard base64.
    BadBytes,
    /// The frame is not a JSON object.
    NotObject,
    /// `v` is missing or is not `1`.
    Version,
    /// A required field (`op`, `tool`, a wait's `ids`, a start's id; in answers `ok`,
    /// `error`) is missing.
    MissingField,
    /// A field has the wrong type (`op` or `tool` not a string; in answers `ok` not a
    /// boolean, `id` not null or a request id, `tools` not an array).
    WrongType,
    /// An `op` this version does not know.
    UnknownOp,
    /// `op` is `"batch"`, reserved for a later version.
    ReservedOp,
    /// A call's `args` is not an object; wire kind `invalid_arguments` (§6.4).
    ArgsNotObject,
    /// A wait's `ids` are not 1 to [`MAX_WAIT_IDS`](crate::MAX_WAIT_IDS) distinct request
    /// ids, or its `timeout_ms` is not an integer of at least 0.
    BadWait,
}

impl DecodeErrorKind {
    /// The answer's `error.kind` for a request failing this way: `invalid_arguments` for
    /// [`ArgsNotObject`](Self::ArgsNotObject), `too_large` for [`TooLarge`](Self::TooLarge),
    /// `protocol` for everything else.
    pub fn wire_kind(self) -> ErrorKind {
        match self {
            DecodeErrorKind::TooLarge => ErrorKind::TooLarge,
            DecodeErrorKind::ArgsNotObject => ErrorKind::InvalidArguments,
            _ => ErrorKind::Protocol,
        }
    }
}

/// A frame the decoder refused.
///
/// `message` is written for the guest: it names the fault and the byte offset, and any
/// guest-provided text in it is cut to [`MAX_ECHO_CHARS`](crate::MAX_ECHO_CHARS) characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct DecodeError {
    pub kind: DecodeErrorKind,
    /// The byte offset of the fault in the frame, where one place is at fault.
    pub offset: Option<usize>,
    /// The frame's id when a valid one (an integer in `[0, 2^53-1]`) was read before the
    /// fault; the failure answer echoes it.
    pub id: Option<u64>,
    /// For [`DecodeErrorKind::ArgsNotObject`]: the tool the call named, so the host can
    /// answer `unknown_tool` first when no tool has that name.
    pub tool: Option<String>,
    pub message: String,
}

impl DecodeError {
    pub(crate) fn new(kind: DecodeErrorKind, offset: Option<usize>, message: String) -> Self {
        DecodeError {
            kind,
            offset,
            id: None,
            tool: None,
            message,
        }
    }

    /// The answer's `error.kind`; see [`DecodeErrorKind::wire_kind`].
    pub fn wire_kind(&self) -> ErrorKind {
        self.kind.wire_kind()
    }
}
