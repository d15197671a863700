//! Writing frames: compact JSON, keys in protocol order, non-ASCII as raw UTF-8.

use std::fmt::Write as _;

use crate::base64;
use crate::error::{DecodeError, DecodeErrorKind as K, ErrorKind};
use crate::parse::{Mode, Parser, err, scan_plain};
use crate::request::Request;
use crate::response::Response;
use crate::text::cut_chars;
use crate::value::Value;
use crate::{MAX_MESSAGE_CHARS, PROTOCOL_VERSION};

/// Appends the wire JSON of `value` to `out`.
///
/// Strings are escaped as JSON requires (`\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, other
/// control characters as `\u00XX`) and everything else is written as raw UTF-8. `Bytes` is
/// written `{"$bytes":"<standard base64>"}`, `BigInt` verbatim, and a `Float` in the layout
/// of Python's `repr` (the shortest digits that read back to the same float, always with `.`
/// or an exponent, so `json.loads` reads a float back: `1.0`, `1e+300`, `1.5e-05`; where two
/// shortest texts tie, the last digit may differ from Python's, never the value); a
/// non-finite float, which a `Value` should never hold, is written `null`. Iterative: any
/// depth is written without recursion.
pub fn encode_value(value: &Value, out: &mut Vec<u8>) {
    enum Open<'a> {
        Array(std::slice::Iter<'a, Value>, bool),
        Object(std::slice::Iter<'a, (String, Value)>, bool),
    }
    let mut stack: Vec<Open<'_>> = Vec::new();
    let mut next = Some(value);
    loop {
        if let Some(value) = next.take() {
            match value {
                Value::Null => out.extend_from_slice(b"null"),
                Value::Bool(true) => out.extend_from_slice(b"true"),
                Value::Bool(false) => out.extend_from_slice(b"false"),
                Value::Int(n) => write_i64(*n, out),
                Value::BigInt(text) => out.extend_from_slice(text.as_bytes()),
                Value::Float(f) => write_float(*f, out),
                Value::Str(s) => write_str(s, out),
                Value::Bytes(bytes) => {
                    out.extend_from_slice(b"{\"$bytes\":\"");
                    base64::encode_into(bytes, out);
                    out.extend_from_slice(b"\"}");
                }
                Value::Array(items) => {
                    out.push(b'[');
                    stack.push(Open::Array(items.iter(), true));
                }
                Value::Object(map) => {
                    out.push(b'{');
                    stack.push(Open::Object(map.0.iter(), true));
                }
            }
        }
        let Some(top) = stack.last_mut() else { return };
        match top {
            Open::Array(items, first) => match items.next() {
                Some(item) => {
                    if !std::mem::take(first) {
                        out.push(b',');
                    }
                    next = Some(item);
                }
                None => {
                    out.push(b']');
                    stack.pop();
                }
            },
            Open::Object(entries, first) => match entries.next() {
                Some((key, item)) => {
                    if !std::mem::take(first) {
                        out.push(b',');
                    }
                    write_str(key, out);
                    out.push(b':');
                    next = Some(item);
                }
                None => {
                    out.push(b'}');
                    stack.pop();
                }
            },
        }
    }
}

fn write_u64(mut n: u64, out: &mut Vec<u8>) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

fn write_i64(n: i64, out: &mut Vec<u8>) {
    if n < 0 {
        out.push(b'-');
    }
    write_u64(n.unsigned_abs(), out);
}

fn write_id(id: Option<u64>, out: &mut Vec<u8>) {
    match id {
        Some(id) => write_u64(id, out),
        None => out.extend_from_slice(b"null"),
    }
}

/// Writes `s` as a JSON string.
fn write_str(s: &str, out: &mut Vec<u8>) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    loop {
        let i = scan_plain(bytes, start);
        out.extend_from_slice(&bytes[start..i]);
        let Some(&c) = bytes.get(i) else { break };
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(c >> 4)]);
                out.push(HEX[usize::from(c & 0xf)]);
            }
        }
        start = i + 1;
    }
    out.push(b'"');
}

/// A fixed buffer for one float's `{:e}` text (at most 24 bytes: sign, 17 digits, `.`, `e-324`).
struct FloatBuf {
    buf: [u8; 32],
    len: usize,
}

