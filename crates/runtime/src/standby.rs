//! Guests on standby: a fresh run's instance made before the run asks for it.
//!
//! Most of a fresh run from a preload image is the same whatever the run: the store
//! and its WASI context, the instance, the guest package's `restore`, the random
//! generators reseeded, and compiling the turn that starts the program. A guest on
//! standby does all of that on a guest thread of its own, then waits *inside* its one
//! door call (`_wasi_python_boot.serve`, whose first `host.call` sends
//! [`STANDBY_FRAME`](crate::control::STANDBY_FRAME)). A run that takes it sends a [`Job`]: its limits, stdin, tools
//! and cancel are set on the store there, its command line is the call's answer, and
//! only the program and its ending are left on the run's path.
//!
//! Which runs: fresh runs from a preload image with the plain engine, no grants, no
//! mounts and the default working folder (runs with anything else start as before).
//! One guest waits per preload image at most. A run that could have taken one makes
//! the next on its own guest thread once its result is out and its instance dropped,
//! and only when no other fresh run is in progress, so the making stays off the runs'
//! path (under a steady load of runs, none is made), and only once the runtime has
//! started the launch policy's `standby_after` fresh runs (its second): a process that
//! makes one run, then exits, makes no guest it would never use (its CPU, and an exit
//! that waited for the making). The first eligible run of an image after that makes the
//! first, and the thread of a guest that served a run makes the next. It costs what an
//! idle instance costs (a pool slot, the pages its preparation wrote, and a thread)
//! and ends after the launch policy's `standby_idle` without a run, or when the runtime
//! retires (`Launcher::retire`: dropped, or the process exiting).
//!
//! While it waits, the guest runs its warm-up again every `warm_every` (the door call
//! answers [`WARM_ANSWER`](crate::control::WARM_ANSWER), and the guest asks again after it): after a pause, a run
//! otherwise found the machine's caches cold, every step of it two to three times slower.
//! A run 100 ms or 1 s after the last took 750-890 µs at `run()`, and 430-550 µs with the
//! warm-ups (docs/dev/perf-log/). Each costs about 0.25 ms of CPU: 1.2 % of a
//! core while a guest waits, which it does for at most `standby_idle` after the last run.
//! Only the guest of the image made last warms up (the launcher's `latest`): one per
//! runtime.
//!
//! Runs back to back get no guest on standby (each starts while the last one's thread is
//! still finishing), so there a thread that finished a run back to back, while the next
//! run is in progress, primes an instance instead: its store and instance made (what a
//! fresh run does before it enters the guest), waiting in Rust, not in the guest, for
//! the policy's `primed_for` on a second list ([`Ready::wait_primed`]; at most one per image). A run
//! offered to neither list's guest starts fresh. Taken, it gets the job as a guest on
//! standby does ([`take_job`]) and starts the guest with the fresh run's `go` turn: the
//! same guest work as a fresh run, minus the 26 us of making on the run's path (runs of
//! `print(1)` back to back: 204-210 -> 173-178 us, docs/dev/perf-log/).
//!
//! **Invariant:** nothing of the standby or the primed instance reaches the run but what
//! a fresh instance would hold: its output before the run is dropped, it opened no file,
//! and the run's limits, door and stdin replace its own before the guest runs the
//! program. A guest is offered only once it waits, so a failure before that loses no
//! run.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use crate::budget::Limits as BudgetLimits;
use crate::files::FileState;
use crate::host::{GuestLimits, HostState};
use crate::output::{CappedPipe, InputPipe};
use crate::stop::{Ticker, TickerGuard};
use crate::launch::{LaunchStats, Launcher};
use wasi_python_sched::{Finishing, Waiters};
use crate::{CallContext, Completed, Error, RunConfig, ToolDoor};

