//! The guest compiled for another machine, for a wheel built here (`cargo xtask wheel
//! --target aarch64`, through the tool in xtask/cross): the file that machine's runtime,
//! at its portable CPU level, looks for in its cache, named and compiled as it would.

use std::path::Path;

use crate::engine::{Flavour, cache_path, config_for, portable_level, without_names};
use crate::{Artifacts, Error};

/// Compiles `artifacts`' guest (the plain flavour, as `precompile` does) for the portable
/// baseline of `triple` (`x86_64-unknown-linux-gnu`, `aarch64-unknown-linux-gnu`): the
/// name of its cache file on such a machine, and its bytes. The name follows the engine's
/// settings only (wasmtime's compatibility hash: target, flags, tunables, features), which
/// are the same wherever the code is compiled; Cranelift needs that target's backend,
/// which this crate's own build of wasmtime has only for its host.
pub fn precompile_for(artifacts: &Artifacts, triple: &str) -> Result<(String, Vec<u8>), Error> {
    let (name, engine) = engine_for(artifacts, triple)?;
    let wasm = std::fs::read(artifacts.module()).map_err(|e| Error::io(format!("reading {}", artifacts.module().display()), e))?;
    let compiled = engine
        .precompile_module(&without_names(&wasm))
        .map_err(|e| Error::Module(format!("compiling the guest for {triple}: {e:#}")))?;
    Ok((name, compiled))
}

/// The name [`precompile_for`] gives its file, without compiling (milliseconds): the
/// same name is the same code, so a file of it already made need not be made again.
pub fn cross_cache_name(artifacts: &Artifacts, triple: &str) -> Result<String, Error> {
    engine_for(artifacts, triple).map(|(name, _)| name)
}

fn engine_for(artifacts: &Artifacts, triple: &str) -> Result<(String, wasmtime::Engine), Error> {
    if portable_level(triple).is_none() {
        return Err(Error::InvalidConfig {
            param: "target",
            reason: format!("{triple}: the guest is compiled ahead of time for x86_64 and aarch64 only"),
        });
    }
    let engine = crate::signals::new_engine(&config_for(Flavour::Plain, None, Some(triple))?)
        .map_err(|e| Error::Module(format!("an engine for {triple}: {e:#}")))?;
    let name = cache_path(artifacts, Path::new(""), &engine)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| Error::Internal("a cache path without a file name".into()))?;
    Ok((name, engine))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::CpuLevel;

    /// Code compiled for this machine's own triple is named as this machine's runtime
    /// names the file it looks for at the portable level: the two configurations agree.
    #[test]
    fn the_hosts_portable_code_is_named_as_the_runtime_names_it() {
        let host = target_lexicon::HOST.to_string();
        let Some(level) = portable_level(&host) else { return };
        assert_eq!(CpuLevel::Portable.as_str(), level);
        let ours = wasmtime::Engine::new(&config_for(Flavour::Plain, None, Some(&host)).unwrap()).unwrap();
        let runtimes = wasmtime::Engine::new(&crate::engine::config(Flavour::Plain, None, CpuLevel::Portable).unwrap()).unwrap();
        let hash = |e: &wasmtime::Engine| {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            e.precompile_compatibility_hash().hash(&mut h);
            h.finish()
        };
        assert_eq!(hash(&ours), hash(&runtimes));
    }

    /// The portable baselines are named for the two architectures only.
    #[test]
    fn the_portable_levels_are_named_per_architecture() {
        assert_eq!(portable_level("aarch64-unknown-linux-gnu"), Some("armv8-a"));
        assert_eq!(portable_level("x86_64-unknown-linux-gnu"), Some("x86-64-v2"));
        assert_eq!(portable_level("x86_64-apple-darwin"), Some("x86-64-v2"));
        assert_eq!(portable_level("riscv64gc-unknown-linux-gnu"), None);
    }

    /// This crate's own wasmtime carries its host's backend only (the cross tool's build
    /// adds aarch64's, in a workspace of its own): an engine for the other architecture is
    /// a typed error here, never a panic, and the main build never pays for a backend
    /// no test uses.
    #[test]
    fn the_other_architecture_needs_the_cross_tools_build() {
        let other = if cfg!(target_arch = "x86_64") { "aarch64-unknown-linux-gnu" } else { "x86_64-unknown-linux-gnu" };
        let config = config_for(Flavour::Plain, None, Some(other)).expect("naming a target is only settings");
        assert!(wasmtime::Engine::new(&config).is_err());
    }
}
