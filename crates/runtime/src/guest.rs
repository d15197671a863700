//! One guest instance, whatever drives it: its store built from a [`RunConfig`], its
//! limits armed, the calls into it, and its ending turned into a [`Completed`]. A
//! one-shot run (run.rs), a session (session.rs) and a snapshot build (snapshot.rs)
//! all go through here, so each limit is armed in one place.
//!
//! **Invariant:** a call into the guest happens only between [`Guest::arm`] (deadline,
//! cancel, fuel, output caps) and [`Guest::complete`] (output taken, mounts settled,
//! the tool record read), with the epoch ticker running.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use wasmtime::{Store, TypedFunc, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use crate::budget::Limits as BudgetLimits;
use crate::config::WORKDIR;
use crate::engine::Prepared;
use crate::files::FileState;
use crate::host::{GuestLimits, HostState};
use crate::outcome::{Completed, Trapped, Truncated, classify, exit_status};
use crate::display::DisplayState;
use crate::output::{CappedPipe, Events, InputPipe, Stream};
use crate::CallContext;
use crate::stop::Ticker;
use crate::launch::Launcher;
use crate::tempdir::TempDir;
use crate::{Artifacts, CancelToken, Error, RunConfig, ToolDoor};

/// The guest's `sys.executable`, fixed in the binary.
pub(crate) const ARGV0: &str = "/usr/local/bin/python.wasm";

/// What becomes of the files the guest still holds open in mounts when a call ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenFiles {
    /// The instance is done (a run's end, a session's close): everything changed is
    /// handed to the providers now.
    Flush,
    /// A session turn: files stay staged; the next turn asks the providers afresh.
    Keep,
}

/// How a call into the guest came out, before it becomes a [`Completed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ending {
    pub(crate) exit_code: Option<i32>,
    pub(crate) trapped: Option<Trapped>,
    pub(crate) fuel_used: Option<u64>,
    /// The guest left through `proc_exit` (`os._exit`, or the `run` export's end): the
    /// instance can take no more calls.
    pub(crate) exited: bool,
}

/// A guest's store with what the host keeps of it.
pub(crate) struct Guest {
    pub(crate) store: Store<HostState>,
    pub(crate) stdin: InputPipe,
    pub(crate) stdout: CappedPipe,
    pub(crate) stderr: CappedPipe,
    exports: Option<Exports>,
    metered: bool,
    /// Whether [`Guest::call`] runs the epoch ticker (a guest on standby starts it when
    /// its run arrives, standby.rs).
    pub(crate) ticks: bool,
    /// The run's tool door and each turn's budget, when it offers tools: its record
    /// becomes [`Completed::tools`].
    pub(crate) tools: Option<(ToolDoor, BudgetLimits)>,
    /// The thread that made the store: the only one that calls into it or drops it. The
    /// pool's short reset (third_party/README.md) counts that thread's page faults to
    /// know the guest wrote no page it did not write before.
    home: std::thread::ThreadId,
    /// Dropped after the store (fields drop in order): the private folders go last.
    _tmp: TempDir,
}

