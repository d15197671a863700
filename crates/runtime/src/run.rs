//! One run: a fresh store, the guest's command line, and its ending named by kind.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{Store, StoreLimitsBuilder, Trap, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

use crate::engine::{self, Flavour, Flavours};
use crate::host::{GuestLimits, HostState, InitialMemoryTooLarge};
use crate::output::CappedPipe;
use crate::stop::{Stop, StopState, Ticker};
use crate::tempdir::TempDir;
use crate::files::FileState;
use crate::{Artifacts, CancelToken, Error, RunConfig};

/// The guest's `sys.executable`, fixed in the binary.
const ARGV0: &str = "/usr/local/bin/python.wasm";

/// With our guest package, the `run` export is given this one-line program: it puts
/// the package first on sys.path and calls `_wasi_python_boot.main`, which runs the
/// caller's command line and ends without CPython's 20 ms teardown (see
/// guest/_wasi_python_boot.py). `{PATH}` is the package's folder.
const BOOT: &str = "import sys, os; sys.path.insert(0, {PATH}); os.chdir({WORK}); import _wasi_python_boot; _wasi_python_boot.main()";

/// The guest's private writable working folder (and HOME), unless `workdir` puts a
/// grant there.
pub(crate) const WORKDIR: &str = "/work";

/// How a run ended when it did not end by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Trapped {
    /// The wall-clock deadline passed.
    Deadline,
    /// The fuel cap was spent.
    OutOfFuel,
    /// The run's [`CancelToken`] was cancelled.
    Cancelled,
    /// The guest exhausted its wasm stack (runaway recursion).
    StackOverflow,
    /// The guest could not get its initial memory within the memory limit.
    Memory,
    /// The guest aborted (`os.abort()`, a C `abort()`).
    Unreachable,
    /// The guest touched memory outside its own (a bad door answer, a guest bug).
    MemoryOutOfBounds,
    /// Any other trap, by wasmtime's trap code, lower-cased.
    Other(String),
}

impl Trapped {
    pub fn as_str(&self) -> &str {
        match self {
            Trapped::Deadline => "deadline",
            Trapped::OutOfFuel => "out of fuel",
            Trapped::Cancelled => "cancelled",
            Trapped::StackOverflow => "stack overflow",
            Trapped::Memory => "memory",
            Trapped::Unreachable => "unreachable",
            Trapped::MemoryOutOfBounds => "memory out of bounds",
            Trapped::Other(s) => s,
        }
    }
}

impl std::fmt::Display for Trapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which captured streams dropped bytes past the output cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Truncated {
    pub stdout: bool,
    pub stderr: bool,
}

/// The outcome of a run. Every guest behaviour ends here: an exit, an exception,
/// a trap, an exhausted limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    /// The exit status (0..=255), or `None` when the run trapped.
    pub exit_code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub trapped: Option<Trapped>,
    pub truncated: Truncated,
    /// Fuel spent, when the run was metered.
    pub fuel_used: Option<u64>,
    /// Bytes the guest wrote to files (`/tmp`, its working folder, writable grants), the
    /// growth of files it extended included; what [`crate::Limits::file_write_bytes`] caps.
    pub file_bytes_written: u64,
    /// What the run's mounts did; `None` without mounts.
    pub files: Option<crate::mounts::FileRecord>,
    pub duration: Duration,
}

/// Runs guests: one compiled module per flavour, one fresh store per run.
///
/// Cheap to clone and safe to share across threads; runs proceed in parallel.
#[derive(Debug, Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    artifacts: Artifacts,
    cache_dir: PathBuf,
    /// The artifacts and the cache, resolved: what no writable grant may hold.
    own_files: Vec<PathBuf>,
    flavours: Flavours,
    pooling: bool,
    snapshots: crate::snapshot::Snapshots,
}

fn own_files(artifacts: &Artifacts, cache_dir: &std::path::Path) -> Vec<PathBuf> {
    [artifacts.dir(), cache_dir]
        .into_iter()
        .map(|p| p.canonicalize().unwrap_or_else(|_| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())))
        .collect()
}

impl Runtime {
    /// A runtime over `artifacts`, caching compiled code in [`engine::default_cache_dir`].
    pub fn new(artifacts: Artifacts) -> Self {
        Self::with_cache_dir(artifacts, engine::default_cache_dir())
    }

    pub fn with_cache_dir(artifacts: Artifacts, cache_dir: impl Into<PathBuf>) -> Self {
        let cache_dir = cache_dir.into();
        Runtime {
            inner: Arc::new(Inner {
                own_files: own_files(&artifacts, &cache_dir),
                artifacts,
                cache_dir,
                flavours: Flavours::default(),
                pooling: engine::pooling_from_env(),
                snapshots: Default::default(),
            }),
        }
    }

