//! Engines, the compiled-module cache and the warm `InstancePre`s.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use wasmtime::{Config, Engine, InstancePre, Linker, Module};

use crate::launch::Launcher;
use crate::host::{self, HostState};
use crate::idle_memory::{IdleMemory, Notice};
use crate::notice::{NoticeKind, Notices};
use crate::{Artifacts, Error, cached};

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
    /// The same compiled guest, its memory starting from the image `file` (a whole
    /// memory of `pages` wasm pages, opened from `path`) instead of from its data
    /// segments. The file is mapped as it is held, never opened again by `path`
    /// (snapshot.rs, `Image`).
    fn with_image(&self, path: &Path, file: &std::fs::File, pages: u64) -> Result<Prepared, Error> {
        let fail = |e: wasmtime::Error| Error::Module(format!("loading the memory image {}: {e:#}", path.display()));
        let file = file.try_clone().map_err(|e| Error::io(format!("holding {} open", path.display()), e))?;
        let module = self.pre.module().with_memory_image(file, pages).map_err(fail)?;
        let mut linker = Linker::new(&self.engine);
        host::add_to_linker(&mut linker).map_err(|e| Error::Internal(format!("{e:#}")))?;
        let pre = linker.instantiate_pre(&module).map_err(fail)?;
        Ok(Prepared { engine: self.engine.clone(), pre })
    }

    /// The same compiled guest, its memory starting from a session snapshot's layers
    /// (fork.rs, delta.rs) of `pages` wasm pages.
    fn with_layers(&self, layout: &crate::delta::Layout, pages: u64) -> Result<Prepared, Error> {
        let fail = |e: wasmtime::Error| Error::Module(format!("mapping a snapshot's memory: {e:#}"));
        let view = layout.view().map_err(|e| Error::io("mapping a snapshot's memory", e))?;
        let base = layout.base.try_clone().map_err(|e| Error::io("mapping a snapshot's memory", e))?;
        let page = wasi_python_image::PAGE as u64;
        let layers: Vec<wasmtime::MemoryLayer> = layout
            .runs
            .iter()
            .map(|r| wasmtime::MemoryLayer {
                file: r.file.file().clone(),
                file_offset: u64::from(r.at) * page,
                memory_offset: u64::from(r.start) * page,
                len: u64::from(r.len) * page,
            })
            .collect();
        let module = self.pre.module().with_memory_layers(base, layout.base_len, &layers, layout.len, view, pages).map_err(fail)?;
        let mut linker = Linker::new(&self.engine);
        host::add_to_linker(&mut linker).map_err(|e| Error::Internal(format!("{e:#}")))?;
        let pre = linker.instantiate_pre(&module).map_err(fail)?;
        Ok(Prepared { engine: self.engine.clone(), pre })
    }

    fn with_memory(&self, memory: &MemoryFrom) -> Result<Prepared, Error> {
        match memory {
            MemoryFrom::File(path, file, pages) => self.with_image(path, file, *pages),
            MemoryFrom::Layers(layout, pages) => self.with_layers(layout, *pages),
        }
    }
}

/// What a flavour's memory starts from instead of the artifact's own: a preload
/// image's file (its path and the file held open), or a session snapshot's layers; and
/// its size in wasm pages.
#[derive(Debug, Clone)]
pub(crate) enum MemoryFrom {
    File(PathBuf, Arc<std::fs::File>, u64),
    Layers(Arc<crate::delta::Layout>, u64),
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
/// Measurements: docs/dev/perf-log/ (the pooling allocator, and the short reset).
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

/// The CPU level the guest's code is compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CpuLevel {
    /// The architecture's portable baseline, what the wheels ship, so the code compiled
    /// on one machine loads on any machine of its kind: x86-64-v2 (SSE4.2, POPCNT,
    /// CMPXCHG16B: any x86-64 machine of the last 15 years), or ARMv8.0-A on aarch64
    /// (Cranelift's defaults: no LSE atomics, pointer authentication or FP16).
    Portable,
    /// Every feature of this machine's CPU (what wasmtime picks by default).
    Native,
}

