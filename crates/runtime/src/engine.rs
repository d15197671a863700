//! Engines, the compiled-module cache and the warm `InstancePre`s.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

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

impl Prepared {
    /// The same compiled guest, its memory starting from the image at `path` (a whole
    /// memory of `pages` wasm pages) instead of from its data segments.
    fn with_image(&self, path: &Path, pages: u64) -> Result<Prepared, Error> {
        let fail = |e: wasmtime::Error| Error::Module(format!("loading the memory image {}: {e:#}", path.display()));
        let file = std::fs::File::open(path).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        let module = self.pre.module().with_memory_image(file, pages).map_err(fail)?;
        let mut linker = Linker::new(&self.engine);
        host::add_to_linker(&mut linker).map_err(|e| Error::Internal(format!("{e:#}")))?;
        let pre = linker.instantiate_pre(&module).map_err(fail)?;
        Ok(Prepared { engine: self.engine.clone(), pre })
    }
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prepared")
    }
}

/// Stores that may live at once in the pooling allocator's slots; past that, runs use
/// the on-demand engine (same compiled code), so the pool never refuses a run.
pub(crate) const POOL_SLOTS: usize = 60;

/// Whether the pooling allocator is used: yes, unless `WASI_PYTHON_POOLING=0`.
pub(crate) fn pooling_from_env() -> bool {
    std::env::var_os("WASI_PYTHON_POOLING").is_none_or(|v| v != "0")
}

/// The pooling allocator: slots are reused, and a slot keeps the pages its last run
/// wrote mapped (reset from the image through `PAGEMAP_SCAN` on Linux 6.7+), so the
/// next run in it takes few page faults and no mmap/munmap. 64 MiB covers the guest's
/// initial 40 MiB memory and the heap's first growth; only pages a run wrote stay
/// resident, so a slot costs a few MB, not 64. Without `PAGEMAP_SCAN` (older kernels)
/// keeping pages resident would mean a memset of all 64 MiB per run, so the slot is
/// decommitted instead (the on-demand allocator's page faults, without its mmap).
/// Measurements: docs/benchmarks.md.
fn pooling_config() -> wasmtime::PoolingAllocationConfig {
    let slots = POOL_SLOTS as u32 + 4;
    let scan = wasmtime::PoolingAllocationConfig::is_pagemap_scan_available();
    let (keep_memory, keep_table) = if scan { (64 << 20, 1 << 20) } else { (0, 0) };
    let mut p = wasmtime::PoolingAllocationConfig::default();
    p.total_core_instances(slots)
        // A store's GC heap (the guest's exception objects) takes a memory slot too.
        .total_memories(2 * slots)
        .total_tables(slots)
        .total_stacks(slots)
        .total_gc_heaps(slots)
        .max_memory_size(4 << 30)
        .table_elements(65_536)
        .max_core_instance_size(4 << 20)
        .linear_memory_keep_resident(keep_memory)
        .table_keep_resident(keep_table)
        .pagemap_scan(if scan { wasmtime::Enabled::Yes } else { wasmtime::Enabled::No });
    p
}

fn config(flavour: Flavour, pooled: Option<wasmtime::PoolingAllocationConfig>) -> Config {
    let mut c = Config::new();
    if let Some(p) = pooled {
        c.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(p));
    }
    c.epoch_interruption(true)
        .consume_fuel(flavour == Flavour::Metered)
        .wasm_exceptions(true)
        // A run's ending is named by its trap code, never by a wasm backtrace, and
        // capturing one (with symbols) cost every run that ends in os._exit about
        // 0.1 ms. A runtime setting: the compiled code and its cache key stay the same.
        .wasm_backtrace_max_frames(None)
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
    pooling: bool,
) -> Result<Flavoured, Error> {
    // The allocator does not change the generated code: both engines load one cache file.
    // With a pool, the on-demand engine is loaded only when the pool is full: each loaded
    // copy maps the compiled code again and costs its own resident pages (16 MB).
    let pooled = if pooling {
        prepare_engine(artifacts, cache_dir, flavour, Some(pooling_config())).ok()
    } else {
        None
    };
    let on_demand = std::sync::OnceLock::new();
    if pooled.is_none() {
        let _ = on_demand.set(prepare_engine(artifacts, cache_dir, flavour, None)?);
    }
    Ok(Flavoured {
        pooled,
        on_demand,
        loading: Mutex::new(()),
        artifacts: artifacts.clone(),
        cache_dir: cache_dir.to_owned(),
        flavour,
        live: Arc::new(AtomicUsize::new(0)),
        image: None,
    })
}

