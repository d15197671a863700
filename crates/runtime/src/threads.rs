//! Guest threads, kept for the next run.
//!
//! A run's guest needs a thread with a large native stack (see
//! [`GUEST_THREAD_STACK`]). Spawning one per run costs a clone, the stack's mapping,
//! its first page faults and an munmap at the end, and the munmap makes the kernel
//! shoot down the other cores' TLBs. So a finished guest thread waits a while for the
//! next run instead; the most recently used one goes first, as its stack is warm. Guests on
//! standby (standby.rs) wait on the same kind of list ([`Waiters`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::engine::GUEST_THREAD_STACK;
use crate::forks::{Counted, Seen};
use crate::launch::Launcher;
use crate::wake::{Away, Change, Sleeper};

/// A run's work, handed to a guest thread.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

impl Launcher {
    /// Runs `job` on one of this launcher's waiting guest threads, or on a new one.
    /// `pull`: the caller waits next (wake.rs); then, should no thread wait, one finishing
    /// its last run takes the job if it is done within [`LaunchPolicy::finish_wait`].
    ///
    /// [`LaunchPolicy::finish_wait`]: crate::LaunchPolicy::finish_wait
    pub(crate) fn run_on_guest_thread(self: &Arc<Self>, job: impl FnOnce() + Send + 'static, pull: bool) -> std::io::Result<()> {
        let pull = pull && self.policy.wake_on_caller_cpu;
        let Err(mut job) = self.idle.offer(Box::new(job), |_| true, pull) else {
            return Ok(());
        };
        let finishing = || self.finishing.get() > 0;
        if pull && finishing() {
            match self.idle.offer_within(job, pull, self.policy.finish_wait, finishing) {
                Ok(()) => return Ok(()),
                Err(back) => job = back,
            }
        }
        let launcher = self.clone();
        std::thread::Builder::new()
            .name("wasi-python-guest".into())
            .stack_size(GUEST_THREAD_STACK)
            .spawn(move || launcher.serve(job))
            .map(|_| ())
    }

    /// A guest thread's life: `first`, then the jobs it is handed while it waits idle.
    fn serve(&self, first: Job) {
        let mut job = first;
        loop {
            job();
            match self.idle.wait((), self.policy.idle_threads, self.policy.thread_idle, || {}) {
                Some(next) => job = next,
                None => return,
            }
        }
    }
}

/// Held by a guest thread from its run's result until its instance is dropped: it keeps
/// the thread off its caller's CPU meanwhile (back to back, wake.rs), and a caller that
/// waits for its run's end and finds no idle thread waits up to the policy's
/// `finish_wait` for this one rather than start another: back to back, the caller
/// started its next run while the last run's thread was still dropping on the other CPU,
/// and each new thread took a pool slot and a stack of its own (docs/dev/perf-log/).
pub(crate) struct Finishing {
    counted: Option<Counted>,
    launcher: Arc<Launcher>,
    _away: Away,
}

impl Finishing {
    /// `away`: the CPU of a caller that runs again at once ([`Away`]).
    pub(crate) fn new(launcher: &Arc<Launcher>, away: Option<usize>) -> Finishing {
        Finishing { counted: Some(Counted::more(&launcher.finishing)), launcher: launcher.clone(), _away: Away::from(away) }
    }
}

impl Drop for Finishing {
    fn drop(&mut self) {
        drop(self.counted.take());
        // A caller waiting for this thread looks again: it may not come back to the idle
        // list (it makes a guest on standby or primes an instance next), and then the
        // caller starts a thread now rather than at the end of its wait.
        self.launcher.idle.wake_offers();
    }
}

/// Threads that wait for work, each with a key (what it can take) and the channel that
/// hands it a job: idle guest threads, and guests on standby (standby.rs). A job goes
/// to the most recent waiter whose key fits, whose caches and stack are warmest. A
/// waiter that tires of waiting leaves the list, unless a job was handed to it
/// meanwhile, which it then takes: no job is lost between the two.
pub(crate) struct Waiters<T, K> {
    list: Mutex<Vec<Waiter<T, K>>>,
    /// Notified when a waiter joins the list ([`Waiters::offer_within`]).
    listed: Condvar,
    ids: AtomicU64,
    /// In a forked child the list is the parent's, of threads the child does not have:
    /// forgotten at its first use there (forks.rs).
    seen: Seen,
}

/// One waiting thread: its key, the channel that hands it a job (and the change of its
/// CPUs, should it have been pulled to the waker's), and where it sleeps (wake.rs).
struct Waiter<T, K> {
    id: u64,
    key: K,
    tx: mpsc::SyncSender<(T, Option<Change>)>,
    sleeper: Option<Sleeper>,
}

impl<T, K> Waiters<T, K> {
    pub(crate) const fn new() -> Self {
        Waiters { list: Mutex::new(Vec::new()), listed: Condvar::new(), ids: AtomicU64::new(0), seen: Seen::new() }
    }

