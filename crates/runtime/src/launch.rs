//! Launch and scheduling: how a run gets a guest thread and an instance, and what a
//! [`Runtime`](crate::Runtime) keeps between runs to make the next one quick. Each
//! runtime owns one [`Launcher`], set by its [`LaunchPolicy`]; two runtimes in one
//! process share none of it.
//!
//! ## A guest thread's states
//! - **idle**: on the launcher's list ([`Launcher::threads`], sched's `KeptThreads`),
//!   waiting for a job;
//!   at most [`LaunchPolicy::idle_threads`] wait, each for [`LaunchPolicy::thread_idle`],
//!   then it ends. A job goes to the most recent idle thread (its stack is warmest).
//! - **running**: a fresh run (run.rs): a store and an instance made, the program run.
//! - **finishing**: the run's result is out; the thread drops the instance (the pool
//!   slot's reset, the private folders) holding sched's [`Finishing`](wasi_python_sched::Finishing).
//!   A caller that waits for its run and finds no idle thread waits up to
//!   [`LaunchPolicy::finish_wait`] for a finishing one rather than start another.
//! - **making**: after a run that could take a guest on standby, and only while no fresh
//!   run is in progress ([`Launcher::runs_idle`]) and once the runtime has started
//!   [`LaunchPolicy::standby_after`] fresh runs (its second), the thread makes the next
//!   run's guest (standby.rs): store, instance, the guest package's preparation.
//! - **standby, waiting**: that guest waits inside its one door call for a run, on its
//!   image's `Ready` list, for at most [`LaunchPolicy::standby_idle`]; **warming**: every
//!   [`LaunchPolicy::warm_every`] without a run, the guest of the image used last runs its
//!   warm-up and waits again. Taken: it runs the job's program (**running**), then
//!   **finishing**, then **making** again.
//! - **priming**: after a run back to back (its caller started the next within
//!   [`LaunchPolicy::back_to_back`]) while the next is in progress, the thread makes an
//!   instance without entering the guest; **primed**: it waits for the run after, for at
//!   most [`LaunchPolicy::primed_for`], on the `Ready` list's second half.
//! - Transitions out of making, priming, standby and primed go back to **idle** when no run
//!   took the guest (or the runtime retired: [`Launcher::retire`]).
//!
//! ## Where a run goes (run.rs, `start_with`)
//! A fresh run from a preload image, with no grants, mounts, fuel or other working folder,
//! is offered first to a guest on standby, then to a primed instance, of its image
//! ([`LaunchPolicy::standby`], [`LaunchPolicy::primed`]); otherwise, and for every other run,
//! to an idle guest thread, a finishing one, or a new one.
//!
//! ## The embedder's threads
//! Only the runtime's own threads are moved between CPUs ([`LaunchPolicy::wake_on_caller_cpu`]:
//! the thread that serves a caller who waits is woken on the caller's CPU; back to back it
//! leaves it once the result is out). The caller's own thread is pinned while it waits only
//! when [`LaunchPolicy::pin_caller`] asks; what the embedder sets is never undone (sched's wake.rs).
//!
//! **Invariant:** no launch state is process-wide: the idle threads, the counts of runs in
//! progress and of finishing threads, the time of the last result, and the guests on
//! standby belong to one launcher. A run's instance holds nothing a fresh one would not
//! (standby.rs).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use wasi_python_door::{Job, Spawn};
use wasi_python_sched::{CallThreads, Count, KeptThreads};

use crate::compiled::Compiled;
use crate::engine::GUEST_THREAD_STACK;
use crate::standby::Ready;
use crate::tempdir::Spares;

/// The environment variable that turns guests on standby off by default: `0`.
pub const STANDBY_ENV: &str = "WASI_PYTHON_STANDBY";
/// The environment variable that asks for a caller's thread to be pinned while it waits
/// for a run back to back by default: `1`.
pub const PIN_CALLER_ENV: &str = "WASI_PYTHON_PIN_CALLER";
/// The environment variable that keeps sessions from giving back at rest by default:
/// `0` ([`LaunchPolicy::rest`]). For measuring what rest saves.
pub const REST_ENV: &str = "WASI_PYTHON_REST";

