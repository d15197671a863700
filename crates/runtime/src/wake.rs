//! Waking a waiting thread on its waker's CPU, when the waker is about to wait in turn.
//!
//! A fresh run's caller hands the run to a guest thread that sleeps (a guest on standby,
//! or an idle guest thread) and then sleeps itself until the result. Linux wakes the
//! sleeper on an idle CPU if there is one; on a small VM an idle vCPU is halted, and
//! starting it again takes tens of microseconds: a guest on standby got its job 38-157 us
//! after it was sent, runs 5 ms apart (docs/benchmarks.md, ninth pass). The CPU of the
//! caller, which is about to sleep, is free at once. So the caller first lets the
//! sleeper run only on its own CPU, then wakes it; the woken thread gives itself back
//! its CPUs as its first act, so only where it wakes changes, not where it may run.
//! What the kernel does for a synchronous wake-up (a pipe's), which a futex cannot ask.
//!
//! Only for a waker that waits next (`Runtime::start`, whose caller waits for the
//! result): one that goes on (`start_then`, `run_async`) would share its CPU with the
//! guest. A sleeper that may not run on the waker's CPU is woken as before. Elsewhere
//! than on Linux, nothing changes.
//!
//! Back to back (a run started within [`BACK_TO_BACK`] of the last result), the rest is
//! placed too: the run's thread, once the result is out, leaves the caller's CPU for the
//! work that follows ([`Away`]), and the caller waits [`Pinned`] to its CPU so that it
//! wakes there and not where that work goes. The caller's CPU then serves the caller and
//! its runs, the other CPUs the drops.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A thread about to wait, as a waker finds it: its id and the CPUs it may run on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sleeper {
    #[cfg(target_os = "linux")]
    thread: rustix::thread::Pid,
    #[cfg(target_os = "linux")]
    cpus: rustix::thread::CpuSet,
}

