//! The door's own cost: one tool call through `ToolDoor::call` with a fake host that
//! echoes its arguments, by payload. No guest: this is the host's share of the round trip
//! (budget, decode, schema, the hand-off to the tool's thread and back, encode, record),
//! which crates/runtime's `tool_round_trip` measures from inside the guest.
//!
//! `cargo bench --profile dev -p wasi-python-door --bench door -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use wasi_python_budget::Limits;
use wasi_python_door::{CallContext, CancelToken, Door, DoorAnswer, Invocation, ToolDoor, ToolHost, ToolOutput, ToolSpec};
use wasi_python_protocol::Value;

/// Payloads: a string argument of this many bytes, echoed back.
const PAYLOADS: [(&str, usize); 3] = [("10B", 10), ("1KiB", 1 << 10), ("64KiB", 64 << 10)];

#[derive(Debug)]
struct Echo;

impl ToolHost for Echo {
    fn invoke(&self, call: Invocation, _cancel: &CancelToken) -> ToolOutput {
        ToolOutput::Ok(Value::Object(call.args))
    }
}

fn echo_door() -> ToolDoor {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"s": {"type": "string"}},
        "required": ["s"],
        "additionalProperties": false,
    });
    let descriptor = serde_json::json!({"name": "echo", "description": "", "inputSchema": schema});
    let spec = ToolSpec::new("echo", descriptor.to_string(), &schema, false, Vec::new(), None).expect("a valid tool");
    let limits = Limits { max_frames: None, max_request_bytes: None, ..Limits::default() };
    ToolDoor::new(vec![spec], Arc::new(Echo), limits).expect("a valid door")
}

fn round_trip(c: &mut Criterion) {
    let mut group = c.benchmark_group("door_round_trip");
    let ctx = CallContext { deadline: None, cancel: CancelToken::new() };
    for (name, size) in PAYLOADS {
        let door = echo_door();
        // The list frame starts the first spare thread, as a guest's import does.
        door.call(br#"{"v":1,"id":1,"op":"list"}"#, &ctx);
        let frame = format!(r#"{{"v":1,"id":2,"op":"call","tool":"echo","args":{{"s":"{}"}}}}"#, "x".repeat(size));
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), frame.as_bytes(), |b, frame| {
            b.iter(|| match door.call(black_box(frame), &ctx) {
                DoorAnswer::Reply(answer) => answer,
                other => panic!("{other:?}"),
            })
        });
    }
    group.finish();
}

criterion_group!(benches, round_trip);
criterion_main!(benches);
