//! [`Runtime`]: the compiled guest of one artifact set, its snapshots, and the entry
//! points of runs and sessions. Cheap to clone; runs proceed in parallel.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::engine::{self, Flavour, Flavoured, Flavours};
use crate::fork::Origin;
use crate::launch::{LaunchPolicy, LaunchStats, Launcher};
use crate::notice::{Notice, Notices};
use crate::snapshot::Snapshots;
use crate::{Artifacts, Error, RunConfig};

/// wasi-libc's preopen statics as (address, width): see [`crate::preopen_table`].
type Statics = Arc<Vec<(u32, usize)>>;

/// Runs guests: one compiled module per flavour, one fresh store per run.
///
/// Cheap to clone and safe to share across threads; runs proceed in parallel.
#[derive(Debug, Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    flavours: Flavours,
    /// The artifacts and the cache, resolved: what no writable grant may hold.
    own_files: Vec<PathBuf>,
    snapshots: Snapshots,
    /// wasi-libc's preopen statics, read once from the module (fork.rs), with the
    /// check that a memory image carries all of a resting guest's mutable state.
    preopen_statics: std::sync::OnceLock<Result<Statics, String>>,
}

impl Drop for Inner {
    /// The runtime is gone: its guests on standby and primed instances end, and none is
    /// made again.
    fn drop(&mut self) {
        self.flavours.launcher().retire();
    }
}

fn own_files(artifacts: &Artifacts, cache_dir: &Path) -> Vec<PathBuf> {
    [artifacts.dir(), cache_dir]
        .into_iter()
        .map(|p| p.canonicalize().unwrap_or_else(|_| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())))
        .collect()
}

/// Sets up a [`Runtime`]: `Runtime::builder(artifacts).cache_dir(..).notices(..).build()`.
/// What is not set takes its default (the environment's, where one is named).
#[derive(Debug)]
#[must_use = "a builder does nothing until `build`"]
pub struct RuntimeBuilder {
    artifacts: Artifacts,
    cache_dir: Option<PathBuf>,
    pooling: Option<bool>,
    notices: Option<Notices>,
    launch: Option<LaunchPolicy>,
}

impl RuntimeBuilder {
    /// Where compiled code and preload snapshots are cached (default:
    /// [`engine::default_cache_dir`], which reads `WASI_PYTHON_CACHE`).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// Whether to use wasmtime's pooling allocator ([`Runtime::with_pooling`]; default:
    /// on, unless `WASI_PYTHON_POOLING=0`).
    pub fn pooling(mut self, pooling: bool) -> Self {
        self.pooling = Some(pooling);
        self
    }

    /// Where the runtime's [`Notice`]s go (default: a line `wasi_python: <message>` on
    /// stderr each). `sink` is called on the thread doing the work, possibly with the
    /// runtime's locks held (a compile holds its flavour's for minutes): it reports and
    /// returns, and never calls back into this runtime.
    pub fn notices(mut self, sink: impl Fn(&Notice) + Send + Sync + 'static) -> Self {
        self.notices = Some(Notices::new(sink));
        self
    }

    /// How the runtime schedules its runs: guests on standby, primed instances, idle
    /// threads, where threads wake (default: [`LaunchPolicy::default`], which reads the
    /// environment). Two runtimes share none of it.
    pub fn launch_policy(mut self, policy: LaunchPolicy) -> Self {
        self.launch = Some(policy);
        self
    }

    pub fn build(self) -> Runtime {
        Runtime::make(
            self.artifacts,
            self.cache_dir.unwrap_or_else(engine::default_cache_dir),
            self.pooling.unwrap_or_else(engine::pooling_from_env),
            self.notices.unwrap_or_default(),
            self.launch.unwrap_or_default(),
        )
    }
}

impl Runtime {
    /// A runtime over `artifacts` with every default ([`RuntimeBuilder`]); compiled code
    /// is cached in [`engine::default_cache_dir`].
    pub fn new(artifacts: Artifacts) -> Self {
        Self::builder(artifacts).build()
    }

    /// Sets up a runtime over `artifacts` other than by the defaults.
    pub fn builder(artifacts: Artifacts) -> RuntimeBuilder {
        RuntimeBuilder { artifacts, cache_dir: None, pooling: None, notices: None, launch: None }
    }

