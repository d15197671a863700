//! A small strict JSON parser over a byte slice, building [`Value`]s directly.
//!
//! Recursion is bounded by [`MAX_DEPTH`]; memory is bounded by the input's length (strings
//! are borrowed when they hold no escape). It never panics: every index is checked.

use std::borrow::Cow;
use std::collections::HashSet;

use crate::base64;
use crate::error::{DecodeError, DecodeErrorKind as K};
use crate::text::{cut_chars, echo};
use crate::value::{Map, Value};
use crate::{MAX_DEPTH, MAX_INT_CHARS};

/// How `{"$bytes": ...}` objects are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Requests (host side, §6.4): a `"$bytes"` key must be the only key of its object and
    /// hold strict base64; anything else is refused.
    Request,
    /// Answers (guest side, §6.3): an object that is exactly `{"$bytes": <string>}` must hold
    /// strict base64 and becomes bytes; any other object with that key stays an object.
    Answer,
}

pub(crate) const BYTES_KEY: &str = "$bytes";

/// Objects with more keys than this look for duplicates in a hash set, not a linear scan.
const LINEAR_KEYS: usize = 16;

pub(crate) type PResult<T> = Result<T, DecodeError>;

#[derive(Debug)]
pub(crate) struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    mode: Mode,
}

pub(crate) fn err(kind: K, at: usize, message: impl Into<String>) -> DecodeError {
    DecodeError::new(kind, Some(at), message.into())
}

/// The index of the first `"`, `\` or control character (< 0x20) at or after `i`, or the
/// length. Eight bytes at a time: each test below flags exactly the lowest matching byte
/// (a borrow can only add false flags above a true one), so the lowest flag is exact.
pub(crate) fn scan_plain(bytes: &[u8], mut i: usize) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let Ok(word) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let w = u64::from_le_bytes(word);
        let quote = w ^ (LO * u64::from(b'"'));
        let slash = w ^ (LO * u64::from(b'\\'));
        let hits = ((quote.wrapping_sub(LO) & !quote)
            | (slash.wrapping_sub(LO) & !slash)
            | (w.wrapping_sub(LO * 0x20) & !w))
            & HI;
        if hits != 0 {
            return i + (hits.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&b) = bytes.get(i) {
        if b == b'"' || b == b'\\' || b < 0x20 {
            return i;
        }
        i += 1;
    }
    i
}

fn hex4(bytes: &[u8], at: usize) -> Option<u32> {
    let digits = bytes.get(at..at + 4)?;
    let mut n = 0u32;
    for &d in digits {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return None,
        };
        n = (n << 4) | u32::from(v);
    }
    Some(n)
}

/// Keys already read in one object, for the duplicate check of objects not kept in a
/// [`Map`] (the frame's top level).
#[derive(Debug, Default)]
pub(crate) struct KeySet<'a> {
    small: Vec<Cow<'a, str>>,
    large: Option<HashSet<Cow<'a, str>>>,
}

impl<'a> KeySet<'a> {
    /// Adds `key`; false when it was already there.
    #[expect(
        clippy::ptr_arg,
        reason = "a borrowed Cow is cloned without copying its text"
    )]
    pub(crate) fn insert(&mut self, key: &Cow<'a, str>) -> bool {
        if let Some(set) = &mut self.large {
            return set.insert(key.clone());
        }
        if self.small.iter().any(|k| k == key) {
            return false;
        }
        self.small.push(key.clone());
        if self.small.len() > LINEAR_KEYS {
            self.large = Some(std::mem::take(&mut self.small).into_iter().collect());
        }
        true
    }
}

