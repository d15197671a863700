//! Python frame stacks kept for the next tool thread.
//!
//! Every tool call runs on a new thread (the guide's promise), and each thread's Python
//! thread state maps a 16 KiB chunk for its frames at its first call and unmaps it when
//! the thread ends. Unmapping memory of a process whose other threads run on other CPUs
//! sends those CPUs a TLB shootdown: one interrupt of the guest's CPU per tool call, and
//! page faults for the next thread's fresh chunk. CPython takes these chunks from its
//! arena allocator (`_PyObject_VirtualAlloc`), which an embedder may replace through the
//! public `PyObject_SetArenaAllocator`. When the embedder asks (off by default: the
//! interpreter's allocator is the embedder's; `WASI_PYTHON_KEEP_FRAME_STACKS=1` at import,
//! or `wasi_python.keep_frame_stacks(True)` at any time), this module wraps the allocator
//! in place: chunks of exactly the first frame chunk's size are kept, up to [`KEPT`], for
//! the next thread, and everything else (pymalloc's arenas, larger chunks) passes to the
//! allocator that was there.
//!
//! Safe at any time, not only before the interpreter allocated: the wrapper allocates
//! only through the allocator that was there, so every chunk, whether allocated before or
//! after the wrap, came from it; a freed one is kept (and later served, or given back) or
//! given back at once, with its size, as CPython would have. The swap happens with the
//! GIL held, as every arena allocation and free does (the extension, abi3, is never
//! loaded by a free-threaded interpreter). Switched off, the wrapper gives back what it
//! keeps and passes every call through; it is never taken out, since a library that
//! wrapped it in turn would be left calling it.
//!
//! The hook is looked up by name at run time: an interpreter without it (the stable ABI
//! does not promise it) runs as before.
#![allow(
    unsafe_code,
    reason = "an allocator hook of the interpreter's C API, looked up by name: each unsafe \
              block says what it relies on"
)]

use std::ffi::{c_void, CStr};

use parking_lot::Mutex;
use pyo3::prelude::*;

/// The environment variable that switches the wrapper on at import: `1`.
pub(crate) const ENV: &str = "WASI_PYTHON_KEEP_FRAME_STACKS";

/// CPython's first frame chunk of a thread: `_PY_DATA_STACK_CHUNK_SIZE` (16 KiB, 3.11 to 3.15).
const CHUNK: usize = 16 * 1024;
/// At most this many chunks are kept (256 KiB): more than the tool threads that end
/// between two starts.
const KEPT: usize = 16;

/// `PyObjectArenaAllocator`, unchanged since CPython 3.4.
#[repr(C)]
#[derive(Clone, Copy)]
struct ArenaAllocator {
    ctx: *mut c_void,
    alloc: Option<unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void>,
    free: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize)>,
}

/// The allocator that was there, and the chunks kept while `keeping`.
struct Wrapped {
    inner: ArenaAllocator,
    kept: Kept,
    keeping: bool,
}

// SAFETY: `ctx` is the previous allocator's own context, which CPython passes to it from
// any thread; this module only hands it back to that allocator's functions.
unsafe impl Send for Wrapped {}

/// Chunks (addresses) kept for the next thread's frames.
#[derive(Debug, Default)]
struct Kept(Vec<usize>);

impl Kept {
    /// A kept chunk for an allocation of `size`, if it is a first frame chunk's.
    fn take(&mut self, size: usize) -> Option<usize> {
        if size == CHUNK { self.0.pop() } else { None }
    }

    /// Keeps a freed chunk of `size` if it is a first frame chunk's and there is room;
    /// `false`: the allocator it came from frees it.
    fn keep(&mut self, addr: usize, size: usize) -> bool {
        if size != CHUNK || addr == 0 || self.0.len() >= KEPT {
            return false;
        }
        self.0.push(addr);
        true
    }
}

static WRAPPED: Mutex<Option<Wrapped>> = Mutex::new(None);

unsafe extern "C" fn alloc(_ctx: *mut c_void, size: usize) -> *mut c_void {
    let mut guard = WRAPPED.lock();
    let Some(w) = guard.as_mut() else { return std::ptr::null_mut() };
    if let Some(addr) = w.kept.take(size) {
        return addr as *mut c_void;
    }
    let inner = w.inner;
    drop(guard);
    match inner.alloc {
        // SAFETY: the previous allocator's function, called as CPython would have.
        Some(f) => unsafe { f(inner.ctx, size) },
        None => std::ptr::null_mut(),
    }
}