/// The turn a guest on standby runs: a fixed text, which the guest package's `_run_turn`
/// answers by calling `serve()` without compiling anything (as `GO_TURN`, run.rs); the
/// expression does the same should it not be installed.
pub(crate) const SERVE: &str = "__import__('_wasi_python_boot').serve()";

/// Held by a fresh run from its start until its result is handed over (or it fails):
/// while any is, no guest is made on standby ([`Launcher::runs_idle`]), since its making
/// would take a core from the runs (16 concurrent runs: 8-10 % fewer runs/s).
pub(crate) struct Active {
    _counted: wasi_python_sched::forks::Counted,
}

impl Active {
    pub(crate) fn new(launcher: &Launcher) -> Active {
        launcher.started.fetch_add(1, Ordering::SeqCst);
        Active { _counted: wasi_python_sched::forks::Counted::more(&launcher.active) }
    }
}

/// What a run hands a guest on standby: its config (from which the guest takes its
/// stdin, limits, door and cancel) and how to report its end.
pub(crate) struct Job {
    /// The answer to the standby frame: `_wasi_python_boot.go`'s spec.
    pub(crate) spec: Vec<u8>,
    /// Whether the run's compiled program is asked for (compiled.rs).
    pub(crate) offer: Option<crate::compiled::Offer>,
    pub(crate) started: Instant,
    pub(crate) deadline: Option<Instant>,
    pub(crate) config: RunConfig,
    pub(crate) report: ReportTo,
}

/// Reports a run's end to its caller.
pub(crate) type Done = Box<dyn FnOnce(Result<Completed, Error>) + Send>;

/// Where a run's end goes: to its caller, and the CPU that caller waits on, if it waits.
pub(crate) struct ReportTo {
    pub(crate) done: Done,
    pub(crate) cpu: Option<usize>,
    /// The runtime's launcher, which learns of the result (launch.rs).
    pub(crate) launcher: Arc<Launcher>,
}

impl ReportTo {
    /// Reports `result`; the guard is held for the work that follows (sched's threads.rs).
    pub(crate) fn report(self, result: Result<Completed, Error>) -> Finishing {
        self.launcher.reported();
        (self.done)(result);
        Finishing::new(&self.launcher.threads, self.cpu)
    }
}

/// What of a job is left for the guest thread once the store holds the rest.
pub(crate) struct Taken {
    pub(crate) started: Instant,
    pub(crate) tools: Option<(ToolDoor, BudgetLimits)>,
    pub(crate) report: ReportTo,
}

/// The guests waiting for a run of one flavour and image, each by its memory's size
/// when it began to wait (a run takes one only if its memory limit holds that).
#[derive(Debug)]
pub(crate) struct Ready {
    /// The runtime's launcher: its policy, and the count of runs in progress.
    pub(crate) launcher: Arc<Launcher>,
    /// The preload image its guests start from (None: the artifact's own memory).
    image: Option<PathBuf>,
    waiting: Waiters<Box<Job>, u64>,
    /// A guest is being made (at most one per image).
    making: AtomicBool,
    /// Primed instances (made, not entered) waiting for a run, by memory size as above:
    /// between runs back to back, where no guest on standby is made.
    primed: Waiters<Box<Job>, u64>,
    /// An instance is being primed or waits primed (at most one per image).
    priming: AtomicBool,
    /// How many runs guests on standby and primed instances served.
    standby_runs: AtomicUsize,
    primed_runs: AtomicUsize,
    /// A guest failed before it could wait: none is made again.
    broken: AtomicBool,
    /// In a forked child, a guest the parent was making is not being made (forks.rs).
    seen: wasi_python_sched::forks::Seen,
    /// How often its guests were sent to warm up.
    warmups: AtomicUsize,
}