/// The environment variable choosing [`CpuLevel`]: `native` or `portable`.
pub const CPU_ENV: &str = "WASI_PYTHON_CPU";

impl CpuLevel {
    /// `$WASI_PYTHON_CPU` if it says `native`; else portable code where this CPU runs
    /// it (x86-64 with the v2 features), else native.
    pub fn from_env() -> CpuLevel {
        if std::env::var_os(CPU_ENV).is_some_and(|v| v == "native") || !Self::portable_runs_here() {
            CpuLevel::Native
        } else {
            CpuLevel::Portable
        }
    }

    /// Whether this CPU has every feature x86-64-v2 code may use.
    pub fn portable_runs_here() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("sse3")
                && std::arch::is_x86_feature_detected!("ssse3")
                && std::arch::is_x86_feature_detected!("sse4.1")
                && std::arch::is_x86_feature_detected!("sse4.2")
                && std::arch::is_x86_feature_detected!("popcnt")
                && std::arch::is_x86_feature_detected!("cmpxchg16b")
        }
        // Every aarch64 CPU runs ARMv8.0-A code.
        #[cfg(target_arch = "aarch64")]
        {
            true
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            false
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CpuLevel::Portable => portable_level(&target_lexicon::HOST.to_string()).unwrap_or("portable"),
            CpuLevel::Native => "native",
        }
    }
}

/// The portable baseline's name for code compiled for `triple`: `x86-64-v2`, `armv8-a`.
pub(crate) fn portable_level(triple: &str) -> Option<&'static str> {
    match triple.split('-').next() {
        Some("x86_64") => Some("x86-64-v2"),
        Some("aarch64") => Some("armv8-a"),
        _ => None,
    }
}

/// Names `triple` as the compilation target, which stops wasmtime from inferring this
/// CPU's features, and enables its portable baseline's: the x86-64-v2 preset on x86-64,
/// nothing beyond Cranelift's defaults (ARMv8.0-A) on aarch64. Used for this machine
/// (`CpuLevel::Portable`) and for another (cross.rs): the cache key follows the target
/// and flags alone, so the two name the same file.
pub(crate) fn portable_target(c: &mut Config, triple: &str) -> Result<(), Error> {
    c.target(triple).map_err(|e| Error::Module(format!("{e:#}")))?;
    if portable_level(triple) == Some("x86-64-v2") {
        #[expect(
            unsafe_code,
            reason = "a Cranelift preset of CPU features: for this machine, every feature it \
                      names is checked present on this CPU (`portable_runs_here`) before it is \
                      chosen; code compiled for another is never run here; and wasmtime checks \
                      them again where the code is loaded"
        )]
        // SAFETY: see the reason above.
        unsafe {
            c.cranelift_flag_enable("x86-64-v2");
        }
    }
    Ok(())
}

pub(crate) fn config(flavour: Flavour, pooled: Option<wasmtime::PoolingAllocationConfig>, cpu: CpuLevel) -> Result<Config, Error> {
    let host = target_lexicon::HOST.to_string();
    config_for(flavour, pooled, (cpu == CpuLevel::Portable).then_some(host.as_str()))
}

