//! One run: a fresh guest runs the caller's command line to its end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::compiled::{Compiled, Lookup, Offer};
use crate::control::ControlState;
use crate::config::WORKDIR;
use crate::engine::Flavoured;
use crate::fork::Origin;
use crate::guest::{ARGV0, Guest, OpenFiles, guest_env, program_status, py_str};
use crate::standby::{self, Done, Job, ReportTo, SERVE, Taken, Waiting};
use wasi_python_sched::wake::Pinned;
use crate::{Artifacts, CancelToken, Completed, Error, RunConfig, Runtime};

/// With our guest package, the `run` export is given this one-line program: it puts
/// the package first on sys.path and calls `_wasi_python_boot.main`, which runs the
/// caller's command line and ends without CPython's 20 ms teardown (see
/// guest/_wasi_python_boot.py). `{PATH}` is the package's folder.
const BOOT: &str = "import sys, os; sys.path.insert(0, {PATH}); os.chdir({WORK}); import _wasi_python_boot; _wasi_python_boot.main()";

impl Runtime {
    /// Runs one guest program to its end and returns how it ended.
    ///
    /// `Err` only for what is wrong before the guest starts (bad settings, grants,
    /// missing artifacts); whatever the guest does is an `Ok(Completed)`.
    pub fn run(&self, config: RunConfig) -> Result<Completed, Error> {
        self.start(config)?.wait()
    }

    /// Starts a run on its own guest thread and returns at once. For a caller that waits
    /// for the end next ([`RunHandle::wait`]): the guest thread is woken on its CPU
    /// (sched's wake.rs).
    pub fn start(&self, config: RunConfig) -> Result<RunHandle, Error> {
        let cancel = config.cancel.clone();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let then = move |result| {
            let _ = tx.send(result);
        };
        // Where this caller waits: the run's thread is woken there, and, back to back,
        // leaves it once the result is out (sched's wake.rs).
        let launcher = self.launcher();
        let cpu = launcher.back_to_back(wasi_python_sched::wake::this_cpu());
        self.start_with(config, Box::new(then), true, cpu)?;
        Ok(RunHandle { rx: parking_lot::Mutex::new(rx), cancel, cpu, pin: launcher.policy.pin_caller })
    }

    /// Starts a run on its own guest thread and returns at once; `then` gets its end, on
    /// the guest thread, once (an `Err` only for a failure before the guest ran). `Err`
    /// here, and no call of `then`, for what is wrong before the run starts.
    pub fn start_then(
        &self,
        config: RunConfig,
        then: impl FnOnce(Result<Completed, Error>) + Send + 'static,
    ) -> Result<(), Error> {
        self.start_with(config, Box::new(then), false, None)
    }