impl Ready {
    pub(crate) fn new(launcher: &Arc<Launcher>, image: Option<PathBuf>, compiled: &Arc<crate::compiled::Compiled>) -> Arc<Ready> {
        let r = Arc::new(Ready {
            launcher: launcher.clone(),
            image,
            waiting: Waiters::new(),
            making: AtomicBool::new(false),
            primed: Waiters::new(),
            priming: AtomicBool::new(false),
            standby_runs: AtomicUsize::new(0),
            primed_runs: AtomicUsize::new(0),
            broken: AtomicBool::new(false),
            warmups: AtomicUsize::new(0),
            seen: wasi_python_sched::forks::Seen::new(),
        });
        launcher.register(&r, compiled);
        r
    }

    /// The preload image its guests start from.
    pub(crate) fn image(&self) -> Option<&Path> {
        self.image.as_deref()
    }

    /// Adds its counts to `stats`.
    pub(crate) fn add_stats(&self, stats: &mut LaunchStats) {
        stats.guests_on_standby += self.waiting.len();
        stats.standby_warmups += self.warmups.load(Ordering::SeqCst);
        stats.standby_runs += self.standby_runs.load(Ordering::SeqCst);
        stats.primed_runs += self.primed_runs.load(Ordering::SeqCst);
        stats.primed_waiting += self.primed.len();
    }

    /// Ends every wait of a guest on standby and of a primed instance.
    pub(crate) fn clear(&self) {
        self.waiting.clear();
        self.primed.clear();
    }

    /// Hands `job` to a guest on standby whose memory its memory limit holds, else to a
    /// primed instance that fits so; gives the job back if none takes it. `pull`: the
    /// caller waits next (sched's wake.rs).
    pub(crate) fn offer(&self, job: Box<Job>, pull: bool) -> Result<(), Box<Job>> {
        let limit = job.config.limits.memory_bytes;
        let job = match self.waiting.offer(job, |memory| *memory <= limit, pull) {
            Ok(()) => return Ok(()),
            Err(job) => job,
        };
        self.primed.offer(job, |memory| *memory <= limit, pull)
    }

    /// Whether a guest on standby or a primed instance waits: a run that finds none need
    /// not build a [`Job`].
    pub(crate) fn any_waiting(&self) -> bool {
        !self.waiting.is_empty() || !self.primed.is_empty()
    }

    /// Claims the priming of the next instance; false if one is primed or waits, or
    /// guests are no longer made.
    pub(crate) fn claim_priming(&self) -> bool {
        self.forget_the_parents();
        self.launcher.policy.primed
            && !self.broken.load(Ordering::Relaxed)
            && !self.launcher.retired.load(Ordering::SeqCst)
            && !self.priming.swap(true, Ordering::SeqCst)
    }

    /// Waits up to the policy's `primed_for` for a job, as the instance claimed by
    /// [`Ready::claim_priming`] (whose claim ends here), with `memory_now` bytes of memory.
    pub(crate) fn wait_primed(&self, memory_now: u64) -> Option<Box<Job>> {
        let job = self.primed.wait(memory_now, 1, self.launcher.policy.primed_for, || {});
        self.unprime();
        if job.is_some() {
            self.primed_runs.fetch_add(1, Ordering::SeqCst);
        }
        job
    }

    /// Ends the claim of [`Ready::claim_priming`] (an instance that could not be made).
    pub(crate) fn unprime(&self) {
        self.priming.store(false, Ordering::SeqCst);
    }

    /// Claims the making of the next guest; false if one is being made or waits, the
    /// last one failed, or the runtime has not yet started the policy's `standby_after`
    /// fresh runs.
    pub(crate) fn claim_making(&self) -> bool {
        self.forget_the_parents();
        self.launcher.policy.standby
            && self.launcher.started.load(Ordering::SeqCst) >= self.launcher.policy.standby_after
            && !self.broken.load(Ordering::Relaxed)
            && !self.launcher.retired.load(Ordering::SeqCst)
            && self.waiting.is_empty()
            && !self.making.swap(true, Ordering::SeqCst)
    }

