//! Replays, on any toolchain, the inputs the fuzz targets keep: `regressions/<target>/*`
//! (crashes found and fixed: each must now pass), `seeds/<target>/*` (the starting corpus),
//! and a few thousand pseudo-random inputs per target with a fixed seed. Inputs under
//! `regressions/<target>/open/` are crashes found and not fixed yet: `cargo test -- --ignored`
//! replays them. Files ending in `.md` or `.json` are notes, not inputs.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use wasi_python_fuzz::TARGETS;

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
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| target(&data))) {
                let why = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)");
                failures.push(format!("{name}: {}: {why}", path.display()));
            }
        }
    }
    assert!(failures.is_empty(), "{} inputs failed:\n{}", failures.len(), failures.join("\n"));
    count
}

/// The saved inputs: the seeds, and the crashes found and fixed (none yet: a crash
/// `cargo xtask fuzz` finds goes to `regressions/<target>/` once fixed). Together they are
/// never empty, so this test always replays something.
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
            if catch_unwind(AssertUnwindSafe(|| target(&data))).is_err() {
                panic!("{name}: random input {i} failed: {data:?}");
            }
        }
    }
}