    /// [`Runtime::start_then`]; `pull`: the caller waits for the end next, so the thread
    /// that takes the run is woken on the caller's CPU; `away`: that CPU, which the thread
    /// leaves once the result is out, for runs back to back (sched's wake.rs).
    fn start_with(&self, config: RunConfig, then: Then, pull: bool, away: Option<usize>) -> Result<(), Error> {
        let grants = self.grants(&config)?;
        self.launcher().lend_call_threads(&config);
        let (flavoured, origin) = self.flavour_for(&config)?;
        let (preloaded, clock) = (origin.restored(), origin.clock_start());
        // Programs compiled once per preload image (not per session snapshot: a session's
        // code may have changed what compiling does).
        let compiled = matches!(origin, Origin::Preload(..)).then(|| flavoured.compiled.clone());
        // From a session's snapshot, the program runs in the session's `__main__`, with its
        // variables (the guest package's `main`); from a preload image, in a fresh one.
        let in_main = matches!(origin, Origin::Snapshot(_));
        let launcher = self.launcher();
        let pull = pull && launcher.policy.wake_on_caller_cpu;
        let then: Arc<parking_lot::Mutex<Option<Then>>> = Arc::new(parking_lot::Mutex::new(Some(then)));
        let reporter = Reporter { then: then.clone(), _active: standby::Active::new(launcher) };
        let done: Done = Box::new(move |result| reporter.report(result));
        let report = ReportTo { done, cpu: away, launcher: launcher.clone() };
        // A run that could take a guest on standby leaves one behind on its thread, once
        // its result is out and its instance dropped: the next run's, made off its path
        // (or, back to back, a primed instance).
        let policy = &launcher.policy;
        let standby = ((policy.standby || policy.primed) && takes_standby(&config, &origin))
            .then(|| Standby { flavoured: flavoured.clone(), clock, memory_bytes: config.limits.memory_bytes });
        let mut go = None;
        let (config, report) = match &standby {
            Some(_) if flavoured.standby.any_waiting() => {
                let started = Instant::now();
                let deadline = config.limits.deadline.and_then(|d| started.checked_add(d));
                let (spec, offer) = go_spec(&config, compiled.as_ref(), in_main);
                let job = Box::new(Job { spec, offer, started, deadline, config, report });
                match flavoured.standby.offer(job, pull) {
                    Ok(()) => return Ok(()),
                    Err(job) => {
                        let Job { spec, offer, config, report, .. } = *job;
                        go = Some((spec, offer));
                        (config, report)
                    }
                }
            }
            _ => (config, report),
        };
        // A run from a snapshot asks for its spec with its first door call (`GO_TURN`).
        let go = preloaded.then(|| go.unwrap_or_else(|| go_spec(&config, compiled.as_ref(), in_main)));
        let artifacts = self.artifacts().clone();
        launcher.run_on_guest_thread(
            move || {
                let caller = report.cpu;
                run_on_this_thread(&flavoured, &artifacts, config, grants, go, clock, report);
                if let Some(s) = standby {
                    s.serve(&artifacts, caller);
                }
            },
            pull,
        )
        .map_err(|e| {
            // No thread: `then` is not called (the dropped `done` finds it taken).
            then.lock().take();
            Error::io("spawning the guest thread", e)
        })
    }
}

type Then = Box<dyn FnOnce(Result<Completed, Error>) + Send>;

/// Reports a run's end to `then` once: with the end, or, should the guest thread drop it
/// unreported (a panic), with an internal error, so no caller waits forever.
struct Reporter {
    then: Arc<parking_lot::Mutex<Option<Then>>>,
    /// Counts the run in progress until it is reported (standby.rs).
    _active: standby::Active,
}

