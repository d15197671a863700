//! Tool and file-provider threads started on stacks kept from finished ones.
//!
//! Every tool call runs on a new thread (the guide's promise), and so does every call
//! of a mount's provider that is not inline. [`start_call_thread`] is what a
//! [`ToolHost::start_thread`](crate::ToolHost::start_thread) or
//! [`FileProvider::start_thread`](crate::FileProvider::start_thread) of an embedder may
//! call (the Python binding's do); the traits' own default is a std thread. A thread whose stack
//! glibc allocated has the stack's used pages given back (`madvise(MADV_DONTNEED)`) as
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
use wasi_python_door::Job;

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

/// Stacks free for a thread, and threads started (joinable) with theirs.
struct Threads {
    free: Vec<Stack>,
    started: Vec<(libc::pthread_t, Stack)>,
}

static THREADS: Mutex<Threads> = Mutex::new(Threads { free: Vec::new(), started: Vec::new() });
static SEEN: Seen = Seen::new();

impl Threads {
    /// Joins the threads that have ended, keeping their stacks (up to [`KEPT`]), and
    /// takes a free stack.
    fn take(&mut self) -> Option<Stack> {
        if SEEN.stale() {
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

/// Starts a new thread named `name` (the kernel keeps 15 bytes) that runs `body`, on a
/// 2 MiB stack an ended thread started here left, if there is one. A panic in `body`
/// ends its thread only.
pub fn start_call_thread(name: &'static CStr, body: Job) -> io::Result<()> {
    let kept = THREADS.lock().take();
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
    let mut threads = THREADS.lock();
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

    /// Joins the threads started here as they end, keeping their stacks; false if one
    /// still runs after about 10 s.
    fn all_ended() -> bool {
        for _ in 0..10_000 {
            let mut threads = THREADS.lock();
            if let Some(stack) = threads.take() {
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
        let (tx, rx) = mpsc::channel();
        let mut seen = Vec::new();
        for i in 0..40 {
            let tx = tx.clone();
            start_call_thread(c"wasi-python-tool", Box::new(move || {
                // Uses the stack deeply; a few bodies panic, which ends their thread only.
                let buf = std::hint::black_box([7u8; 256 << 10]);
                let here = &buf as *const _ as usize;
                tx.send((std::thread::current().id(), os_name(), buf[1000], here)).unwrap();
                assert!(i % 10 != 3, "a body's panic");
            }))
            .unwrap();
            seen.push(rx.recv_timeout(Duration::from_secs(10)).unwrap());
            // The thread ends, and its stack is kept for the next.
            assert!(all_ended());
        }
        let ids: std::collections::HashSet<_> = seen.iter().map(|s| s.0).collect();
        assert_eq!(ids.len(), 40, "a new thread each time");
        assert!(seen.iter().all(|s| s.1 == "wasi-python-too" && s.2 == 7), "{:?}", seen[0]);
        let stacks: std::collections::HashSet<_> = seen.iter().map(|s| s.3).collect();
        assert_eq!(stacks.len(), 1, "each thread ran on the stack the last one left");
        assert!(THREADS.lock().free.len() <= KEPT);
    }
}