    /// In a forked child, at the first claim: the guest and the instance the parent was
    /// making or priming are not the child's (`seen` tells once, so both claims end here).
    fn forget_the_parents(&self) {
        self.forget_the_parents_at(wasi_python_sched::forks::generation());
    }

    fn forget_the_parents_at(&self, now: u64) {
        if self.seen.stale_at(now) {
            self.making.store(false, Ordering::SeqCst);
            self.priming.store(false, Ordering::SeqCst);
        }
    }

    /// The guest claimed by [`Ready::claim_making`] was taken by a run, or ended waiting.
    fn made(&self) {
        self.making.store(false, Ordering::SeqCst);
    }

    /// The guest claimed by [`Ready::claim_making`] ended before it could wait.
    pub(crate) fn failed(&self) {
        self.broken.store(true, Ordering::Relaxed);
        self.making.store(false, Ordering::SeqCst);
    }
}

/// What a guest on standby keeps in its store until its run arrives.
pub(crate) struct Waiting {
    pub(crate) ready: Arc<Ready>,
    pub(crate) stdin: InputPipe,
    pub(crate) stdout: CappedPipe,
    pub(crate) stderr: CappedPipe,
    /// Where the door call leaves the job's rest for the guest thread.
    pub(crate) taken: Arc<Mutex<Option<Taken>>>,
    /// When it was made: it ends the policy's `standby_idle` later without a run.
    since: Instant,
}

impl Waiting {
    /// A guest on standby being made for `ready`'s image, which becomes the one that
    /// warms up (the launcher's `latest`): a run of that image was the last to end.
    pub(crate) fn new(
        ready: Arc<Ready>,
        stdin: InputPipe,
        stdout: CappedPipe,
        stderr: CappedPipe,
        taken: Arc<Mutex<Option<Taken>>>,
    ) -> Waiting {
        ready.launcher.latest.store(Arc::as_ptr(&ready).addr(), Ordering::SeqCst);
        Waiting { ready, stdin, stdout, stderr, taken, since: Instant::now() }
    }
}

/// How a guest on standby's wait ended, when no error ends the guest.
pub(crate) enum Waited {
    /// No run yet: the guest warms up and asks again, still on standby.
    Warm(Box<Waiting>),
    /// A run took it: the command line to answer with, the offer its spec asked for
    /// (compiled.rs), and the epoch ticker for the run.
    Run { spec: Vec<u8>, offer: Option<crate::compiled::Offer>, ticking: TickerGuard },
}

/// The guest on standby `waiting` asked for its run (its first frame, control.rs): waits
/// for a job (or the end of the standby) and sets the job's limits, door, stdin and
/// cancel on the store. `Err` ends the guest: no run came. `memory_now` is the guest's
/// memory size in bytes.
pub(crate) fn wait_for_run(
    state: &mut HostState,
    waiting: Box<Waiting>,
    memory_now: u64,
    engine: &wasmtime::Engine,
) -> wasmtime::Result<Waited> {
    let (ready, since) = (waiting.ready.clone(), waiting.since);
    let (launcher, policy) = (&ready.launcher, &ready.launcher.policy);
    let warm_every = || policy.warm_every.filter(|_| launcher.latest.load(Ordering::SeqCst) == Arc::as_ptr(&ready).addr());
    let job = loop {
        let left = policy.standby_idle.saturating_sub(since.elapsed());
        let job = ready.waiting.wait(memory_now, usize::MAX, warm_every().map_or(left, |w| w.min(left)), || {});
        // Taken, retired (the wait ended early) or idle for long enough: done waiting.
        if job.is_some() || launcher.retired.load(Ordering::SeqCst) || since.elapsed() >= policy.standby_idle {
            break job;
        }
        // No run yet: warm up and wait again, if still the image used last. The making
        // stays claimed meanwhile, so no second guest is made for this image while this
        // one is off the list.
        if warm_every().is_some() {
            ready.warmups.fetch_add(1, Ordering::SeqCst);
            return Ok(Waited::Warm(waiting));
        }
    };
    ready.made();
    let Some(job) = job else {
        return Err(wasmtime::format_err!("no run came for the guest on standby, or it was retired"));
    };
    ready.standby_runs.fetch_add(1, Ordering::SeqCst);
    let (spec, offer, taken) = take_job(state, &waiting.stdin, &waiting.stdout, &waiting.stderr, job);
    *waiting.taken.lock() = Some(taken);
    Ok(Waited::Run { spec, offer, ticking: Ticker::global().activate(engine)? })
}

