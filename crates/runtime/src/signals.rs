//! wasmtime's trap handlers, captured when it installs them and put back on request
//! ([`restore_trap_handlers`]) where another library has replaced them since.
//!
//! wasmtime turns a guest's stack overflow, `unreachable`, out-of-bounds access or
//! division by zero into a trap through process-wide signal handlers, installed when the
//! process's first engine is made ([`new_engine`], every engine of this crate); a fault
//! outside guest code goes on to the handler that was there before. A library that
//! installs its own handler later (Ray's crash reporter, in `ray.init()`) without passing
//! faults on makes the next guest that traps kill the process. The handlers are read
//! right after the first engine is made, kept if they are wasmtime's (in this crate's
//! own object, with wasmtime's flags), and put back only when asked and only where the
//! handler now installed is another: a handler set before wasmtime is never touched (it
//! is the one wasmtime passes other faults on to), nor one while no engine was made.
#![allow(unsafe_code, reason = "sigaction and dladdr: reading and setting this process's signal handlers")]

use std::mem::MaybeUninit;

use parking_lot::Mutex;
use wasmtime::{Config, Engine};

/// The signals wasmtime 48 handles on this target (`foreach_handler` in
/// third_party/wasmtime/src/runtime/vm/sys/unix/signals.rs).
const TRAP_SIGNALS: &[libc::c_int] = &[
    libc::SIGSEGV,
    libc::SIGILL,
    #[cfg(any(target_arch = "x86_64", target_arch = "s390x"))]
    libc::SIGFPE,
    #[cfg(any(target_vendor = "apple", target_os = "freebsd"))]
    libc::SIGBUS,
];

/// The flags wasmtime installs its handlers with.
const WASMTIME_FLAGS: libc::c_int = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;

/// A handler as `sigaction` reads it.
#[derive(Clone, Copy)]
struct Action(libc::sigaction);

// SAFETY: a `struct sigaction` is plain data (addresses, a mask, flags).
unsafe impl Send for Action {}

/// wasmtime's handler of each of [`TRAP_SIGNALS`], once seen installed. Process-wide by
/// nature, not launch state: signal handlers are the process's.
static WASMTIME: Mutex<[Option<Action>; TRAP_SIGNALS.len()]> = Mutex::new([None; TRAP_SIGNALS.len()]);

/// A wasmtime engine; wasmtime installs its trap handlers in the first one a process
/// makes, and they are captured here, right after.
pub(crate) fn new_engine(config: &Config) -> wasmtime::Result<Engine> {
    let engine = Engine::new(config)?;
    capture();
    Ok(engine)
}

/// Keeps the handlers now installed that are wasmtime's, for the signals not kept yet.
fn capture() {
    let mut kept = WASMTIME.lock();
    for (slot, &sig) in kept.iter_mut().zip(TRAP_SIGNALS) {
        if slot.is_none() {
            *slot = current(sig).filter(is_wasmtimes);
        }
    }
}

/// Whether `action` is wasmtime's handler: installed with wasmtime's flags, and its code
/// in the object (library or program) that holds this crate, and so wasmtime.
fn is_wasmtimes(action: &Action) -> bool {
    let handler = action.0.sa_sigaction;
    if action.0.sa_flags & WASMTIME_FLAGS != WASMTIME_FLAGS || handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        return false;
    }
    let ours = capture as fn() as usize;
    match (object_of(handler), object_of(ours)) {
        (Some(a), Some(b)) => a == b,
        // A program linked statically: no object to compare; the flags say it.
        _ => true,
    }
}

/// The base address of the loaded object whose code holds `address`.
fn object_of(address: usize) -> Option<usize> {
    let mut info = MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr only reads the loader's tables and fills `info`.
    let found = unsafe { libc::dladdr(address as *const libc::c_void, info.as_mut_ptr()) };
    // SAFETY: filled by a successful dladdr (zeroed before).
    (found != 0).then(|| unsafe { info.assume_init() }.dli_fbase as usize)
}

/// The handler of `sig` now installed.
fn current(sig: libc::c_int) -> Option<Action> {
    let mut now = MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: reads the handler into `now`; installs nothing.
    let r = unsafe { libc::sigaction(sig, std::ptr::null(), now.as_mut_ptr()) };
    // SAFETY: filled by a successful sigaction (zeroed before).
    (r == 0).then(|| Action(unsafe { now.assume_init() }))
}

