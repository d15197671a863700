//! The tool door: the protocol's frames in, one tool call each, the record out.
//!
//! A frame passes, in order: the budget (its length, the frame count, the request
//! bytes; refused unread), decode, the tool's name, fixed keywords, the schema, the
//! abandoned-thread cap, then the [`ToolHost`] on a thread of its own bounded by the tool's
//! timeout, the run's deadline (less 20 ms) and the run's cancel ([`Bound`]), then the
//! answer cap, and every frame ends in the record.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use wasi_python_budget::{Budget, Limits as BudgetLimits};
use wasi_python_protocol::{
    ErrorKind, ListAnswer, MAX_ECHO_CHARS, MAX_MESSAGE_CHARS, Map, Request, Value, cut_chars, decode_request,
    encode_error, encode_ok,
};
use wasi_python_record::{Op, Outcome, OutcomeKind, Recorder, ToolRecord};
use wasi_python_schema::{ArgumentErrorKind, Bounds, DEFAULT_MAX_STEPS};

use crate::flight::{Flight, MAX_IN_FLIGHT, MAX_WAIT_BYTES};
use crate::{
    Abandonment, Bound, CallContext, CancelToken, Door, DoorAnswer, Invocation, Job, Spawn, StdThreads, ToolHost,
    ToolOutput, ToolSpec, ToolSpecError, Unanswered,
};

/// How many tool threads wait ready for the next call. One: the next call's thread
/// starts while the guest reads an answer. Measured (docs/dev/perf-log/): two spares,
/// or a spare that spins awake for its call, were no faster on 2 cores, and two
/// spinning threads beside the guest's tripled the round trip.
const SPARES: usize = 1;
/// How long the guest's thread spins for a quick answer before it sleeps: a sleep and
/// wake-up costs tens of microseconds on a small VM, most tool calls less.
const SPIN: Duration = Duration::from_micros(150);

/// Starts a tool thread with `spawn` that, entered by `host`, waits for exactly one job.
fn start_worker(spawn: &dyn Spawn, host: Arc<dyn ToolHost>) -> std::io::Result<mpsc::SyncSender<Job>> {
    let (tx, rx) = mpsc::sync_channel::<Job>(1);
    spawn.spawn(
        c"wasi-python-tool",
        Box::new(move || {
            host.enter_thread(Box::new(move || {
                if let Ok(job) = rx.recv() {
                    job();
                }
            }))
        }),
    )?;
    Ok(tx)
}

/// A door that speaks the tool protocol for a fixed set of tools.
#[derive(Clone)]
pub struct ToolDoor {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for ToolDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolDoor").field("tools", &self.inner.tools).finish()
    }
}

pub(crate) struct Inner {
    pub(crate) tools: Vec<Arc<ToolSpec>>,
    by_name: HashMap<String, usize>,
    list: ListAnswer,
    offered: String,
    pub(crate) host: Arc<dyn ToolHost>,
    /// What starts the tool threads: set once ([`ToolDoor::spawn_with`]), else std threads.
    spawn: OnceLock<Arc<dyn Spawn>>,
    pub(crate) state: Mutex<State>,
    /// The calls the guest started and has not yet taken the answers of.
    pub(crate) flight: Flight,
    /// Fresh threads, started ahead of the next calls so their start is off the calls' path.
    spare: Mutex<Vec<mpsc::SyncSender<Job>>>,
}

pub(crate) struct State {
    pub(crate) budget: Budget,
    pub(crate) recorder: Recorder,
    /// What the last answer carried, for [`Door::undelivered`].
    pub(crate) last: Last,
}

