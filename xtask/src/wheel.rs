//! `cargo xtask wheel [--check]`: the installable wheels, in `<target>/wheels`.
//!
//! - `wasi-python-sandbox` (abi3, Python ≥ 3.10, a manylinux tag maturin picks): the
//!   extension, built by maturin in the profile the tests use (so nothing is compiled
//!   again), with the guest artifacts; its METADATA gains a dependency on
//! - `wasi-python-sandbox-compiled` (same platform tag, no Python code of note): the
//!   guest compiled ahead of time for x86-64-v2 and the default preload's snapshot,
//!   zstd-compressed, with their `COMPILED` list. The runtime unpacks them into the
//!   cache on first use (crates/runtime/src/cached.rs). Two wheels because one would be
//!   over PyPI's 100 MB limit for a file.
//!
//! `--check` then installs both into a new venv and runs `tests/wheel/check_wheel.py`
//! there with an empty cache: the README's first example and a pandas program, and
//! nothing may be compiled.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use sha2::{Digest, Sha256};

use crate::util::{run, target_dir, workspace_root};

pub(crate) const COMPILED_NAME: &str = "wasi-python-sandbox-compiled";
const COMPILED_PKG: &str = "wasi_python_compiled";
const COMPILED_MAGIC: &str = "wasi-python-compiled 1";
/// zstd's level for the shipped files, measured on the compiled guest (246 MB): 9 gives
/// 52 MB in 8.5 s; 19 gives 45 MB in 150 s on 2 cores. The minutes are not worth 7 MB.
const ZSTD_LEVEL: i32 = 9;
/// The content of one zstd frame of a shipped file: the runtime decompresses a file's
/// frames on several threads at once (crates/runtime/src/cached.rs, `unpack`). At
/// level 9 (a 4 MiB window) 16 MiB frames cost about 1% of size (the compiled guest:
/// 52.2 MB against 51.6 in one frame), and unpacking on 2 cores went from 0.65-0.70 s to
/// 0.52-0.68 s (docs/dev/perf-log/2026-12-06-issue43-new-process.md).
const ZSTD_FRAME: usize = 16 << 20;

pub(crate) fn wheel(args: Vec<String>) -> Result<()> {
    // `--target aarch64`: the pair for ARM Linux, built here (cross.rs).
    if let Some(at) = args.iter().position(|a| a == "--target") {
        let mut rest = args.clone();
        let target = rest.drain(at..(at + 2).min(args.len())).nth(1);
        ensure!(target.as_deref() == Some("aarch64"), "usage: cargo xtask wheel [--check] [--target aarch64]");
        ensure!(rest.iter().all(|a| a == "--check"), "usage: cargo xtask wheel [--check] [--target aarch64]");
        return crate::cross::wheel(!rest.is_empty());
    }
    let check = match args.as_slice() {
        [] => false,
        [a] if a == "--check" => true,
        _ => bail!("usage: cargo xtask wheel [--check] [--target aarch64]"),
    };
    let dist = crate::dist::dist()?;
    let py = crate::util::venv()?;
    crate::dist::precompile(&dist, &py)?;
    let out = target_dir().join("wheels");
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out)?;
    let version = package_version()?;

    let (level, files) = shippable(&dist, &py)?;
    ensure!(level == "x86-64-v2", "this machine compiles for {level}, not x86-64-v2: its code cannot be shipped");
    ensure!(files.len() == 2, "expected the compiled guest and the default snapshot, got {files:?}");

    let t = Instant::now();
    run(Command::new(crate::util::maturin(&py)?)
        .args(["build", "--quiet", "--profile", "dev", "--strip", "--out"])
        .arg(&out)
        .arg("--interpreter")
        .arg(&py)
        .current_dir(workspace_root()))?;
    let main = only_wheel(&out)?;
    let tag = platform_tag(&main)?;
    eprintln!("wheel: extension built in {:.0} s: {}", t.elapsed().as_secs_f64(), main.display());
    let req = format!("{COMPILED_NAME}=={version}; platform_machine == \"x86_64\" and sys_platform == \"linux\"");
    add_requirement(&main, &req)?;

    let t = Instant::now();
    let companion = out.join(format!("{}-{version}-py3-none-{tag}.whl", COMPILED_NAME.replace('-', "_")));
    write_companion(&companion, &version, &tag, &files, &level)?;
    eprintln!("wheel: compiled guest packed in {:.0} s", t.elapsed().as_secs_f64());
    for w in [&main, &companion] {
        eprintln!("wheel: {} ({:.1} MB)", w.display(), fs::metadata(w)?.len() as f64 / 1e6);
    }
    if check {
        check_wheels(&out, &main)?;
    }
    Ok(())
}

