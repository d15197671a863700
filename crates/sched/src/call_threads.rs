//! Tool and file-provider threads started on stacks kept from finished ones.
//!
//! Every tool call runs on a new thread (the guide's promise), and so does every call
//! of a mount's provider that is not inline. A [`CallThreads`] starts each (the runtime
//! owns one, and its tool doors and mounts start their threads with it). A thread whose
//! stack glibc allocated has the stack's used pages given back (`madvise(MADV_DONTNEED)`) as
//! it ends: the guest's CPU takes a TLB shootdown, and the next thread faults the pages
//! in again, once per tool call. glibc leaves a stack the caller provided alone, so
//! tool threads run on stacks kept here: a thread is started joinable on a kept stack
//! (or a new one), and its stack is kept again once `pthread_tryjoin_np` says the thread
//! has ended, which the kernel marks only after the thread's last use of its stack.
//! At most [`KEPT`] stacks wait; the rest are unmapped.
#![allow(
    unsafe_code,
    reason = "threads started with pthread on stacks this module maps: each unsafe block \
              says what it relies on"
)]

use std::ffi::{CStr, c_void};
use std::io;
use std::panic::AssertUnwindSafe;

use parking_lot::Mutex;

use crate::Job;
use crate::forks::Seen;

/// Each thread's stack, as Rust's own threads get by default.
const STACK: usize = 2 << 20;
/// A page below the stack that faults: an overflow ends the process, not other memory.
const GUARD: usize = 64 << 10;
/// At most this many stacks wait for the next threads.
const KEPT: usize = 8;

/// One mapping: a guard, then the stack.
#[derive(Debug)]
struct Stack {
    base: usize,
}

impl Stack {
    fn new() -> io::Result<Stack> {
        // SAFETY: a new private anonymous mapping, owned by the `Stack` until dropped.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                GUARD + STACK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base: p as usize };
        // SAFETY: the mapping's first GUARD bytes, which nothing uses.
        if unsafe { libc::mprotect(p, GUARD, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    fn low(&self) -> *mut c_void {
        (self.base + GUARD) as *mut c_void
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, used by no thread (never started, or joined).
        unsafe { libc::munmap(self.base as *mut c_void, GUARD + STACK) };
    }
}

/// Starts each call's thread, a new one, on a stack an ended thread it started left
/// (the module's header). Each owner has its own: two share no stack.
#[derive(Default)]
pub struct CallThreads {
    threads: Mutex<Threads>,
    /// In a forked child, the threads started are the parent's (forks.rs).
    seen: Seen,
}

impl std::fmt::Debug for CallThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = self.threads.lock();
        f.debug_struct("CallThreads").field("kept", &t.free.len()).field("started", &t.started.len()).finish()
    }
}

/// Stacks free for a thread, and threads started (joinable) with theirs.
#[derive(Default)]
struct Threads {
    free: Vec<Stack>,
    started: Vec<(libc::pthread_t, Stack)>,
}

impl Threads {
    /// Joins the threads that have ended, keeping their stacks (up to [`KEPT`]), and
    /// takes a free stack. `forked`: this is a forked child, and the threads started are
    /// its parent's.
    fn take(&mut self, forked: bool) -> Option<Stack> {
        if forked {
            // A forked child: those threads are its parent's, and glibc here has
            // forgotten them; joining one would unlink it from a list the child rebuilt.
            // Their stacks, copies nothing uses, serve again.
            for (_, stack) in std::mem::take(&mut self.started) {
                self.keep(stack);
            }
        }
        let mut i = 0;
        while i < self.started.len() {
            // SAFETY: a thread this module started joinable and has not joined.
            if unsafe { libc::pthread_tryjoin_np(self.started[i].0, std::ptr::null_mut()) } == 0 {
                let (_, stack) = self.started.swap_remove(i);
                self.keep(stack);
            } else {
                i += 1;
            }
        }
        self.free.pop()
    }