/// What the last answer handed the guest.
#[derive(Default)]
pub(crate) enum Last {
    /// The outcome of the frame recorded last.
    #[default]
    Frame,
    /// The acceptance of the call started under this id.
    Started(u64),
    /// The answers of these frames (a wait's).
    Answers(Vec<u64>),
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
        // `max_in_flight` tells the guest it may start calls, and how many at once.
        let list = ListAnswer::from_descriptors(tools.iter().map(|t| t.descriptor.as_str()))
            .map_err(ToolSpecError::Descriptors)?
            .with("max_in_flight", &Value::Int(MAX_IN_FLIGHT as i64));
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
                spawn: OnceLock::new(),
                state: Mutex::new(State {
                    budget: Budget::new(limits),
                    recorder: Recorder::default(),
                    last: Last::Frame,
                }),
                flight: Flight::default(),
                spare: Mutex::new(Vec::new()),
            }),
        })
    }

    /// From now on, the door's tool threads are started by `spawn` (a new thread per
    /// call, as [`Spawn`] promises), unless one was given already: then `false`, and
    /// nothing changes. The runtime gives each door it runs its own pool of call threads
    /// when the run starts; a door given none starts std threads ([`StdThreads`]).
    pub fn spawn_with(&self, spawn: Arc<dyn Spawn>) -> bool {
        self.inner.spawn.set(spawn).is_ok()
    }

    pub(crate) fn spawner(&self) -> &dyn Spawn {
        self.inner.spawn.get().map_or(&StdThreads, |s| &**s)
    }

    /// Starts spare tool threads up to [`SPARES`], so that the next call finds its
    /// thread started.
    fn refill(&self) {
        if self.inner.tools.is_empty() {
            return;
        }
        while self.inner.spare.lock().len() < SPARES {
            match start_worker(self.spawner(), self.inner.host.clone()) {
                Ok(tx) => self.inner.spare.lock().push(tx),
                Err(_) => return,
            }
        }
    }

    /// Hands a call's job to a fresh thread: a spare if there is one, else a new one.
    /// Once the job has answered, the thread starts the next call's spare.
    pub(crate) fn dispatch(&self, job: Job) -> std::io::Result<()> {
        let door = self.clone();
        let job: Job = Box::new(move || {
            job();
            door.refill();
        });
        let spare = self.inner.spare.lock().pop();
        let tx = match spare {
            Some(tx) => tx,
            None => start_worker(self.spawner(), self.inner.host.clone())?,
        };
        tx.send(job).map_err(|_| std::io::Error::other("the tool thread ended before its call"))
    }

    /// The record of the run (or turn) so far, taken when the guest is out: calls it
    /// started that still run are abandoned first, and answers it never took are marked
    /// undelivered, so each call is listed once with its outcome.
    pub fn record(&self) -> ToolRecord {
        self.end_calls();
        self.inner.state.lock().recorder.snapshot()
    }

    /// Ends a session turn: returns its record and starts the next turn's budget and
    /// record. Abandoned tool threads stay counted across turns; calls started and not
    /// taken end with the turn, as with [`record`](ToolDoor::record).
    pub fn next_turn(&self, limits: BudgetLimits) -> ToolRecord {
        self.end_calls();
        let mut st = self.inner.state.lock();
        st.budget.reset_turn(limits);
        std::mem::take(&mut st.recorder).finish()
    }
}

/// One frame's fate before it is recorded.
pub(crate) struct Answer {
    pub(crate) op: Op,
    pub(crate) tool: Option<String>,
    pub(crate) kind: OutcomeKind,
    pub(crate) message: Option<String>,
    pub(crate) fault: Option<String>,
    pub(crate) abandoned: bool,
    pub(crate) frame: Vec<u8>,
}

impl Answer {
    /// The record's outcome of frame `seq`, and the frame the guest gets.
    pub(crate) fn into_outcome(self, seq: u64, request_bytes: u64) -> (Outcome, Vec<u8>) {
        let outcome = Outcome {
            seq,
            op: self.op,
            tool: self.tool,
            outcome: self.kind,
            message: self.message,
            request_bytes,
            response_bytes: self.frame.len() as u64,
            fault: self.fault,
            abandoned: self.abandoned,
            delivered: true,
        };
        (outcome, self.frame)
    }

    fn refuse(op: Op, tool: Option<&str>, id: Option<u64>, kind: ErrorKind, message: &str) -> Self {
        let message = cut_chars(message, MAX_MESSAGE_CHARS).to_owned();
        Answer {
            op,
            tool: tool.map(str::to_owned),
            kind: OutcomeKind::Error(kind),
            frame: encode_error(id, kind, &message),
            message: Some(message),
            fault: None,
            abandoned: false,
        }
    }
}

impl Door for ToolDoor {
    fn undelivered(&self, fault: &str) {
        let last = std::mem::take(&mut self.inner.state.lock().last);
        match last {
            Last::Frame => self.inner.state.lock().recorder.undelivered(fault),
            // Recorded once settled, marked then (`end_calls`): the guest never waits for it.
            Last::Started(id) => {
                if let Some(entry) = self.inner.flight.calls.lock().by_id.get_mut(&id) {
                    entry.lost = Some(fault.to_owned());
                }
            }
            Last::Answers(seqs) => {
                let mut st = self.inner.state.lock();
                for seq in seqs {
                    st.recorder.undelivered_at(seq, fault);
                }
            }
        }
    }