    /// The list, without the parent's waiters in a forked child.
    fn list(&self) -> parking_lot::MutexGuard<'_, Vec<Waiter<T, K>>> {
        let mut list = self.list.lock();
        if self.seen.stale() {
            list.clear();
        }
        list
    }

    /// Hands `job` to the most recent waiter whose key `fits`; gives it back if none
    /// takes it. `pull`: the calling thread waits next, so the waiter wakes on its CPU
    /// (wake.rs).
    pub(crate) fn offer(&self, mut job: T, fits: impl Fn(&K) -> bool, pull: bool) -> Result<(), T> {
        loop {
            let waiter = {
                let mut list = self.list();
                match list.iter().rposition(|w| fits(&w.key)) {
                    Some(at) => list.remove(at),
                    None => return Err(job),
                }
            };
            let pulled = if pull { waiter.sleeper.as_ref().and_then(Sleeper::pull) } else { None };
            match waiter.tx.send((job, pulled)) {
                Ok(()) => return Ok(()),
                // That waiter is gone; try the next.
                Err(mpsc::SendError((back, _))) => job = back,
            }
        }
    }

    /// [`Waiters::offer`] to any waiter, again as waiters join the list, while `worth` holds
    /// and for at most `within`; gives the job back if none took it.
    pub(crate) fn offer_within(&self, mut job: T, pull: bool, within: Duration, worth: impl Fn() -> bool) -> Result<(), T> {
        let until = std::time::Instant::now() + within;
        loop {
            job = match self.offer(job, |_| true, pull) {
                Ok(()) => return Ok(()),
                Err(job) => job,
            };
            let mut list = self.list();
            if !list.is_empty() {
                continue;
            }
            if !worth() || self.listed.wait_until(&mut list, until).timed_out() {
                return Err(job);
            }
        }
    }

    /// Wakes the callers of [`Waiters::offer_within`], which look again whether waiting is
    /// worth it.
    pub(crate) fn wake_offers(&self) {
        let _list = self.list.lock();
        self.listed.notify_all();
    }

    /// Waits up to `idle` for a job as a waiter with `key`; `None` at once if `max`
    /// wait already, and `None` if no job came (or [`Waiters::clear`] ended the wait).
    /// `listed` runs once this waiter can be offered jobs.
    pub(crate) fn wait(&self, key: K, max: usize, idle: Duration, listed: impl FnOnce()) -> Option<T> {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::sync_channel(1);
        let sleeper = Sleeper::here();
        {
            let mut list = self.list();
            if list.len() >= max {
                return None;
            }
            list.push(Waiter { id, key, tx, sleeper });
        }
        self.listed.notify_all();
        listed();
        let (job, pulled) = match rx.recv_timeout(idle) {
            Ok(got) => got,
            Err(_) => {
                let mut list = self.list();
                match list.iter().position(|w| w.id == id) {
                    Some(at) => {
                        list.remove(at);
                        return None;
                    }
                    // Taken meanwhile: its job is on the way (or it was cleared).
                    None => {
                        drop(list);
                        rx.recv().ok()?
                    }
                }
            }
        };
        if let Some(change) = pulled {
            change.undo();
        }
        Some(job)
    }

    /// How many wait.
    pub(crate) fn len(&self) -> usize {
        self.list().len()
    }

    /// Ends every wait (each returns `None`).
    pub(crate) fn clear(&self) {
        self.list().clear();
    }
}

