//! Project chores that cargo does not do: `cargo xtask <dist|test|bench|demo|venv|fuzz|wheel|sdist>`.
//!
//! - `dist`: lays out the guest artifacts (pinned wheel, checked, plus our guest
//!   `host` package) and precompiles the guest for this host's wasmtime.
//! - `test`: everything: dist, the Python extension into `.venv`, `cargo test` (the
//!   tidy tests included), the fuzz targets' saved inputs, pytest, clippy.
//! - `venv`: the project's `.venv` with the tests' pinned packages and the extension.
//! - `bench`: criterion benches and the Python API benchmark.
//! - `demo`: runs the guide's examples (the README's first command); its venv has the
//!   package alone, the tests' packages being `test`'s to install.
//! - `fuzz`: runs the cargo-fuzz targets (nightly) for a given time each.
//! - `wheel`: the installable wheels (the extension with the artifacts, and the guest
//!   compiled ahead of time); `--check` installs them into a new venv and tries them;
//!   `--target aarch64` builds the pair for ARM Linux here (and checks it under qemu).
//! - `sdist`: the source distribution for other platforms; `--check` installs it into a
//!   new venv (the extension compiled there) and tries it.

mod cross;
mod dist;
mod fuzz;
mod sdist;
mod tidy;
mod util;
mod wheel;

use anyhow::{Result, bail};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = || args[1..].to_vec();
    match args.first().map(String::as_str) {
        Some("dist") => {
            let (dist, py) = util::dist_and_venv(util::Needs::Package)?;
            dist::precompile(&dist, &py)
        }
        Some("test") => util::test(rest()),
        Some("bench") => util::bench(rest()),
        Some("demo") => util::demo(),
        Some("venv") => util::venv().map(|_| ()),
        Some("fuzz") => fuzz::fuzz(rest()),
        Some("wheel") => wheel::wheel(rest()),
        Some("sdist") => sdist::sdist(rest()),
        _ => bail!(
            "usage: cargo xtask <command>\n\
             \n  dist    lay out and precompile the guest artifacts\
             \n  test    run every test (dist, extension, cargo test, pytest)\
             \n  bench   run the benchmarks (criterion and the Python API)\
             \n  demo    run the guide's examples\
             \n  venv    build the Python extension into .venv\
             \n  wheel   build the installable wheels: [--check] installs and tries them,\
             \n          [--target aarch64] the pair for ARM Linux (tried under qemu-user)\
             \n  sdist   build the source distribution: [--check] installs it (compiling) and tries it\
             \n  fuzz    run the fuzz targets: [--time SECS] [TARGET...] (nightly, cargo-fuzz)"
        ),
    }
}
