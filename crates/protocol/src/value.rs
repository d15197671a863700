//! The values that cross the door: JSON plus bytes and integers wider than 64 bits.

/// One value of a frame. Objects keep their keys in wire order; keys are unique.
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

/// An insertion-ordered object with unique keys.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Map(pub Vec<(String, Value)>);

impl Map {
    pub fn new() -> Self {
        Map(Vec::new())
    }
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
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
}