impl Reporter {
    fn report(self, result: Result<Completed, Error>) {
        let then = self.then.lock().take();
        drop(self);
        if let Some(then) = then {
            then(result);
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        if let Some(then) = self.then.lock().take() {
            then(Err(Error::Internal("the guest thread died".into())));
        }
    }
}

/// What a guest on standby is made from: the flavour and image of the run that left it,
/// its clock, and that run's memory limit (a run takes it only if its own memory limit
/// holds what the guest's memory has grown to).
struct Standby {
    flavoured: Arc<Flavoured>,
    clock: u64,
    memory_bytes: u64,
}

impl Standby {
    /// On this guest thread: makes a guest on standby unless one is being made or
    /// waits or other runs are in progress, and, each time a run took it, the next one.
    /// Each is made on `caller`'s CPU, that of the caller whose run ended last (if it
    /// waited for it): the run that takes the guest is woken there, and finds there the
    /// caches its making and its warm-ups warmed (sched's wake.rs).
    ///
    /// Back to back (`caller` given), while the next run is in progress, it primes an
    /// instance instead, here, off the caller's CPU: that run's successor takes it, and
    /// skips the store's and the instance's making (about 26 us of its path).
    fn serve(&self, artifacts: &Artifacts, mut caller: Option<usize>) {
        let ready = &self.flavoured.standby;
        loop {
            let runs_idle = ready.launcher.runs_idle();
            let next = if runs_idle && ready.claim_making() {
                wasi_python_sched::wake::move_to(caller);
                standby_on_this_thread(&self.flavoured, artifacts, self.clock, self.memory_bytes)
            } else if caller.is_some() && !runs_idle && ready.claim_priming() {
                primed_on_this_thread(&self.flavoured, artifacts, self.clock, self.memory_bytes)
            } else {
                return;
            };
            match next {
                Some(next) => caller = next,
                None => return,
            }
        }
    }
}

/// Whether a run can take a guest on standby: one from a preload image, with the
/// plain engine, no grants or mounts and the default working folder (standby.rs).
fn takes_standby(config: &RunConfig, origin: &Origin) -> bool {
    matches!(origin, Origin::Preload(..))
        && config.limits.fuel.is_none()
        && config.grants.is_empty()
        && config.mounts.is_empty()
        && config.workdir_path() == WORKDIR
}

/// `_wasi_python_boot.go`'s spec: what the run's compiled program is (compiled.rs: empty
/// if not the cache's, `0` if asked for, else the length of the marshalled code that ends
/// the spec), or [`IN_MAIN`] (`in_main`: a run from a session's snapshot, never the
/// cache's), the working folder, the argument count, the arguments, the environment's
/// names and values, NUL-separated (none holds a NUL: the config refuses it); then the
/// code, if any. With the offer to take, should the program be asked for.
fn go_spec(config: &RunConfig, compiled: Option<&Arc<Compiled>>, in_main: bool) -> (Vec<u8>, Option<Offer>) {
    let program = match (&config.argv[..], compiled) {
        ([c, source, ..], Some(compiled)) if c == "-c" && config.limits.fuel.is_none() && !in_main => {
            compiled.lookup(source)
        }
        _ => Lookup::Skip,
    };
    let (head, code, offer) = match program {
        Lookup::Skip if in_main => (IN_MAIN.to_owned(), None, None),
        Lookup::Skip => (String::new(), None, None),
        Lookup::Found(code) => (code.len().to_string(), Some(code), None),
        Lookup::Wanted(offer) => ("0".to_owned(), None, Some(offer)),
    };
    let env = guest_env(config);
    let argc = config.argv.len().to_string();
    let mut parts: Vec<&str> = vec![&head, config.workdir_path(), &argc];
    parts.extend(config.argv.iter().map(String::as_str));
    parts.extend(env.iter().flat_map(|(k, v)| [k.as_str(), v.as_str()]));
    let mut spec = parts.join("\0").into_bytes();
    if let Some(code) = code {
        spec.extend_from_slice(&code);
    }
    (spec, offer)
}

/// The spec's head for a run from a session's snapshot: its program runs in the
/// snapshot's `__main__`, whose variables the session made (`_wasi_python_boot._IN_MAIN`),
/// where a run from a preload image gets a fresh one.
const IN_MAIN: &str = "m";

/// A guest on standby: made, prepared by the guest package's `serve`, waiting in its
/// door call for a run (standby.rs); then that run's program, its ending reported as
/// a fresh run's. `Some` if a run took it, with the CPU its caller waited on (if it did).
fn standby_on_this_thread(
    flavoured: &Flavoured,
    artifacts: &Artifacts,
    clock: u64,
    memory_bytes: u64,
) -> Option<Option<usize>> {
    let mut config = RunConfig::new(Vec::<String>::new());
    config.limits.memory_bytes = memory_bytes;
    let (prepared, slot) = match flavoured.pick() {
        Ok(picked) => picked,
        Err(_) => {
            flavoured.standby.failed();
            return None;
        }
    };
    let Ok(mut guest) = Guest::new(prepared, &flavoured.standby.launcher, artifacts, &config, &[], &[], clock) else {
        flavoured.standby.failed();
        return None;
    };
    let taken = Arc::new(parking_lot::Mutex::new(None));
    guest.store.data_mut().control = ControlState::standby(Box::new(Waiting::new(
        flavoured.standby.clone(),
        guest.stdin.clone(),
        guest.stdout.clone(),
        guest.stderr.clone(),
        taken.clone(),
    )));
    // No ticker while it waits: its run starts one (control.rs, `standby`).
    guest.ticks = false;
    let limits = &config.limits;
    let ending = guest.call(
        None,
        |g| {
            g.arm(None, None, limits.output_bytes, &config.cancel)?;
            g.instantiate(prepared)?;
            g.call_turn(SERVE)
        },
        program_status,
    );
    let Some(taken) = taken.lock().take() else {
        // Ended before a run took it: retired, idle too long, or failed (then no
        // guest is made again for this image).
        if guest.store.data().control.on_standby() {
            flavoured.standby.failed();
        }
        return None;
    };
    Some(end_made_ahead(guest, slot, ending, taken))
}

/// The end of a run served by a guest made before it came (on standby, or primed): reported
/// to its caller, then the instance dropped and the slot freed while the thread holds
/// [`Finishing`](wasi_python_sched::Finishing). The CPU its caller waited on, if it did.
fn end_made_ahead(mut guest: Guest, slot: crate::engine::Slot, ending: crate::guest::Ending, taken: Taken) -> Option<usize> {
    let Taken { started, tools, report } = taken;
    guest.tools = tools;
    let caller = report.cpu;
    let finishing = report.report(Ok(guest.complete(ending, started, OpenFiles::Flush)));
    drop(guest);
    drop(slot);
    drop(finishing);
    caller
}

/// A primed instance: a store and an instance made (its memory from the image, its
/// `_initialize` run), nothing of the guest entered, waiting up to
/// the launch policy's `primed_for` for a run; then that run's `go` turn, as a fresh run's. `Some`
/// if a run took it, with the CPU its caller waited on (if it did).
fn primed_on_this_thread(
    flavoured: &Flavoured,
    artifacts: &Artifacts,
    clock: u64,
    memory_bytes: u64,
) -> Option<Option<usize>> {
    let ready = &flavoured.standby;
    let mut config = RunConfig::new(Vec::<String>::new());
    config.limits.memory_bytes = memory_bytes;
    let made = flavoured.pick().ok().and_then(|(prepared, slot)| {
        let mut guest = Guest::new(prepared, &flavoured.standby.launcher, artifacts, &config, &[], &[], clock).ok()?;
        guest.arm(None, None, config.limits.output_bytes, &config.cancel).ok()?;
        guest.instantiate(prepared).ok()?;
        Some((guest, slot))
    });
    let Some((mut guest, slot)) = made else {
        ready.unprime();
        return None;
    };
    let memory_now = guest.store.data().memory.map_or(u64::MAX, |m| m.data_size(&guest.store) as u64);
    let job = ready.wait_primed(memory_now)?;
    let (stdin, stdout, stderr) = (guest.stdin.clone(), guest.stdout.clone(), guest.stderr.clone());
    let (spec, offer, taken) = standby::take_job(guest.store.data_mut(), &stdin, &stdout, &stderr, job);
    guest.store.data_mut().control = ControlState::go(spec, offer);
    let ending = guest.call(
        None,
        |g| {
            g.store.set_epoch_deadline(1);
            g.call_turn(GO_TURN)
        },
        program_status,
    );
    Some(end_made_ahead(guest, slot, ending, taken))
}

/// A run in progress.
#[derive(Debug)]
pub struct RunHandle {
    rx: parking_lot::Mutex<std::sync::mpsc::Receiver<Result<Completed, Error>>>,
    cancel: CancelToken,
    /// Back to back: the CPU the run's thread was woken on, where the caller waits
    /// (sched's wake.rs, `Pinned`).
    cpu: Option<usize>,
    /// Whether the caller's thread waits pinned there: the launch policy's `pin_caller`.
    pin: bool,
}

impl RunHandle {
    /// Ends the run with `trapped = "cancelled"`.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }
    /// Waits for the end.
    pub fn wait(self) -> Result<Completed, Error> {
        let _pinned = Pinned::to(self.cpu, self.pin);
        self.rx.into_inner().recv().unwrap_or_else(|_| Err(Error::Internal("the guest thread died".into())))
    }
    /// Waits up to `timeout`; `None` if the run goes on.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<Completed, Error>> {
        let _pinned = Pinned::to(self.cpu, self.pin);
        match self.rx.lock().recv_timeout(timeout) {
            Ok(r) => Some(r),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Some(Err(Error::Internal("the guest thread died".into())))
            }
        }
    }
}

