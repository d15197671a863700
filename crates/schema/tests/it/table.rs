//! Data-driven cases: one line each.
//!
//! Schemas written `x: <schema>` stand for `{"type": "object", "properties": {"x": <schema>}}`.
//! Arguments are JSON, with `{"$bytes": "<base64>"}` for bytes and `{"$big": "<digits>"}` for
//! an integer beyond 64 bits. Expectations are `ok` or `Kind @ path` (`Kind @ pointer` when the
//! schema itself is refused).

use serde_json::Value as J;
use wasi_python_schema::{ArgumentErrorKind, InputSchema, Options};

use crate::support::{args, compiled, json, validated};

const LAX: Options = Options {
    validates_input: true,
};
const STRICT: Options = Options {
    validates_input: false,
};

fn schema_of(text: &str) -> J {
    match text.strip_prefix("x: ") {
        Some(sub) => json(&format!(
            r#"{{"type": "object", "properties": {{"x": {sub}}}}}"#
        )),
        None => json(text),
    }
}

fn check(schema: &str, arguments: &str, expected: &str) -> Result<(), String> {
    let compiled = InputSchema::compile(&schema_of(schema), STRICT)
        .map_err(|e| format!("{schema}: does not compile: {e}"))?;
    let got = validated(&compiled, &args(arguments));
    if got == expected {
        Ok(())
    } else {
        Err(format!(
            "{schema}\n    with {arguments}\n    expected {expected}, got {got}"
        ))
    }
}

fn run_table(cases: &[(&str, &str, &str)]) {
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|&(s, a, e)| check(s, a, e).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

const PRICE: &str = r#"{"type":"object","properties":{"item":{"type":"string","description":"The item's name."},
    "qty":{"type":"integer","description":"How many.","default":1}},"required":["item"],"additionalProperties":false}"#;

