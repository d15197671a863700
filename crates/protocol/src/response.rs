//! Answer frames (host to guest): decoding on the guest side.

use crate::PROTOCOL_VERSION;
use crate::error::{AnswerKind, DecodeError, DecodeErrorKind as K, ErrorKind};
use crate::parse::{KeySet, Mode, PResult, Parser, duplicate_key, echo_value, err, utf8};
use crate::request::echoable_id;
use crate::value::Value;

/// A decoded answer frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// `{"v":1,"id":1,"ok":true,"tools":[...]}`: the tool descriptors.
    List { id: Option<u64>, tools: Vec<Value> },
    /// `{"v":1,"id":2,"ok":true,"value":...}`: a call's result (`Null` when `value` is absent).
    Ok { id: Option<u64>, value: Value },
    /// `{"v":1,"id":3,"ok":false,"error":{"kind":"...","message":"..."}}`.
    Err {
        id: Option<u64>,
        kind: AnswerKind,
        message: String,
    },
}

impl Response {
    /// The answer's id; `None` for `null` (which the guest accepts for any request).
    pub fn id(&self) -> Option<u64> {
        match self {
            Response::List { id, .. } | Response::Ok { id, .. } | Response::Err { id, .. } => *id,
        }
    }
}

#[derive(Default)]
struct Fields {
    v: Option<(Value, usize)>,
    id: Option<(Value, usize)>,
    ok: Option<(Value, usize)>,
    value: Option<Value>,
    tools: Option<(Value, usize)>,
    error: Option<Value>,
}

/// Decodes an answer frame (guest side), reading it as the guest package does (§6.3).
///
/// The same JSON rules as requests apply (UTF-8, nesting up to [`MAX_DEPTH`](crate::MAX_DEPTH), no `NaN`, no
/// repeated key, no lone surrogate, integers up to 64 characters). An object that is exactly
/// `{"$bytes": "<string>"}` becomes [`Value::Bytes`] and must hold strict base64; an object
/// with a `"$bytes"` key among others stays an object. Refused: a frame that is not an object,
/// `v` other than 1, an `id` that is neither `null` nor an integer in `[0, 2^53-1]`, an `ok`
/// that is not `true` or `false`, and `tools` that is not an array. Leniently, as the guest:
/// a missing `value` is `Null`; an `error` whose `kind` is not a string is `tool_error`, and a
/// `message` that is not a string is `""`. With `ok: true`, a `tools` key makes it a list
/// answer. Comparing the id with the request's is the caller's part.
pub fn decode_response(frame: &[u8]) -> Result<Response, DecodeError> {
    let text = utf8(frame, "answer")?;
    let mut fields = Fields::default();
    let read = read_fields(text, &mut fields);
    let id = fields.id.as_ref().and_then(|(v, _)| echoable_id(v));
    read.and_then(|()| build(fields)).map_err(|mut e| {
        e.id = id;
        e
    })
}

fn read_fields(text: &str, fields: &mut Fields) -> PResult<()> {
    let mut p = Parser::new(text, Mode::Answer);
    p.open_frame()?;
    let mut seen = KeySet::default();
    let mut first = true;
    while let Some((key, key_at)) = p.next_key(first)? {
        first = false;
        if !seen.insert(&key) {
            if key == "id" {
                fields.id = None;
            }
            return Err(duplicate_key(&key, key_at));
        }
        let value_at = p.pos();
        let value = p.parse_value(1)?;
        match &*key {
            "v" => fields.v = Some((value, value_at)),
            "id" => fields.id = Some((value, value_at)),
            "ok" => fields.ok = Some((value, value_at)),
            "value" => fields.value = Some(value),
            "tools" => fields.tools = Some((value, value_at)),
            "error" => fields.error = Some(value),
            _ => {}
        }
    }
    p.expect_end()
}

fn build(fields: Fields) -> PResult<Response> {
    match fields.v {
        Some((Value::Int(v), _)) if u64::try_from(v) == Ok(PROTOCOL_VERSION) => {}
        Some((Value::Int(v), at)) => {
            return Err(err(
                K::Version,
                at,
                format!("the answer is protocol {v}, not {PROTOCOL_VERSION}"),
            ));
        }
        Some((other, at)) => {
            return Err(err(
                K::Version,
                at,
                format!(
                    "the answer is not a protocol {PROTOCOL_VERSION} object: its \"v\" is {}",
                    echo_value(&other)
                ),
            ));
        }
        None => {
            return Err(DecodeError::new(
                K::Version,
                None,
                format!("the answer is not a protocol {PROTOCOL_VERSION} object: it has no \"v\""),
            ));
        }
    }
    let id = match fields.id {
        None | Some((Value::Null, _)) => None,
        Some((value, at)) => match echoable_id(&value) {
            Some(id) => Some(id),
            None => {
                return Err(err(
                    K::WrongType,
                    at,
                    format!(
                        "the answer's id {} is neither null nor a request id",
                        echo_value(&value)
                    ),
                ));
            }
        },
    };
    let ok = match fields.ok {
        Some((Value::Bool(ok), _)) => ok,
        Some((other, at)) => {
            return Err(err(
                K::WrongType,
                at,
                format!(
                    "the answer has no ok: \"ok\" is {}, not true or false",
                    other.type_name()
                ),
            ));
        }
        None => {
            return Err(DecodeError::new(
                K::MissingField,
                None,
                "the answer has no ok".to_owned(),
            ));
        }
    };
    if ok {
        return match fields.tools {
            Some((Value::Array(tools), _)) => Ok(Response::List { id, tools }),
            Some((other, at)) => Err(err(
                K::WrongType,
                at,
                format!(
                    "the answer's \"tools\" is {}, not a list",
                    other.type_name()
                ),
            )),
            None => Ok(Response::Ok {
                id,
                value: fields.value.unwrap_or(Value::Null),
            }),
        };
    }
    let (kind, message) = match fields.error {
        Some(Value::Object(error)) => {
            let kind = match error.get("kind") {
                Some(Value::Str(kind)) => AnswerKind::from_wire(kind),
                _ => AnswerKind::Known(ErrorKind::ToolError),
            };
            let message = match error.get("message") {
                Some(Value::Str(message)) => message.clone(),
                _ => String::new(),
            };
            (kind, message)
        }
        _ => (AnswerKind::Known(ErrorKind::ToolError), String::new()),
    };
    Ok(Response::Err { id, kind, message })
}
