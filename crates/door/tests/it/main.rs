//! The tool door against a fake `ToolHost`: each frame's fate, the bounds of a call (its
//! timeout, the run's deadline and cancel), abandoned calls, and the record.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use serde_json::{Value as Json, json};
use wasi_python_budget::Limits;
use wasi_python_door::{
    CallContext, CancelToken, DEADLINE_MARGIN, Door, DoorAnswer, Invocation, Job, Spawn, StdThreads, ToolDoor, ToolHost,
    ToolOutput, ToolSpec, ToolSpecError,
};
use wasi_python_protocol::{Map, Value};
use wasi_python_record::{Op, OutcomeKind, ToolRecord};

mod parallel;

/// A latch the `wait` tool blocks on until the test releases it.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    wake: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock();
        while !*open {
            self.wake.wait(&mut open);
        }
    }
    fn release(&self) {
        *self.open.lock() = true;
        self.wake.notify_all();
    }
}

/// The fake embedder. Its tools, by name:
/// - `echo(s)`: answers its arguments (`user` is fixed by the host);
/// - `seq`: answers the call's `seq`;
/// - `fail`, `deny`, `boom`: a tool error, a gate's refusal, an internal fault;
/// - `panic`: panics;
/// - `big`: answers a string over the answer cap;
/// - `wait`, `wait_50ms`: block until the gate opens (the second has a 50 ms timeout);
/// - `polite`, `polite_50ms`: wait for their call's cancel, then answer "cancelled".
#[derive(Default)]
struct Fake {
    gate: Gate,
    /// Calls inside `invoke` now.
    running: AtomicUsize,
    /// Calls that reached `invoke`.
    started: AtomicUsize,
    /// `polite` calls that saw their cancel.
    saw_cancel: AtomicUsize,
    /// Tool threads entered (spares included).
    threads: AtomicUsize,
}

/// Counts a call as running while it lives, a panic included.
struct Running<'a>(&'a AtomicUsize);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ToolHost for Fake {
    fn invoke(&self, call: Invocation, cancel: &CancelToken) -> ToolOutput {
        self.started.fetch_add(1, Ordering::SeqCst);
        self.running.fetch_add(1, Ordering::SeqCst);
        let _running = Running(&self.running);
        match call.name.as_str() {
            "echo" => ToolOutput::Ok(Value::Object(call.args)),
            "seq" => ToolOutput::Ok(Value::Int(call.seq as i64)),
            "fail" => ToolOutput::Error { message: "no region 'X'".into() },
            "deny" => ToolOutput::Denied { message: "not today".into(), fault: None },
            "boom" => ToolOutput::Internal { fault: "KeyError: 'x'".into() },
            "panic" => panic!("the fake tool panics (expected in this test)"),
            "big" => ToolOutput::Ok(Value::Str("z".repeat(2 * ANSWER_CAP))),
            "wait" | "wait_50ms" => {
                self.gate.wait();
                ToolOutput::Ok(Value::Null)
            }
            "polite" | "polite_50ms" => {
                if cancel.wait_timeout(Duration::from_secs(30)) {
                    self.saw_cancel.fetch_add(1, Ordering::SeqCst);
                }
                ToolOutput::Cancelled
            }
            other => ToolOutput::Internal { fault: format!("the fake has no tool {other}") },
        }
    }

    fn enter_thread(&self, body: Box<dyn FnOnce() + Send + '_>) {
        self.threads.fetch_add(1, Ordering::SeqCst);
        body()
    }
}

const ANSWER_CAP: usize = 1000;

fn spec(name: &str, fixed: &[&str], timeout: Option<Duration>) -> ToolSpec {
    let schema = if name == "echo" {
        json!({
            "type": "object",
            "properties": {"s": {"type": "string"}},
            "required": ["s"],
            "additionalProperties": false,
        })
    } else {
        json!({"type": "object"})
    };
    let descriptor = json!({"name": name, "description": "", "inputSchema": schema});
    let fixed = fixed.iter().map(|s| (*s).to_owned()).collect();
    ToolSpec::new(name, descriptor.to_string(), &schema, false, fixed, timeout).expect("a valid tool")
}

