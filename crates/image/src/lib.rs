//! `wasi-python-image`: the file a saved interpreter snapshot is, without wasmtime.
//!
//! A snapshot file holds the guest's linear memory as the 4 KiB pages that differ from
//! the base image the session started from (a preload image, or nothing), or, a
//! delta, from its parent: another snapshot's file, named by its [`Opened::id`]. The
//! pages are compressed with zstd, behind a header that says what it can be restored on:
//!
//! ```text
//! 0    magic            8 bytes, "WPYSNAP\0"
//! 8    format version   u32 LE (FORMAT_VERSION)
//! 12   flags            u32 LE: bit 0, signed (a MAC follows the checksum); no other bit
//! 16   header length    u32 LE (at most MAX_HEADER)
//! 20   header           the fields of Header, in order (below)
//! ..   checksum         32 bytes: SHA-256 of everything before it, then the payload
//! ..   MAC              signed files only, 32 bytes: HMAC-SHA256 under the embedder's
//!                       key of everything before it (checksum included), then the payload
//! ..   payload          zstd of: the page numbers (u32 LE, strictly increasing), then the pages
//! ```
//!
//! Header fields (integers little-endian; a string is a u16 length and UTF-8 bytes):
//! the guest module's SHA-256 (hex), wasmtime's version, the engine settings hash (u64),
//! the package version, the base image's module list (u32 count, strings) and its
//! SHA-256 (32 bytes), the parent's id (32 bytes, zeros: not a delta; version 3 on),
//! the memory's size in wasm pages (u64), the guest's monotonic clock in ns (u64), the
//! count of pages stored (u32) and the payload's length (u64). The header's length must
//! match its fields exactly and the payload must end the file. Version 2 files (no
//! parent) are read as before.
//!
//! A file's id ([`Opened::id`], [`Encoded::id`]) is the SHA-256 of its header's fields
//! and its payload (not the flags, so signing does not change it): a delta names its
//! parent by it, and through the parent's own header, the whole line before it.
//!
//! The checksum catches accidents (a truncated copy, a flipped bit), not edits: anyone
//! can recompute it. A file made with a [`Key`] is signed; opened with the key
//! ([`open`]), an unsigned file or one whose MAC does not match is refused before
//! anything is decompressed. Without a key a signed file opens as an unsigned one.
//!
//! **Invariant:** [`open`] and [`decode`] never panic; the header is bounded (1 MiB)
//! before it is read and its values ([`Header::validate`]: memory within [`Limits`],
//! clock within [`MAX_CLOCK_NS`]) are checked before anything else is done with them;
//! nothing is decompressed before the MAC (with a key) and the checksum match; and what
//! is held grows with what decompresses, never with what the header claims: the page
//! numbers come first and are checked as they arrive, and the pages are read as the
//! stream yields them (at most twice their bytes held, plus zstd's window, at most
//! 2^[`MAX_WINDOW_LOG`]). Tests: tests/it, tests/alloc.rs (a counting allocator); fuzzed
//! by fuzz/fuzz_targets/snapshot_load.rs.

use std::io::Read;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The first eight bytes of every snapshot file.
pub const MAGIC: [u8; 8] = *b"WPYSNAP\0";
/// Bumped when the layout or the meaning of a field changes (2: flags and the MAC, the
/// page numbers before the pages; 3: the parent's id, deltas).
pub const FORMAT_VERSION: u32 = 3;
/// The oldest version read (2: the same but for the parent's id).
pub const OLDEST_VERSION: u32 = 2;
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
/// The largest guest clock a file may carry, in ns: 2^62, 146 years of sessions. A
/// runtime adds a run's elapsed time to it; under this bound that cannot overflow.
pub const MAX_CLOCK_NS: u64 = 1 << 62;
/// The largest zstd window a payload may ask of the decoder (8 MiB): the window of
/// [`encode`]'s highest level (19).
pub const MAX_WINDOW_LOG: u32 = 23;
/// A signing key's least length in bytes.
pub const MIN_KEY: usize = 16;
const FIXED: usize = 20;
const SUM: usize = 32;
const SIGNED: u32 = 1;
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
    #[error("the snapshot's clock ({ns} ns) is past any session's (at most {limit} ns)")]
    Clock { ns: u64, limit: u64 },
    #[error("the snapshot's checksum does not match its contents (an accidental corruption: the checksum does not authenticate)")]
    Checksum,
    #[error("the snapshot is not signed, and a key was given to check its signature")]
    Unsigned,
    #[error("the snapshot's signature does not match the key (signed with another key, or edited)")]
    Signature,
    #[error("the snapshot's pages do not decompress: {0}")]
    Compression(String),
}