/// How a [`Runtime`](crate::Runtime) schedules its runs: set once, with
/// [`RuntimeBuilder::launch_policy`](crate::RuntimeBuilder::launch_policy). The defaults
/// read [`STANDBY_ENV`], [`PIN_CALLER_ENV`] and [`REST_ENV`]; every field can be set.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LaunchPolicy {
    /// Fresh runs from a preload image take a guest made ahead, on standby (default: on,
    /// unless `WASI_PYTHON_STANDBY=0`).
    pub standby: bool,
    /// A guest on standby is made only once this many fresh runs have started in the
    /// runtime (2): a process that makes one run (a CLI call, a worker's one task) spends
    /// no CPU on a guest it never uses, and its exit waits for none being made. Its second
    /// run starts fresh; the runs after it find one waiting.
    pub standby_after: usize,
    /// How long a guest on standby waits for a run before it ends (30 s).
    pub standby_idle: Duration,
    /// How often a waiting guest runs its warm-up again (20 ms; `None`: never).
    pub warm_every: Option<Duration>,
    /// Runs back to back take an instance primed while the last one ran (on).
    pub primed: bool,
    /// How long a primed instance waits for its run (100 ms).
    pub primed_for: Duration,
    /// How many guest threads wait for the next run at most (16).
    pub idle_threads: usize,
    /// How long an idle guest thread waits before it ends (30 s).
    pub thread_idle: Duration,
    /// How long a caller waits for a thread that is finishing its last run before it
    /// starts a new one (2 ms).
    pub finish_wait: Duration,
    /// A run started this soon after the last result is one of runs back to back (1 ms).
    pub back_to_back: Duration,
    /// The runtime's thread that serves a caller who waits is woken on the caller's CPU,
    /// and, back to back, leaves it once the result is out (on). Only the runtime's own
    /// threads move.
    pub wake_on_caller_cpu: bool,
    /// The caller's own thread is pinned to its CPU while it waits for a run back to back
    /// (default: off, unless `WASI_PYTHON_PIN_CALLER=1`). Its mask is given back only if
    /// nothing changed it meanwhile.
    pub pin_caller: bool,
    /// How long a wait for a session turn's answer spins before it sleeps (300 us).
    pub turn_spin: Duration,
    /// How long a session's thread spins for the next turn, back to back (100 us).
    pub next_turn_spin: Duration,
    /// What idle pool slots keep resident for the next run, in bytes, in all (64 MiB):
    /// past it, the slots unused longest give their memory back once unused for a
    /// second, so a burst of large runs leaves no more than this (idle_memory.rs). 0
    /// keeps nothing once the slots are idle; each slot keeps at most 64 MiB meanwhile.
    pub idle_memory: u64,
    /// A session with no command for [`wasi_python_sched::threads::REST`] after a turn
    /// (or its opening) gives back what it holds but does not need, once until its next
    /// turn ([`crate::Session::rest_stats`]; default: on, unless `WASI_PYTHON_REST=0`).
    pub rest: bool,
}

impl Default for LaunchPolicy {
    fn default() -> Self {
        LaunchPolicy {
            standby: std::env::var_os(STANDBY_ENV).is_none_or(|v| v != "0"),
            standby_after: 2,
            standby_idle: Duration::from_secs(30),
            warm_every: Some(Duration::from_millis(20)),
            primed: true,
            primed_for: Duration::from_millis(100),
            idle_threads: 16,
            thread_idle: Duration::from_secs(30),
            finish_wait: Duration::from_millis(2),
            back_to_back: Duration::from_millis(1),
            wake_on_caller_cpu: true,
            pin_caller: std::env::var_os(PIN_CALLER_ENV).is_some_and(|v| v == "1"),
            turn_spin: Duration::from_micros(300),
            next_turn_spin: Duration::from_micros(100),
            idle_memory: 64 << 20,
            rest: std::env::var_os(REST_ENV).is_none_or(|v| v != "0"),
        }
    }
}

impl LaunchPolicy {
    /// Every run starts fresh on a guest thread: no guest on standby, no primed instance.
    pub fn fresh_only() -> Self {
        LaunchPolicy { standby: false, primed: false, ..LaunchPolicy::default() }
    }
}

