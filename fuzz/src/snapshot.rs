//! The snapshot file loader (`wasi_python_image::decode`) on hostile bytes. A random
//! file almost never passes the SHA-256 checksum, so each input is tried twice: as it
//! is, and with its checksum recomputed, which lets the fuzzer reach the page list and
//! the decompressor. Memory is capped at 64 MiB, as a loader's caller would cap it.

use sha2::{Digest, Sha256};
use wasi_python_image::{Limits, MAGIC, decode, encode, read_header};

const LIMITS: Limits = Limits { max_memory_bytes: 64 << 20 };

/// One input: never a panic; whatever decodes re-encodes to bytes that decode the same.
pub fn check(data: &[u8]) {
    once(data);
    if let Some(fixed) = with_checksum(data) {
        once(&fixed);
    }
}

fn once(data: &[u8]) {
    let header = read_header(data, &LIMITS);
    if let Ok((h, pages)) = decode(data, &LIMITS) {
        assert_eq!(header.as_ref(), Ok(&h), "read_header and decode disagree");
        let again = encode(&h, &pages, 1);
        let (h2, pages2) = decode(&again, &LIMITS).expect("a re-encoded snapshot decodes");
        assert_eq!((h, pages), (h2, pages2));
    }
}

/// `data` with the checksum it would need, if its header's length field can be read.
fn with_checksum(data: &[u8]) -> Option<Vec<u8>> {
    if data.len() < 16 || data[..8] != MAGIC {
        return None;
    }
    let len = u32::from_le_bytes(data[12..16].try_into().ok()?) as usize;
    let sum_at = 16usize.checked_add(len)?;
    let payload_at = sum_at.checked_add(32)?;
    if payload_at > data.len() {
        return None;
    }
    let mut h = Sha256::new();
    h.update(&data[..sum_at]);
    h.update(&data[payload_at..]);
    let mut out = data.to_vec();
    out[sum_at..payload_at].copy_from_slice(&h.finalize());
    Some(out)
}
