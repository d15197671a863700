//! Calls in parallel: `start` frames answered at once, their tools running together, and
//! `wait` frames handing their answers over; each call counted, capped and recorded as a
//! `call` is.

use super::*;
use wasi_python_door::{MAX_IN_FLIGHT, MAX_WAIT_BYTES};

fn start(id: u64, tool: &str, args: &str) -> Vec<u8> {
    format!(r#"{{"v":1,"id":{id},"op":"start","tool":"{tool}","args":{args}}}"#).into_bytes()
}

fn wait_frame(ids: &[u64], timeout_ms: Option<u64>) -> Vec<u8> {
    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
    let timeout = timeout_ms.map_or(String::new(), |ms| format!(r#","timeout_ms":{ms}"#));
    format!(r#"{{"v":1,"id":1000,"op":"wait","ids":[{}]{timeout}}}"#, ids.join(",")).into_bytes()
}

/// The answers a wait hands over.
fn wait(door: &ToolDoor, ids: &[u64], timeout_ms: Option<u64>, ctx: &CallContext) -> Vec<Json> {
    let answer = ask(door, &wait_frame(ids, timeout_ms), ctx);
    assert_eq!((answer["ok"].clone(), answer["id"].clone()), (json!(true), json!(1000)), "{answer}");
    answer["answers"].as_array().expect("a wait answers a list").clone()
}

/// Waits until every call in `ids` is answered: their answers, in the order they came.
fn wait_all(door: &ToolDoor, ids: &[u64], ctx: &CallContext) -> Vec<Json> {
    let mut got = Vec::new();
    let mut left: Vec<u64> = ids.to_vec();
    while !left.is_empty() {
        for a in wait(door, &left, None, ctx) {
            let id = a["id"].as_u64().expect("an answer under its call's id");
            left.retain(|&i| i != id);
            got.push(a);
        }
    }
    got
}

fn started(answer: &Json) -> bool {
    answer["ok"] == json!(true) && answer["started"] == json!(true)
}

/// Three started calls run at once (each on its own thread) while the guest goes on; a
/// wait hands their answers over, each exactly as a call's; the record lists each call
/// once, in start order, and no wait.
#[test]
fn started_calls_run_together_and_a_wait_takes_their_answers() {
    let (door, fake) = door();
    let ctx = free();
    let list = ask(&door, br#"{"v":1,"id":1,"op":"list"}"#, &ctx);
    assert_eq!(list["max_in_flight"], json!(MAX_IN_FLIGHT), "the list tells the guest it may start calls");
    for id in [2, 3, 4] {
        assert!(started(&ask(&door, &start(id, "wait", "{}"), &ctx)));
    }
    assert!(eventually(|| fake.running.load(Ordering::SeqCst) == 3), "all three run at once");
    // Nothing is in yet: a wait of 0 ms hands nothing over; a sync call meanwhile runs.
    assert!(wait(&door, &[2, 3, 4], Some(0), &ctx).is_empty());
    assert_eq!(kind(&ask(&door, &call("echo", r#"{"s":"x"}"#), &ctx)), "ok");
    fake.gate.release();
    let answers = wait_all(&door, &[4, 2, 3], &ctx);
    let mut ids: Vec<u64> = answers.iter().map(|a| a["id"].as_u64().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(ids, [2, 3, 4]);
    for a in &answers {
        assert_eq!(a, &json!({"v": 1, "id": a["id"], "ok": true, "value": null}));
    }
    let r = door.record();
    assert_eq!(r.frames, 5, "list, three starts and a call; waits are not frames");
    check_invariant(&r);
    let listed: Vec<(u64, Op, Option<&str>, OutcomeKind)> =
        r.outcomes.iter().map(|o| (o.seq, o.op, o.tool.as_deref(), o.outcome)).collect();
    assert_eq!(
        listed,
        [
            (1, Op::List, None, OutcomeKind::Ok),
            (2, Op::Call, Some("wait"), OutcomeKind::Ok),
            (3, Op::Call, Some("wait"), OutcomeKind::Ok),
            (4, Op::Call, Some("wait"), OutcomeKind::Ok),
            (5, Op::Call, Some("echo"), OutcomeKind::Ok),
        ]
    );
    assert!(r.outcomes.iter().all(|o| o.delivered && !o.abandoned));
    // A started call's answer is its size in the record.
    assert!(r.outcomes[1].response_bytes == serde_json::to_vec(&answers[0]).unwrap().len() as u64);
}

/// A wait answers in the order the calls started, whatever order it names them in; each
/// call gets its frame's `seq`; a wait hands over at most one answer's worth at a time.
#[test]
fn a_wait_answers_in_start_order_within_one_answers_size() {
    let (door, fake) = door();
    let ctx = free();
    assert!(started(&ask(&door, &start(10, "seq", "{}"), &ctx)));
    assert!(started(&ask(&door, &start(11, "fail", "{}"), &ctx)));
    assert!(started(&ask(&door, &start(12, "echo", r#"{"s":"hi"}"#), &ctx)));
    assert!(eventually(|| fake.started.load(Ordering::SeqCst) == 3 && fake.running.load(Ordering::SeqCst) == 0));
    let answers = wait(&door, &[12, 10, 11], None, &ctx);
    let ids: Vec<u64> = answers.iter().map(|a| a["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [10, 11, 12]);
    assert_eq!(answers[0]["value"], json!(1), "the gate's seq is the start frame's number");
    assert_eq!(kind(&answers[1]), "tool_error");
    assert_eq!(answers[2]["value"], json!({"s": "hi"}));
    // Two answers of 600 bytes each, under a 1,000-byte answer cap: one per wait.
    let s = "y".repeat(600);
    assert!(started(&ask(&door, &start(13, "echo", &format!(r#"{{"s":"{s}"}}"#)), &ctx)));
    assert!(started(&ask(&door, &start(14, "echo", &format!(r#"{{"s":"{s}"}}"#)), &ctx)));
    assert!(eventually(|| fake.started.load(Ordering::SeqCst) == 5 && fake.running.load(Ordering::SeqCst) == 0));
    let first = wait(&door, &[13, 14], None, &ctx);
    assert_eq!(first.len(), 1, "one answer's worth at a time");
    let other = if first[0]["id"] == json!(13) { 14 } else { 13 };
    assert_eq!(wait(&door, &[other], None, &ctx).len(), 1);
    let r = door.record();
    assert_eq!(r.outcomes.iter().map(|o| o.outcome.as_str()).collect::<Vec<_>>(), ["ok", "tool_error", "ok", "ok", "ok"]);
}

/// A start is refused as a call is before its tool runs (each refusal counted and
/// recorded as a call's), and also when its id is not a request id or is in flight.
#[test]
fn a_start_is_refused_as_a_call_is() {
    let (door, fake) = door_with(Limits { max_frames: Some(8), ..Limits::default() });
    let ctx = free();
    #[rustfmt::skip]
    let cases: Vec<(Vec<u8>, &str, Op)> = vec![
        (start(1, "nope", "{}"),                                           "unknown_tool",      Op::Call),
        (start(2, "echo", r#"{"s":3}"#),                                   "invalid_arguments", Op::Call),
        (start(3, "echo", r#"{"s":"x","user":"me"}"#),                     "invalid_arguments", Op::Call),
        (start(4, "echo", "[]"),                                           "invalid_arguments", Op::Call),
        (br#"{"v":1,"op":"start","tool":"echo","args":{}}"#.to_vec(),      "protocol",          Op::Unknown),
        (start(5, "wait", "{}"),                                           "ok",                Op::Call),
        (start(5, "echo", r#"{"s":"x"}"#),                                 "protocol",          Op::Call),
        (start(6, "echo", r#"{"s":"x"}"#),                                 "ok",                Op::Call),
        (start(7, "echo", r#"{"s":"x"}"#),                                 "budget_exceeded",   Op::Unknown),
    ];
    for (i, (frame, expected, _)) in cases.iter().enumerate() {
        let a = ask(&door, frame, &ctx);
        let got = if started(&a) { "ok" } else { kind(&a) };
        assert_eq!(got, *expected, "row {i}: {a}");
    }
    assert!(eventually(|| fake.started.load(Ordering::SeqCst) == 2), "the accepted starts run");
    fake.gate.release();
    assert_eq!(wait_all(&door, &[5, 6], &ctx).len(), 2);
    let r = door.record();
    check_invariant(&r);
    assert_eq!(r.frames, cases.len() as u64, "every start is a frame, refused or not");
    for (o, (_, expected, op)) in r.outcomes.iter().zip(&cases) {
        assert_eq!((o.outcome.as_str(), o.op), (*expected, *op), "seq {}", o.seq);
    }
}

/// At most `MAX_IN_FLIGHT` calls are in flight (running, or answered and not taken): the
/// next start is refused `budget_exceeded` without running; once a wait takes an answer,
/// a start is accepted again.
#[test]
fn calls_in_flight_are_capped() {
    let (door, fake) = door();
    let ctx = free();
    let n = MAX_IN_FLIGHT as u64;
    for id in 1..=n {
        assert!(started(&ask(&door, &start(id, "wait", "{}"), &ctx)), "start {id}");
    }
    assert_eq!(kind(&ask(&door, &start(n + 1, "echo", r#"{"s":"x"}"#), &ctx)), "budget_exceeded");
    assert!(eventually(|| fake.running.load(Ordering::SeqCst) == MAX_IN_FLIGHT));
    assert_eq!(fake.started.load(Ordering::SeqCst), MAX_IN_FLIGHT, "the refused start never ran");
    fake.gate.release();
    // Answered but not taken: still in flight.
    assert!(eventually(|| fake.running.load(Ordering::SeqCst) == 0));
    assert_eq!(kind(&ask(&door, &start(n + 2, "echo", r#"{"s":"x"}"#), &ctx)), "budget_exceeded");
    let taken = wait(&door, &[1], None, &ctx);
    assert_eq!(taken.len(), 1);
    assert!(started(&ask(&door, &start(n + 3, "echo", r#"{"s":"x"}"#), &ctx)));
    let ids: Vec<u64> = (2..=n).chain([n + 3]).collect();
    assert_eq!(wait_all(&door, &ids, &ctx).len(), ids.len());
    check_invariant(&door.record());
}

/// A started call past its timeout is abandoned (by the watching thread, while the guest
/// does nothing), its own cancel set, answered `timeout` to the wait, recorded abandoned
/// and counted against the abandoned cap until its tool ends.
#[test]
fn a_started_call_past_its_timeout_is_abandoned() {
    let (door, fake) = door_with(Limits { max_abandoned: 1, ..Limits::default() });
    let ctx = free();
    assert!(started(&ask(&door, &start(1, "polite_50ms", "{}"), &ctx)));
    assert!(eventually(|| fake.saw_cancel.load(Ordering::SeqCst) == 1), "its cancel is set at its timeout");
    let a = wait(&door, &[1], None, &ctx);
    assert_eq!(kind(&a[0]), "timeout");
    // A sync tool that outlives its timeout: abandoned, and the cap is full meanwhile.
    assert!(started(&ask(&door, &start(2, "wait_50ms", "{}"), &ctx)));
    assert_eq!(kind(&wait(&door, &[2], None, &ctx)[0]), "timeout");
    assert_eq!(fake.running.load(Ordering::SeqCst), 1, "the abandoned call runs on");
    let refused = ask(&door, &start(3, "echo", r#"{"s":"x"}"#), &ctx);
    assert_eq!(kind(&refused), "timeout", "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("not started"));
    let r = door.record();
    assert_eq!(r.abandoned.iter().map(|o| o.seq).collect::<Vec<_>>(), [1, 2]);
    assert!(r.outcomes[..2].iter().all(|o| o.outcome.as_str() == "timeout"));
    assert_eq!(fake.started.load(Ordering::SeqCst), 2, "the refused start never ran");
    fake.gate.release();
    assert!(eventually(|| started(&ask(&door, &start(4, "echo", r#"{"s":"x"}"#), &ctx))));
    check_invariant(&door.record());
}

/// The run ends with calls in flight: running ones are abandoned (their cancel set) and
/// recorded so, answers never taken are recorded undelivered; the threads are counted
/// until they end. A run cancelled during a wait ends the wait at once.
#[test]
fn calls_in_flight_end_with_the_run() {
    let (door, fake) = door();
    let ctx = free();
    assert!(started(&ask(&door, &start(1, "wait", "{}"), &ctx)));
    assert!(started(&ask(&door, &start(2, "polite", "{}"), &ctx)));
    assert!(started(&ask(&door, &start(3, "echo", r#"{"s":"x"}"#), &ctx)));
    assert!(eventually(|| fake.running.load(Ordering::SeqCst) == 2 && fake.started.load(Ordering::SeqCst) == 3));
    // Cancelled while the guest waits: the wait ends, with what is in.
    let canceller = {
        let cancel = ctx.cancel.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            cancel.cancel();
        })
    };
    let got = wait(&door, &[1, 2], None, &ctx);
    canceller.join().unwrap();
    assert!(got.iter().all(|a| kind(a) == "cancelled"), "{got:?}");
    let r = door.record();
    check_invariant(&r);
    let by_seq = |seq: usize| &r.outcomes[seq - 1];
    assert!(by_seq(1).abandoned && by_seq(2).abandoned && !by_seq(3).abandoned);
    assert_eq!(by_seq(1).outcome.as_str(), "cancelled");
    assert_eq!(by_seq(3).outcome.as_str(), "ok");
    assert!(!by_seq(3).delivered, "the guest never took its answer");
    assert!(eventually(|| fake.saw_cancel.load(Ordering::SeqCst) == 1), "the polite call saw its cancel");
    // Nothing is in flight after the end.
    assert_eq!(kind(&wait(&door, &[3], Some(0), &free())[0]), "protocol");
    fake.gate.release();
    assert!(eventually(|| fake.running.load(Ordering::SeqCst) == 0));
    // The abandoned threads ended: calls start again.
    assert!(eventually(|| kind(&ask(&door, &call("echo", r#"{"s":"x"}"#), &free())) == "ok"));
}

/// A run that ends normally with a call running abandons it as `cancelled`.
#[test]
fn a_call_running_at_the_end_is_abandoned() {
    let (door, fake) = door();
    assert!(started(&ask(&door, &start(1, "wait", "{}"), &free())));
    let r = door.record();
    assert_eq!((r.outcomes[0].outcome.as_str(), r.outcomes[0].abandoned), ("cancelled", true));
    assert_eq!(r.abandoned.len(), 1);
    fake.gate.release();
    assert!(eventually(|| fake.running.load(Ordering::SeqCst) == 0));
}

/// Waits are not charged and not recorded; a malformed one is refused `protocol`,
/// charged and recorded as any malformed frame; an id that names no call in flight is
/// answered `protocol` at once, in the wait's answer.
#[test]
fn waits_are_free_and_malformed_ones_are_refused() {
    let (door, _fake) = door_with(Limits { max_frames: Some(1), ..Limits::default() });
    let ctx = free();
    assert!(started(&ask(&door, &start(1, "echo", r#"{"s":"x"}"#), &ctx)));
    for _ in 0..20 {
        let got = wait(&door, &[99], None, &ctx);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0]["id"].clone(), kind(&got[0])), (json!(99), "protocol"));
    }
    assert_eq!(wait_all(&door, &[1], &ctx).len(), 1);
    // A second take of the same answer: no such call any more.
    assert_eq!(kind(&wait(&door, &[1], None, &ctx)[0]), "protocol");
    assert_eq!(door.record().frames, 1, "twenty-odd waits, and only the start is a frame");

    let (door, _fake) = super::door();
    let pad = "x".repeat(MAX_WAIT_BYTES);
    let malformed: Vec<Vec<u8>> = vec![
        br#"{"v":1,"id":5,"op":"wait"}"#.to_vec(),
        br#"{"v":1,"id":5,"op":"wait","ids":[]}"#.to_vec(),
        br#"{"v":1,"id":5,"op":"wait","ids":[1,1]}"#.to_vec(),
        br#"{"v":1,"id":5,"op":"wait","ids":[1],"timeout_ms":-5}"#.to_vec(),
        format!(r#"{{"v":1,"id":5,"op":"wait","ids":[1],"pad":"{pad}"}}"#).into_bytes(),
    ];
    for frame in &malformed {
        let a = ask(&door, frame, &ctx);
        assert_eq!((kind(&a), a["id"].clone()), ("protocol", json!(5)), "{a}");
    }
    let r = door.record();
    assert_eq!(r.frames, malformed.len() as u64);
    assert!(r.outcomes.iter().all(|o| o.op == Op::Unknown && o.outcome.as_str() == "protocol"));
}

/// A wait's answer the guest never got marks each call it carried undelivered; a start's
/// acceptance it never got marks its call so, with why.
#[test]
fn undelivered_answers_are_marked() {
    let (door, fake) = door();
    let ctx = free();
    assert!(started(&ask(&door, &start(1, "echo", r#"{"s":"x"}"#), &ctx)));
    assert!(eventually(|| fake.started.load(Ordering::SeqCst) == 1 && fake.running.load(Ordering::SeqCst) == 0));
    assert_eq!(wait(&door, &[1], None, &ctx).len(), 1);
    door.undelivered("no memory for the answer");
    assert!(started(&ask(&door, &start(2, "echo", r#"{"s":"y"}"#), &ctx)));
    door.undelivered("a bad place for the answer");
    let r = door.record();
    assert!(!r.outcomes[0].delivered && r.outcomes[0].fault.as_deref().is_some_and(|f| f.contains("no memory")));
    assert!(!r.outcomes[1].delivered && r.outcomes[1].fault.as_deref().is_some_and(|f| f.contains("a bad place")));
}