    /// Whether to use wasmtime's pooling allocator for up to 60 live stores (more go
    /// on demand). On by default (`WASI_PYTHON_POOLING=0` turns it off for
    /// `Runtime::new`): warm runs take fewer page faults and no mmap/munmap, and
    /// parallel runs do not contend on the process's memory map. Call before the
    /// first run.
    pub fn with_pooling(self, pooling: bool) -> Self {
        let inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            artifacts: shared.artifacts.clone(),
            cache_dir: shared.cache_dir.clone(),
            own_files: shared.own_files.clone(),
            flavours: Flavours::default(),
            pooling,
            snapshots: Default::default(),
        });
        Runtime {
            inner: Arc::new(Inner { pooling, ..inner }),
        }
    }

    pub fn artifacts(&self) -> &Artifacts {
        &self.inner.artifacts
    }

    pub(crate) fn flavour(&self, flavour: Flavour) -> Result<Arc<engine::Flavoured>, Error> {
        self.inner.flavours.get(&self.inner.artifacts, &self.inner.cache_dir, flavour, self.inner.pooling)
    }

    pub(crate) fn cache_dir(&self) -> &std::path::Path {
        &self.inner.cache_dir
    }

    /// The engines a run of `config` starts from, and whether that is a snapshot with
    /// modules preloaded (then the program is started by a turn; see snapshot.rs).
    pub(crate) fn flavour_for(&self, config: &RunConfig, flavour: Flavour) -> Result<(Arc<engine::Flavoured>, bool), Error> {
        match self.inner.snapshots.flavour_for(self, config, flavour)? {
            Some(f) => Ok((f, true)),
            None => Ok((self.flavour(flavour)?, false)),
        }
    }

    /// Builds (or finds in the cache) the snapshot preloading `modules` now, instead of
    /// at the first run that needs it. Returns the image file.
    pub fn prepare_preload(&self, modules: &[String]) -> Result<PathBuf, Error> {
        let modules = crate::config::Preload::modules(modules)?;
        Ok(self.inner.snapshots.image(self, &modules)?.path.clone())
    }

    /// Compiles (or loads from the cache) the guest for `flavour` now, instead of
    /// at the first run that needs it. Returns the cache file.
    pub fn prepare(&self, flavour: Flavour) -> Result<PathBuf, Error> {
        let p = self.inner.flavours.get(&self.inner.artifacts, &self.inner.cache_dir, flavour, self.inner.pooling)?;
        Ok(engine::cache_path(&self.inner.artifacts, &self.inner.cache_dir, p.any_engine()))
    }

    /// The runtime's own files, which no writable grant may hold: the artifacts and
    /// the compiled-guest cache (resolved, as grants are).
    pub(crate) fn own_files(&self) -> &[PathBuf] {
        &self.inner.own_files
    }

    /// Runs one guest program to its end and returns how it ended.
    ///
    /// `Err` only for what is wrong before the guest starts (bad settings, grants,
    /// missing artifacts); whatever the guest does is an `Ok(Completed)`.
    pub fn run(&self, config: RunConfig) -> Result<Completed, Error> {
        self.start(config)?.wait()
    }

    /// Starts a run on its own guest thread and returns at once.
    pub fn start(&self, config: RunConfig) -> Result<RunHandle, Error> {
        let grants = config
            .check(self.own_files())?
            .into_iter()
            .map(|(host, g)| (host, g.guest_path.clone(), g.writable))
            .collect::<Vec<_>>();
        let flavour = if config.limits.fuel.is_some() {
            Flavour::Metered
        } else {
            Flavour::Plain
        };
        let (prepared, preloaded) = self.flavour_for(&config, flavour)?;
        let artifacts = self.inner.artifacts.clone();
        let cancel = config.cancel.clone();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        crate::threads::run_on_guest_thread(move || {
            run_on_this_thread(&prepared, &artifacts, config, grants, preloaded, |result| {
                let _ = tx.send(result);
            });
        })
            .map_err(|e| Error::io("spawning the guest thread", e))?;
        Ok(RunHandle {
            rx: parking_lot::Mutex::new(rx),
            cancel,
        })
    }
}

/// A run in progress.
#[derive(Debug)]
pub struct RunHandle {
    rx: parking_lot::Mutex<std::sync::mpsc::Receiver<Result<Completed, Error>>>,
    cancel: CancelToken,
}