/// What a runtime's launcher did, for one preload image or all
/// ([`Runtime::launch_stats`](crate::Runtime::launch_stats)): a diagnostic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LaunchStats {
    /// Guests on standby waiting now.
    pub guests_on_standby: usize,
    /// How often waiting guests were sent to warm up.
    pub standby_warmups: usize,
    /// How many runs guests on standby served.
    pub standby_runs: usize,
    /// How many runs primed instances served.
    pub primed_runs: usize,
    /// Primed instances waiting for a run now.
    pub primed_waiting: usize,
    /// Guest threads waiting for a run now.
    pub idle_threads: usize,
    /// `-c` programs kept compiled (compiled.rs).
    pub compiled_programs: usize,
    /// Private folders kept for the next runs (tempdir.rs), for all images.
    pub spare_folders: usize,
    /// Stacks kept for the next tool or provider call's thread, for all images.
    pub call_thread_stacks: usize,
    /// Bytes the runtime's idle pool slots keep resident now, for all images (the policy's
    /// `idle_memory` bounds it once they are idle).
    pub idle_slot_bytes: u64,
}

/// One runtime's scheduling state (the module's header).
#[derive(Debug)]
pub(crate) struct Launcher {
    pub(crate) policy: LaunchPolicy,
    /// Guest threads: those waiting for their next run, and those whose run's result is
    /// out, still dropping its instance ([`Finishing`](wasi_python_sched::Finishing)).
    pub(crate) threads: Arc<KeptThreads>,
    /// The threads of tool calls and of mounts' provider calls, on kept stacks: what
    /// every tool door and mount this runtime runs starts its threads with.
    pub(crate) call_threads: Arc<CallThreadPool>,
    /// Private folders runs left as made, kept for the next runs (tempdir.rs).
    pub(crate) folders: Arc<Spares>,
    /// Fresh runs between their start and their result: while any is, no guest is made on
    /// standby, since its making would take a core from the runs.
    pub(crate) active: Arc<Count>,
    /// Fresh runs started so far: no guest is made on standby before the policy's
    /// `standby_after`.
    pub(crate) started: AtomicUsize,
    /// When a run's result was last reported, in nanoseconds after `origin` (0: never).
    last_report: AtomicU64,
    origin: Instant,
    /// The image whose guest on standby warms up: the one made last (its `Ready`'s address).
    pub(crate) latest: AtomicUsize,
    /// Set when the runtime goes: no guest is made on standby from then on.
    pub(crate) retired: AtomicBool,
    /// Every `Ready` list of this runtime's images, for [`Launcher::retire`] and the stats,
    /// with the image's compiled programs.
    readies: Mutex<Vec<(Weak<Ready>, Weak<Compiled>)>>,
}

impl Launcher {
    pub(crate) fn new(policy: LaunchPolicy) -> Arc<Launcher> {
        let threads = KeptThreads::new(
            "wasi-python-guest",
            GUEST_THREAD_STACK,
            policy.idle_threads,
            policy.thread_idle,
            policy.finish_wait,
        );
        Arc::new(Launcher {
            policy,
            threads,
            call_threads: Arc::new(CallThreadPool::default()),
            folders: Arc::new(Spares::default()),
            active: Arc::new(Count::new()),
            started: AtomicUsize::new(0),
            last_report: AtomicU64::new(0),
            origin: Instant::now(),
            latest: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
            readies: Mutex::new(Vec::new()),
        })
    }

    /// Keeps an image's `ready` list and compiled programs among this launcher's.
    pub(crate) fn register(&self, ready: &Arc<Ready>, compiled: &Arc<Compiled>) {
        let mut all = self.readies.lock();
        all.retain(|(w, _)| w.strong_count() > 0);
        all.push((Arc::downgrade(ready), Arc::downgrade(compiled)));
    }

    fn readies(&self) -> Vec<(Arc<Ready>, Option<Arc<Compiled>>)> {
        self.readies.lock().iter().filter_map(|(r, c)| Some((r.upgrade()?, c.upgrade()))).collect()
    }

    /// Runs `job` on one of this launcher's idle guest threads, on one finishing its last
    /// run (within [`LaunchPolicy::finish_wait`]), or on a new one. `pull`: the caller
    /// waits next, so the thread is woken on its CPU (sched's wake.rs).
    pub(crate) fn run_on_guest_thread(&self, job: impl FnOnce() + Send + 'static, pull: bool) -> std::io::Result<()> {
        self.threads.run(job, pull && self.policy.wake_on_caller_cpu)
    }

    /// Gives `config`'s tool door and network door this runtime's call threads, unless
    /// they have a spawner already (door's `ToolDoor::spawn_with`,
    /// `NetworkDoor::spawn_with`): their threads start on kept stacks.
    pub(crate) fn lend_call_threads(&self, config: &crate::RunConfig) {
        if let Some((door, _)) = &config.tools {
            door.spawn_with(self.call_threads.clone());
        }
        if let Some(door) = &config.network_door {
            door.spawn_with(self.call_threads.clone());
        }
    }

