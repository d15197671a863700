//! The tool protocol's frames (version 1): decode and encode, with no I/O.
//!
//! The guest and the host exchange UTF-8 JSON objects called frames through the door
//! (`host.call`). This crate turns bytes into typed frames and back, for both sides:
//!
//! - host side: [`decode_request`] reads a guest's frame by the rules of the protocol
//!   (artifact ABI §6.4); [`encode_ok`], [`encode_error`] and [`ListAnswer`] write the answers,
//!   [`encode_started`] and [`encode_answers`] those of calls in parallel (`start`, `wait`);
//! - guest side: [`encode_request`] writes frames as the guest package does (§6.2), and
//!   [`decode_response`] reads answers as it does (§6.3).
//!
//! Invariants: this crate does no I/O and knows neither wasmtime nor PyO3. Decoding never
//! panics, whatever the bytes; its recursion is bounded by [`MAX_DEPTH`] and its memory by
//! the input's length. Every refusal is a [`DecodeError`] with a kind, a byte offset where one
//! place is at fault, the frame's id when a valid one was read, and a message fit to send
//! back to the guest. Encoding is infallible and iterative.
//!
//! The protocol itself is written down in `docs/protocol.md`.
#![forbid(unsafe_code)]

mod base64;
mod encode;
mod error;
mod names;
mod parse;
mod request;
mod response;
mod text;
mod value;

pub use encode::{
    ListAnswer, encode_answers, encode_error, encode_ok, encode_ok_into, encode_request,
    encode_response, encode_started, encode_value,
};
pub use error::{AnswerKind, DecodeError, DecodeErrorKind, ErrorKind, UnknownErrorKind};
pub use names::{PYTHON_KEYWORDS, is_valid_tool_name};
pub use request::{Request, decode_request};
pub use response::{Response, decode_response};
pub use text::cut_chars;
pub use value::{Map, Value};

/// The protocol version this crate speaks: every frame carries `"v": 1`.
pub const PROTOCOL_VERSION: u64 = 1;

/// The deepest container nesting a frame may have; the frame object itself is level 1.
pub const MAX_DEPTH: usize = 64;

/// The longest integer literal (sign included) a frame may hold.
pub const MAX_INT_CHARS: usize = 64;

/// Messages in failure answers are cut to this many characters.
pub const MAX_MESSAGE_CHARS: usize = 4096;

/// Guest-provided text echoed in a message (a tool name, an op) is cut to this many characters.
pub const MAX_ECHO_CHARS: usize = 64;

/// The largest request frame a host reads: a longer one is answered `too_large` unread.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;

/// The largest answer frame a host sends: a longer result is answered `too_large` instead.
pub const MAX_ANSWER_BYTES: usize = 16 << 20;

/// The largest id an answer echoes, 2^53 - 1 (an id any JSON reader holds exactly).
pub const MAX_ID: u64 = (1 << 53) - 1;

/// The most calls one `wait` frame may name.
pub const MAX_WAIT_IDS: usize = 64;

/// The longest tool name, in characters.
pub const MAX_TOOL_NAME_CHARS: usize = 64;
