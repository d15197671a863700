//! Waiting, within bounds, for a call that runs on another thread: a tool's, or a
//! mount provider's in the runtime.
//!
//! The host cannot interrupt embedder code; it can only stop waiting for it. [`Bound::call`]
//! hands the call to a thread, waits for its answer until the bound's instant or its stop,
//! and then abandons the call: it runs on to its end, unseen, and its answer is dropped.
//! An [`Abandonment`] counts it from the moment it is left until it ends.
//!
//! A call's fate (answered, ended without an answer, abandoned) is decided once, under one
//! lock: an answer that arrives as the waiter gives up is taken, and an abandoned call is
//! counted once and uncounted once, when it ends, even by a panic.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// How often a waiting call asks its stop.
const POLL: Duration = Duration::from_millis(2);

/// A call's work, handed to the thread that runs it.
pub type Job = Box<dyn FnOnce() + Send>;

/// Counts the calls their waiters left running.
///
/// The door counts tool calls in the run's budget (`Budget::abandon`, capped per run);
/// the runtime counts provider calls across the process. Each side checks its own cap
/// before it starts a call.
pub trait Abandonment: Send + Sync + 'static {
    /// The waiter gave up on a call that still runs. Called once per abandoned call, while
    /// the call's fate is locked, so before its [`finished`](Abandonment::finished).
    fn abandon(&self);
    /// A call counted by [`abandon`](Abandonment::abandon) has ended (or panicked).
    fn finished(&self);
}

/// Why a call gave no answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Unanswered {
    /// The bound's instant came first. The call was abandoned and counted.
    #[error("the call timed out")]
    TimedOut,
    /// The bound's stop said so. The call was abandoned and counted.
    #[error("the call was stopped")]
    Cancelled,
    /// The thread could not be started, or refused the job: the call never ran.
    #[error("no thread could be started for the call")]
    NotStarted(#[source] std::io::Error),
    /// The call's thread ended without an answer (the call panicked), or its job was
    /// dropped unrun.
    #[error("the call's thread ended without an answer")]
    NoAnswer,
}

/// How long to wait for a call's answer.
#[derive(Clone, Copy)]
pub struct Bound<'a> {
    /// Give up at this instant ([`Unanswered::TimedOut`]); `None`: no time limit.
    pub until: Option<Instant>,
    /// Asked every 2 ms while waiting; `true` gives up ([`Unanswered::Cancelled`]).
    pub stop: &'a dyn Fn() -> bool,
    /// How long to spin for a quick answer before sleeping: on a small VM a sleep and
    /// wake-up costs tens of microseconds, more than many answers take to arrive.
    pub spin: Duration,
}

impl std::fmt::Debug for Bound<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound").field("until", &self.until).field("spin", &self.spin).finish_non_exhaustive()
    }
}

impl Bound<'_> {
    /// Runs `work` through `start` (which hands the job to a thread: a new one, or one
    /// started ahead) and waits for its answer within this bound.
    ///
    /// [`Unanswered::TimedOut`] and [`Unanswered::Cancelled`] mean the call was abandoned:
    /// `count.abandon()` was called, and `count.finished()` will be when the job ends.
    /// The bound is not checked before the call starts: a caller that must not start a
    /// call past its time checks first.
    pub fn call<T, A>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
        start: impl FnOnce(Job) -> std::io::Result<()>,
        count: A,
    ) -> Result<T, Unanswered>
    where
        T: Send + 'static,
        A: Abandonment,
    {
        let shared = Arc::new(Shared {
            fate: Mutex::new(Fate::Running),
            settled: AtomicBool::new(false),
            ready: Condvar::new(),
            count,
        });
        // Settles the call when dropped: with the answer once `work` returns, without one
        // if it panics or the job is dropped unrun.
        let answerer = Answerer { shared: shared.clone(), answer: None };
        let job: Job = Box::new(move || {
            let mut answerer = answerer;
            answerer.answer = Some(work());
        });
        start(job).map_err(Unanswered::NotStarted)?;
        if !self.spin.is_zero() {
            let spin_until = Instant::now() + self.spin;
            // Yielding at each look: the thread that answers may have been put on this
            // very CPU (a session turn's caller spins for the turn's answer on the other),
            // and a spin that never yields keeps it off until the spin ends: a session
            // turn's tool call took 250 us in the guest, against 40.
            while !shared.settled.load(Ordering::Acquire) && Instant::now() < spin_until {
                std::thread::yield_now();
            }
        }
        loop {
            {
                let mut fate = shared.fate.lock();
                if let Some(r) = fate.take() {
                    return r;
                }
                let now = Instant::now();
                if self.until.is_some_and(|u| now >= u) {
                    return Err(shared.abandon(&mut fate, Unanswered::TimedOut));
                }
                let wait = self.until.map_or(POLL, |u| (u - now).min(POLL));
                shared.ready.wait_for(&mut fate, wait);
                if let Some(r) = fate.take() {
                    return r;
                }
            }
            // The stop is the caller's code: asked without the lock.
            if (self.stop)() {
                let mut fate = shared.fate.lock();
                return match fate.take() {
                    Some(r) => r,
                    None => Err(shared.abandon(&mut fate, Unanswered::Cancelled)),
                };
            }
        }
    }
}

