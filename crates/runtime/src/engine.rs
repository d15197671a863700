//! Engines, the compiled-module cache and the warm `InstancePre`s.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use wasmtime::{Config, Engine, InstancePre, Linker, Module};

use crate::host::{self, HostState};
use crate::{Artifacts, Error};

/// The wasmtime this runtime is built on; part of every cache key.
pub const WASMTIME_VERSION: &str = "48.0.8";
/// The environment variable naming the compiled-module cache folder.
pub const CACHE_ENV: &str = "WASI_PYTHON_CACHE";

/// The largest wasm stack the guest may use. The guest thread's native stack is
/// larger still, so a runaway recursion traps instead of killing the process.
const MAX_WASM_STACK: usize = 8 << 20;
pub(crate) const GUEST_THREAD_STACK: usize = 24 << 20;

/// Which engine: fuel metering changes the generated code, so it is its own flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavour {
    Plain,
    Metered,
}

/// A compiled guest ready to instantiate.
pub(crate) struct Prepared {
    pub(crate) engine: Engine,
    pub(crate) pre: InstancePre<HostState>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prepared")
    }
}

fn config(flavour: Flavour) -> Config {
    let mut c = Config::new();
    c.epoch_interruption(true)
        .consume_fuel(flavour == Flavour::Metered)
        .wasm_exceptions(true)
        // wasmtime refuses a wasm stack larger than the async stack, even unused.
        .async_stack_size(MAX_WASM_STACK + (1 << 20))
        .max_wasm_stack(MAX_WASM_STACK);
    c
}

/// The default cache folder: `$WASI_PYTHON_CACHE`, else `$XDG_CACHE_HOME/wasi-python`,
/// else `~/.cache/wasi-python`, else the system temp folder.
pub fn default_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(CACHE_ENV) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("wasi-python");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("wasi-python");
    }
    std::env::temp_dir().join("wasi-python-cache")
}

/// Loads the guest for one flavour: from the cache when a matching compiled copy
/// exists, else compiles it (minutes) and stores it for every later process.
pub(crate) fn prepare(
    artifacts: &Artifacts,
    cache_dir: &Path,
    flavour: Flavour,
) -> Result<Prepared, Error> {
    let engine = Engine::new(&config(flavour)).map_err(|e| Error::Module(format!("{e:#}")))?;
    let path = cache_path(artifacts, cache_dir, &engine);
    let module = match load_cached(&engine, &path) {
        Some(m) => m,
        None => compile_and_cache(artifacts, &engine, &path)?,
    };
    let mut linker = Linker::new(&engine);
    host::add_to_linker(&mut linker).map_err(|e| Error::Internal(format!("{e:#}")))?;
    let pre = linker
        .instantiate_pre(&module)
        .map_err(|e| Error::Module(format!("linking the guest: {e:#}")))?;
    Ok(Prepared { engine, pre })
}

/// `<module sha256 prefix>-wasmtime<version>-<engine settings hash>.cwasm`
pub(crate) fn cache_path(artifacts: &Artifacts, cache_dir: &Path, engine: &Engine) -> PathBuf {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    let sha = artifacts.module_sha256();
    let sha = if sha.len() >= 16 { &sha[..16] } else { "unhashed" };
    cache_dir.join(format!(
        "{sha}-wasmtime{WASMTIME_VERSION}-{:016x}.cwasm",
        h.finish()
    ))
}

fn load_cached(engine: &Engine, path: &Path) -> Option<Module> {
    if !path.is_file() {
        return None;
    }
    #[expect(
        unsafe_code,
        reason = "deserialising trusts the file: we only load .cwasm files this runtime \
                  wrote itself, into the user's own cache folder, named by the engine's \
                  compatibility hash"
    )]
    // SAFETY: see the reason above; a stale or foreign file fails the header check
    // and is recompiled.
    let module = unsafe { Module::deserialize_file(engine, path) };
    module.ok()
}

fn compile_and_cache(artifacts: &Artifacts, engine: &Engine, path: &Path) -> Result<Module, Error> {
    let wasm = std::fs::read(artifacts.module())
        .map_err(|e| Error::io(format!("reading {}", artifacts.module().display()), e))?;
    let compiled = engine
        .precompile_module(&wasm)
        .map_err(|e| Error::Module(format!("compiling the guest: {e:#}")))?;
    drop(wasm);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    }
    // Write-then-rename, so a concurrent process never loads half a file.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, &compiled).map_err(|e| Error::io(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(format!("renaming {}", tmp.display()), e))?;
    drop(compiled);
    load_cached(engine, path)
        .ok_or_else(|| Error::Module(format!("the freshly written {} does not load", path.display())))
}

/// Lazily prepared flavours, shared by every run of one [`crate::Runtime`].
#[derive(Debug, Default)]
pub(crate) struct Flavours {
    plain: Mutex<Option<Arc<Prepared>>>,
    metered: Mutex<Option<Arc<Prepared>>>,
}

impl Flavours {
    pub(crate) fn get(
        &self,
        artifacts: &Artifacts,
        cache_dir: &Path,
        flavour: Flavour,
    ) -> Result<Arc<Prepared>, Error> {
        let slot = match flavour {
            Flavour::Plain => &self.plain,
            Flavour::Metered => &self.metered,
        };
        let mut slot = slot.lock();
        if let Some(p) = &*slot {
            return Ok(p.clone());
        }
        let p = Arc::new(prepare(artifacts, cache_dir, flavour)?);
        *slot = Some(p.clone());
        Ok(p)
    }
}