impl std::fmt::Write for FloatBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let slot = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        slot.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Writes a finite float in the layout of Python's `repr`: the shortest digits that read
/// back to the same float, positional when the decimal exponent is in `-4..16`, else
/// `d.ddde+XX`.
fn write_float(f: f64, out: &mut Vec<u8>) {
    if !f.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    // Whole numbers below 1e16 (exactly representable, printed positionally) skip formatting.
    if f.fract() == 0.0 && f.abs() < 1e16 && !(f == 0.0 && f.is_sign_negative()) {
        write_i64(f as i64, out);
        out.extend_from_slice(b".0");
        return;
    }
    let mut fb = FloatBuf {
        buf: [0; 32],
        len: 0,
    };
    let heap;
    let text: &[u8] = if write!(fb, "{f:e}").is_ok() {
        &fb.buf[..fb.len]
    } else {
        heap = format!("{f:e}");
        heap.as_bytes()
    };
    // `{:e}` gives `-?D(.DDD)?e-?X` with shortest round-trip digits.
    let (negative, text) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let Some(e) = text.iter().position(|&b| b == b'e') else {
        out.extend_from_slice(b"null");
        return;
    };
    let (mantissa, exponent) = (&text[..e], &text[e + 1..]);
    let exp: i32 = std::str::from_utf8(exponent)
        .ok()
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    let mut digits = [0u8; 24];
    let mut n = 0;
    for &d in mantissa.iter().filter(|&&d| d != b'.') {
        if let Some(slot) = digits.get_mut(n) {
            *slot = d;
            n += 1;
        }
    }
    let digits = &digits[..n];
    if negative {
        out.push(b'-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.extend_from_slice(digits);
                out.resize(out.len() + int_len - digits.len(), b'0');
                out.extend_from_slice(b".0");
            } else {
                out.extend_from_slice(&digits[..int_len]);
                out.push(b'.');
                out.extend_from_slice(&digits[int_len..]);
            }
        } else {
            out.extend_from_slice(b"0.");
            out.resize(out.len() + (-exp - 1) as usize, b'0');
            out.extend_from_slice(digits);
        }
    } else {
        let (first, rest) = digits.split_first().unwrap_or((&b'0', &[]));
        out.push(*first);
        if !rest.is_empty() {
            out.push(b'.');
            out.extend_from_slice(rest);
        }
        out.push(b'e');
        out.push(if exp < 0 { b'-' } else { b'+' });
        let abs = exp.unsigned_abs();
        if abs < 10 {
            out.push(b'0');
        }
        write_u64(u64::from(abs), out);
    }
}

fn head(id: Option<u64>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"v\":");
    write_u64(PROTOCOL_VERSION, out);
    out.extend_from_slice(b",\"id\":");
    write_id(id, out);
}

/// Appends a success answer, `{"v":1,"id":<id|null>,"ok":true,"value":<value>}`.
pub fn encode_ok_into(id: Option<u64>, value: &Value, out: &mut Vec<u8>) {
    head(id, out);
    out.extend_from_slice(b",\"ok\":true,\"value\":");
    encode_value(value, out);
    out.push(b'}');
}

/// A success answer, `{"v":1,"id":<id|null>,"ok":true,"value":<value>}`.
pub fn encode_ok(id: Option<u64>, value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    encode_ok_into(id, value, &mut out);
    out
}

/// A start's acceptance, `{"v":1,"id":<id>,"ok":true,"started":true}`: the call runs, and
/// its answer comes in a wait's.
pub fn encode_started(id: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(48);
    head(Some(id), &mut out);
    out.extend_from_slice(b",\"ok\":true,\"started\":true}");
    out
}

/// A wait's answer, `{"v":1,"id":<id|null>,"ok":true,"answers":[<answer>,...]}`: each
/// answer is a whole answer frame, as `encode_ok` or `encode_error` wrote it for the call
/// (so under the call's id), written as it is.
pub fn encode_answers<A: AsRef<[u8]>>(id: Option<u64>, answers: &[A]) -> Vec<u8> {
    let len: usize = answers.iter().map(|a| a.as_ref().len() + 1).sum();
    let mut out = Vec::with_capacity(48 + len);
    head(id, &mut out);
    out.extend_from_slice(b",\"ok\":true,\"answers\":[");
    for (i, answer) in answers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(answer.as_ref());
    }
    out.extend_from_slice(b"]}");
    out
}

/// A failure answer, `{"v":1,"id":..,"ok":false,"error":{"kind":"..","message":".."}}`,
/// with the message cut to [`MAX_MESSAGE_CHARS`] characters.
pub fn encode_error(id: Option<u64>, kind: ErrorKind, message: &str) -> Vec<u8> {
    encode_error_text(id, kind.as_str(), message)
}

fn encode_error_text(id: Option<u64>, kind: &str, message: &str) -> Vec<u8> {
    let message = cut_chars(message, MAX_MESSAGE_CHARS);
    let mut out = Vec::with_capacity(64 + message.len());
    head(id, &mut out);
    out.extend_from_slice(b",\"ok\":false,\"error\":{\"kind\":");
    write_str(kind, &mut out);
    out.extend_from_slice(b",\"message\":");
    write_str(message, &mut out);
    out.extend_from_slice(b"}}");
    out
}

/// Any answer, as a host would send it (for guest-side tests and tools). A list answer is
/// encoded as [`ListAnswer`] does; an error's message is cut as in [`encode_error`].
pub fn encode_response(response: &Response) -> Vec<u8> {
    match response {
        Response::List { id, tools } => ListAnswer::from_values(tools).encode(*id),
        Response::Ok { id, value } => encode_ok(*id, value),
        Response::Err { id, kind, message } => encode_error_text(*id, kind.as_str(), message),
    }
}

