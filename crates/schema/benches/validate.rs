//! Validating a small call: three arguments against the decorator's kind of schema.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use wasi_python_protocol::{Map, Value};
use wasi_python_schema::{InputSchema, Options};

fn bench(c: &mut Criterion) {
    let schema = json!({
        "type": "object",
        "properties": {
            "item": {"type": "string", "description": "The item's name.", "minLength": 1},
            "qty": {"type": "integer", "default": 1, "minimum": 1},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null}
        },
        "required": ["item"],
        "additionalProperties": false
    });
    let schema = InputSchema::compile(&schema, Options::default()).unwrap();
    let args = Map(vec![
        ("item".into(), Value::Str("apple".into())),
        ("qty".into(), Value::Int(3)),
        ("note".into(), Value::Null),
    ]);
    assert!(schema.validate(&args).is_ok());
    c.bench_function("validate 3 arguments", |b| {
        b.iter(|| black_box(&schema).validate(black_box(&args)))
    });

    let bad = Map(vec![
        ("item".into(), Value::Str("apple".into())),
        ("qty".into(), Value::Str("3".into())),
    ]);
    assert!(schema.validate(&bad).is_err());
    c.bench_function("refuse 2 arguments", |b| {
        b.iter(|| black_box(&schema).validate(black_box(&bad)))
    });

    let compile_input = json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string", "pattern": "^[a-z]+$"}}});
    c.bench_function("compile a 2-property schema", |b| {
        b.iter(|| InputSchema::compile(black_box(&compile_input), Options::default()))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
