//! The protocol crate's one integration binary: table tests, properties and a fuzz smoke run.

mod answers;
mod encode;
mod fuzz_smoke;
mod props;
mod requests;

use wasi_python_protocol::{DecodeError, Request, Response, encode_value};

/// The compact JSON of a value (bytes as `{"$bytes":...}`).
pub(crate) fn json(value: &wasi_python_protocol::Value) -> String {
    let mut out = Vec::new();
    encode_value(value, &mut out);
    String::from_utf8(out).expect("the encoder writes UTF-8")
}

fn id_suffix(id: Option<u64>) -> String {
    id.map(|id| format!(" id={id}")).unwrap_or_default()
}

/// One line per error: `err Kind @ offset` (`@ -` without an offset), then ` id=N` if any.
pub(crate) fn render_error(e: &DecodeError) -> String {
    let at = e.offset.map_or("-".to_owned(), |o| o.to_string());
    format!("err {:?} @ {at}{}", e.kind, id_suffix(e.id))
}

/// One line per decoded request: `list[ id=N]`, `call[ id=N] <tool> <args json>`, the same
/// for `start`, or `wait[ id=N] [ids] <timeout_ms or ->`.
pub(crate) fn render_request(result: &Result<Request, DecodeError>) -> String {
    match result {
        Ok(Request::List { id }) => format!("list{}", id_suffix(*id)),
        Ok(Request::Call { id, tool, args }) => {
            let args = wasi_python_protocol::Value::Object(args.clone());
            format!("call{} {tool} {}", id_suffix(*id), json(&args))
        }
        Ok(Request::Start { id, tool, args }) => {
            let args = wasi_python_protocol::Value::Object(args.clone());
            format!("start{} {tool} {}", id_suffix(Some(*id)), json(&args))
        }
        Ok(Request::Wait { id, ids, timeout_ms }) => {
            let ms = timeout_ms.map_or("-".to_owned(), |ms| ms.to_string());
            format!("wait{} {ids:?} {ms}", id_suffix(*id))
        }
        Err(e) => render_error(e),
    }
}

/// One line per decoded answer: `list[ id=N] <tools json>`, `ok[ id=N] <value json>` or
/// `fail[ id=N] <kind> <message json>` (an unknown kind as `?kind`).
pub(crate) fn render_response(result: &Result<Response, DecodeError>) -> String {
    match result {
        Ok(Response::List { id, tools }) => {
            format!(
                "list{} {}",
                id_suffix(*id),
                json(&tools.iter().cloned().collect())
            )
        }
        Ok(Response::Ok { id, value }) => format!("ok{} {}", id_suffix(*id), json(value)),
        Ok(Response::Err { id, kind, message }) => {
            let kind = match kind {
                wasi_python_protocol::AnswerKind::Known(k) => k.as_str().to_owned(),
                wasi_python_protocol::AnswerKind::Other(s) => format!("?{s}"),
            };
            let message = json(&message.as_str().into());
            format!("fail{} {kind} {message}", id_suffix(*id))
        }
        Err(e) => render_error(e),
    }
}

/// Runs a table: every row whose outcome differs is reported, then the test fails once.
pub(crate) fn run_table<I: std::fmt::Debug>(
    rows: impl IntoIterator<Item = (I, String)>,
    decode: impl Fn(&I) -> String,
) {
    let mut failures = Vec::new();
    let mut count = 0;
    for (input, expected) in rows {
        count += 1;
        let got = decode(&input);
        if got != expected {
            failures.push(format!(
                "  input:    {input:?}\n  expected: {expected}\n  got:      {got}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} rows failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