impl<'a> Parser<'a> {
    pub(crate) fn new(text: &'a str, mode: Mode) -> Self {
        Parser {
            text,
            bytes: text.as_bytes(),
            pos: 0,
            mode,
        }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    pub(crate) fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn syntax(&self, at: usize, what: &str) -> DecodeError {
        let found = match self.bytes.get(at) {
            None => "the end".to_owned(),
            Some(_) => {
                let rest = self.text.get(at..).unwrap_or("");
                match rest.chars().next() {
                    Some(c) if c.is_control() => format!("{:?}", c),
                    Some(c) => format!("'{c}'"),
                    None => "the end".to_owned(),
                }
            }
        };
        err(
            K::Syntax,
            at,
            format!("the frame is not valid JSON: {what} at byte {at}, found {found}"),
        )
    }

    /// After the top-level value: only whitespace may follow.
    pub(crate) fn expect_end(&mut self) -> PResult<()> {
        self.skip_ws();
        if self.pos < self.bytes.len() {
            return Err(self.syntax(self.pos, "expected the end of the frame"));
        }
        Ok(())
    }

    /// Consumes the `{` that opens the frame. A frame that is some other JSON value is
    /// `NotObject`; one that is not JSON at all is `Syntax`.
    pub(crate) fn open_frame(&mut self) -> PResult<()> {
        self.skip_ws();
        if self.peek() == Some(b'{') {
            self.pos += 1;
            return Ok(());
        }
        let at = self.pos;
        if at >= self.bytes.len() {
            return Err(err(
                K::Syntax,
                at,
                "the frame is not valid JSON: it is empty",
            ));
        }
        self.parse_value(0)?;
        self.expect_end()?;
        Err(err(K::NotObject, at, "the frame is not a JSON object"))
    }

    /// Reads the next key of an object whose `{` is consumed, with its `:`. `None` once the
    /// closing `}` is consumed. Returns the key and the offset of its opening quote.
    pub(crate) fn next_key(&mut self, first: bool) -> PResult<Option<(Cow<'a, str>, usize)>> {
        self.skip_ws();
        match self.peek() {
            Some(b'}') if first => {
                self.pos += 1;
                return Ok(None);
            }
            _ if first => {}
            Some(b',') => {
                self.pos += 1;
                self.skip_ws();
            }
            Some(b'}') => {
                self.pos += 1;
                return Ok(None);
            }
            _ => return Err(self.syntax(self.pos, "expected ',' or '}'")),
        }
        if self.peek() != Some(b'"') {
            return Err(self.syntax(self.pos, "expected a string key"));
        }
        let at = self.pos;
        let key = self.parse_string()?;
        self.skip_ws();
        if self.peek() != Some(b':') {
            return Err(self.syntax(self.pos, "expected ':'"));
        }
        self.pos += 1;
        self.skip_ws();
        Ok(Some((key, at)))
    }

    /// One value; `depth` is the number of containers already open around it.
    pub(crate) fn parse_value(&mut self, depth: usize) -> PResult<Value> {
        self.skip_ws();
        let at = self.pos;
        match self.peek() {
            Some(b'"') => Ok(Value::Str(self.parse_string()?.into_owned())),
            Some(b'{') => {
                self.enter(depth)?;
                self.parse_object(depth + 1)
            }
            Some(b'[') => {
                self.enter(depth)?;
                self.parse_array(depth + 1)
            }
            Some(b'-' | b'0'..=b'9') => self.parse_number(),
            Some(b't') => self.literal(b"true", Value::Bool(true)),
            Some(b'f') => self.literal(b"false", Value::Bool(false)),
            Some(b'n') => self.literal(b"null", Value::Null),
            Some(b'N') if self.bytes[at..].starts_with(b"NaN") => Err(non_finite(at, "NaN")),
            Some(b'I') if self.bytes[at..].starts_with(b"Infinity") => {
                Err(non_finite(at, "Infinity"))
            }
            _ => Err(self.syntax(at, "expected a value")),
        }
    }

    fn enter(&self, depth: usize) -> PResult<()> {
        if depth >= MAX_DEPTH {
            return Err(err(
                K::Depth,
                self.pos,
                format!(
                    "the frame nests deeper than {MAX_DEPTH} levels at byte {}",
                    self.pos
                ),
            ));
        }
        Ok(())
    }

    fn literal(&mut self, word: &'static [u8], value: Value) -> PResult<Value> {
        if self.bytes[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.syntax(self.pos, "expected a value"))
        }
    }

