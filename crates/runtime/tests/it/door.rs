//! The raw door: bytes in, bytes out, and its failure codes.

use std::sync::Arc;
use std::time::Duration;

use wasi_python_runtime::{CallContext, DoorAnswer, RunConfig};

use crate::{py, run, text};

#[test]
fn a_door_answers_with_bytes() {
    let door = |req: &[u8], _: &CallContext| {
        let mut v = b"echo:".to_vec();
        v.extend_from_slice(req);
        DoorAnswer::Reply(v)
    };
    let done = run(RunConfig::new(["-c", "import _host; print(_host.call(b'ping'), _host.available())"]).door(Arc::new(door)));
    assert_eq!(text(&done.stdout), "b'echo:ping' True\n", "{}", text(&done.stderr));
}

#[test]
fn door_failures_reach_the_guest_as_exceptions() {
    let no_host = |_: &[u8], _: &CallContext| DoorAnswer::NoHost;
    let fault = |_: &[u8], _: &CallContext| DoorAnswer::Fault;
    let prog = "import _host\ntry:\n    _host.call(b'x')\nexcept OSError as e:\n    print(type(e).__name__)";
    assert_eq!(text(&run(RunConfig::new(["-c", prog]).door(Arc::new(no_host))).stdout), "ConnectionRefusedError\n");
    assert_eq!(text(&run(RunConfig::new(["-c", prog]).door(Arc::new(fault))).stdout), "OSError\n");
    // No door at all: "no host".
    assert_eq!(text(&py(prog).stdout), "ConnectionRefusedError\n");
}

#[test]
fn large_answers_cross() {
    let door = |_: &[u8], _: &CallContext| DoorAnswer::Reply(vec![b'z'; 4 << 20]);
    let done = run(RunConfig::new(["-c", "import _host\nfor _ in range(20): n = len(_host.call(b''))\nprint(n)"]).door(Arc::new(door)));
    assert_eq!(text(&done.stdout), format!("{}\n", 4 << 20), "{}", text(&done.stderr));
}

/// A host that answers every call with its own arguments.
struct Echo;

impl wasi_python_runtime::ToolHost for Echo {
    fn invoke(&self, call: wasi_python_runtime::Invocation, _: &wasi_python_runtime::CancelToken) -> wasi_python_runtime::ToolOutput {
        wasi_python_runtime::ToolOutput::Ok(wasi_python_runtime::protocol::Value::Object(call.args))
    }
}

fn echo_tools(per_turn: wasi_python_runtime::budget::Limits) -> wasi_python_runtime::ToolDoor {
    let schema = serde_json::json!({"type": "object", "properties": {"s": {"type": "string"}}});
    let descriptor = serde_json::json!({"name": "echo", "description": "Echoes.", "inputSchema": schema}).to_string();
    let spec = wasi_python_runtime::ToolSpec::new("echo", descriptor, &schema, false, vec![], None).expect("a valid tool");
    wasi_python_runtime::ToolDoor::new(vec![spec], Arc::new(Echo), per_turn).expect("a valid door")
}

#[test]
fn a_run_with_tools_returns_its_record_in_completed() {
    let cfg = RunConfig::new(["-c", "from host import tools\nprint(tools.echo(s='hi')['s'])"])
        .tools(echo_tools(Default::default()), Default::default());
    let done = run(cfg);
    assert_eq!(text(&done.stdout), "hi\n", "{}", text(&done.stderr));
    let record = done.tools.expect("a run with tools has a record");
    let kinds: Vec<_> = record.outcomes.iter().map(|o| (o.op.as_str(), o.outcome.as_str())).collect();
    assert_eq!(kinds, [("list", "ok"), ("call", "ok")]);
    // A raw door has no record.
    let raw = |_: &[u8], _: &CallContext| DoorAnswer::NoHost;
    assert!(run(RunConfig::new(["-c", "pass"]).door(Arc::new(raw))).tools.is_none());
}