impl RunHandle {
    /// Ends the run with `trapped = "cancelled"`.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }
    /// Waits for the end.
    pub fn wait(self) -> Result<Completed, Error> {
        self.rx
            .into_inner()
            .recv()
            .unwrap_or_else(|_| Err(Error::Internal("the guest thread died".into())))
    }
    /// Waits up to `timeout`; `None` if the run goes on.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<Completed, Error>> {
        match self.rx.lock().recv_timeout(timeout) {
            Ok(r) => Some(r),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Some(Err(Error::Internal("the guest thread died".into())))
            }
        }
    }
}

/// A store ready to instantiate, with what the host keeps of it.
pub(crate) struct Guest {
    pub(crate) store: Store<HostState>,
    pub(crate) stdout: CappedPipe,
    pub(crate) stderr: CappedPipe,
    pub(crate) _tmp: TempDir,
}

/// The guest's environment: HOME, TMPDIR and an empty PYTHONTZPATH, then the
/// caller's variables (later ones win), sorted.
pub(crate) fn guest_env(config: &RunConfig) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("HOME".into(), config.workdir_path().to_owned()),
        ("PYTHONTZPATH".into(), String::new()),
        ("TMPDIR".into(), "/tmp".into()),
    ];
    for (k, v) in &config.env {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    env.sort();
    env
}

/// A Python string literal of `s`: JSON's escapes are all valid in Python.
pub(crate) fn py_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string always serialises")
}

/// A Python dict literal of the environment.
pub(crate) fn py_env(env: &[(String, String)]) -> String {
    let items: Vec<String> = env.iter().map(|(k, v)| format!("{}: {}", py_str(k), py_str(v))).collect();
    format!("{{{}}}", items.join(", "))
}

/// Builds the store for one run or session: WASI (argv, env, stdin, capped output,
/// the stdlib, matplotlib's data, a private /tmp, the grants), limits, the epoch
/// callback and the door.
#[expect(clippy::too_many_arguments, reason = "a store's inputs, which runs and sessions set differently")]
pub(crate) fn new_guest(
    prepared: &engine::Prepared,
    artifacts: &Artifacts,
    config: &RunConfig,
    grants: &[(PathBuf, String, bool)],
    args: &[String],
    stdin: Vec<u8>,
    deadline: Option<Instant>,
    mono_start: u64,
) -> Result<Guest, Error> {
    let tmp = TempDir::new()?;
    let limits = &config.limits;
    let stdout = CappedPipe::new(limits.output_bytes);
    let stderr = CappedPipe::new(limits.output_bytes);

    let env = guest_env(config);
    let mono_origin = Instant::now();
    let mut b = WasiCtxBuilder::new();
    b.allow_blocking_current_thread(true);
    b.monotonic_clock(crate::host::GuestClock { origin: mono_origin, start: mono_start });
    b.args(args)
        .envs(&env)
        .stdin(MemoryInputPipe::new(bytes::Bytes::from(stdin)))
        .stdout(stdout.clone())
        .stderr(stderr.clone());
    let preopen = |b: &mut WasiCtxBuilder, host: &std::path::Path, guest: &str, perms| {
        b.preopened_dir(host, guest, perms)
            .map(|_| ())
            .map_err(|e| Error::Io {
                context: format!("opening {} for the guest", host.display()),
                source: std::io::Error::other(format!("{e:#}")),
            })
    };
    preopen(&mut b, artifacts.stdlib_dir(), "/usr/local/lib", FsPerms::ReadOnly)?;
    if let Some(mpl) = artifacts.mpl_data() {
        let guest = format!("/usr/local/lib/{}/matplotlib/mpl-data", artifacts.stdlib_name());
        preopen(&mut b, mpl, &guest, FsPerms::ReadOnly)?;
    }
    // Preopens are numbered from 3 in this order; a mount's number routes its calls.
    let mut preopens = 1 + u32::from(artifacts.mpl_data().is_some());
    preopen(&mut b, &tmp.tmp(), "/tmp", FsPerms::ReadWrite)?;
    preopens += 1;
    let work_taken = grants.iter().any(|(_, guest, _)| guest == WORKDIR) || config.mounts.iter().any(|m| m.guest_path == WORKDIR);
    if !work_taken {
        preopen(&mut b, &tmp.work(), WORKDIR, FsPerms::ReadWrite)?;
        preopens += 1;
    }
    for (host, guest, writable) in grants {
        let perms = if *writable { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
        preopen(&mut b, host, guest, perms)?;
        preopens += 1;
    }
    let mut mounted = Vec::with_capacity(config.mounts.len());
    if !config.mounts.is_empty() {
        let empty = tmp.empty()?;
        for m in &config.mounts {
            preopen(&mut b, &empty, &m.guest_path, FsPerms::ReadOnly)?;
            mounted.push((m.clone(), 3 + preopens));
            preopens += 1;
        }
    }
    let wasi = b.build_p1();

    let state = HostState {
        wasi,
        limits: GuestLimits(
            StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes as usize)
                .instances(1)
                .memories(1)
                .tables(1)
                .build(),
        ),
        stop: StopState {
            deadline,
            cancel: config.cancel.clone(),
        },
        door: config.door.clone(),
        files: FileState::new(limits.file_write_bytes, limits.max_open_files),
        mounts: (!mounted.is_empty()).then(|| Box::new(crate::mounts::MountTable::new(mounted, limits.max_file_calls, limits.memory_bytes))),
        memory: None,
        alloc: None,
        mono_origin,
        mono_start,
    };
    let mut store = Store::new(&prepared.engine, state);
    store.limiter(|s| &mut s.limits);
    if limits.fuel.is_some() {
        // Instantiation may be charged; the cap applies from the first guest code on.
        store
            .set_fuel(u64::MAX)
            .map_err(|e| Error::Internal(format!("{e:#}")))?;
    }
    store.epoch_deadline_callback(|ctx| match ctx.data().stop.check() {
        Some(stop) => Err(wasmtime::Error::new(stop)),
        None => Ok(UpdateDeadline::Continue(1)),
    });
    store.set_epoch_deadline(1);
    Ok(Guest {
        store,
        stdout,
        stderr,
        _tmp: tmp,
    })
}