    fn parse_array(&mut self, depth: usize) -> PResult<Value> {
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.parse_value(depth)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.syntax(self.pos, "expected ',' or ']'")),
            }
        }
    }

    fn parse_object(&mut self, depth: usize) -> PResult<Value> {
        let open = self.pos;
        self.pos += 1; // '{'
        let mut map = Map::new();
        let mut set: Option<HashSet<Cow<'a, str>>> = None;
        let mut first = true;
        while let Some((key, key_at)) = self.next_key(first)? {
            if key == BYTES_KEY {
                if first {
                    match self.bytes_value(open, key_at, depth)? {
                        Ok(bytes) => return Ok(bytes),
                        Err(value) => {
                            // Answer mode: an object with a "$bytes" key and others.
                            map.0.push((key.into_owned(), value));
                            first = false;
                            continue;
                        }
                    }
                }
                if self.mode == Mode::Request {
                    return Err(bytes_not_alone(key_at));
                }
            }
            first = false;
            let duplicate = match &mut set {
                Some(set) => !set.insert(key.clone()),
                None => {
                    let dup = map.0.iter().any(|(k, _)| *k == *key);
                    if !dup && map.0.len() >= LINEAR_KEYS {
                        let mut s: HashSet<Cow<'a, str>> =
                            map.0.iter().map(|(k, _)| Cow::Owned(k.clone())).collect();
                        s.insert(key.clone());
                        set = Some(s);
                    }
                    dup
                }
            };
            if duplicate {
                return Err(duplicate_key(&key, key_at));
            }
            let value = self.parse_value(depth)?;
            map.0.push((key.into_owned(), value));
        }
        Ok(Value::Object(map))
    }

    /// The value of a `"$bytes"` key that opens an object. `Ok(Ok(bytes))` when the object
    /// is exactly `{"$bytes": "<base64>"}` (closing `}` consumed); `Ok(Err(value))` in answer
    /// mode when it is an ordinary object after all (the key's value is returned and the
    /// object's other keys are still to read).
    fn bytes_value(
        &mut self,
        open: usize,
        key_at: usize,
        depth: usize,
    ) -> PResult<Result<Value, Value>> {
        let value_at = self.pos;
        if self.peek() != Some(b'"') {
            if self.mode == Mode::Request {
                // Read it anyway so a syntax error further on is reported as such first.
                let value = self.parse_value(depth)?;
                return Err(err(
                    K::BadBytes,
                    value_at,
                    format!(
                        "a \"$bytes\" value must be a base64 string, not {} (byte {value_at})",
                        value.type_name()
                    ),
                ));
            }
            return Ok(Err(self.parse_value(depth)?));
        }
        let text = self.parse_string()?;
        self.skip_ws();
        if self.peek() != Some(b'}') {
            if self.mode == Mode::Request {
                return Err(bytes_not_alone(key_at));
            }
            return Ok(Err(Value::Str(text.into_owned())));
        }
        self.pos += 1;
        match base64::decode(text.as_bytes()) {
            Ok(bytes) => Ok(Ok(Value::Bytes(bytes))),
            Err(e) => Err(err(
                K::BadBytes,
                value_at,
                format!(
                    "the \"$bytes\" object at byte {open} is not strict base64: {} (character {})",
                    e.what, e.at
                ),
            )),
        }
    }

    /// A string whose opening quote is at `self.pos`.
    pub(crate) fn parse_string(&mut self) -> PResult<Cow<'a, str>> {
        let start = self.pos + 1;
        let mut i = scan_plain(self.bytes, start);
        match self.bytes.get(i) {
            Some(b'"') => {
                self.pos = i + 1;
                return match self.text.get(start..i) {
                    Some(s) => Ok(Cow::Borrowed(s)),
                    None => Err(self.syntax(start, "a string is cut inside a character")),
                };
            }
            Some(b'\\') => {}
            Some(_) => return Err(self.control(i)),
            None => return Err(self.unterminated(start - 1)),
        }
        let mut out = String::with_capacity(i - start + 16);
        out.push_str(self.text.get(start..i).unwrap_or(""));
        loop {
            // bytes[i] is '\\'
            let escape_at = i;
            let c = match self.bytes.get(i + 1) {
                Some(b'"') => '"',
                Some(b'\\') => '\\',
                Some(b'/') => '/',
                Some(b'b') => '\u{8}',
                Some(b'f') => '\u{c}',
                Some(b'n') => '\n',
                Some(b'r') => '\r',
                Some(b't') => '\t',
                Some(b'u') => {
                    let Some(unit) = hex4(self.bytes, i + 2) else {
                        return Err(self.syntax(i, "expected four hex digits after \\u"));
                    };
                    i += 4;
                    match unit {
                        0xD800..=0xDBFF => {
                            let low = match self.bytes.get(i + 2..i + 4) {
                                Some(b"\\u") => hex4(self.bytes, i + 4),
                                _ => None,
                            };
                            match low {
                                Some(low @ 0xDC00..=0xDFFF) => {
                                    i += 6;
                                    let code = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                                    char::from_u32(code).unwrap_or('\u{FFFD}')
                                }
                                _ => return Err(lone_surrogate(escape_at, unit)),
                            }
                        }
                        0xDC00..=0xDFFF => return Err(lone_surrogate(escape_at, unit)),
                        _ => char::from_u32(unit).unwrap_or('\u{FFFD}'),
                    }
                }
                Some(_) => return Err(self.syntax(i, "invalid escape")),
                None => return Err(self.unterminated(start - 1)),
            };
            out.push(c);
            i += 2;
            let run = i;
            i = scan_plain(self.bytes, i);
            out.push_str(self.text.get(run..i).unwrap_or(""));
            match self.bytes.get(i) {
                Some(b'"') => {
                    self.pos = i + 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {}
                Some(_) => return Err(self.control(i)),
                None => return Err(self.unterminated(start - 1)),
            }
        }
    }

    fn control(&self, at: usize) -> DecodeError {
        self.syntax(at, "a control character in a string must be escaped")
    }

    fn unterminated(&self, open: usize) -> DecodeError {
        err(
            K::Syntax,
            self.bytes.len(),
            format!("the frame is not valid JSON: the string opened at byte {open} never ends"),
        )
    }

    fn parse_number(&mut self) -> PResult<Value> {
        let b = self.bytes;
        let start = self.pos;
        let mut i = start;
        let negative = b.get(i) == Some(&b'-');
        if negative {
            i += 1;
            if b[i..].starts_with(b"Infinity") {
                return Err(non_finite(start, "-Infinity"));
            }
        }
        match b.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while let Some(b'0'..=b'9') = b.get(i) {
                    i += 1;
                }
            }
            _ => return Err(self.syntax(i, "expected a digit")),
        }
        let int_end = i;
        let mut float = false;
        if b.get(i) == Some(&b'.') {
            i += 1;
            if !matches!(b.get(i), Some(b'0'..=b'9')) {
                return Err(self.syntax(i, "expected a digit after '.'"));
            }
            while let Some(b'0'..=b'9') = b.get(i) {
                i += 1;
            }
            float = true;
        }
        if let Some(b'e' | b'E') = b.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = b.get(i) {
                i += 1;
            }
            if !matches!(b.get(i), Some(b'0'..=b'9')) {
                return Err(self.syntax(i, "expected a digit in the exponent"));
            }
            while let Some(b'0'..=b'9') = b.get(i) {
                i += 1;
            }
            float = true;
        }
        self.pos = i;
        let text = self.text.get(start..i).unwrap_or("");
        if float {
            return match text.parse::<f64>() {
                Ok(f) if f.is_finite() => Ok(Value::Float(f)),
                Ok(_) => Err(err(
                    K::NonFinite,
                    start,
                    format!(
                        "the number at byte {start} is too large for a float; only finite numbers cross"
                    ),
                )),
                Err(_) => Err(self.syntax(start, "expected a number")),
            };
        }
        let len = int_end - start;
        if len > MAX_INT_CHARS {
            return Err(err(
                K::IntTooLong,
                start,
                format!(
                    "the integer at byte {start} has {len} characters; at most {MAX_INT_CHARS} cross"
                ),
            ));
        }
        let digits = &b[start + usize::from(negative)..int_end];
        if digits.len() <= 18 {
            let mut n: i64 = 0;
            for &d in digits {
                n = n * 10 + i64::from(d - b'0');
            }
            return Ok(Value::Int(if negative { -n } else { n }));
        }
        Ok(match text.parse::<i64>() {
            Ok(n) => Value::Int(n),
            Err(_) => Value::BigInt(text.into()),
        })
    }
}