/// Sets `job`'s limits, stdin, door and cancel on a guest made before it came (on
/// standby or primed), whose pipes are `stdin`, `stdout` and `stderr`: what it wrote
/// before is dropped. Returns the job's spec, the offer of its compiled program (for the
/// store's control state, control.rs) and the rest.
pub(crate) fn take_job(
    state: &mut HostState,
    stdin: &InputPipe,
    stdout: &CappedPipe,
    stderr: &CappedPipe,
    job: Box<Job>,
) -> (Vec<u8>, Option<crate::compiled::Offer>, Taken) {
    let Job { spec, offer, started, deadline, config, report } = *job;
    let limits = &config.limits;
    // What the guest wrote before its run is not the run's.
    stdout.take();
    stderr.take();
    stdout.set_cap(limits.output_bytes);
    stderr.set_cap(limits.output_bytes);
    stdout.set_events(config.events.clone());
    stderr.set_events(config.events.clone());
    stdin.set(config.stdin);
    state.limits = GuestLimits::new(limits.memory_bytes);
    state.files = FileState::new(limits.file_write_bytes, limits.max_open_files);
    state.stop = CallContext { deadline, cancel: config.cancel };
    if let Some(events) = &config.events {
        events.arm(state.stop.clone());
    }
    state.displays = crate::display::DisplayState::new(limits.display_bytes, config.events);
    state.door = config.door;
    (spec, offer, Taken { started, tools: config.tools, report })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_guest_is_made_on_standby_before_the_runtime_s_second_fresh_run() {
        let launcher = Launcher::new(crate::LaunchPolicy { standby: true, ..crate::LaunchPolicy::default() });
        let ready = Ready::new(&launcher, None, &crate::compiled::Compiled::new());
        let first = Active::new(&launcher);
        drop(first);
        assert!(!ready.claim_making(), "after one run: a process that makes one makes no guest it will not use");
        let second = Active::new(&launcher);
        drop(second);
        assert!(ready.claim_making(), "after its second run, the runs after it find one");
        assert!(!ready.claim_making(), "one at a time");
        // A policy that asks for it after the first run has it there.
        let launcher = Launcher::new(crate::LaunchPolicy { standby: true, standby_after: 1, ..crate::LaunchPolicy::default() });
        let ready = Ready::new(&launcher, None, &crate::compiled::Compiled::new());
        drop(Active::new(&launcher));
        assert!(ready.claim_making());
    }

    // Against explicit generations, as in forks.rs: counting a fork for real would make
    // the other tests' lists in this binary forget their entries.
    #[test]
    fn a_forked_child_forgets_both_claims_its_parent_held() {
        let ready = Ready::new(&Launcher::new(crate::LaunchPolicy::default()), None, &crate::compiled::Compiled::new());
        ready.forget_the_parents_at(7);
        // The parent was making a guest on standby and priming an instance when it forked.
        ready.making.store(true, Ordering::SeqCst);
        ready.priming.store(true, Ordering::SeqCst);
        ready.forget_the_parents_at(7);
        assert!(ready.making.load(Ordering::SeqCst) && ready.priming.load(Ordering::SeqCst), "not forked: kept");
        ready.forget_the_parents_at(8);
        assert!(!ready.making.load(Ordering::SeqCst), "the child makes its own guest on standby");
        assert!(!ready.priming.load(Ordering::SeqCst), "and primes its own instance");
    }
}