/// The shipped files, as the package names them: the CPU level this machine compiles
/// for, and what its cache holds for it (the compiled guest, the default snapshot).
pub(crate) fn shippable(dist: &Path, py: &Path) -> Result<(String, Vec<PathBuf>)> {
    let report = Command::new(py)
        .args(["-c", "import sys, wasi_python._run as r; print(r._shippable(sys.argv[1]))"])
        .arg(dist)
        .output()
        .context("asking the package for its compiled files")?;
    ensure!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let report = String::from_utf8(report.stdout)?;
    let (mut level, mut files) = (None, Vec::new());
    for line in report.lines() {
        match line.split_once(' ') {
            Some(("cpu", l)) => level = Some(l.to_owned()),
            Some(("file", path)) => files.push(PathBuf::from(path)),
            _ => bail!("unexpected line from _shippable: {line:?}"),
        }
    }
    Ok((level.context("_shippable named no CPU level")?, files))
}

pub(crate) fn package_version() -> Result<String> {
    let text = fs::read_to_string(workspace_root().join("pyproject.toml"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .map(str::to_owned)
        .context("pyproject.toml has no version line")
}

pub(crate) fn only_wheel(dir: &Path) -> Result<PathBuf> {
    let mut found = fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "whl"));
    let w = found.next().context("maturin wrote no wheel")?;
    ensure!(found.next().is_none(), "maturin wrote more than one wheel");
    Ok(w)
}

/// `wasi_python_sandbox-0.1.0-cp310-abi3-manylinux_2_34_x86_64.whl` -> `manylinux_2_34_x86_64`.
pub(crate) fn platform_tag(wheel: &Path) -> Result<String> {
    let name = wheel.file_stem().and_then(|s| s.to_str()).context("wheel name")?;
    let parts: Vec<&str> = name.split('-').collect();
    ensure!(parts.len() == 5, "unexpected wheel name {name}");
    ensure!(parts[3] == "abi3", "the extension is not abi3: {name}");
    ensure!(parts[4].contains("manylinux"), "no manylinux tag: {name}");
    Ok(parts[4].to_owned())
}

fn b64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut s = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..=c.len() {
            s.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
        }
    }
    s
}

fn record_line(name: &str, body: &[u8]) -> String {
    format!("{name},sha256={},{}\n", b64url(&Sha256::digest(body)), body.len())
}

/// METADATA with `Requires-Dist: req` after the headers' last Requires-Dist (headers end at
/// the first blank line; a description may follow). It is a line of its own, so a marker of
/// the line before (`; extra == "ray"`, from pyproject's optional dependencies) is not its.
fn with_requirement(text: &str, req: &str) -> String {
    let mut lines: Vec<&str> = text.split('\n').collect();
    let end = lines.iter().position(|l| l.is_empty()).unwrap_or(lines.len());
    let at = lines[..end].iter().rposition(|l| l.starts_with("Requires-Dist:")).map_or(end, |i| i + 1);
    let line = format!("Requires-Dist: {req}");
    lines.insert(at, &line);
    lines.join("\n")
}

/// Rewrites the wheel with `Requires-Dist: req` in its METADATA (the other entries are
/// copied as they are, compressed), and its RECORD to match.
pub(crate) fn add_requirement(wheel: &Path, req: &str) -> Result<()> {
    let tmp = wheel.with_extension("whl.tmp");
    {
        let mut src = zip::ZipArchive::new(File::open(wheel)?)?;
        let mut dst = zip::ZipWriter::new(File::create(&tmp)?);
        let names: Vec<String> = src.file_names().map(str::to_owned).collect();
        let metadata = names.iter().find(|n| n.ends_with(".dist-info/METADATA")).context("no METADATA")?.clone();
        let record = names.iter().find(|n| n.ends_with(".dist-info/RECORD")).context("no RECORD")?.clone();
        let mut text = String::new();
        src.by_name(&metadata)?.read_to_string(&mut text)?;
        ensure!(!text.contains(COMPILED_NAME), "METADATA already names {COMPILED_NAME}");
        let text = with_requirement(&text, req);
        let mut records = String::new();
        src.by_name(&record)?.read_to_string(&mut records)?;
        let records: String = records
            .lines()
            .map(|l| if l.starts_with(&format!("{metadata},")) { record_line(&metadata, text.as_bytes()) } else { format!("{l}\n") })
            .collect();
        for name in &names {
            if *name == metadata || *name == record {
                continue;
            }
            dst.raw_copy_file(src.by_name(name)?)?;
        }
        let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        dst.start_file(metadata.as_str(), opts)?;
        dst.write_all(text.as_bytes())?;
        dst.start_file(record.as_str(), opts)?;
        dst.write_all(records.as_bytes())?;
        dst.finish()?;
    }
    fs::rename(&tmp, wheel)?;
    Ok(())
}

