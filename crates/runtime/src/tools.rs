//! The tool door: the protocol's frames in, one tool call each, the record out.
//!
//! A frame passes, in order: the budget (its length, the frame count, the request
//! bytes; refused unread), decode, the tool's name, fixed keywords, the schema, the
//! abandoned-thread cap, then the [`ToolHost`] on a new thread bounded by the tool's
//! timeout, the run's deadline (less 20 ms) and the run's cancel, then the answer cap,
//! and every frame ends in the record.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use wasi_python_budget::{Budget, Limits as BudgetLimits};
use wasi_python_protocol::{
    DecodeError, ErrorKind, ListAnswer, MAX_ECHO_CHARS, MAX_MESSAGE_CHARS, Map, Request, Value,
    cut_chars, decode_request, encode_error, encode_ok,
};
use wasi_python_record::{Op, Outcome, OutcomeKind, Recorder, ToolRecord};
use wasi_python_schema::{ArgumentErrorKind, Bounds, DEFAULT_MAX_STEPS, InputSchema, Options};

use crate::door::{CallContext, Door, DoorAnswer};
use crate::CancelToken;

/// How long before the run's deadline a tool call must end, so the guest can still
/// read the answer and the run can end on time.
pub const DEADLINE_MARGIN: Duration = Duration::from_millis(20);
/// How often a waiting call looks at the run's cancel.
const POLL: Duration = Duration::from_millis(2);
/// How many tool threads wait ready for the next call. One: the next call's thread
/// starts while the guest reads an answer. Measured (docs/benchmarks.md): two spares,
/// or a spare that spins awake for its call, were no faster on 2 cores, and two
/// spinning threads beside the guest's tripled the round trip.
const SPARES: usize = 1;
/// How long the guest's thread spins for a quick answer before it sleeps: a sleep and
/// wake-up costs tens of microseconds on a small VM, most tool calls less.
const SPIN: Duration = Duration::from_micros(150);

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
    name: String,
    descriptor: String,
    schema: InputSchema,
    fixed: Vec<String>,
    timeout: Option<Duration>,
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
    /// The tool's index in the list given to [`ToolDoor::new`].
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

    /// Runs a tool thread's whole life, `body` included. A host may prepare the thread
    /// here once (Python: its thread state) so the call itself starts at once; the
    /// runtime starts each thread before its call arrives, and gives it one call only.
    fn enter_thread(&self, body: Box<dyn FnOnce() + Send + '_>) {
        body()
    }
}

/// One call's work, sent to a tool thread.
type Job = Box<dyn FnOnce() + Send>;

/// Starts a tool thread that waits for exactly one job.
fn start_worker(host: Arc<dyn ToolHost>) -> std::io::Result<mpsc::SyncSender<Job>> {
    let (tx, rx) = mpsc::sync_channel::<Job>(1);
    std::thread::Builder::new()
        .name("wasi-python-tool".into())
        .spawn(move || {
            host.enter_thread(Box::new(move || {
                if let Ok(job) = rx.recv() {
                    job();
                }
            }))
        })?;
    Ok(tx)
}

/// A door that speaks the tool protocol for a fixed set of tools.
#[derive(Clone)]
pub struct ToolDoor {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ToolDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolDoor").field("tools", &self.inner.tools).finish()
    }
}

struct Inner {
    tools: Vec<Arc<ToolSpec>>,
    by_name: HashMap<String, usize>,
    list: ListAnswer,
    offered: String,
    host: Arc<dyn ToolHost>,
    state: Mutex<State>,
    /// Fresh threads, started ahead of the next calls so their start is off the calls' path.
    spare: Mutex<Vec<mpsc::SyncSender<Job>>>,
}

struct State {
    budget: Budget,
    recorder: Recorder,
}

