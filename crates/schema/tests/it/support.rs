//! Test helpers: JSON to protocol values, and one-line expectations.

use serde_json::Value as J;
use wasi_python_protocol::{Map, Value};
use wasi_python_schema::{InputSchema, Options};

/// JSON to a protocol value: `{"$bytes": "<base64>"}` is bytes, `{"$big": "<digits>"}` a big
/// integer, an integer beyond `i64` a big integer too.
pub(crate) fn value(j: &J) -> Value {
    match j {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Value::Int(i),
            (None, Some(u), _) => Value::BigInt(u.to_string().into()),
            (_, _, Some(f)) => Value::Float(f),
            _ => unreachable!("a JSON number is one of the three"),
        },
        J::String(s) => Value::Str(s.clone()),
        J::Array(a) => Value::Array(a.iter().map(value).collect()),
        J::Object(m) => {
            if m.len() == 1 {
                if let Some(J::String(b64)) = m.get("$bytes") {
                    return Value::Bytes(decode_base64(b64));
                }
                if let Some(J::String(digits)) = m.get("$big") {
                    return Value::BigInt(digits.as_str().into());
                }
            }
            Value::Object(map_of(m))
        }
    }
}

pub(crate) fn map_of(m: &serde_json::Map<String, J>) -> Map {
    Map(m.iter().map(|(k, v)| (k.clone(), value(v))).collect())
}

pub(crate) fn args(text: &str) -> Map {
    match serde_json::from_str::<J>(text) {
        Ok(J::Object(m)) => map_of(&m),
        other => panic!("arguments must be a JSON object: {text}: {other:?}"),
    }
}

pub(crate) fn json(text: &str) -> J {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("bad test JSON {text}: {e}"))
}

fn decode_base64(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in text.bytes().filter(|&c| c != b'=') {
        let v = ALPHABET.iter().position(|&a| a == c).expect("base64") as u32;
        bits = (bits << 6) | v;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    out
}

/// `"ok"`, or `"Kind @ pointer"` for a schema the compiler refuses.
pub(crate) fn compiled(schema: &J, opts: Options) -> String {
    match InputSchema::compile(schema, opts) {
        Ok(_) => "ok".into(),
        Err(e) => format!("{:?} @ {}", e.kind(), e.pointer()),
    }
}

/// `"ok"`, or `"Kind @ path"` for arguments the schema refuses.
pub(crate) fn validated(schema: &InputSchema, args: &Map) -> String {
    match schema.validate(args) {
        Ok(()) => "ok".into(),
        Err(e) => format!("{:?} @ {}", e.kind(), e.path()),
    }
}