/// The fake's tools behind a door with these limits (the answer cap lowered).
fn door_with(limits: Limits) -> (ToolDoor, Arc<Fake>) {
    let fake = Arc::new(Fake::default());
    let ms50 = Some(Duration::from_millis(50));
    let tools = vec![
        spec("echo", &["user"], None),
        spec("seq", &[], None),
        spec("fail", &[], None),
        spec("deny", &[], None),
        spec("boom", &[], None),
        spec("panic", &[], None),
        spec("big", &[], None),
        spec("wait", &[], None),
        spec("wait_50ms", &[], ms50),
        spec("polite", &[], None),
        spec("polite_50ms", &[], ms50),
    ];
    let limits = Limits { max_answer_len: ANSWER_CAP as u64, ..limits };
    let door = ToolDoor::new(tools, fake.clone(), limits).expect("a valid door");
    (door, fake)
}

fn door() -> (ToolDoor, Arc<Fake>) {
    door_with(Limits::default())
}

/// A run with neither deadline nor cancel.
fn free() -> CallContext {
    CallContext { deadline: None, cancel: CancelToken::new() }
}

fn call(tool: &str, args: &str) -> Vec<u8> {
    format!(r#"{{"v":1,"id":7,"op":"call","tool":"{tool}","args":{args}}}"#).into_bytes()
}

fn ask(door: &ToolDoor, frame: &[u8], ctx: &CallContext) -> Json {
    match door.call(frame, ctx) {
        DoorAnswer::Reply(bytes) => serde_json::from_slice(&bytes).expect("the answer is JSON"),
        other => panic!("a tool door always replies, got {other:?}"),
    }
}

/// "ok", or the answer's error kind.
fn kind(answer: &Json) -> &str {
    if answer["ok"] == json!(true) { "ok" } else { answer["error"]["kind"].as_str().expect("an error kind") }
}

/// Waits (generously) for `cond`.
fn eventually(cond: impl Fn() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

fn check_invariant(r: &ToolRecord) {
    assert_eq!(r.frames, r.outcomes.len() as u64 + r.unlisted, "frames == outcomes.len() + unlisted");
    let listed = r.outcomes.iter().filter(|o| o.abandoned).count();
    if r.unlisted == 0 {
        assert_eq!(listed, r.abandoned.len(), "every abandoned outcome is kept");
    } else {
        assert!(listed <= r.abandoned.len(), "every abandoned outcome is kept");
    }
}

/// One frame per row, on one door, in order: what the guest reads, and what the record keeps.
#[test]
fn each_frame_meets_its_fate() {
    let (door, fake) = door();
    let big_frame = format!(r#"{{"v":1,"id":1,"op":"list","pad":"{}"}}"#, "x".repeat(1 << 20)).into_bytes();
    #[rustfmt::skip]
    let cases: Vec<(Vec<u8>, &str, Op, bool)> = vec![
        // frame                                               guest reads          op           abandoned
        (br#"{"v":1,"id":1,"op":"list"}"#.to_vec(),            "ok",                Op::List,    false),
        (call("echo", r#"{"s":"hi"}"#),                        "ok",                Op::Call,    false),
        (call("nope", "{}"),                                   "unknown_tool",      Op::Call,    false),
        (call("nope", "[1]"),                                  "unknown_tool",      Op::Call,    false),
        (call("echo", r#"{"s":"hi","user":1}"#),               "invalid_arguments", Op::Call,    false),
        (call("echo", r#"{"s":3}"#),                           "invalid_arguments", Op::Call,    false),
        (call("echo", "{}"),                                   "invalid_arguments", Op::Call,    false),
        (call("echo", "[]"),                                   "invalid_arguments", Op::Call,    false),
        (b"not json".to_vec(),                                 "protocol",          Op::Unknown, false),
        (br#"{"v":2,"id":1,"op":"list"}"#.to_vec(),            "protocol",          Op::Unknown, false),
        (big_frame,                                            "too_large",         Op::Unknown, false),
        (call("fail", "{}"),                                   "tool_error",        Op::Call,    false),
        (call("deny", "{}"),                                   "denied",            Op::Call,    false),
        (call("boom", "{}"),                                   "tool_error",        Op::Call,    false),
        (call("panic", "{}"),                                  "tool_error",        Op::Call,    false),
        (call("big", "{}"),                                    "too_large",         Op::Call,    false),
        (call("wait_50ms", "{}"),                              "timeout",           Op::Call,    true),
        (call("seq", "{}"),                                    "ok",                Op::Call,    false),
    ];
    let ctx = free();
    for (i, (frame, expected, op, abandoned)) in cases.iter().enumerate() {
        let row = format!("row {i}: {}", String::from_utf8_lossy(&frame[..frame.len().min(80)]));
        let DoorAnswer::Reply(bytes) = door.call(frame, &ctx) else { panic!("{row}: a tool door always replies") };
        let answer: Json = serde_json::from_slice(&bytes).expect("the answer is JSON");
        assert_eq!(kind(&answer), *expected, "{row}: {answer}");
        let r = door.record();
        let last = r.outcomes.last().expect("every frame is recorded");
        assert_eq!(last.seq, i as u64 + 1, "{row}");
        assert_eq!(last.outcome, OutcomeKind::from_wire(expected).expect("a known kind"), "{row}");
        assert_eq!(last.op, *op, "{row}");
        assert_eq!(last.abandoned, *abandoned, "{row}");
        assert_eq!(last.response_bytes, bytes.len() as u64, "{row}");
        check_invariant(&r);
    }
    let r = door.record();
    let at = |tool: &str| r.outcomes.iter().find(|o| o.tool.as_deref() == Some(tool)).expect("recorded");
    // What the guest reads of a failure, and what stays in the record.
    assert_eq!(at("boom").fault.as_deref(), Some("KeyError: 'x'"));
    assert!(at("panic").fault.as_deref().is_some_and(|f| f.contains("panic")), "{:?}", at("panic"));
    assert!(at("big").fault.is_some());
    assert_eq!(r.abandoned.len(), 1);
    // The call's `seq` is its frame's number in the record.
    let seq_answer = ask(&door, &call("seq", "{}"), &ctx);
    assert_eq!(seq_answer["value"], json!(door.record().frames));
    // The echo answered the guest's own arguments, with its id.
    let echo = ask(&door, &call("echo", r#"{"s":"hi"}"#), &ctx);
    assert_eq!(echo, json!({"v": 1, "id": 7, "ok": true, "value": {"s": "hi"}}));
    fake.gate.release();
    assert!(eventually(|| fake.running.load(Ordering::SeqCst) == 0));
}

/// Frames and request bytes are budgeted per run; refused frames are still recorded.
#[test]
fn budgets_refuse_frames_past_them() {
    let list = br#"{"v":1,"id":1,"op":"list"}"#;
    #[rustfmt::skip]
    let cases: &[(Limits, &[&str])] = &[
        (Limits { max_frames: Some(2), ..Limits::default() },
            &["ok", "ok", "budget_exceeded", "budget_exceeded"]),
        (Limits { max_request_bytes: Some(2 * list.len() as u64), ..Limits::default() },
            &["ok", "ok", "budget_exceeded", "budget_exceeded"]),
        (Limits { max_request_len: list.len() as u64 - 1, ..Limits::default() },
            &["too_large", "too_large"]),
        (Limits { max_frames: None, max_request_bytes: None, ..Limits::default() },
            &["ok", "ok", "ok", "ok", "ok"]),
    ];
    for (limits, expected) in cases {
        let (door, _fake) = door_with(*limits);
        let got: Vec<String> = expected.iter().map(|_| kind(&ask(&door, list, &free())).to_owned()).collect();
        assert_eq!(&got, expected, "{limits:?}");
        let r = door.record();
        assert_eq!(r.frames, expected.len() as u64);
        check_invariant(&r);
    }
}

/// A call that outlives its timeout is answered `timeout` and abandoned: it runs on, and is
/// counted against the run's cap until it ends; while the cap is full, calls are refused
/// without running.
#[test]
fn an_abandoned_call_is_counted_until_it_ends() {
    let (door, fake) = door_with(Limits { max_abandoned: 1, ..Limits::default() });
    let ctx = free();
    let a = ask(&door, &call("wait_50ms", "{}"), &ctx);
    assert_eq!(kind(&a), "timeout");
    assert_eq!(fake.running.load(Ordering::SeqCst), 1, "the abandoned call runs on");
    // The cap is full: a call is answered `timeout` at once, its tool never started.
    let started = fake.started.load(Ordering::SeqCst);
    let b = ask(&door, &call("echo", r#"{"s":"x"}"#), &ctx);
    assert_eq!(kind(&b), "timeout");
    assert_eq!(fake.started.load(Ordering::SeqCst), started);
    let r = door.record();
    assert_eq!((r.outcomes[0].abandoned, r.outcomes[1].abandoned), (true, false));
    assert_eq!(r.abandoned.len(), 1);
    // Once it ends, it no longer counts.
    fake.gate.release();
    assert!(eventually(|| kind(&ask(&door, &call("echo", r#"{"s":"x"}"#), &ctx)) == "ok"));
    check_invariant(&door.record());
}

/// Abandoned calls stay counted across a session's turns; frames start again.
#[test]
fn abandoned_calls_outlive_the_turn() {
    let limits = Limits { max_abandoned: 1, max_frames: Some(1), ..Limits::default() };
    let (door, fake) = door_with(limits);
    assert_eq!(kind(&ask(&door, &call("wait_50ms", "{}"), &free())), "timeout");
    let first = door.next_turn(limits);
    assert_eq!((first.frames, first.abandoned.len()), (1, 1));
    // A new turn: its one frame is charged, and refused by the cap the last turn filled.
    assert_eq!(kind(&ask(&door, &call("echo", r#"{"s":"x"}"#), &free())), "timeout");
    assert_eq!(door.record().frames, 1);
    fake.gate.release();
    assert!(eventually(|| fake.running.load(Ordering::SeqCst) == 0));
}

/// The run's cancel ends a call at once; the tool's own cancel is set so it may stop.
#[test]
fn a_cancel_during_a_call_answers_cancelled() {
    for tool in ["wait", "polite"] {
        let (door, fake) = door();
        let ctx = free();
        let canceller = {
            let cancel = ctx.cancel.clone();
            let fake = fake.clone();
            std::thread::spawn(move || {
                // Cancel once the call runs.
                assert!(eventually(|| fake.running.load(Ordering::SeqCst) == 1));
                cancel.cancel();
            })
        };
        let a = ask(&door, &call(tool, "{}"), &ctx);
        canceller.join().unwrap();
        assert_eq!(kind(&a), "cancelled", "{tool}");
        let r = door.record();
        assert!(r.outcomes[0].abandoned, "{tool}");
        if tool == "polite" {
            assert!(eventually(|| fake.saw_cancel.load(Ordering::SeqCst) == 1), "the call's cancel is set");
        }
        fake.gate.release();
        assert!(eventually(|| fake.running.load(Ordering::SeqCst) == 0), "{tool}");
    }
}

/// A call ends `DEADLINE_MARGIN` before the run's deadline; within the margin, or past the
/// deadline, it is not started.
#[test]
fn a_call_ends_before_the_runs_deadline() {
    let (door, fake) = door();
    // Within the margin, or past the deadline: refused without starting the tool.
    for ahead in [DEADLINE_MARGIN / 2, Duration::ZERO] {
        let ctx = CallContext { deadline: Some(Instant::now() + ahead), cancel: CancelToken::new() };
        let a = ask(&door, &call("echo", r#"{"s":"x"}"#), &ctx);
        assert_eq!(kind(&a), "timeout", "{ahead:?}");
        assert_eq!(fake.started.load(Ordering::SeqCst), 0, "{ahead:?}");
    }
    // Further out: the call runs, and is given up at the margin, not before.
    let start = Instant::now();
    let deadline = start + Duration::from_millis(300);
    let ctx = CallContext { deadline: Some(deadline), cancel: CancelToken::new() };
    let a = ask(&door, &call("wait", "{}"), &ctx);
    assert_eq!(kind(&a), "timeout");
    assert!(Instant::now() >= deadline - DEADLINE_MARGIN);
    assert!(door.record().outcomes.last().is_some_and(|o| o.abandoned));
    fake.gate.release();
    assert!(eventually(|| fake.running.load(Ordering::SeqCst) == 0));
}

/// Every frame is counted, the first 1,000 listed: frames == outcomes.len() + unlisted,
/// whatever each frame's fate.
#[test]
fn the_record_counts_every_frame() {
    let (door, _fake) = door_with(Limits { max_frames: None, max_request_bytes: None, ..Limits::default() });
    let frames = [
        br#"{"v":1,"id":1,"op":"list"}"#.to_vec(),
        call("echo", r#"{"s":"hi"}"#),
        call("nope", "{}"),
        b"{".to_vec(),
        call("fail", "{}"),
    ];
    for i in 0..1_100 {
        ask(&door, &frames[i % frames.len()], &free());
    }
    let r = door.record();
    assert_eq!((r.frames, r.outcomes.len(), r.unlisted), (1_100, 1_000, 100));
    check_invariant(&r);
}

/// The list frame answers the descriptors, and starts a tool thread ahead of the first
/// call, through the host's `enter_thread`.
#[test]
fn the_list_answers_descriptors_and_starts_a_spare() {
    let (door, fake) = door();
    let a = ask(&door, br#"{"v":1,"id":3,"op":"list"}"#, &free());
    let names: Vec<&str> = a["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names[..3], ["echo", "seq", "fail"]);
    assert_eq!(a["id"], json!(3));
    assert!(eventually(|| fake.threads.load(Ordering::SeqCst) == 1), "one spare thread");
    // Each call uses a thread once, and leaves a spare for the next.
    for _ in 0..3 {
        assert_eq!(kind(&ask(&door, &call("echo", r#"{"s":"x"}"#), &free())), "ok");
    }
    // (Two spares may be started at once, when a call's refill overlaps the next's.)
    assert!(eventually(|| fake.threads.load(Ordering::SeqCst) >= 4));
}

/// Starts std threads and counts them, with the names they were asked for.
#[derive(Default)]
struct Counting {
    names: Mutex<Vec<String>>,
}

impl Spawn for Counting {
    fn spawn(&self, name: &'static std::ffi::CStr, job: Job) -> std::io::Result<()> {
        self.names.lock().push(name.to_string_lossy().into_owned());
        StdThreads.spawn(name, job)
    }
}

/// A door's tool threads are started by the `Spawn` it was given (the runtime gives
/// each door it runs its own pool), once given; a second is refused.
#[test]
fn a_door_starts_its_threads_with_the_spawner_it_was_given() {
    let (door, fake) = door();
    let pool = Arc::new(Counting::default());
    assert!(door.spawn_with(pool.clone()));
    assert!(!door.spawn_with(Arc::new(Counting::default())), "one spawner per door");
    for _ in 0..3 {
        assert_eq!(kind(&ask(&door, &call("echo", r#"{"s":"x"}"#), &free())), "ok");
    }
    assert!(eventually(|| fake.threads.load(Ordering::SeqCst) >= 4));
    // (A spare's thread is counted by the pool before it enters the host.)
    let started = || pool.names.lock().len();
    assert!(eventually(|| started() == fake.threads.load(Ordering::SeqCst)), "every tool thread came from the pool");
    let names = pool.names.lock().clone();
    assert!(names.iter().all(|n| n == "wasi-python-tool"), "{names:?}");
}

/// A door refuses a set of tools it cannot offer.
#[test]
fn a_door_refuses_bad_tool_sets() {
    let host = Arc::new(Fake::default());
    let dup = ToolDoor::new(vec![spec("echo", &[], None), spec("echo", &[], None)], host.clone(), Limits::default());
    assert!(matches!(dup, Err(ToolSpecError::Duplicate(n)) if n == "echo"));
    let bad = ToolSpec::new("not a name", "{}", &json!({"type": "object"}), false, Vec::new(), None);
    assert!(matches!(bad, Err(ToolSpecError::BadName(_))));
    let schema = ToolSpec::new("t", "{}", &json!({"type": "object", "if": {}}), false, Vec::new(), None);
    assert!(matches!(schema, Err(ToolSpecError::Schema { .. })));
    // No tools: the list is empty and any call is an unknown tool.
    let empty = ToolDoor::new(Vec::<ToolSpec>::new(), host, Limits::default()).unwrap();
    assert_eq!(ask(&empty, br#"{"v":1,"id":1,"op":"list"}"#, &free())["tools"], json!([]));
    assert_eq!(kind(&ask(&empty, &call("echo", "{}"), &free())), "unknown_tool");
}

/// The raw door is any function of the frame and the call context.
#[test]
fn a_closure_is_a_door() {
    let door = |req: &[u8], ctx: &CallContext| {
        if ctx.check().is_some() { DoorAnswer::Fault } else { DoorAnswer::Reply(req.to_vec()) }
    };
    let ctx = free();
    assert_eq!(Door::call(&door, b"ping", &ctx), DoorAnswer::Reply(b"ping".to_vec()));
    ctx.cancel.cancel();
    assert_eq!(Door::call(&door, b"ping", &ctx), DoorAnswer::Fault);
}

/// The call context's check and a call's end.
#[test]
fn the_call_context_names_why_a_run_stops() {
    use wasi_python_door::Stop;
    let now = Instant::now();
    let s = Duration::from_secs;
    let ctx = |deadline: Option<Instant>| CallContext { deadline, cancel: CancelToken::new() };
    #[rustfmt::skip]
    let cases: &[(Option<Instant>, bool, Option<Stop>)] = &[
        (None,            false, None),
        (Some(now + s(60)), false, None),
        (Some(now),       false, Some(Stop::Deadline)),
        (Some(now + s(60)), true,  Some(Stop::Cancelled)),
        (Some(now),       true,  Some(Stop::Cancelled)),
    ];
    for &(deadline, cancelled, expected) in cases {
        let c = ctx(deadline);
        if cancelled {
            c.cancel.cancel();
        }
        assert_eq!(c.check(), expected, "{deadline:?} {cancelled}");
    }
    // A call ends at its timeout or the margin before the deadline, whichever is first.
    #[rustfmt::skip]
    let ends: &[(Option<Instant>, Option<Duration>, Option<Instant>)] = &[
        (None,              None,        None),
        (None,              Some(s(5)),  Some(now + s(5))),
        (Some(now + s(60)), None,        Some(now + s(60) - DEADLINE_MARGIN)),
        (Some(now + s(60)), Some(s(5)),  Some(now + s(5))),
        (Some(now + s(2)),  Some(s(5)),  Some(now + s(2) - DEADLINE_MARGIN)),
    ];
    for &(deadline, timeout, expected) in ends {
        assert_eq!(ctx(deadline).end_of_call(now, timeout), expected, "{deadline:?} {timeout:?}");
    }
}

/// An `Invocation` carries only what the guest sent.
#[test]
fn a_call_gets_only_the_guests_arguments() {
    struct Keys(Mutex<Vec<Vec<String>>>);
    impl ToolHost for Keys {
        fn invoke(&self, call: Invocation, _cancel: &CancelToken) -> ToolOutput {
            let Map(pairs) = &call.args;
            self.0.lock().push(pairs.iter().map(|(k, _)| k.clone()).collect());
            ToolOutput::Ok(Value::Null)
        }
    }
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer", "default": 3}, "b": {"type": "integer"}}});
    let descriptor = json!({"name": "t", "inputSchema": schema}).to_string();
    let spec = ToolSpec::new("t", descriptor, &schema, false, vec!["key".into()], None).unwrap();
    let host = Arc::new(Keys(Mutex::new(Vec::new())));
    let door = ToolDoor::new(vec![spec], host.clone(), Limits::default()).unwrap();
    for args in ["{}", r#"{"b":1}"#, r#"{"a":1,"b":2}"#] {
        assert_eq!(kind(&ask(&door, &call("t", args), &free())), "ok", "{args}");
    }
    assert_eq!(*host.0.lock(), [vec![], vec!["b".to_owned()], vec!["a".to_owned(), "b".to_owned()]]);
}

#[test]
fn a_timeout_past_the_clocks_range_is_no_timeout_not_a_panic() {
    let now = Instant::now();
    let ctx = wasi_python_door::CallContext { deadline: None, cancel: Default::default() };
    assert_eq!(ctx.end_of_call(now, Some(Duration::MAX)), None);
    let deadline = now + Duration::from_secs(1);
    let ctx = wasi_python_door::CallContext { deadline: Some(deadline), ..ctx };
    assert_eq!(ctx.end_of_call(now, Some(Duration::MAX)), Some(deadline - wasi_python_door::DEADLINE_MARGIN));
}
