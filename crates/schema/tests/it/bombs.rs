//! Hostile arguments against schemas that make checking expensive: every check ends, with a
//! verdict or as too complex, whatever the guest sends (issue 11). No timing is asserted: an
//! unbounded check shows here as a test that never ends.

use std::cell::Cell;

use serde_json::{Value as J, json};
use wasi_python_protocol::{Map, Value};
use wasi_python_schema::{ArgumentErrorKind as A, Bounds, DEFAULT_MAX_STEPS, InputSchema, Options};

fn compile(schema: J) -> InputSchema {
    InputSchema::compile(&schema, Options::default()).unwrap()
}

fn one(name: &str, v: Value) -> Map {
    Map(vec![(name.into(), v)])
}

/// `depth` lists around `true`, which [`branching_json_type`] refuses: a failing leaf makes
/// every level try every branch.
fn nested_lists(depth: usize) -> Value {
    nested(depth, Value::Bool(true))
}

fn nested(depth: usize, leaf: Value) -> Value {
    let mut v = leaf;
    for _ in 0..depth {
        v = Value::Array(vec![v]);
    }
    v
}

/// A JSON value type as pydantic emits it for a recursive model (booleans left out), with two
/// array branches: every level of nested lists whose leaf fails tries both, so a naive check
/// takes 2^depth steps.
fn branching_json_type() -> InputSchema {
    compile(json!({
        "$defs": {"J": {"anyOf": [
            {"type": ["null", "integer", "number", "string"]},
            {"type": "array", "items": {"$ref": "#/$defs/J"}},
            {"type": "array", "items": {"$ref": "#/$defs/J"}, "maxItems": 3},
            {"type": "object", "additionalProperties": {"$ref": "#/$defs/J"}}
        ]}},
        "type": "object", "properties": {"x": {"$ref": "#/$defs/J"}}, "required": ["x"]
    }))
}

#[test]
fn branching_anyof_over_deep_lists_is_refused_as_too_complex() {
    let s = branching_json_type();
    // Shallow values still get their verdict, and deep ones that pass are cheap.
    assert_eq!(s.validate(&one("x", nested_lists(5))).unwrap_err().kind(), A::Combinator);
    assert_eq!(s.validate(&one("x", nested(60, Value::Int(1)))), Ok(()));
    // 28 levels (2^28 applications naively) and 60 levels: refused, never run on.
    for depth in [28, 40, 60] {
        let e = s.validate(&one("x", nested_lists(depth))).unwrap_err();
        assert_eq!(e.kind(), A::TooComplex, "depth {depth}: {e}");
        assert!(e.message().contains("too complex to check"), "{e}");
    }
}

#[test]
fn deep_chains_of_allof_and_oneof_end() {
    // oneOf must try every branch (to count passes), allOf applies all: both branch per level.
    for word in ["oneOf", "allOf"] {
        let s = compile(json!({
            "$defs": {"J": {word: [
                {"anyOf": [{"type": "boolean"}, {"type": "array", "items": {"$ref": "#/$defs/J"}}]},
                {"anyOf": [{"type": "boolean"}, {"type": "array", "items": {"$ref": "#/$defs/J"}}, {"type": "array", "maxItems": 1}]}
            ]}},
            "type": "object", "properties": {"x": {"$ref": "#/$defs/J"}}
        }));
        let e = s.validate(&one("x", nested_lists(60))).unwrap_err();
        assert!(matches!(e.kind(), A::TooComplex | A::Combinator), "{word}: {e}");
    }
}

#[test]
fn unique_items_over_90000_lists_is_linear() {
    let s = compile(json!({"type": "object", "properties": {"x": {"type": "array", "uniqueItems": true}}}));
    let pair = |i: i64| Value::Array(vec![Value::Int(i), Value::Int(2)]);
    // All equal: the first pair is found at once (it used to compare 4 billion pairs).
    let same = Value::Array((0..90_000).map(|_| pair(1)).collect());
    let e = s.validate(&one("x", same)).unwrap_err();
    assert_eq!(e.kind(), A::NotUnique);
    assert!(e.message().contains("items 0 and 1 are equal"), "{e}");
    // All distinct: accepted.
    let distinct = Value::Array((0..90_000).map(pair).collect());
    assert_eq!(s.validate(&one("x", distinct)), Ok(()));
    // The first duplicate is the one with the smallest second index, named with the first
    // item it equals, as for short arrays.
    let mut items: Vec<Value> = (0..1000).map(pair).collect();
    items[700] = pair(5);
    items[900] = pair(3);
    let e = s.validate(&one("x", Value::Array(items))).unwrap_err();
    assert!(e.message().contains("items 5 and 700 are equal"), "{e}");
}

