//! Threads kept for the next job.
//!
//! A run's guest needs a thread with a large native stack. Spawning one per run costs a
//! clone, the stack's mapping, its first page faults and an munmap at the end, and the
//! munmap makes the kernel shoot down the other cores' TLBs. So a thread that finished
//! its job waits a while for the next one instead ([`KeptThreads`]); the most recently
//! used one goes first, as its stack is warm. Guests on standby (the runtime's
//! standby.rs) wait on the same kind of list ([`Waiters`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::Job;
use crate::forks::{Count, Counted, Seen};
use crate::wake::{Away, Change, Sleeper};

/// How long a kept thread (or, in the runtime, a session) waits idle before it gives
/// back what it does not need between jobs (its stack's pages below its frame): far
/// longer than the pause between runs back to back, which would fault the pages in
/// again, and as long as the runtime's idle pool slots wait before they give theirs.
pub const REST: Duration = Duration::from_secs(1);

/// The next message within `wait`; should none come within `rest` (shorter than `wait`),
/// runs `resting` once first, then waits the rest of `wait`. A kept thread's and a
/// session's wait between jobs.
pub fn recv_resting<T>(rx: &mpsc::Receiver<T>, wait: Duration, rest: Duration, resting: impl FnOnce()) -> Result<T, mpsc::RecvTimeoutError> {
    if rest >= wait {
        return rx.recv_timeout(wait);
    }
    let started = std::time::Instant::now();
    match rx.recv_timeout(rest) {
        Err(mpsc::RecvTimeoutError::Timeout) => {
            resting();
            rx.recv_timeout(wait.saturating_sub(started.elapsed()))
        }
        other => other,
    }
}

/// Threads kept for the next job: at most `max_idle` wait idle, each for `idle_for`,
/// then it ends. Each owner has its own (the runtime's launcher): two share no thread.
pub struct KeptThreads {
    name: String,
    stack: usize,
    max_idle: usize,
    idle_for: Duration,
    finish_wait: Duration,
    /// Threads waiting for their next job.
    idle: Waiters<Job, ()>,
    /// Threads whose job's result is out, still finishing it ([`Finishing`]).
    finishing: Arc<Count>,
}

impl std::fmt::Debug for KeptThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptThreads").field("idle", &self.idle.len()).field("finishing", &self.finishing()).finish()
    }
}

impl KeptThreads {
    /// Threads named `name` on stacks of `stack` bytes; at most `max_idle` wait idle, each
    /// for `idle_for`; a caller that waits and finds none idle waits up to `finish_wait`
    /// for one finishing its last job ([`KeptThreads::run`]).
    pub fn new(name: &str, stack: usize, max_idle: usize, idle_for: Duration, finish_wait: Duration) -> Arc<KeptThreads> {
        Arc::new(KeptThreads {
            name: name.to_owned(),
            stack,
            max_idle,
            idle_for,
            finish_wait,
            idle: Waiters::new(),
            finishing: Arc::new(Count::new()),
        })
    }

    /// Runs `job` on one of these waiting threads, or on a new one. `pull`: the caller
    /// waits next (wake.rs); then, should no thread wait, one finishing its last job
    /// takes this one if it is done within `finish_wait`.
    pub fn run(self: &Arc<Self>, job: impl FnOnce() + Send + 'static, pull: bool) -> std::io::Result<()> {
        let Err(mut job) = self.idle.offer(Box::new(job), |_| true, pull) else {
            return Ok(());
        };
        let finishing = || self.finishing.get() > 0;
        if pull && finishing() {
            match self.idle.offer_within(job, pull, self.finish_wait, finishing) {
                Ok(()) => return Ok(()),
                Err(back) => job = back,
            }
        }
        let threads = self.clone();
        std::thread::Builder::new()
            .name(self.name.clone())
            .stack_size(self.stack)
            .spawn(move || threads.serve(job))
            .map(|_| ())
    }

    /// A kept thread's life: `first`, then the jobs it is handed while it waits idle. A
    /// thread idle for [`REST`] gives back its stack below its frame (stack.rs): a deep
    /// run's pages do not stay with it for the rest of its wait.
    fn serve(&self, first: Job) {
        let mut job = first;
        loop {
            job();
            let rest = || {
                crate::stack::give_back();
            };
            match self.idle.wait_resting((), self.max_idle, self.idle_for, || {}, REST, rest) {
                Some(next) => job = next,
                None => return,
            }
        }
    }

    /// How many threads wait idle now.
    pub fn idle(&self) -> usize {
        self.idle.len()
    }

    /// How many threads of this process hold a [`Finishing`] now.
    pub fn finishing(&self) -> i64 {
        self.finishing.get()
    }

    /// Ends every idle thread's wait.
    pub fn clear(&self) {
        self.idle.clear();
    }
}

/// Held by a kept thread from its job's result until the rest of its work is done (in
/// the runtime: the instance dropped): it keeps the thread off its caller's CPU meanwhile
/// (back to back, wake.rs), and a caller that waits for its job's end and finds no idle
/// thread waits up to the pool's `finish_wait` for this one rather than start another:
/// back to back, the caller started its next run while the last run's thread was still
/// dropping on the other CPU, and each new thread took a pool slot and a stack of its
/// own (docs/dev/perf-log/).
pub struct Finishing {
    counted: Option<Counted>,
    threads: Arc<KeptThreads>,
    _away: Away,
}

impl std::fmt::Debug for Finishing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Finishing")
    }
}

impl Finishing {
    /// `away`: the CPU of a caller that runs again at once ([`Away`]).
    pub fn new(threads: &Arc<KeptThreads>, away: Option<usize>) -> Finishing {
        Finishing { counted: Some(Counted::more(&threads.finishing)), threads: threads.clone(), _away: Away::from(away) }
    }
}

