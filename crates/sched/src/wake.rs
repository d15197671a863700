//! Waking a waiting thread on its waker's CPU, when the waker is about to wait in turn.
//!
//! A fresh run's caller hands the run to a guest thread that sleeps (a guest on standby,
//! or an idle guest thread) and then sleeps itself until the result. Linux wakes the
//! sleeper on an idle CPU if there is one; on a small VM an idle vCPU is halted, and
//! starting it again takes tens of microseconds: a guest on standby got its job 38-157 us
//! after it was sent, runs 5 ms apart (docs/dev/perf-log/). The CPU of the
//! caller, which is about to sleep, is free at once. So the caller first lets the
//! sleeper run only on its own CPU, then wakes it; the woken thread gives itself back
//! its CPUs as its first act, so only where it wakes changes, not where it may run.
//! What the kernel does for a synchronous wake-up (a pipe's), which a futex cannot ask.
//!
//! Only for a waker that waits next (the runtime's `Runtime::start`, whose caller waits
//! for the result): one that goes on (`start_then`, `run_async`) would share its CPU
//! with the guest. A sleeper that may not run on the waker's CPU is woken as before.
//! Elsewhere than on Linux, nothing changes.
//!
//! Back to back (in the runtime, a run started within the launch policy's
//! `back_to_back` of the last result), the rest is placed too: the run's thread, once
//! the result is out, leaves the caller's CPU for the work that follows ([`Away`]).
//! Should the embedder ask (the launch policy's `pin_caller`), the caller also waits
//! [`Pinned`] to its CPU so that it wakes there and not where that work goes. The
//! caller's CPU then serves the caller and its runs, the other CPUs the drops.
//!
//! **Invariant:** only the runtime's own threads are moved unless the embedder asks, and
//! what the embedder sets is never undone. Every change is a [`Change`]: the CPUs read
//! just before it and those set; it is undone only while the thread's CPUs are still
//! exactly those set, so a mask set meanwhile (by the embedder, `taskset -a`, a cpuset)
//! stands, and a thread whose CPUs would not change is left alone. (A mask set between
//! the read and the change, a window of one system call, is not seen; nor one set to the
//! very CPUs the change set.)

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

#[cfg(target_os = "linux")]
use rustix::thread::{CpuSet, Pid, sched_getaffinity, sched_setaffinity};

/// A change of a thread's CPUs made by the runtime, to be undone on that thread: the CPUs
/// read just before it and those set (see the module's invariant).
#[derive(Clone, Copy)]
#[must_use]
pub struct Change {
    #[cfg(target_os = "linux")]
    before: CpuSet,
    #[cfg(target_os = "linux")]
    set: CpuSet,
}

impl Change {
    /// Sets the CPUs of `thread` (`None`: the calling thread) to what `to` makes of those
    /// it has now; `None`, and nothing changed, if `to` gives `None` or the same CPUs, or
    /// a call fails.
    #[cfg(target_os = "linux")]
    fn make(thread: Option<Pid>, to: impl FnOnce(&CpuSet) -> Option<CpuSet>) -> Option<Change> {
        let before = sched_getaffinity(thread).ok()?;
        let set = to(&before).filter(|set| *set != before)?;
        sched_setaffinity(thread, &set).ok()?;
        Some(Change { before, set })
    }

    /// On the changed thread: its CPUs as they were, if they are still those set; else
    /// nothing (they were set again meanwhile, and that stands). Should the old CPUs no
    /// longer be allowed (its cpuset changed meanwhile), every CPU the kernel allows it.
    #[cfg(target_os = "linux")]
    pub fn undo(&self) {
        if sched_getaffinity(None).ok() != Some(self.set) {
            return;
        }
        if sched_setaffinity(None, &self.before).is_err() {
            let mut all = CpuSet::new();
            for cpu in 0..CpuSet::MAX_CPU {
                all.set(cpu);
            }
            let _ = sched_setaffinity(None, &all);
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub fn undo(&self) {}
}

impl std::fmt::Debug for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Change")
    }
}

/// A thread about to wait, as a waker finds it.
#[derive(Debug, Clone, Copy)]
pub struct Sleeper {
    #[cfg(target_os = "linux")]
    thread: Pid,
}