impl FormatError {
    /// A short name for each kind: "magic", "version", "truncated", "malformed",
    /// "too_large", "clock", "checksum", "unsigned", "signature", "compression".
    pub fn kind(&self) -> &'static str {
        match self {
            FormatError::Magic => "magic",
            FormatError::Version { .. } => "version",
            FormatError::Truncated { .. } => "truncated",
            FormatError::Malformed { .. } => "malformed",
            FormatError::TooLarge { .. } => "too_large",
            FormatError::Clock { .. } => "clock",
            FormatError::Checksum => "checksum",
            FormatError::Unsigned => "unsigned",
            FormatError::Signature => "signature",
            FormatError::Compression(_) => "compression",
        }
    }
}

/// A key is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    #[error("a snapshot signing key must be at least {MIN_KEY} bytes; this one has {len}")]
    TooShort { len: usize },
}

/// The embedder's secret for signing files ([`encode_signed`]) and checking them
/// ([`open`]): HMAC-SHA256, keyed once. Its `Debug` shows nothing of it.
#[derive(Clone)]
pub struct Key(Hmac<Sha256>);

impl Key {
    /// A key of at least [`MIN_KEY`] bytes (random bytes, e.g. 32 from the OS).
    pub fn new(secret: &[u8]) -> Result<Key, KeyError> {
        if secret.len() < MIN_KEY {
            return Err(KeyError::TooShort { len: secret.len() });
        }
        // HMAC takes a key of any length: this cannot fail.
        Hmac::<Sha256>::new_from_slice(secret).map(Key).map_err(|_| KeyError::TooShort { len: secret.len() })
    }

    fn mac(&self, before: &[u8], payload: &[u8]) -> Hmac<Sha256> {
        let mut m = self.0.clone();
        m.update(before);
        m.update(payload);
        m
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
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
    /// The id of the file whose memory the pages are laid over (zeros: none, the pages
    /// are over the base image): a delta.
    pub parent: [u8; 32],
    /// The memory's size in wasm pages.
    pub memory_pages: u64,
    /// The guest's monotonic clock when the snapshot was taken, in ns.
    pub clock_ns: u64,
}

impl Header {
    /// The memory's size in bytes (saturating: a header that [`Header::validate`]
    /// accepted is at most 4 GiB).
    pub fn memory_bytes(&self) -> u64 {
        self.memory_pages.saturating_mul(WASM_PAGE)
    }

    /// The parent's id, if this is a delta.
    pub fn parent(&self) -> Option<[u8; 32]> {
        (self.parent != [0; 32]).then_some(self.parent)
    }

