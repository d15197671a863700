//! The encoders: exact bytes for each answer and request shape.

use wasi_python_protocol::{
    AnswerKind, DecodeErrorKind, ErrorKind, ListAnswer, MAX_MESSAGE_CHARS, Map, Request, Response,
    Value, cut_chars, decode_response, encode_answers, encode_error, encode_ok, encode_request,
    encode_response, encode_started, is_valid_tool_name,
};

use crate::run_table;

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).expect("the encoder writes UTF-8")
}

fn obj(entries: &[(&str, Value)]) -> Value {
    Value::Object(Map(entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()))
}

#[test]
fn ok_answers() {
    let rows: Vec<(Value, String)> = [
        (Value::Null, "null"),
        (Value::Bool(true), "true"),
        (Value::Bool(false), "false"),
        (Value::Int(0), "0"),
        (Value::Int(-12), "-12"),
        (Value::Int(i64::MIN), "-9223372036854775808"),
        (Value::Int(i64::MAX), "9223372036854775807"),
        (
            Value::BigInt("-100000000000000000000".into()),
            "-100000000000000000000",
        ),
        // Floats as Python's repr writes them (checked against CPython 3.11).
        (Value::Float(1.0), "1.0"),
        (Value::Float(0.1), "0.1"),
        (Value::Float(-0.0), "-0.0"),
        (Value::Float(0.0), "0.0"),
        (Value::Float(1e16), "1e+16"),
        (Value::Float(1e15), "1000000000000000.0"),
        (Value::Float(1.5e-5), "1.5e-05"),
        (Value::Float(1e-4), "0.0001"),
        (Value::Float(1e300), "1e+300"),
        (Value::Float(5e-324), "5e-324"),
        (Value::Float(123_456_789.123), "123456789.123"),
        (Value::Float(1_234_567_890_123_456.0), "1234567890123456.0"),
        (
            Value::Float(12_345_678_901_234_567.0),
            "1.2345678901234568e+16",
        ),
        (Value::Float(f64::MAX), "1.7976931348623157e+308"),
        (Value::Float(-3.25e-10), "-3.25e-10"),
        (Value::Float(100.0), "100.0"),
        (Value::Float(9_007_199_254_740_992.0), "9007199254740992.0"),
        (Value::Float(1e22), "1e+22"),
        (Value::Float(1e-7), "1e-07"),
        // A Value should never hold these; the encoder still writes valid JSON.
        (Value::Float(f64::NAN), "null"),
        (Value::Float(f64::NEG_INFINITY), "null"),
        // Strings: JSON escapes, control characters as \u00XX, the rest raw UTF-8.
        (Value::Str(String::new()), r#""""#),
        (
            Value::Str("a\u{0}\u{1f}\u{7f}\u{2028}\"\\/\u{8}\u{c}\n\r\té😀".into()),
            "\"a\\u0000\\u001f\u{7f}\u{2028}\\\"\\\\/\\b\\f\\n\\r\\té😀\"",
        ),
        (
            Value::Str("x".repeat(20) + "\"" + &"y".repeat(9)),
            &format!(r#""{}\"{}""#, "x".repeat(20), "y".repeat(9)),
        ),
        // Bytes, every padding length.
        (Value::Bytes(vec![]), r#"{"$bytes":""}"#),
        (Value::Bytes(b"y".to_vec()), r#"{"$bytes":"eQ=="}"#),
        (Value::Bytes(vec![0, 255]), r#"{"$bytes":"AP8="}"#),
        (Value::Bytes(vec![1, 0]), r#"{"$bytes":"AQA="}"#),
        (Value::Bytes(vec![0xfb, 0xff, 0xbf]), r#"{"$bytes":"+/+/"}"#),
        (
            Value::Bytes(b"any carnal pleasure".to_vec()),
            r#"{"$bytes":"YW55IGNhcm5hbCBwbGVhc3VyZQ=="}"#,
        ),
        // Containers.
        (Value::Array(vec![]), "[]"),
        (obj(&[]), "{}"),
        (
            Value::Array(vec![
                Value::Int(1),
                Value::Array(vec![]),
                obj(&[("a", Value::Null)]),
            ]),
            r#"[1,[],{"a":null}]"#,
        ),
        (
            obj(&[
                ("z", Value::Int(1)),
                ("a", obj(&[("é\n", Value::Bytes(vec![]))])),
            ]),
            r#"{"z":1,"a":{"é\n":{"$bytes":""}}}"#,
        ),
    ]
    .into_iter()
    .map(|(v, e)| (v, format!(r#"{{"v":1,"id":7,"ok":true,"value":{e}}}"#)))
    .collect();
    run_table(rows, |value| text(encode_ok(Some(7), value)));
}

#[test]
fn deep_values_encode_without_recursion() {
    let mut value = Value::Null;
    for _ in 0..200_000 {
        value = Value::Array(vec![value]);
    }
    let out = encode_ok(None, &value);
    assert_eq!(
        out.len(),
        r#"{"v":1,"id":null,"ok":true,"value":}"#.len() + 4 + 2 * 200_000
    );
    // Dropping so deep a value recursively would overflow the stack: unwind it by hand.
    while let Value::Array(mut items) = value {
        value = items.pop().unwrap_or(Value::Null);
    }
}

#[test]
fn error_answers() {
    type Row = ((Option<u64>, ErrorKind, String), String);
    let rows: Vec<Row> = vec![
        (
            (Some(6), ErrorKind::InvalidArguments, "price: the arguments: unknown argument 'extra'".into()),
            r#"{"v":1,"id":6,"ok":false,"error":{"kind":"invalid_arguments","message":"price: the arguments: unknown argument 'extra'"}}"#.into(),
        ),
        (
            (None, ErrorKind::TooLarge, "a \"big\"\nframe".into()),
            r#"{"v":1,"id":null,"ok":false,"error":{"kind":"too_large","message":"a \"big\"\nframe"}}"#.into(),
        ),
        (
            (Some(9_007_199_254_740_991), ErrorKind::Protocol, String::new()),
            r#"{"v":1,"id":9007199254740991,"ok":false,"error":{"kind":"protocol","message":""}}"#.into(),
        ),
    ];
    run_table(rows, |(id, kind, message)| {
        text(encode_error(*id, *kind, message))
    });

    // Messages are cut to 4096 characters (not bytes).
    let long = "é".repeat(MAX_MESSAGE_CHARS + 10);
    let frame = encode_error(Some(1), ErrorKind::ToolError, &long);
    let Ok(Response::Err { message, .. }) = decode_response(&frame) else {
        panic!("unreadable")
    };
    assert_eq!(message.chars().count(), MAX_MESSAGE_CHARS);
}

#[test]
fn every_kind_has_its_wire_name() {
    let names: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "protocol",
            "unknown_tool",
            "invalid_arguments",
            "denied",
            "tool_error",
            "timeout",
            "cancelled",
            "too_large",
            "budget_exceeded"
        ]
    );
    for kind in ErrorKind::ALL {
        assert_eq!(ErrorKind::from_wire(kind.as_str()), Some(kind));
        assert_eq!(kind.as_str().parse::<ErrorKind>(), Ok(kind));
        assert_eq!(kind.to_string(), kind.as_str());
    }
    assert_eq!(ErrorKind::from_wire("Protocol"), None);
    assert!("nope".parse::<ErrorKind>().is_err());
    assert_eq!(
        AnswerKind::from_wire("nope"),
        AnswerKind::Other("nope".into())
    );
    assert_eq!(
        AnswerKind::from_wire("denied"),
        AnswerKind::Known(ErrorKind::Denied)
    );
}

#[test]
fn list_answers() {
    let rows: Vec<(&str, String)> = vec![
        (r#"[{"name":"f"}]"#, r#"{"v":1,"id":3,"ok":true,"tools":[{"name":"f"}]}"#.into()),
        (" [ ] ", r#"{"v":1,"id":3,"ok":true,"tools":[]}"#.into()),
        (
            "[{\"name\": \"price\", \"annotations\": {\"readOnlyHint\": true}, \"d\": \"\u{e9}\"},\n {\"name\":\"b\", \"x\": 1.50}]",
            "{\"v\":1,\"id\":3,\"ok\":true,\"tools\":[{\"name\":\"price\",\"annotations\":{\"readOnlyHint\":true},\"d\":\"\u{e9}\"},{\"name\":\"b\",\"x\":1.5}]}".into(),
        ),
        ("{}", "err WrongType @ 0".into()),
        ("[1]", "err WrongType @ 0".into()),
        (r#"[{"a":1,"a":2}]"#, "err DuplicateKey @ 8".into()),
        ("[", "err Syntax @ 1".into()),
    ];
    run_table(rows, |json| match ListAnswer::new(json) {
        Ok(list) => text(list.encode(Some(3))),
        Err(e) => crate::render_error(&e),
    });

    let list =
        ListAnswer::from_descriptors([r#"{"name":"a"}"#, r#" {"name":"b"} "#]).expect("valid");
    assert_eq!(
        text(list.encode(None)),
        r#"{"v":1,"id":null,"ok":true,"tools":[{"name":"a"},{"name":"b"}]}"#
    );
    assert_eq!(
        list,
        ListAnswer::new(r#"[{"name":"a"},{"name":"b"}]"#).expect("valid")
    );
    let e = ListAnswer::from_descriptors(["[]"]).expect_err("not an object");
    assert_eq!(e.kind, DecodeErrorKind::WrongType);
    // The id is spliced in; the rest is the same bytes every time.
    let many = text(list.encode(Some(123_456)));
    assert_eq!(many.replace("123456", "null"), text(list.encode(None)));
}

#[test]
fn requests_as_the_guest_sends_them() {
    let args = Map(vec![
        ("a".into(), Value::Int(1)),
        ("b".into(), Value::Bytes(b"y".to_vec())),
        ("d".into(), Value::Bytes(vec![0, 255])),
    ]);
    let rows: Vec<(Request, String)> = vec![
        (Request::List { id: Some(1) }, r#"{"v":1,"id":1,"op":"list"}"#.into()),
        (
            Request::Call { id: Some(2), tool: "f".into(), args },
            r#"{"v":1,"id":2,"op":"call","tool":"f","args":{"a":1,"b":{"$bytes":"eQ=="},"d":{"$bytes":"AP8="}}}"#.into(),
        ),
        (
            Request::Call {
                id: Some(3),
                tool: "f".into(),
                args: Map(vec![("a".into(), Value::BigInt("100000000000000000000".into()))]),
            },
            r#"{"v":1,"id":3,"op":"call","tool":"f","args":{"a":100000000000000000000}}"#.into(),
        ),
        (Request::Call { id: None, tool: "t\"".into(), args: Map::new() }, r#"{"v":1,"id":null,"op":"call","tool":"t\"","args":{}}"#.into()),
    ];
    run_table(rows, |request| text(encode_request(request)));
}

#[test]
fn responses_of_every_shape() {
    let rows: Vec<(Response, String)> = vec![
        (
            Response::Ok {
                id: Some(1),
                value: Value::Int(2),
            },
            r#"{"v":1,"id":1,"ok":true,"value":2}"#.into(),
        ),
        (
            Response::List {
                id: None,
                tools: vec![obj(&[])],
            },
            r#"{"v":1,"id":null,"ok":true,"tools":[{}]}"#.into(),
        ),
        (
            Response::Err {
                id: Some(4),
                kind: AnswerKind::Other("odd".into()),
                message: "m".into(),
            },
            r#"{"v":1,"id":4,"ok":false,"error":{"kind":"odd","message":"m"}}"#.into(),
        ),
    ];
    run_table(rows, |response| text(encode_response(response)));
}

#[test]
fn tool_names() {
    let (long, too_long) = ("a".repeat(64), "a".repeat(65));
    let rows: Vec<(&str, String)> = [
        ("price", true),
        ("a", true),
        ("A_1", true),
        ("lookup_region", true),
        (&long, true),
        (&too_long, false),
        ("", false),
        ("_private", false),
        ("1st", false),
        ("has-dash", false),
        ("has space", false),
        ("ünï", false),
        ("class", false),
        ("None", false),
        ("match", true),
        ("type", true),
    ]
    .into_iter()
    .map(|(name, ok)| (name, ok.to_string()))
    .collect();
    run_table(rows, |name| is_valid_tool_name(name).to_string());
}

#[test]
fn cutting_counts_characters() {
    let rows: Vec<((&str, usize), String)> = vec![
        (("abc", 2), "ab".into()),
        (("abc", 3), "abc".into()),
        (("abc", 9), "abc".into()),
        (("ééé", 2), "éé".into()),
        (("😀😀", 1), "😀".into()),
        (("", 0), "".into()),
        (("a", 0), "".into()),
    ];
    run_table(rows, |(s, n)| cut_chars(s, *n).to_owned());
}

#[test]
fn values_are_cheap_to_build() {
    let mut map = Map::with_capacity(2);
    map.push("a", 1i64);
    map.push("b", "x");
    assert_eq!(map.insert("a", true), Some(Value::Int(1)));
    assert_eq!(map.len(), 2);
    assert_eq!(
        Value::from(u64::MAX),
        Value::BigInt("18446744073709551615".into())
    );
    assert_eq!(Value::from(-5i128), Value::Int(-5));
    assert_eq!(Value::big_int("-00012"), Some(Value::Int(-12)));
    assert_eq!(
        Value::big_int("0099999999999999999999"),
        Some(Value::BigInt("99999999999999999999".into()))
    );
    assert_eq!(Value::big_int("-0"), Some(Value::Int(0)));
    assert_eq!(Value::big_int("1e3"), None);
    assert_eq!(Value::big_int("-"), None);
    assert_eq!(Value::big_int("+1"), None);
    let collected: Map = [
        ("k".to_owned(), Value::Null),
        ("k".to_owned(), Value::Int(1)),
    ]
    .into_iter()
    .collect();
    assert_eq!(collected, Map(vec![("k".into(), Value::Int(1))]));
}

/// The answers of calls in parallel: a start's acceptance, a wait's answers (each a whole
/// answer frame, as written for its call), and a list answer with a field added.
#[test]
fn parallel_answers() {
    assert_eq!(text(encode_started(9)), r#"{"v":1,"id":9,"ok":true,"started":true}"#);
    let a = encode_ok(Some(3), &Value::Int(1));
    let b = encode_error(Some(5), ErrorKind::Timeout, "t timed out after 0.1 s");
    assert_eq!(
        text(encode_answers(Some(6), &[&a, &b])),
        concat!(
            r#"{"v":1,"id":6,"ok":true,"answers":[{"v":1,"id":3,"ok":true,"value":1},"#,
            r#"{"v":1,"id":5,"ok":false,"error":{"kind":"timeout","message":"t timed out after 0.1 s"}}]}"#
        )
    );
    assert_eq!(text(encode_answers::<Vec<u8>>(None, &[])), r#"{"v":1,"id":null,"ok":true,"answers":[]}"#);
    let list = ListAnswer::from_descriptors([r#"{"name":"a"}"#]).expect("valid").with("max_in_flight", &Value::Int(16));
    assert_eq!(text(list.encode(Some(1))), r#"{"v":1,"id":1,"ok":true,"tools":[{"name":"a"}],"max_in_flight":16}"#);
    // A version 1 reader reads it as the list it was.
    assert!(matches!(decode_response(&list.encode(Some(1))), Ok(Response::List { tools, .. }) if tools.len() == 1));
    // The guest's frames.
    let start = Request::Start { id: 3, tool: "f".into(), args: Map::new() };
    assert_eq!(text(encode_request(&start)), r#"{"v":1,"id":3,"op":"start","tool":"f","args":{}}"#);
    let wait = Request::Wait { id: Some(4), ids: vec![3, 1], timeout_ms: Some(0) };
    assert_eq!(text(encode_request(&wait)), r#"{"v":1,"id":4,"op":"wait","ids":[3,1],"timeout_ms":0}"#);
    let forever = Request::Wait { id: None, ids: vec![3], timeout_ms: None };
    assert_eq!(text(encode_request(&forever)), r#"{"v":1,"id":null,"op":"wait","ids":[3]}"#);
}
