//! The snapshot file format: round trips, each refusal by kind, signing, and hostile
//! bytes (every truncation, every flipped byte, random input) never panicking.

use proptest::prelude::*;
use sha2::{Digest, Sha256};
use wasi_python_image::{
    FORMAT_VERSION, FormatError, Header, Key, KeyError, Limits, MAGIC, MAX_CLOCK_NS, MIN_KEY, PAGE, Pages, WASM_PAGE, decode,
    encode, encode_signed, open, read_header,
};

fn header() -> Header {
    Header {
        module_sha256: "ab".repeat(32),
        wasmtime: "48.0.8".into(),
        engine: 0x1234_5678_9abc_def0,
        package: "0.1.0".into(),
        base_modules: vec!["numpy".into(), "pandas".into()],
        base_sha256: [7; 32],
        parent: [0; 32],
        memory_pages: 3,
        clock_ns: 42,
    }
}

fn pages() -> Pages {
    let mut p = Pages::new();
    for (n, fill) in [(0u32, 1u8), (5, 2), (47, 3)] {
        p.push(n, &[fill; PAGE]);
    }
    p
}

#[test]
fn round_trip() {
    let bytes = encode(&header(), &pages(), 3);
    let (h, p) = decode(&bytes, &Limits::default()).unwrap();
    assert_eq!(h, header());
    assert_eq!(p, pages());
    assert_eq!(read_header(&bytes, &Limits::default()).unwrap(), header());
    let empty = encode(&header(), &Pages::new(), 3);
    assert!(decode(&empty, &Limits::default()).unwrap().1.is_empty());
}