/// A fresh run's turn from a snapshot: the guest package's `_run_turn` answers this text
/// by calling `go()`, which asks the host for the command line with
/// [`GO_FRAME`](crate::control::GO_FRAME), answered from the store's control state. The text is
/// fixed, so the guest compiles nothing for it; should the package's `_run_turn` not be
/// installed, the expression does the same.
const GO_TURN: &str = "__import__('_wasi_python_boot').go()";

/// What the guest is asked to run: the `run` export's command line, or (from a
/// snapshot, where the reactor refuses `run` after the build's turns) a turn's code.
enum Program {
    Run(Vec<String>),
    Turn(String),
}

fn program(artifacts: &Artifacts, config: &RunConfig, preloaded: bool) -> Program {
    if preloaded {
        return Program::Turn(GO_TURN.to_owned());
    }
    let mut args = Vec::with_capacity(config.argv.len() + 3);
    args.push(ARGV0.to_owned());
    if let Some(p) = artifacts.guest_path() {
        args.push("-c".to_owned());
        args.push(BOOT.replace("{PATH}", &py_str(p)).replace("{WORK}", &py_str(config.workdir_path())));
    }
    // Without our package: the caller's command line as is, finalised by the export.
    args.extend(config.argv.iter().cloned());
    Program::Run(args)
}

