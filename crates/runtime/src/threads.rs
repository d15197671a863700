//! Guest threads, kept for the next run.
//!
//! A run's guest needs a thread with a large native stack (see
//! [`GUEST_THREAD_STACK`]). Spawning one per run costs a clone, the stack's mapping,
//! its first page faults and an munmap at the end, and the munmap makes the kernel
//! shoot down the other cores' TLBs. So a finished guest thread waits a while for the
//! next run instead; the most recently used one goes first, as its stack is warm. Guests on
//! standby (standby.rs) wait on the same kind of list ([`Waiters`]).

use std::sync::mpsc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::engine::GUEST_THREAD_STACK;
use crate::forks::{Count, Counted, Seen};
use crate::wake::Sleeper;

type Job = Box<dyn FnOnce() + Send>;

/// Threads kept waiting at most; more finish when their run does.
const MAX_IDLE: usize = 16;
/// How long an idle thread waits for a run before it ends.
const IDLE_FOR: Duration = Duration::from_secs(30);

/// Waiting threads, with the channel that hands each its next run.
static IDLE: Waiters<Job, ()> = Waiters::new();

/// Runs `job` on a waiting guest thread, or on a new one. `pull`: the caller waits next
/// (wake.rs).
pub(crate) fn run_on_guest_thread(job: impl FnOnce() + Send + 'static, pull: bool) -> std::io::Result<()> {
    let Err(job) = IDLE.offer(Box::new(job), |_| true, pull) else {
        return Ok(());
    };
    std::thread::Builder::new()
        .name("wasi-python-guest".into())
        .stack_size(GUEST_THREAD_STACK)
        .spawn(move || serve(job))
        .map(|_| ())
}

/// Guest threads at work: running a guest, dropping one or making one on standby (a
/// guest on standby that waits for its run is not at work).
static AT_WORK: Count = Count::new();

/// Whether no guest thread is at work. Only then is a run's thread woken on its caller's
/// CPU (wake.rs): a thread still dropping the last run's guest would be left behind the
/// caller there, while the other CPUs idle. Runs back to back then piled up on one CPU,
/// each on a new thread and pool slot: 200 runs ended with 322-511 MiB resident, against
/// 184-231 without the pull.
pub(crate) fn all_idle() -> bool {
    AT_WORK.get() <= 0
}

/// Counts this guest thread out of [`AT_WORK`] while it lives (a guest on standby's wait).
pub(crate) fn not_at_work() -> Counted {
    Counted::less(&AT_WORK)
}

fn serve(first: Job) {
    let mut job = first;
    loop {
        let at_work = Counted::more(&AT_WORK);
        job();
        drop(at_work);
        match IDLE.wait((), MAX_IDLE, IDLE_FOR, || {}) {
            Some(next) => job = next,
            None => return,
        }
    }
}

/// Threads that wait for work, each with a key (what it can take) and the channel that
/// hands it a job: idle guest threads, and guests on standby (standby.rs). A job goes
/// to the most recent waiter whose key fits, whose caches and stack are warmest. A
/// waiter that tires of waiting leaves the list, unless a job was handed to it
/// meanwhile, which it then takes: no job is lost between the two.
pub(crate) struct Waiters<T, K> {
    list: Mutex<Vec<Waiter<T, K>>>,
    ids: AtomicU64,
    /// In a forked child the list is the parent's, of threads the child does not have:
    /// forgotten at its first use there (forks.rs).
    seen: Seen,
}

/// One waiting thread: its key, the channel that hands it a job (and whether it was
/// pulled to the waker's CPU), and where it sleeps (wake.rs).
struct Waiter<T, K> {
    id: u64,
    key: K,
    tx: mpsc::SyncSender<(T, bool)>,
    sleeper: Option<Sleeper>,
}

impl<T, K> Waiters<T, K> {
    pub(crate) const fn new() -> Self {
        Waiters { list: Mutex::new(Vec::new()), ids: AtomicU64::new(0), seen: Seen::new() }
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
            let pulled = pull && waiter.sleeper.as_ref().is_some_and(Sleeper::pull);
            match waiter.tx.send((job, pulled)) {
                Ok(()) => return Ok(()),
                // That waiter is gone; try the next.
                Err(mpsc::SendError((back, _))) => job = back,
            }
        }
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
        if pulled && let Some(s) = &sleeper {
            s.release();
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

    fn thread_of_a_job() -> std::thread::ThreadId {
        let (tx, rx) = mpsc::channel();
        run_on_guest_thread(move || tx.send(std::thread::current().id()).unwrap(), true).unwrap();
        let id = rx.recv().unwrap();
        // Wait until the thread has put itself back on the idle list.
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while IDLE.len() == 0 && std::time::Instant::now() < until {
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
    fn a_finished_thread_serves_the_next_job() {
        let first = thread_of_a_job();
        assert_eq!(thread_of_a_job(), first);
        assert_eq!(thread_of_a_job(), first);
    }
}