#[test]
fn refusals_by_kind() {
    let good = encode(&header(), &pages(), 3);
    let kind = |b: &[u8]| decode(b, &Limits::default()).unwrap_err().kind();
    assert_eq!(kind(b"PK\x03\x04 a zip file, not a snapshot"), "magic");
    assert_eq!(kind(&MAGIC[..3]), "truncated");
    let mut other = good.clone();
    other[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    assert!(matches!(decode(&other, &Limits::default()), Err(FormatError::Version { found, .. }) if found == FORMAT_VERSION + 1));
    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert_eq!(kind(&flipped), "checksum");
    assert_eq!(kind(&good[..good.len() - 1]), "truncated");
    let mut longer = good.clone();
    longer.push(0);
    assert_eq!(kind(&longer), "malformed");
    let small = Limits { max_memory_bytes: 2 * WASM_PAGE };
    assert!(matches!(decode(&good, &small), Err(FormatError::TooLarge { what: "the memory", .. })));
    let mut huge = header();
    huge.memory_pages = 1 << 40;
    assert_eq!(kind(&encode(&huge, &Pages::new(), 3)), "too_large");
    let mut none = header();
    none.memory_pages = 0;
    assert_eq!(kind(&encode(&none, &Pages::new(), 3)), "malformed");
    // A page past the memory's end.
    let mut outside = Pages::new();
    outside.push(3 * 16, &[1; PAGE]);
    assert_eq!(kind(&encode(&header(), &outside, 3)), "malformed");
    // A flag this version does not know.
    let mut flagged = good.clone();
    flagged[12] |= 2;
    assert_eq!(kind(&flagged), "malformed");
}

/// The clock a runtime adds a run's time to: past the bound, refused by kind (by
/// `read_header` too, before anything else), at the bound accepted.
#[test]
fn a_clock_past_any_session_is_refused() {
    for ns in [u64::MAX, u64::MAX - 5, MAX_CLOCK_NS + 1] {
        let mut h = header();
        h.clock_ns = ns;
        let bytes = encode(&h, &pages(), 3);
        assert_eq!(decode(&bytes, &Limits::default()).unwrap_err(), FormatError::Clock { ns, limit: MAX_CLOCK_NS });
        assert_eq!(read_header(&bytes, &Limits::default()).unwrap_err().kind(), "clock");
        assert_eq!(h.validate(&Limits::default()).unwrap_err().kind(), "clock");
    }
    let mut h = header();
    h.clock_ns = MAX_CLOCK_NS;
    assert_eq!(decode(&encode(&h, &pages(), 3), &Limits::default()).unwrap().0, h);
}

fn key(fill: u8) -> Key {
    Key::new(&[fill; 32]).unwrap()
}

/// An edit with its checksum recomputed: what the checksum cannot catch.
fn edited(file: &[u8], at: usize, sum_at: usize) -> Vec<u8> {
    let mut b = file.to_vec();
    b[at] ^= 1;
    let mut h = Sha256::new();
    h.update(&b[..sum_at]);
    h.update(&b[b.len() - payload_len(file)..]);
    b[sum_at..sum_at + 32].copy_from_slice(&h.finalize());
    b
}

/// `good`'s header (its page count set to `count`, if given) with `payload` after it: the
/// payload's length and the checksum made right, as a hostile writer would.
fn with_payload(good: &[u8], count: Option<u32>, payload: &[u8]) -> Vec<u8> {
    let header_len = u32::from_le_bytes(good[16..20].try_into().unwrap()) as usize;
    let sum_at = 20 + header_len;
    let mut b = good[..sum_at].to_vec();
    if let Some(count) = count {
        b[sum_at - 12..sum_at - 8].copy_from_slice(&count.to_le_bytes());
    }
    b[sum_at - 8..sum_at].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    let mut h = Sha256::new();
    h.update(&b);
    h.update(payload);
    b.extend_from_slice(&h.finalize());
    b.extend_from_slice(payload);
    b
}

/// The payload's length: the header's last field.
fn payload_len(file: &[u8]) -> usize {
    let header_len = u32::from_le_bytes(file[16..20].try_into().unwrap()) as usize;
    u64::from_le_bytes(file[20 + header_len - 8..20 + header_len].try_into().unwrap()) as usize
}

#[test]
fn signed_files_open_with_their_key_only() {
    let signed = encode_signed(&header(), &pages(), 3, &key(1));
    let plain = encode(&header(), &pages(), 3);
    let opened = open(&signed, &Limits::default(), Some(&key(1))).unwrap();
    assert!(opened.signed());
    assert_eq!((opened.header().clone(), opened.pages().unwrap()), (header(), pages()));
    // Without a key a signed file is checked as an unsigned one.
    assert_eq!(decode(&signed, &Limits::default()).unwrap(), (header(), pages()));
    let kind = |b: &[u8], k: &Key| open(b, &Limits::default(), Some(k)).unwrap_err().kind();
    assert_eq!(kind(&signed, &key(2)), "signature");
    assert_eq!(kind(&plain, &key(1)), "unsigned");
    // An edit whose checksum was recomputed: accepted without a key (the checksum is for
    // accidents), refused with one, in the header or in the pages.
    let sum_at = 20 + u32::from_le_bytes(signed[16..20].try_into().unwrap()) as usize;
    for at in [sum_at - 20, signed.len() - 1, 23] {
        let e = edited(&signed, at, sum_at);
        assert_eq!(kind(&e, &key(1)), "signature", "edit at {at}");
    }
    // The clock's lowest byte.
    let e = edited(&plain, sum_at - 20, sum_at);
    assert_eq!(decode(&e, &Limits::default()).map(|(h, _)| h.clock_ns), Ok(43), "the checksum authenticates nothing");
    // A signature stripped (the flag cleared, the MAC cut, the checksum recomputed).
    let mut stripped = signed.clone();
    stripped[12] = 0;
    stripped.drain(sum_at + 32..sum_at + 64);
    let mut h = Sha256::new();
    h.update(&stripped[..sum_at]);
    h.update(&stripped[sum_at + 32..]);
    stripped[sum_at..sum_at + 32].copy_from_slice(&h.finalize());
    assert!(decode(&stripped, &Limits::default()).is_ok_and(|d| d == (header(), pages())));
    assert_eq!(kind(&stripped, &key(1)), "unsigned");
    // Every truncation and flipped byte of a signed file, with its key.
    for n in 0..signed.len() {
        assert!(open(&signed[..n], &Limits::default(), Some(&key(1))).is_err(), "cut at {n}");
    }
    for i in 0..signed.len() {
        let mut b = signed.clone();
        b[i] ^= 0x80;
        assert!(open(&b, &Limits::default(), Some(&key(1))).is_err(), "flip at {i}");
    }
}

#[test]
fn a_short_key_is_refused_and_never_shown() {
    assert_eq!(Key::new(&[1; MIN_KEY - 1]).unwrap_err(), KeyError::TooShort { len: MIN_KEY - 1 });
    assert!(Key::new(b"").is_err());
    let k = Key::new(b"a secret of many bytes").unwrap();
    assert_eq!(format!("{k:?}"), "Key(..)");
}

/// A zstd frame that asks for a window larger than any encode makes is refused before
/// the decoder allocates it.
#[test]
fn a_frame_asking_a_large_window_is_refused() {
    let raw: Vec<u8> = [0u32, 1, 2].iter().flat_map(|n| n.to_le_bytes()).chain([5u8; 3 * PAGE]).collect();
    // A frame of one raw block, its window 2^27 (no content size, not single-segment).
    let mut payload = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 17 << 3];
    payload.extend_from_slice(&(1 | ((raw.len() as u32) << 3)).to_le_bytes()[..3]);
    payload.extend_from_slice(&raw);
    let good = encode(&header(), &pages(), 3);
    let b = with_payload(&good, None, &payload);
    assert_eq!(decode(&b, &Limits::default()).map(|_| ()).unwrap_err().kind(), "compression");
    // The same frame with a 128 KiB window decodes.
    payload[5] = 7 << 3;
    let b = with_payload(&good, None, &payload);
    assert_eq!(decode(&b, &Limits::default()).map(|(_, p)| p.len()), Ok(3));
}

