//! `Completions`: runs' ends handed to an event loop without the guest thread entering Python.
//!
//! `run_async` (python/wasi_python/_async.py) keeps one per event loop and watches its
//! `fd` with `loop.add_reader`. A guest thread that ends a run started with [`start`]
//! pushes the result here and, if none was waiting, writes one byte to a socket pair: it
//! takes no GIL and creates no Python thread state (whose first frame maps memory, a page
//! fault that denies the pool slot its short reset: third_party/README.md). The loop's
//! reader calls [`Completions::drain`], which turns the results into Python values on the
//! loop's thread. Once the loop is gone (the `Completions` dropped with the loop's
//! reader), a run that ends calls `orphan` instead, with the GIL, so whatever the Python
//! side counts per run is given back.
//!
//! [`start`]: crate::run::start

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::prelude::*;
use wasi_python_runtime::{Completed, Error};

use crate::errors;

/// Results waiting for the loop, keyed by the number the Python side gave the run.
#[derive(Default)]
struct State {
    ready: Vec<(u64, Result<Completed, Error>)>,
    closed: bool,
}

pub(crate) struct Inner {
    state: Mutex<State>,
    /// Read by the loop (its `fd`); written by guest threads.
    read: UnixStream,
    write: UnixStream,
    orphan: Py<PyAny>,
}

/// Where guest threads leave the ends of one event loop's runs.
#[pyclass(module = "wasi_python._wasi_python", frozen)]
pub(crate) struct Completions {
    pub(crate) inner: Arc<Inner>,
}

#[pymethods]
impl Completions {
    /// `orphan()` is called, with the GIL, for each run whose end nobody will drain.
    #[new]
    fn new(orphan: Py<PyAny>) -> PyResult<Self> {
        let (read, write) = UnixStream::pair()?;
        read.set_nonblocking(true)?;
        write.set_nonblocking(true)?;
        Ok(Completions { inner: Arc::new(Inner { state: Mutex::default(), read, write, orphan }) })
    }

    /// The descriptor to watch: readable when results wait.
    #[getter]
    fn fd(&self) -> i32 {
        self.inner.read.as_raw_fd()
    }

    /// The results waiting, as `(key, ok, value)`: `(key, True, end)` (completed.rs), or
    /// `(key, False, exception)` for a failure inside the runtime.
    fn drain(&self, py: Python<'_>) -> PyResult<Vec<(u64, bool, Py<PyAny>)>> {
        // First empty the socket, then take the results: a result pushed after the take
        // finds the list empty and writes again.
        let mut buf = [0u8; 64];
        while matches!((&self.inner.read).read(&mut buf), Ok(n) if n > 0) {}
        let ready = std::mem::take(&mut self.inner.state.lock().ready);
        let mut out = Vec::with_capacity(ready.len());
        for (key, result) in ready {
            // Each run gets its value or its exception: one that fails to convert does
            // not take the others' with it.
            let (ok, value) = end_value(py, result);
            out.push((key, ok, value));
        }
        Ok(out)
    }

}

impl Drop for Completions {
    /// The loop is gone (its reader, the only holder, was dropped with its selector):
    /// `orphan` is called for each result not drained, and runs ending later call it
    /// themselves.
    fn drop(&mut self) {
        let undrained = {
            let mut state = self.inner.state.lock();
            state.closed = true;
            std::mem::take(&mut state.ready).len()
        };
        // Dropped by Python's deallocation, which holds the GIL.
        self.inner.orphans(undrained);
    }
}

impl Inner {
    /// On the guest thread: leaves a run's end for the loop and wakes it if the list was
    /// empty. No Python unless the loop is gone.
    pub(crate) fn deliver(&self, key: u64, result: Result<Completed, Error>) {
        let mut state = self.state.lock();
        if state.closed {
            drop(state);
            drop(result);
            self.orphans(1);
            return;
        }
        let wake = state.ready.is_empty();
        state.ready.push((key, result));
        drop(state);
        if wake {
            // Non-blocking: a full socket already holds a wake-up the loop has yet to read.
            let _ = (&self.write).write(&[1]);
        }
    }

    /// Calls `orphan` `n` times, for runs whose ends nobody will drain; nothing once the
    /// interpreter is going (no thread may attach to it then).
    fn orphans(&self, n: usize) {
        if n == 0 || crate::tool_host::SHUTTING_DOWN.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        Python::attach(|py| {
            for _ in 0..n {
                if let Err(e) = self.orphan.call0(py) {
                    e.write_unraisable(py, None);
                }
            }
        });
    }
}

/// A run's end as Python sees it: `(True, end)` (the package's `Completed`, or an
/// `Outcome`: completed.rs), or `(False, exception)` for a failure
/// inside the runtime or an end that failed to convert.
pub(crate) fn end_value(py: Python<'_>, result: Result<Completed, Error>) -> (bool, Py<PyAny>) {
    let value = match result {
        Ok(c) => crate::completed::completed(py, c),
        Err(e) => Err(errors::to_py(e)),
    };
    match value {
        Ok(v) => (true, v),
        Err(e) => (false, e.into_value(py).into_any()),
    }
}