/// `body` zstd-compressed as frames of [`ZSTD_FRAME`] bytes, each naming its length and
/// with its checksum, one after another (still one valid zstd stream).
fn compress_in_frames(body: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for chunk in body.chunks(ZSTD_FRAME) {
        let mut enc = zstd::stream::write::Encoder::new(&mut out, ZSTD_LEVEL)?;
        enc.include_checksum(true)?;
        enc.include_contentsize(true)?;
        enc.set_pledged_src_size(Some(chunk.len() as u64))?;
        enc.multithread(std::thread::available_parallelism().map_or(1, |n| n.get() as u32))?;
        enc.write_all(chunk)?;
        enc.finish()?;
    }
    Ok(out)
}

/// The companion wheel: `wasi_python_compiled/` with each file zstd-compressed and its
/// `COMPILED` list, stored (not deflated again); `level` names the CPU level of its code.
pub(crate) fn write_companion(path: &Path, version: &str, tag: &str, files: &[PathBuf], level: &str) -> Result<()> {
    let dist_info = format!("{}-{version}.dist-info", COMPILED_NAME.replace('-', "_"));
    let mut entries: Vec<(String, Vec<u8>)> = Vec::new();
    let mut list = format!("{COMPILED_MAGIC}\n");
    for (i, f) in files.iter().enumerate() {
        let name = f.file_name().and_then(|n| n.to_str()).context("file name")?;
        let body = fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        let z = compress_in_frames(&body)?;
        let zname = format!("{i}.zst");
        list.push_str(&format!("{name} {zname} {}\n", body.len()));
        entries.push((format!("{COMPILED_PKG}/{zname}"), z));
    }
    entries.push((format!("{COMPILED_PKG}/COMPILED"), list.into_bytes()));
    entries.push((
        format!("{COMPILED_PKG}/__init__.py"),
        format!(
            "\"\"\"The wasi_python guest compiled ahead of time for {level} (wasmtime 48), and the\n\
             default preload's snapshot: data the wasi_python runtime unpacks into its cache.\"\"\"\n"
        )
        .into_bytes(),
    ));
    entries.push((
        format!("{dist_info}/METADATA"),
        format!(
            "Metadata-Version: 2.1\nName: {COMPILED_NAME}\nVersion: {version}\n\
             Summary: The guest of wasi-python-sandbox, compiled ahead of time for {level}.\n\
             License: Apache-2.0\nRequires-Python: >=3.10\n"
        )
        .into_bytes(),
    ));
    entries.push((
        format!("{dist_info}/WHEEL"),
        format!("Wheel-Version: 1.0\nGenerator: cargo-xtask\nRoot-Is-Purelib: false\nTag: py3-none-{tag}\n").into_bytes(),
    ));
    let mut record: String = entries.iter().map(|(n, b)| record_line(n, b)).collect();
    record.push_str(&format!("{dist_info}/RECORD,,\n"));
    entries.push((format!("{dist_info}/RECORD"), record.into_bytes()));

    let mut zip = zip::ZipWriter::new(File::create(path)?);
    for (name, body) in &entries {
        let method = if name.ends_with(".zst") { zip::CompressionMethod::Stored } else { zip::CompressionMethod::Deflated };
        let opts = zip::write::SimpleFileOptions::default().compression_method(method).large_file(body.len() > u32::MAX as usize);
        zip.start_file(name.as_str(), opts)?;
        zip.write_all(body)?;
    }
    zip.finish()?;
    Ok(())
}

