//! `wasi-python-image`: the file a saved interpreter snapshot is, without wasmtime.
//!
//! A snapshot file holds the guest's linear memory as the 4 KiB pages that differ from
//! the base image the session started from (a preload image, or nothing), compressed
//! with zstd, behind a header that says what it can be restored on:
//!
//! ```text
//! 0    magic            8 bytes, "WPYSNAP\0"
//! 8    format version   u32 LE (FORMAT_VERSION)
//! 12   header length    u32 LE (at most MAX_HEADER)
//! 16   header           the fields of Header, in order (below)
//! ..   checksum         32 bytes: SHA-256 of everything before it, then the payload
//! ..   payload          zstd of: the pages, then their numbers (u32 LE, strictly increasing)
//! ```
//!
//! Header fields (integers little-endian; a string is a u16 length and UTF-8 bytes):
//! the guest module's SHA-256 (hex), wasmtime's version, the engine settings hash (u64),
//! the package version, the base image's module list (u32 count, strings) and its
//! SHA-256 (32 bytes), the memory's size in wasm pages (u64), the guest's monotonic
//! clock in ns (u64), the count of pages stored (u32) and the payload's length (u64).
//! The header's length must match its fields exactly and the payload must end the file.
//!
//! **Invariant:** [`decode`] never panics, never allocates more than the header's claims
//! allow once they are bounded by [`Limits`] (checked before any allocation), and never
//! decompresses a payload whose checksum does not match. Tests: tests/it; fuzzed by
//! fuzz/fuzz_targets/snapshot_load.rs.

use sha2::{Digest, Sha256};

/// The first eight bytes of every snapshot file.
pub const MAGIC: [u8; 8] = *b"WPYSNAP\0";
/// Bumped when the layout or the meaning of a field changes.
pub const FORMAT_VERSION: u32 = 1;
/// The granularity of the page list: a host page, not a wasm page.
pub const PAGE: usize = 4096;
/// Bytes in a wasm page.
pub const WASM_PAGE: u64 = 65_536;
/// A wasm32 memory's largest size in wasm pages (4 GiB).
pub const MAX_WASM_PAGES: u64 = 65_536;
/// The header's largest length.
pub const MAX_HEADER: u32 = 1 << 20;
/// Module names a base image may list.
pub const MAX_BASE_MODULES: u32 = 4096;
const FIXED: usize = 16;
const SUM: usize = 32;
const PAGES_PER_WASM_PAGE: u64 = WASM_PAGE / PAGE as u64;

/// Why bytes are not a snapshot this format can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    #[error("not a wasi-python snapshot: the file does not start with the snapshot magic")]
    Magic,
    #[error("snapshot format version {found}; this package reads version {expected}")]
    Version { found: u32, expected: u32 },
    #[error("the snapshot is truncated: {what} is cut short")]
    Truncated { what: &'static str },
    #[error("the snapshot is malformed: {what}")]
    Malformed { what: String },
    #[error("the snapshot is too large: {what} is {value}, over the limit of {limit}")]
    TooLarge { what: &'static str, value: u64, limit: u64 },
    #[error("the snapshot's checksum does not match its contents (corrupted or edited)")]
    Checksum,
    #[error("the snapshot's pages do not decompress: {0}")]
    Compression(String),
}

impl FormatError {
    /// A short name for each kind: "magic", "version", "truncated", "malformed",
    /// "too_large", "checksum", "compression".
    pub fn kind(&self) -> &'static str {
        match self {
            FormatError::Magic => "magic",
            FormatError::Version { .. } => "version",
            FormatError::Truncated { .. } => "truncated",
            FormatError::Malformed { .. } => "malformed",
            FormatError::TooLarge { .. } => "too_large",
            FormatError::Checksum => "checksum",
            FormatError::Compression(_) => "compression",
        }
    }
}

/// What a snapshot says about where it can be restored, and its memory's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The guest module's SHA-256, hex (the artifacts' MANIFEST names it).
    pub module_sha256: String,
    /// wasmtime's version.
    pub wasmtime: String,
    /// A hash of the engine settings that compiled the guest.
    pub engine: u64,
    /// The package (runtime crate) version that wrote the file.
    pub package: String,
    /// The base image's preloaded modules (sorted); empty: no base, all pages stored.
    pub base_modules: Vec<String>,
    /// The base image's SHA-256 (zeros without a base).
    pub base_sha256: [u8; 32],
    /// The memory's size in wasm pages.
    pub memory_pages: u64,
    /// The guest's monotonic clock when the snapshot was taken, in ns.
    pub clock_ns: u64,
}