#[test]
fn each_session_turn_has_its_own_tool_budget_and_record() {
    let per_turn = wasi_python_runtime::budget::Limits { max_frames: Some(3), ..Default::default() };
    let cfg = RunConfig::new(Vec::<String>::new()).tools(echo_tools(per_turn), per_turn);
    let session = crate::runtime().open_session(cfg, Default::default()).expect("a session opens");
    let turn = |code: &str| {
        session
            .turn(wasi_python_runtime::Turn {
                code: code.into(),
                deadline: Some(Duration::from_secs(20)),
                output_bytes: 1 << 16,
                fuel: None,
                cancel: Default::default(),
                ..Default::default()
            })
            .expect("the session lives")
    };
    // Three frames a turn: five calls each turn; some pass and the rest are over the
    // budget. Without a fresh budget per turn, the second turn's calls would all fail.
    let prog = "from host import tools, ToolError\nok = over = 0\nfor _ in range(5):\n    try:\n        tools.echo(s='x'); ok += 1\n    except ToolError as e:\n        assert e.kind == 'budget_exceeded', e.kind; over += 1\nprint(ok > 0, over > 0)";
    for _ in 0..2 {
        let done = turn(prog);
        assert_eq!(text(&done.stdout), "True True\n", "{}", text(&done.stderr));
        let record = done.tools.expect("a record");
        assert_eq!(record.outcomes[0].seq, 1, "each turn's record starts afresh");
        assert!(record.frames >= 5, "{record:?}");
    }
    // A turn that calls nothing has an empty record.
    assert_eq!(turn("pass").tools.expect("a record").frames, 0);
}

/// Two runtimes in one process share neither the stacks their call threads leave nor the
/// private folders their runs leave: each serves only its own runtime's next runs, and
/// goes with its runtime.
#[test]
fn two_runtimes_keep_their_own_call_threads_and_private_folders() {
    use wasi_python_runtime::{LaunchPolicy, LaunchStats, Runtime};
    let own = || Runtime::builder(crate::runtime().artifacts().clone()).launch_policy(LaunchPolicy::fresh_only()).build();
    let (one, two) = (own(), own());
    let with_a_tool = || {
        RunConfig::new(["-c", "from host import tools\nprint(tools.echo(s='hi')['s'])"])
            .tools(echo_tools(Default::default()), Default::default())
            .deadline(Some(Duration::from_secs(30)))
    };
    // The run's folders are kept once its thread has dropped its instance, and a call
    // thread's stack once the thread has ended (the door's spare ends with the door).
    let settled = |rt: &Runtime| {
        let until = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let s: LaunchStats = rt.launch_stats(None);
            if (s.spare_folders >= 1 && s.call_thread_stacks >= 1) || std::time::Instant::now() > until {
                return s;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let done = one.run(with_a_tool()).unwrap();
    assert_eq!(text(&done.stdout), "hi\n", "{}", text(&done.stderr));
    let first = settled(&one);
    assert_eq!((first.spare_folders, first.call_thread_stacks >= 1), (1, true), "{first:?}");
    let other = two.launch_stats(None);
    assert_eq!((other.spare_folders, other.call_thread_stacks), (0, 0), "the other runtime's: {other:?}");
    // The other runtime's run makes its own, and leaves the first's alone.
    let done = two.run(with_a_tool()).unwrap();
    assert_eq!(text(&done.stdout), "hi\n", "{}", text(&done.stderr));
    let second = settled(&two);
    assert_eq!((second.spare_folders, second.call_thread_stacks >= 1), (1, true), "{second:?}");
    assert_eq!(one.launch_stats(None).spare_folders, 1, "the first runtime's folder is still its own");
    // A runtime that retires removes the folders it kept.
    one.retire();
    assert_eq!(one.launch_stats(None).spare_folders, 0);
    assert_eq!(two.launch_stats(None).spare_folders, 1);
}

/// A network that answers every request with a refusal, on whatever thread it is given.
struct Refusing;

impl wasi_python_runtime::NetworkHost for Refusing {
    fn request(&self, _request: Vec<u8>, _until: Option<std::time::Instant>, _cancel: &wasi_python_runtime::CancelToken) -> Vec<u8> {
        wasi_python_runtime::door::network::answer("refused", "not today")
    }
}

#[test]
fn network_requests_run_on_the_runtimes_call_threads() {
    use wasi_python_runtime::{LaunchPolicy, Runtime};
    let rt = Runtime::builder(crate::runtime().artifacts().clone()).launch_policy(LaunchPolicy::fresh_only()).build();
    let config = RunConfig::new([
        "-c",
        "from host import http\ntry:\n    http.request('GET', 'http://example.test/')\nexcept http.NetworkError as e:\n    print(e.kind)",
    ])
    .network(Arc::new(Refusing))
    .deadline(Some(Duration::from_secs(30)));
    let done = rt.run(config).unwrap();
    assert_eq!(text(&done.stdout), "refused\n", "{}", text(&done.stderr));
    // The request's thread was the runtime's: its stack is kept once the thread ends.
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while rt.launch_stats(None).call_thread_stacks == 0 && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(rt.launch_stats(None).call_thread_stacks >= 1, "{:?}", rt.launch_stats(None));
}
