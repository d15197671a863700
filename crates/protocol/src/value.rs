//! The values that cross the door: JSON plus bytes and integers wider than 64 bits.

/// One value of a frame. Objects keep their keys in wire order; keys are unique.
///
/// Building one is cheap (plain `Vec`s and `String`s), so a host converts its own objects
/// into a `Value` and hands it to [`encode_ok`](crate::encode_ok).
///
/// Invariants the decoder guarantees and the encoder assumes of values built by hand:
/// `Float` is finite (the encoder writes `null` for NaN and infinities), `BigInt` is
/// canonical decimal text outside `i64` (written verbatim; [`Value::big_int`] checks it),
/// `Object` keys are unique, and no object is exactly `{"$bytes": <string>}` (that shape is
/// how [`Value::Bytes`] crosses; a host should refuse a `"$bytes"` key, as the guest does).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Value {
    Null,
    Bool(bool),
    /// An integer that fits in an `i64`.
    Int(i64),
    /// An integer outside `i64`, as canonical decimal text (`-?[1-9][0-9]*`), at most 64 characters.
    BigInt(Box<str>),
    /// A finite float (NaN and infinities never cross).
    Float(f64),
    Str(String),
    /// `{"$bytes": "<standard base64>"}` on the wire.
    Bytes(Vec<u8>),
    Array(Vec<Value>),
    Object(Map),
}

impl Value {
    /// An integer from decimal text (`-?[0-9]+`, no sign `+`, leading zeros allowed and
    /// dropped): `Int` when it fits in an `i64`, else canonical `BigInt`. `None` when the
    /// text is not such an integer. No length limit: the encoder writes any length; only
    /// requests are held to [`MAX_INT_CHARS`](crate::MAX_INT_CHARS).
    pub fn big_int(text: &str) -> Option<Value> {
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let digits = digits.trim_start_matches('0');
        if digits.is_empty() {
            return Some(Value::Int(0));
        }
        let canonical = if negative {
            format!("-{digits}")
        } else {
            digits.to_owned()
        };
        Some(match canonical.parse::<i64>() {
            Ok(n) => Value::Int(n),
            Err(_) => Value::BigInt(canonical.into_boxed_str()),
        })
    }

    /// The JSON-ish type name used in messages: `null`, `boolean`, `integer`, `number`,
    /// `string`, `bytes`, `array` or `object`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Int(_) | Value::BigInt(_) => "integer",
            Value::Float(_) => "number",
            Value::Str(_) => "string",
            Value::Bytes(_) => "bytes",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&Map> {
        match self {
            Value::Object(m) => Some(m),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::Int(n)
    }
}

impl From<i32> for Value {
    fn from(n: i32) -> Self {
        Value::Int(n.into())
    }
}

impl From<u32> for Value {
    fn from(n: u32) -> Self {
        Value::Int(n.into())
    }
}

impl From<u64> for Value {
    fn from(n: u64) -> Self {
        match i64::try_from(n) {
            Ok(n) => Value::Int(n),
            Err(_) => Value::BigInt(n.to_string().into_boxed_str()),
        }
    }
}

impl From<i128> for Value {
    fn from(n: i128) -> Self {
        match i64::try_from(n) {
            Ok(n) => Value::Int(n),
            Err(_) => Value::BigInt(n.to_string().into_boxed_str()),
        }
    }
}

impl From<f64> for Value {
    fn from(f: f64) -> Self {
        Value::Float(f)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s)
    }
}

impl From<Vec<u8>> for Value {
    fn from(b: Vec<u8>) -> Self {
        Value::Bytes(b)
    }
}

impl From<&[u8]> for Value {
    fn from(b: &[u8]) -> Self {
        Value::Bytes(b.to_vec())
    }
}

impl From<Vec<Value>> for Value {
    fn from(a: Vec<Value>) -> Self {
        Value::Array(a)
    }
}

impl From<Map> for Value {
    fn from(m: Map) -> Self {
        Value::Object(m)
    }
}

impl FromIterator<Value> for Value {
    fn from_iter<I: IntoIterator<Item = Value>>(iter: I) -> Self {
        Value::Array(iter.into_iter().collect())
    }
}

/// An insertion-ordered object with unique keys.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Map(pub Vec<(String, Value)>);

impl Map {
    pub fn new() -> Self {
        Map(Vec::new())
    }
    pub fn with_capacity(capacity: usize) -> Self {
        Map(Vec::with_capacity(capacity))
    }
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
    pub fn contains_key(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }
    /// Sets `key`, replacing (in place) the value of an existing equal key; returns the old
    /// value. Linear in the number of keys.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Option<Value> {
        let key = key.into();
        let value = value.into();
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, slot)) => Some(std::mem::replace(slot, value)),
            None => {
                self.0.push((key, value));
                None
            }
        }
    }
    /// Appends without looking for an equal key: the caller keeps keys unique (a converter
    /// reading a dict whose keys are already unique, for example).
    pub fn push(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        self.0.push((key.into(), value.into()));
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }
}

impl FromIterator<(String, Value)> for Map {
    /// Collects in order; a repeated key keeps its first position and its last value.
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        let mut map = Map::new();
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}

impl IntoIterator for Map {
    type Item = (String, Value);
    type IntoIter = std::vec::IntoIter<(String, Value)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Map {
    type Item = &'a (String, Value);
    type IntoIter = std::slice::Iter<'a, (String, Value)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}