    /// The checks of the values a runtime takes from a file: a memory of at least one
    /// wasm page and at most `limits` (and 4 GiB), a clock of at most [`MAX_CLOCK_NS`].
    /// [`read_header`] and [`open`] apply them; a runtime may rely on them.
    pub fn validate(&self, limits: &Limits) -> Result<(), FormatError> {
        let max_pages = (limits.max_memory_bytes / WASM_PAGE).min(MAX_WASM_PAGES);
        if self.memory_pages == 0 {
            return Err(FormatError::Malformed { what: "the memory has no pages".into() });
        }
        if self.memory_pages > max_pages {
            return Err(FormatError::TooLarge {
                what: "the memory",
                value: self.memory_bytes(),
                limit: max_pages * WASM_PAGE,
            });
        }
        if self.clock_ns > MAX_CLOCK_NS {
            return Err(FormatError::Clock { ns: self.clock_ns, limit: MAX_CLOCK_NS });
        }
        Ok(())
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

/// The file for `header` and `pages`, unsigned, compressed at zstd `level` (1-19; 3 is
/// zstd's default).
pub fn encode(header: &Header, pages: &Pages, level: i32) -> Vec<u8> {
    encode_with(header, pages, level, None).bytes
}

/// [`encode`], signed with `key`: [`open`] with the same key accepts it, with another
/// refuses it.
pub fn encode_signed(header: &Header, pages: &Pages, level: i32, key: &Key) -> Vec<u8> {
    encode_with(header, pages, level, Some(key)).bytes
}

/// A file and its id.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub bytes: Vec<u8>,
    /// What a delta over this file names as its parent ([`Opened::id`]).
    pub id: [u8; 32],
}

/// [`encode`] or [`encode_signed`] (with a `key`), with the file's id.
pub fn encode_with(header: &Header, pages: &Pages, level: i32, key: Option<&Key>) -> Encoded {
    let mut raw = Vec::with_capacity(pages.numbers.len() * 4 + pages.data.len());
    for n in &pages.numbers {
        raw.extend_from_slice(&n.to_le_bytes());
    }
    raw.extend_from_slice(&pages.data);
    // Compressing from memory into memory cannot fail but for a bad level, clamped here
    // (at most 19, whose window is 2^MAX_WINDOW_LOG).
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
    h.extend_from_slice(&header.parent);
    h.extend_from_slice(&header.memory_pages.to_le_bytes());
    h.extend_from_slice(&header.clock_ns.to_le_bytes());
    h.extend_from_slice(&(pages.numbers.len() as u32).to_le_bytes());
    h.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let mut out = Vec::with_capacity(FIXED + h.len() + 2 * SUM + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(if key.is_some() { SIGNED } else { 0 }).to_le_bytes());
    out.extend_from_slice(&(h.len() as u32).to_le_bytes());
    out.extend_from_slice(&h);
    let sum = checksum(&out, &payload);
    out.extend_from_slice(&sum);
    if let Some(key) = key {
        let mac = key.mac(&out, &payload).finalize().into_bytes();
        out.extend_from_slice(&mac);
    }
    let id = file_id(&h, &payload);
    out.extend_from_slice(&payload);
    Encoded { bytes: out, id }
}

fn file_id(header: &[u8], payload: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"wasi-python snapshot id\0");
    h.update((header.len() as u64).to_le_bytes());
    h.update(header);
    h.update(payload);
    h.finalize().into()
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

/// The parts of a file, its lengths checked against each other; its values not yet.
struct Parts<'a> {
    header: Header,
    pages: u32,
    /// The header's fields, as in the file (what the id covers, with the payload).
    fields: &'a [u8],
    /// The magic, version, flags, length and header: what the checksum covers before
    /// the payload.
    before: &'a [u8],
    sum: &'a [u8],
    /// What the MAC covers before the payload (`before` and the checksum), and the MAC.
    signed: Option<(&'a [u8], &'a [u8])>,
    payload: &'a [u8],
}

fn split(bytes: &[u8]) -> Result<Parts<'_>, FormatError> {
    if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
        // A prefix of the magic is a truncated file; anything else is another file.
        if bytes.len() < MAGIC.len() && MAGIC.starts_with(bytes) {
            return Err(FormatError::Truncated { what: "the magic" });
        }
        return Err(FormatError::Magic);
    }
    let mut r = Reader { bytes, at: MAGIC.len() };
    let version = r.u32("the format version")?;
    if !(OLDEST_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(FormatError::Version { found: version, expected: FORMAT_VERSION });
    }
    let flags = r.u32("the flags")?;
    if flags & !SIGNED != 0 {
        return Err(FormatError::Malformed { what: format!("unknown flags {flags:#x}") });
    }
    let len = r.u32("the header length")?;
    if len > MAX_HEADER {
        return Err(FormatError::TooLarge { what: "the header", value: len.into(), limit: MAX_HEADER.into() });
    }
    let header_bytes = r.take(len as usize, "the header")?;
    let before = &bytes[..r.at];
    let sum = r.take(SUM, "the checksum")?;
    let signed = if flags & SIGNED != 0 {
        let covered = &bytes[..r.at];
        Some((covered, r.take(SUM, "the signature")?))
    } else {
        None
    };
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
    // Each name takes at least its 2-byte length in the header (at most 1 MiB).
    let mut base_modules = Vec::with_capacity((count as usize).min(header_bytes.len() / 2));
    for _ in 0..count {
        base_modules.push(h.str("a base module name")?);
    }
    let base_sha256: [u8; 32] = h.take(32, "the base hash")?.try_into().unwrap_or_default();
    let parent: [u8; 32] = if version >= 3 { h.take(32, "the parent's id")?.try_into().unwrap_or_default() } else { [0; 32] };
    let memory_pages = h.u64("the memory size")?;
    let clock_ns = h.u64("the clock")?;
    let pages = h.u32("the page count")?;
    let payload_len = h.u64("the payload length")?;
    if h.at != header_bytes.len() {
        return Err(FormatError::Malformed { what: format!("the header has {} bytes past its fields", header_bytes.len() - h.at) });
    }
    if payload_len > rest.len() as u64 {
        return Err(FormatError::Truncated { what: "the page list" });
    }
    if payload_len < rest.len() as u64 {
        return Err(FormatError::Malformed { what: format!("{} bytes follow the page list", rest.len() as u64 - payload_len) });
    }
    let header = Header { module_sha256, wasmtime, engine, package, base_modules, base_sha256, parent, memory_pages, clock_ns };
    Ok(Parts { header, pages, fields: header_bytes, before, sum, signed, payload: rest })
}

/// The header's values checked, and the page count against the memory.
fn check_values(parts: &Parts<'_>, limits: &Limits) -> Result<(), FormatError> {
    parts.header.validate(limits)?;
    let memory_pages = parts.header.memory_pages;
    if u64::from(parts.pages) > memory_pages * PAGES_PER_WASM_PAGE {
        return Err(FormatError::Malformed {
            what: format!("{} pages stored for a memory of {memory_pages} wasm pages", parts.pages),
        });
    }
    Ok(())
}