impl<T, K> std::fmt::Debug for Waiters<T, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiters").field("waiting", &self.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_of_a_job(launcher: &Arc<Launcher>) -> std::thread::ThreadId {
        let (tx, rx) = mpsc::channel();
        launcher.run_on_guest_thread(move || tx.send(std::thread::current().id()).unwrap(), true).unwrap();
        let id = rx.recv().unwrap();
        // Wait until the thread has put itself back on the idle list.
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while launcher.idle.len() == 0 && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        id
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_waiter_pulled_to_the_offering_cpu_gets_its_cpus_back() {
        let cpus = || rustix::thread::sched_getaffinity(None).unwrap();
        let mine = cpus();
        let w: std::sync::Arc<Waiters<u32, ()>> = std::sync::Arc::new(Waiters::new());
        let w2 = w.clone();
        let waiter = std::thread::spawn(move || (w2.wait((), 8, Duration::from_secs(10), || {}), cpus()));
        while w.len() < 1 {
            std::thread::yield_now();
        }
        assert_eq!(w.offer(5, |_| true, true), Ok(()));
        let (job, after) = waiter.join().unwrap();
        assert_eq!(job, Some(5));
        assert_eq!(after, mine, "woken, it may run where it could before");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_waiter_restricted_while_it_waits_stays_restricted() {
        // Issue 37, defect 1: the CPUs it had when it began to wait came back once woken.
        use rustix::thread::{sched_getaffinity, sched_getcpu, sched_setaffinity};
        let cpus = || sched_getaffinity(None).unwrap();
        let mine = cpus();
        if mine.count() < 2 {
            return;
        }
        let here = sched_getcpu();
        sched_setaffinity(None, &crate::wake::only(here)).unwrap();
        let w: std::sync::Arc<Waiters<u32, ()>> = std::sync::Arc::new(Waiters::new());
        let w2 = w.clone();
        let (tid_tx, tid_rx) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            sched_setaffinity(None, &mine).unwrap();
            tid_tx.send(rustix::thread::gettid()).unwrap();
            (w2.wait((), 8, Duration::from_secs(10), || {}), cpus())
        });
        let tid = tid_rx.recv().unwrap();
        while w.len() < 1 {
            std::thread::yield_now();
        }
        // What `taskset -p` does to the waiting thread.
        sched_setaffinity(Some(tid), &crate::wake::only(here)).unwrap();
        assert_eq!(w.offer(5, |_| true, true), Ok(()));
        let (job, after) = waiter.join().unwrap();
        sched_setaffinity(None, &mine).unwrap();
        assert_eq!(job, Some(5));
        assert_eq!(after, crate::wake::only(here), "the restriction stands");
    }

    #[test]
    fn a_job_goes_to_the_latest_waiter_it_fits_and_a_tired_or_cleared_waiter_leaves() {
        let w: std::sync::Arc<Waiters<u32, u64>> = std::sync::Arc::new(Waiters::new());
        let long = Duration::from_secs(10);
        assert_eq!(w.offer(1, |_| true, false), Err(1), "no waiter: the job comes back");
        let waiter = |key: u64| {
            let w = w.clone();
            std::thread::spawn(move || w.wait(key, 8, long, || {}))
        };
        let small = waiter(10);
        while w.len() < 1 {
            std::thread::yield_now();
        }
        let large = waiter(20);
        while w.len() < 2 {
            std::thread::yield_now();
        }
        // The latest waiter (20) does not fit; the one before it does.
        assert_eq!(w.offer(7, |key| *key <= 15, true), Ok(()));
        assert_eq!(small.join().unwrap(), Some(7));
        assert_eq!(w.wait(30, 1, long, || {}), None, "max reached: no wait");
        w.clear();
        assert_eq!(large.join().unwrap(), None, "cleared: the wait ends");
        assert_eq!(w.wait(1, 8, Duration::from_millis(10), || {}), None);
        assert_eq!(w.len(), 0, "a waiter that tired left the list");
    }

    #[test]
    fn an_offer_within_a_while_goes_to_a_waiter_that_joins_meanwhile() {
        let w: std::sync::Arc<Waiters<u32, ()>> = std::sync::Arc::new(Waiters::new());
        let long = Duration::from_secs(10);
        let late = {
            let w = w.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                w.wait((), 8, long, || {})
            })
        };
        assert_eq!(w.offer_within(4, false, long, || true), Ok(()));
        assert_eq!(late.join().unwrap(), Some(4), "the waiter that joined took it");
        assert_eq!(w.offer_within(5, false, long, || false), Err(5), "not worth waiting: back at once");
        let started = std::time::Instant::now();
        assert_eq!(w.offer_within(6, false, Duration::from_millis(30), || true), Err(6));
        assert!(started.elapsed() >= Duration::from_millis(30), "waited its while, no longer");
        // No longer worth it, and woken: back long before its while is up.
        let worth = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let waker = {
            let (w, worth) = (w.clone(), worth.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                worth.store(false, Ordering::SeqCst);
                w.wake_offers();
            })
        };
        let started = std::time::Instant::now();
        assert_eq!(w.offer_within(7, false, long, || worth.load(Ordering::SeqCst)), Err(7));
        assert!(started.elapsed() < Duration::from_secs(5));
        waker.join().unwrap();
    }

    #[test]
    fn a_thread_counts_as_finishing_while_it_holds_the_guard() {
        let launcher = Launcher::new(crate::LaunchPolicy::default());
        let finishing = Finishing::new(&launcher, None);
        assert_eq!(launcher.finishing.get(), 1);
        drop(finishing);
        assert_eq!(launcher.finishing.get(), 0);
    }

    #[test]
    fn a_finished_thread_serves_the_next_job_of_its_own_launcher_only() {
        let launcher = Launcher::new(crate::LaunchPolicy::default());
        let first = thread_of_a_job(&launcher);
        assert_eq!(thread_of_a_job(&launcher), first);
        assert_eq!(thread_of_a_job(&launcher), first);
        // Another runtime's launcher has threads of its own.
        let other = Launcher::new(crate::LaunchPolicy::default());
        assert_ne!(thread_of_a_job(&other), first);
        assert_eq!(launcher.idle.len(), 1);
        assert_eq!(other.idle.len(), 1);
    }

    #[test]
    fn a_policy_of_no_idle_threads_keeps_none() {
        let launcher = Launcher::new(crate::LaunchPolicy { idle_threads: 0, ..crate::LaunchPolicy::default() });
        let (tx, rx) = mpsc::channel();
        launcher.run_on_guest_thread(move || tx.send(()).unwrap(), false).unwrap();
        rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(launcher.idle.len(), 0);
    }
}
