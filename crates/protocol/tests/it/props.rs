//! Properties: round trips through both sides, agreement with serde_json, no panics.

use proptest::prelude::*;
use wasi_python_protocol::{
    AnswerKind, ErrorKind, MAX_ID, MAX_WAIT_IDS, Map, Request, Response, Value, decode_request, decode_response,
    encode_ok, encode_request, encode_response, encode_value,
};

fn finite_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_filter("finite", |f| f.is_finite()),
        (-1e6f64..1e6),
        Just(0.0),
        Just(-0.0),
        Just(f64::MIN_POSITIVE),
        Just(5e-324),
        Just(f64::MAX),
        (-20i32..20).prop_map(|e| 10f64.powi(e)),
    ]
}

/// Canonical decimal text of an integer outside i64, at most 64 characters.
fn big_int() -> impl Strategy<Value = Value> {
    "-?[1-9][0-9]{18,62}".prop_filter_map("outside i64", |text| {
        (text.parse::<i64>().is_err() && text.len() <= 64).then(|| Value::BigInt(text.into()))
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), "[a-z$_]{0,8}"].prop_filter("not $bytes", |k| k != "$bytes")
}

/// Objects without repeated keys (the first of equal keys is kept).
fn object(inner: impl Strategy<Value = Value>) -> impl Strategy<Value = Map> {
    prop::collection::vec((key(), inner), 0..8).prop_map(|entries| {
        let mut map = Map::new();
        for (k, v) in entries {
            if !map.contains_key(&k) {
                map.push(k, v);
            }
        }
        map
    })
}

pub(crate) fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        big_int(),
        finite_f64().prop_map(Value::Float),
        any::<String>().prop_map(Value::Str),
        prop::collection::vec(any::<u8>(), 0..40).prop_map(Value::Bytes),
    ];
    leaf.prop_recursive(6, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            object(inner).prop_map(Value::Object),
        ]
    })
}

fn id() -> impl Strategy<Value = Option<u64>> {
    prop::option::of(0..=MAX_ID)
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        id().prop_map(|id| Request::List { id }),
        (id(), any::<String>(), object(value())).prop_map(|(id, tool, args)| Request::Call {
            id,
            tool,
            args
        }),
        (0..=MAX_ID, any::<String>(), object(value())).prop_map(|(id, tool, args)| Request::Start {
            id,
            tool,
            args
        }),
        (id(), prop::collection::hash_set(0..=MAX_ID, 1..=MAX_WAIT_IDS), prop::option::of(any::<u64>()))
            .prop_map(|(id, ids, timeout_ms)| Request::Wait { id, ids: ids.into_iter().collect(), timeout_ms }),
    ]
}

fn answer_kind() -> impl Strategy<Value = AnswerKind> {
    prop_oneof![
        prop::sample::select(ErrorKind::ALL.to_vec()).prop_map(AnswerKind::Known),
        any::<String>()
            .prop_filter("unknown", |s| ErrorKind::from_wire(s).is_none())
            .prop_map(AnswerKind::Other),
    ]
}

fn response() -> impl Strategy<Value = Response> {
    prop_oneof![
        (
            id(),
            prop::collection::vec(object(value()).prop_map(Value::Object), 0..4)
        )
            .prop_map(|(id, tools)| Response::List { id, tools }),
        (id(), value()).prop_map(|(id, value)| Response::Ok { id, value }),
        (id(), answer_kind(), any::<String>()).prop_map(|(id, kind, message)| Response::Err {
            id,
            kind,
            message
        }),
    ]
}

/// The serde_json reading of a value's wire JSON: bytes as their `$bytes` object, big
/// integers as serde_json (without arbitrary precision) reads them, a float.
fn to_serde(value: &Value) -> serde_json::Value {
    match value {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Int(n) => (*n).into(),
        Value::BigInt(text) => {
            serde_json::from_str(text).expect("serde_json reads big integers as floats")
        }
        Value::Float(f) => {
            serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, Into::into)
        }
        Value::Str(s) => s.clone().into(),
        Value::Bytes(_) => {
            let mut out = Vec::new();
            encode_value(value, &mut out);
            serde_json::from_slice(&out).expect("a $bytes object")
        }
        Value::Array(items) => items.iter().map(to_serde).collect(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| (k.to_owned(), to_serde(v)))
            .collect::<serde_json::Map<_, _>>()
            .into(),
        other => panic!("a Value variant this test does not know: {other:?}"),
    }
}