#[test]
fn a_stop_that_fires_ends_the_check_as_stopped() {
    let s = branching_json_type();
    let asked = Cell::new(0u32);
    let stop = || {
        asked.set(asked.get() + 1);
        asked.get() >= 3
    };
    let bounds = Bounds { max_steps: u64::MAX, stop: Some(&stop) };
    let e = s.validate_within(&one("x", nested_lists(40)), &[], &bounds).unwrap_err();
    assert_eq!(e.kind(), A::Stopped, "{e}");
    assert_eq!(asked.get(), 3, "asked until it said stop, then never again");
    // A stop that never fires changes no verdict.
    let never = || false;
    let bounds = Bounds { max_steps: DEFAULT_MAX_STEPS, stop: Some(&never) };
    let e = s.validate_within(&one("x", nested_lists(12)), &[], &bounds).unwrap_err();
    assert_eq!(e, s.validate(&one("x", nested_lists(12))).unwrap_err());
    assert_eq!(e.kind(), A::Combinator);
}

#[test]
fn the_verdict_of_a_bounded_check_is_deterministic() {
    let s = branching_json_type();
    let bounds = Bounds { max_steps: 10_000, stop: None };
    let first = s.validate_within(&one("x", nested_lists(14)), &[], &bounds);
    for _ in 0..3 {
        assert_eq!(s.validate_within(&one("x", nested_lists(14)), &[], &bounds), first);
    }
    assert_eq!(first.unwrap_err().kind(), A::TooComplex);
    // Under the default bounds the same value gets its real verdict: the bound refused it.
    assert_eq!(s.validate(&one("x", nested_lists(14))).unwrap_err().kind(), A::Combinator);
}

#[test]
fn long_texts_under_a_pattern_and_big_legitimate_arguments_pass() {
    let s = compile(json!({"type": "object", "properties": {
        "text": {"type": "string", "pattern": "^[a-z]*(ab|cd)*[a-z]*$", "maxLength": 2_000_000},
        "nums": {"type": "array", "items": {"type": "integer", "minimum": 0}, "uniqueItems": true},
        "rows": {"type": "array", "items": {"type": "object",
            "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}, "required": ["id"]}}
    }}));
    // About 1 MiB of text, 250,000 distinct integers and 50,000 small rows: what a frame of
    // the 1 MiB cap can hold, each within the default bounds.
    let text = Value::Str("ab".repeat(1 << 19));
    assert_eq!(s.validate(&one("text", text)), Ok(()));
    let nums = Value::Array((0..250_000).map(Value::Int).collect());
    assert_eq!(s.validate(&one("nums", nums)), Ok(()));
    let rows = Value::Array(
        (0..50_000)
            .map(|i| Value::Object(Map(vec![("id".into(), Value::Int(i)), ("name".into(), Value::Str("n".into()))])))
            .collect(),
    );
    assert_eq!(s.validate(&one("rows", rows)), Ok(()));
}

#[test]
fn ref_cycles_that_never_descend_are_refused_when_the_tool_is_made() {
    for schema in [
        json!({"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"anyOf": [{"$ref": "#/$defs/A"}]}},
               "type": "object", "properties": {"x": {"$ref": "#/$defs/A"}}}),
        json!({"$defs": {"A": {"not": {"$ref": "#/$defs/A"}}},
               "type": "object", "properties": {"x": {"$ref": "#/$defs/A"}}}),
    ] {
        let e = InputSchema::compile(&schema, Options::default()).unwrap_err();
        assert_eq!(e.kind(), wasi_python_schema::SchemaErrorKind::RefCycle, "{e}");
    }
}