/// Instantiates, and keeps the memory and allocator the door needs.
pub(crate) fn instantiate(
    prepared: &engine::Prepared,
    store: &mut Store<HostState>,
) -> wasmtime::Result<wasmtime::Instance> {
    let instance = prepared.pre.instantiate(&mut *store)?;
    let memory = instance.get_memory(&mut *store, "memory");
    let alloc = instance.get_typed_func::<i32, i32>(&mut *store, "host_alloc").ok();
    store.data_mut().memory = memory;
    store.data_mut().alloc = alloc;
    if let Ok(init) = instance.get_typed_func::<(), ()>(&mut *store, "_initialize") {
        init.call(&mut *store, ())?;
    }
    Ok(instance)
}

fn run_on_this_thread(
    flavoured: &engine::Flavoured,
    artifacts: &Artifacts,
    config: RunConfig,
    grants: Vec<(PathBuf, String, bool)>,
    preloaded: bool,
    done: impl FnOnce(Result<Completed, Error>),
) {
    let started = Instant::now();
    let mut args = Vec::with_capacity(config.argv.len() + 3);
    args.push(ARGV0.to_owned());
    // From a snapshot, the `run` export is refused (the build ran turns): a turn
    // runs the command line instead, passed in its code.
    let turn_code = preloaded.then(|| {
        let argv: Vec<String> = config.argv.iter().map(|a| py_str(a)).collect();
        format!(
            "__import__('_wasi_python_boot').main([{}], {}, {})",
            argv.join(", "),
            py_env(&guest_env(&config)),
            py_str(config.workdir_path())
        )
    });
    if preloaded {
        // The argv is in the turn's code.
    } else if let Some(p) = artifacts.guest_path() {
        args.push("-c".to_owned());
        args.push(
            BOOT.replace("{PATH}", &py_str(p))
                .replace("{WORK}", &py_str(config.workdir_path())),
        );
    }
    // Without our package: the caller's command line as is, finalised by the export.
    if !preloaded {
        args.extend(config.argv.iter().cloned());
    }
    let deadline = config.limits.deadline.map(|d| started + d);
    let stdin = config.stdin.clone();
    // The slot is dropped after the store, at the end.
    let (prepared, slot) = match flavoured.pick() {
        Ok(picked) => picked,
        Err(e) => return done(Err(e)),
    };
    let Guest { mut store, stdout, stderr, _tmp: tmp } =
        match new_guest(prepared, artifacts, &config, &grants, &args, stdin, deadline, crate::host::GUEST_CLOCK_START) {
            Ok(guest) => guest,
            Err(e) => return done(Err(e)),
        };
    let _ticking = Ticker::global().activate(&prepared.engine);
    let fuel = config.limits.fuel;
    let outcome = (|| -> wasmtime::Result<i32> {
        let instance = instantiate(prepared, &mut store)?;
        if let Some(fuel) = fuel {
            store.set_fuel(fuel)?;
        }
        if let Some(code) = &turn_code {
            let alloc = instance.get_typed_func::<i32, i32>(&mut store, "host_alloc")?;
            let turn = instance.get_typed_func::<(i32, i32), i32>(&mut store, "turn")?;
            // `main` ends in os._exit; a turn that returns failed before the program
            // (its traceback is on stderr): its low byte is the status.
            return crate::session::call_turn(&mut store, &alloc, &turn, code).map(|v| v & 0xff);
        }
        let run = instance.get_typed_func::<(), i32>(&mut store, "run")?;
        run.call(&mut store, ())
    })();
    let fuel_used = match (fuel, store.get_fuel()) {
        (Some(cap), Ok(left)) => Some(cap.saturating_sub(left)),
        _ => None,
    };
    let (exit_code, trapped) = match outcome {
        Ok(code) => (Some(exit_status(code)), None),
        Err(e) => classify(&e),
    };
    // Whatever the ending, what the guest wrote to mounts and did not close reaches them.
    let files = store.data_mut().mounts.as_deref_mut().map(|t| {
        t.flush_all();
        std::mem::take(&mut t.record)
    });
    let (stdout, out_t) = stdout.take();
    let (stderr, err_t) = stderr.take();
    let file_bytes_written = store.data().files.written();
    done(Ok(Completed {
        exit_code,
        stdout,
        stderr,
        trapped,
        truncated: Truncated {
            stdout: out_t,
            stderr: err_t,
        },
        fuel_used,
        file_bytes_written,
        files,
        duration: started.elapsed(),
    }));
    // Only now, with the caller holding its result: resetting the store's pool slot
    // (or unmapping its memory) and removing the private /tmp take a few tenths of a
    // millisecond. The slot is freed after the store.
    drop(store);
    drop(slot);
    drop(tmp);
}

