//! Guest threads, kept for the next run.
//!
//! A run's guest needs a thread with a large native stack (see
//! [`GUEST_THREAD_STACK`]). Spawning one per run costs a clone, the stack's mapping,
//! its first page faults and an munmap at the end, and the munmap makes the kernel
//! shoot down the other cores' TLBs. So a finished guest thread waits a while for the
//! next run instead; the most recently used one goes first, as its stack is warm.

use std::sync::mpsc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::engine::GUEST_THREAD_STACK;

type Job = Box<dyn FnOnce() + Send>;

/// Threads kept waiting at most; more finish when their run does.
const MAX_IDLE: usize = 16;
/// How long an idle thread waits for a run before it ends.
const IDLE_FOR: Duration = Duration::from_secs(30);

/// Waiting threads, by id, with the channel that hands each its next run.
static IDLE: Mutex<Vec<(u64, mpsc::Sender<Job>)>> = Mutex::new(Vec::new());

/// Runs `job` on a waiting guest thread, or on a new one.
pub(crate) fn run_on_guest_thread(job: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    let mut job: Job = Box::new(job);
    loop {
        let Some((_, tx)) = IDLE.lock().pop() else { break };
        match tx.send(job) {
            Ok(()) => return Ok(()),
            // That thread is gone; try the next.
            Err(mpsc::SendError(back)) => job = back,
        }
    }
    std::thread::Builder::new()
        .name("wasi-python-guest".into())
        .stack_size(GUEST_THREAD_STACK)
        .spawn(move || serve(job))
        .map(|_| ())
}

fn serve(first: Job) {
    static IDS: AtomicU64 = AtomicU64::new(0);
    let id = IDS.fetch_add(1, Ordering::Relaxed);
    let mut job = first;
    loop {
        job();
        let (tx, rx) = mpsc::channel();
        {
            let mut idle = IDLE.lock();
            if idle.len() >= MAX_IDLE {
                return;
            }
            idle.push((id, tx));
        }
        job = match rx.recv_timeout(IDLE_FOR) {
            Ok(next) => next,
            Err(_) => {
                // Leave the list; if a run took this thread meanwhile, serve it first.
                let mut idle = IDLE.lock();
                match idle.iter().position(|(i, _)| *i == id) {
                    Some(at) => {
                        idle.remove(at);
                        return;
                    }
                    None => {
                        drop(idle);
                        match rx.recv() {
                            Ok(next) => next,
                            Err(_) => return,
                        }
                    }
                }
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_of_a_job() -> std::thread::ThreadId {
        let (tx, rx) = mpsc::channel();
        run_on_guest_thread(move || tx.send(std::thread::current().id()).unwrap()).unwrap();
        let id = rx.recv().unwrap();
        // Wait until the thread has put itself back on the idle list.
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while IDLE.lock().is_empty() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        id
    }

    #[test]
    fn a_finished_thread_serves_the_next_job() {
        let first = thread_of_a_job();
        assert_eq!(thread_of_a_job(), first);
        assert_eq!(thread_of_a_job(), first);
    }
}