/// A flavour's engines: the pooled one while it has free slots, else the on-demand one.
#[derive(Debug)]
pub(crate) struct Flavoured {
    pooled: Option<Prepared>,
    on_demand: std::sync::OnceLock<Prepared>,
    loading: Mutex<()>,
    artifacts: Artifacts,
    cache_dir: PathBuf,
    flavour: Flavour,
    /// Stores alive in the pooled engine's slots, shared with the flavours made from
    /// this one by [`Flavoured::with_image`] (they use the same pool).
    live: Arc<AtomicUsize>,
    /// A snapshot's memory image and its size in wasm pages, which every module of
    /// this flavour starts from instead of the artifact's own.
    image: Option<(PathBuf, u64)>,
}

/// Holds a pool slot for as long as its store lives.
#[derive(Debug)]
pub(crate) struct Slot(Option<Arc<AtomicUsize>>);

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(live) = &self.0 {
            live.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Flavoured {
    /// The engine for a new store, and its slot (drop it after the store).
    pub(crate) fn pick(&self) -> Result<(&Prepared, Slot), Error> {
        if let Some(p) = &self.pooled {
            if self.live.fetch_add(1, Ordering::SeqCst) < POOL_SLOTS {
                return Ok((p, Slot(Some(self.live.clone()))));
            }
            self.live.fetch_sub(1, Ordering::SeqCst);
        }
        Ok((self.on_demand()?, Slot(None)))
    }

    /// The on-demand engine, loaded on first need.
    fn on_demand(&self) -> Result<&Prepared, Error> {
        if let Some(p) = self.on_demand.get() {
            return Ok(p);
        }
        let _one_loader = self.loading.lock();
        if let Some(p) = self.on_demand.get() {
            return Ok(p);
        }
        let mut p = prepare_engine(&self.artifacts, &self.cache_dir, self.flavour, None)?;
        if let Some((image, pages)) = &self.image {
            p = p.with_image(image, *pages)?;
        }
        Ok(self.on_demand.get_or_init(|| p))
    }

    /// This flavour, starting from the memory image at `image` (`pages` wasm pages):
    /// the same engines and compiled code, so this takes milliseconds. The on-demand
    /// engine gets the image when it is first loaded.
    pub(crate) fn with_image(&self, image: &Path, pages: u64) -> Result<Flavoured, Error> {
        let pooled = match &self.pooled {
            Some(p) => Some(p.with_image(image, pages)?),
            None => None,
        };
        let on_demand = std::sync::OnceLock::new();
        if pooled.is_none() {
            let _ = on_demand.set(self.on_demand()?.with_image(image, pages)?);
        }
        Ok(Flavoured {
            pooled,
            on_demand,
            loading: Mutex::new(()),
            artifacts: self.artifacts.clone(),
            cache_dir: self.cache_dir.clone(),
            flavour: self.flavour,
            live: self.live.clone(),
            image: Some((image.to_owned(), pages)),
        })
    }

    /// Any of the loaded engines (they share one compiled-code cache file).
    pub(crate) fn any_engine(&self) -> &Engine {
        match (&self.pooled, self.on_demand.get()) {
            (Some(p), _) => &p.engine,
            (None, Some(p)) => &p.engine,
            (None, None) => unreachable!("prepare loads one engine at least"),
        }
    }
}

fn prepare_engine(
    artifacts: &Artifacts,
    cache_dir: &Path,
    flavour: Flavour,
    pooled: Option<wasmtime::PoolingAllocationConfig>,
) -> Result<Prepared, Error> {
    let engine = Engine::new(&config(flavour, pooled)).map_err(|e| Error::Module(format!("{e:#}")))?;
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

/// The compiled guest of one artifact set: its flavours, prepared lazily and shared by
/// every run of one [`crate::Runtime`].
#[derive(Debug)]
pub(crate) struct Flavours {
    artifacts: Artifacts,
    cache_dir: PathBuf,
    pooling: bool,
    plain: Mutex<Option<Arc<Flavoured>>>,
    metered: Mutex<Option<Arc<Flavoured>>>,
}

impl Flavours {
    pub(crate) fn new(artifacts: Artifacts, cache_dir: PathBuf, pooling: bool) -> Flavours {
        Flavours { artifacts, cache_dir, pooling, plain: Mutex::new(None), metered: Mutex::new(None) }
    }

    pub(crate) fn artifacts(&self) -> &Artifacts {
        &self.artifacts
    }

    pub(crate) fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    pub(crate) fn pooling(&self) -> bool {
        self.pooling
    }

    /// `flavour`'s engines: compiled, or loaded from the cache, on first need.
    pub(crate) fn get(&self, flavour: Flavour) -> Result<Arc<Flavoured>, Error> {
        let slot = match flavour {
            Flavour::Plain => &self.plain,
            Flavour::Metered => &self.metered,
        };
        let mut slot = slot.lock();
        if let Some(p) = &*slot {
            return Ok(p.clone());
        }
        let p = Arc::new(prepare(&self.artifacts, &self.cache_dir, flavour, self.pooling)?);
        *slot = Some(p.clone());
        Ok(p)
    }
}