impl ToolDoor {
    /// A door over `tools` (a `ToolSpec` or an `Arc` of one: an embedder may compile
    /// its tools once and share them across runs).
    pub fn new(
        tools: impl IntoIterator<Item = impl Into<Arc<ToolSpec>>>,
        host: Arc<dyn ToolHost>,
        limits: BudgetLimits,
    ) -> Result<Self, ToolSpecError> {
        let tools: Vec<Arc<ToolSpec>> = tools.into_iter().map(Into::into).collect();
        let mut by_name = HashMap::with_capacity(tools.len());
        for (i, t) in tools.iter().enumerate() {
            if by_name.insert(t.name.clone(), i).is_some() {
                return Err(ToolSpecError::Duplicate(t.name.clone()));
            }
        }
        let list = ListAnswer::from_descriptors(tools.iter().map(|t| t.descriptor.as_str()))
            .map_err(ToolSpecError::Descriptors)?;
        let offered = if tools.is_empty() {
            "nothing".to_owned()
        } else {
            tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
        };
        Ok(ToolDoor {
            inner: Arc::new(Inner {
                tools,
                by_name,
                list,
                offered,
                host,
                state: Mutex::new(State {
                    budget: Budget::new(limits),
                    recorder: Recorder::default(),
                }),
                spare: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Starts spare tool threads up to [`SPARES`], so that the next call finds its
    /// thread started.
    fn refill(&self) {
        if self.inner.tools.is_empty() {
            return;
        }
        while self.inner.spare.lock().len() < SPARES {
            match start_worker(self.inner.host.clone()) {
                Ok(tx) => self.inner.spare.lock().push(tx),
                Err(_) => return,
            }
        }
    }

    /// Hands a job to a fresh thread: a spare if there is one, else a new one.
    fn dispatch(&self, job: Job) -> Result<(), ()> {
        let spare = self.inner.spare.lock().pop();
        let tx = match spare {
            Some(tx) => tx,
            None => start_worker(self.inner.host.clone()).map_err(|_| ())?,
        };
        tx.send(job).map_err(|_| ())
    }

    /// The record so far.
    pub fn record(&self) -> ToolRecord {
        self.inner.state.lock().recorder.snapshot()
    }

    /// Ends a session turn: returns its record and starts the next turn's budget and
    /// record. Abandoned tool threads stay counted across turns.
    pub fn next_turn(&self, limits: BudgetLimits) -> ToolRecord {
        let mut st = self.inner.state.lock();
        st.budget.reset_turn(limits);
        std::mem::take(&mut st.recorder).finish()
    }
}

/// One frame's fate before it is recorded.
struct Answer {
    op: Op,
    tool: Option<String>,
    kind: OutcomeKind,
    message: Option<String>,
    fault: Option<String>,
    abandoned: bool,
    frame: Vec<u8>,
}

impl Answer {
    fn refuse(op: Op, tool: Option<&str>, id: Option<u64>, kind: ErrorKind, message: &str) -> Self {
        let message = cut_chars(message, MAX_MESSAGE_CHARS).to_owned();
        Answer {
            op,
            tool: tool.map(str::to_owned),
            kind: OutcomeKind::from(kind),
            frame: encode_error(id, kind, &message),
            message: Some(message),
            fault: None,
            abandoned: false,
        }
    }
}


impl Door for ToolDoor {
    fn call(&self, request: &[u8], ctx: &CallContext) -> DoorAnswer {
        let inner = &self.inner;
        let request_bytes = request.len() as u64;
        let seq = {
            let mut st = inner.state.lock();
            if let Err(e) = st.budget.charge_request(request_bytes) {
                // Refused unread: no id is known.
                let a = Answer::refuse(Op::Unknown, None, None, e.wire_kind(), &e.to_string());
                return finish(&mut st, a, request_bytes);
            }
            st.recorder.next_seq()
        };
        let answer = match decode_request(request) {
            Err(e) => {
                let tool = e.tool.as_deref().map(|t| cut_chars(t, MAX_ECHO_CHARS));
                match tool {
                    Some(t) if !inner.by_name.contains_key(t) => {
                        unknown_tool(inner, t, e.id)
                    }
                    _ => Answer::refuse(
                        if tool.is_some() { Op::Call } else { Op::Unknown },
                        tool,
                        e.id,
                        e.wire_kind(),
                        &e.message,
                    ),
                }
            }
            Ok(Request::List { id }) => {
                self.refill();
                Answer {
                op: Op::List,
                tool: None,
                kind: OutcomeKind::Ok,
                message: None,
                fault: None,
                abandoned: false,
                frame: inner.list.encode(id),
            }
            }
            Ok(Request::Call { id, tool, args }) => self.call_tool(seq, id, tool, args, request_bytes, ctx),
        };
        let mut st = inner.state.lock();
        finish(&mut st, answer, request_bytes)
    }
}

fn unknown_tool(inner: &Inner, name: &str, id: Option<u64>) -> Answer {
    let name = cut_chars(name, MAX_ECHO_CHARS);
    Answer::refuse(
        Op::Call,
        Some(name),
        id,
        ErrorKind::UnknownTool,
        &format!("no tool named {name:?}; this run offers: {}", inner.offered).replace('"', "'"),
    )
}

fn finish(st: &mut State, a: Answer, request_bytes: u64) -> DoorAnswer {
    st.recorder.record(Outcome {
        seq: 0,
        op: a.op,
        tool: a.tool,
        outcome: a.kind,
        message: a.message,
        request_bytes,
        response_bytes: a.frame.len() as u64,
        fault: a.fault,
        abandoned: a.abandoned,
    });
    DoorAnswer::Reply(a.frame)
}

/// What the worker thread sends back.
struct Done {
    output: ToolOutput,
    frame: Vec<u8>,
}

impl ToolDoor {
    fn call_tool(
        &self,
        seq: u64,
        id: Option<u64>,
        name: String,
        args: Map,
        request_bytes: u64,
        ctx: &CallContext,
    ) -> Answer {
        let inner = &self.inner;
        let Some(&index) = inner.by_name.get(&name) else {
            return unknown_tool(inner, &name, id);
        };
        let spec = &inner.tools[index];
        let refuse = |kind, msg: &str| Answer::refuse(Op::Call, Some(&spec.name), id, kind, msg);
        let internal = |fault: String| Answer {
            fault: Some(fault),
            ..refuse(ErrorKind::ToolError, &format!("{} failed (internal error)", spec.name))
        };
        let invalid = |msg: &str| refuse(ErrorKind::InvalidArguments, &format!("{}: the arguments: {msg}", spec.name));
        if let Some(k) = args.keys().find(|k| spec.fixed.iter().any(|f| f == k)) {
            return invalid(&format!("argument '{}' is fixed by the host", cut_chars(k, MAX_ECHO_CHARS)));
        }
        // The guest chose the arguments: the check counts its steps and ends at the run's
        // deadline or cancel, so no schema makes it outlast the run (crates/schema `Bounds`).
        let stop = || ctx.cancel.is_cancelled() || ctx.deadline.is_some_and(|d| Instant::now() >= d);
        let bounds = Bounds { max_steps: DEFAULT_MAX_STEPS, stop: Some(&stop) };
        if let Err(e) = spec.schema.validate_within(&args, &[], &bounds) {
            return match e.kind() {
                ArgumentErrorKind::Stopped if ctx.cancel.is_cancelled() => {
                    refuse(ErrorKind::Cancelled, &format!("{} was cancelled", spec.name))
                }
                ArgumentErrorKind::Stopped => {
                    refuse(ErrorKind::Timeout, &format!("{} was not started: the run's deadline came", spec.name))
                }
                _ => invalid(e.message()),
            };
        }
        if let Err(e) = inner.state.lock().budget.try_start_call() {
            return refuse(ErrorKind::Timeout, &format!("{} was not started: {e}", spec.name));
        }
        let now = Instant::now();
        let by_deadline = ctx.deadline.map(|d| d.checked_sub(DEADLINE_MARGIN).unwrap_or(now));
        let by_timeout = spec.timeout.map(|t| now + t);
        let until = match (by_deadline, by_timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timed_out =
            |waited: Duration| refuse(ErrorKind::Timeout, &format!("{} timed out after {} s", spec.name, round_secs(waited)));
        if until.is_some_and(|u| u <= now) {
            return timed_out(Duration::ZERO);
        }

        let call_cancel = CancelToken::new();
        let abandoned = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::sync_channel::<Done>(1);
        let spawned = {
            let door = self.clone();
            let call_cancel = call_cancel.clone();
            let abandoned = abandoned.clone();
            let inv = Invocation { seq, tool: index, name: spec.name.clone(), args, request_bytes };
            self.dispatch(Box::new(move || {
                let output = door.inner.host.invoke(inv, &call_cancel);
                // The result is encoded here, on the tool's thread.
                let frame = match &output {
                    ToolOutput::Ok(v) => encode_ok(id, v),
                    _ => Vec::new(),
                };
                let _ = tx.send(Done { output, frame });
                {
                    let mut st = door.inner.state.lock();
                    if abandoned.load(Ordering::SeqCst) {
                        st.budget.abandoned_finished();
                    }
                }
                // The next call's thread starts now, after this one has answered.
                door.refill();
            }))
        };
        if spawned.is_err() {
            return internal("the host could not start a thread for the call".into());
        }
        // Most answers come within the spin; otherwise wait in slices, watching the
        // run's cancel and the call's time limit.
        let done = match crate::wait::try_recv_spinning(&rx, SPIN) {
            Ok(done) => Some(done),
            Err(mpsc::TryRecvError::Disconnected) => None,
            Err(mpsc::TryRecvError::Empty) => loop {
                let wait = until.map_or(POLL, |u| u.saturating_duration_since(Instant::now()).min(POLL));
                match rx.recv_timeout(wait) {
                    Ok(done) => break Some(done),
                    Err(mpsc::RecvTimeoutError::Disconnected) => break None,
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                }
                let cancelled = ctx.cancel.is_cancelled();
                let expired = until.is_some_and(|u| Instant::now() >= u);
                if cancelled || expired {
                    // Answer now; the tool runs on, unseen, and is counted until it ends.
                    call_cancel.cancel();
                    let mut st = inner.state.lock();
                    if let Ok(done) = rx.try_recv() {
                        drop(st);
                        break Some(done);
                    }
                    abandoned.store(true, Ordering::SeqCst);
                    st.budget.abandon();
                    drop(st);
                    let mut a = if cancelled {
                        refuse(ErrorKind::Cancelled, &format!("{} was cancelled", spec.name))
                    } else {
                        timed_out(now.elapsed())
                    };
                    a.abandoned = true;
                    return a;
                }
            },
        };
        let Some(Done { output, frame }) = done else {
            return internal("the tool's thread ended without an answer (a panic)".into());
        };
        match output {
            ToolOutput::Ok(_) => {
                if let Err(e) = inner.state.lock().budget.check_answer(frame.len() as u64) {
                    return Answer {
                        fault: Some(format!("the result encodes to {} bytes", frame.len())),
                        ..refuse(ErrorKind::TooLarge, &format!("{}: {e}", spec.name))
                    };
                }
                Answer {
                    op: Op::Call,
                    tool: Some(spec.name.clone()),
                    kind: OutcomeKind::Ok,
                    message: None,
                    fault: None,
                    abandoned: false,
                    frame,
                }
            }
            ToolOutput::Denied { message, fault } => Answer { fault, ..refuse(ErrorKind::Denied, &message) },
            ToolOutput::Error { message } => refuse(ErrorKind::ToolError, &message),
            ToolOutput::Internal { fault } => internal(fault),
            ToolOutput::Cancelled => refuse(ErrorKind::Cancelled, &format!("{} was cancelled", spec.name)),
        }
    }
}

fn round_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 10.0 { format!("{s:.0}") } else { format!("{s:.1}") }
}