/// The engine's settings, compiling for the portable baseline of `portable` (a target
/// triple) if given, else for this CPU with every feature it has.
pub(crate) fn config_for(flavour: Flavour, pooled: Option<wasmtime::PoolingAllocationConfig>, portable: Option<&str>) -> Result<Config, Error> {
    let mut c = Config::new();
    if let Some(p) = pooled {
        c.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(p));
    }
    if let Some(triple) = portable {
        portable_target(&mut c, triple)?;
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
        .max_wasm_stack(MAX_WASM_STACK)
        // The map from machine code back to wasm offsets serves backtraces and
        // debuggers only, neither of which a run uses: 28 MB less compiled code.
        .generate_address_map(false);
    Ok(c)
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
pub(crate) fn prepare(f: &Flavours, flavour: Flavour) -> Result<Flavoured, Error> {
    let Flavours { artifacts, cache_dir, pooling, cpu, notices, launcher, idle, .. } = f;
    let (pooling, cpu) = (*pooling, *cpu);
    // The allocator does not change the generated code: both engines load one cache file.
    // With a pool, the on-demand engine is loaded only when the pool is full: each loaded
    // copy maps the compiled code again and costs its own resident pages (16 MB).
    let pooled = if pooling {
        prepare_engine(artifacts, cache_dir, flavour, Some(pooling_config()), cpu, notices).ok()
    } else {
        None
    };
    if let Some(p) = &pooled {
        idle.add(&p.engine);
    }
    let on_demand = std::sync::OnceLock::new();
    if pooled.is_none() {
        let _ = on_demand.set(prepare_engine(artifacts, cache_dir, flavour, None, cpu, notices)?);
    }
    let compiled = crate::compiled::Compiled::new();
    Ok(Flavoured {
        notice: pooled.as_ref().map(|_| idle.notice()),
        pooled,
        on_demand,
        loading: Mutex::new(()),
        artifacts: artifacts.clone(),
        cache_dir: cache_dir.to_owned(),
        flavour,
        cpu,
        notices: notices.clone(),
        live: Arc::new(AtomicUsize::new(0)),
        image: None,
        standby: crate::standby::Ready::new(launcher, None, &compiled),
        compiled,
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
    cpu: CpuLevel,
    notices: Notices,
    /// Stores alive in the pooled engine's slots, shared with the flavours made from
    /// this one by [`Flavoured::with_image`] (they use the same pool).
    live: Arc<AtomicUsize>,
    /// Told when a store of the pool ends, so idle slots keep at most the launch
    /// policy's `idle_memory` (idle_memory.rs).
    notice: Option<Notice>,
    /// A snapshot's memory, which every module of this flavour starts from instead of
    /// the artifact's own.
    image: Option<MemoryFrom>,
    /// Guests on standby for this flavour's next fresh run (standby.rs).
    pub(crate) standby: Arc<crate::standby::Ready>,
    /// The `-c` programs runs from this flavour's image compiled (compiled.rs).
    pub(crate) compiled: Arc<crate::compiled::Compiled>,
}

/// Holds a pool slot for as long as its store lives, and the memory mappings a guest
/// over a snapshot's layers holds (mappings.rs).
#[derive(Debug)]
pub(crate) struct Slot {
    pooled: Option<(Arc<AtomicUsize>, Option<Notice>)>,
    _mappings: Option<crate::mappings::Held>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((live, notice)) = &self.pooled {
            live.fetch_sub(1, Ordering::SeqCst);
            if let Some(n) = notice {
                n.store_ended();
            }
        }
    }
}

impl Flavoured {
    /// The engine for a new store, and its slot (drop it after the store).
    pub(crate) fn pick(&self) -> Result<(&Prepared, Slot), Error> {
        let held = match &self.image {
            Some(MemoryFrom::Layers(layout, _)) => Some(crate::mappings::Held::take(layout.mappings())),
            _ => None,
        };
        if let Some(p) = &self.pooled {
            if self.live.fetch_add(1, Ordering::SeqCst) < POOL_SLOTS {
                return Ok((p, Slot { pooled: Some((self.live.clone(), self.notice.clone())), _mappings: held }));
            }
            self.live.fetch_sub(1, Ordering::SeqCst);
        }
        Ok((self.on_demand()?, Slot { pooled: None, _mappings: held }))
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
        let mut p = prepare_engine(&self.artifacts, &self.cache_dir, self.flavour, None, self.cpu, &self.notices)?;
        if let Some(memory) = &self.image {
            p = p.with_memory(memory)?;
        }
        Ok(self.on_demand.get_or_init(|| p))
    }

    /// This flavour, starting from the memory image `file`, opened from `image` (`pages`
    /// wasm pages): the same engines and compiled code, so this takes milliseconds. The
    /// on-demand engine gets the image when it is first loaded, from the same file.
    pub(crate) fn with_image(&self, image: &Path, file: &Arc<std::fs::File>, pages: u64) -> Result<Flavoured, Error> {
        self.with_memory(MemoryFrom::File(image.to_owned(), file.clone(), pages), image)
    }

    /// This flavour, starting from a session snapshot's layers (`pages` wasm pages);
    /// `name` tells its guests on standby apart from other images'.
    pub(crate) fn with_layers(&self, layout: Arc<crate::delta::Layout>, pages: u64, name: &Path) -> Result<Flavoured, Error> {
        self.with_memory(MemoryFrom::Layers(layout, pages), name)
    }

    fn with_memory(&self, memory: MemoryFrom, image: &Path) -> Result<Flavoured, Error> {
        let pooled = match &self.pooled {
            Some(p) => Some(p.with_memory(&memory)?),
            None => None,
        };
        let on_demand = std::sync::OnceLock::new();
        if pooled.is_none() {
            let _ = on_demand.set(self.on_demand()?.with_memory(&memory)?);
        }
        let compiled = crate::compiled::Compiled::new();
        Ok(Flavoured {
            pooled,
            on_demand,
            loading: Mutex::new(()),
            artifacts: self.artifacts.clone(),
            cache_dir: self.cache_dir.clone(),
            flavour: self.flavour,
            cpu: self.cpu,
            notices: self.notices.clone(),
            live: self.live.clone(),
            notice: self.notice.clone(),
            image: Some(memory),
            standby: crate::standby::Ready::new(&self.standby.launcher, Some(image.to_owned()), &compiled),
            compiled,
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
    cpu: CpuLevel,
    notices: &Notices,
) -> Result<Prepared, Error> {
    let engine = crate::signals::new_engine(&config(flavour, pooled, cpu)?).map_err(|e| Error::Module(format!("{e:#}")))?;
    let path = cache_path(artifacts, cache_dir, &engine);
    let what = match flavour {
        Flavour::Plain => "the guest",
        Flavour::Metered => "the guest's fuel-metered flavour (for runs with fuel=)",
    };
    let read = || {
        std::fs::read(artifacts.module()).map_err(|e| Error::io(format!("reading {}", artifacts.module().display()), e))
    };
    let (module, _) = load_or_compile(&engine, &path, artifacts.compiled_dirs(), what, &read, &|m| {
        notices.say(NoticeKind::Compiling, m)
    })?;
    let mut linker = Linker::new(&engine);
    host::add_to_linker(&mut linker).map_err(|e| Error::Internal(format!("{e:#}")))?;
    let pre = linker
        .instantiate_pre(&module)
        .map_err(|e| Error::Module(format!("linking the guest: {e:#}")))?;
    Ok(Prepared { engine, pre })
}

/// Bumped when what is compiled changes beyond the engine's settings (which key the
/// cache through wasmtime's compatibility hash): since 2, the name section is dropped.
const RECIPE: &str = "recipe 2";

/// `<module sha256 prefix>-wasmtime<version>-<engine settings hash>.cwasm`
pub(crate) fn cache_path(artifacts: &Artifacts, cache_dir: &Path, engine: &Engine) -> PathBuf {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    RECIPE.hash(&mut h);
    let sha = artifacts.module_sha256();
    let sha = if sha.len() >= 16 { &sha[..16] } else { "unhashed" };
    cache_dir.join(format!(
        "{sha}-wasmtime{WASMTIME_VERSION}-{:016x}.cwasm",
        h.finish()
    ))
}

/// The compiled module at `path` in the cache, else unpacked from a shipped copy in
/// `shipped`, else compiled from `wasm()` (saying so first, with the expected wait)
/// and cached. A damaged file is never served: the cache's sidecar check and
/// wasmtime's own header check (CPU features, engine settings) refuse it, the
/// refusal is said, and the module is compiled instead.
pub(crate) fn load_or_compile(
    engine: &Engine,
    path: &Path,
    shipped: &[PathBuf],
    what: &str,
    wasm: &dyn Fn() -> Result<Vec<u8>, Error>,
    notice: &dyn Fn(&str),
) -> Result<(Module, cached::Origin), Error> {
    let cached_why = match cached::check(path) {
        Some(origin) => match load_cached(engine, path) {
            Ok(m) => return Ok((m, origin)),
            Err(e) => Some(format!("the cached {} does not load ({e:#})", path.display())),
        },
        None if path.exists() => Some(format!(
            "the cached {} is damaged (not the length or checksum it was written with)",
            path.display()
        )),
        None => None,
    };
    let shipped_why = match cached::unpack(shipped, path) {
        Ok(true) => match load_cached(engine, path) {
            Ok(m) => return Ok((m, cached::Origin::Unpacked)),
            Err(e) => format!("the shipped compiled code does not load on this machine ({e:#})"),
        },
        Ok(false) => "no compiled copy for this machine is shipped or cached".to_owned(),
        Err(e) => format!("the shipped compiled code is damaged ({e})"),
    };
    let why = cached_why.unwrap_or(shipped_why);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let wait = expected_wait(cores);
    notice(&format!(
        "{why}: compiling {what} now, once; this takes about {wait} on {cores} cores, \
         and the result is cached in {}",
        path.parent().map_or_else(|| path.display().to_string(), |d| d.display().to_string())
    ));
    let module = compile_and_cache(engine, path, &wasm()?)?;
    Ok((module, cached::Origin::Compiled))
}

/// What compiling the guest (and building the default snapshot after it) costs in CPU
/// time: a release build of the runtime took 54 s on 2 cores (the sdist check), the dev
/// profile's build about 95 s (its dependencies are optimised less).
const COMPILE_CORE_SECONDS: f64 = if cfg!(debug_assertions) { 190.0 } else { 110.0 };

/// The wait the compile notice announces, rounded up: seconds under two minutes.
fn expected_wait(cores: usize) -> String {
    let seconds = COMPILE_CORE_SECONDS / cores.max(1) as f64;
    if seconds < 120.0 {
        format!("{} s", ((seconds / 10.0).ceil() * 10.0) as u64)
    } else {
        format!("{} min", (seconds / 60.0).ceil() as u64)
    }
}

fn load_cached(engine: &Engine, path: &Path) -> Result<Module, wasmtime::Error> {
    #[expect(
        unsafe_code,
        reason = "deserialising trusts the file: we only load .cwasm files this runtime \
                  wrote itself (or unpacked from the package's shipped copy), checked \
                  whole against their sidecar, named by the engine's compatibility hash"
    )]
    // SAFETY: see the reason above; a stale or foreign file fails the header check
    // and is recompiled.
    unsafe {
        Module::deserialize_file(engine, path)
    }
}

/// The guest module as it is compiled: without its name section (function names for
/// backtraces, which runs do not take), 14 MB of the module and of the compiled code.
pub(crate) fn without_names(wasm: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(wasm.len());
    let Some(header) = wasm.get(..8) else { return wasm.to_vec() };
    out.extend_from_slice(header);
    let mut at = 8;
    while at < wasm.len() {
        let start = at;
        let id = wasm[at];
        at += 1;
        let Some((size, n)) = leb_u32(&wasm[at..]) else { return wasm.to_vec() };
        at += n;
        let Some(body) = wasm.get(at..at + size as usize) else { return wasm.to_vec() };
        at += size as usize;
        let is_names = id == 0 && leb_u32(body).is_some_and(|(len, n)| body.get(n..n + len as usize) == Some(b"name"));
        if !is_names {
            out.extend_from_slice(&wasm[start..at]);
        }
    }
    out
}

fn leb_u32(bytes: &[u8]) -> Option<(u32, usize)> {
    let mut value = 0u32;
    for (i, &b) in bytes.iter().take(5).enumerate() {
        value |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

fn compile_and_cache(engine: &Engine, path: &Path, wasm: &[u8]) -> Result<Module, Error> {
    let compiled = engine
        .precompile_module(&without_names(wasm))
        .map_err(|e| Error::Module(format!("compiling the guest: {e:#}")))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    }
    // Write-then-rename, so a concurrent process never loads half a file.
    let io = |e| Error::io(format!("writing beside {}", path.display()), e);
    let (file, tmp) = cached::temp_file(path).map_err(io)?;
    cached::write_in_blocks(file, &compiled).map_err(io)?;
    drop(compiled);
    cached::seal(tmp, path, cached::Origin::Compiled)?;
    load_cached(engine, path)
        .map_err(|e| Error::Module(format!("the freshly written {} does not load: {e:#}", path.display())))
}

/// The compiled guest of one artifact set: its flavours, prepared lazily and shared by
/// every run of one [`crate::Runtime`].
#[derive(Debug)]
pub(crate) struct Flavours {
    artifacts: Artifacts,
    cache_dir: PathBuf,
    pooling: bool,
    cpu: CpuLevel,
    notices: Notices,
    /// The runtime's scheduling state, which its flavours' guests on standby join.
    launcher: Arc<Launcher>,
    /// The bound on what the pools' idle slots keep (idle_memory.rs).
    idle: IdleMemory,
    plain: Mutex<Option<Arc<Flavoured>>>,
    metered: Mutex<Option<Arc<Flavoured>>>,
}

impl Flavours {
    pub(crate) fn new(artifacts: Artifacts, cache_dir: PathBuf, pooling: bool, notices: Notices, launcher: Arc<Launcher>) -> Flavours {
        let cpu = CpuLevel::from_env();
        let idle = IdleMemory::new(launcher.policy.idle_memory);
        Flavours { artifacts, cache_dir, pooling, cpu, notices, launcher, idle, plain: Mutex::new(None), metered: Mutex::new(None) }
    }

    /// The bytes this runtime's idle pool slots keep now (`LaunchStats::idle_slot_bytes`).
    pub(crate) fn idle_slot_bytes(&self) -> u64 {
        self.idle.kept()
    }

    /// The runtime's launcher (launch.rs).
    pub(crate) fn launcher(&self) -> &Arc<Launcher> {
        &self.launcher
    }

    /// Where this runtime's notices go.
    pub(crate) fn notices(&self) -> &Notices {
        &self.notices
    }

    /// The CPU level this runtime compiles for (and loads compiled code of).
    pub(crate) fn cpu(&self) -> CpuLevel {
        self.cpu
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
        let p = Arc::new(prepare(self, flavour)?);
        *slot = Some(p.clone());
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::cached::tests::tempdir;

    /// The smallest module: compiling it takes milliseconds.
    const EMPTY: &[u8] = b"\0asm\x01\0\0\0";

    #[test]
    fn the_compile_notice_says_seconds_under_two_minutes_and_never_divides_by_zero() {
        let one_core = COMPILE_CORE_SECONDS;
        assert!(expected_wait(64).ends_with(" s"));
        assert_eq!(expected_wait(0), expected_wait(1));
        let said = expected_wait(1);
        if one_core >= 120.0 {
            assert_eq!(said, format!("{} min", (one_core / 60.0).ceil() as u64));
        } else {
            assert!(said.ends_with(" s"));
        }
    }

    /// Ships `compiled` as the copy of the cache file `name`, in `dir`.
    fn ship(dir: &Path, name: &str, compiled: &[u8]) {
        std::fs::write(dir.join("0.zst"), zstd::stream::encode_all(compiled, 3).unwrap()).unwrap();
        let list = format!("{}\n{name} 0.zst {}\n", cached::COMPILED_MAGIC, compiled.len());
        std::fs::write(dir.join("COMPILED"), list).unwrap();
    }

    fn runtime_engine() -> Engine {
        Engine::new(&config(Flavour::Plain, None, CpuLevel::from_env()).unwrap()).unwrap()
    }

    /// Loads through [`load_or_compile`], returning the origin and the notices given.
    fn load(engine: &Engine, path: &Path, shipped: &Path) -> (cached::Origin, Vec<String>) {
        let notices = RefCell::new(Vec::new());
        let (_, origin) = load_or_compile(engine, path, &[shipped.to_owned()], "a test module", &|| Ok(EMPTY.to_vec()), &|m| {
            notices.borrow_mut().push(m.to_owned())
        })
        .unwrap();
        (origin, notices.into_inner())
    }

    #[test]
    fn a_shipped_copy_that_fits_is_unpacked_and_then_served_from_the_cache() {
        let d = tempdir();
        let engine = runtime_engine();
        let path = d.join("cache").join("m.cwasm");
        ship(&d, "m.cwasm", &engine.precompile_module(EMPTY).unwrap());
        assert_eq!(load(&engine, &path, &d), (cached::Origin::Unpacked, vec![]));
        assert_eq!(load(&engine, &path, &d), (cached::Origin::Unpacked, vec![]));
    }

    #[test]
    fn code_for_a_cpu_feature_this_host_lacks_is_refused_and_compiled_instead() {
        #[cfg(target_arch = "x86_64")]
        let lacking = [("has_avx512f", "avx512f"), ("has_avx512vbmi", "avx512vbmi"), ("has_avx512vl", "avx512vl")]
            .into_iter()
            .find(|(_, f)| !match *f {
                "avx512f" => std::arch::is_x86_feature_detected!("avx512f"),
                "avx512vbmi" => std::arch::is_x86_feature_detected!("avx512vbmi"),
                _ => std::arch::is_x86_feature_detected!("avx512vl"),
            });
        #[cfg(not(target_arch = "x86_64"))]
        let lacking: Option<(&str, &str)> = None;
        let Some((flag, _)) = lacking else {
            eprintln!("this CPU has every feature the test could claim; the engine-settings test covers refusal");
            return;
        };
        let mut c = Config::new();
        c.target(&target_lexicon::HOST.to_string()).unwrap();
        #[expect(unsafe_code, reason = "compiling for a CPU feature this host lacks, never running it")]
        // SAFETY: the code is only refused by wasmtime's check, never run.
        unsafe {
            c.cranelift_flag_enable(flag);
        }
        let foreign = Engine::new(&c).unwrap().precompile_module(EMPTY).unwrap();
        let d = tempdir();
        let path = d.join("cache").join("m.cwasm");
        ship(&d, "m.cwasm", &foreign);
        let (origin, notices) = load(&runtime_engine(), &path, &d);
        assert_eq!(origin, cached::Origin::Compiled);
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert!(notices[0].contains("does not load on this machine"), "{notices:?}");
        // The compiled copy replaced it: the next load takes it from the cache, silently.
        assert_eq!(load(&runtime_engine(), &path, &d), (cached::Origin::Compiled, vec![]));
    }

    #[test]
    fn code_compiled_with_other_engine_settings_is_refused_and_compiled_instead() {
        let metered = Engine::new(&config(Flavour::Metered, None, CpuLevel::from_env()).unwrap()).unwrap();
        let d = tempdir();
        let path = d.join("cache").join("m.cwasm");
        ship(&d, "m.cwasm", &metered.precompile_module(EMPTY).unwrap());
        let (origin, notices) = load(&runtime_engine(), &path, &d);
        assert_eq!(origin, cached::Origin::Compiled);
        assert_eq!(notices.len(), 1, "{notices:?}");
    }

    #[test]
    fn a_damaged_cache_file_is_compiled_again_not_served() {
        let d = tempdir();
        let engine = runtime_engine();
        let path = d.join("m.cwasm");
        assert_eq!(load(&engine, &path, &d).0, cached::Origin::Compiled);
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let (origin, notices) = load(&engine, &path, &d);
        assert_eq!(origin, cached::Origin::Compiled);
        assert_eq!(notices.len(), 1, "the rebuild is said: {notices:?}");
        // A truncated one too.
        std::fs::write(&path, &bytes[..at]).unwrap();
        assert_eq!(load(&engine, &path, &d).0, cached::Origin::Compiled);
    }

    #[test]
    fn the_name_section_is_dropped_and_nothing_else() {
        // header, a custom "name" section, a custom "other" section, an empty type section
        let mut m = EMPTY.to_vec();
        m.extend_from_slice(&[0, 6, 4, b'n', b'a', b'm', b'e', 0]);
        m.extend_from_slice(&[0, 6, 5, b'o', b't', b'h', b'e', b'r']);
        m.extend_from_slice(&[1, 1, 0]);
        let mut want = EMPTY.to_vec();
        want.extend_from_slice(&[0, 6, 5, b'o', b't', b'h', b'e', b'r']);
        want.extend_from_slice(&[1, 1, 0]);
        assert_eq!(without_names(&m), want);
        // A malformed module is passed on whole, for wasmtime to refuse.
        assert_eq!(without_names(&[0, 1, 2]), vec![0, 1, 2]);
        assert_eq!(without_names(&m[..m.len() - 1]), m[..m.len() - 1].to_vec());
    }
}
