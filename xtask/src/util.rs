//! Paths, commands, and the test/bench/demo pipelines.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The workspace root. `cargo run` sets CARGO_MANIFEST_DIR at run time too; prefer it
/// to the compile-time value, since clones sharing one target dir share the binary.
pub(crate) fn workspace_root() -> PathBuf {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    dir.parent().expect("xtask lives in the workspace").to_path_buf()
}

pub(crate) fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            if d.is_absolute() { d } else { workspace_root().join(d) }
        }
        None => workspace_root().join("target"),
    }
}

pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("$ {}", show(cmd));
    let status = cmd.status().with_context(|| format!("starting {}", show(cmd)))?;
    if !status.success() {
        bail!("{} failed: {status}", show(cmd));
    }
    Ok(())
}

fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn python3() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

/// What a venv is made for: the package alone (the demo, `dist`), or the package and the
/// tests' pinned packages (`test`, `bench`, `venv`, the wheel commands).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Needs {
    Package,
    Tests,
}

/// The project's virtualenv with the tests' pinned packages: [`venv_for`] `Needs::Tests`.
pub(crate) fn venv() -> Result<PathBuf> {
    venv_for(Needs::Tests)
}

/// The project's virtualenv (`.venv`, seeing the system's site-packages so the
/// machine's pytest and maturin serve), with the extension built in the dev profile.
/// `maturin develop` installs the package's own dependencies; `Needs::Tests` adds
/// tests/requirements.txt, installed by pip while cargo builds the extension.
pub(crate) fn venv_for(needs: Needs) -> Result<PathBuf> {
    let root = workspace_root();
    let venv = root.join(".venv");
    let py = venv.join("bin").join("python");
    if !py.exists() {
        run(Command::new(python3()).args(["-m", "venv", "--system-site-packages"]).arg(&venv))?;
    }
    // What the tests import beyond the standard library, pinned in tests/requirements.txt.
    // A copy of the file in .venv says what was installed last: pip runs only when the
    // file has changed since (or the venv is new).
    let requirements = root.join("tests").join("requirements.txt");
    let wanted = std::fs::read(&requirements).with_context(|| format!("reading {}", requirements.display()))?;
    let stamp = venv.join("tests-requirements.txt");
    let pip = needs == Needs::Tests && std::fs::read(&stamp).ok().as_deref() != Some(wanted.as_slice());
    let maturin = maturin(&py)?;
    // The extension is abi3 (`_wasi_python.abi3.so`); a version-tagged one left by an older
    // build would be imported first.
    for entry in std::fs::read_dir(root.join("python/wasi_python"))?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("_wasi_python.cpython-") && name.ends_with(".so") {
            std::fs::remove_file(entry.path())?;
        }
    }
    let develop = |extra: &[&str]| {
        run(Command::new(&maturin)
            .args(["develop", "--quiet"])
            .args(extra)
            .current_dir(&root)
            .env("VIRTUAL_ENV", &venv)
            .env_remove("CONDA_PREFIX"))
    };
    if pip {
        // pip downloads and unpacks (half a minute on a new venv) while cargo builds the
        // extension (`--skip-install`: built in place, nothing installed, so the two never
        // write the venv at once); `maturin develop` below then finds the build done.
        std::thread::scope(|s| {
            let installing = s.spawn(|| {
                run(Command::new(&py).args(["-m", "pip", "install", "--quiet", "-r"]).arg(&requirements))
            });
            let built = develop(&["--skip-install"]);
            let installed = installing.join().unwrap_or_else(|_| Err(anyhow::anyhow!("pip's thread panicked")));
            built.and(installed)
        })?;
        std::fs::write(&stamp, &wanted).with_context(|| format!("writing {}", stamp.display()))?;
    }
    develop(&[])?;
    Ok(py)
}

