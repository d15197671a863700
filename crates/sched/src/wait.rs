//! Waiting for another thread's answer.

use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// Looks for a message for up to `spin` without sleeping: on a small VM a sleep and
/// wake-up costs tens of microseconds, more than many answers take to arrive. `Empty`
/// when none came in time (then block on the channel as usual).
///
/// `yielding`: each look that finds nothing yields the CPU ([`std::thread::yield_now`]),
/// for a wait whose answering thread may be waiting for this very CPU. A thread woken
/// after a few milliseconds asleep is often put on its waker's CPU, and a spin that never
/// yields keeps it off for the whole spin: a session turn 20 ms after the last took
/// 555 us against 102 in the guest, the spin's 300 us among them. With nothing else to
/// run, the yield returns at once and the wait goes on. Not yielding when the answering
/// thread is known to be running elsewhere: the yields cost turns back to back 2-5 us.
pub fn try_recv_spinning<T>(rx: &Receiver<T>, spin: Duration, yielding: bool) -> Result<T, TryRecvError> {
    spin_counting(rx, spin, yielding).0
}

/// [`try_recv_spinning`], with the number of looks that found nothing.
fn spin_counting<T>(rx: &Receiver<T>, spin: Duration, yielding: bool) -> (Result<T, TryRecvError>, u64) {
    let until = Instant::now() + spin;
    let mut empty = 0;
    loop {
        match rx.try_recv() {
            Err(TryRecvError::Empty) if Instant::now() < until => {
                empty += 1;
                if yielding {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            other => return (other, empty),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yielding_spin_lets_the_answer_come_from_its_own_cpu() {
        // This thread and the one it starts (which inherits the mask) share one CPU.
        let mine = rustix::thread::sched_getaffinity(None).unwrap();
        let cpu = (0..rustix::thread::CpuSet::MAX_CPU).find(|&c| mine.is_set(c)).unwrap();
        rustix::thread::sched_setaffinity(None, &crate::wake::only(cpu)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let answerer = std::thread::spawn(move || tx.send(()).unwrap());
        let (answer, empty) = spin_counting(&rx, Duration::from_secs(20), true);
        answerer.join().unwrap();
        rustix::thread::sched_setaffinity(None, &mine).unwrap();
        assert_eq!(answer, Ok(()));
        // A spin that never yields looks about 100,000 times, until the scheduler takes
        // its CPU away (milliseconds); a yielding one, until its first yields let the
        // new thread start and answer.
        assert!(empty < 10_000, "{empty} looks before the answer");
    }
}
