//! `wasi-python-cross-compile ARTIFACTS TRIPLE OUT_DIR`: the guest of the artifact folder
//! compiled for the portable baseline of TRIPLE, written to OUT_DIR under the name that
//! architecture's runtime looks for in its cache (`wasi_python_runtime::precompile_for`).
//! Prints the file's path. Run by `cargo xtask wheel --target aarch64` (xtask/src/cross.rs).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [artifacts, triple, out] = args.as_slice() else {
        eprintln!("usage: wasi-python-cross-compile ARTIFACTS TRIPLE OUT_DIR");
        return ExitCode::from(2);
    };
    match compile(artifacts, triple, &PathBuf::from(out)) {
        Ok(path) => {
            println!("{}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("wasi-python-cross-compile: {e}");
            ExitCode::FAILURE
        }
    }
}

fn compile(artifacts: &str, triple: &str, out: &std::path::Path) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let artifacts = wasi_python_runtime::Artifacts::open(artifacts)?;
    // The name is the engine's settings and the module: a file of it is this code.
    let path = out.join(wasi_python_runtime::cross_cache_name(&artifacts, triple)?);
    if path.is_file() {
        eprintln!("the guest compiled for {triple}: already made");
        return Ok(path);
    }
    let t = Instant::now();
    let (name, code) = wasi_python_runtime::precompile_for(&artifacts, triple)?;
    eprintln!("the guest compiled for {triple} in {:.0} s ({:.0} MB)", t.elapsed().as_secs_f64(), code.len() as f64 / 1e6);
    std::fs::create_dir_all(out)?;
    if path != out.join(&name) {
        return Err(format!("the engine named its code {name}, then {}", path.display()).into());
    }
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, &code)?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}