/// Installs the wheels into a new venv and runs the check there, from a folder outside
/// the clone, with an empty cache and no artifact variable.
fn check_wheels(dir: &Path, main: &Path) -> Result<()> {
    let root = workspace_root();
    let work = target_dir().join("wheel-check");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work)?;
    let venv = work.join("venv");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    run(Command::new(&python).args(["-m", "venv"]).arg(&venv))?;
    let py = venv.join("bin").join("python");
    let t = Instant::now();
    run(Command::new(&py)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--find-links"])
        .arg(dir)
        .arg(main))?;
    let install_s = t.elapsed().as_secs_f64();
    let cache = work.join("cache");
    let out = Command::new(&py)
        .arg(root.join("tests/wheel/check_wheel.py"))
        .arg(root.join("README.md"))
        .env("WASI_PYTHON_CACHE", &cache)
        .env_remove("WASI_PYTHON_ARTIFACTS")
        .env_remove("PYTHONPATH")
        .current_dir(&work)
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{stderr}");
    ensure!(out.status.success(), "the installed wheel failed its check");
    ensure!(
        !stderr.contains("wasi_python: "),
        "the installed wheel compiled or rebuilt something (see its notices above)"
    );
    println!("wheel check: pip install {install_s:.1} s (local files); passed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xtask does not link the runtime (it would build wasmtime), so the list's first
    /// line is written in both: they must agree, or the runtime skips the shipped files.
    #[test]
    fn the_compiled_list_magic_is_the_runtimes() {
        let runtime = include_str!("../../crates/runtime/src/cached.rs");
        assert!(runtime.contains(&format!("pub const COMPILED_MAGIC: &str = \"{COMPILED_MAGIC}\";")));
    }

    /// A shipped file is frames of `ZSTD_FRAME` bytes each naming its length (what lets the
    /// runtime decompress them on several threads), and decodes as one stream to the file.
    #[test]
    fn shipped_files_are_packed_in_frames_that_name_their_length() {
        let body: Vec<u8> = (0..ZSTD_FRAME * 2 + 1000).map(|i| (i % 251) as u8 ^ (i >> 20) as u8).collect();
        let z = compress_in_frames(&body).unwrap();
        assert_eq!(zstd::stream::decode_all(&z[..]).unwrap(), body);
        let mut lens = Vec::new();
        let mut at = 0;
        while at < z.len() {
            lens.push(zstd::zstd_safe::get_frame_content_size(&z[at..]).unwrap().unwrap());
            at += zstd::zstd_safe::find_frame_compressed_size(&z[at..]).unwrap();
        }
        assert_eq!(lens, [ZSTD_FRAME as u64, ZSTD_FRAME as u64, 1000]);
    }

    /// The METADATA maturin writes for pyproject.toml (the `ray` extra included) gains the
    /// companion as an unconditional requirement, and keeps the extra as it was.
    #[test]
    fn the_companion_requirement_joins_the_extras_unconditionally() {
        let pyproject = include_str!("../../pyproject.toml");
        assert!(pyproject.contains("[project.optional-dependencies]\n") && pyproject.contains("\nray = [\"ray>=2.60\"]"));
        let maturin = "Metadata-Version: 2.4\nName: wasi-python-sandbox\nVersion: 0.1.0\n\
                       Requires-Dist: docstring-parser>=0.16,<0.19\nRequires-Dist: ray>=2.60 ; extra == 'ray'\n\
                       Provides-Extra: ray\nSummary: Run untrusted Python.\n\nA description.\nRequires-Dist: not a header\n";
        let out = with_requirement(maturin, "wasi-python-sandbox-compiled==0.1.0");
        let headers: Vec<&str> = out.split("\n\n").next().unwrap().lines().collect();
        assert_eq!(
            headers[3..7],
            [
                "Requires-Dist: docstring-parser>=0.16,<0.19",
                "Requires-Dist: ray>=2.60 ; extra == 'ray'",
                "Requires-Dist: wasi-python-sandbox-compiled==0.1.0",
                "Provides-Extra: ray",
            ]
        );
        assert!(out.ends_with("\n\nA description.\nRequires-Dist: not a header\n"));
    }

    #[test]
    fn base64url_matches_the_standard() {
        assert_eq!(b64url(b""), "");
        assert_eq!(b64url(b"f"), "Zg");
        assert_eq!(b64url(b"fo"), "Zm8");
        assert_eq!(b64url(b"foo"), "Zm9v");
        assert_eq!(b64url(&[0xfb, 0xff]), "-_8");
    }

    #[test]
    fn platform_tags_come_from_abi3_manylinux_wheels_only() {
        let ok = Path::new("wasi_python_sandbox-0.1.0-cp310-abi3-manylinux_2_34_x86_64.whl");
        assert_eq!(platform_tag(ok).unwrap(), "manylinux_2_34_x86_64");
        assert!(platform_tag(Path::new("wasi_python_sandbox-0.1.0-cp311-cp311-linux_x86_64.whl")).is_err());
    }
}