/// What the waiter and the call's thread share.
struct Shared<T, A> {
    fate: Mutex<Fate<T>>,
    /// Set once the fate is settled (answered or ended): read by the spinning waiter
    /// without the lock.
    settled: AtomicBool,
    ready: Condvar,
    count: A,
}

enum Fate<T> {
    Running,
    Answered(T),
    /// The call's thread ended, or its job was dropped, without an answer.
    Ended,
    /// The waiter gave up; counted until the call ends.
    Abandoned,
    /// The answer was taken, or the abandoned call ended.
    Closed,
}

impl<T> Fate<T> {
    /// The waiter's result once the call is settled; `None` while it runs.
    fn take(&mut self) -> Option<Result<T, Unanswered>> {
        match std::mem::replace(self, Fate::Closed) {
            Fate::Running => {
                *self = Fate::Running;
                None
            }
            Fate::Answered(v) => Some(Ok(v)),
            Fate::Ended | Fate::Abandoned | Fate::Closed => Some(Err(Unanswered::NoAnswer)),
        }
    }
}

impl<T, A: Abandonment> Shared<T, A> {
    /// The waiter gives up on a running call: it is counted, under the fate's lock.
    fn abandon(&self, fate: &mut Fate<T>, why: Unanswered) -> Unanswered {
        *fate = Fate::Abandoned;
        self.count.abandon();
        why
    }
}

/// The call's side: settles its fate when dropped.
struct Answerer<T, A: Abandonment> {
    shared: Arc<Shared<T, A>>,
    answer: Option<T>,
}

