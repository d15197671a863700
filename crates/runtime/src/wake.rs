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