/// The highest level's window is within what the decoder allows.
#[test]
fn the_highest_level_decodes() {
    let mut h = header();
    h.memory_pages = 512;
    let mut p = Pages::new();
    for n in 0..(9 << 20) / PAGE as u32 {
        let mut page = [0u8; PAGE];
        page[..4].copy_from_slice(&n.wrapping_mul(2_654_435_761).to_le_bytes());
        p.push(n, &page);
    }
    let bytes = encode(&h, &p, 19);
    assert_eq!(decode(&bytes, &Limits::default()).unwrap().1, p);
}

#[test]
fn every_truncation_and_flip_is_refused() {
    let good = encode(&header(), &pages(), 3);
    for n in 0..good.len() {
        assert!(decode(&good[..n], &Limits::default()).is_err(), "cut at {n}");
    }
    for i in 0..good.len() {
        let mut b = good.clone();
        b[i] ^= 0x80;
        assert!(decode(&b, &Limits::default()).is_err(), "flip at {i}");
    }
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode(&bytes, &Limits { max_memory_bytes: 1 << 26 });
        let mut framed = MAGIC.to_vec();
        framed.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        framed.extend_from_slice(&bytes);
        let _ = decode(&framed, &Limits { max_memory_bytes: 1 << 26 });
    }
}

/// A zstd frame of `len` zeros in RLE blocks, with a 128 KiB window: 4 bytes a block.
fn zeros_frame(len: u64) -> Vec<u8> {
    let mut f = vec![0x28, 0xb5, 0x2f, 0xfd, 0xc0, 7 << 3];
    f.extend_from_slice(&len.to_le_bytes());
    let mut left = len;
    while left > 0 {
        let n = left.min(128 << 10);
        left -= n;
        f.extend_from_slice(&(u32::from(left == 0) | (1 << 1) | ((n as u32) << 3)).to_le_bytes()[..3]);
        f.push(0);
    }
    f
}