/// A fresh run on this guest thread. `go`: from a snapshot, the spec its guest asks for
/// with its first door call, and the offer of its compiled program (compiled.rs).
fn run_on_this_thread(
    flavoured: &Flavoured,
    artifacts: &Artifacts,
    config: RunConfig,
    grants: Vec<(std::path::PathBuf, String, bool)>,
    go: Option<(Vec<u8>, Option<Offer>)>,
    clock: u64,
    report: ReportTo,
) {
    let started = Instant::now();
    let program = program(artifacts, &config, go.is_some());
    let args = match &program {
        Program::Run(args) => args.as_slice(),
        Program::Turn(_) => &[][..],
    };
    // The slot is dropped after the guest, at the end.
    let (prepared, slot) = match flavoured.pick() {
        Ok(picked) => picked,
        Err(e) => return drop(report.report(Err(e))),
    };
    let mut guest = match Guest::new(prepared, &flavoured.standby.launcher, artifacts, &config, &grants, args, clock) {
        Ok(guest) => guest,
        Err(e) => return drop(report.report(Err(e))),
    };
    if let Some((spec, offer)) = go {
        guest.store.data_mut().control = ControlState::go(spec, offer);
    }
    let limits = &config.limits;
    // A deadline past what a clock can hold is no deadline (and no panic).
    let deadline = limits.deadline.and_then(|d| started.checked_add(d));
    let ending = guest.call(
        limits.fuel,
        |g| {
            // Instantiation runs under the deadline, unmetered; the fuel cap applies
            // from the program's first instruction.
            g.arm(deadline, None, limits.output_bytes, &config.cancel)?;
            g.instantiate(prepared)?;
            if let Some((pages, patch)) = config.snapshot.as_ref().and_then(|s| s.patch()) {
                g.patch(pages, patch)?;
            }
            g.arm(deadline, limits.fuel, limits.output_bytes, &config.cancel)?;
            match &program {
                Program::Run(_) => g.call_export("run"),
                // `main` ends in os._exit; a turn that returns failed before the program
                // (its traceback is on stderr): its low byte is the status.
                Program::Turn(code) => g.call_turn(code),
            }
        },
        program_status,
    );
    // Whatever the ending, what the guest wrote to mounts and did not close reaches them.
    // Only now, with the caller holding its result, and off its CPU: resetting the
    // store's pool slot (or unmapping its memory) and removing the private folders take
    // a few tenths of a millisecond. The slot is freed after the store.
    let finishing = report.report(Ok(guest.complete(ending, started, OpenFiles::Flush)));
    drop(guest);
    drop(slot);
    drop(finishing);
}
