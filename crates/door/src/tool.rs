//! A tool as the door sees it ([`ToolSpec`]), one call of it ([`Invocation`]), what the
//! call came to ([`ToolOutput`]), and the embedder's side that runs it ([`ToolHost`]).

use std::time::Duration;

use wasi_python_protocol::{DecodeError, Map, Value};
use wasi_python_schema::{InputSchema, Options};

use crate::CancelToken;

/// Why a set of tools cannot be offered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolSpecError {
    #[error("tool name {0:?} is not an identifier of at most 64 characters, or is a Python keyword")]
    BadName(String),
    #[error("two tools are named {0:?}")]
    Duplicate(String),
    #[error("tool {tool}: input schema: {source}")]
    Schema {
        tool: String,
        #[source]
        source: wasi_python_schema::SchemaError,
    },
    #[error("the tool descriptors are not valid JSON: {0}")]
    Descriptors(DecodeError),
}

/// One tool as the door sees it: its name, its descriptor (sent to the guest as is),
/// its compiled input schema, the keywords the host fixed, and its own timeout.
#[derive(Debug)]
pub struct ToolSpec {
    pub(crate) name: String,
    pub(crate) descriptor: String,
    pub(crate) schema: InputSchema,
    pub(crate) fixed: Vec<String>,
    pub(crate) timeout: Option<Duration>,
}

impl ToolSpec {
    /// `descriptor` is the MCP-style descriptor as JSON text; `input_schema` its
    /// `inputSchema`, checked here against the protocol's subset (`validates_input`
    /// lets other keywords through, unchecked).
    pub fn new(
        name: impl Into<String>,
        descriptor: impl Into<String>,
        input_schema: &serde_json::Value,
        validates_input: bool,
        fixed: Vec<String>,
        timeout: Option<Duration>,
    ) -> Result<Self, ToolSpecError> {
        let name = name.into();
        if !wasi_python_protocol::is_valid_tool_name(&name) {
            return Err(ToolSpecError::BadName(name));
        }
        let schema = InputSchema::compile(input_schema, Options { validates_input })
            .map_err(|source| ToolSpecError::Schema { tool: name.clone(), source })?;
        Ok(ToolSpec {
            name,
            descriptor: descriptor.into(),
            schema,
            fixed,
            timeout,
        })
    }
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// One validated call, handed to the [`ToolHost`] on its own thread.
#[derive(Debug)]
pub struct Invocation {
    /// The frame's number in this run (or session turn), from 1.
    pub seq: u64,
    /// The tool's index in the list given to [`ToolDoor::new`](crate::ToolDoor::new).
    pub tool: usize,
    pub name: String,
    /// Only what the guest sent: no defaults, no fixed keywords.
    pub args: Map,
    pub request_bytes: u64,
}

/// What a tool call came to.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ToolOutput {
    /// The result, to be sent as the answer's value.
    Ok(Value),
    /// Refused by the gate; the guest reads `message` as a `PermissionError`.
    /// `fault` is kept in the record when the gate itself failed.
    Denied { message: String, fault: Option<String> },
    /// The tool's own error (`ToolError`); its message crosses.
    Error { message: String },
    /// Any other failure: only "<tool> failed (internal error)" crosses; `fault`
    /// (the exception's type and first line) stays in the record.
    Internal { fault: String },
    /// The tool noticed the call's cancel and stopped.
    Cancelled,
}

/// The embedder's side of a tool call: runs the gate and the tool.
///
/// Called on a new thread per call. `cancel` is cancelled when the call ends
/// without it (timeout, the run's cancel or deadline); an implementation that can
/// stop early (an async tool at its next await) should.
pub trait ToolHost: Send + Sync + 'static {
    fn invoke(&self, call: Invocation, cancel: &CancelToken) -> ToolOutput;

    /// Runs a tool thread's whole life, `body` included: the one hook by which the
    /// embedder prepares the thread, once (Python: its thread state), so the call itself
    /// starts at once. The door starts each thread (with the [`Spawn`](crate::Spawn) its
    /// runtime gave it) before its call arrives, and gives it one call only.
    fn enter_thread(&self, body: Box<dyn FnOnce() + Send + '_>) {
        body()
    }
}