impl Sleeper {
    /// The calling thread, about to wait; `None` if its CPUs cannot be read.
    #[cfg(target_os = "linux")]
    pub(crate) fn here() -> Option<Sleeper> {
        let cpus = rustix::thread::sched_getaffinity(None).ok()?;
        Some(Sleeper { thread: rustix::thread::gettid(), cpus })
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn here() -> Option<Sleeper> {
        None
    }

    /// Before waking it: lets the sleeper run only on the calling thread's CPU, if it may
    /// run there. Whether it was pulled (then it must [`Sleeper::release`] itself).
    #[cfg(target_os = "linux")]
    pub(crate) fn pull(&self) -> bool {
        let cpu = rustix::thread::sched_getcpu();
        if !self.cpus.is_set(cpu) {
            return false;
        }
        rustix::thread::sched_setaffinity(Some(self.thread), &only(cpu)).is_ok()
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn pull(&self) -> bool {
        false
    }

    /// On the woken sleeper: its own CPUs back. Should they no longer be allowed (its
    /// cpuset changed meanwhile), every CPU the kernel allows it.
    #[cfg(target_os = "linux")]
    pub(crate) fn release(&self) {
        if rustix::thread::sched_setaffinity(None, &self.cpus).is_err() {
            let mut all = rustix::thread::CpuSet::new();
            for cpu in 0..rustix::thread::CpuSet::MAX_CPU {
                all.set(cpu);
            }
            let _ = rustix::thread::sched_setaffinity(None, &all);
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn release(&self) {}
}

/// Held by a guest thread from the moment its run's result is out until the work that
/// follows is done (the instance dropped, the pool slot reset, the private folders
/// checked: 100-150 us): that thread may not run on its caller's CPU meanwhile, where the
/// caller goes on (and, back to back, its next run's thread is pulled). Left where it
/// was, that work met the next run on the caller's CPU while the other CPUs idled; moved
/// off it, runs of `print(1)` back to back took 214-218 us (p50) instead of 320-331, and
/// 316-321 us of CPU each instead of 399-421 (docs/benchmarks.md, eleventh pass). Its
/// CPUs back when dropped. With no other CPU it may use, or no caller's CPU given (a run
/// whose caller goes on, or one after a pause: [`back_to_back`]), it yields once instead,
/// so the caller it just woke, often put on this very CPU, runs before that work: a run
/// that imported its tools and called one, 5 ms apart, had its result at `run()` 520-650
/// us after its end without the yield, and 20 us with it.
#[must_use]
pub(crate) struct Away {
    _own: Restore,
}

impl Away {
    /// Keeps the calling thread off `caller`, the CPU its caller waited on.
    pub(crate) fn from(caller: Option<usize>) -> Away {
        let own = caller.and_then(|cpu| Sleeper::here().filter(|me| me.avoid(cpu)));
        if own.is_none() {
            std::thread::yield_now();
        }
        Away { _own: Restore(own) }
    }

    /// Whether it changed where the thread may run.
    #[cfg(test)]
    fn moved(&self) -> bool {
        self._own.0.is_some()
    }
}

/// The calling thread's own CPUs, given back when dropped: what [`Away`] and [`Pinned`]
/// hold (`None`: nothing was changed).
struct Restore(Option<Sleeper>);

impl Drop for Restore {
    fn drop(&mut self) {
        if let Some(me) = &self.0 {
            me.release();
        }
    }
}

impl Sleeper {
    /// Lets this thread (the calling one) run only on its CPUs other than `cpu`; false,
    /// and nothing changed, if it has no other.
    #[cfg(target_os = "linux")]
    fn avoid(&self, cpu: usize) -> bool {
        let mut others = self.cpus;
        if cpu < rustix::thread::CpuSet::MAX_CPU {
            others.unset(cpu);
        }
        others.count() > 0 && rustix::thread::sched_setaffinity(None, &others).is_ok()
    }

    #[cfg(not(target_os = "linux"))]
    fn avoid(&self, _cpu: usize) -> bool {
        false
    }

    /// Lets this thread (the calling one) run only on `cpu`, if one of its CPUs and not
    /// its only one; false, and nothing changed, if not.
    #[cfg(target_os = "linux")]
    fn keep_to(&self, cpu: usize) -> bool {
        cpu < rustix::thread::CpuSet::MAX_CPU
            && self.cpus.is_set(cpu)
            && self.cpus.count() > 1
            && rustix::thread::sched_setaffinity(None, &only(cpu)).is_ok()
    }

    #[cfg(not(target_os = "linux"))]
    fn keep_to(&self, _cpu: usize) -> bool {
        false
    }
}

/// Held by a caller while it waits for its run's result: it may wake only on `cpu`, the
/// CPU it waited on when it started the run (where the run's thread was woken). Linux
/// wakes a thread on an idle CPU if its own is busy, and its own is busy at that moment
/// (the run's thread wakes it from there); so the caller often woke on the other CPU,
/// and the run's thread, leaving the caller's CPU ([`Away`]), went to the very CPU the
/// caller was on. Its CPUs back when dropped (before the caller runs anything else).
#[must_use]
pub(crate) struct Pinned {
    _own: Restore,
}

impl Pinned {
    pub(crate) fn to(cpu: Option<usize>) -> Pinned {
        let own = cpu.and_then(|cpu| Sleeper::here().filter(|me| me.keep_to(cpu)));
        Pinned { _own: Restore(own) }
    }
}

/// Moves the calling thread to `cpu` now, if it may run there; where it may run is
/// unchanged after.
pub(crate) fn move_to(cpu: Option<usize>) {
    drop(Pinned::to(cpu));
}

/// When a run's result was last reported, in nanoseconds after [`clock`]'s start (0:
/// never).
static LAST_REPORT: AtomicU64 = AtomicU64::new(0);

/// A run started this soon after the last result is taken as one of runs back to back.
pub(crate) const BACK_TO_BACK: Duration = Duration::from_millis(1);

fn clock() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let nanos = START.get_or_init(Instant::now).elapsed().as_nanos();
    u64::try_from(nanos).unwrap_or(u64::MAX).max(1)
}

/// A run's result is out (see [`back_to_back`]).
pub(crate) fn reported() {
    LAST_REPORT.store(clock(), Ordering::Relaxed);
}

/// For a run whose caller waits on `cpu` for its result: `cpu` if the run starts within
/// [`BACK_TO_BACK`] of the last result, when the caller is likely to start the next run
/// at once too; then its thread leaves that CPU once the result is out ([`Away`]) and
/// the caller waits [`Pinned`] there. After a pause, `None`: runs a few milliseconds
/// apart took 12-15 us longer (p50) with both, as the thread's move then only cost
/// (docs/benchmarks.md, eleventh pass).
pub(crate) fn back_to_back(cpu: Option<usize>) -> Option<usize> {
    cpu.filter(|_| soon_after(LAST_REPORT.load(Ordering::Relaxed), clock()))
}

/// Whether `now` is within [`BACK_TO_BACK`] of a result reported at `last` (0: none).
fn soon_after(last: u64, now: u64) -> bool {
    last != 0 && now.saturating_sub(last) < BACK_TO_BACK.as_nanos() as u64
}

/// The calling thread's CPU, where known.
pub(crate) fn this_cpu() -> Option<usize> {
    #[cfg(target_os = "linux")]
    return Some(rustix::thread::sched_getcpu());
    #[cfg(not(target_os = "linux"))]
    None
}

/// The set of the one CPU `cpu`.
#[cfg(target_os = "linux")]
pub(crate) fn only(cpu: usize) -> rustix::thread::CpuSet {
    let mut one = rustix::thread::CpuSet::new();
    one.set(cpu);
    one
}

/// A thread that waits for one command after another (a session's), pulled by the
/// senders that wait for its answer.
#[derive(Debug)]
pub(crate) struct Pullable {
    sleeper: std::sync::OnceLock<Sleeper>,
    pulled: std::sync::atomic::AtomicBool,
    /// The CPU the last command was sent from (`usize::MAX`: unknown).
    sender_cpu: std::sync::atomic::AtomicUsize,
}

impl Default for Pullable {
    fn default() -> Self {
        Pullable {
            sleeper: std::sync::OnceLock::new(),
            pulled: std::sync::atomic::AtomicBool::new(false),
            sender_cpu: std::sync::atomic::AtomicUsize::new(usize::MAX),
        }
    }
}

impl Pullable {
    /// On the thread itself, once: senders may pull it from now on.
    pub(crate) fn register(&self) {
        if let Some(s) = Sleeper::here() {
            let _ = self.sleeper.set(s);
        }
    }

    /// By a sender about to send and then wait: notes its CPU, and pulls the thread
    /// there if it sleeps.
    pub(crate) fn sending(&self, asleep: bool) {
        let cpu = this_cpu();
        self.sender_cpu.store(cpu.unwrap_or(usize::MAX), std::sync::atomic::Ordering::SeqCst);
        if asleep
            && let Some(s) = self.sleeper.get()
            && s.pull()
        {
            self.pulled.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// On the thread: whether it runs on the CPU its last command came from (a spin
    /// there must yield to the sender).
    pub(crate) fn beside_sender(&self) -> bool {
        let sender = self.sender_cpu.load(std::sync::atomic::Ordering::SeqCst);
        this_cpu().is_some_and(|cpu| cpu == sender)
    }

    /// On the thread, after each command it received: its CPUs back if it was pulled.
    pub(crate) fn woken(&self) {
        if self.pulled.swap(false, std::sync::atomic::Ordering::SeqCst)
            && let Some(s) = self.sleeper.get()
        {
            s.release();
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn cpus() -> rustix::thread::CpuSet {
        rustix::thread::sched_getaffinity(None).unwrap()
    }

    fn allowed(set: &rustix::thread::CpuSet) -> Vec<usize> {
        (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()
    }

    /// The CPU a sleeper woke on, and the CPUs it may run on once released.
    type Woken = std::thread::JoinHandle<(usize, Vec<usize>)>;

    /// A sleeper on its own thread (only on CPU `pinned`, if given): sends itself, waits for
    /// the word (whether it was pulled), then reports where it woke and may run.
    fn sleeper(pinned: Option<usize>) -> (Sleeper, mpsc::Sender<bool>, Woken) {
        let (stx, srx) = mpsc::channel();
        let (wtx, wrx) = mpsc::channel::<bool>();
        let handle = std::thread::spawn(move || {
            if let Some(cpu) = pinned {
                rustix::thread::sched_setaffinity(None, &only(cpu)).unwrap();
            }
            let me = Sleeper::here().unwrap();
            stx.send(me).unwrap();
            let pulled = wrx.recv().unwrap();
            let woke_on = rustix::thread::sched_getcpu();
            if pulled {
                me.release();
            }
            (woke_on, allowed(&cpus()))
        });
        (srx.recv().unwrap(), wtx, handle)
    }

    #[test]
    fn a_pulled_sleeper_wakes_on_the_wakers_cpu_and_gets_its_cpus_back() {
        let mine = cpus();
        let (s, wake, handle) = sleeper(None);
        let before = allowed(&s.cpus);
        // Pin the waker too, so the CPU it names is still its own when it wakes the sleeper.
        let here = rustix::thread::sched_getcpu();
        rustix::thread::sched_setaffinity(None, &only(here)).unwrap();
        assert!(s.pull(), "the sleeper may run on every CPU this thread may");
        let pulled = allowed(&rustix::thread::sched_getaffinity(Some(s.thread)).unwrap());
        wake.send(true).unwrap();
        let (woke_on, after) = handle.join().unwrap();
        rustix::thread::sched_setaffinity(None, &mine).unwrap();
        assert_eq!(pulled, vec![here], "asleep, it may run only on the waker's CPU");
        assert_eq!(woke_on, here);
        assert_eq!(after, before, "released, it may run where it could before");
    }

    #[test]
    fn a_pullable_thread_wakes_beside_its_sender_and_gets_its_cpus_back() {
        let mine = cpus();
        let thread = std::sync::Arc::new(Pullable::default());
        let (ready_tx, ready_rx) = mpsc::channel();
        let (tx, rx) = mpsc::channel::<()>();
        let t = thread.clone();
        let handle = std::thread::spawn(move || {
            t.register();
            ready_tx.send(()).unwrap();
            rx.recv().unwrap();
            let (woke_on, beside) = (rustix::thread::sched_getcpu(), t.beside_sender());
            t.woken();
            (woke_on, beside, allowed(&cpus()))
        });
        ready_rx.recv().unwrap();
        let here = rustix::thread::sched_getcpu();
        rustix::thread::sched_setaffinity(None, &only(here)).unwrap();
        thread.sending(true);
        tx.send(()).unwrap();
        let (woke_on, beside, after) = handle.join().unwrap();
        rustix::thread::sched_setaffinity(None, &mine).unwrap();
        assert_eq!((woke_on, beside), (here, true));
        assert_eq!(after, allowed(&mine));
    }

    #[test]
    fn a_thread_kept_away_leaves_its_callers_cpu_and_gets_its_cpus_back() {
        let mine = cpus();
        let here = rustix::thread::sched_getcpu();
        if allowed(&mine).len() < 2 {
            // One CPU: nowhere else to go; it only yields.
            let away = Away::from(Some(here));
            assert!(!away.moved());
            return;
        }
        let away = Away::from(Some(here));
        let (during, on) = (allowed(&cpus()), rustix::thread::sched_getcpu());
        drop(away);
        let after = allowed(&cpus());
        assert!(!during.contains(&here), "{during:?} still holds the caller's CPU {here}");
        assert_ne!(on, here, "moved off the caller's CPU at once");
        assert_eq!(after, allowed(&mine), "its CPUs back once dropped");
        let unknown = Away::from(None);
        assert!(!unknown.moved() && allowed(&cpus()) == allowed(&mine), "no caller's CPU: nothing changes");
    }

    #[test]
    fn a_pinned_caller_may_run_only_on_its_cpu_until_it_is_dropped() {
        let mine = cpus();
        let here = rustix::thread::sched_getcpu();
        let pinned = Pinned::to(Some(here));
        let during = allowed(&cpus());
        drop(pinned);
        if allowed(&mine).len() > 1 {
            assert_eq!(during, vec![here]);
        } else {
            assert_eq!(during, allowed(&mine), "its only CPU: nothing to pin");
        }
        assert_eq!(allowed(&cpus()), allowed(&mine), "its CPUs back once dropped");
        drop(Pinned::to(None));
        assert_eq!(allowed(&cpus()), allowed(&mine), "no CPU named: nothing changes");
    }

    #[test]
    fn only_a_run_started_soon_after_a_result_counts_as_back_to_back() {
        let ms = 1_000_000;
        assert!(!soon_after(0, 5 * ms), "no result yet");
        assert!(soon_after(5 * ms, 5 * ms + ms / 2));
        assert!(!soon_after(5 * ms, 7 * ms), "2 ms later");
        // Any thread's report makes the next start near it.
        reported();
        assert_eq!(back_to_back(Some(3)), Some(3));
        assert_eq!(back_to_back(None), None);
    }

    #[test]
    fn a_sleeper_that_may_not_run_on_the_wakers_cpu_is_not_pulled() {
        let mine = cpus();
        let cpus_here = allowed(&mine);
        let here = rustix::thread::sched_getcpu();
        let Some(&elsewhere) = cpus_here.iter().find(|&&c| c != here) else {
            // One CPU: nothing else to sleep on, so nothing to check.
            return;
        };
        rustix::thread::sched_setaffinity(None, &only(here)).unwrap();
        let (s, wake, handle) = sleeper(Some(elsewhere));
        let pulled = s.pull();
        wake.send(pulled).unwrap();
        let (woke_on, after) = handle.join().unwrap();
        rustix::thread::sched_setaffinity(None, &mine).unwrap();
        assert!(!pulled);
        assert_eq!((woke_on, after), (elsewhere, vec![elsewhere]), "its own choice of CPU stands");
    }
}
