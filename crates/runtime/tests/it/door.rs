//! The raw door: bytes in, bytes out, and its failure codes.

use std::sync::Arc;

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
