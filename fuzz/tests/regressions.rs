//! Replays, on any toolchain, the inputs the fuzz targets keep: `regressions/<target>/*`
//! (crashes found and fixed: each must now pass), `seeds/<target>/*` (the starting corpus),
//! and a few thousand pseudo-random inputs per target with a fixed seed. Inputs under
//! `regressions/<target>/open/` are crashes found and not fixed yet: `cargo test -- --ignored`
//! replays them. Files ending in `.md` or `.json` are notes, not inputs. Each input is
//! held to what libFuzzer's `-malloc_limit_mb` allows under `cargo xtask fuzz` (a counting
//! allocator, per thread).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use wasi_python_fuzz::TARGETS;

/// The most an input may make a target hold at once: what `cargo xtask fuzz` gives
/// libFuzzer as `-malloc_limit_mb`, so an allocation a header claims (issue 37: 2 GiB
/// for a 64 KiB file) fails the stable replay too.
const MALLOC_LIMIT: usize = 512 << 20;

thread_local! {
    /// Bytes this thread holds, and the most it held since [`held_during`] began.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

/// Counts each thread's allocations (the targets run on the calling thread), so tests
/// running side by side do not count each other's.
struct Counting;

fn count(delta: isize) {
    let _ = LIVE.try_with(|l| {
        l.set(l.get() + delta);
        let _ = PEAK.try_with(|p| p.set(p.get().max(l.get())));
    });
}

// SAFETY: every call goes to the system allocator unchanged; the counters only watch.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// `f`'s result and the most bytes this thread held at once while it ran, beyond those
/// held before.
fn held_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(before));
    let out = f();
    (out, (PEAK.with(Cell::get) - before).max(0) as usize)
}

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            !name.starts_with('.') && !name.ends_with(".md") && !name.ends_with(".json")
        })
        .collect();
    files.sort();
    files
}

/// Runs every input of `sub/<target>/` through its target; one failure report at the end.
fn replay(sub: &str) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut failures = Vec::new();
    let mut count = 0;
    for (name, target) in TARGETS {
        for path in inputs(&root.join(sub.replace("{}", name))) {
            count += 1;
            let data = std::fs::read(&path).unwrap();
            let (result, held) = held_during(|| catch_unwind(AssertUnwindSafe(|| target(&data))));
            if let Err(panic) = result {
                let why = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)");
                failures.push(format!("{name}: {}: {why}", path.display()));
            } else if held > MALLOC_LIMIT {
                failures.push(format!("{name}: {}: held {} MiB at once", path.display(), held >> 20));
            }
        }
    }
    assert!(failures.is_empty(), "{} inputs failed:\n{}", failures.len(), failures.join("\n"));
    count
}

/// The saved inputs: the seeds, and the crashes found and fixed (a crash `cargo xtask
/// fuzz` finds goes to `regressions/<target>/` once fixed; issue 37's snapshot files are
/// there), each held to [`MALLOC_LIMIT`]. Together they are never empty, so this test
/// always replays something.
#[test]
fn saved_inputs_pass() {
    let seeds = replay("seeds/{}");
    let fixed = replay("regressions/{}");
    eprintln!("{seeds} seed inputs, {fixed} regression inputs");
    assert!(seeds + fixed > 0, "no saved input found under fuzz/seeds or fuzz/regressions");
}

#[test]
#[ignore = "crashes found and not fixed yet, kept in regressions/<target>/open/"]
fn open_crashes() {
    eprintln!("{} open inputs", replay("regressions/{}/open"));
}

/// splitmix64, for a fixed stream of inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A short smoke that needs neither nightly nor cargo-fuzz: random bytes through each target.
#[test]
fn random_inputs_pass() {
    let mut rng = Rng(0x5eed);
    for (name, target) in TARGETS {
        for i in 0..2_000 {
            let len = (rng.next() % 1024) as usize;
            let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let (result, held) = held_during(|| catch_unwind(AssertUnwindSafe(|| target(&data))));
            if result.is_err() || held > MALLOC_LIMIT {
                panic!("{name}: random input {i} failed (held {held} bytes): {data:?}");
            }
        }
    }
}
