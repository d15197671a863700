//! The snapshot file loader (`wasi_python_image`) on hostile bytes, with a real load's
//! limits: a memory of up to 4 GiB, as `Runtime::load_snapshot` allows (a smaller cap
//! would hide any allocation the header drives; `cargo xtask fuzz` runs libFuzzer with
//! `-malloc_limit_mb`, so one shows as a crash). A random file almost never passes the
//! SHA-256 checksum or the MAC, so each input is tried as it is, with its checksum made
//! right, and with its checksum and MAC made right under [`KEY`], each without a key and
//! with one: the fuzzer reaches the page list and the decompressor on every path.
//!
//! Through to what the runtime takes from the file: every header accepted must pass
//! [`Header::validate`] (what fork.rs relies on) and give a memory within the limit and
//! a clock that a run's elapsed time cannot overflow (host.rs adds it).

use sha2::{Digest, Sha256};
use wasi_python_image::{Header, Key, Limits, MAGIC, MAX_WASM_PAGES, WASM_PAGE, encode, encode_signed, open, read_header};

/// A real load's limits (fork.rs: a session's memory is at most 4 GiB).
const LIMITS: Limits = Limits { max_memory_bytes: MAX_WASM_PAGES * WASM_PAGE };

/// The key the fuzzer signs with (not a secret: any key serves).
pub const KEY: &[u8] = b"wasi-python fuzz key, not a secret";

/// The header's length field, and where the checksum sits.
const FIXED: usize = 20;
const SUM: usize = 32;

/// One input: never a panic; whatever opens re-encodes to bytes that open the same.
pub fn check(data: &[u8]) {
    once(data);
    if let Some(fixed) = with_checksum(data) {
        once(&fixed);
        if let Some(signed) = with_signature(&fixed) {
            once(&signed);
        }
    }
}

fn once(data: &[u8]) {
    let key = Key::new(KEY).expect("the fuzz key is long enough");
    let header = read_header(data, &LIMITS);
    for k in [None, Some(&key)] {
        let Ok(opened) = open(data, &LIMITS, k) else { continue };
        assert_eq!(header.as_ref(), Ok(opened.header()), "read_header and open disagree");
        runtime_values(opened.header());
        let Ok(pages) = opened.pages() else { continue };
        let h = opened.header();
        let again = if opened.signed() { encode_signed(h, &pages, 1, &key) } else { encode(h, &pages, 1) };
        let reopened = open(&again, &LIMITS, k).expect("a re-encoded snapshot opens");
        assert_eq!(reopened.header(), h);
        assert_eq!(reopened.pages().expect("a re-encoded snapshot decodes"), pages);
    }
}

/// What the runtime takes from an accepted header, checked as it uses it: the memory
/// it maps (at most the limit) and the guest clock it starts at the file's reading and
/// adds a run's elapsed time to (292 years of it must not overflow).
fn runtime_values(h: &Header) {
    h.validate(&LIMITS).expect("an opened header validates");
    assert!(h.memory_pages > 0 && h.memory_bytes() <= LIMITS.max_memory_bytes);
    // host.rs: the clock starts at max(file, one hour) and adds the elapsed ns.
    let start = h.clock_ns.max(3_600 * 1_000_000_000);
    assert!(start.checked_add(u64::MAX >> 1).is_some(), "clock {} would overflow", h.clock_ns);
}

/// Where the checksum sits, if the header's length field can be read: (checksum at,
/// signed).
fn sum_at(data: &[u8]) -> Option<(usize, bool)> {
    if data.len() < FIXED || data[..8] != MAGIC {
        return None;
    }
    let signed = u32::from_le_bytes(data[12..16].try_into().ok()?) & 1 == 1;
    let len = u32::from_le_bytes(data[16..20].try_into().ok()?) as usize;
    Some((FIXED.checked_add(len)?, signed))
}

/// `data` with the checksum it would need.
fn with_checksum(data: &[u8]) -> Option<Vec<u8>> {
    let (sum_at, signed) = sum_at(data)?;
    let payload_at = sum_at.checked_add(if signed { 2 * SUM } else { SUM })?;
    if payload_at > data.len() {
        return None;
    }
    let mut h = Sha256::new();
    h.update(&data[..sum_at]);
    h.update(&data[payload_at..]);
    let mut out = data.to_vec();
    out[sum_at..sum_at + SUM].copy_from_slice(&h.finalize());
    Some(out)
}

/// `data` (its checksum right) signed under [`KEY`]: the flag set, the MAC after the
/// checksum (inserted if the file had none), the checksum made right again.
fn with_signature(data: &[u8]) -> Option<Vec<u8>> {
    use hmac::{Hmac, Mac};
    let (sum_at, signed) = sum_at(data)?;
    let mut out = data.to_vec();
    out[12] |= 1;
    if !signed {
        if sum_at + SUM > out.len() {
            return None;
        }
        out.splice(sum_at + SUM..sum_at + SUM, [0u8; SUM]);
    }
    let mut out = with_checksum(&out)?;
    let payload_at = sum_at + 2 * SUM;
    let mut mac = Hmac::<Sha256>::new_from_slice(KEY).ok()?;
    mac.update(&out[..sum_at + SUM]);
    mac.update(&out[payload_at..]);
    out[sum_at + SUM..payload_at].copy_from_slice(&mac.finalize().into_bytes());
    Some(out)
}
