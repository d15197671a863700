//! A borrowed view of one argument value, and the JSON equality `enum`, `const` and
//! `uniqueItems` use.

use std::hash::{BuildHasher, Hash, Hasher};

use wasi_python_protocol::{Map, Value};

use crate::num::{self, NumRef};

/// One value under validation.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Inst<'a> {
    Null,
    Bool(bool),
    Num(NumRef<'a>, NumKind),
    Str(&'a str),
    Bytes(&'a [u8]),
    Array(&'a [Value]),
    Object(&'a Map),
    /// A value variant this crate does not know (or a malformed big integer).
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NumKind {
    Integer,
    Float,
}

impl<'a> Inst<'a> {
    pub(crate) fn of(v: &'a Value) -> Inst<'a> {
        match v {
            Value::Null => Inst::Null,
            Value::Bool(b) => Inst::Bool(*b),
            Value::Int(i) => Inst::Num(NumRef::I(i128::from(*i)), NumKind::Integer),
            Value::BigInt(text) => match NumRef::of_text(text) {
                Some(n) => Inst::Num(n, NumKind::Integer),
                None => Inst::Other,
            },
            Value::Float(f) if f.is_finite() => Inst::Num(NumRef::F(*f), NumKind::Float),
            Value::Str(s) => Inst::Str(s),
            Value::Bytes(b) => Inst::Bytes(b),
            Value::Array(a) => Inst::Array(a),
            Value::Object(m) => Inst::Object(m),
            _ => Inst::Other,
        }
    }

    /// The value's kind for "got ..." in a message.
    pub(crate) fn got(self) -> &'static str {
        match self {
            Inst::Null => "null",
            Inst::Bool(_) => "a boolean",
            Inst::Num(_, NumKind::Integer) => "an integer",
            Inst::Num(_, NumKind::Float) => "a float",
            Inst::Str(_) => "a string",
            Inst::Bytes(_) => "bytes",
            Inst::Array(_) => "an array",
            Inst::Object(_) => "an object",
            Inst::Other => "an unsupported value",
        }
    }
}

/// What one pass over the arguments finds before validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scan {
    /// Some value nests deeper than the limit (the arguments object is level 1).
    pub(crate) too_deep: bool,
    /// Some value is bytes.
    pub(crate) has_bytes: bool,
    /// How many values the scan visited (up to where it stopped): work already done.
    pub(crate) values: u64,
}

pub(crate) fn scan(map: &Map, limit: usize) -> Scan {
    fn value(v: &Value, left: usize, s: &mut Scan) -> bool {
        s.values += 1;
        match v {
            Value::Bytes(_) => {
                s.has_bytes = true;
                false
            }
            Value::Array(a) => left == 0 || a.iter().any(|x| value(x, left - 1, s)),
            Value::Object(m) => left == 0 || m.0.iter().any(|(_, x)| value(x, left - 1, s)),
            _ => false,
        }
    }
    let mut s = Scan {
        too_deep: false,
        has_bytes: false,
        values: 0,
    };
    s.too_deep = limit == 0 || map.0.iter().any(|(_, v)| value(v, limit - 1, &mut s));
    s
}

// ---- base64 (standard alphabet, padded): a Bytes value reads as this text ----

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn encode_chunk(chunk: &[u8]) -> [u8; 4] {
    let b = [
        chunk[0],
        *chunk.get(1).unwrap_or(&0),
        *chunk.get(2).unwrap_or(&0),
    ];
    let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
    let mut out = [b'='; 4];
    for (i, o) in out.iter_mut().enumerate().take(chunk.len() + 1) {
        *o = ALPHABET[((n >> (18 - 6 * i)) & 63) as usize];
    }
    out
}

/// The length of the base64 text of `n` bytes.
pub(crate) fn base64_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

pub(crate) fn base64(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(base64_len(bytes.len()));
    for chunk in bytes.chunks(3) {
        out.extend_from_slice(&encode_chunk(chunk));
    }
    // The alphabet is ASCII.
    String::from_utf8(out).unwrap_or_default()
}

/// Whether `text` is the base64 text of `bytes`, without allocating.
fn base64_is(bytes: &[u8], text: &str) -> bool {
    text.len() == base64_len(bytes.len())
        && bytes
            .chunks(3)
            .zip(text.as_bytes().chunks(4))
            .all(|(c, t)| encode_chunk(c) == t)
}

// ---- equality ----

/// JSON equality between a value and a schema constant: numbers by value (`1 == 1.0`), bytes as
/// their base64 text, objects regardless of key order.
pub(crate) fn eq_json(a: Inst<'_>, b: &serde_json::Value) -> bool {
    use serde_json::Value as J;
    match (a, b) {
        (Inst::Null, J::Null) => true,
        (Inst::Bool(x), J::Bool(y)) => x == *y,
        (Inst::Num(x, _), J::Number(y)) => {
            num::Num::of_json(y).is_some_and(|y| num::eq(x, y.as_ref()))
        }
        (Inst::Str(x), J::String(y)) => x == y,
        (Inst::Bytes(x), J::String(y)) => base64_is(x, y),
        (Inst::Array(x), J::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| eq_json(Inst::of(x), y))
        }
        (Inst::Object(x), J::Object(y)) => {
            x.len() == y.len()
                && x.0
                    .iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| eq_json(Inst::of(v), w)))
        }
        _ => false,
    }
}

/// The same equality between two values.
pub(crate) fn eq(a: Inst<'_>, b: Inst<'_>) -> bool {
    match (a, b) {
        (Inst::Null, Inst::Null) => true,
        (Inst::Bool(x), Inst::Bool(y)) => x == y,
        (Inst::Num(x, _), Inst::Num(y, _)) => num::eq(x, y),
        (Inst::Str(x), Inst::Str(y)) => x == y,
        (Inst::Bytes(x), Inst::Bytes(y)) => x == y,
        (Inst::Bytes(x), Inst::Str(y)) | (Inst::Str(y), Inst::Bytes(x)) => base64_is(x, y),
        (Inst::Array(x), Inst::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| eq(Inst::of(x), Inst::of(y)))
        }
        (Inst::Object(x), Inst::Object(y)) => {
            x.len() == y.len()
                && x.0
                    .iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| eq(Inst::of(v), Inst::of(w))))
        }
        _ => false,
    }
}

