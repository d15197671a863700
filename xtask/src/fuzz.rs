//! `cargo xtask fuzz [--time SECS] [TARGET...]`: runs the cargo-fuzz (libFuzzer) targets
//! of `fuzz/` one after the other, each for `--time` seconds (default 600), and prints
//! what libFuzzer says it did (executions, coverage, any crash and where it was saved).
//!
//! It needs a nightly toolchain (`cargo +nightly`: the sanitizer flags are unstable) and
//! cargo-fuzz, which it installs from crates.io when missing. Each target's corpus grows
//! in `fuzz/corpus/<target>` (not committed), seeded from `fuzz/seeds/<target>`. A crash
//! lands in `fuzz/artifacts/<target>/`; once fixed, copy it to `fuzz/regressions/<target>/`,
//! which `cargo xtask test` replays on stable (`fuzz/tests/regressions.rs`). Allocations
//! are limited (`-malloc_limit_mb`, [`MALLOC_LIMIT_MB`]) as well as the RSS.

use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::util::{run, workspace_root};

const TARGETS: [&str; 4] = ["frame_decode", "schema_compile", "validate", "snapshot_load"];

/// libFuzzer's `-malloc_limit_mb`: an input that makes a target ask for this much in one
/// allocation is a crash, so an allocation sized by what a file claims (issue 37: 2 GiB
/// for 64 KiB) is found even when the memory is there. fuzz/tests/regressions.rs holds
/// the stable replay to the same figure.
const MALLOC_LIMIT_MB: u32 = 512;

pub(crate) fn fuzz(args: Vec<String>) -> Result<()> {
    let mut secs: u64 = 600;
    let mut targets = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--time" => {
                let v = it.next().context("--time takes a number of seconds")?;
                secs = v.parse().with_context(|| format!("--time {v:?} is not a number of seconds"))?;
            }
            t if TARGETS.contains(&t) => targets.push(t.to_owned()),
            other => bail!("unknown fuzz argument {other:?}: targets are {TARGETS:?}"),
        }
    }
    if targets.is_empty() {
        targets = TARGETS.iter().map(|t| (*t).to_owned()).collect();
    }
    let nightly = Command::new("rustup").args(["run", "nightly", "rustc", "--version"]).output();
    if !nightly.is_ok_and(|o| o.status.success()) {
        bail!("cargo xtask fuzz needs a nightly toolchain (rustup toolchain list shows none)");
    }
    let has_fuzz = Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_fuzz {
        run(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    }
    let root = workspace_root();
    for t in &targets {
        let corpus = root.join("fuzz/corpus").join(t);
        std::fs::create_dir_all(&corpus).with_context(|| format!("creating {}", corpus.display()))?;
        let mut cmd = Command::new("cargo");
        cmd.args(["+nightly", "fuzz", "run", t]).arg(&corpus);
        let seeds = root.join("fuzz/seeds").join(t);
        if seeds.is_dir() {
            cmd.arg(seeds);
        }
        cmd.arg("--")
            .arg(format!("-max_total_time={secs}"))
            .arg("-print_final_stats=1")
            .arg("-rss_limit_mb=4096")
            .arg(format!("-malloc_limit_mb={MALLOC_LIMIT_MB}"));
        let dict = root.join("fuzz/dicts").join(format!("{t}.dict"));
        if dict.exists() {
            cmd.arg(format!("-dict={}", dict.display()));
        }
        // Its own target dir (fuzz/target): nightly sanitizer builds share nothing with
        // the workspace's, and must not evict them from a shared CARGO_TARGET_DIR.
        cmd.current_dir(&root).env_remove("CARGO_TARGET_DIR");
        run(&mut cmd)?;
    }
    Ok(())
}
