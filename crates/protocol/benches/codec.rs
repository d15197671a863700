//! Frame codec costs by payload, against a serde_json baseline (a generic tree, no checks).
//!
//! `cargo bench -p wasi-python-protocol --bench codec -- --warm-up-time 1 --measurement-time 2`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use wasi_python_protocol::{
    ErrorKind, ListAnswer, Map, Value, decode_request, encode_error, encode_ok, encode_value,
};

fn small_call() -> Vec<u8> {
    br#"{"v":1,"id":2,"op":"call","tool":"price","args":{"item":"apple","qty":3,"note":"fresh"}}"#
        .to_vec()
}

fn string_call(len: usize) -> Vec<u8> {
    let text: String = "Lorem ipsum dolor sit amet, é 日本 "
        .chars()
        .cycle()
        .take(len)
        .collect();
    let mut args = Map::new();
    args.push("text", text);
    frame_with(args)
}

fn bytes_call(len: usize) -> Vec<u8> {
    let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    let mut args = Map::new();
    args.push("blob", bytes);
    frame_with(args)
}

fn list_call(items: Vec<Value>) -> Vec<u8> {
    let mut args = Map::new();
    args.push("rows", Value::Array(items));
    frame_with(args)
}

fn frame_with(args: Map) -> Vec<u8> {
    wasi_python_protocol::encode_request(&wasi_python_protocol::Request::Call {
        id: Some(2),
        tool: "f".into(),
        args,
    })
}

fn decode(c: &mut Criterion) {
    let frames = [
        ("small_call", small_call()),
        ("string_4k", string_call(4096)),
        ("bytes_64k", bytes_call(64 * 1024)),
        // The guest's worst cases under the 1 MiB frame cap: the most values a frame can
        // hold (a list of about 500,000 zeros) and 90,000 small lists.
        ("zeros_1mib", list_call((0..(1 << 20) / 2 - 64).map(|_| Value::Int(0)).collect())),
        (
            "lists_90k",
            list_call((0..90_000).map(|i| Value::Array(vec![Value::Int(i), Value::Int(2)])).collect()),
        ),
    ];
    for (name, frame) in &frames {
        let mut group = c.benchmark_group(format!("decode/{name}"));
        group.throughput(Throughput::Bytes(frame.len() as u64));
        group.bench_function("protocol", |b| {
            b.iter(|| decode_request(black_box(frame)).expect("valid"))
        });
        group.bench_function("serde_json", |b| {
            b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(frame)).expect("valid"))
        });
        group.finish();
    }
}

fn result_value() -> Value {
    let mut row = Map::new();
    row.push("code", "EMEA");
    row.push("manager", "Ada");
    row.push("revenue", 1234.5);
    row.push("staff", 42i64);
    Value::Object(row)
}

fn to_serde(value: &Value) -> serde_json::Value {
    let mut out = Vec::new();
    encode_value(value, &mut out);
    serde_json::from_slice(&out).expect("valid")
}

fn encode(c: &mut Criterion) {
    let small = result_value();
    let table = Value::Array((0..100).map(|_| result_value()).collect());
    let blob = Value::Bytes((0..64 * 1024).map(|i| (i % 251) as u8).collect());
    for (name, value) in [
        ("small", &small),
        ("table_100", &table),
        ("bytes_64k", &blob),
    ] {
        let serde = to_serde(value);
        let mut group = c.benchmark_group(format!("encode_ok/{name}"));
        group.throughput(Throughput::Bytes(encode_ok(Some(1), value).len() as u64));
        group.bench_function("protocol", |b| {
            b.iter(|| encode_ok(Some(1), black_box(value)))
        });
        group.bench_function("serde_json", |b| {
            b.iter(|| {
                serde_json::to_vec(
                    &serde_json::json!({"v": 1, "id": 1, "ok": true, "value": black_box(&serde)}),
                )
                .expect("encodes")
            })
        });
        group.finish();
    }
    c.bench_function("encode_error", |b| {
        b.iter(|| {
            encode_error(
                Some(1),
                ErrorKind::InvalidArguments,
                black_box("price: unknown argument 'extra'"),
            )
        })
    });
    let tools: Vec<String> = (0..20)
        .map(|i| format!(r#"{{"name":"tool{i}","description":"Does thing {i}.","inputSchema":{{"type":"object","properties":{{"a":{{"type":"string"}}}}}}}}"#))
        .collect();
    let list = ListAnswer::from_descriptors(&tools).expect("valid");
    c.bench_function("list_answer/20_tools", |b| {
        b.iter(|| list.encode(black_box(Some(1))))
    });
}

criterion_group!(benches, decode, encode);
criterion_main!(benches);
