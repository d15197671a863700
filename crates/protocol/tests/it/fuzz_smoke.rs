//! A deterministic fuzz run inside `cargo test`: mutate valid frames (bit flips, byte
//! changes, truncations, insertions, deletions, splices) with a fixed seed, and check that
//! decoding never panics and that whatever decodes re-encodes to a frame that decodes the same.

use wasi_python_protocol::{
    MAX_ID, MAX_MESSAGE_CHARS, Response, cut_chars, decode_request, decode_response,
    encode_request, encode_response,
};

const ITERATIONS: usize = 100_000;

const SEEDS: &[&str] = &[
    r#"{"v":1,"id":1,"op":"list"}"#,
    r#"{"v":1,"id":2,"op":"call","tool":"f","args":{"a":1,"b":{"$bytes":"eQ=="},"d":{"$bytes":"AP8="}}}"#,
    r#"{"v":1,"id":3,"op":"call","tool":"f","args":{"a":100000000000000000000,"b":-1.5e-7,"c":[true,false,null]}}"#,
    r#"{"v":1,"id":4,"op":"call","tool":"g","args":{"s":"a\"\\\n\u00e9\ud83d\ude00 日本","o":{"x":[[{}]]}}}"#,
    r#"{"v":1,"id":1,"ok":true,"tools":[{"name":"price","description":"Look up.","inputSchema":{"type":"object","properties":{"item":{"type":"string"}},"required":["item"],"additionalProperties":false},"outputSchema":{"type":"number"},"annotations":{"readOnlyHint":true}}]}"#,
    r#"{"v":1,"id":8,"ok":true,"value":{"$bytes":"AQA="}}"#,
    r#"{"v":1,"id":6,"ok":false,"error":{"kind":"invalid_arguments","message":"price: unknown argument 'extra'"}}"#,
    r#"{"v":1,"id":null,"ok":true,"value":[1,2.5,"x",{"$bytes":"","k":9007199254740991}]}"#,
];

/// Fragments worth inserting: JSON punctuation, escapes, and the protocol's own words.
const SNIPPETS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    ",",
    ":",
    "\\",
    "\\u",
    "\\ud800",
    "\\udc00",
    "0",
    "-",
    ".",
    "e",
    "E+",
    "1e999",
    "NaN",
    "Infinity",
    "null",
    "true",
    "\"$bytes\"",
    "\"v\":2",
    "\"id\":",
    "\"op\"",
    "\"batch\"",
    "==",
    "\u{0}",
    "\u{1f}",
    "é",
    "\u{feff}",
    "\"a\":1,\"a\":2",
    "[[[[[[[[",
    "}}}}",
    " ",
    "\n",
];

/// splitmix64: small, fixed, and good enough to drive mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

fn mutate(rng: &mut Rng, frame: &mut Vec<u8>) {
    let len = frame.len();
    let at = rng.below(len + 1);
    match rng.below(7) {
        0 if len > 0 => {
            let i = rng.below(len);
            frame[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            frame[i] = rng.next() as u8;
        }
        2 => frame.truncate(at),
        3 => {
            let s = SNIPPETS[rng.below(SNIPPETS.len())].as_bytes();
            frame.splice(at..at, s.iter().copied());
        }
        4 if len > 0 => {
            let end = (at + 1 + rng.below(8)).min(len);
            frame.drain(at.min(end)..end);
        }
        5 if len > 0 => {
            // Splice a piece of the frame into itself.
            let start = rng.below(len);
            let end = (start + 1 + rng.below(16)).min(len);
            let piece = frame[start..end].to_vec();
            frame.splice(at..at, piece);
        }
        _ => {
            let s = SNIPPETS[rng.below(SNIPPETS.len())].as_bytes();
            let end = (at + s.len()).min(len);
            frame.splice(at..end, s.iter().copied());
        }
    }
}

/// What the guest reads from an answer the host wrote for `response`.
fn as_sent(response: Response) -> Response {
    match response {
        Response::Err { id, kind, message } => Response::Err {
            id,
            kind,
            message: cut_chars(&message, MAX_MESSAGE_CHARS).to_owned(),
        },
        other => other,
    }
}

fn check(frame: &[u8], counts: &mut [usize; 4]) {
    match decode_request(frame) {
        Ok(request) => {
            counts[0] += 1;
            let again = decode_request(&encode_request(&request));
            assert_eq!(
                again.as_ref(),
                Ok(&request),
                "frame {:?}",
                String::from_utf8_lossy(frame)
            );
        }
        Err(e) => {
            counts[1] += 1;
            assert!(e.offset.is_none_or(|o| o <= frame.len()), "{e:?}");
            assert!(e.id.is_none_or(|id| id <= MAX_ID), "{e:?}");
            assert!(!e.message.is_empty());
        }
    }
    match decode_response(frame) {
        Ok(response) => {
            counts[2] += 1;
            let again = decode_response(&encode_response(&response));
            assert_eq!(
                again,
                Ok(as_sent(response)),
                "frame {:?}",
                String::from_utf8_lossy(frame)
            );
        }
        Err(e) => {
            counts[3] += 1;
            assert!(e.offset.is_none_or(|o| o <= frame.len()), "{e:?}");
        }
    }
}

#[test]
fn mutated_frames_never_panic_and_re_encode_consistently() {
    let mut rng = Rng(0x005E_ED0F_F00D);
    let mut counts = [0usize; 4];
    for i in 0..ITERATIONS {
        let mut frame = SEEDS[i % SEEDS.len()].as_bytes().to_vec();
        for _ in 0..1 + rng.below(4) {
            mutate(&mut rng, &mut frame);
        }
        check(&frame, &mut counts);
    }
    // The run must reach both outcomes on both sides, or it tests little.
    let [req_ok, req_err, resp_ok, resp_err] = counts;
    assert!(
        req_ok > ITERATIONS / 100 && req_err > ITERATIONS / 10,
        "{counts:?}"
    );
    assert!(
        resp_ok > ITERATIONS / 100 && resp_err > ITERATIONS / 10,
        "{counts:?}"
    );
}