impl Header {
    pub fn memory_bytes(&self) -> u64 {
        self.memory_pages * WASM_PAGE
    }
}

/// What a decode accepts before it allocates.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest memory a file may describe (default 4 GiB).
    pub max_memory_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_memory_bytes: MAX_WASM_PAGES * WASM_PAGE }
    }
}

/// The pages a snapshot stores: numbers (in [`PAGE`]s from address 0) and contents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pages {
    numbers: Vec<u32>,
    data: Vec<u8>,
}

impl Pages {
    pub fn new() -> Pages {
        Pages::default()
    }

    /// Adds page `number`; numbers must grow and `page` be [`PAGE`] bytes.
    pub fn push(&mut self, number: u32, page: &[u8]) {
        assert_eq!(page.len(), PAGE, "a page is {PAGE} bytes");
        assert!(self.numbers.last().is_none_or(|&l| l < number), "page numbers must grow");
        self.numbers.push(number);
        self.data.extend_from_slice(page);
    }

    pub fn len(&self) -> usize {
        self.numbers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.numbers.is_empty()
    }

    /// Each page's number and bytes, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &[u8])> {
        self.numbers.iter().copied().zip(self.data.chunks_exact(PAGE))
    }
}

/// The file for `header` and `pages`, compressed at zstd `level` (1-19; 3 is zstd's default).
pub fn encode(header: &Header, pages: &Pages, level: i32) -> Vec<u8> {
    let mut raw = Vec::with_capacity(pages.numbers.len() * 4 + pages.data.len());
    raw.extend_from_slice(&pages.data);
    for n in &pages.numbers {
        raw.extend_from_slice(&n.to_le_bytes());
    }
    // Compressing from memory into memory cannot fail but for a bad level, clamped here.
    let payload = zstd::bulk::compress(&raw, level.clamp(1, 19)).unwrap_or_default();
    drop(raw);
    let mut h = Vec::new();
    put_str(&mut h, &header.module_sha256);
    put_str(&mut h, &header.wasmtime);
    h.extend_from_slice(&header.engine.to_le_bytes());
    put_str(&mut h, &header.package);
    h.extend_from_slice(&(header.base_modules.len() as u32).to_le_bytes());
    for m in &header.base_modules {
        put_str(&mut h, m);
    }
    h.extend_from_slice(&header.base_sha256);
    h.extend_from_slice(&header.memory_pages.to_le_bytes());
    h.extend_from_slice(&header.clock_ns.to_le_bytes());
    h.extend_from_slice(&(pages.numbers.len() as u32).to_le_bytes());
    h.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let mut out = Vec::with_capacity(FIXED + h.len() + SUM + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(h.len() as u32).to_le_bytes());
    out.extend_from_slice(&h);
    let sum = checksum(&out, &payload);
    out.extend_from_slice(&sum);
    out.extend_from_slice(&payload);
    out
}

/// Strings are at most u16::MAX bytes; a longer one is cut at a character boundary.
fn put_str(out: &mut Vec<u8>, s: &str) {
    let mut end = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&(end as u16).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..end]);
}

fn checksum(before: &[u8], payload: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(before);
    h.update(payload);
    h.finalize().into()
}

/// A cursor over the header's bytes; every read is bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], FormatError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or(FormatError::Truncated { what })?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, FormatError> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into().unwrap_or_default()))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap_or_default()))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap_or_default()))
    }
    fn str(&mut self, what: &'static str) -> Result<String, FormatError> {
        let n = self.u16(what)? as usize;
        let b = self.take(n, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| FormatError::Malformed { what: format!("{what} is not UTF-8") })
    }
}

/// The parts of a file, its lengths checked against each other.
struct Parts<'a> {
    header: Header,
    pages: u32,
    /// The magic, version, length and header: what the checksum covers before the payload.
    before: &'a [u8],
    sum: &'a [u8],
    payload: &'a [u8],
}

