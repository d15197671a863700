//! Validating a small call: three arguments against the decorator's kind of schema; and the
//! hostile cases, whose cost the step bound caps (issue 11: a frame answered in ≤ 50 ms).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use wasi_python_protocol::{Map, Value};
use wasi_python_schema::{InputSchema, Options};

fn one(v: Value) -> Map {
    Map(vec![("x".into(), v)])
}

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

fn hostile(c: &mut Criterion) {
    let mut g = c.benchmark_group("hostile");
    g.sample_size(10);
    // Refused as too complex: the whole default step budget spent.
    let branching = InputSchema::compile(
        &json!({"$defs": {"J": {"anyOf": [{"type": "null"},
            {"type": "array", "items": {"$ref": "#/$defs/J"}},
            {"type": "array", "items": {"$ref": "#/$defs/J"}, "maxItems": 3}]}},
            "type": "object", "properties": {"x": {"$ref": "#/$defs/J"}}}),
        Options::default(),
    )
    .unwrap();
    let mut deep = Value::Bool(true);
    for _ in 0..40 {
        deep = Value::Array(vec![deep]);
    }
    let deep = one(deep);
    assert!(branching.validate(&deep).is_err());
    g.bench_function("anyOf bomb, 40 levels (refused at the step bound)", |b| {
        b.iter(|| black_box(&branching).validate(black_box(&deep)))
    });
    let unique = InputSchema::compile(
        &json!({"type": "object", "properties": {"x": {"type": "array", "uniqueItems": true}}}),
        Options::default(),
    )
    .unwrap();
    let pair = |i: i64| Value::Array(vec![Value::Int(i), Value::Int(2)]);
    let same = one(Value::Array((0..90_000).map(|_| pair(1)).collect()));
    let distinct = one(Value::Array((0..90_000).map(pair).collect()));
    g.bench_function("uniqueItems, 90,000 equal pairs", |b| {
        b.iter(|| black_box(&unique).validate(black_box(&same)))
    });
    g.bench_function("uniqueItems, 90,000 distinct pairs", |b| {
        b.iter(|| black_box(&unique).validate(black_box(&distinct)))
    });
    g.finish();
}

criterion_group!(benches, bench, hostile);
criterion_main!(benches);
