//! decode_response: answers read as the guest reads them (§6.3).

use wasi_python_protocol::{AnswerKind, ErrorKind, Response, Value, decode_response};

use crate::{render_response, run_table};

/// `(frame, expected)`: `list[ id=N] [...]`, `ok[ id=N] value`, `fail[ id=N] kind "message"`
/// or `err Kind @ offset[ id=N]`.
const ROWS: &[(&str, &str)] = &[
    // The answers a host sends.
    (r#"{"v":1,"id":1,"ok":true,"tools":[]}"#, "list id=1 []"),
    (
        r#"{"v":1,"id":1,"ok":true,"tools":[{"name":"price","inputSchema":{"type":"object"}}]}"#,
        r#"list id=1 [{"name":"price","inputSchema":{"type":"object"}}]"#,
    ),
    (
        r#"{"v":1,"id":8,"ok":true,"value":{"$bytes":"AQA="}}"#,
        r#"ok id=8 {"$bytes":"AQA="}"#,
    ),
    (
        r#"{"v":1,"id":8,"ok":true,"value":[1,2.5,"x",null,{"a":{"$bytes":""}}]}"#,
        r#"ok id=8 [1,2.5,"x",null,{"a":{"$bytes":""}}]"#,
    ),
    (
        r#"{"v":1,"id":6,"ok":false,"error":{"kind":"invalid_arguments","message":"price: the arguments: unknown argument 'extra'"}}"#,
        r#"fail id=6 invalid_arguments "price: the arguments: unknown argument 'extra'""#,
    ),
    // Ids: null and absent are accepted (None); anything but a request id is refused.
    (r#"{"v":1,"id":null,"ok":true,"value":1}"#, "ok 1"),
    (r#"{"v":1,"ok":true,"value":1}"#, "ok 1"),
    (r#"{"v":1,"id":"1","ok":true}"#, "err WrongType @ 12"),
    (r#"{"v":1,"id":-1,"ok":true}"#, "err WrongType @ 12"),
    (r#"{"v":1,"id":1.0,"ok":true}"#, "err WrongType @ 12"),
    (
        r#"{"v":1,"id":9007199254740992,"ok":true}"#,
        "err WrongType @ 12",
    ),
    // Leniency, as the guest: a missing value is None; a bad kind is tool_error, a bad
    // message is "", and an unknown kind is kept.
    (r#"{"v":1,"id":2,"ok":true}"#, "ok id=2 null"),
    (
        r#"{"v":1,"id":2,"ok":false,"error":{"kind":5,"message":"m"}}"#,
        r#"fail id=2 tool_error "m""#,
    ),
    (
        r#"{"v":1,"id":2,"ok":false,"error":{"kind":"denied","message":[1]}}"#,
        r#"fail id=2 denied """#,
    ),
    (
        r#"{"v":1,"id":2,"ok":false,"error":{"kind":"weird","message":"m"}}"#,
        r#"fail id=2 ?weird "m""#,
    ),
    (
        r#"{"v":1,"id":2,"ok":false,"error":"boom"}"#,
        r#"fail id=2 tool_error """#,
    ),
    (r#"{"v":1,"id":2,"ok":false}"#, r#"fail id=2 tool_error """#),
    (
        r#"{"v":1,"id":2,"ok":false,"error":{},"value":1,"tools":[]}"#,
        r#"fail id=2 tool_error """#,
    ),
    // Unknown keys are ignored; "tools" makes an ok answer a list answer.
    (
        r#"{"v":1,"id":3,"ok":true,"value":1,"extra":{"$bytes":"eQ=="}}"#,
        "ok id=3 1",
    ),
    // ... though read by the same rules as the rest (stricter than the guest, which
    // converts only "value").
    (
        r#"{"v":1,"id":3,"ok":true,"value":1,"extra":{"$bytes":"x"}}"#,
        "err BadBytes @ 52 id=3",
    ),
    (
        r#"{"v":1,"id":3,"ok":true,"tools":[],"value":1}"#,
        "list id=3 []",
    ),
    (
        r#"{"v":1,"id":3,"ok":true,"tools":{}}"#,
        "err WrongType @ 32 id=3",
    ),
    // $bytes: an object that is exactly {"$bytes": "<str>"} is bytes and must be strict;
    // any other object with that key stays an object.
    (
        r#"{"v":1,"ok":true,"value":{"$bytes":"eQ="}}"#,
        "err BadBytes @ 35",
    ),
    (
        r#"{"v":1,"ok":true,"value":{"$bytes":"eR=="}}"#,
        "err BadBytes @ 35",
    ),
    (
        r#"{"v":1,"ok":true,"value":{"$bytes":"eQ==","x":1}}"#,
        r#"ok {"$bytes":"eQ==","x":1}"#,
    ),
    (
        r#"{"v":1,"ok":true,"value":{"x":1,"$bytes":"eQ=="}}"#,
        r#"ok {"x":1,"$bytes":"eQ=="}"#,
    ),
    (
        r#"{"v":1,"ok":true,"value":{"$bytes":5}}"#,
        r#"ok {"$bytes":5}"#,
    ),
    (
        r#"{"v":1,"ok":true,"value":{"$bytes":"eQ==","$bytes":"eQ=="}}"#,
        "err DuplicateKey @ 42",
    ),
    // Version and shape.
    (r#"{"v":2,"id":1,"ok":true}"#, "err Version @ 5 id=1"),
    (r#"{"v":"1","ok":true}"#, "err Version @ 5"),
    (r#"{"id":1,"ok":true}"#, "err Version @ - id=1"),
    (r#"{"v":1,"id":1}"#, "err MissingField @ - id=1"),
    (r#"{"v":1,"ok":1}"#, "err WrongType @ 12"),
    (r#"{"v":1,"ok":"true"}"#, "err WrongType @ 12"),
    (r#"{"v":1,"ok":null}"#, "err WrongType @ 12"),
    ("[1]", "err NotObject @ 0"),
    ("", "err Syntax @ 0"),
    (
        r#"{"v":1,"id":4,"ok":true,"value":[1,]}"#,
        "err Syntax @ 35 id=4",
    ),
    (r#"{"v":1,"ok":true,"value":NaN}"#, "err NonFinite @ 25"),
    (
        r#"{"v":1,"ok":true,"value":"\udc00"}"#,
        "err LoneSurrogate @ 26",
    ),
];

#[test]
fn answer_table() {
    run_table(ROWS.iter().map(|&(i, e)| (i, e.to_owned())), |input| {
        render_response(&decode_response(input.as_bytes()))
    });
}

#[test]
fn answer_not_utf8() {
    let e = decode_response(b"{\"v\":1,\"ok\":true,\"value\":\"\xfe\"}").expect_err("refused");
    assert_eq!(crate::render_error(&e), "err Utf8 @ 26");
}

#[test]
fn answer_values_are_typed() {
    let frame = br#"{"v":1,"id":8,"ok":true,"value":{"b":{"$bytes":"AQA="},"n":18446744073709551616,"f":1.0}}"#;
    let Ok(Response::Ok {
        id: Some(8),
        value: Value::Object(map),
    }) = decode_response(frame)
    else {
        panic!("refused");
    };
    assert_eq!(map.get("b"), Some(&Value::Bytes(vec![1, 0])));
    assert_eq!(
        map.get("n"),
        Some(&Value::BigInt("18446744073709551616".into()))
    );
    assert_eq!(map.get("f"), Some(&Value::Float(1.0)));
}

#[test]
fn every_known_kind_is_read() {
    for kind in ErrorKind::ALL {
        let frame = format!(
            r#"{{"v":1,"id":1,"ok":false,"error":{{"kind":"{}","message":""}}}}"#,
            kind.as_str()
        );
        let got = decode_response(frame.as_bytes()).expect("read");
        let Response::Err {
            kind: AnswerKind::Known(read),
            ..
        } = got
        else {
            panic!("{kind} was not read as a known kind");
        };
        assert_eq!(read, kind);
    }
}