/// The header alone, its lengths and values checked ([`Header::validate`]) but neither
/// its checksum nor its signature: what a file says it is.
pub fn read_header(bytes: &[u8], limits: &Limits) -> Result<Header, FormatError> {
    let parts = split(bytes)?;
    check_values(&parts, limits)?;
    Ok(parts.header)
}

/// A file whose lengths, signature (when a key is given), checksum and header values
/// are checked, its pages not yet decompressed ([`Opened::pages`]).
pub struct Opened<'a> {
    parts: Parts<'a>,
}

impl std::fmt::Debug for Opened<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened").field("header", &self.parts.header).field("signed", &self.signed()).finish()
    }
}

/// Checks `bytes` in this order, nothing decompressed: lengths; with a `key`, that the
/// file is signed ([`FormatError::Unsigned`]) with that key ([`FormatError::Signature`]);
/// the checksum; the header's values against `limits`. Without a key, a signed file is
/// checked as an unsigned one.
pub fn open<'a>(bytes: &'a [u8], limits: &Limits, key: Option<&Key>) -> Result<Opened<'a>, FormatError> {
    let parts = split(bytes)?;
    if let Some(key) = key {
        let Some((covered, mac)) = parts.signed else { return Err(FormatError::Unsigned) };
        key.mac(covered, parts.payload).verify_slice(mac).map_err(|_| FormatError::Signature)?;
    }
    if checksum(parts.before, parts.payload)[..] != *parts.sum {
        return Err(FormatError::Checksum);
    }
    check_values(&parts, limits)?;
    Ok(Opened { parts })
}

impl Opened<'_> {
    pub fn header(&self) -> &Header {
        &self.parts.header
    }

    /// Whether the file carries a signature (checked only when opened with a key).
    pub fn signed(&self) -> bool {
        self.parts.signed.is_some()
    }

    /// The file's id: the SHA-256 of its header's fields and payload, signed or not.
    pub fn id(&self) -> [u8; 32] {
        file_id(self.parts.fields, self.parts.payload)
    }

    /// The pages, decompressed as a stream: the numbers first, each checked as it
    /// arrives (growing, inside the memory), then the pages, held as they come; the
    /// stream must then end, and the file with it.
    pub fn pages(&self) -> Result<Pages, FormatError> {
        let count = self.parts.pages as usize;
        let limit = self.parts.header.memory_pages * PAGES_PER_WASM_PAGE;
        let compression = |e: std::io::Error| FormatError::Compression(e.to_string());
        let mut stream = zstd::stream::read::Decoder::with_buffer(self.parts.payload).map_err(compression)?.single_frame();
        stream.window_log_max(MAX_WINDOW_LOG).map_err(compression)?;

        // The numbers, 16 KiB at a time: a list that does not grow is refused at once.
        let mut numbers: Vec<u32> = Vec::new();
        let mut chunk = [0u8; 16 << 10];
        let mut left = count * 4;
        while left > 0 {
            let n = left.min(chunk.len());
            read_full(&mut stream, &mut chunk[..n], "the page numbers")?;
            left -= n;
            numbers.reserve(n / 4);
            for c in chunk[..n].chunks_exact(4) {
                let number = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                if numbers.last().is_some_and(|&l| l >= number) {
                    return Err(FormatError::Malformed { what: "page numbers do not grow".into() });
                }
                if u64::from(number) >= limit {
                    return Err(FormatError::Malformed { what: format!("page {number} is outside the memory") });
                }
                numbers.push(number);
            }
        }

        // The pages, held as they decompress (the buffer doubles at most: never more
        // than twice what arrived).
        let want = (count * PAGE) as u64;
        let mut data = Vec::new();
        (&mut stream).take(want).read_to_end(&mut data).map_err(compression)?;
        if data.len() as u64 != want {
            return Err(FormatError::Truncated { what: "the pages" });
        }
        let mut more = [0u8; 1];
        if stream.read(&mut more).map_err(compression)? != 0 {
            return Err(FormatError::Malformed { what: "the page list holds more than its count".into() });
        }
        if !stream.finish().is_empty() {
            return Err(FormatError::Malformed { what: "bytes follow the compressed page list".into() });
        }
        data.shrink_to_fit();
        Ok(Pages { numbers, data })
    }
}

/// Fills `buf` from the stream; its end first is a truncated file.
fn read_full(stream: &mut impl Read, buf: &mut [u8], what: &'static str) -> Result<(), FormatError> {
    stream.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => FormatError::Truncated { what },
        _ => FormatError::Compression(e.to_string()),
    })
}

/// The whole file, unsigned or not checked as signed: [`open`] without a key, then
/// [`Opened::pages`].
pub fn decode(bytes: &[u8], limits: &Limits) -> Result<(Header, Pages), FormatError> {
    let opened = open(bytes, limits, None)?;
    let pages = opened.pages()?;
    Ok((opened.parts.header, pages))
}