    fn call(&self, request: &[u8], ctx: &CallContext) -> DoorAnswer {
        let inner = &self.inner;
        let request_bytes = request.len() as u64;
        // A wait asks for answers already paid for: a frame short enough to be one is read
        // before it is charged, and a wait is not charged (nor recorded).
        let early = (request.len() <= MAX_WAIT_BYTES).then(|| decode_request(request));
        if let Some(Ok(Request::Wait { id, ids, timeout_ms })) = early {
            return DoorAnswer::Reply(self.wait(id, &ids, timeout_ms, ctx));
        }
        let seq = {
            let mut st = inner.state.lock();
            if let Err(e) = st.budget.charge_request(request_bytes) {
                // Refused as unread: no id is known.
                let a = Answer::refuse(Op::Unknown, None, None, e.wire_kind(), &e.to_string());
                return finish(&mut st, a, request_bytes);
            }
            st.recorder.next_seq()
        };
        let answer = match early.unwrap_or_else(|| decode_request(request)) {
            Err(e) => {
                let tool = e.tool.as_deref().map(|t| cut_chars(t, MAX_ECHO_CHARS));
                match tool {
                    Some(t) if !inner.by_name.contains_key(t) => unknown_tool(inner, t, e.id),
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
            Ok(Request::Start { id, tool, args }) => match self.start(seq, id, tool, args, request_bytes, ctx) {
                Ok(started) => {
                    inner.state.lock().last = Last::Started(id);
                    return DoorAnswer::Reply(started);
                }
                Err(refused) => refused,
            },
            Ok(Request::Wait { id, .. }) => Answer::refuse(
                Op::Unknown,
                None,
                id,
                ErrorKind::Protocol,
                &format!("a wait frame has at most {MAX_WAIT_BYTES} bytes; this one has {request_bytes}"),
            ),
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
    let (outcome, frame) = a.into_outcome(0, request_bytes);
    st.recorder.record(outcome);
    st.last = Last::Frame;
    DoorAnswer::Reply(frame)
}

/// What a tool's thread answers.
pub(crate) struct Done {
    pub(crate) output: ToolOutput,
    pub(crate) frame: Vec<u8>,
}

/// Abandoned tool calls count in the run's budget, which caps them (`max_abandoned`)
/// and keeps them counted across a session's turns.
struct InBudget(Arc<Inner>);

impl Abandonment for InBudget {
    fn abandon(&self) {
        self.0.state.lock().budget.abandon();
    }
    fn finished(&self) {
        self.0.state.lock().budget.abandoned_finished();
    }
}

/// A call's tool, once its checks passed: which, and when the call must end.
pub(crate) struct Checked {
    pub(crate) index: usize,
    pub(crate) now: Instant,
    pub(crate) until: Option<Instant>,
}

/// Answers that name a tool.
pub(crate) fn refuse(name: &str, id: Option<u64>, kind: ErrorKind, message: &str) -> Answer {
    Answer::refuse(Op::Call, Some(name), id, kind, message)
}

pub(crate) fn internal(name: &str, id: Option<u64>, fault: String) -> Answer {
    Answer { fault: Some(fault), ..refuse(name, id, ErrorKind::ToolError, &format!("{name} failed (internal error)")) }
}

pub(crate) fn timed_out(name: &str, id: Option<u64>, waited: Duration) -> Answer {
    refuse(name, id, ErrorKind::Timeout, &format!("{name} timed out after {} s", round_secs(waited)))
}

pub(crate) fn cancelled(name: &str, id: Option<u64>) -> Answer {
    refuse(name, id, ErrorKind::Cancelled, &format!("{name} was cancelled"))
}

impl ToolDoor {
    /// A call's checks, in order: its tool, fixed keywords, its schema, the abandoned
    /// threads' cap, its time. The same for a `call` and a `start`.
    pub(crate) fn check_call(&self, id: Option<u64>, name: &str, args: &Map, ctx: &CallContext) -> Result<Checked, Answer> {
        let inner = &self.inner;
        let Some(&index) = inner.by_name.get(name) else {
            return Err(unknown_tool(inner, name, id));
        };
        let spec = &inner.tools[index];
        let invalid = |msg: &str| {
            refuse(&spec.name, id, ErrorKind::InvalidArguments, &format!("{}: the arguments: {msg}", spec.name))
        };
        if let Some(k) = args.keys().find(|k| spec.fixed.iter().any(|f| f == k)) {
            return Err(invalid(&format!("argument '{}' is fixed by the host", cut_chars(k, MAX_ECHO_CHARS))));
        }
        // The guest chose the arguments: the check counts its steps and ends at the run's
        // deadline or cancel, so no schema makes it outlast the run (crates/schema `Bounds`).
        let stop = || ctx.check().is_some();
        let bounds = Bounds { max_steps: DEFAULT_MAX_STEPS, stop: Some(&stop) };
        if let Err(e) = spec.schema.validate_within(args, &[], &bounds) {
            return Err(match e.kind() {
                ArgumentErrorKind::Stopped if ctx.cancel.is_cancelled() => cancelled(&spec.name, id),
                ArgumentErrorKind::Stopped => refuse(
                    &spec.name,
                    id,
                    ErrorKind::Timeout,
                    &format!("{} was not started: the run's deadline came", spec.name),
                ),
                _ => invalid(e.message()),
            });
        }
        // Started calls past their end count as abandoned before the cap is asked.
        self.sweep(&mut self.inner.flight.calls.lock());
        if let Err(e) = inner.state.lock().budget.try_start_call() {
            return Err(refuse(&spec.name, id, ErrorKind::Timeout, &format!("{} was not started: {e}", spec.name)));
        }
        let now = Instant::now();
        let until = ctx.end_of_call(now, spec.timeout);
        if until.is_some_and(|u| u <= now) {
            return Err(timed_out(&spec.name, id, Duration::ZERO));
        }
        Ok(Checked { index, now, until })
    }

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
        let Checked { index, now, until } = match self.check_call(id, &name, &args, ctx) {
            Ok(c) => c,
            Err(refused) => return refused,
        };
        let spec = &inner.tools[index];
        let call_cancel = CancelToken::new();
        let work = {
            let host = inner.host.clone();
            let call_cancel = call_cancel.clone();
            let inv = Invocation { seq, tool: index, name, args, request_bytes };
            move || {
                let output = host.invoke(inv, &call_cancel);
                // The result is encoded here, on the tool's thread.
                let frame = match &output {
                    ToolOutput::Ok(v) => encode_ok(id, v),
                    _ => Vec::new(),
                };
                Done { output, frame }
            }
        };
        // Most answers come within the spin; otherwise the wait watches the run's cancel
        // and the call's time limit. An abandoned call runs on, unseen, counted in the
        // budget until it ends.
        let cancelled_run = || ctx.cancel.is_cancelled();
        let bound = Bound { until, stop: &cancelled_run, spin: SPIN };
        match bound.call(work, |job| self.dispatch(job), InBudget(inner.clone())) {
            Ok(Done { output, frame }) => self.conclude(&spec.name, id, output, frame),
            Err(Unanswered::TimedOut) => {
                call_cancel.cancel();
                Answer { abandoned: true, ..timed_out(&spec.name, id, now.elapsed()) }
            }
            Err(Unanswered::Cancelled) => {
                call_cancel.cancel();
                Answer { abandoned: true, ..cancelled(&spec.name, id) }
            }
            Err(Unanswered::NotStarted(_)) => {
                internal(&spec.name, id, "the host could not start a thread for the call".into())
            }
            Err(_) => internal(&spec.name, id, "the tool's thread ended without an answer (a panic)".into()),
        }
    }

    /// What a tool's output answers the guest: its value (within the answer cap), or the
    /// failure it names.
    pub(crate) fn conclude(&self, name: &str, id: Option<u64>, output: ToolOutput, frame: Vec<u8>) -> Answer {
        match output {
            ToolOutput::Ok(_) => {
                if let Err(e) = self.inner.state.lock().budget.check_answer(frame.len() as u64) {
                    return Answer {
                        fault: Some(format!("the result encodes to {} bytes", frame.len())),
                        ..refuse(name, id, ErrorKind::TooLarge, &format!("{name}: {e}"))
                    };
                }
                Answer {
                    op: Op::Call,
                    tool: Some(name.to_owned()),
                    kind: OutcomeKind::Ok,
                    message: None,
                    fault: None,
                    abandoned: false,
                    frame,
                }
            }
            ToolOutput::Denied { message, fault } => Answer { fault, ..refuse(name, id, ErrorKind::Denied, &message) },
            ToolOutput::Error { message } => refuse(name, id, ErrorKind::ToolError, &message),
            ToolOutput::Internal { fault } => internal(name, id, fault),
            ToolOutput::Cancelled => cancelled(name, id),
        }
    }
}

pub(crate) fn round_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 10.0 { format!("{s:.0}") } else { format!("{s:.1}") }
}