    fn keep(&mut self, stack: Stack) {
        if self.free.len() < KEPT {
            self.free.push(stack);
        }
    }
}

/// What a new thread is given: its name and its body.
type Start = (&'static CStr, Job);

extern "C" fn entry(arg: *mut c_void) -> *mut c_void {
    // SAFETY: `start` passed a `Box<Start>` it gave up, to this thread alone.
    let (name, body) = *unsafe { Box::from_raw(arg.cast::<Start>()) };
    // SAFETY: names the calling thread (the kernel keeps 15 bytes of it).
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
    // A panic may not unwind out of a C entry: the call's answerer settles it as ended.
    let _ = std::panic::catch_unwind(AssertUnwindSafe(body));
    std::ptr::null_mut()
}

impl CallThreads {
    pub fn new() -> CallThreads {
        CallThreads::default()
    }

    /// Starts a new thread named `name` (the kernel keeps 15 bytes) that runs `body`, on a
    /// 2 MiB stack an ended thread started here left, if there is one. A panic in `body`
    /// ends its thread only.
    pub fn start(&self, name: &'static CStr, body: Job) -> io::Result<()> {
        let kept = self.threads.lock().take(self.seen.stale());
        start_on(&self.threads, kept, name, body)
    }

    /// How many stacks wait for the next thread (joining the threads that ended): a
    /// diagnostic.
    pub fn kept(&self) -> usize {
        let mut threads = self.threads.lock();
        if let Some(stack) = threads.take(self.seen.stale()) {
            threads.keep(stack);
        }
        threads.free.len()
    }
}

impl Drop for CallThreads {
    /// A thread still running keeps its stack: the mapping is left to it (leaked), and
    /// the thread detached, so glibc forgets it once it ends.
    fn drop(&mut self) {
        let threads = self.threads.get_mut();
        let forked = self.seen.stale();
        for (tid, stack) in std::mem::take(&mut threads.started) {
            // SAFETY: a thread this pool started joinable and has not joined (or, in a
            // forked child, one glibc here does not know: then it is not asked).
            if !forked && unsafe { libc::pthread_tryjoin_np(tid, std::ptr::null_mut()) } != 0 {
                // SAFETY: as above; detached, it is never joined again.
                unsafe { libc::pthread_detach(tid) };
                std::mem::forget(stack);
            }
        }
    }
}

/// [`CallThreads::start`] on `kept`, or on a new stack.
fn start_on(threads: &Mutex<Threads>, kept: Option<Stack>, name: &'static CStr, body: Job) -> io::Result<()> {
    let stack = match kept {
        Some(s) => s,
        None => Stack::new()?,
    };
    let arg = Box::into_raw(Box::new((name, body))).cast::<c_void>();
    let mut tid: libc::pthread_t = 0;
    // SAFETY: the attribute is initialised before use and destroyed after; the stack is
    // this module's mapping, which no other thread uses while this one may run.
    let rc = unsafe {
        let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
        let mut rc = libc::pthread_attr_init(attr.as_mut_ptr());
        if rc == 0 {
            rc = libc::pthread_attr_setstack(attr.as_mut_ptr(), stack.low(), STACK);
            if rc == 0 {
                rc = libc::pthread_create(&mut tid, attr.as_ptr(), entry, arg);
            }
            libc::pthread_attr_destroy(attr.as_mut_ptr());
        }
        rc
    };
    let mut threads = threads.lock();
    if rc != 0 {
        // SAFETY: no thread took `arg`.
        drop(unsafe { Box::from_raw(arg.cast::<Start>()) });
        threads.keep(stack);
        return Err(io::Error::from_raw_os_error(rc));
    }
    threads.started.push((tid, stack));
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// Joins the threads `pool` started as they end, keeping their stacks; false if one
    /// still runs after about 10 s.
    fn all_ended(pool: &CallThreads) -> bool {
        for _ in 0..10_000 {
            let mut threads = pool.threads.lock();
            if let Some(stack) = threads.take(false) {
                threads.keep(stack);
            }
            if threads.started.is_empty() {
                return true;
            }
            drop(threads);
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    /// The calling thread's name, as the kernel keeps it.
    fn os_name() -> String {
        let mut buf = [0u8; 16];
        // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included.
        unsafe { libc::prctl(libc::PR_GET_NAME, buf.as_mut_ptr()) };
        let end = buf.iter().position(|&b| b == 0).unwrap_or(16);
        String::from_utf8_lossy(&buf[..end]).into_owned()
    }

    #[test]
    fn each_body_runs_on_a_new_named_thread_and_ended_threads_stacks_are_reused() {
        let pool = CallThreads::new();
        let (tx, rx) = mpsc::channel();
        let mut seen = Vec::new();
        for i in 0..40 {
            let tx = tx.clone();
            pool.start(c"wasi-python-tool", Box::new(move || {
                // Uses the stack deeply; a few bodies panic, which ends their thread only.
                let buf = std::hint::black_box([7u8; 256 << 10]);
                let here = &buf as *const _ as usize;
                tx.send((std::thread::current().id(), os_name(), buf[1000], here)).unwrap();
                assert!(i % 10 != 3, "a body's panic");
            }))
            .unwrap();
            seen.push(rx.recv_timeout(Duration::from_secs(10)).unwrap());
            // The thread ends, and its stack is kept for the next.
            assert!(all_ended(&pool));
        }
        let ids: std::collections::HashSet<_> = seen.iter().map(|s| s.0).collect();
        assert_eq!(ids.len(), 40, "a new thread each time");
        assert!(seen.iter().all(|s| s.1 == "wasi-python-too" && s.2 == 7), "{:?}", seen[0]);
        let stacks: std::collections::HashSet<_> = seen.iter().map(|s| s.3).collect();
        assert_eq!(stacks.len(), 1, "each thread ran on the stack the last one left");
        assert!(pool.kept() <= KEPT);
    }

    #[test]
    fn two_pools_share_no_stack_and_a_pool_dropped_under_a_running_thread_leaves_it_its_stack() {
        let (one, two) = (CallThreads::new(), CallThreads::new());
        let (tx, rx) = mpsc::channel();
        let tx2 = tx.clone();
        one.start(c"one", Box::new(move || tx.send(()).unwrap())).unwrap();
        rx.recv().unwrap();
        assert!(all_ended(&one));
        assert_eq!((one.kept(), two.kept()), (1, 0), "the ended thread's stack is its own pool's");
        // A thread still running when its pool goes: its stack stays mapped under it.
        let (go_tx, go_rx) = mpsc::channel::<()>();
        two.start(c"two", Box::new(move || {
            go_rx.recv().unwrap();
            let deep = std::hint::black_box([3u8; 512 << 10]);
            tx2.send(()).unwrap();
            assert_eq!(deep[100], 3);
        }))
        .unwrap();
        drop(two);
        go_tx.send(()).unwrap();
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
    }
}