/// A serde_json value with neither `$bytes` keys nor integers outside i64, as a `Value`.
fn from_serde(value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        serde_json::Value::String(s) => Value::Str(s.clone()),
        serde_json::Value::Array(items) => Value::Array(items.iter().map(from_serde).collect()),
        serde_json::Value::Object(map) => Value::Object(Map(map
            .iter()
            .map(|(k, v)| (k.clone(), from_serde(v)))
            .collect())),
    }
}

/// Equal, but floats within a few ULP: serde_json's default float parsing is not always
/// correctly rounded (its `float_roundtrip` feature is off).
fn close(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value as J;
    match (a, b) {
        (J::Number(x), J::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (
                x.as_f64().unwrap_or(f64::NAN),
                y.as_f64().unwrap_or(f64::NAN),
            );
            x == y || (x - y).abs() <= 4.0 * f64::EPSILON * x.abs().max(y.abs())
        }
        (J::Array(x), J::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| close(x, y))
        }
        (J::Object(x), J::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| close(v, w)))
        }
        _ => a == b,
    }
}

fn serde_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(Into::into),
        finite_f64().prop_map(
            |f| serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, Into::into)
        ),
        any::<String>().prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(6, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::Array),
            prop::collection::vec((key(), inner), 0..8)
                .prop_map(|e| serde_json::Value::Object(e.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Host encodes an answer, guest decodes the same value.
    #[test]
    fn ok_answer_round_trip(id in id(), value in value()) {
        let frame = encode_ok(id, &value);
        prop_assert_eq!(decode_response(&frame), Ok(Response::Ok { id, value }));
    }

    /// Guest encodes a request, host decodes the same request.
    #[test]
    fn request_round_trip(request in request()) {
        let frame = encode_request(&request);
        prop_assert_eq!(decode_request(&frame), Ok(request));
    }

    #[test]
    fn response_round_trip(response in response()) {
        let frame = encode_response(&response);
        prop_assert_eq!(decode_response(&frame), Ok(response));
    }

    /// The encoder writes JSON serde_json reads as the same value.
    #[test]
    fn encoder_agrees_with_serde_json(value in value()) {
        let mut out = Vec::new();
        encode_value(&value, &mut out);
        let read: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        let expected = to_serde(&value);
        prop_assert!(close(&read, &expected), "{} read as {}, not {}", String::from_utf8_lossy(&out), read, expected);
    }

    /// The decoder reads what serde_json writes as serde_json does.
    #[test]
    fn decoder_agrees_with_serde_json(value in serde_value(), pretty in any::<bool>()) {
        let frame = serde_json::json!({"v": 1, "id": 5, "op": "call", "tool": "f", "args": {"x": value}});
        let bytes = if pretty { serde_json::to_vec_pretty(&frame) } else { serde_json::to_vec(&frame) }.expect("json");
        let Ok(Request::Call { id: Some(5), args, .. }) = decode_request(&bytes) else {
            return Err(TestCaseError::fail(format!("refused {}", String::from_utf8_lossy(&bytes))));
        };
        prop_assert_eq!(args.get("x"), Some(&from_serde(&value)));
    }

    /// Floats are written so that they read back as the same float, and as a float.
    #[test]
    fn floats_read_back_exactly(f in finite_f64()) {
        let mut out = Vec::new();
        encode_value(&Value::Float(f), &mut out);
        let text = String::from_utf8(out).expect("utf-8");
        prop_assert!(text.contains(['.', 'e']), "{}", text);
        let back: f64 = text.parse().expect("a number");
        prop_assert_eq!(back.to_bits(), f.to_bits(), "{}", text);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_request(&bytes);
        let _ = decode_response(&bytes);
    }

    /// JSON-ish text reaches deeper than random bytes do.
    #[test]
    fn jsonish_text_never_panics(text in r#"[\[\]{}",:0-9eE.+\-\\u a-fA-Fnrtl$bysv]{0,80}"#) {
        for frame in [text.clone(), format!(r#"{{"v":1,"op":"call","tool":"f","args":{text}}}"#)] {
            if let Err(e) = decode_request(frame.as_bytes()) {
                prop_assert!(e.offset.is_none_or(|o| o <= frame.len()));
            }
            let _ = decode_response(frame.as_bytes());
        }
    }
}
