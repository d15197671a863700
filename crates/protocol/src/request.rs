//! Request frames (guest to host): decoding on the host side.

use crate::error::{DecodeError, DecodeErrorKind as K};
use crate::parse::{BYTES_KEY, KeySet, Mode, PResult, Parser, duplicate_key, echo_value, err, utf8};
use crate::text::{cut_chars, echo};
use crate::value::{Map, Value};
use crate::{MAX_ECHO_CHARS, MAX_ID, MAX_REQUEST_BYTES, MAX_WAIT_IDS, PROTOCOL_VERSION};

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
    /// `{"v":1,"id":3,"op":"start","tool":"f","args":{...}}`: a call as `Call` is, answered
    /// at once (started, or refused as a call is before its tool runs); its answer comes
    /// later, in a `Wait`'s, under this frame's id, which must be a request id.
    Start { id: u64, tool: String, args: Map },
    /// `{"v":1,"id":4,"op":"wait","ids":[3],"timeout_ms":100}`: the answers of these
    /// started calls (1 to [`MAX_WAIT_IDS`], distinct), once at least one is in, or after
    /// `timeout_ms` (absent: no limit but the run's).
    Wait {
        id: Option<u64>,
        ids: Vec<u64>,
        timeout_ms: Option<u64>,
    },
}

impl Request {
    pub fn id(&self) -> Option<u64> {
        match self {
            Request::List { id } | Request::Call { id, .. } | Request::Wait { id, .. } => *id,
            Request::Start { id, .. } => Some(*id),
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
    ids: Option<(Value, usize)>,
    timeout_ms: Option<(Value, usize)>,
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
            "ids" => 32,
            "timeout_ms" => 64,
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
            "ids" => fields.ids = Some((value, value_at)),
            "timeout_ms" => fields.timeout_ms = Some((value, value_at)),
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
                format!("the frame has no \"op\"; {SERVES}"),
            ));
        }
    };
    match op.as_str() {
        "list" => Ok(Request::List { id }),
        "call" | "start" => {
            let (tool, args) = tool_and_args(fields.tool, fields.args)?;
            if op == "call" {
                return Ok(Request::Call { id, tool, args });
            }
            match id {
                Some(id) => Ok(Request::Start { id, tool, args }),
                None => Err(DecodeError::new(
                    K::MissingField,
                    None,
                    format!(
                        "a start must carry a request id (an integer from 0 to {MAX_ID}): its answer is waited for by it"
                    ),
                )),
            }
        }
        "wait" => wait(id, fields.ids, fields.timeout_ms),
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
                "unknown op {}; {SERVES}",
                echo(other)
            ),
        )),
    }
}

/// The ops a version 1 host serves, as its refusals name them.
const SERVES: &str = "this host serves 'list', 'call', 'start' and 'wait'";

/// A call's (or a start's) `tool` and `args`.
fn tool_and_args(tool: Option<(Value, usize)>, args: Option<(Value, usize)>) -> PResult<(String, Map)> {
    let tool = match tool {
        Some((Value::Str(tool), _)) => tool,
        Some((other, at)) => {
            return Err(err(
                K::WrongType,
                at,
                format!("a call's \"tool\" must be a string, not {}", other.type_name()),
            ));
        }
        None => {
            return Err(DecodeError::new(K::MissingField, None, "a call must name its \"tool\"".to_owned()));
        }
    };
    let args = match args {
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
    Ok((tool, args))
}

/// A wait's `ids` (1 to [`MAX_WAIT_IDS`] distinct request ids) and `timeout_ms` (an
/// integer of at least 0, capped at `u64::MAX`; absent: no limit).
fn wait(id: Option<u64>, ids: Option<(Value, usize)>, timeout_ms: Option<(Value, usize)>) -> PResult<Request> {
    let (list, at) = match ids {
        Some((Value::Array(list), at)) => (list, at),
        Some((other, at)) => {
            return Err(err(K::BadWait, at, format!("a wait's \"ids\" must be a list, not {}", other.type_name())));
        }
        None => {
            return Err(DecodeError::new(K::MissingField, None, "a wait must name the calls it waits for in \"ids\"".to_owned()));
        }
    };
    if list.is_empty() || list.len() > MAX_WAIT_IDS {
        return Err(err(
            K::BadWait,
            at,
            format!("a wait names from 1 to {MAX_WAIT_IDS} calls, not {}", list.len()),
        ));
    }
    let mut ids = Vec::with_capacity(list.len());
    for value in &list {
        match echoable_id(value) {
            Some(n) if !ids.contains(&n) => ids.push(n),
            Some(n) => return Err(err(K::BadWait, at, format!("a wait names call {n} twice"))),
            None => {
                return Err(err(
                    K::BadWait,
                    at,
                    format!("a wait's ids are request ids (integers from 0 to {MAX_ID}), not {}", echo_value(value)),
                ));
            }
        }
    }
    let timeout_ms = match timeout_ms {
        None => None,
        Some((Value::Int(n), _)) if n >= 0 => Some(n as u64),
        // An integer past i64 (up to 64 characters): past u64 too, a wait as long as any.
        Some((Value::BigInt(text), _)) if !text.starts_with('-') => Some(text.parse().unwrap_or(u64::MAX)),
        Some((other, at)) => {
            return Err(err(
                K::BadWait,
                at,
                format!("a wait's \"timeout_ms\" is an integer of at least 0, not {}", echo_value(&other)),
            ));
        }
    };
    Ok(Request::Wait { id, ids, timeout_ms })
}