/// Puts wasmtime's trap handlers back where another has replaced them since wasmtime
/// installed them (a crash reporter, or the default that a library's shutdown leaves),
/// and returns the signals put back (none if this process has made no engine yet, or if
/// wasmtime's are still installed). Then a guest's stack overflow or `unreachable` is
/// again that run's trap, not the process's death; the replacing handler is lost for
/// this process. A handler installed before wasmtime's is never touched: wasmtime's
/// passes the faults that are not a guest's on to it.
pub fn restore_trap_handlers() -> Vec<i32> {
    let kept = WASMTIME.lock();
    let mut back = Vec::new();
    for (slot, &sig) in kept.iter().zip(TRAP_SIGNALS) {
        let Some(wasmtime) = slot else { continue };
        match current(sig) {
            Some(now) if now.0.sa_sigaction == wasmtime.0.sa_sigaction => continue,
            None => continue,
            Some(_) => {}
        }
        // SAFETY: installs the handler wasmtime installed, as it was read back; wasmtime's
        // handler and the state it reads live as long as the process.
        if unsafe { libc::sigaction(sig, &wasmtime.0, std::ptr::null_mut()) } == 0 {
            back.push(sig);
        }
    }
    back
}

#[cfg(test)]
pub(crate) mod tests {
    use std::process::Command;

    use super::*;

    /// Runs the test `name` of this binary alone, in a child process, with `env` set:
    /// for tests that change what a whole process shares (its signal handlers) or that
    /// need another process. Returns its output once it has ended.
    pub(crate) fn in_a_child(name: &str, env: &[(&str, &std::ffi::OsStr)]) -> Command {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", name, "--ignored", "--nocapture", "--test-threads=1"]);
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    /// Says that the child of [`in_a_child`] ran its test, and that it passed.
    pub(crate) fn passed(out: &std::process::Output) {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{:?}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    const CHILD: &str = "WASI_PYTHON_SIGNALS_CHILD";

    #[test]
    fn wasmtimes_trap_handlers_are_put_back_where_replaced_and_only_there() {
        let out = in_a_child("signals::tests::replaced_and_put_back", &[(CHILD, "1".as_ref())]).output().unwrap();
        passed(&out);
    }

    /// The embedder's handler: ends the process (a fault it is given is not a trap).
    extern "C" fn embedders(_: libc::c_int) {
        // SAFETY: `_exit` is async-signal-safe.
        unsafe { libc::_exit(86) }
    }

    fn set(sig: libc::c_int, handler: usize) {
        let mut a = current(sig).unwrap().0;
        a.sa_sigaction = handler;
        a.sa_flags = 0;
        // SAFETY: installs the default, or a handler that only calls `_exit`.
        assert_eq!(unsafe { libc::sigaction(sig, &a, std::ptr::null_mut()) }, 0);
    }

    fn handler(sig: libc::c_int) -> usize {
        current(sig).unwrap().0.sa_sigaction
    }

    /// A guest's trap, in a module that does `body`: the process lives to see it.
    fn traps(engine: &Engine, body: &str) -> bool {
        let wat = format!(r#"(module (memory 1) (func (export "f") {body}))"#);
        let module = wasmtime::Module::new(engine, wat).unwrap();
        let mut store = wasmtime::Store::new(engine, ());
        let f = wasmtime::Instance::new(&mut store, &module, &[]).unwrap().get_typed_func::<(), ()>(&mut store, "f").unwrap();
        f.call(&mut store, ()).unwrap_err().downcast_ref::<wasmtime::Trap>().is_some()
    }

    #[test]
    #[ignore = "run alone in a child process by the test above: it changes the process's signal handlers"]
    fn replaced_and_put_back() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        // Before any engine: nothing to put back, and the embedder's handler stays.
        let embedder = embedders as extern "C" fn(libc::c_int) as usize;
        set(libc::SIGILL, embedder);
        assert_eq!(restore_trap_handlers(), Vec::<i32>::new());
        assert_eq!(handler(libc::SIGILL), embedder);

        let engine = new_engine(&Config::new()).unwrap();
        let wasmtimes: Vec<usize> = TRAP_SIGNALS.iter().map(|&s| handler(s)).collect();
        assert!(wasmtimes.iter().all(|&h| h != embedder && h != libc::SIG_DFL));
        assert_eq!(restore_trap_handlers(), Vec::<i32>::new(), "still wasmtime's: nothing done");

        // Replaced (Ray's crash reporter; the default after its shutdown): put back.
        set(libc::SIGILL, embedder);
        set(libc::SIGSEGV, libc::SIG_DFL);
        assert_eq!(restore_trap_handlers(), vec![libc::SIGSEGV, libc::SIGILL]);
        assert_eq!(TRAP_SIGNALS.iter().map(|&s| handler(s)).collect::<Vec<_>>(), wasmtimes);
        // A later engine captures nothing new, and the traps work.
        drop(new_engine(&Config::new()).unwrap());
        assert!(traps(&engine, "unreachable"), "SIGILL");
        assert!(traps(&engine, "i32.const 0x7fff0000 i32.load drop"), "SIGSEGV");
        assert_eq!(restore_trap_handlers(), Vec::<i32>::new());
    }
}
