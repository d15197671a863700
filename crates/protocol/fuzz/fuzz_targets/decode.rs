//! Decoding never panics, on either side; whatever decodes, encodes to a frame that decodes
//! to the same thing (encode-then-decode is identity).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wasi_python_protocol::{
    MAX_MESSAGE_CHARS, Response, cut_chars, decode_request, decode_response, encode_request,
    encode_response,
};

fuzz_target!(|frame: &[u8]| {
    if let Ok(request) = decode_request(frame) {
        let again = decode_request(&encode_request(&request));
        assert_eq!(again, Ok(request));
    }
    if let Ok(response) = decode_response(frame) {
        let again = decode_response(&encode_response(&response));
        // Error messages are cut to MAX_MESSAGE_CHARS when encoded.
        let expected = match response {
            Response::Err { id, kind, message } => Response::Err {
                id,
                kind,
                message: cut_chars(&message, MAX_MESSAGE_CHARS).to_owned(),
            },
            other => other,
        };
        assert_eq!(again, Ok(expected));
    }
});