    /// `Runtime::builder(artifacts).cache_dir(cache_dir).build()`.
    pub fn with_cache_dir(artifacts: Artifacts, cache_dir: impl Into<PathBuf>) -> Self {
        Self::builder(artifacts).cache_dir(cache_dir).build()
    }

    fn make(artifacts: Artifacts, cache_dir: PathBuf, pooling: bool, notices: Notices, policy: LaunchPolicy) -> Self {
        // From now on forks are counted, so that a forked child forgets its parent's
        // guests, threads and folders (forks.rs).
        wasi_python_sched::forks::generation();
        Runtime {
            inner: Arc::new(Inner {
                own_files: own_files(&artifacts, &cache_dir),
                flavours: Flavours::new(artifacts, cache_dir, pooling, notices, Launcher::new(policy)),
                snapshots: Snapshots::default(),
                preopen_statics: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Whether to use wasmtime's pooling allocator for up to 60 live stores (more go
    /// on demand). On by default (`WASI_PYTHON_POOLING=0` turns it off for
    /// `Runtime::new`): warm runs take fewer page faults and no mmap/munmap, and
    /// parallel runs do not contend on the process's memory map. Call before the
    /// first run.
    pub fn with_pooling(self, pooling: bool) -> Self {
        if self.inner.flavours.pooling() == pooling {
            return self;
        }
        let f = &self.inner.flavours;
        Self::make(f.artifacts().clone(), f.cache_dir().to_owned(), pooling, f.notices().clone(), f.launcher().policy.clone())
    }

    pub fn artifacts(&self) -> &Artifacts {
        self.inner.flavours.artifacts()
    }

    /// How this runtime schedules its runs.
    pub fn launch_policy(&self) -> &LaunchPolicy {
        &self.launcher().policy
    }

    /// What this runtime's launcher did for runs from the preload image file `image` (as
    /// [`Runtime::prepare_preload`] names it), or for all with `None`: a diagnostic
    /// (tests, benchmarks).
    pub fn launch_stats(&self, image: Option<&Path>) -> LaunchStats {
        let mut s = self.launcher().stats(image);
        s.idle_slot_bytes = self.inner.flavours.idle_slot_bytes();
        s
    }

    /// Ends this runtime's guests on standby and primed instances, and makes no more, and
    /// removes the private folders it kept for later runs, keeping none from now on (for
    /// a process about to exit, before [`crate::sweep_private_folders`]: they hold private
    /// folders). Runs still start, fresh. Dropping the last clone does the same.
    pub fn retire(&self) {
        self.launcher().retire();
    }

    /// The runtime's scheduling state (launch.rs).
    pub(crate) fn launcher(&self) -> &Arc<Launcher> {
        self.inner.flavours.launcher()
    }

    /// The CPU level this runtime's compiled code is for ([`engine::CpuLevel::from_env`]).
    pub fn cpu_level(&self) -> engine::CpuLevel {
        self.inner.flavours.cpu()
    }

    /// The engines a run of `config` starts from, and what its memory starts from: a
    /// session's snapshot, a preload image (then the program is started by a turn; see
    /// snapshot.rs), or the artifact's own bootstrap.
    pub(crate) fn flavour_for(&self, config: &RunConfig) -> Result<(Arc<Flavoured>, Origin), Error> {
        let flavour = if config.limits.fuel.is_some() { Flavour::Metered } else { Flavour::Plain };
        if let Some(snap) = &config.snapshot {
            if snap.module_sha256() != self.artifacts().module_sha256() {
                return Err(Error::InvalidConfig {
                    param: "snapshot",
                    reason: "the snapshot was taken from another guest module than these artifacts'".into(),
                });
            }
            if snap.memory_bytes() > config.limits.memory_bytes {
                return Err(Error::InvalidConfig {
                    param: "memory_bytes",
                    reason: format!(
                        "{} bytes is less than the {} bytes of memory the snapshot holds; raise memory_bytes",
                        config.limits.memory_bytes,
                        snap.memory_bytes()
                    ),
                });
            }
            let f = snap.flavour(self, flavour)?;
            return Ok((f, Origin::Snapshot(snap.clone())));
        }
        match self.inner.snapshots.flavour_for(&self.inner.flavours, config, flavour)? {
            Some((f, image, modules)) => Ok((f, Origin::Preload(image, modules))),
            None => Ok((self.inner.flavours.get(flavour)?, Origin::Bootstrap)),
        }
    }

    /// `flavour`'s engines over the artifact's own memory.
    pub(crate) fn flavour(&self, flavour: Flavour) -> Result<Arc<Flavoured>, Error> {
        self.inner.flavours.get(flavour)
    }

    /// The plain flavour's engines.
    pub(crate) fn plain_flavour(&self) -> Result<Arc<Flavoured>, Error> {
        self.inner.flavours.get(Flavour::Plain)
    }

    /// The preload image of `modules` (sorted, unique) if this process or the cache
    /// folder has it; built only when they are the default preload (snapshot.rs).
    pub(crate) fn existing_preload_image(&self, modules: &[String]) -> Result<Option<Arc<crate::snapshot::Image>>, Error> {
        self.inner.snapshots.existing_image(&self.inner.flavours, modules)
    }

    /// wasi-libc's preopen statics ([`crate::preopen_table`]), read from the module on
    /// first need (a fifth of a second: 100 MB read and parsed) and kept in the cache
    /// folder for later processes; an error when the module's shape is not one a
    /// snapshot can carry (`check_globals`).
    pub(crate) fn preopen_statics(&self) -> Result<Statics, Error> {
        let fail = |reason: String| Error::Snapshot { modules: Vec::new(), reason };
        self.inner
            .preopen_statics
            .get_or_init(|| {
                let f = &self.inner.flavours;
                let sha = f.artifacts().module_sha256();
                let cache = f.cache_dir().join(format!("{}-preopen-statics.txt", &sha[..sha.len().min(16)]));
                let parse = |text: String| -> Option<Vec<(u32, usize)>> {
                    let v: Vec<(u32, usize)> = text
                        .lines()
                        .map(|l| l.split_once(' ').and_then(|(a, w)| Some((a.parse().ok()?, w.parse().ok()?))))
                        .collect::<Option<_>>()?;
                    (v.len() == 4 && v.iter().all(|&(_, w)| w == 1 || w == 4)).then_some(v)
                };
                if let Some(v) = std::fs::read_to_string(&cache).ok().and_then(parse) {
                    return Ok(Arc::new(v));
                }
                let module = std::fs::read(f.artifacts().module())
                    .map_err(|e| format!("reading {}: {e}", f.artifacts().module().display()))?;
                crate::fork::check_globals(&module)?;
                let v = crate::preopen_table(&module)?;
                let text: String = v.iter().map(|(a, w)| format!("{a} {w}\n")).collect();
                // Best effort: without it, the next process parses the module again.
                let _ = crate::cached::write_whole(&cache, text.as_bytes());
                Ok(Arc::new(v))
            })
            .clone()
            .map_err(fail)
    }

    /// Builds (or finds in the cache) the snapshot `preload` asks for now, instead of
    /// at the first run that needs it. Returns the image file, or `None` for
    /// [`crate::Preload::Nothing`].
    pub fn prepare_preload(&self, preload: &crate::Preload) -> Result<Option<PathBuf>, Error> {
        let modules = self.inner.snapshots.modules(&self.inner.flavours, preload)?;
        if modules.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.inner.snapshots.image(&self.inner.flavours, &modules)?.path.clone()))
    }

    /// Compiles (or loads from the cache) the guest for `flavour` now, instead of
    /// at the first run that needs it. Returns the cache file.
    pub fn prepare(&self, flavour: Flavour) -> Result<PathBuf, Error> {
        let f = &self.inner.flavours;
        let p = f.get(flavour)?;
        Ok(engine::cache_path(f.artifacts(), f.cache_dir(), p.any_engine()))
    }

    /// The checked grants of `config` as `(host folder, guest path, writable)`; the
    /// runtime's own files (the artifacts and the compiled-guest cache, resolved as
    /// grants are) are refused to writable grants.
    pub(crate) fn grants(&self, config: &RunConfig) -> Result<Vec<(PathBuf, String, bool)>, Error> {
        Ok(config
            .check(&self.inner.own_files)?
            .into_iter()
            .map(|(host, g)| (host, g.guest_path.clone(), g.writable))
            .collect())
    }
}