    /// Whether no fresh run is in progress: the time to make a guest on standby.
    pub(crate) fn runs_idle(&self) -> bool {
        self.active.get() <= 0
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1)
    }

    /// A run's result is out (see [`Launcher::back_to_back`]).
    pub(crate) fn reported(&self) {
        self.last_report.store(self.now(), Ordering::Relaxed);
    }

    /// For a run whose caller waits on `cpu` for its result: `cpu` if the run starts within
    /// [`LaunchPolicy::back_to_back`] of the last result (the caller is likely to start the
    /// next at once too), and the policy wakes threads on the caller's CPU; else `None`.
    pub(crate) fn back_to_back(&self, cpu: Option<usize>) -> Option<usize> {
        let last = self.last_report.load(Ordering::Relaxed);
        let soon = last != 0 && self.now().saturating_sub(last) < self.policy.back_to_back.as_nanos() as u64;
        cpu.filter(|_| soon && self.policy.wake_on_caller_cpu)
    }

    /// Ends every waiting guest on standby and primed instance, and makes no more (the
    /// runtime is going, or the process is exiting: their private folders are removed);
    /// removes the private folders kept for later runs, and keeps none from now on.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
        for (r, _) in self.readies() {
            r.clear();
        }
        self.folders.retire();
    }

    /// The counts of `image`'s lists (all with `None`).
    pub(crate) fn stats(&self, image: Option<&Path>) -> LaunchStats {
        let mut s = LaunchStats {
            idle_threads: self.threads.idle(),
            spare_folders: self.folders.len(),
            call_thread_stacks: self.call_threads.0.kept(),
            ..LaunchStats::default()
        };
        for (r, c) in self.readies().iter().filter(|(r, _)| image.is_none_or(|i| r.image() == Some(i))) {
            r.add_stats(&mut s);
            s.compiled_programs += c.as_ref().map_or(0, |c| c.len());
        }
        s
    }
}

/// The runtime's call threads (sched's [`CallThreads`]), as its tool doors and mounts
/// start them: a new thread per call, on a stack an ended one left.
#[derive(Debug, Default)]
pub(crate) struct CallThreadPool(CallThreads);

impl Spawn for CallThreadPool {
    fn spawn(&self, name: &'static std::ffi::CStr, job: Job) -> std::io::Result<()> {
        self.0.start(name, job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_run_started_soon_after_a_result_counts_as_back_to_back() {
        let launcher = Launcher::new(LaunchPolicy::default());
        assert_eq!(launcher.back_to_back(Some(3)), None, "no result yet");
        launcher.reported();
        assert_eq!(launcher.back_to_back(Some(3)), Some(3));
        assert_eq!(launcher.back_to_back(None), None);
        std::thread::sleep(Duration::from_millis(3));
        assert_eq!(launcher.back_to_back(Some(3)), None, "3 ms later");
        // Another runtime's results are not this one's.
        let other = Launcher::new(LaunchPolicy::default());
        launcher.reported();
        assert_eq!(other.back_to_back(Some(3)), None);
        // Nor does a policy that keeps threads where they are place anything.
        let still = Launcher::new(LaunchPolicy { wake_on_caller_cpu: false, ..LaunchPolicy::default() });
        still.reported();
        assert_eq!(still.back_to_back(Some(3)), None);
    }

    #[test]
    fn a_finished_guest_thread_serves_the_next_run_of_its_own_launcher_only() {
        let thread_of_a_job = |launcher: &Launcher| {
            let (tx, rx) = std::sync::mpsc::channel();
            launcher.run_on_guest_thread(move || tx.send(std::thread::current().id()).unwrap(), true).unwrap();
            let id = rx.recv().unwrap();
            let until = Instant::now() + Duration::from_secs(10);
            while launcher.threads.idle() == 0 && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            id
        };
        let launcher = Launcher::new(LaunchPolicy::default());
        let first = thread_of_a_job(&launcher);
        assert_eq!(thread_of_a_job(&launcher), first);
        let other = Launcher::new(LaunchPolicy::default());
        assert_ne!(thread_of_a_job(&other), first, "another runtime's launcher has threads of its own");
        assert_eq!((launcher.stats(None).idle_threads, other.stats(None).idle_threads), (1, 1));
        launcher.threads.clear();
        other.threads.clear();
    }
}