#[test]
fn types() {
    run_table(&[
        (r#"x: {"type":"integer"}"#, r#"{"x": 1}"#, "ok"),
        (r#"x: {"type":"integer"}"#, r#"{"x": -5}"#, "ok"),
        (
            r#"x: {"type":"integer"}"#,
            r#"{"x": {"$big": "100000000000000000000"}}"#,
            "ok",
        ),
        (
            r#"x: {"type":"integer"}"#,
            r#"{"x": 18446744073709551615}"#,
            "ok",
        ),
        // Documented deviation: an integer-valued float is not an integer.
        (r#"x: {"type":"integer"}"#, r#"{"x": 1.0}"#, "WrongType @ x"),
        (r#"x: {"type":"integer"}"#, r#"{"x": 1.5}"#, "WrongType @ x"),
        (
            r#"x: {"type":"integer"}"#,
            r#"{"x": true}"#,
            "WrongType @ x",
        ),
        (r#"x: {"type":"integer"}"#, r#"{"x": "1"}"#, "WrongType @ x"),
        (
            r#"x: {"type":"integer"}"#,
            r#"{"x": null}"#,
            "WrongType @ x",
        ),
        (r#"x: {"type":"number"}"#, r#"{"x": 1}"#, "ok"),
        (r#"x: {"type":"number"}"#, r#"{"x": 1.5}"#, "ok"),
        (
            r#"x: {"type":"number"}"#,
            r#"{"x": {"$big": "-100000000000000000000"}}"#,
            "ok",
        ),
        (
            r#"x: {"type":"number"}"#,
            r#"{"x": false}"#,
            "WrongType @ x",
        ),
        (
            r#"x: {"type":"number"}"#,
            r#"{"x": "1.5"}"#,
            "WrongType @ x",
        ),
        (r#"x: {"type":"string"}"#, r#"{"x": "a"}"#, "ok"),
        (
            r#"x: {"type":"string"}"#,
            r#"{"x": {"$bytes": "eQ=="}}"#,
            "WrongType @ x",
        ),
        (r#"x: {"type":"string"}"#, r#"{"x": 1}"#, "WrongType @ x"),
        (r#"x: {"type":"boolean"}"#, r#"{"x": true}"#, "ok"),
        (r#"x: {"type":"boolean"}"#, r#"{"x": 0}"#, "WrongType @ x"),
        (r#"x: {"type":"null"}"#, r#"{"x": null}"#, "ok"),
        (r#"x: {"type":"null"}"#, r#"{"x": false}"#, "WrongType @ x"),
        (r#"x: {"type":"array"}"#, r#"{"x": []}"#, "ok"),
        (r#"x: {"type":"array"}"#, r#"{"x": {}}"#, "WrongType @ x"),
        (r#"x: {"type":"object"}"#, r#"{"x": {}}"#, "ok"),
        (r#"x: {"type":"object"}"#, r#"{"x": []}"#, "WrongType @ x"),
        (r#"x: {"type":["integer","null"]}"#, r#"{"x": null}"#, "ok"),
        (r#"x: {"type":["integer","null"]}"#, r#"{"x": 3}"#, "ok"),
        (
            r#"x: {"type":["integer","null"]}"#,
            r#"{"x": "3"}"#,
            "WrongType @ x",
        ),
        (r#"x: {"type":["integer","number"]}"#, r#"{"x": 3.5}"#, "ok"),
        (r#"x: {}"#, r#"{"x": [1, {"a": null}]}"#, "ok"),
        (r#"x: true"#, r#"{"x": 1}"#, "ok"),
        (r#"x: false"#, r#"{"x": 1}"#, "Forbidden @ x"),
        (r#"x: false"#, r#"{}"#, "ok"),
    ]);
}

#[test]
fn bytes() {
    run_table(&[
        (
            r#"x: {"type":"string","contentEncoding":"base64"}"#,
            r#"{"x": {"$bytes": "AP8="}}"#,
            "ok",
        ),
        // contentEncoding is an annotation for a string: a string still passes, undecoded.
        (
            r#"x: {"type":"string","contentEncoding":"base64"}"#,
            r#"{"x": "not base64!"}"#,
            "ok",
        ),
        (
            r#"x: {"type":"string","contentEncoding":"base64"}"#,
            r#"{"x": 1}"#,
            "WrongType @ x",
        ),
        (
            r#"x: {"contentEncoding":"base64"}"#,
            r#"{"x": {"$bytes": "AP8="}}"#,
            "ok",
        ),
        (r#"x: {"contentEncoding":"base64"}"#, r#"{"x": 1}"#, "ok"),
        (r#"x: {}"#, r#"{"x": {"$bytes": "AP8="}}"#, "Bytes @ x"),
        (
            r#"x: {"type":"array"}"#,
            r#"{"x": [{"$bytes": "AP8="}]}"#,
            "Bytes @ x[0]",
        ),
        (
            r#"x: {"type":"object"}"#,
            r#"{"x": {"k": {"$bytes": "AP8="}}}"#,
            "Bytes @ x.k",
        ),
        (
            r#"{"type":"object"}"#,
            r#"{"extra": {"$bytes": "AP8="}}"#,
            "Bytes @ extra",
        ),
        (
            r#"x: {"type":"array","items":{"type":"string","contentEncoding":"base64"}}"#,
            r#"{"x": [{"$bytes": "AP8="}, "s"]}"#,
            "ok",
        ),
        (
            r#"x: {"type":"array","items":{"type":"string","contentEncoding":"base64"}}"#,
            r#"{"x": [{"$bytes": "AP8="}, 1]}"#,
            "WrongType @ x[1]",
        ),
        (
            r#"x: {"anyOf":[{"type":"string","contentEncoding":"base64"},{"type":"null"}]}"#,
            r#"{"x": {"$bytes": "AP8="}}"#,
            "ok",
        ),
        (
            r#"x: {"anyOf":[{"type":"string","contentEncoding":"base64"},{"type":"null"}]}"#,
            r#"{"x": null}"#,
            "ok",
        ),
        (
            r#"x: {"anyOf":[{"type":"string","contentEncoding":"base64"},{"type":"null"}]}"#,
            r#"{"x": 1}"#,
            "WrongType @ x",
        ),
        // Annotations come from every passing alternative, not just the first.
        (
            r#"x: {"anyOf":[{"type":"array","items":{}},{"type":"array","items":{"contentEncoding":"base64"}}]}"#,
            r#"{"x": [{"$bytes": "AP8="}]}"#,
            "ok",
        ),
        // ... but never from a failing one, nor from under `not`.
        (
            r#"x: {"anyOf":[{"type":"array","items":{"contentEncoding":"base64"},"minItems":2},{"type":"array"}]}"#,
            r#"{"x": [{"$bytes": "AP8="}]}"#,
            "Bytes @ x[0]",
        ),
        (
            r#"x: {"not":{"type":"string","contentEncoding":"base64"}}"#,
            r#"{"x": {"$bytes": "AP8="}}"#,
            "Combinator @ x",
        ),
        (
            r#"x: {"not":{"type":"integer"},"items":{"not":{"contentEncoding":"base64","maxLength":0}}}"#,
            r#"{"x": [{"$bytes": "AP8="}]}"#,
            "Bytes @ x[0]",
        ),
        (
            r#"x: {"allOf":[{"type":"string","contentEncoding":"base64"}],"maxLength":4}"#,
            r#"{"x": {"$bytes": "AP8="}}"#,
            "ok",
        ),
        // Bytes read as their base64 text: 3 bytes are 4 characters, 4 bytes are 8.
        (
            r#"x: {"type":"string","contentEncoding":"base64","maxLength":4}"#,
            r#"{"x": {"$bytes": "YWJj"}}"#,
            "ok",
        ),
        (
            r#"x: {"type":"string","contentEncoding":"base64","maxLength":4}"#,
            r#"{"x": {"$bytes": "YWJjZA=="}}"#,
            "Length @ x",
        ),
        (
            r#"x: {"type":"string","contentEncoding":"base64","minLength":5}"#,
            r#"{"x": {"$bytes": "YWJj"}}"#,
            "Length @ x",
        ),
        (
            r#"x: {"type":"string","contentEncoding":"base64","pattern":"^AP8=$"}"#,
            r#"{"x": {"$bytes": "AP8="}}"#,
            "ok",
        ),
        (
            r#"x: {"type":"string","contentEncoding":"base64","pattern":"^AP8=$"}"#,
            r#"{"x": {"$bytes": "AQ=="}}"#,
            "Pattern @ x",
        ),
        (
            r#"x: {"contentEncoding":"base64","enum":["AP8="]}"#,
            r#"{"x": {"$bytes": "AP8="}}"#,
            "ok",
        ),
        (
            r#"x: {"contentEncoding":"base64","const":"AQ=="}"#,
            r#"{"x": {"$bytes": "AP8="}}"#,
            "Const @ x",
        ),
        (
            r#"x: {"type":"array","uniqueItems":true,"items":{"type":"string","contentEncoding":"base64"}}"#,
            r#"{"x": [{"$bytes": "AP8="}, "AP8="]}"#,
            "NotUnique @ x",
        ),
        (
            r#"x: {"type":"array","uniqueItems":true,"items":{"type":"string","contentEncoding":"base64"}}"#,
            r#"{"x": [{"$bytes": "AP8="}, {"$bytes": "AQ=="}]}"#,
            "ok",
        ),
    ]);
}

#[test]
fn enum_and_const() {
    run_table(&[
        (r#"x: {"enum":["a", 1, null]}"#, r#"{"x": "a"}"#, "ok"),
        (r#"x: {"enum":["a", 1, null]}"#, r#"{"x": 1.0}"#, "ok"),
        (r#"x: {"enum":["a", 1, null]}"#, r#"{"x": null}"#, "ok"),
        (r#"x: {"enum":["a", 1, null]}"#, r#"{"x": 2}"#, "Enum @ x"),
        (
            r#"x: {"enum":["a", 1, null]}"#,
            r#"{"x": true}"#,
            "Enum @ x",
        ),
        (r#"x: {"enum":[]}"#, r#"{"x": 1}"#, "Enum @ x"),
        (
            r#"x: {"enum":[18446744073709551615]}"#,
            r#"{"x": {"$big": "18446744073709551615"}}"#,
            "ok",
        ),
        // 2^200, exactly a float; the big integer equals it, its neighbour does not.
        (
            r#"x: {"enum":[1.6069380442589903e60]}"#,
            r#"{"x": {"$big": "1606938044258990275541962092341162602522202993782792835301376"}}"#,
            "ok",
        ),
        (
            r#"x: {"enum":[1.6069380442589903e60]}"#,
            r#"{"x": {"$big": "1606938044258990275541962092341162602522202993782792835301377"}}"#,
            "Enum @ x",
        ),
        (r#"x: {"const":1}"#, r#"{"x": 1.0}"#, "ok"),
        (r#"x: {"const":1}"#, r#"{"x": "1"}"#, "Const @ x"),
        (r#"x: {"const":1}"#, r#"{"x": true}"#, "Const @ x"),
        (
            r#"x: {"const":{"a":[1,2],"b":null}}"#,
            r#"{"x": {"b": null, "a": [1, 2.0]}}"#,
            "ok",
        ),
        (
            r#"x: {"const":{"a":[1,2]}}"#,
            r#"{"x": {"a": [2, 1]}}"#,
            "Const @ x",
        ),
        (
            r#"x: {"const":{"a":[1,2]}}"#,
            r#"{"x": {"a": [1, 2], "b": 1}}"#,
            "Const @ x",
        ),
    ]);
}

#[test]
fn objects() {
    let opts = r#"x: {"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}"#;
    run_table(&[
        (PRICE, r#"{"item": "apple"}"#, "ok"),
        (PRICE, r#"{"item": "apple", "qty": 3}"#, "ok"),
        (PRICE, r#"{"qty": 3}"#, "MissingArgument @ item"),
        (
            PRICE,
            r#"{"item": "apple", "extra": 1}"#,
            "UnknownArgument @ extra",
        ),
        (PRICE, r#"{"item": "apple", "qty": "3"}"#, "WrongType @ qty"),
        (
            r#"{"type":"object","properties":{"a":{}}}"#,
            r#"{"b": 1}"#,
            "ok",
        ),
        (
            r#"{"type":"object","additionalProperties":{"type":"integer"}}"#,
            r#"{"b": 1}"#,
            "ok",
        ),
        (
            r#"{"type":"object","additionalProperties":{"type":"integer"}}"#,
            r#"{"b": "x"}"#,
            "WrongType @ b",
        ),
        (
            r#"{"type":"object","additionalProperties":true}"#,
            r#"{"b": "x"}"#,
            "ok",
        ),
        (opts, r#"{"x": {"a": 1}}"#, "ok"),
        (opts, r#"{"x": {}}"#, "MissingArgument @ x.a"),
        (
            opts,
            r#"{"x": {"a": 1, "zz": 2}}"#,
            "UnknownArgument @ x.zz",
        ),
        (opts, r#"{"x": {"a": "1"}}"#, "WrongType @ x.a"),
        (
            r#"x: {"type":"object","additionalProperties":{"type":"integer"}}"#,
            r#"{"x": {"a b": "s"}}"#,
            "WrongType @ x[\"a b\"]",
        ),
        (
            r#"x: {"type":"object","required":["k"]}"#,
            r#"{"x": {"k": 1}}"#,
            "ok",
        ),
        (
            r#"x: {"type":"object","required":["k"]}"#,
            r#"{"x": {"j": 1}}"#,
            "MissingArgument @ x.k",
        ),
        (
            r#"x: {"minProperties":2}"#,
            r#"{"x": {"a": 1}}"#,
            "Length @ x",
        ),
        (
            r#"x: {"minProperties":2}"#,
            r#"{"x": {"a": 1, "b": 2}}"#,
            "ok",
        ),
        (
            r#"x: {"minProperties":2}"#,
            r#"{"x": "not an object"}"#,
            "ok",
        ),
        (
            r#"x: {"maxProperties":1}"#,
            r#"{"x": {"a": 1, "b": 2}}"#,
            "Length @ x",
        ),
        (
            r#"{"type":"object","maxProperties":1}"#,
            r#"{"a": 1, "b": 2}"#,
            "Length @ ",
        ),
        (
            r#"{"type":"object","minProperties":1}"#,
            r#"{}"#,
            "Length @ ",
        ),
    ]);
}

#[test]
fn arrays() {
    run_table(&[
        (
            r#"x: {"items":{"type":"integer"}}"#,
            r#"{"x": [1, 2]}"#,
            "ok",
        ),
        (
            r#"x: {"items":{"type":"integer"}}"#,
            r#"{"x": [1, "2"]}"#,
            "WrongType @ x[1]",
        ),
        (
            r#"x: {"items":{"type":"integer"}}"#,
            r#"{"x": "not an array"}"#,
            "ok",
        ),
        (r#"x: {"items":true}"#, r#"{"x": [1, "2"]}"#, "ok"),
        (r#"x: {"items":false}"#, r#"{"x": []}"#, "ok"),
        (r#"x: {"items":false}"#, r#"{"x": [1]}"#, "Length @ x"),
        (
            r#"x: {"prefixItems":[{"type":"string"},{"type":"integer"}]}"#,
            r#"{"x": ["a", 1]}"#,
            "ok",
        ),
        (
            r#"x: {"prefixItems":[{"type":"string"},{"type":"integer"}]}"#,
            r#"{"x": ["a"]}"#,
            "ok",
        ),
        (
            r#"x: {"prefixItems":[{"type":"string"},{"type":"integer"}]}"#,
            r#"{"x": ["a", 1, null]}"#,
            "ok",
        ),
        (
            r#"x: {"prefixItems":[{"type":"string"},{"type":"integer"}]}"#,
            r#"{"x": [1]}"#,
            "WrongType @ x[0]",
        ),
        (
            r#"x: {"prefixItems":[{"type":"string"}],"items":false}"#,
            r#"{"x": ["a", 1]}"#,
            "Length @ x",
        ),
        (
            r#"x: {"prefixItems":[{"type":"string"}],"items":{"type":"integer"}}"#,
            r#"{"x": ["a", 1, "b"]}"#,
            "WrongType @ x[2]",
        ),
        (r#"x: {"minItems":2}"#, r#"{"x": [1]}"#, "Length @ x"),
        (r#"x: {"maxItems":1}"#, r#"{"x": [1, 2]}"#, "Length @ x"),
        (r#"x: {"maxItems":1}"#, r#"{"x": [1]}"#, "ok"),
        (r#"x: {"uniqueItems":true}"#, r#"{"x": [1, 2]}"#, "ok"),
        (
            r#"x: {"uniqueItems":true}"#,
            r#"{"x": [1, 1.0]}"#,
            "NotUnique @ x",
        ),
        (
            r#"x: {"uniqueItems":true}"#,
            r#"{"x": [{"a": 1, "b": 2}, {"b": 2, "a": 1}]}"#,
            "NotUnique @ x",
        ),
        (
            r#"x: {"uniqueItems":true}"#,
            r#"{"x": [[1], [1, 2]]}"#,
            "ok",
        ),
        (r#"x: {"uniqueItems":true}"#, r#"{"x": [true, 1]}"#, "ok"),
        (r#"x: {"uniqueItems":false}"#, r#"{"x": [1, 1]}"#, "ok"),
        (
            r#"x: {"items":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}"#,
            r#"{"x": [{"name": "a"}, {}]}"#,
            "MissingArgument @ x[1].name",
        ),
    ]);
}

#[test]
fn unique_items_by_hash() {
    // Past 16 items, duplicates are found by hashing; equal numbers of either kind hash alike.
    let schema = InputSchema::compile(&schema_of(r#"x: {"uniqueItems":true}"#), STRICT).unwrap();
    let distinct: Vec<String> = (0..40)
        .map(|i| format!(r#"{{"k": [{i}, "s{i}"]}}"#))
        .collect();
    let cases = [
        (format!(r#"{{"x": [{}]}}"#, distinct.join(", ")), "ok"),
        (
            format!(
                r#"{{"x": [{}, {{"k": [7.0, "s7"]}}]}}"#,
                distinct.join(", ")
            ),
            "NotUnique @ x",
        ),
        (
            format!(
                r#"{{"x": [{}]}}"#,
                (0..40)
                    .map(|i| format!("{i}.5"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "ok",
        ),
        (
            format!(
                r#"{{"x": [{}, 39.5]}}"#,
                (0..40)
                    .map(|i| format!("{i}.5"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "NotUnique @ x",
        ),
        (
            format!(
                r#"{{"x": [{}, {{"$big": "1000000000000000000000"}}, 1e21]}}"#,
                (0..40)
                    .collect::<Vec<_>>()
                    .iter()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "NotUnique @ x",
        ),
    ];
    for (arguments, expected) in cases {
        assert_eq!(
            validated(&schema, &args(&arguments)),
            expected,
            "{arguments}"
        );
    }
    let err = schema
        .validate(&args(&format!(
            r#"{{"x": [{}, {{"k": [3, "s3"]}}]}}"#,
            distinct.join(", ")
        )))
        .unwrap_err();
    assert!(
        err.message().contains("items 3 and 40 are equal"),
        "{}",
        err.message()
    );
}

#[test]
fn numbers() {
    run_table(&[
        (r#"x: {"minimum":1}"#, r#"{"x": 1}"#, "ok"),
        (r#"x: {"minimum":1}"#, r#"{"x": 1.0}"#, "ok"),
        (r#"x: {"minimum":1}"#, r#"{"x": 0}"#, "OutOfRange @ x"),
        (r#"x: {"minimum":1}"#, r#"{"x": 0.5}"#, "OutOfRange @ x"),
        (
            r#"x: {"minimum":1}"#,
            r#"{"x": {"$big": "100000000000000000000"}}"#,
            "ok",
        ),
        (
            r#"x: {"minimum":1}"#,
            r#"{"x": {"$big": "-100000000000000000000"}}"#,
            "OutOfRange @ x",
        ),
        (r#"x: {"minimum":1}"#, r#"{"x": "0"}"#, "ok"),
        (
            r#"x: {"minimum":18446744073709551615}"#,
            r#"{"x": 9223372036854775807}"#,
            "OutOfRange @ x",
        ),
        (
            r#"x: {"minimum":18446744073709551615}"#,
            r#"{"x": {"$big": "18446744073709551616"}}"#,
            "ok",
        ),
        (
            r#"x: {"minimum":9007199254740992.0}"#,
            r#"{"x": 9007199254740993}"#,
            "ok",
        ),
        (
            r#"x: {"maximum":9007199254740992.0}"#,
            r#"{"x": 9007199254740993}"#,
            "OutOfRange @ x",
        ),
        (r#"x: {"maximum":10}"#, r#"{"x": 10}"#, "ok"),
        (r#"x: {"maximum":10}"#, r#"{"x": 10.5}"#, "OutOfRange @ x"),
        (
            r#"x: {"maximum":10}"#,
            r#"{"x": {"$big": "100000000000000000000"}}"#,
            "OutOfRange @ x",
        ),
        (
            r#"x: {"maximum":1e300}"#,
            r#"{"x": {"$big": "100000000000000000000000000000000000000000"}}"#,
            "ok",
        ),
        (
            r#"x: {"exclusiveMinimum":0}"#,
            r#"{"x": 0}"#,
            "OutOfRange @ x",
        ),
        (r#"x: {"exclusiveMinimum":0}"#, r#"{"x": 0.0001}"#, "ok"),
        (
            r#"x: {"exclusiveMaximum":1.5}"#,
            r#"{"x": 1.5}"#,
            "OutOfRange @ x",
        ),
        (r#"x: {"exclusiveMaximum":1.5}"#, r#"{"x": 1}"#, "ok"),
        (r#"x: {"multipleOf":5}"#, r#"{"x": 10}"#, "ok"),
        (r#"x: {"multipleOf":5}"#, r#"{"x": 7}"#, "NotMultiple @ x"),
        (r#"x: {"multipleOf":5}"#, r#"{"x": 10.0}"#, "ok"),
        (
            r#"x: {"multipleOf":5}"#,
            r#"{"x": 10.5}"#,
            "NotMultiple @ x",
        ),
        (
            r#"x: {"multipleOf":5}"#,
            r#"{"x": {"$big": "100000000000000000000"}}"#,
            "ok",
        ),
        (
            r#"x: {"multipleOf":5}"#,
            r#"{"x": {"$big": "100000000000000000001"}}"#,
            "NotMultiple @ x",
        ),
        (r#"x: {"multipleOf":0.1}"#, r#"{"x": 0.3}"#, "ok"),
        (
            r#"x: {"multipleOf":0.1}"#,
            r#"{"x": 0.35}"#,
            "NotMultiple @ x",
        ),
        (r#"x: {"multipleOf":1.5}"#, r#"{"x": 6}"#, "ok"),
        (r#"x: {"multipleOf":1.5}"#, r#"{"x": 7}"#, "NotMultiple @ x"),
    ]);
}

#[test]
fn strings() {
    run_table(&[
        (r#"x: {"minLength":2}"#, r#"{"x": "ab"}"#, "ok"),
        (r#"x: {"minLength":2}"#, r#"{"x": "é"}"#, "Length @ x"),
        (r#"x: {"minLength":2}"#, r#"{"x": "😀😀"}"#, "ok"),
        (r#"x: {"minLength":2}"#, r#"{"x": 1}"#, "ok"),
        (r#"x: {"maxLength":2}"#, r#"{"x": "abc"}"#, "Length @ x"),
        (r#"x: {"maxLength":2}"#, r#"{"x": "éé"}"#, "ok"),
        (r#"x: {"maxLength":0}"#, r#"{"x": ""}"#, "ok"),
        (r#"x: {"pattern":"^[A-Z]{2}$"}"#, r#"{"x": "EM"}"#, "ok"),
        (
            r#"x: {"pattern":"^[A-Z]{2}$"}"#,
            r#"{"x": "EMEA"}"#,
            "Pattern @ x",
        ),
        (r#"x: {"pattern":"b"}"#, r#"{"x": "abc"}"#, "ok"),
        (r#"x: {"pattern":"b"}"#, r#"{"x": "xyz"}"#, "Pattern @ x"),
        (r#"x: {"pattern":"^a"}"#, r#"{"x": 5}"#, "ok"),
        (r#"x: {"pattern":"^\\d+$"}"#, r#"{"x": "123"}"#, "ok"),
    ]);
}

#[test]
fn combinators() {
    run_table(&[
        (
            r#"x: {"anyOf":[{"type":"integer","minimum":1},{"type":"null"}]}"#,
            r#"{"x": null}"#,
            "ok",
        ),
        (
            r#"x: {"anyOf":[{"type":"integer","minimum":1},{"type":"null"}]}"#,
            r#"{"x": 2}"#,
            "ok",
        ),
        // The value got past the first alternative's type: blame that alternative.
        (
            r#"x: {"anyOf":[{"type":"integer","minimum":1},{"type":"null"}]}"#,
            r#"{"x": 0}"#,
            "OutOfRange @ x",
        ),
        (
            r#"x: {"anyOf":[{"type":"integer","minimum":1},{"type":"null"}]}"#,
            r#"{"x": "a"}"#,
            "WrongType @ x",
        ),
        (
            r#"x: {"anyOf":[{"type":"object","required":["a"]},{"type":"object","required":["b"]}]}"#,
            r#"{"x": {}}"#,
            "Combinator @ x",
        ),
        (
            r#"x: {"anyOf":[{"type":"object","required":["a"]},{"type":"object","required":["b"]}]}"#,
            r#"{"x": {"b": 1}}"#,
            "ok",
        ),
        (
            r#"x: {"anyOf":[false,{"type":"integer"}]}"#,
            r#"{"x": "a"}"#,
            "WrongType @ x",
        ),
        (
            r#"x: {"oneOf":[{"type":"integer"},{"type":"number"}]}"#,
            r#"{"x": 1}"#,
            "Combinator @ x",
        ),
        (
            r#"x: {"oneOf":[{"type":"integer"},{"type":"number"}]}"#,
            r#"{"x": 1.5}"#,
            "ok",
        ),
        (
            r#"x: {"oneOf":[{"type":"string"},{"type":"integer"}]}"#,
            r#"{"x": true}"#,
            "WrongType @ x",
        ),
        (
            r#"x: {"oneOf":[{"type":"string","maxLength":1},{"type":"integer"}]}"#,
            r#"{"x": "ab"}"#,
            "Length @ x",
        ),
        (
            r#"x: {"allOf":[{"type":"integer"},{"minimum":3}]}"#,
            r#"{"x": 2}"#,
            "OutOfRange @ x",
        ),
        (
            r#"x: {"allOf":[{"type":"integer"},{"minimum":3}]}"#,
            r#"{"x": 3}"#,
            "ok",
        ),
        (r#"x: {"not":{"type":"string"}}"#, r#"{"x": 1}"#, "ok"),
        (
            r#"x: {"not":{"type":"string"}}"#,
            r#"{"x": "a"}"#,
            "Combinator @ x",
        ),
        (
            r#"x: {"anyOf":[{"type":"array","items":{"type":"integer"}},{"type":"null"}]}"#,
            r#"{"x": [1, "a"]}"#,
            "WrongType @ x[1]",
        ),
    ]);
}

/// A pydantic v2 model_json_schema() for `Order(items: list[Item], color: Color = "red",
/// note: str | None = None)`.
const ORDER: &str = r##"{"$defs":{
    "Color":{"enum":["red","green"],"title":"Color","type":"string"},
    "Item":{"properties":{"name":{"title":"Name","type":"string"},"qty":{"default":1,"title":"Qty","type":"integer"}},
            "required":["name"],"title":"Item","type":"object"}},
  "properties":{"items":{"items":{"$ref":"#/$defs/Item"},"title":"Items","type":"array"},
    "color":{"$ref":"#/$defs/Color","default":"red"},
    "note":{"anyOf":[{"type":"string"},{"type":"null"}],"default":null,"title":"Note"}},
  "required":["items"],"title":"Order","type":"object"}"##;

/// pydantic's shape for a recursive model: the root is a `$ref`.
const NODE: &str = r##"{"$defs":{"Node":{"type":"object","properties":{"value":{"type":"integer"},
    "next":{"anyOf":[{"$ref":"#/$defs/Node"},{"type":"null"}],"default":null}},"required":["value"]}},
  "$ref":"#/$defs/Node"}"##;

#[test]
fn refs() {
    run_table(&[
        (
            ORDER,
            r#"{"items": [{"name": "a"}, {"name": "b", "qty": 2}]}"#,
            "ok",
        ),
        (
            ORDER,
            r#"{"items": [{"name": "a", "qty": "x"}]}"#,
            "WrongType @ items[0].qty",
        ),
        (
            ORDER,
            r#"{"items": [{}]}"#,
            "MissingArgument @ items[0].name",
        ),
        (ORDER, r#"{"items": [], "color": "blue"}"#, "Enum @ color"),
        (
            ORDER,
            r#"{"items": [], "color": "green", "note": null}"#,
            "ok",
        ),
        (ORDER, r#"{"items": [], "note": 5}"#, "WrongType @ note"),
        (ORDER, r#"{"color": "red"}"#, "MissingArgument @ items"),
        (
            NODE,
            r#"{"value": 1, "next": {"value": 2, "next": null}}"#,
            "ok",
        ),
        (
            NODE,
            r#"{"value": 1, "next": {"value": "2"}}"#,
            "WrongType @ next.value",
        ),
        (
            NODE,
            r#"{"value": 1, "next": {"next": null}}"#,
            "MissingArgument @ next.value",
        ),
        (
            r##"{"definitions":{"A":{"type":"integer"}},"properties":{"a":{"$ref":"#/definitions/A"}}}"##,
            r#"{"a": "x"}"#,
            "WrongType @ a",
        ),
        (
            r##"{"type":"object","properties":{"child":{"$ref":"#"},"n":{"type":"integer"}}}"##,
            r#"{"child": {"child": {"n": 1}}}"#,
            "ok",
        ),
        (
            r##"{"type":"object","properties":{"child":{"$ref":"#"},"n":{"type":"integer"}}}"##,
            r#"{"child": {"child": {"n": "1"}}}"#,
            "WrongType @ child.child.n",
        ),
        (
            r##"{"$defs":{"a/b":{"type":"integer"}},"properties":{"x":{"$ref":"#/$defs/a~1b"}}}"##,
            r#"{"x": "s"}"#,
            "WrongType @ x",
        ),
        (
            r##"{"$defs":{"a b":{"type":"integer"}},"properties":{"x":{"$ref":"#/$defs/a%20b"}}}"##,
            r#"{"x": "s"}"#,
            "WrongType @ x",
        ),
        // `$ref` applies beside its siblings (2020-12).
        (
            r##"{"$defs":{"A":{"type":"integer"}},"properties":{"x":{"$ref":"#/$defs/A","minimum":5}}}"##,
            r#"{"x": 4}"#,
            "OutOfRange @ x",
        ),
    ]);
}

#[test]
fn validates_input_still_checks_the_subset() {
    let schema = json(
        r#"{"type":"object","properties":{"a":{"type":"integer","if":{"minimum":0},"then":{"maximum":9}}},
            "patternProperties":{"^x":{}},"additionalProperties":false}"#,
    );
    assert_eq!(
        compiled(&schema, STRICT),
        "UnknownKeyword @ /properties/a/if"
    );
    let schema = InputSchema::compile(&schema, LAX).unwrap();
    let cases = [
        (r#"{"a": 100}"#, "ok"),
        (r#"{"a": "s"}"#, "WrongType @ a"),
        // The ignored patternProperties leaves additionalProperties unchecked.
        (r#"{"a": 1, "x1": 2, "y": 3}"#, "ok"),
    ];
    for (arguments, expected) in cases {
        assert_eq!(
            validated(&schema, &args(arguments)),
            expected,
            "{arguments}"
        );
    }
    // Without patternProperties, additionalProperties still holds.
    let schema =
        json(r#"{"type":"object","properties":{"a":{"x-custom":1}},"additionalProperties":false}"#);
    let schema = InputSchema::compile(&schema, LAX).unwrap();
    assert_eq!(
        validated(&schema, &args(r#"{"b": 1}"#)),
        "UnknownArgument @ b"
    );
}

#[test]
fn compile() {
    let cases: &[(&str, Options, &str)] = &[
        (PRICE, STRICT, "ok"),
        (ORDER, STRICT, "ok"),
        (NODE, STRICT, "ok"),
        (r#"{"type":"object"}"#, STRICT, "ok"),
        (r#"{"properties":{}}"#, STRICT, "ok"),
        (r#"{"type":["object"]}"#, STRICT, "ok"),
        (r#"{}"#, STRICT, "NotAnObject @ "),
        (r#"[]"#, STRICT, "NotAnObject @ "),
        (r#"true"#, STRICT, "NotAnObject @ "),
        (r#"{"type":"array"}"#, STRICT, "NotAnObject @ "),
        (r#"{"type":["object","null"]}"#, STRICT, "NotAnObject @ "),
        (
            r##"{"$defs":{"A":{"type":"string"}},"$ref":"#/$defs/A"}"##,
            STRICT,
            "NotAnObject @ ",
        ),
        // Top-level property names are the guest's parameters.
        (
            r#"{"properties":{"class":{}}}"#,
            STRICT,
            "PythonKeyword @ /properties/class",
        ),
        (
            r#"{"properties":{"None":{}}}"#,
            STRICT,
            "PythonKeyword @ /properties/None",
        ),
        (
            r#"{"properties":{"await":{}}}"#,
            LAX,
            "PythonKeyword @ /properties/await",
        ),
        (
            r#"{"properties":{"2x":{}}}"#,
            STRICT,
            "NotAnIdentifier @ /properties/2x",
        ),
        (
            r#"{"properties":{"a-b":{}}}"#,
            STRICT,
            "NotAnIdentifier @ /properties/a-b",
        ),
        (
            r#"{"properties":{"a/b":{}}}"#,
            STRICT,
            "NotAnIdentifier @ /properties/a~1b",
        ),
        (
            r#"{"properties":{"é":{}}}"#,
            STRICT,
            "NotAnIdentifier @ /properties/é",
        ),
        (
            r#"{"properties":{"":{}}}"#,
            STRICT,
            "NotAnIdentifier @ /properties/",
        ),
        (
            r#"{"properties":{"match":{},"case":{},"type":{},"_":{},"_x9":{}}}"#,
            STRICT,
            "ok",
        ),
        (
            r##"{"$defs":{"N":{"type":"object","properties":{"for":{}}}},"$ref":"#/$defs/N"}"##,
            STRICT,
            "PythonKeyword @ /$defs/N/properties/for",
        ),
        (
            r#"{"properties":{"x":{"type":"object","properties":{"class":{},"a-b":{}}}}}"#,
            STRICT,
            "ok",
        ),
        (
            r#"{"properties":{"a":{}},"required":["b"]}"#,
            STRICT,
            "RequiredNotAProperty @ /required/0",
        ),
        (
            r#"{"properties":{"x":{"type":"object","required":["b"]}}}"#,
            STRICT,
            "ok",
        ),
        // Keywords outside the subset.
        (
            r#"{"properties":{"x":{"patternProperties":{}}}}"#,
            STRICT,
            "UnknownKeyword @ /properties/x/patternProperties",
        ),
        (
            r#"{"properties":{"x":{"patternProperties":{}}}}"#,
            LAX,
            "ok",
        ),
        (
            r#"{"type":"object","if":{}}"#,
            STRICT,
            "UnknownKeyword @ /if",
        ),
        (r#"{"type":"object","if":{}}"#, LAX, "ok"),
        (
            r#"{"properties":{"x":{"oneOf":[{}],"discriminator":{"propertyName":"k"}}}}"#,
            STRICT,
            "UnknownKeyword @ /properties/x/discriminator",
        ),
        (
            r#"{"properties":{"x":{"$defs":{}}}}"#,
            STRICT,
            "UnknownKeyword @ /properties/x/$defs",
        ),
        (
            r#"{"properties":{"x":{"$id":"y"}}}"#,
            STRICT,
            "UnknownKeyword @ /properties/x/$id",
        ),
        (
            r#"{"properties":{"x":{"items":[{}]}}}"#,
            LAX,
            "Malformed @ /properties/x/items",
        ),
        (
            r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"urn:t","$comment":"c","title":"T","type":"object",
                "properties":{"x":{"description":"d","default":1,"examples":[1],"deprecated":true,"readOnly":false,
                "writeOnly":false,"format":"date","contentMediaType":"text/plain"}}}"#,
            STRICT,
            "ok",
        ),
        // Malformed values of subset keywords, refused either way.
        (
            r#"{"type":"object","required":3}"#,
            STRICT,
            "Malformed @ /required",
        ),
        (
            r#"{"type":"object","required":["a","a"],"properties":{"a":{}}}"#,
            STRICT,
            "Malformed @ /required/1",
        ),
        (
            r#"{"properties":{"x":{"minimum":"x"}}}"#,
            STRICT,
            "Malformed @ /properties/x/minimum",
        ),
        (
            r#"{"properties":{"x":{"minimum":"x"}}}"#,
            LAX,
            "Malformed @ /properties/x/minimum",
        ),
        (
            r#"{"properties":{"x":{"exclusiveMinimum":true}}}"#,
            STRICT,
            "Malformed @ /properties/x/exclusiveMinimum",
        ),
        (
            r#"{"properties":{"x":{"type":"int"}}}"#,
            STRICT,
            "Malformed @ /properties/x/type",
        ),
        (
            r#"{"properties":{"x":{"type":"int"}}}"#,
            LAX,
            "Malformed @ /properties/x/type",
        ),
        (
            r#"{"properties":{"x":{"type":[]}}}"#,
            STRICT,
            "Malformed @ /properties/x/type",
        ),
        (
            r#"{"properties":{"x":{"type":["string","string"]}}}"#,
            STRICT,
            "Malformed @ /properties/x/type",
        ),
        (
            r#"{"properties":{"x":{"type":3}}}"#,
            STRICT,
            "Malformed @ /properties/x/type",
        ),
        (
            r#"{"properties":{"x":{"minLength":-1}}}"#,
            STRICT,
            "Malformed @ /properties/x/minLength",
        ),
        (
            r#"{"properties":{"x":{"minLength":1.5}}}"#,
            STRICT,
            "Malformed @ /properties/x/minLength",
        ),
        (r#"{"properties":{"x":{"minLength":2.0}}}"#, STRICT, "ok"),
        (
            r#"{"properties":{"x":{"maxItems":"3"}}}"#,
            STRICT,
            "Malformed @ /properties/x/maxItems",
        ),
        (
            r#"{"properties":{"x":{"multipleOf":0}}}"#,
            STRICT,
            "Malformed @ /properties/x/multipleOf",
        ),
        (
            r#"{"properties":{"x":{"multipleOf":-2}}}"#,
            STRICT,
            "Malformed @ /properties/x/multipleOf",
        ),
        (
            r#"{"properties":{"x":{"enum":1}}}"#,
            STRICT,
            "Malformed @ /properties/x/enum",
        ),
        (
            r#"{"properties":{"x":{"anyOf":[]}}}"#,
            STRICT,
            "Malformed @ /properties/x/anyOf",
        ),
        (
            r#"{"properties":{"x":{"allOf":{}}}}"#,
            STRICT,
            "Malformed @ /properties/x/allOf",
        ),
        (
            r#"{"properties":{"x":{"prefixItems":[]}}}"#,
            STRICT,
            "Malformed @ /properties/x/prefixItems",
        ),
        (r#"{"properties":[]}"#, STRICT, "Malformed @ /properties"),
        (
            r#"{"type":"object","additionalProperties":1}"#,
            STRICT,
            "Malformed @ /additionalProperties",
        ),
        (
            r#"{"properties":{"x":{"uniqueItems":"yes"}}}"#,
            STRICT,
            "Malformed @ /properties/x/uniqueItems",
        ),
        (
            r#"{"properties":{"x":5}}"#,
            STRICT,
            "Malformed @ /properties/x",
        ),
        (
            r#"{"properties":{"x":{"not":[]}}}"#,
            STRICT,
            "Malformed @ /properties/x/not",
        ),
        (
            r#"{"properties":{"x":{"$ref":5}}}"#,
            STRICT,
            "Malformed @ /properties/x/$ref",
        ),
        (
            r#"{"type":"object","$defs":3}"#,
            STRICT,
            "Malformed @ /$defs",
        ),
        (
            r#"{"type":"object","$defs":{"A":{"items":[]}}}"#,
            STRICT,
            "Malformed @ /$defs/A/items",
        ),
        (
            r#"{"type":"object","$defs":{"A":{"if":{}}}}"#,
            STRICT,
            "UnknownKeyword @ /$defs/A/if",
        ),
        (
            r#"{"properties":{"x":{"pattern":"("}}}"#,
            STRICT,
            "BadPattern @ /properties/x/pattern",
        ),
        (
            r#"{"properties":{"x":{"pattern":"(?=a)"}}}"#,
            LAX,
            "BadPattern @ /properties/x/pattern",
        ),
        (
            r#"{"properties":{"x":{"pattern":5}}}"#,
            STRICT,
            "Malformed @ /properties/x/pattern",
        ),
        (
            r#"{"properties":{"x":{"contentEncoding":"base32"}}}"#,
            STRICT,
            "UnsupportedEncoding @ /properties/x/contentEncoding",
        ),
        (
            r#"{"properties":{"x":{"contentEncoding":5}}}"#,
            STRICT,
            "Malformed @ /properties/x/contentEncoding",
        ),
        // References.
        (
            r##"{"properties":{"x":{"$ref":"#/$defs/Nope"}}}"##,
            STRICT,
            "UnresolvedRef @ /properties/x/$ref",
        ),
        (
            r##"{"properties":{"x":{"$ref":"other.json#/$defs/A"}}}"##,
            STRICT,
            "UnresolvedRef @ /properties/x/$ref",
        ),
        (
            r##"{"properties":{"x":{"$ref":"#/properties/y"},"y":{}}}"##,
            STRICT,
            "UnresolvedRef @ /properties/x/$ref",
        ),
        (
            r##"{"$defs":{"A":{"properties":{"b":{}}}},"properties":{"x":{"$ref":"#/$defs/A/properties/b"}}}"##,
            STRICT,
            "UnresolvedRef @ /properties/x/$ref",
        ),
        (
            r##"{"$defs":{"A":{}},"properties":{"x":{"$ref":"#/definitions/A"}}}"##,
            STRICT,
            "UnresolvedRef @ /properties/x/$ref",
        ),
        (
            r##"{"$defs":{"A":{}},"properties":{"x":{"$ref":"#/$defs/A%zz"}}}"##,
            STRICT,
            "UnresolvedRef @ /properties/x/$ref",
        ),
        (
            r##"{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"allOf":[{"$ref":"#/$defs/a"}]}},"type":"object"}"##,
            STRICT,
            "RefCycle @ /$defs/b/allOf/0",
        ),
        (
            r##"{"type":"object","anyOf":[{"not":{"$ref":"#"}}]}"##,
            STRICT,
            "RefCycle @ /anyOf/0/not",
        ),
        (
            r##"{"$defs":{"a":{"$ref":"#/$defs/a"}},"type":"object"}"##,
            STRICT,
            "RefCycle @ /$defs/a",
        ),
        (
            r##"{"type":"object","properties":{"x":{"$ref":"#"}},"additionalProperties":{"items":{"$ref":"#"}}}"##,
            STRICT,
            "ok",
        ),
    ];
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|&(schema, opts, expected)| {
            let got = compiled(&json(schema), opts);
            (got != expected)
                .then(|| format!("{schema}\n    ({opts:?}) expected {expected}, got {got}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn deep_schemas_and_values() {
    // A schema nested past the compiler's depth.
    // (Built as a value: serde_json's parser stops at 128 levels.)
    let mut deep = serde_json::json!({});
    for _ in 0..200 {
        deep = serde_json::json!({ "not": deep });
    }
    let got = compiled(
        &serde_json::json!({"type": "object", "properties": {"x": deep}}),
        STRICT,
    );
    assert_eq!(
        got,
        format!("TooDeep @ /properties/x{}", "/not".repeat(128))
    );

    // Values past 64 levels.
    let schema = InputSchema::compile(
        &json(r##"{"type":"object","properties":{"c":{"$ref":"#"}}}"##),
        STRICT,
    )
    .unwrap();
    let nested =
        |levels: usize| format!("{}{{}}{}", r#"{"c": "#.repeat(levels), "}".repeat(levels));
    assert_eq!(validated(&schema, &args(&nested(63))), "ok");
    assert_eq!(validated(&schema, &args(&nested(64))), "TooDeep @ ");

    // Schema applications past 512 along one path: each level applies 9 in-place schemas.
    let mut chain = String::from(r##"{"$ref":"#"}"##);
    for _ in 0..8 {
        chain = format!(r#"{{"allOf":[{chain}]}}"#);
    }
    let schema = json(&format!(
        r#"{{"type":"object","properties":{{"c":{chain}}}}}"#
    ));
    let schema = InputSchema::compile(&schema, STRICT).unwrap();
    assert_eq!(validated(&schema, &args(&nested(20))), "ok");
    assert_eq!(validated(&schema, &args(&nested(60))), "TooDeep @ ");
}

#[test]
fn fixed_keywords() {
    let schema = InputSchema::compile(
        &json(r#"{"type":"object","properties":{"limit":{"type":"integer"}}}"#),
        STRICT,
    )
    .unwrap();
    let call = args(r#"{"limit": 3, "user_id": 7}"#);
    assert_eq!(schema.validate(&call), Ok(()));
    let err = schema
        .validate_with_fixed(&call, &["user_id", "api_key"])
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.path()),
        (ArgumentErrorKind::Fixed, "user_id")
    );
    assert_eq!(
        schema.validate_with_fixed(&args(r#"{"limit": 3}"#), &["user_id"]),
        Ok(())
    );
    // The fixed check comes first, even before the schema's own refusals.
    let err = schema
        .validate_with_fixed(&args(r#"{"limit": "x", "api_key": 1}"#), &["api_key"])
        .unwrap_err();
    assert_eq!(err.kind(), ArgumentErrorKind::Fixed);
}

#[test]
fn property_names_keep_schema_order() {
    let schema = InputSchema::compile(
        &json(r#"{"properties":{"zeta":{},"alpha":{},"mid":{}},"required":["mid","zeta"]}"#),
        STRICT,
    )
    .unwrap();
    assert_eq!(
        schema.property_names().collect::<Vec<_>>(),
        ["zeta", "alpha", "mid"]
    );
    assert_eq!(schema.required().collect::<Vec<_>>(), ["mid", "zeta"]);
    let schema = InputSchema::compile(&json(NODE), STRICT).unwrap();
    assert_eq!(
        schema.property_names().collect::<Vec<_>>(),
        ["value", "next"]
    );
    // Many properties go through an index; lookups still work.
    let many: Vec<String> = (0..20)
        .map(|i| format!(r#""p{i}":{{"type":"integer"}}"#))
        .collect();
    let schema = InputSchema::compile(
        &json(&format!(
            r#"{{"type":"object","properties":{{{}}},"additionalProperties":false}}"#,
            many.join(",")
        )),
        STRICT,
    )
    .unwrap();
    assert_eq!(validated(&schema, &args(r#"{"p19": 1, "p0": 2}"#)), "ok");
    assert_eq!(
        validated(&schema, &args(r#"{"p19": "1"}"#)),
        "WrongType @ p19"
    );
    assert_eq!(
        validated(&schema, &args(r#"{"p20": 1}"#)),
        "UnknownArgument @ p20"
    );
}

/// The messages the guest reads are part of the protocol (artifact-abi §6.3): these few are
/// pinned; everything else is matched by kind.
#[test]
fn guest_messages() {
    let price = InputSchema::compile(&json(PRICE), STRICT).unwrap();
    let message =
        |schema: &InputSchema, a: &str| schema.validate(&args(a)).unwrap_err().message().to_owned();
    assert_eq!(
        message(&price, r#"{"item": "a", "extra": 1}"#),
        "unknown argument 'extra'"
    );
    assert_eq!(message(&price, r#"{}"#), "missing required argument 'item'");
    assert_eq!(
        message(&price, r#"{"item": "a", "qty": "2"}"#),
        "argument 'qty': expected an integer, got a string"
    );
    let optional = InputSchema::compile(
        &schema_of(r#"x: {"anyOf":[{"type":"integer"},{"type":"null"}]}"#),
        STRICT,
    )
    .unwrap();
    assert_eq!(
        message(&optional, r#"{"x": 1.5}"#),
        "argument 'x': expected an integer or null, got a float"
    );
    let fixed = price
        .validate_with_fixed(&args(r#"{"user_id": 1}"#), &["user_id"])
        .unwrap_err();
    assert_eq!(fixed.message(), "argument 'user_id' is fixed by the host");
    // Guest-provided text is cut to 64 characters.
    let long = "k".repeat(100);
    let cut = message(&price, &format!(r#"{{"item": "a", "{long}": 1}}"#));
    assert_eq!(cut, format!("unknown argument '{}…'", "k".repeat(64)));
}

#[test]
fn a_compiled_schema_is_shared_across_threads() {
    fn shareable<T: Send + Sync + Clone + 'static>() {}
    shareable::<InputSchema>();
    let schema = std::sync::Arc::new(InputSchema::compile(&json(PRICE), STRICT).unwrap());
    let handles: Vec<_> = (0..2)
        .map(|i| {
            let schema = schema.clone();
            std::thread::spawn(move || {
                validated(&schema, &args(&format!(r#"{{"item": "a", "qty": {i}}}"#)))
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), "ok");
    }
}