impl Sleeper {
    /// The calling thread, about to wait.
    #[cfg(target_os = "linux")]
    pub fn here() -> Option<Sleeper> {
        Some(Sleeper { thread: rustix::thread::gettid() })
    }

    #[cfg(not(target_os = "linux"))]
    pub fn here() -> Option<Sleeper> {
        None
    }

    /// Before waking it: lets the sleeper run only on the calling thread's CPU, if it may
    /// run there now and elsewhere too. The change, if made: the woken sleeper undoes it
    /// ([`Change::undo`]).
    #[cfg(target_os = "linux")]
    pub fn pull(&self) -> Option<Change> {
        let cpu = rustix::thread::sched_getcpu();
        Change::make(Some(self.thread), |now| (cpu < CpuSet::MAX_CPU && now.is_set(cpu)).then(|| only(cpu)))
    }

    #[cfg(not(target_os = "linux"))]
    pub fn pull(&self) -> Option<Change> {
        None
    }
}

/// Held by a guest thread from the moment its run's result is out until the work that
/// follows is done (the instance dropped, the pool slot reset, the private folders
/// checked: 100-150 us): that thread may not run on its caller's CPU meanwhile, where the
/// caller goes on (and, back to back, its next run's thread is pulled). Left where it
/// was, that work met the next run on the caller's CPU while the other CPUs idled; moved
/// off it, runs of `print(1)` back to back took 214-218 us (p50) instead of 320-331, and
/// 316-321 us of CPU each instead of 399-421 (docs/dev/perf-log/). Its
/// CPUs back when dropped, if still those it was given. With no other CPU it may use, or no caller's CPU given (a run
/// whose caller goes on, or one after a pause: the runtime's `Launcher::back_to_back`),
/// it yields once instead,
/// so the caller it just woke, often put on this very CPU, runs before that work: a run
/// that imported its tools and called one, 5 ms apart, had its result at `run()` 520-650
/// us after its end without the yield, and 20 us with it.
#[must_use]
#[derive(Debug)]
pub struct Away {
    _change: Restore,
}

impl Away {
    /// Keeps the calling thread off `caller`, the CPU its caller waited on.
    pub fn from(caller: Option<usize>) -> Away {
        let change = caller.and_then(avoid);
        if change.is_none() {
            std::thread::yield_now();
        }
        Away { _change: Restore(change) }
    }

    /// Whether it changed where the thread may run.
    #[cfg(test)]
    fn moved(&self) -> bool {
        self._change.0.is_some()
    }
}

/// A change of the calling thread's CPUs, undone when dropped: what [`Away`] and
/// [`Pinned`] hold (`None`: nothing was changed).
#[derive(Debug)]
struct Restore(Option<Change>);

impl Drop for Restore {
    fn drop(&mut self) {
        if let Some(change) = &self.0 {
            change.undo();
        }
    }
}

/// Lets the calling thread run only on its CPUs other than `cpu`; `None`, and nothing
/// changed, if it has no other.
#[cfg(target_os = "linux")]
fn avoid(cpu: usize) -> Option<Change> {
    Change::make(None, |now| {
        let mut others = *now;
        if cpu < CpuSet::MAX_CPU {
            others.unset(cpu);
        }
        (others.count() > 0).then_some(others)
    })
}

#[cfg(not(target_os = "linux"))]
fn avoid(_cpu: usize) -> Option<Change> {
    None
}

/// Lets the calling thread run only on `cpu`, if one of its CPUs and not its only one;
/// `None`, and nothing changed, if not.
#[cfg(target_os = "linux")]
fn keep_to(cpu: usize) -> Option<Change> {
    Change::make(None, |now| (cpu < CpuSet::MAX_CPU && now.is_set(cpu)).then(|| only(cpu)))
}

#[cfg(not(target_os = "linux"))]
fn keep_to(_cpu: usize) -> Option<Change> {
    None
}