fn non_finite(at: usize, word: &str) -> DecodeError {
    err(
        K::NonFinite,
        at,
        format!("{word} at byte {at} is not JSON; only finite numbers cross"),
    )
}

fn lone_surrogate(at: usize, unit: u32) -> DecodeError {
    err(
        K::LoneSurrogate,
        at,
        format!(
            "the escape \\u{unit:04x} at byte {at} is half a surrogate pair; lone surrogates do not cross"
        ),
    )
}

fn bytes_not_alone(at: usize) -> DecodeError {
    err(
        K::BadBytes,
        at,
        format!("the \"$bytes\" key at byte {at} must be the only key of its object"),
    )
}

pub(crate) fn duplicate_key(key: &str, at: usize) -> DecodeError {
    err(
        K::DuplicateKey,
        at,
        format!("the key {} at byte {at} is repeated", echo(key)),
    )
}

/// A value's JSON text cut for a message (such as a wrong `v`).
pub(crate) fn echo_value(value: &Value) -> String {
    let mut out = Vec::new();
    crate::encode::encode_value(value, &mut out);
    let text = String::from_utf8_lossy(&out);
    cut_chars(&text, crate::MAX_ECHO_CHARS).to_owned()
}

/// The frame as text, or a `Utf8` error at the first bad byte; `what` names it ("frame", "answer").
pub(crate) fn utf8<'a>(frame: &'a [u8], what: &str) -> Result<&'a str, DecodeError> {
    std::str::from_utf8(frame).map_err(|e| {
        let at = e.valid_up_to();
        err(
            K::Utf8,
            at,
            format!("the {what} is not UTF-8: a bad byte at {at}"),
        )
    })
}
