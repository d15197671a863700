//! decode_request: one row per rule of §6.4.

use wasi_python_protocol::{
    DecodeErrorKind, ErrorKind, MAX_ECHO_CHARS, MAX_REQUEST_BYTES, Value, decode_request,
};

use crate::{render_request, run_table};

/// `(frame, expected)`: `list[ id=N]`, `call[ id=N] tool {args}`, or `err Kind @ offset[ id=N]`.
const ROWS: &[(&str, &str)] = &[
    // The frames the guest sends (§6.2).
    (r#"{"v":1,"id":1,"op":"list"}"#, "list id=1"),
    (
        r#"{"v":1,"id":2,"op":"call","tool":"f","args":{"a":1,"b":{"$bytes":"eQ=="},"d":{"$bytes":"AP8="}}}"#,
        r#"call id=2 f {"a":1,"b":{"$bytes":"eQ=="},"d":{"$bytes":"AP8="}}"#,
    ),
    (
        r#"{"v":1,"id":3,"op":"call","tool":"f","args":{"a":100000000000000000000}}"#,
        r#"call id=3 f {"a":100000000000000000000}"#,
    ),
    // Layout: whitespace anywhere, keys in any order, args optional, raw UTF-8.
    (" \t\r\n{ \"v\" : 1 ,\n\"op\" : \"list\" } \r\n", "list"),
    (r#"{"op":"list","id":7,"v":1}"#, "list id=7"),
    (r#"{"v":1,"op":"call","tool":"f"}"#, "call f {}"),
    (r#"{"v":1,"op":"call","tool":"f","args":{}}"#, "call f {}"),
    (
        r#"{"v":1,"op":"call","tool":"ünï","args":{"日本":"語 😀"}}"#,
        r#"call ünï {"日本":"語 😀"}"#,
    ),
    (
        r#"{"v":1,"op":"call","tool":"","args":{"a":[]}}"#,
        r#"call  {"a":[]}"#,
    ),
    // Values: every JSON type, escapes, numbers.
    (
        r#"{"v":1,"op":"call","tool":"f","args":{"n":null,"t":true,"f":false,"i":-12,"x":1.5,"s":"a\"\\\/\b\f\n\r\t\u00e9\u0000","l":[1,[2,{}]]}}"#,
        r#"call f {"n":null,"t":true,"f":false,"i":-12,"x":1.5,"s":"a\"\\/\b\f\n\r\té\u0000","l":[1,[2,{}]]}"#,
    ),
    (
        r#"{"v":1,"op":"call","tool":"f","args":{"a":0,"b":-0,"c":1e2,"d":1E-2,"e":-0.0,"f":2.5e+3}}"#,
        r#"call f {"a":0,"b":0,"c":100.0,"d":0.01,"e":-0.0,"f":2500.0}"#,
    ),
    (
        r#"{"v":1,"op":"call","tool":"f","args":{"a":1e-400}}"#,
        r#"call f {"a":0.0}"#,
    ),
    (
        r#"{"v":1,"op":"call","tool":"f","args":{"a":9223372036854775807,"b":-9223372036854775808}}"#,
        r#"call f {"a":9223372036854775807,"b":-9223372036854775808}"#,
    ),
    (
        r#"{"v":1,"op":"call","tool":"f","args":{"a":9223372036854775808,"b":-9223372036854775809}}"#,
        r#"call f {"a":9223372036854775808,"b":-9223372036854775809}"#,
    ),
    (
        r#"{"v":1,"op":"call","tool":"f","args":{"😀":"\ud83d\ude00","m":"\uDBFF\uDFFF"}}"#,
        "call f {\"😀\":\"😀\",\"m\":\"\u{10FFFF}\"}",
    ),
    // Unknown top-level keys are read and ignored; so are tool and args in a list frame.
    (
        r#"{"v":1,"op":"list","trace":[1,{"x":null}],"meta":{}}"#,
        "list",
    ),
    (r#"{"v":1,"op":"list","tool":5,"args":[]}"#, "list"),
    // ... but they are held to the same rules.
    (r#"{"v":1,"op":"list","x":NaN}"#, "err NonFinite @ 23"),
    // Ids: echoed only when an integer in [0, 2^53-1]; any other id is no error.
    (r#"{"v":1,"id":0,"op":"list"}"#, "list id=0"),
    (
        r#"{"v":1,"id":9007199254740991,"op":"list"}"#,
        "list id=9007199254740991",
    ),
    (r#"{"v":1,"id":9007199254740992,"op":"list"}"#, "list"),
    (r#"{"v":1,"id":100000000000000000000,"op":"list"}"#, "list"),
    (r#"{"v":1,"id":-1,"op":"list"}"#, "list"),
    (r#"{"v":1,"id":1.0,"op":"list"}"#, "list"),
    (r#"{"v":1,"id":1e0,"op":"list"}"#, "list"),
    (r#"{"v":1,"id":"1","op":"list"}"#, "list"),
    (r#"{"v":1,"id":true,"op":"list"}"#, "list"),
    (r#"{"v":1,"id":null,"op":"list"}"#, "list"),
    (r#"{"v":1,"id":[1],"op":"list"}"#, "list"),
    // The error carries the id when a valid one was read before the fault.
    (r#"{"v":1,"id":5,"op":"list",}"#, "err Syntax @ 26 id=5"),
    (r#"{"v":1,"op":"list",,"id":5}"#, "err Syntax @ 19"),
    (r#"{"v":1,"id":5,"op":"list""#, "err Syntax @ 25 id=5"),
    (r#"{"v":1,"id":-5,"op":"list",}"#, "err Syntax @ 27"),
    (
        r#"{"v":1,"id":5,"id":6,"op":"list"}"#,
        "err DuplicateKey @ 14",
    ),
    // Version.
    (r#"{"id":4,"op":"list"}"#, "err Version @ - id=4"),
    (r#"{"v":2,"id":4,"op":"list"}"#, "err Version @ 5 id=4"),
    (r#"{"v":0,"op":"list"}"#, "err Version @ 5"),
    (r#"{"v":-1,"op":"list"}"#, "err Version @ 5"),
    (r#"{"v":"1","op":"list"}"#, "err Version @ 5"),
    (r#"{"v":1.0,"op":"list"}"#, "err Version @ 5"),
    (r#"{"v":true,"op":"list"}"#, "err Version @ 5"),
    (r#"{"v":null,"op":"list"}"#, "err Version @ 5"),
    (r#"{"v":2,"op":"nope"}"#, "err Version @ 5"),
    // Ops.
    (r#"{"v":1,"id":8}"#, "err MissingField @ - id=8"),
    (r#"{"v":1,"op":1}"#, "err WrongType @ 12"),
    (r#"{"v":1,"op":null}"#, "err WrongType @ 12"),
    (r#"{"v":1,"id":9,"op":"batch"}"#, "err ReservedOp @ 19 id=9"),
    (r#"{"v":1,"op":"lists"}"#, "err UnknownOp @ 12"),
    (r#"{"v":1,"op":"LIST"}"#, "err UnknownOp @ 12"),
    (r#"{"v":1,"op":""}"#, "err UnknownOp @ 12"),
    // Calls in parallel: a start is a call that needs an id; a wait names 1 to 64
    // distinct ids, and may bound its time.
    (r#"{"v":1,"id":3,"op":"start","tool":"f","args":{"a":1}}"#, r#"start id=3 f {"a":1}"#),
    (r#"{"v":1,"id":3,"op":"start","tool":"f"}"#, "start id=3 f {}"),
    (r#"{"v":1,"op":"start","tool":"f"}"#, "err MissingField @ -"),
    (r#"{"v":1,"id":-1,"op":"start","tool":"f"}"#, "err MissingField @ -"),
    (r#"{"v":1,"id":"3","op":"start","tool":"f"}"#, "err MissingField @ -"),
    (r#"{"v":1,"id":3,"op":"start"}"#, "err MissingField @ - id=3"),
    (r#"{"v":1,"id":3,"op":"start","tool":"f","args":[1]}"#, "err ArgsNotObject @ 45 id=3"),
    (r#"{"v":1,"id":4,"op":"wait","ids":[3,1]}"#, "wait id=4 [3, 1] -"),
    (r#"{"v":1,"id":4,"op":"wait","ids":[3],"timeout_ms":0}"#, "wait id=4 [3] 0"),
    (r#"{"v":1,"op":"wait","timeout_ms":250,"ids":[9007199254740991]}"#, "wait [9007199254740991] 250"),
    (
        r#"{"v":1,"op":"wait","ids":[3],"timeout_ms":100000000000000000000000}"#,
        "wait [3] 18446744073709551615",
    ),
    (r#"{"v":1,"id":4,"op":"wait"}"#, "err MissingField @ - id=4"),
    (r#"{"v":1,"id":4,"op":"wait","ids":[]}"#, "err BadWait @ 32 id=4"),
    (r#"{"v":1,"id":4,"op":"wait","ids":3}"#, "err BadWait @ 32 id=4"),
    (r#"{"v":1,"id":4,"op":"wait","ids":[3,3]}"#, "err BadWait @ 32 id=4"),
    (r#"{"v":1,"id":4,"op":"wait","ids":[-3]}"#, "err BadWait @ 32 id=4"),
    (r#"{"v":1,"id":4,"op":"wait","ids":[1.0]}"#, "err BadWait @ 32 id=4"),
    (r#"{"v":1,"id":4,"op":"wait","ids":[9007199254740992]}"#, "err BadWait @ 32 id=4"),
    (r#"{"v":1,"id":4,"op":"wait","ids":[3],"timeout_ms":-1}"#, "err BadWait @ 49 id=4"),
    (r#"{"v":1,"id":4,"op":"wait","ids":[3],"timeout_ms":1.5}"#, "err BadWait @ 49 id=4"),
    (r#"{"v":1,"id":4,"op":"wait","ids":[3],"timeout_ms":null}"#, "err BadWait @ 49 id=4"),
    // Calls.
    (r#"{"v":1,"id":3,"op":"call"}"#, "err MissingField @ - id=3"),
    (r#"{"v":1,"op":"call","tool":5}"#, "err WrongType @ 26"),
    (
        r#"{"v":1,"op":"call","tool":null,"args":{}}"#,
        "err WrongType @ 26",
    ),
    (
        r#"{"v":1,"op":"call","tool":"f","args":[1]}"#,
        "err ArgsNotObject @ 37",
    ),
    (
        r#"{"v":1,"op":"call","tool":"f","args":null}"#,
        "err ArgsNotObject @ 37",
    ),
    (
        r#"{"v":1,"id":2,"op":"call","tool":"f","args":"a=1"}"#,
        "err ArgsNotObject @ 44 id=2",
    ),
    // Not an object.
    ("[]", "err NotObject @ 0"),
    (r#"  "x""#, "err NotObject @ 2"),
    ("1", "err NotObject @ 0"),
    ("null", "err NotObject @ 0"),
    ("[1,", "err Syntax @ 3"),
    ("", "err Syntax @ 0"),
    ("   ", "err Syntax @ 3"),
    ("\u{feff}{\"v\":1,\"op\":\"list\"}", "err Syntax @ 0"),
    // Syntax.
    (r#"{"v":1,"op":"list""#, "err Syntax @ 18"),
    (r#"{"v":1,"op":"list"}x"#, "err Syntax @ 19"),
    (r#"{"v":1,"op":"list"}{}"#, "err Syntax @ 19"),
    (r#"{"v":1,,"op":"list"}"#, "err Syntax @ 7"),
    (r#"{"v":1,"op":"list",}"#, "err Syntax @ 19"),
    (r#"{v:1}"#, "err Syntax @ 1"),
    (r#"{'v':1}"#, "err Syntax @ 1"),
    (r#"{"v" 1}"#, "err Syntax @ 5"),
    (r#"{"v":}"#, "err Syntax @ 5"),
    (r#"{"v":1 /* c */}"#, "err Syntax @ 7"),
    (r#"{"x":[1,]}"#, "err Syntax @ 8"),
    (r#"{"x":[1 2]}"#, "err Syntax @ 8"),
    (r#"{"x":{"a" 1}}"#, "err Syntax @ 10"),
    (r#"{"x":{1:2}}"#, "err Syntax @ 6"),
    (r#"{"x":01}"#, "err Syntax @ 6"),
    (r#"{"x":1.}"#, "err Syntax @ 7"),
    (r#"{"x":.5}"#, "err Syntax @ 5"),
    (r#"{"x":+1}"#, "err Syntax @ 5"),
    (r#"{"x":1e}"#, "err Syntax @ 7"),
    (r#"{"x":1e+}"#, "err Syntax @ 8"),
    (r#"{"x":-}"#, "err Syntax @ 6"),
    (r#"{"x":-a}"#, "err Syntax @ 6"),
    (r#"{"x":0x10}"#, "err Syntax @ 6"),
    (r#"{"x":tru}"#, "err Syntax @ 5"),
    (r#"{"x":True}"#, "err Syntax @ 5"),
    (r#"{"x":nul"#, "err Syntax @ 5"),
    (r#"{"x":"abc"#, "err Syntax @ 9"),
    (r#"{"x":"abc\"#, "err Syntax @ 10"),
    (r#"{"x":"a\q"}"#, "err Syntax @ 7"),
    (r#"{"x":"a\u12G4"}"#, "err Syntax @ 7"),
    (r#"{"x":"a\u12"}"#, "err Syntax @ 7"),
    (r#"{"x":"\x41"}"#, "err Syntax @ 6"),
    ("{\"x\":\"a\nb\"}", "err Syntax @ 7"),
    ("{\"x\":\"a\tb\"}", "err Syntax @ 7"),
    ("{\"x\":\"\u{1f}\"}", "err Syntax @ 6"),
    ("{\"x\":\"ok\\n\u{0}\"}", "err Syntax @ 10"),
    // Non-finite numbers.
    (r#"{"x":NaN}"#, "err NonFinite @ 5"),
    (r#"{"x":Infinity}"#, "err NonFinite @ 5"),
    (r#"{"x":-Infinity}"#, "err NonFinite @ 5"),
    (r#"{"x":[1e400]}"#, "err NonFinite @ 6"),
    (r#"{"x":-1.5e999}"#, "err NonFinite @ 5"),
    // Duplicate keys, at any depth, compared after unescaping.
    (r#"{"v":1,"v":1,"op":"list"}"#, "err DuplicateKey @ 7"),
    (
        r#"{"v":1,"op":"call","tool":"f","args":{"a":1,"a":2}}"#,
        "err DuplicateKey @ 44",
    ),
    (
        r#"{"v":1,"op":"list","x":[{"a":{"b":1,"b":2}}]}"#,
        "err DuplicateKey @ 36",
    ),
    (r#"{"a":1,"\u0061":2}"#, "err DuplicateKey @ 7"),
    (r#"{"x":{"a":1,"A":2,"a ":3}}"#, "err Version @ -"),
    // Lone surrogates.
    (r#"{"x":"\ud800"}"#, "err LoneSurrogate @ 6"),
    (r#"{"x":"ab\udc00"}"#, "err LoneSurrogate @ 8"),
    (r#"{"x":"\ud800\u0041"}"#, "err LoneSurrogate @ 6"),
    (r#"{"x":"\ud800\ud800"}"#, "err LoneSurrogate @ 6"),
    (r#"{"x":"\ud800x"}"#, "err LoneSurrogate @ 6"),
    (r#"{"x":"\ude00\ud83d"}"#, "err LoneSurrogate @ 6"),
    (r#"{"\udfff":1}"#, "err LoneSurrogate @ 2"),
    // $bytes: the only key, a string of strict standard base64.
    (
        r#"{"v":1,"op":"call","tool":"f","args":{"a":{"$bytes":""}}}"#,
        r#"call f {"a":{"$bytes":""}}"#,
    ),
    (
        r#"{"v":1,"op":"call","tool":"f","args":{"a":{"$bytes":"AAAA"},"b":[{ "$bytes" : "/+8=" }]}}"#,
        r#"call f {"a":{"$bytes":"AAAA"},"b":[{"$bytes":"/+8="}]}"#,
    ),
    (
        r#"{"v":1,"op":"call","tool":"f","args":{"a":{"\u0024bytes":"\u0065Q=="}}}"#,
        r#"call f {"a":{"$bytes":"eQ=="}}"#,
    ),
    (r#"{"x":{"$bytes":"eQ==","y":1}}"#, "err BadBytes @ 6"),
    (r#"{"x":{"y":1,"$bytes":"eQ=="}}"#, "err BadBytes @ 12"),
    (r#"{"x":{"$bytes":1}}"#, "err BadBytes @ 15"),
    (r#"{"x":{"$bytes":null}}"#, "err BadBytes @ 15"),
    (r#"{"x":{"$bytes":{"$bytes":""}}}"#, "err BadBytes @ 15"),
    (r#"{"x":{"$bytes":"eQ"}}"#, "err BadBytes @ 15"),
    (r#"{"x":{"$bytes":"eQ="}}"#, "err BadBytes @ 15"),
    (r#"{"x":{"$bytes":"eQ==\n"}}"#, "err BadBytes @ 15"),
    (r#"{"x":{"$bytes":"eQ==  "}}"#, "err BadBytes @ 15"),
    (r#"{"x":{"$bytes":" eQ="}}"#, "err BadBytes @ 15"),
    (r#"{"x":{"$bytes":"-_8="}}"#, "err BadBytes @ 15"),
    (r#"{"x":{"$bytes":"eR=="}}"#, "err BadBytes @ 15"),
    (r#"{"x":{"$bytes":"AP9="}}"#, "err BadBytes @ 15"),
    (r#"{"x":{"$bytes":"eQ==eQ=="}}"#, "err BadBytes @ 15"),
    (r#"{"x":{"$bytes":"===="}}"#, "err BadBytes @ 15"),
    (r#"{"x":{"$bytes":"A==="}}"#, "err BadBytes @ 15"),
    (r#"{"x":{"$bytes":"AA=A"}}"#, "err BadBytes @ 15"),
    (
        r#"{"x":{"$bytes":"AAAAAAAAAAAA=AAA"}}"#,
        "err BadBytes @ 15",
    ),
    (r#"{"x":{"$bytes":"AAAAAAAA*AAA"}}"#, "err BadBytes @ 15"),
    (
        r#"{"v":1,"op":"list","$bytes":"AA=="}"#,
        "err BadBytes @ 19",
    ),
    (r#"{"$bytes":"AA=="}"#, "err BadBytes @ 1"),
    // A syntax error after a bad $bytes value is still a syntax error.
    (r#"{"x":{"$bytes":[1,}}"#, "err Syntax @ 18"),
];

#[test]
fn request_table() {
    run_table(ROWS.iter().map(|&(i, e)| (i, e.to_owned())), |input| {
        render_request(&decode_request(input.as_bytes()))
    });
}

/// Rows built by code: sizes at and past each limit.
#[test]
fn request_limits() {
    let mut rows: Vec<(String, String)> = Vec::new();
    let call = |args: &str| format!(r#"{{"v":1,"op":"call","tool":"f","args":{args}}}"#);
    let prefix = r#"{"v":1,"op":"call","tool":"f","args":"#.len();

    // Nesting: the frame is level 1 and args level 2, so a value inside args may open 62
    // more containers; one more is refused at that bracket.
    let nested = |n: usize| format!(r#"{{"a":{}1{}}}"#, "[".repeat(n), "]".repeat(n));
    rows.push((call(&nested(62)), format!("call f {}", nested(62))));
    rows.push((
        call(&nested(63)),
        format!("err Depth @ {}", prefix + 5 + 62),
    ));
    let objects = |n: usize| format!("{}1{}", r#"{"a":"#.repeat(n), "}".repeat(n));
    rows.push((call(&objects(63)), format!("call f {}", objects(63))));
    rows.push((
        call(&objects(64)),
        format!("err Depth @ {}", prefix + 5 * 63),
    ));
    let deep = format!(r#"{{"x":{}"#, "[".repeat(100_000));
    rows.push((deep, "err Depth @ 68".to_owned()));

    // Integers: at most 64 characters, sign included.
    let digits = |n: usize| format!("1{}", "0".repeat(n - 1));
    for (int, ok) in [
        (digits(64), true),
        (digits(65), false),
        (format!("-{}", digits(63)), true),
        (format!("-{}", digits(64)), false),
    ] {
        let args = format!(r#"{{"n":{int}}}"#);
        let expected = if ok {
            format!("call f {args}")
        } else {
            format!("err IntTooLong @ {}", prefix + 5)
        };
        rows.push((call(&args), expected));
    }
    // ... but a long float literal is a float.
    rows.push((
        call(&format!(r#"{{"n":{}.5}}"#, digits(100))),
        r#"call f {"n":1e+99}"#.to_owned(),
    ));

    // Many keys: the duplicate check switches to a hash set past 16 keys.
    let keys: Vec<String> = (0..40).map(|i| format!(r#""k{i}":{i}"#)).collect();
    let object = format!("{{{}}}", keys.join(","));
    rows.push((call(&object), format!("call f {object}")));
    let dup = format!(r#"{{{},"k7":0}}"#, keys.join(","));
    rows.push((
        call(&dup),
        format!("err DuplicateKey @ {}", prefix + dup.len() - 7),
    ));
    let top = format!(r#"{{"v":1,"op":"list",{},"k39":0}}"#, keys.join(","));
    rows.push((top.clone(), format!("err DuplicateKey @ {}", top.len() - 8)));
    let escaped = format!(r#"{{{},"\u006b30":0}}"#, keys.join(","));
    rows.push((
        call(&escaped),
        format!("err DuplicateKey @ {}", prefix + escaped.len() - 13),
    ));

    // The request size cap.
    let pad = |n: usize| {
        let frame = call(&format!(r#"{{"s":"{}"}}"#, "x".repeat(n)));
        let short = MAX_REQUEST_BYTES - frame.len();
        call(&format!(r#"{{"s":"{}"}}"#, "x".repeat(n + short)))
    };
    let at_cap = pad(0);
    assert_eq!(at_cap.len(), MAX_REQUEST_BYTES);
    rows.push((
        at_cap.clone(),
        render_request(&decode_request(at_cap.as_bytes())),
    ));
    assert!(rows.last().is_some_and(|(_, e)| e.starts_with("call f")));
    rows.push((format!("{at_cap} "), "err TooLarge @ -".to_owned()));

    run_table(rows, |input| {
        render_request(&decode_request(input.as_bytes()))
    });
}

#[test]
fn request_bytes_not_utf8() {
    let rows: Vec<(Vec<u8>, String)> = vec![
        (b"{\"x\":\"\xff\"}".to_vec(), "err Utf8 @ 6".into()),
        (b"\xc3".to_vec(), "err Utf8 @ 0".into()),
        // An encoded surrogate (CESU-style) and an overlong encoding are not UTF-8.
        (b"{\"x\":\"\xed\xa0\x80\"}".to_vec(), "err Utf8 @ 6".into()),
        (b"{\"x\":\"\xc0\xaf\"}".to_vec(), "err Utf8 @ 6".into()),
        (
            b"{\"v\":1,\"id\":3,\"op\":\"list\",\"x\":\"\x80\"}".to_vec(),
            "err Utf8 @ 31".into(),
        ),
    ];
    run_table(rows, |input| render_request(&decode_request(input)));
}

#[test]
fn integers_keep_their_width() {
    let rows: Vec<(&str, Value)> = vec![
        ("9223372036854775807", Value::Int(i64::MAX)),
        ("-9223372036854775808", Value::Int(i64::MIN)),
        (
            "9223372036854775808",
            Value::BigInt("9223372036854775808".into()),
        ),
        (
            "-9223372036854775809",
            Value::BigInt("-9223372036854775809".into()),
        ),
        ("-0", Value::Int(0)),
        ("123456789012345678", Value::Int(123_456_789_012_345_678)),
        ("1.0", Value::Float(1.0)),
    ];
    for (text, expected) in rows {
        let frame = format!(r#"{{"v":1,"op":"call","tool":"f","args":{{"n":{text}}}}}"#);
        let Ok(wasi_python_protocol::Request::Call { args, .. }) = decode_request(frame.as_bytes())
        else {
            panic!("{frame} was refused");
        };
        assert_eq!(args.get("n"), Some(&expected), "{text}");
    }
}

#[test]
fn bytes_decode_to_bytes() {
    let frame = br#"{"v":1,"op":"call","tool":"f","args":{"a":{"$bytes":"AP8="},"b":{"$bytes":""},"c":{"$bytes":"eQ=="}}}"#;
    let Ok(wasi_python_protocol::Request::Call { args, .. }) = decode_request(frame) else {
        panic!("refused");
    };
    assert_eq!(args.get("a"), Some(&Value::Bytes(vec![0, 255])));
    assert_eq!(args.get("b"), Some(&Value::Bytes(vec![])));
    assert_eq!(args.get("c"), Some(&Value::Bytes(b"y".to_vec())));
}

#[test]
fn wire_kinds_of_decode_errors() {
    let rows = [
        (
            r#"{"v":1,"op":"call","tool":"f","args":[]}"#.to_owned(),
            ErrorKind::InvalidArguments,
        ),
        (r#"{"v":1,"op":"batch"}"#.to_owned(), ErrorKind::Protocol),
        (r#"{"v":1,"op":"list""#.to_owned(), ErrorKind::Protocol),
        (r#"{"v":2,"op":"list"}"#.to_owned(), ErrorKind::Protocol),
        (" ".repeat(MAX_REQUEST_BYTES + 1), ErrorKind::TooLarge),
    ];
    for (frame, kind) in rows {
        let e = decode_request(frame.as_bytes()).expect_err("refused");
        assert_eq!(e.wire_kind(), kind, "{}", &frame[..frame.len().min(60)]);
    }
    // An args fault names the tool, so the host can answer unknown_tool first.
    let e = decode_request(br#"{"v":1,"op":"call","tool":"nope","args":1}"#).expect_err("refused");
    assert_eq!(
        (e.kind, e.tool.as_deref()),
        (DecodeErrorKind::ArgsNotObject, Some("nope"))
    );
}

/// Messages go to the guest: guest text in them is cut to MAX_ECHO_CHARS characters.
#[test]
fn messages_cut_guest_text() {
    let long = "é".repeat(200);
    let frames = [
        format!(r#"{{"v":1,"op":"{long}"}}"#),
        format!(r#"{{"v":"{long}","op":"list"}}"#),
        format!(r#"{{"v":1,"op":"call","tool":"{long}","args":5}}"#),
        format!(r#"{{"v":1,"op":"list","x":{{"{long}":1,"{long}":2}}}}"#),
    ];
    for frame in frames {
        let e = decode_request(frame.as_bytes()).expect_err("refused");
        let run = e.message.chars().filter(|&c| c == 'é').count();
        assert!(
            run > 0 && run <= MAX_ECHO_CHARS,
            "{:?}: {run} echoed",
            e.kind
        );
    }
    // The version message is the one the protocol names.
    let e = decode_request(br#"{"v":2,"op":"list"}"#).expect_err("refused");
    assert_eq!(
        e.message,
        "this host serves protocol version 1; the frame asks for 2"
    );
}
