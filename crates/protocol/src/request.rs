//! Request frames (guest to host): decoding on the host side.

use crate::error::{DecodeError, DecodeErrorKind as K};
use crate::parse::{BYTES_KEY, KeySet, Mode, PResult, Parser, duplicate_key, echo_value, err, utf8};
use crate::text::{cut_chars, echo};
use crate::value::{Map, Value};
use crate::{MAX_ECHO_CHARS, MAX_ID, MAX_REQUEST_BYTES, PROTOCOL_VERSION};

/// A decoded request frame.
///
/// `id` is `Some` only when the frame's `id` is an integer in `[0, 2^53-1]`; any other `id`
/// (absent, `null`, negative, a string...) is not an error, but the answer carries `null`.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// `{"v":1,"id":1,"op":"list"}`: the guest asks for the tool descriptors.
    List { id: Option<u64> },
    /// `{"v":1,"id":2,"op":"call","tool":"f","args":{...}}`; `args` is `{}` when absent.
    Call {
        id: Option<u64>,
        tool: String,
        args: Map,
    },
}

impl Request {
    pub fn id(&self) -> Option<u64> {
        match self {
            Request::List { id } | Request::Call { id, .. } => *id,
        }
    }
}

/// The id an answer echoes for this `id` value.
pub(crate) fn echoable_id(value: &Value) -> Option<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok().filter(|&n| n <= MAX_ID),
        _ => None,
    }
}

#[derive(Default)]
struct Fields {
    v: Option<(Value, usize)>,
    id: Option<u64>,
    op: Option<(Value, usize)>,
    tool: Option<(Value, usize)>,
    args: Option<(Value, usize)>,
}

/// Decodes a request frame (host side), by the rules of §6.4.
///
/// Refused, as [`DecodeError`]s: a frame over [`MAX_REQUEST_BYTES`]; bytes that are not
/// UTF-8 or not JSON; nesting deeper than [`MAX_DEPTH`](crate::MAX_DEPTH); `NaN`,
/// `Infinity` and floats that overflow; integers over [`MAX_INT_CHARS`](crate::MAX_INT_CHARS)
/// characters; a key repeated in any object; lone surrogate escapes; a `"$bytes"` key that is
/// not the only key of its object or whose value is not strict standard base64; a frame that
/// is not an object; `v` other than the integer 1; `op` missing, not a string, `"batch"`
/// (reserved) or unknown; a call whose `tool` is missing or not a string, or whose `args` is
/// not an object.
///
/// Top-level keys other than `v`, `id`, `op`, `tool` and `args` are read (and held to the
/// same rules) but ignored, as are `tool` and `args` in a `list` frame. The error carries
/// the frame's id when a valid one was read before the fault.
pub fn decode_request(frame: &[u8]) -> Result<Request, DecodeError> {
    if frame.len() > MAX_REQUEST_BYTES {
        return Err(DecodeError::new(
            K::TooLarge,
            None,
            format!(
                "the request has {} bytes; at most {MAX_REQUEST_BYTES} are read",
                frame.len()
            ),
        ));
    }
    let text = utf8(frame, "frame")?;
    let mut fields = Fields::default();
    if let Err(mut e) = read_fields(text, &mut fields) {
        e.id = fields.id;
        return Err(e);
    }
    let id = fields.id;
    build(fields).map_err(|mut e| {
        e.id = id;
        e
    })
}

fn read_fields(text: &str, fields: &mut Fields) -> PResult<()> {
    let mut p = Parser::new(text, Mode::Request);
    p.open_frame()?;
    // The protocol's own keys are tracked by bit; only other keys need the set.
    let mut known = 0u8;
    let mut seen = KeySet::default();
    let mut first = true;
    while let Some((key, key_at)) = p.next_key(first)? {
        first = false;
        let bit = match &*key {
            "v" => 1,
            "id" => 2,
            "op" => 4,
            "tool" => 8,
            "args" => 16,
            _ => 0,
        };
        let fresh = if bit == 0 {
            seen.insert(&key)
        } else {
            known & bit == 0
        };
        known |= bit;
        if !fresh {
            if key == "id" {
                fields.id = None;
            }
            return Err(duplicate_key(&key, key_at));
        }
        if key == BYTES_KEY {
            return Err(err(
                K::BadBytes,
                key_at,
                format!("the \"$bytes\" key at byte {key_at} must be the only key of its object"),
            ));
        }
        let value_at = p.pos();
        let value = p.parse_value(1)?;
        match &*key {
            "v" => fields.v = Some((value, value_at)),
            "id" => fields.id = echoable_id(&value),
            "op" => fields.op = Some((value, value_at)),
            "tool" => fields.tool = Some((value, value_at)),
            "args" => fields.args = Some((value, value_at)),
            _ => {}
        }
    }
    p.expect_end()
}

fn build(fields: Fields) -> PResult<Request> {
    let id = fields.id;
    match fields.v {
        Some((Value::Int(v), _)) if u64::try_from(v) == Ok(PROTOCOL_VERSION) => {}
        Some((other, at)) => {
            return Err(err(
                K::Version,
                at,
                format!(
                    "this host serves protocol version {PROTOCOL_VERSION}; the frame asks for {}",
                    echo_value(&other)
                ),
            ));
        }
        None => {
            return Err(DecodeError::new(
                K::Version,
                None,
                format!(
                    "this host serves protocol version {PROTOCOL_VERSION}; the frame names no version \"v\""
                ),
            ));
        }
    }
    let (op, op_at) = match fields.op {
        Some((Value::Str(op), at)) => (op, at),
        Some((other, at)) => {
            return Err(err(
                K::WrongType,
                at,
                format!(
                    "the frame's \"op\" must be a string, not {}",
                    other.type_name()
                ),
            ));
        }
        None => {
            return Err(DecodeError::new(
                K::MissingField,
                None,
                "the frame has no \"op\"; this host serves 'list' and 'call'".to_owned(),
            ));
        }
    };
    match op.as_str() {
        "list" => Ok(Request::List { id }),
        "call" => {
            let tool = match fields.tool {
                Some((Value::Str(tool), _)) => tool,
                Some((other, at)) => {
                    return Err(err(
                        K::WrongType,
                        at,
                        format!(
                            "a call's \"tool\" must be a string, not {}",
                            other.type_name()
                        ),
                    ));
                }
                None => {
                    return Err(DecodeError::new(
                        K::MissingField,
                        None,
                        "a call must name its \"tool\"".to_owned(),
                    ));
                }
            };
            let args = match fields.args {
                None => Map::new(),
                Some((Value::Object(args), _)) => args,
                Some((other, at)) => {
                    let mut e = err(
                        K::ArgsNotObject,
                        at,
                        format!(
                            "{}: the arguments must be an object, not {}",
                            cut_chars(&tool, MAX_ECHO_CHARS),
                            other.type_name()
                        ),
                    );
                    e.tool = Some(tool);
                    return Err(e);
                }
            };
            Ok(Request::Call { id, tool, args })
        }
        "batch" => Err(err(
            K::ReservedOp,
            op_at,
            format!(
                "op 'batch' is reserved for a later protocol version; this host serves version {PROTOCOL_VERSION}"
            ),
        )),
        other => Err(err(
            K::UnknownOp,
            op_at,
            format!(
                "unknown op {}; this host serves 'list' and 'call'",
                echo(other)
            ),
        )),
    }
}