impl<T, A: Abandonment> Drop for Answerer<T, A> {
    fn drop(&mut self) {
        let answer = self.answer.take();
        let mut fate = self.shared.fate.lock();
        if matches!(*fate, Fate::Abandoned) {
            *fate = Fate::Closed;
            drop(fate);
            self.shared.count.finished();
            return;
        }
        *fate = answer.map_or(Fate::Ended, Fate::Answered);
        drop(fate);
        // After the unlock: a spinning waiter that sees the flag takes the lock at once,
        // rather than parking behind this thread (which a loaded machine may preempt).
        self.shared.settled.store(true, Ordering::Release);
        self.shared.ready.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;

    use super::*;

    /// Counts abandonments and ends, and the most abandoned at once.
    #[derive(Default)]
    struct Counter {
        now: AtomicUsize,
        abandoned: AtomicUsize,
        finished: AtomicUsize,
    }

    impl Abandonment for Arc<Counter> {
        fn abandon(&self) {
            self.now.fetch_add(1, Ordering::SeqCst);
            self.abandoned.fetch_add(1, Ordering::SeqCst);
        }
        fn finished(&self) {
            self.now.fetch_sub(1, Ordering::SeqCst);
            self.finished.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn thread(job: Job) -> std::io::Result<()> {
        std::thread::Builder::new().spawn(job).map(drop)
    }

    fn never() -> bool {
        false
    }

    /// Waits (generously) for `cond`.
    fn eventually(cond: impl Fn() -> bool) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    #[derive(Debug, PartialEq)]
    enum Got {
        Answer(u32),
        TimedOut,
        Cancelled,
        NotStarted,
        NoAnswer,
    }

    fn got(r: Result<u32, Unanswered>) -> Got {
        match r {
            Ok(v) => Got::Answer(v),
            Err(Unanswered::TimedOut) => Got::TimedOut,
            Err(Unanswered::Cancelled) => Got::Cancelled,
            Err(Unanswered::NotStarted(_)) => Got::NotStarted,
            Err(Unanswered::NoAnswer) => Got::NoAnswer,
        }
    }

    /// One call per row: how it behaves, the bound, what the waiter gets, and whether it
    /// was abandoned (then counted until released).
    #[test]
    fn calls_end_as_answered_timed_out_stopped_or_unanswered() {
        #[derive(Clone, Copy, Debug)]
        enum Work {
            Quick,
            /// Blocks until released.
            Hangs,
            Panics,
        }
        #[derive(Clone, Copy, Debug)]
        enum Start {
            Thread,
            Fails,
            DropsTheJob,
        }
        use Got::*;
        let ms = Duration::from_millis;
        /// The work, how it starts, the bound (until, stopped, spin), what the waiter
        /// gets, and whether the call was abandoned.
        type Row = (Work, Start, Option<Duration>, bool, Duration, Got, bool);
        #[rustfmt::skip]
        let cases: &[Row] = &[
            // work        start               until           stopped spin    gets        abandoned
            (Work::Quick,  Start::Thread,      None,           false, ms(0), Answer(7),  false),
            (Work::Quick,  Start::Thread,      Some(ms(5000)), false, ms(1), Answer(7),  false),
            (Work::Hangs,  Start::Thread,      Some(ms(20)),   false, ms(0), TimedOut,   true),
            (Work::Hangs,  Start::Thread,      Some(ms(20)),   false, ms(1), TimedOut,   true),
            (Work::Hangs,  Start::Thread,      None,           true,  ms(0), Cancelled,  true),
            (Work::Hangs,  Start::Thread,      Some(ms(5000)), true,  ms(0), Cancelled,  true),
            (Work::Panics, Start::Thread,      None,           false, ms(0), NoAnswer,   false),
            (Work::Quick,  Start::Fails,       None,           false, ms(0), NotStarted, false),
            (Work::Quick,  Start::DropsTheJob, None,           false, ms(0), NoAnswer,   false),
        ];
        for &(work, start, until, stopped, spin, ref expected, abandoned) in cases {
            let row = format!("{work:?} {start:?} {until:?} stopped={stopped}");
            let counter = Arc::new(Counter::default());
            let (release, released) = mpsc::channel::<()>();
            let stop = move || stopped;
            let bound = Bound { until: until.map(|d| Instant::now() + d), stop: &stop, spin };
            let f = move || match work {
                Work::Quick => 7,
                Work::Hangs => {
                    let _ = released.recv();
                    8
                }
                Work::Panics => panic!("a call that panics (expected in this test)"),
            };
            let r = bound.call(
                f,
                |job| match start {
                    Start::Thread => thread(job),
                    Start::Fails => Err(std::io::Error::other("no threads today")),
                    Start::DropsTheJob => {
                        drop(job);
                        Ok(())
                    }
                },
                counter.clone(),
            );
            assert_eq!(&got(r), expected, "{row}");
            assert_eq!(counter.abandoned.load(Ordering::SeqCst), usize::from(abandoned), "{row}");
            drop(release);
            assert!(eventually(|| counter.now.load(Ordering::SeqCst) == 0), "{row}: still counted");
            assert_eq!(counter.finished.load(Ordering::SeqCst), usize::from(abandoned), "{row}");
        }
    }

    /// An abandoned call that then panics is uncounted all the same.
    #[test]
    fn an_abandoned_call_that_panics_is_uncounted() {
        let counter = Arc::new(Counter::default());
        let (release, released) = mpsc::channel::<()>();
        let bound = Bound { until: Some(Instant::now() + Duration::from_millis(10)), stop: &never, spin: Duration::ZERO };
        let r = bound.call(
            move || -> u32 {
                let _ = released.recv();
                panic!("an abandoned call that panics (expected in this test)")
            },
            thread,
            counter.clone(),
        );
        assert_eq!(got(r), Got::TimedOut);
        assert_eq!(counter.now.load(Ordering::SeqCst), 1);
        drop(release);
        assert!(eventually(|| counter.finished.load(Ordering::SeqCst) == 1));
        assert_eq!(counter.now.load(Ordering::SeqCst), 0);
    }

    /// The stop is asked while the call runs, not only at the start.
    #[test]
    fn a_stop_during_the_call_gives_up_on_it() {
        let counter = Arc::new(Counter::default());
        let flag = Arc::new(AtomicBool::new(false));
        let (release, released) = mpsc::channel::<()>();
        let setter = {
            let flag = flag.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                flag.store(true, Ordering::SeqCst);
            })
        };
        let stop = || flag.load(Ordering::SeqCst);
        let bound = Bound { until: None, stop: &stop, spin: Duration::from_micros(150) };
        let r = bound.call(
            move || {
                let _ = released.recv();
                1
            },
            thread,
            counter.clone(),
        );
        assert_eq!(got(r), Got::Cancelled);
        setter.join().unwrap();
        drop(release);
        assert!(eventually(|| counter.finished.load(Ordering::SeqCst) == 1));
    }

    /// A call that answers just as its time runs out is either answered (and never
    /// counted) or abandoned (counted once, uncounted once): never both, never neither.
    #[test]
    fn an_answer_at_the_last_moment_is_counted_exactly_once() {
        let counter = Arc::new(Counter::default());
        let (mut answered, mut abandoned) = (0, 0);
        for i in 0..300u32 {
            // The call sleeps about as long as its bound.
            let d = Duration::from_micros(200 + u64::from(i % 5) * 50);
            let bound = Bound { until: Some(Instant::now() + Duration::from_micros(400)), stop: &never, spin: Duration::ZERO };
            match bound.call(
                move || {
                    std::thread::sleep(d);
                    i
                },
                thread,
                counter.clone(),
            ) {
                Ok(v) => {
                    assert_eq!(v, i);
                    answered += 1;
                }
                Err(Unanswered::TimedOut) => abandoned += 1,
                Err(e) => panic!("call {i}: {e:?}"),
            }
        }
        assert!(eventually(|| counter.finished.load(Ordering::SeqCst) == abandoned));
        assert_eq!(counter.abandoned.load(Ordering::SeqCst), abandoned);
        assert_eq!(counter.now.load(Ordering::SeqCst), 0);
        assert_eq!(answered + abandoned, 300);
    }
}
