//! The snapshot file format: round trips, each refusal by kind, and hostile bytes
//! (every truncation, every flipped byte, random input) never panicking.

use proptest::prelude::*;
use wasi_python_image::{FORMAT_VERSION, FormatError, Header, Limits, MAGIC, PAGE, Pages, WASM_PAGE, decode, encode, read_header};

fn header() -> Header {
    Header {
        module_sha256: "ab".repeat(32),
        wasmtime: "48.0.8".into(),
        engine: 0x1234_5678_9abc_def0,
        package: "0.1.0".into(),
        base_modules: vec!["numpy".into(), "pandas".into()],
        base_sha256: [7; 32],
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

#[test]
#[ignore = "writes the fuzz seeds"]
fn write_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/snapshot_load");
    std::fs::create_dir_all(&dir).unwrap();
    let mut none = header();
    none.base_modules.clear();
    none.memory_pages = 1;
    let mut one = Pages::new();
    one.push(3, &[0x5a; PAGE]);
    for (i, bytes) in [encode(&header(), &pages(), 3), encode(&none, &Pages::new(), 1), encode(&none, &one, 19)].iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i:02}")), bytes).unwrap();
    }
}