/// Held by a caller while it waits for its run's result: it may wake only on `cpu`, the
/// CPU it waited on when it started the run (where the run's thread was woken). Linux
/// wakes a thread on an idle CPU if its own is busy, and its own is busy at that moment
/// (the run's thread wakes it from there); so the caller often woke on the other CPU,
/// and the run's thread, leaving the caller's CPU ([`Away`]), went to the very CPU the
/// caller was on. Its CPUs back when dropped (before the caller runs anything else), if
/// still those it was pinned to.
///
/// The caller's thread is the embedder's: pinned only if the embedder asks
/// (the launch policy's `pin_caller`); otherwise [`Pinned::to`] changes nothing.
#[must_use]
#[derive(Debug)]
pub struct Pinned {
    _change: Restore,
}

impl Pinned {
    /// Pins the calling thread, a caller's, to `cpu` if the embedder asked for it (`asked`:
    /// the runtime's `LaunchPolicy::pin_caller`).
    pub fn to(cpu: Option<usize>, asked: bool) -> Pinned {
        Pinned::keep(cpu.filter(|_| asked))
    }

    /// Pins the calling thread to `cpu` (if one of its CPUs, and not its only one).
    fn keep(cpu: Option<usize>) -> Pinned {
        Pinned { _change: Restore(cpu.and_then(keep_to)) }
    }
}

/// Moves the calling thread, one of the runtime's, to `cpu` now, if it may run there;
/// where it may run is unchanged after.
pub fn move_to(cpu: Option<usize>) {
    drop(Pinned::keep(cpu));
}

/// The calling thread's CPU, where known.
pub fn this_cpu() -> Option<usize> {
    #[cfg(target_os = "linux")]
    return Some(rustix::thread::sched_getcpu());
    #[cfg(not(target_os = "linux"))]
    None
}

/// The set of the one CPU `cpu`.
#[cfg(target_os = "linux")]
pub fn only(cpu: usize) -> CpuSet {
    let mut one = CpuSet::new();
    one.set(cpu);
    one
}

/// A thread that waits for one command after another (a session's), pulled by the
/// senders that wait for its answer.
#[derive(Debug)]
pub struct Pullable {
    sleeper: OnceLock<Sleeper>,
    /// The change a sender made, which the thread undoes once woken.
    pulled: parking_lot::Mutex<Option<Change>>,
    /// The CPU the last command was sent from (`usize::MAX`: unknown).
    sender_cpu: AtomicUsize,
}

impl Default for Pullable {
    fn default() -> Self {
        Pullable { sleeper: OnceLock::new(), pulled: parking_lot::Mutex::new(None), sender_cpu: AtomicUsize::new(usize::MAX) }
    }
}

impl Pullable {
    /// On the thread itself, once: senders may pull it from now on.
    pub fn register(&self) {
        if let Some(s) = Sleeper::here() {
            let _ = self.sleeper.set(s);
        }
    }

    /// By a sender about to send and then wait: notes its CPU, and pulls the thread
    /// there if it sleeps.
    pub fn sending(&self, asleep: bool) {
        let cpu = this_cpu();
        self.sender_cpu.store(cpu.unwrap_or(usize::MAX), Ordering::SeqCst);
        if asleep
            && let Some(s) = self.sleeper.get()
            && let Some(change) = s.pull()
        {
            *self.pulled.lock() = Some(change);
        }
    }

    /// On the thread: whether it runs on the CPU its last command came from (a spin
    /// there must yield to the sender).
    pub fn beside_sender(&self) -> bool {
        let sender = self.sender_cpu.load(Ordering::SeqCst);
        this_cpu().is_some_and(|cpu| cpu == sender)
    }

