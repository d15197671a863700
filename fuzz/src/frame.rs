//! The frame decoder: what a guest writes to the door, byte for byte.

use wasi_python_protocol::{
    AnswerKind, MAX_MESSAGE_CHARS, Request, Response, Value, cut_chars, decode_request,
    decode_response, encode_error, encode_ok, encode_request, encode_response,
};

pub fn check(frame: &[u8]) {
    match decode_request(frame) {
        Ok(request) => {
            let again = decode_request(&encode_request(&request));
            assert_eq!(again.as_ref(), Ok(&request), "request re-encoded decodes differently");
            // The host's answer echoing the arguments reads back as the same value.
            if let Request::Call { id, args, .. } = &request {
                let value = Value::Object(args.clone());
                let answer = decode_response(&encode_ok(*id, &value));
                assert_eq!(answer, Ok(Response::Ok { id: *id, value }), "echo answer");
            }
        }
        Err(e) => {
            if let Some(at) = e.offset {
                assert!(at <= frame.len(), "offset {at} past the frame's {} bytes", frame.len());
            }
            // The failure answer the host sends reads back as that failure.
            let answer = decode_response(&encode_error(e.id, e.wire_kind(), &e.message));
            let message = cut_chars(&e.message, MAX_MESSAGE_CHARS).to_owned();
            assert_eq!(
                answer,
                Ok(Response::Err { id: e.id, kind: AnswerKind::Known(e.wire_kind()), message }),
                "failure answer for {e:?}"
            );
        }
    }
    if let Ok(response) = decode_response(frame) {
        let again = decode_response(&encode_response(&response));
        // Messages are cut to MAX_MESSAGE_CHARS when encoded.
        let expected = match response {
            Response::Err { id, kind, message } => Response::Err {
                id,
                kind,
                message: cut_chars(&message, MAX_MESSAGE_CHARS).to_owned(),
            },
            other => other,
        };
        assert_eq!(again, Ok(expected), "answer re-encoded decodes differently");
    }
}