/// The guest's artifacts laid out ([`crate::dist::dist`]) while the venv is made and the
/// extension built: the download and unpacking need no core that cargo is not sharing.
pub(crate) fn dist_and_venv(needs: Needs) -> Result<(PathBuf, PathBuf)> {
    std::thread::scope(|s| {
        let laying = s.spawn(crate::dist::dist);
        let py = venv_for(needs);
        let dist = laying.join().unwrap_or_else(|_| Err(anyhow::anyhow!("dist's thread panicked")));
        Ok((dist?, py?))
    })
}

/// maturin: the venv's own, else the machine's, else installed into the venv.
pub(crate) fn maturin(py: &std::path::Path) -> Result<PathBuf> {
    let venv_bin = py.parent().context("the venv's python has no folder")?;
    let own = venv_bin.join("maturin");
    if own.exists() {
        return Ok(own);
    }
    if let Some(m) = which("maturin") {
        return Ok(m);
    }
    run(Command::new(py).args(["-m", "pip", "install", "--quiet", "maturin"]))?;
    Ok(own)
}

/// Every test runs with the check of the short reset, the third part of our first
/// wasmtime patch (third_party/README.md): each short reset of a pool slot is followed
/// by a full scan, and a written page it missed aborts the process.
const CHECK_RESET: &str = "WASI_PYTHON_CHECK_RESET";

pub(crate) fn test(args: Vec<String>) -> Result<()> {
    let (dist, py) = dist_and_venv(Needs::Tests)?;
    let root = workspace_root();
    crate::dist::precompile(&dist, &py)?;
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .args(["test", "--workspace"])
        .args(&args)
        .env("WASI_PYTHON_ARTIFACTS", &dist)
        .env(CHECK_RESET, "1")
        .current_dir(&root);
    run(&mut cargo)?;
    // The fuzz targets' saved inputs (regressions, seeds) and a short random smoke, on
    // stable: `fuzz/` is a workspace of its own (`cargo xtask fuzz` runs the real fuzzer).
    let mut smoke = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    smoke
        .args(["test", "--manifest-path", "fuzz/Cargo.toml"])
        .current_dir(&root);
    run(&mut smoke)?;
    // The GIL canary (tests/python/gil_canary.py) writes every thread's stacks here when
    // a test keeps the GIL from it; a deadlock ends pytest by SIGALRM, so they are shown.
    let canary = target_dir().join("gil-canary.log");
    let pytest = run(Command::new(&py)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/python", "guest/tests"])
        .env(CHECK_RESET, "1")
        .env("WASI_PYTHON_GIL_CANARY_LOG", &canary)
        .current_dir(&root));
    if pytest.is_err()
        && let Ok(stacks) = std::fs::read_to_string(&canary)
        && !stacks.trim().is_empty()
    {
        eprintln!("The GIL canary was starved; the stacks then ({}):\n{stacks}", canary.display());
    }
    pytest?;
    // Last, so a lint never hides a failing test: clippy's warnings fail the run.
    let mut clippy = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    clippy
        .args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"])
        .current_dir(&root);
    run(&mut clippy)?;
    Ok(())
}

pub(crate) fn bench(args: Vec<String>) -> Result<()> {
    let dist = crate::dist::dist()?;
    let root = workspace_root();
    let quick = ["--warm-up-time", "1", "--measurement-time", "3"];
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .args(["bench", "--profile", "dev", "--workspace", "--bench", "*", "--"])
        .args(if args.is_empty() { &quick[..] } else { &[][..] })
        .args(&args)
        .env("WASI_PYTHON_ARTIFACTS", &dist)
        .current_dir(&root);
    run(&mut cargo)?;
    let py = venv()?;
    run(Command::new(&py).arg("tests/bench/api_bench.py").current_dir(&root))
}

/// The demo needs the package alone: the tests' packages are `test`'s to install.
pub(crate) fn demo() -> Result<()> {
    let (dist, py) = dist_and_venv(Needs::Package)?;
    crate::dist::precompile(&dist, &py)?;
    run(Command::new(&py).arg("examples/demo.py").current_dir(workspace_root()))
}

pub(crate) fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