fn split<'a>(bytes: &'a [u8], limits: &Limits) -> Result<Parts<'a>, FormatError> {
    if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
        // A prefix of the magic is a truncated file; anything else is another file.
        if bytes.len() < MAGIC.len() && MAGIC.starts_with(bytes) {
            return Err(FormatError::Truncated { what: "the magic" });
        }
        return Err(FormatError::Magic);
    }
    let mut r = Reader { bytes, at: MAGIC.len() };
    let version = r.u32("the format version")?;
    if version != FORMAT_VERSION {
        return Err(FormatError::Version { found: version, expected: FORMAT_VERSION });
    }
    let len = r.u32("the header length")?;
    if len > MAX_HEADER {
        return Err(FormatError::TooLarge { what: "the header", value: len.into(), limit: MAX_HEADER.into() });
    }
    let header_bytes = r.take(len as usize, "the header")?;
    let before = &bytes[..r.at];
    let sum = r.take(SUM, "the checksum")?;
    let rest = &bytes[r.at..];

    let mut h = Reader { bytes: header_bytes, at: 0 };
    let module_sha256 = h.str("the module hash")?;
    let wasmtime = h.str("the wasmtime version")?;
    let engine = h.u64("the engine hash")?;
    let package = h.str("the package version")?;
    let count = h.u32("the base module count")?;
    if count > MAX_BASE_MODULES {
        return Err(FormatError::TooLarge { what: "the base module count", value: count.into(), limit: MAX_BASE_MODULES.into() });
    }
    let mut base_modules = Vec::with_capacity(count as usize);
    for _ in 0..count {
        base_modules.push(h.str("a base module name")?);
    }
    let base_sha256: [u8; 32] = h.take(32, "the base hash")?.try_into().unwrap_or_default();
    let memory_pages = h.u64("the memory size")?;
    let clock_ns = h.u64("the clock")?;
    let pages = h.u32("the page count")?;
    let payload_len = h.u64("the payload length")?;
    if h.at != header_bytes.len() {
        return Err(FormatError::Malformed { what: format!("the header has {} bytes past its fields", header_bytes.len() - h.at) });
    }
    let max_pages = (limits.max_memory_bytes / WASM_PAGE).min(MAX_WASM_PAGES);
    if memory_pages == 0 {
        return Err(FormatError::Malformed { what: "the memory has no pages".into() });
    }
    if memory_pages > max_pages {
        return Err(FormatError::TooLarge {
            what: "the memory",
            value: memory_pages.saturating_mul(WASM_PAGE),
            limit: max_pages * WASM_PAGE,
        });
    }
    if u64::from(pages) > memory_pages * PAGES_PER_WASM_PAGE {
        return Err(FormatError::Malformed { what: format!("{pages} pages stored for a memory of {memory_pages} wasm pages") });
    }
    if payload_len > rest.len() as u64 {
        return Err(FormatError::Truncated { what: "the page list" });
    }
    if payload_len < rest.len() as u64 {
        return Err(FormatError::Malformed { what: format!("{} bytes follow the page list", rest.len() as u64 - payload_len) });
    }
    let header = Header { module_sha256, wasmtime, engine, package, base_modules, base_sha256, memory_pages, clock_ns };
    Ok(Parts { header, pages, before, sum, payload: rest })
}

/// The header alone, its lengths checked but not its checksum: what a file says it is.
pub fn read_header(bytes: &[u8], limits: &Limits) -> Result<Header, FormatError> {
    split(bytes, limits).map(|p| p.header)
}

/// The whole file: header, checksum, then the pages, decompressed and checked (numbers
/// growing and inside the memory).
pub fn decode(bytes: &[u8], limits: &Limits) -> Result<(Header, Pages), FormatError> {
    let parts = split(bytes, limits)?;
    if checksum(parts.before, parts.payload)[..] != *parts.sum {
        return Err(FormatError::Checksum);
    }
    let count = parts.pages as usize;
    // Bounded by the memory's size, itself bounded by `limits` (split).
    let raw_len = count * (4 + PAGE);
    match zstd::zstd_safe::get_frame_content_size(parts.payload) {
        Ok(Some(n)) if n == raw_len as u64 => {}
        Ok(Some(n)) => {
            return Err(FormatError::Malformed { what: format!("the page list holds {n} bytes, not the {raw_len} its count says") });
        }
        _ => return Err(FormatError::Compression("the frame does not state its size".into())),
    }
    let raw = zstd::bulk::decompress(parts.payload, raw_len).map_err(|e| FormatError::Compression(e.to_string()))?;
    if raw.len() != raw_len {
        return Err(FormatError::Truncated { what: "the pages" });
    }
    let limit = parts.header.memory_pages * PAGES_PER_WASM_PAGE;
    let mut numbers = Vec::with_capacity(count);
    for c in raw[count * PAGE..].chunks_exact(4) {
        let n = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        if numbers.last().is_some_and(|&l: &u32| l >= n) {
            return Err(FormatError::Malformed { what: "page numbers do not grow".into() });
        }
        if u64::from(n) >= limit {
            return Err(FormatError::Malformed { what: format!("page {n} is outside the memory") });
        }
        numbers.push(n);
    }
    let mut data = raw;
    data.truncate(count * PAGE);
    Ok((parts.header, Pages { numbers, data }))
}
