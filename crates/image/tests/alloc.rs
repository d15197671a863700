//! What a hostile file can make the decoder allocate: a counting global allocator (this
//! binary's own, so nothing else runs in it) records the most live bytes while a file is
//! decoded. A header's claims cost nothing; only what decompresses is held, and a file
//! refused early holds next to nothing.
#![allow(unsafe_code)] // a GlobalAlloc is unsafe by its trait

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use sha2::{Digest, Sha256};
use wasi_python_image::{FORMAT_VERSION, Limits, MAGIC, PAGE, WASM_PAGE, decode};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to the system allocator unchanged; the counters only watch.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            let live = LIVE.fetch_add(new_size, Ordering::Relaxed) + new_size;
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One measurement at a time: the counters are the process's.
static MEASURING: Mutex<()> = Mutex::new(());

/// The most bytes live at once, beyond those live before, while `f` runs.
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed) - before)
}

const MIB: usize = 1 << 20;
/// 2 GiB of memory, as the file claimed.
const MEMORY_PAGES: u64 = 32_768;

/// A zstd frame of `len` zeros made of RLE blocks (4 bytes per 128 KiB), stating
/// `declared` as its content size: how a file says much with little.
fn zeros_frame(len: u64, declared: u64) -> Vec<u8> {
    const BLOCK: u64 = 128 << 10;
    let mut f = vec![0x28, 0xb5, 0x2f, 0xfd];
    // Frame header: 8-byte content size (flag 3 << 6), then a 128 KiB window (2^(10 + 7)),
    // as zstd itself would make it.
    f.extend_from_slice(&[0xc0, 7 << 3]);
    f.extend_from_slice(&declared.to_le_bytes());
    let mut left = len;
    loop {
        let n = left.min(BLOCK);
        left -= n;
        let last = u32::from(left == 0);
        let header = last | (1 << 1) | ((n as u32) << 3);
        f.extend_from_slice(&header.to_le_bytes()[..3]);
        f.push(0);
        if left == 0 {
            return f;
        }
    }
}

/// A file of this format around `payload`, its header claiming `memory_pages` and
/// `count` stored pages, its checksum right.
fn craft(memory_pages: u64, count: u32, payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    for s in ["ab", "48.0.8"] {
        h.extend_from_slice(&(s.len() as u16).to_le_bytes());
        h.extend_from_slice(s.as_bytes());
    }
    h.extend_from_slice(&7u64.to_le_bytes());
    h.extend_from_slice(&5u16.to_le_bytes());
    h.extend_from_slice(b"0.1.0");
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&[0; 32]);
    // The parent's id (version 3): none.
    h.extend_from_slice(&[0; 32]);
    h.extend_from_slice(&memory_pages.to_le_bytes());
    h.extend_from_slice(&42u64.to_le_bytes());
    h.extend_from_slice(&count.to_le_bytes());
    h.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(h.len() as u32).to_le_bytes());
    out.extend_from_slice(&h);
    let mut sum = Sha256::new();
    sum.update(&out);
    sum.update(payload);
    out.extend_from_slice(&sum.finalize());
    out.extend_from_slice(payload);
    out
}

/// The file: 2 GiB of memory claimed, every page stored, all zeros (numbers
/// included, so they do not grow): 64 KiB that decompress to 2 GiB. The numbers come
/// first and the second is refused.
#[test]
fn zeros_that_claim_two_gib_are_refused_holding_little() {
    let count = (MEMORY_PAGES * WASM_PAGE / PAGE as u64) as u32;
    let raw = u64::from(count) * (PAGE as u64 + 4);
    let file = craft(MEMORY_PAGES, count, &zeros_frame(raw, raw));
    assert!(file.len() < 70_000, "{}", file.len());
    let (r, peak) = peak_during(|| decode(&file, &Limits::default()));
    assert_eq!(r.unwrap_err().kind(), "malformed");
    assert!(peak < 16 * MIB, "decoding held {} MiB", peak / MIB);
}

/// A frame that states 2 GiB of content and holds one page: the claim costs nothing.
#[test]
fn a_frame_that_claims_more_than_it_holds_costs_what_it_holds() {
    let count = (MEMORY_PAGES * WASM_PAGE / PAGE as u64) as u32;
    let raw = u64::from(count) * (PAGE as u64 + 4);
    let file = craft(MEMORY_PAGES, count, &zeros_frame(PAGE as u64, raw));
    let (r, peak) = peak_during(|| decode(&file, &Limits::default()));
    assert!(r.is_err());
    assert!(peak < 16 * MIB, "decoding held {} MiB", peak / MIB);
}

/// Page numbers that grow, then one page where 2 GiB were claimed: what is held is the
/// numbers and that page.
#[test]
fn pages_claimed_but_absent_cost_nothing() {
    let count = (MEMORY_PAGES * WASM_PAGE / PAGE as u64) as u32;
    let mut raw: Vec<u8> = (0..count).flat_map(u32::to_le_bytes).collect();
    raw.extend_from_slice(&[9; PAGE]);
    let payload = zstd::bulk::compress(&raw, 3).unwrap();
    let file = craft(MEMORY_PAGES, count, &payload);
    drop(raw);
    let (r, peak) = peak_during(|| decode(&file, &Limits::default()));
    assert_eq!(r.unwrap_err().kind(), "truncated");
    assert!(peak < 16 * MIB, "decoding held {} MiB", peak / MIB);
}

/// A caller's limit is applied before anything is read past the header.
#[test]
fn the_callers_limit_comes_first() {
    let count = (MEMORY_PAGES * WASM_PAGE / PAGE as u64) as u32;
    let raw = u64::from(count) * (PAGE as u64 + 4);
    let file = craft(MEMORY_PAGES, count, &zeros_frame(raw, raw));
    let small = Limits { max_memory_bytes: 64 << 20 };
    let (r, peak) = peak_during(|| decode(&file, &small));
    assert_eq!(r.unwrap_err().kind(), "too_large");
    assert!(peak < MIB, "decoding held {} bytes", peak);
}