impl Drop for Finishing {
    fn drop(&mut self) {
        drop(self.counted.take());
        // A caller waiting for this thread looks again: it may not come back to the idle
        // list (in the runtime it makes a guest on standby or primes an instance next),
        // and then the caller starts a thread now rather than at the end of its wait.
        self.threads.idle.wake_offers();
    }
}

/// Threads that wait for work, each with a key (what it can take) and the channel that
/// hands it a job: idle kept threads, and, in the runtime, guests on standby. A job goes
/// to the most recent waiter whose key fits, whose caches and stack are warmest. A
/// waiter that tires of waiting leaves the list, unless a job was handed to it
/// meanwhile, which it then takes: no job is lost between the two.
pub struct Waiters<T, K> {
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

impl<T, K> Default for Waiters<T, K> {
    fn default() -> Self {
        Waiters::new()
    }
}

impl<T, K> Waiters<T, K> {
    pub const fn new() -> Self {
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
    pub fn offer(&self, mut job: T, fits: impl Fn(&K) -> bool, pull: bool) -> Result<(), T> {
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
    pub fn offer_within(&self, mut job: T, pull: bool, within: Duration, worth: impl Fn() -> bool) -> Result<(), T> {
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
    pub fn wake_offers(&self) {
        let _list = self.list.lock();
        self.listed.notify_all();
    }

    /// Waits up to `idle` for a job as a waiter with `key`; `None` at once if `max`
    /// wait already, and `None` if no job came (or [`Waiters::clear`] ended the wait).
    /// `listed` runs once this waiter can be offered jobs.
    pub fn wait(&self, key: K, max: usize, idle: Duration, listed: impl FnOnce()) -> Option<T> {
        self.wait_resting(key, max, idle, listed, idle, || {})
    }

    /// [`Waiters::wait`], running `resting` once if no job came within `rest` (and the
    /// wait goes on, up to `idle` in all); a job offered meanwhile waits for it.
    pub fn wait_resting(&self, key: K, max: usize, idle: Duration, listed: impl FnOnce(), rest: Duration, resting: impl FnOnce()) -> Option<T> {
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
        let (job, pulled) = match recv_resting(&rx, idle, rest, resting) {
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
    pub fn len(&self) -> usize {
        self.list().len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ends every wait (each returns `None`).
    pub fn clear(&self) {
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

    fn kept(max_idle: usize) -> Arc<KeptThreads> {
        KeptThreads::new("kept-test", 256 << 10, max_idle, Duration::from_secs(30), Duration::from_millis(2))
    }

    fn thread_of_a_job(threads: &Arc<KeptThreads>) -> std::thread::ThreadId {
        let (tx, rx) = mpsc::channel();
        threads.run(move || tx.send(std::thread::current().id()).unwrap(), true).unwrap();
        let id = rx.recv().unwrap();
        // Wait until the thread has put itself back on the idle list.
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while threads.idle() == 0 && std::time::Instant::now() < until {
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
        while w.is_empty() {
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
        while w.is_empty() {
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
        while w.is_empty() {
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
    fn a_resting_waiter_rests_once_then_takes_its_job() {
        let w: std::sync::Arc<Waiters<u32, ()>> = std::sync::Arc::new(Waiters::new());
        let rested = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let waiter = {
            let (w, rested) = (w.clone(), rested.clone());
            std::thread::spawn(move || {
                let rest = || {
                    rested.fetch_add(1, Ordering::SeqCst);
                };
                w.wait_resting((), 8, Duration::from_secs(30), || {}, Duration::from_millis(1), rest)
            })
        };
        while rested.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(w.len(), 1, "resting, it still waits for a job");
        assert_eq!(w.offer(9, |_| true, false), Ok(()));
        assert_eq!(waiter.join().unwrap(), Some(9));
        assert_eq!(rested.load(Ordering::SeqCst), 1);
        // A job that comes before the rest: no rest.
        let rested2 = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let waiter = {
            let (w, rested2) = (w.clone(), rested2.clone());
            std::thread::spawn(move || {
                let rest = || {
                    rested2.fetch_add(1, Ordering::SeqCst);
                };
                w.wait_resting((), 8, Duration::from_secs(30), || {}, Duration::from_secs(20), rest)
            })
        };
        while w.is_empty() {
            std::thread::yield_now();
        }
        assert_eq!(w.offer(3, |_| true, false), Ok(()));
        assert_eq!(waiter.join().unwrap(), Some(3));
        assert_eq!(rested2.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_thread_counts_as_finishing_while_it_holds_the_guard() {
        let threads = kept(16);
        let finishing = Finishing::new(&threads, None);
        assert_eq!(threads.finishing(), 1);
        drop(finishing);
        assert_eq!(threads.finishing(), 0);
    }

    #[test]
    fn a_finished_thread_serves_the_next_job_of_its_own_pool_only() {
        let threads = kept(16);
        let first = thread_of_a_job(&threads);
        assert_eq!(thread_of_a_job(&threads), first);
        assert_eq!(thread_of_a_job(&threads), first);
        // Another owner's pool has threads of its own.
        let other = kept(16);
        assert_ne!(thread_of_a_job(&other), first);
        assert_eq!(threads.idle(), 1);
        assert_eq!(other.idle(), 1);
        threads.clear();
        other.clear();
    }

    #[test]
    fn a_pool_of_no_idle_threads_keeps_none() {
        let threads = kept(0);
        let (tx, rx) = mpsc::channel();
        threads.run(move || tx.send(()).unwrap(), false).unwrap();
        rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(threads.idle(), 0);
    }
}