unsafe extern "C" fn free(_ctx: *mut c_void, ptr: *mut c_void, size: usize) {
    let mut guard = WRAPPED.lock();
    let Some(w) = guard.as_mut() else { return };
    if w.keeping && w.kept.keep(ptr as usize, size) {
        return;
    }
    let inner = w.inner;
    drop(guard);
    if let Some(f) = inner.free {
        // SAFETY: `ptr` came from the previous allocator (kept chunks included), called
        // with the size it was allocated with, as CPython would have.
        unsafe { f(inner.ctx, ptr, size) }
    }
}

type GetSet = unsafe extern "C" fn(*mut ArenaAllocator);

/// Looks up a function of the running interpreter by name.
fn symbol(name: &CStr) -> Option<GetSet> {
    // SAFETY: dlsym with the default handle only reads the process's symbol tables.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    // SAFETY: the symbol, when present, is CPython's function of this signature.
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, GetSet>(p) })
}

/// At the module's import: switched on if `$WASI_PYTHON_KEEP_FRAME_STACKS` is `1`.
pub(crate) fn from_env(py: Python<'_>) {
    if std::env::var_os(ENV).is_some_and(|v| v == "1") {
        set(py, true);
    }
}

/// Keeps finished tool threads' first frame chunks for the next (`on`), or stops keeping
/// them (the kept ones are given back). Returns whether they are kept now: `False` where
/// the interpreter lacks the hook. Any time after import.
#[pyfunction]
pub(crate) fn keep_frame_stacks(py: Python<'_>, on: bool) -> bool {
    set(py, on)
}

/// [`keep_frame_stacks`]. The GIL (`_py`) is held, as CPython requires of its allocator
/// setters and as every arena call holds it, so no allocation runs during the swap.
fn set(_py: Python<'_>, on: bool) -> bool {
    let mut guard = WRAPPED.lock();
    if let Some(w) = guard.as_mut() {
        w.keeping = on;
        if !on {
            let chunks = std::mem::take(&mut w.kept.0);
            let inner = w.inner;
            drop(guard);
            if let Some(f) = inner.free {
                for addr in chunks {
                    // SAFETY: each kept chunk came from the previous allocator with size
                    // CHUNK, and is in no use.
                    unsafe { f(inner.ctx, addr as *mut c_void, CHUNK) }
                }
            }
        }
        return on;
    }
    if !on {
        return false;
    }
    let (Some(get), Some(set)) = (symbol(c"PyObject_GetArenaAllocator"), symbol(c"PyObject_SetArenaAllocator"))
    else {
        return false;
    };
    let mut inner = ArenaAllocator { ctx: std::ptr::null_mut(), alloc: None, free: None };
    // SAFETY: CPython fills the struct it is given.
    unsafe { get(&mut inner) };
    if inner.alloc.is_none() || inner.free.is_none() {
        return false;
    }
    *guard = Some(Wrapped { inner, kept: Kept(Vec::with_capacity(KEPT)), keeping: true });
    drop(guard);
    let mut ours = ArenaAllocator { ctx: std::ptr::null_mut(), alloc: Some(alloc), free: Some(free) };
    // SAFETY: CPython copies the struct; the functions live as long as the process, since
    // an extension module is never unloaded.
    unsafe { set(&mut ours) };
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_first_frame_chunks_are_kept_and_reused_up_to_the_cap() {
        let mut kept = Kept::default();
        assert_eq!(kept.take(CHUNK), None, "nothing kept yet");
        assert!(!kept.keep(0x1000, CHUNK * 2), "a grown chunk goes back");
        assert!(!kept.keep(0x1000, 1 << 20), "a pymalloc arena goes back");
        assert!(!kept.keep(0, CHUNK), "a null pointer is not a chunk");
        for i in 0..KEPT {
            assert!(kept.keep(0x10000 * (i + 1), CHUNK));
        }
        assert!(!kept.keep(0xdead_0000, CHUNK), "over the cap, freed");
        assert_eq!(kept.take(1 << 20), None, "other sizes are never served from the kept");
        assert_eq!(kept.take(CHUNK), Some(0x10000 * KEPT), "the last kept is the first reused");
        assert!(kept.keep(0xbeef_0000, CHUNK), "room again");
        let served: Vec<_> = std::iter::from_fn(|| kept.take(CHUNK)).collect();
        assert_eq!(served.len(), KEPT);
        assert!(!served.contains(&0xdead_0000));
    }
}