/// The exports a turn needs, found at instantiation.
struct Exports {
    instance: wasmtime::Instance,
    turn: Option<TypedFunc<(i32, i32), i32>>,
    alloc: Option<TypedFunc<i32, i32>>,
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

impl Guest {
    /// Builds the store for one run or session: WASI (argv, env, stdin, capped output,
    /// the stdlib, matplotlib's data, a private /tmp and /work, the grants, the mounts),
    /// the memory limiter, the epoch callback and the door. Nothing is armed yet.
    /// `launcher`: the runtime's, whose call threads serve the mounts and whose kept
    /// private folders it may take (and give back, as made, when dropped).
    pub(crate) fn new(
        prepared: &Prepared,
        launcher: &Launcher,
        artifacts: &Artifacts,
        config: &RunConfig,
        grants: &[(PathBuf, String, bool)],
        args: &[String],
        inputs: impl Into<crate::fixed::Inputs>,
    ) -> Result<Guest, Error> {
        let mut tmp = TempDir::new(&launcher.folders)?;
        let limits = &config.limits;
        let stdin = InputPipe::new(config.stdin.clone());
        let stdout = CappedPipe::of(Stream::Stdout, limits.output_bytes);
        let stderr = CappedPipe::of(Stream::Stderr, limits.output_bytes);
        stdout.set_events(config.events.clone());
        stderr.set_events(config.events.clone());

        let env = guest_env(config);
        let mono_origin = Instant::now();
        let mut b = WasiCtxBuilder::new();
        b.allow_blocking_current_thread(true);
        // The host's clocks and entropy, or a preload image build's fixed ones (fixed.rs).
        let (mono_start, fixed) = inputs.into().install(&mut b, mono_origin);
        b.args(args)
            .envs(&env)
            .stdin(stdin.clone())
            .stdout(stdout.clone())
            .stderr(stderr.clone());
        let preopen = |b: &mut WasiCtxBuilder, host: &Path, guest: &str, perms| {
            b.preopened_dir(host, guest, perms).map(|_| ()).map_err(|e| Error::Io {
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
        let work_taken =
            grants.iter().any(|(_, guest, _)| guest == WORKDIR) || config.mounts.iter().any(|m| m.guest_path == WORKDIR);
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
            limits: GuestLimits::new(limits.memory_bytes),
            stop: CallContext { deadline: None, cancel: config.cancel.clone() },
            door: config.door.clone(),
            files: FileState::new(limits.file_write_bytes, limits.max_open_files),
            mounts: (!mounted.is_empty())
                .then(|| Box::new(crate::mounts::MountTable::new(
                    mounted,
                    limits.max_file_calls,
                    limits.memory_bytes,
                    launcher.call_threads.clone(),
                ))),
            memory: None,
            alloc: None,
            mono_origin,
            mono_start,
            control: Default::default(),
            displays: DisplayState::new(limits.display_bytes, config.events.clone()),
            fixed,
        };
        let metered = limits.fuel.is_some();
        let mut store = Store::new(&prepared.engine, state);
        store.limiter(|s| &mut s.limits);
        if metered {
            // Instantiation may be charged; the cap applies from the first guest code on.
            store.set_fuel(u64::MAX).map_err(|e| Error::Internal(format!("{e:#}")))?;
        }
        store.epoch_deadline_callback(|ctx| match ctx.data().stop.check() {
            Some(stop) => Err(wasmtime::Error::new(stop)),
            None => Ok(UpdateDeadline::Continue(1)),
        });
        store.set_epoch_deadline(1);
        Ok(Guest { store, stdin, stdout, stderr, exports: None, metered, ticks: true, tools: config.tools.clone(), home: std::thread::current().id(), _tmp: tmp })
    }

    /// Instantiates, keeping the memory and allocator the door needs and the `turn`
    /// export, and runs the module's `_initialize`.
    pub(crate) fn instantiate(&mut self, prepared: &Prepared) -> wasmtime::Result<()> {
        let store = &mut self.store;
        let instance = prepared.pre.instantiate(&mut *store)?;
        let memory = instance.get_memory(&mut *store, "memory");
        let alloc = instance.get_typed_func::<i32, i32>(&mut *store, "host_alloc").ok();
        let turn = instance.get_typed_func::<(i32, i32), i32>(&mut *store, "turn").ok();
        store.data_mut().memory = memory;
        store.data_mut().alloc = alloc.clone();
        self.exports = Some(Exports { instance, turn, alloc });
        if let Ok(init) = instance.get_typed_func::<(), ()>(&mut *store, "_initialize") {
            init.call(&mut *store, ())?;
        }
        Ok(())
    }

    /// Arms one call's limits: the deadline and cancel (for the epoch callback and for
    /// host work done for the guest), the fuel, and the output caps. The one place
    /// they are set.
    pub(crate) fn arm(&mut self, deadline: Option<Instant>, fuel: Option<u64>, output_bytes: usize, cancel: &CancelToken) -> wasmtime::Result<()> {
        let store = &mut self.store;
        store.data_mut().stop = CallContext { deadline, cancel: cancel.clone() };
        if let Some(events) = store.data().displays.events() {
            events.arm(CallContext { deadline, cancel: cancel.clone() });
        }
        store.set_epoch_deadline(1);
        if self.metered {
            store.set_fuel(fuel.unwrap_or(u64::MAX))?;
        }
        self.stdout.set_cap(output_bytes);
        self.stderr.set_cap(output_bytes);
        Ok(())
    }

    /// The display cap and the event queue of the call that comes (a session's turn; a
    /// run has its config's): what it keeps of its output and displays streams there.
    pub(crate) fn stream(&mut self, display_bytes: usize, events: Option<Events>) {
        self.stdout.set_events(events.clone());
        self.stderr.set_events(events.clone());
        self.store.data_mut().displays.set(display_bytes, events);
    }

    /// A session turn begins: the tool door's budget and record start afresh.
    pub(crate) fn begin_turn(&self) {
        if let Some((door, limits)) = &self.tools {
            door.next_turn(*limits);
        }
    }

    /// Runs `call` with the epoch ticker on, and names its ending: `status` maps a value
    /// the guest returned to an exit status (or a trap's name, when it is not one).
    pub(crate) fn call(
        &mut self,
        fuel: Option<u64>,
        call: impl FnOnce(&mut Guest) -> wasmtime::Result<i32>,
        status: impl FnOnce(i32) -> Result<i32, Trapped>,
    ) -> Ending {
        debug_assert_eq!(self.home, std::thread::current().id(), "a store stays on the thread that made it");
        let ticking = self.ticks.then(|| Ticker::global().activate(self.store.engine())).transpose();
        // No ticker thread could be made: the guest does not run (it would compute unticked).
        let (outcome, _ticking) = match ticking {
            Ok(ticking) => (call(self), ticking),
            Err(e) => (Err(e), None),
        };
        let fuel_used = match (self.metered, fuel, self.store.get_fuel()) {
            (true, Some(cap), Ok(left)) => Some(cap.saturating_sub(left)),
            _ => None,
        };
        let (exit_code, trapped, exited) = match outcome.map(status) {
            Ok(Ok(code)) => (Some(code), None, false),
            Ok(Err(t)) => (None, Some(t), false),
            Err(e) => {
                let (code, trapped) = classify(&e);
                (code, trapped, code.is_some())
            }
        };
        Ending { exit_code, trapped, fuel_used, exited }
    }

    /// Calls a no-argument export: `run` (the artifact's command-line runner) or
    /// `shutdown` (CPython's own finalisation).
    pub(crate) fn call_export(&mut self, name: &str) -> wasmtime::Result<i32> {
        let instance = self.exports.as_ref().expect("instantiated").instance;
        let f = instance.get_typed_func::<(), i32>(&mut self.store, name)?;
        f.call(&mut self.store, ())
    }

    /// Calls the `turn` export with `code`, written into a buffer from `host_alloc`.
    pub(crate) fn call_turn(&mut self, code: &str) -> wasmtime::Result<i32> {
        let exports = self.exports.as_ref().expect("instantiated");
        let (Some(turn), Some(alloc)) = (exports.turn.clone(), exports.alloc.clone()) else {
            return Err(wasmtime::format_err!("the guest module has no `turn` or `host_alloc` export"));
        };
        let store = &mut self.store;
        let code = code.as_bytes();
        let len = i32::try_from(code.len()).map_err(|_| wasmtime::format_err!("the turn's code is over 2 GiB"))?;
        let mut ptr = 0;
        if len > 0 {
            ptr = alloc.call(&mut *store, len)?;
            let memory = store.data().memory.expect("set at instantiation");
            let data = memory.data_mut(&mut *store);
            let start = ptr as u32 as usize;
            match data.get_mut(start..start + code.len()) {
                Some(dst) if ptr != 0 => dst.copy_from_slice(code),
                // The guest raises MemoryError for a null pointer.
                _ => ptr = 0,
            }
        }
        turn.call(&mut *store, (ptr, len))
    }

    /// The guest's whole linear memory, copied (a snapshot build).
    pub(crate) fn memory(&self) -> Option<Vec<u8>> {
        Some(self.store.data().memory?.data(&self.store).to_vec())
    }

    /// The guest's whole linear memory, borrowed (a session snapshot, fork.rs).
    pub(crate) fn memory_slice(&self) -> Option<&[u8]> {
        Some(self.store.data().memory?.data(&self.store))
    }

    /// Grows the memory to `pages` wasm pages and writes `patch` over it: a fork of a
    /// loaded snapshot, over its base image, before any guest code runs (fork.rs).
    pub(crate) fn patch(&mut self, pages: u64, patch: &wasi_python_image::Pages) -> wasmtime::Result<()> {
        let memory = self.store.data().memory.ok_or_else(|| wasmtime::format_err!("the guest has no memory"))?;
        let now = memory.size(&self.store);
        if pages > now {
            memory.grow(&mut self.store, pages - now)?;
        }
        let data = memory.data_mut(&mut self.store);
        for (n, page) in patch.iter() {
            let at = n as usize * wasi_python_image::PAGE;
            let dst = data
                .get_mut(at..at + page.len())
                .ok_or_else(|| wasmtime::format_err!("a snapshot page lies past the memory"))?;
            dst.copy_from_slice(page);
        }
        Ok(())
    }

    /// The guest's monotonic clock now, in ns.
    pub(crate) fn clock_ns(&self) -> u64 {
        let d = self.store.data();
        d.mono_start.saturating_add(d.mono_origin.elapsed().as_nanos() as u64)
    }

    /// Descriptors the guest opened and still holds.
    pub(crate) fn open_files(&self) -> usize {
        self.store.data().files.open_count()
    }

    /// Turns a call's ending into a [`Completed`]: the output so far, the mounts'
    /// record (their open files settled as `files` says), the bytes written, and the
    /// tool door's record.
    pub(crate) fn complete(&mut self, ending: Ending, started: Instant, files: OpenFiles) -> Completed {
        let data = self.store.data_mut();
        data.control.run_ended();
        let mounts = data.mounts.as_deref_mut().map(|t| {
            match files {
                // Within the grace after the deadline and cancel this call was armed with.
                OpenFiles::Flush => t.flush_all(&data.stop),
                OpenFiles::Keep => t.forget_all_cached(),
            }
            std::mem::take(&mut t.record)
        });
        let shown = data.displays.take();
        let (stdout, out_t) = self.stdout.take();
        let (stderr, err_t) = self.stderr.take();
        // The guest is out: its stream ends, before the caller gets the end.
        self.stdout.set_events(None);
        self.stderr.set_events(None);
        let dropped = shown.events.is_some_and(|events| {
            events.end();
            events.dropped() > 0
        });
        Completed {
            exit_code: ending.exit_code,
            stdout,
            stderr,
            trapped: ending.trapped,
            truncated: Truncated { stdout: out_t, stderr: err_t, displays: shown.cut, stream: dropped },
            fuel_used: ending.fuel_used,
            file_bytes_written: self.store.data().files.written(),
            files: mounts,
            tools: self.tools.as_ref().map(|(door, _)| door.record()),
            duration: started.elapsed(),
            displays: shown.list,
            bad_displays: shown.bad,
        }
    }

    /// Hands what the guest wrote to its mounts and did not close to the providers
    /// (a session that ends without a closing turn), within the grace after its last
    /// turn's deadline and cancel.
    pub(crate) fn flush_mounts(&mut self) {
        let data = self.store.data_mut();
        if let Some(t) = data.mounts.as_deref_mut() {
            t.flush_all(&data.stop);
        }
    }
}

/// The status of a `run` export or a program run by a turn: the low byte, as a POSIX
/// parent reads it.
pub(crate) fn program_status(v: i32) -> Result<i32, Trapped> {
    Ok(exit_status(v))
}

/// The code of a session's hidden first turn (and a snapshot build's): our guest
/// package first on sys.path, its bundle's finder installed
/// (guest/_wasi_python_boot.py), and the turn counter reset so the caller's first turn
/// is `<turn 1>`. It binds no names.
pub(crate) fn setup_code(path: Option<&str>, workdir: &str) -> String {
    let mut s = format!("__import__('os').chdir({})\n", py_str(workdir));
    if let Some(p) = path {
        s.push_str(&format!("__import__('sys').path.insert(0, {})\n", py_str(p)));
        s.push_str("__import__('_wasi_python_boot').install()\n");
    }
    s.push_str("__import__('_reactor')._turns = 0\n");
    s
}

/// How long a hidden setup turn may take.
pub(crate) const SETUP_DEADLINE: Duration = Duration::from_secs(30);