/// What a POSIX parent would read from `exit(code)`: the status modulo 256, so
/// `os._exit(-1)` is 255, never a negative code (which Python reads as "killed by a signal").
pub(crate) fn exit_status(code: i32) -> i32 {
    code.rem_euclid(256)
}

/// Names an error out of the guest by kind: an exit status, or a trap.
pub(crate) fn classify(e: &wasmtime::Error) -> (Option<i32>, Option<Trapped>) {
    if let Some(exit) = e.downcast_ref::<I32Exit>() {
        return (Some(exit_status(exit.0)), None);
    }
    if let Some(stop) = e.downcast_ref::<Stop>() {
        return (
            None,
            Some(match stop {
                Stop::Deadline => Trapped::Deadline,
                Stop::Cancelled => Trapped::Cancelled,
            }),
        );
    }
    if let Some(trap) = e.downcast_ref::<Trap>() {
        let t = match trap {
            Trap::OutOfFuel => Trapped::OutOfFuel,
            Trap::Interrupt => Trapped::Deadline,
            Trap::StackOverflow => Trapped::StackOverflow,
            Trap::UnreachableCodeReached => Trapped::Unreachable,
            Trap::MemoryOutOfBounds => Trapped::MemoryOutOfBounds,
            other => Trapped::Other(trap_name(other)),
        };
        return (None, Some(t));
    }
    if e.downcast_ref::<InitialMemoryTooLarge>().is_some() {
        return (None, Some(Trapped::Memory));
    }
    let text = format!("{:#}", e.root_cause());
    let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("unknown");
    (None, Some(Trapped::Other(line.to_owned())))
}

/// `Trap::IntegerDivisionByZero` -> "integer division by zero".
fn trap_name(t: &Trap) -> String {
    let debug = format!("{t:?}");
    let mut out = String::new();
    for (i, ch) in debug.chars().enumerate() {
        if ch.is_uppercase() && i > 0 {
            out.push(' ');
        }
        out.extend(ch.to_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use wasmtime::ResourceLimiter;

    use super::*;

    fn limits(bytes: usize) -> GuestLimits {
        GuestLimits(StoreLimitsBuilder::new().memory_size(bytes).build())
    }

    #[test]
    fn an_initial_memory_over_the_limit_is_the_memory_outcome() {
        let e = limits(40 << 20).memory_growing(0, 41 << 20, None).unwrap_err();
        assert_eq!(classify(&e), (None, Some(Trapped::Memory)));
    }

    #[test]
    fn a_later_growth_over_the_limit_is_refused_not_failed() {
        let mut l = limits(40 << 20);
        assert!(l.memory_growing(0, 40 << 20, None).unwrap());
        assert!(!l.memory_growing(40 << 20, 41 << 20, None).unwrap());
    }
}
