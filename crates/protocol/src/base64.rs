//! Strict standard base64 (RFC 4648 §4): padding required, no whitespace, canonical.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Sextet value of each byte, shifted into place for each of a quantum's four characters;
/// `BAD` for bytes outside the alphabet (including `=`).
const BAD: u32 = 1 << 31;
const fn table(shift: u32) -> [u32; 256] {
    let mut t = [BAD; 256];
    let mut i = 0;
    while i < 64 {
        t[ALPHABET[i] as usize] = (i as u32) << shift;
        i += 1;
    }
    t
}
static D0: [u32; 256] = table(18);
static D1: [u32; 256] = table(12);
static D2: [u32; 256] = table(6);
static D3: [u32; 256] = table(0);

fn is_bad(b: u8) -> bool {
    D3[usize::from(b)] == BAD
}

/// Appends the base64 text of `bytes` to `out`.
pub(crate) fn encode_into(bytes: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + bytes.len().div_ceil(3) * 4, 0);
    let text = &mut out[start..];
    let chunks = bytes.chunks_exact(3);
    let rest = chunks.remainder();
    let mut quads = text.chunks_exact_mut(4);
    for (c, q) in chunks.zip(&mut quads) {
        let n = (u32::from(c[0]) << 16) | (u32::from(c[1]) << 8) | u32::from(c[2]);
        q[0] = ALPHABET[(n >> 18) as usize & 63];
        q[1] = ALPHABET[(n >> 12) as usize & 63];
        q[2] = ALPHABET[(n >> 6) as usize & 63];
        q[3] = ALPHABET[n as usize & 63];
    }
    if let Some(q) = quads.next() {
        let (a, b) = match *rest {
            [a] => (a, None),
            [a, b] => (a, Some(b)),
            _ => return,
        };
        let n = (u32::from(a) << 16) | (u32::from(b.unwrap_or(0)) << 8);
        q[0] = ALPHABET[(n >> 18) as usize & 63];
        q[1] = ALPHABET[(n >> 12) as usize & 63];
        q[2] = if b.is_some() {
            ALPHABET[(n >> 6) as usize & 63]
        } else {
            b'='
        };
        q[3] = b'=';
    }
}

/// Why base64 text was refused, with the character offset of the fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Base64Error {
    pub(crate) at: usize,
    pub(crate) what: &'static str,
}

/// Decodes strict standard base64: length a multiple of 4, alphabet `A-Za-z0-9+/`, `=` only
/// as one or two final padding characters, and the unused bits of the last sextet zero.
pub(crate) fn decode(text: &[u8]) -> Result<Vec<u8>, Base64Error> {
    if !text.len().is_multiple_of(4) {
        return Err(Base64Error {
            at: text.len(),
            what: "its length is not a multiple of 4",
        });
    }
    let Some((body, last)) = text.split_last_chunk::<4>() else {
        return Ok(Vec::new());
    };
    // The last quantum: `xxxx`, `xxx=` or `xx==`.
    let pad = match last {
        [_, _, b'=', b'='] => 2,
        [_, _, _, b'='] => 1,
        _ => 0,
    };
    let body_len = body.len() / 4 * 3;
    let mut out = vec![0u8; body_len + 3 - pad];
    let (body_out, last_out) = out.split_at_mut(body_len);
    // Any invalid character sets the BAD bit of `seen`; find it only then.
    let mut seen = 0;
    for (c, o) in body.chunks_exact(4).zip(body_out.chunks_exact_mut(3)) {
        let n = D0[usize::from(c[0])]
            | D1[usize::from(c[1])]
            | D2[usize::from(c[2])]
            | D3[usize::from(c[3])];
        seen |= n;
        o.copy_from_slice(&n.to_be_bytes()[1..]);
    }
    if seen & BAD != 0 {
        return Err(invalid_char(body, 0));
    }
    let at = body.len();
    let live = &last[..4 - pad];
    if live.iter().any(|&b| is_bad(b)) {
        return Err(invalid_char(live, at));
    }
    let [a, b, c, d] = *last;
    let n = D0[usize::from(a)]
        | D1[usize::from(b)]
        | if pad < 2 { D2[usize::from(c)] } else { 0 }
        | if pad < 1 { D3[usize::from(d)] } else { 0 };
    match pad {
        1 if n & 0xFF != 0 => return Err(non_canonical(at + 2)),
        2 if n & 0xFFFF != 0 => return Err(non_canonical(at + 1)),
        _ => {}
    }
    last_out.copy_from_slice(&n.to_be_bytes()[1..4 - pad]);
    Ok(out)
}

fn non_canonical(at: usize) -> Base64Error {
    Base64Error {
        at,
        what: "its final character has unused bits set (not canonical)",
    }
}

fn invalid_char(chunk: &[u8], base: usize) -> Base64Error {
    let i = chunk.iter().position(|&b| is_bad(b)).unwrap_or(0);
    let what = if chunk.get(i) == Some(&b'=') {
        "padding is misplaced"
    } else {
        "it holds a character outside the standard alphabet"
    };
    Base64Error { at: base + i, what }
}