    /// On the thread, after each command it received: its CPUs back if it was pulled
    /// (and they were not set again meanwhile).
    pub fn woken(&self) {
        let pulled = self.pulled.lock().take();
        if let Some(change) = pulled {
            change.undo();
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn cpus() -> CpuSet {
        sched_getaffinity(None).unwrap()
    }

    fn allowed(set: &CpuSet) -> Vec<usize> {
        (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()
    }

    /// This thread's CPU, and another it may run on (`None` with one CPU).
    fn here_and_elsewhere() -> (usize, Option<usize>) {
        let here = rustix::thread::sched_getcpu();
        (here, allowed(&cpus()).into_iter().find(|&c| c != here))
    }

    /// What a sleeper reports once woken: the CPU it woke on, and the CPUs it may run on
    /// once it undid the change it was handed (if any).
    type Woken = std::thread::JoinHandle<(usize, Vec<usize>)>;

    /// A sleeper on its own thread (only on CPU `pinned`, if given): sends itself, waits for
    /// the change a waker made (if any), undoes it, then reports where it woke and may run.
    fn sleeper(pinned: Option<usize>) -> (Sleeper, mpsc::Sender<Option<Change>>, Woken) {
        let (stx, srx) = mpsc::channel();
        let (wtx, wrx) = mpsc::channel::<Option<Change>>();
        let handle = std::thread::spawn(move || {
            if let Some(cpu) = pinned {
                sched_setaffinity(None, &only(cpu)).unwrap();
            }
            stx.send(Sleeper::here().unwrap()).unwrap();
            let pulled = wrx.recv().unwrap();
            let woke_on = rustix::thread::sched_getcpu();
            if let Some(change) = pulled {
                change.undo();
            }
            (woke_on, allowed(&cpus()))
        });
        (srx.recv().unwrap(), wtx, handle)
    }

    fn cpus_of(s: &Sleeper) -> Vec<usize> {
        allowed(&sched_getaffinity(Some(s.thread)).unwrap())
    }

    #[test]
    fn a_pulled_sleeper_wakes_on_the_wakers_cpu_and_gets_its_cpus_back() {
        let mine = cpus();
        let (s, wake, handle) = sleeper(None);
        let before = cpus_of(&s);
        // Pin the waker too, so the CPU it names is still its own when it wakes the sleeper.
        let here = rustix::thread::sched_getcpu();
        sched_setaffinity(None, &only(here)).unwrap();
        let change = s.pull();
        let pulled = cpus_of(&s);
        wake.send(change).unwrap();
        let (woke_on, after) = handle.join().unwrap();
        sched_setaffinity(None, &mine).unwrap();
        if before.len() > 1 {
            assert!(change.is_some(), "the sleeper may run on every CPU this thread may");
            assert_eq!(pulled, vec![here], "asleep, it may run only on the waker's CPU");
            assert_eq!(woke_on, here);
        }
        assert_eq!(after, before, "released, it may run where it could before");
    }

    #[test]
    fn a_sleeper_whose_cpus_were_set_while_it_slept_keeps_them() {
        // Defect 1 of issue 37: the CPUs it had when it began to wait came back.
        let mine = cpus();
        let (here, elsewhere) = here_and_elsewhere();
        if elsewhere.is_none() {
            return;
        }
        let (s, wake, handle) = sleeper(None);
        sched_setaffinity(None, &only(here)).unwrap();
        // The embedder restricts the sleeper to this CPU: pulling it there changes nothing.
        sched_setaffinity(Some(s.thread), &only(here)).unwrap();
        let change = s.pull();
        wake.send(change).unwrap();
        let (_, after) = handle.join().unwrap();
        sched_setaffinity(None, &mine).unwrap();
        assert!(change.is_none(), "already only there: nothing to change");
        assert_eq!(after, vec![here], "the embedder's restriction stands");
    }

    #[test]
    fn a_sleeper_whose_cpus_are_set_once_pulled_keeps_them() {
        let mine = cpus();
        let (here, Some(elsewhere)) = here_and_elsewhere() else {
            return;
        };
        let (s, wake, handle) = sleeper(None);
        sched_setaffinity(None, &only(here)).unwrap();
        let change = s.pull();
        assert!(change.is_some());
        // Set between the pull and the wake: the woken thread must not undo it.
        sched_setaffinity(Some(s.thread), &only(elsewhere)).unwrap();
        wake.send(change).unwrap();
        let (_, after) = handle.join().unwrap();
        sched_setaffinity(None, &mine).unwrap();
        assert_eq!(after, vec![elsewhere]);
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
        sched_setaffinity(None, &only(here)).unwrap();
        thread.sending(true);
        tx.send(()).unwrap();
        let (woke_on, beside, after) = handle.join().unwrap();
        sched_setaffinity(None, &mine).unwrap();
        assert_eq!((woke_on, beside), (here, true));
        assert_eq!(after, allowed(&mine));
    }

    #[test]
    fn a_pullable_thread_restricted_after_it_registered_stays_restricted() {
        // Defect 1 of issue 37: `register` kept the CPUs of the thread's start, and each
        // wake gave them back.
        let mine = cpus();
        let (here, Some(_)) = here_and_elsewhere() else {
            return;
        };
        let thread = std::sync::Arc::new(Pullable::default());
        let (ready_tx, ready_rx) = mpsc::channel();
        let (tx, rx) = mpsc::channel::<()>();
        let t = thread.clone();
        let handle = std::thread::spawn(move || {
            t.register();
            ready_tx.send(rustix::thread::gettid()).unwrap();
            let mut seen = Vec::new();
            for () in rx {
                t.woken();
                seen.push(allowed(&cpus()));
            }
            seen
        });
        let tid = ready_rx.recv().unwrap();
        sched_setaffinity(None, &only(here)).unwrap();
        sched_setaffinity(Some(tid), &only(here)).unwrap();
        for _ in 0..3 {
            thread.sending(true);
            tx.send(()).unwrap();
        }
        drop(tx);
        let seen = handle.join().unwrap();
        sched_setaffinity(None, &mine).unwrap();
        assert_eq!(seen, vec![vec![here]; 3]);
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
    fn a_thread_kept_away_whose_cpus_are_set_meanwhile_keeps_them() {
        let mine = cpus();
        let (here, Some(_)) = here_and_elsewhere() else {
            return;
        };
        let away = Away::from(Some(here));
        assert!(away.moved());
        sched_setaffinity(None, &only(here)).unwrap();
        drop(away);
        let after = allowed(&cpus());
        sched_setaffinity(None, &mine).unwrap();
        assert_eq!(after, vec![here], "set while away: it stands");
    }

    #[test]
    fn a_pinned_caller_may_run_only_on_its_cpu_until_it_is_dropped() {
        let mine = cpus();
        let here = rustix::thread::sched_getcpu();
        let pinned = Pinned::keep(Some(here));
        let during = allowed(&cpus());
        drop(pinned);
        if allowed(&mine).len() > 1 {
            assert_eq!(during, vec![here]);
        } else {
            assert_eq!(during, allowed(&mine), "its only CPU: nothing to pin");
        }
        assert_eq!(allowed(&cpus()), allowed(&mine), "its CPUs back once dropped");
        drop(Pinned::keep(None));
        assert_eq!(allowed(&cpus()), allowed(&mine), "no CPU named: nothing changes");
    }

    #[test]
    fn a_pinned_caller_whose_cpus_another_thread_sets_meanwhile_keeps_them() {
        // Defect 2 of issue 37: the CPUs read before pinning came back over the new ones.
        let mine = cpus();
        let (here, Some(elsewhere)) = here_and_elsewhere() else {
            return;
        };
        let pinned = Pinned::keep(Some(here));
        let me = rustix::thread::gettid();
        std::thread::spawn(move || sched_setaffinity(Some(me), &only(elsewhere)).unwrap()).join().unwrap();
        drop(pinned);
        let after = allowed(&cpus());
        sched_setaffinity(None, &mine).unwrap();
        assert_eq!(after, vec![elsewhere]);
    }

    #[test]
    fn a_caller_is_pinned_only_if_the_embedder_asks() {
        let mine = cpus();
        let here = rustix::thread::sched_getcpu();
        let pinned = Pinned::to(Some(here), false);
        let during = allowed(&cpus());
        drop(pinned);
        assert_eq!(during, allowed(&mine));
    }

    #[test]
    fn a_sleeper_that_may_not_run_on_the_wakers_cpu_is_not_pulled() {
        let mine = cpus();
        let (here, Some(elsewhere)) = here_and_elsewhere() else {
            // One CPU: nothing else to sleep on, so nothing to check.
            return;
        };
        sched_setaffinity(None, &only(here)).unwrap();
        let (s, wake, handle) = sleeper(Some(elsewhere));
        let pulled = s.pull();
        let was_pulled = pulled.is_some();
        wake.send(pulled).unwrap();
        let (woke_on, after) = handle.join().unwrap();
        sched_setaffinity(None, &mine).unwrap();
        assert!(!was_pulled);
        assert_eq!((woke_on, after), (elsewhere, vec![elsewhere]), "its own choice of CPU stands");
    }
}