#[test]
#[ignore = "writes the fuzz seeds and regression inputs"]
fn write_seeds() {
    let fuzz = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let dir = fuzz.join("seeds/snapshot_load");
    std::fs::create_dir_all(&dir).unwrap();
    let mut none = header();
    none.base_modules.clear();
    none.memory_pages = 1;
    let mut one = Pages::new();
    one.push(3, &[0x5a; PAGE]);
    // fuzz/src/snapshot.rs's KEY.
    let key = Key::new(b"wasi-python fuzz key, not a secret").unwrap();
    let seeds = [
        encode(&header(), &pages(), 3),
        encode(&none, &Pages::new(), 1),
        encode(&none, &one, 19),
        encode_signed(&header(), &pages(), 3, &key),
    ];
    for (i, bytes) in seeds.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i:02}")), bytes).unwrap();
    }
    // Issue 37's files, in this format: 2 GiB claimed and zeros that decompress to it
    // (defect 4), and a clock near 2^64 (defect 5).
    let dir = fuzz.join("regressions/snapshot_load");
    std::fs::create_dir_all(&dir).unwrap();
    let mut two_gib = none.clone();
    two_gib.memory_pages = 32_768;
    let count = (two_gib.memory_bytes() / PAGE as u64) as u32;
    let good = encode(&two_gib, &Pages::new(), 1);
    let payload = zeros_frame(u64::from(count) * (PAGE as u64 + 4));
    let b = with_payload(&good, Some(count), &payload);
    assert_eq!(decode(&b, &Limits::default()).map(|_| ()).unwrap_err().kind(), "malformed");
    std::fs::write(dir.join("issue-37-defect-4-two-gib-of-zeros"), &b).unwrap();
    let mut clock = header();
    clock.clock_ns = u64::MAX - 1_000_000;
    let b = encode(&clock, &pages(), 3);
    assert_eq!(decode(&b, &Limits::default()).map(|_| ()).unwrap_err().kind(), "clock");
    std::fs::write(dir.join("issue-37-defect-5-clock-near-2-64"), &b).unwrap();
}

/// A delta names its parent's id; the id is the same signed or not, and follows any
/// change of header or pages; a version 2 file (no parent field) still opens.
#[test]
fn deltas_name_their_parent_and_ids_ignore_signing() {
    let key = Key::new(&[3; 32]).unwrap();
    let plain = wasi_python_image::encode_with(&header(), &pages(), 3, None);
    let signed = wasi_python_image::encode_with(&header(), &pages(), 3, Some(&key));
    assert_eq!(plain.id, signed.id);
    assert_eq!(open(&plain.bytes, &Limits::default(), None).unwrap().id(), plain.id);
    assert_eq!(open(&signed.bytes, &Limits::default(), Some(&key)).unwrap().id(), plain.id);
    assert_eq!(read_header(&plain.bytes, &Limits::default()).unwrap().parent(), None);
    let mut other = header();
    other.clock_ns += 1;
    assert_ne!(wasi_python_image::encode_with(&other, &pages(), 3, None).id, plain.id);

    let mut delta = header();
    delta.parent = plain.id;
    let bytes = encode(&delta, &Pages::new(), 3);
    assert_eq!(read_header(&bytes, &Limits::default()).unwrap().parent(), Some(plain.id));
    // Cut inside the parent's id: truncated, never a panic.
    for n in 0..bytes.len() {
        assert!(decode(&bytes[..n], &Limits::default()).is_err());
    }

    // Version 2: the same header without the parent's 32 bytes.
    let v2 = {
        let b = &plain.bytes;
        let len = u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
        let h = &b[20..20 + len];
        // module, wasmtime, engine, package, base count + names, base hash: then the parent.
        let mut at = 0;
        let skip_str = |at: &mut usize| *at += 2 + u16::from_le_bytes([h[*at], h[*at + 1]]) as usize;
        skip_str(&mut at);
        skip_str(&mut at);
        at += 8;
        skip_str(&mut at);
        let count = u32::from_le_bytes(h[at..at + 4].try_into().unwrap());
        at += 4;
        for _ in 0..count {
            skip_str(&mut at);
        }
        at += 32;
        let mut h2 = h[..at].to_vec();
        h2.extend_from_slice(&h[at + 32..]);
        let payload = &b[20 + len + 32..];
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&2u32.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(h2.len() as u32).to_le_bytes());
        out.extend_from_slice(&h2);
        let mut sum = Sha256::new();
        sum.update(&out);
        sum.update(payload);
        out.extend_from_slice(&sum.finalize());
        out.extend_from_slice(payload);
        out
    };
    let (h, p) = decode(&v2, &Limits::default()).unwrap();
    assert_eq!((h, p), (header(), pages()));
}