/// A request frame as the guest sends it (§6.2): keys `v`, `id`, `op`, then `tool`, `args`
/// (a wait: `ids`, then `timeout_ms` when it has one).
pub fn encode_request(request: &Request) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    head(request.id(), &mut out);
    match request {
        Request::List { .. } => out.extend_from_slice(b",\"op\":\"list\"}"),
        Request::Wait { ids, timeout_ms, .. } => {
            out.extend_from_slice(b",\"op\":\"wait\",\"ids\":[");
            for (i, id) in ids.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_u64(*id, &mut out);
            }
            out.push(b']');
            if let Some(ms) = timeout_ms {
                out.extend_from_slice(b",\"timeout_ms\":");
                write_u64(*ms, &mut out);
            }
            out.push(b'}');
        }
        Request::Call { tool, args, .. } | Request::Start { tool, args, .. } => {
            let op: &[u8] = if matches!(request, Request::Call { .. }) { b"call" } else { b"start" };
            out.extend_from_slice(b",\"op\":\"");
            out.extend_from_slice(op);
            out.extend_from_slice(b"\",\"tool\":");
            write_str(tool, &mut out);
            out.extend_from_slice(b",\"args\":");
            out.push(b'{');
            for (i, (key, value)) in args.0.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(key, &mut out);
                out.push(b':');
                encode_value(value, &mut out);
            }
            out.extend_from_slice(b"}}");
        }
    }
    out
}

/// The list answer, encoded once: [`encode`](Self::encode) only splices the id in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListAnswer {
    /// `,"ok":true,"tools":[...]}`: everything after the id.
    tail: Vec<u8>,
}

impl ListAnswer {
    /// From the descriptors as one JSON array text (such as `serde_json::to_string` of a
    /// list of descriptors). Each element must be an object. The text is read by the answer
    /// rules of [`decode_response`](crate::decode_response) and re-encoded compactly.
    pub fn new(tools_json_array: &str) -> Result<ListAnswer, DecodeError> {
        let mut p = Parser::new(tools_json_array, Mode::Answer);
        let start = {
            p.skip_ws();
            p.pos()
        };
        // Depth as in the answer, where the list sits inside the answer object.
        let value = p.parse_value(1)?;
        p.expect_end()?;
        match value {
            Value::Array(tools) => {
                check_descriptors(&tools, start)?;
                Ok(ListAnswer::from_values(&tools))
            }
            other => Err(err(
                K::WrongType,
                start,
                format!(
                    "the tool list must be a JSON array, not {}",
                    other.type_name()
                ),
            )),
        }
    }

    /// From one JSON object text per descriptor, in list order.
    pub fn from_descriptors<I, S>(descriptors: I) -> Result<ListAnswer, DecodeError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut tools = Vec::new();
        for text in descriptors {
            let mut p = Parser::new(text.as_ref(), Mode::Answer);
            let value = p.parse_value(2)?;
            p.expect_end()?;
            tools.push(value);
        }
        check_descriptors(&tools, 0)?;
        Ok(ListAnswer::from_values(&tools))
    }

    /// From descriptors already held as values (not checked: each should be an object).
    pub fn from_values(tools: &[Value]) -> ListAnswer {
        let mut tail = Vec::with_capacity(64);
        tail.extend_from_slice(b",\"ok\":true,\"tools\":[");
        for (i, tool) in tools.iter().enumerate() {
            if i > 0 {
                tail.push(b',');
            }
            encode_value(tool, &mut tail);
        }
        tail.extend_from_slice(b"]}");
        ListAnswer { tail }
    }

    /// The same list with `"key":<value>` after `tools` in every answer: a field a version 1
    /// reader may ignore (the tool door adds `max_in_flight`).
    pub fn with(mut self, key: &str, value: &Value) -> ListAnswer {
        self.tail.pop(); // the closing brace
        self.tail.push(b',');
        write_str(key, &mut self.tail);
        self.tail.push(b':');
        encode_value(value, &mut self.tail);
        self.tail.push(b'}');
        self
    }

    /// `{"v":1,"id":<id|null>,"ok":true,"tools":[...]}`.
    pub fn encode(&self, id: Option<u64>) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.tail.len() + 32);
        head(id, &mut out);
        out.extend_from_slice(&self.tail);
        out
    }
}

fn check_descriptors(tools: &[Value], at: usize) -> Result<(), DecodeError> {
    match tools.iter().position(|t| !matches!(t, Value::Object(_))) {
        Some(i) => Err(err(
            K::WrongType,
            at,
            format!(
                "tool descriptor {i} is {}, not an object",
                tools[i].type_name()
            ),
        )),
        None => Ok(()),
    }
}