/// A hash consistent with [`eq`]: equal values hash alike.
pub(crate) fn hash(v: Inst<'_>, state: &impl BuildHasher) -> u64 {
    let mut h = state.build_hasher();
    feed(v, state, &mut h);
    h.finish()
}

fn feed<H: Hasher>(v: Inst<'_>, state: &impl BuildHasher, h: &mut H) {
    match v {
        Inst::Null => h.write_u8(0),
        Inst::Bool(b) => {
            h.write_u8(1);
            b.hash(h);
        }
        Inst::Num(n, _) => {
            h.write_u8(2);
            num::canon(n).hash(h);
        }
        Inst::Str(s) => {
            h.write_u8(3);
            s.hash(h);
        }
        Inst::Bytes(b) => {
            h.write_u8(3);
            base64(b).as_str().hash(h);
        }
        Inst::Array(a) => {
            h.write_u8(4);
            h.write_usize(a.len());
            for x in a {
                feed(Inst::of(x), state, h);
            }
        }
        Inst::Object(m) => {
            // Key order does not matter: combine the entries' hashes commutatively.
            h.write_u8(5);
            let mut sum: u64 = 0;
            for (k, x) in &m.0 {
                let mut e = state.build_hasher();
                k.hash(&mut e);
                feed(Inst::of(x), state, &mut e);
                sum = sum.wrapping_add(e.finish());
            }
            h.write_u64(sum);
        }
        Inst::Other => h.write_u8(6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard() {
        let cases: &[(&[u8], &str)] = &[
            (b"", ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"\x00\xff", "AP8="),
            (b"y", "eQ=="),
        ];
        for &(bytes, text) in cases {
            assert_eq!(base64(bytes), text);
            assert!(base64_is(bytes, text));
            assert_eq!(base64_len(bytes.len()), text.len());
        }
        assert!(!base64_is(b"foo", "Zm9w"));
    }

    #[test]
    fn nesting() {
        let deep = |n: usize| {
            let mut v = Value::Null;
            for _ in 0..n {
                v = Value::Array(vec![v]);
            }
            Map(vec![("a".into(), v)])
        };
        assert!(!scan(&deep(0), 1).too_deep);
        assert!(scan(&deep(1), 1).too_deep);
        assert!(!scan(&deep(63), 64).too_deep);
        assert!(scan(&deep(64), 64).too_deep);
        let bytes = Map(vec![(
            "a".into(),
            Value::Array(vec![Value::Bytes(vec![1])]),
        )]);
        assert_eq!(
            scan(&bytes, 64),
            Scan {
                too_deep: false,
                has_bytes: true,
                values: 2,
            }
        );
    }
}
