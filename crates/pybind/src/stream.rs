//! `EventStream`: a streaming run's (or turn's) bounded event queue (the runtime's
//! `Events`) as the package takes it: by the caller's thread, which waits for an event or
//! the end with the GIL released and calls the package's `on_event` with it ([`wait`]);
//! or by an event loop, which watches `fd` (written by the guest thread, without the GIL,
//! when the queue gets an event while empty, and when it ends) and takes what is queued
//! with `drain`. The guest thread never waits on Python: only on the queue, within its
//! stall bound (crates/runtime/src/output.rs).

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use wasi_python_runtime::{Event, Events, Next};

use crate::run::SIGNAL_POLL;

/// The kinds of event, as `(kind, payload)` hands them to the package.
const STDOUT: u8 = 0;
const STDERR: u8 = 1;
const DISPLAY: u8 = 2;

#[pyclass(module = "wasi_python._wasi_python", frozen)]
pub(crate) struct EventStream {
    pub(crate) events: Events,
    /// The socket pair an event loop watches, made on first ask (`fd`).
    wake: std::sync::OnceLock<Arc<(UnixStream, UnixStream)>>,
}

/// One event as Python reads it: `(kind, payload)`.
type PyEvent<'py> = (u8, Bound<'py, PyBytes>);

#[pymethods]
impl EventStream {
    #[new]
    fn new() -> Self {
        EventStream { events: Events::new(), wake: std::sync::OnceLock::new() }
    }

    /// A descriptor that is readable when events wait or the queue ended: for an event
    /// loop's reader. Made on first ask.
    #[getter]
    fn fd(&self) -> PyResult<i32> {
        if let Some(pair) = self.wake.get() {
            return Ok(pair.0.as_raw_fd());
        }
        let (read, write) = UnixStream::pair()?;
        read.set_nonblocking(true)?;
        write.set_nonblocking(true)?;
        let pair = self.wake.get_or_init(|| Arc::new((read, write))).clone();
        let writer = pair.clone();
        // On the guest thread: one byte, never waiting (a full socket holds a wake-up).
        self.events.on_wake(move || {
            let _ = (&writer.1).write(&[1]);
        });
        // An event queued before the reader was set wakes it too.
        let _ = (&pair.1).write(&[1]);
        Ok(pair.0.as_raw_fd())
    }

    /// Every event queued now, as `(kind, payload)` (0 stdout, 1 stderr, 2 a display's
    /// JSON), and whether the stream is over (the queue ended, and these are its last).
    fn drain<'py>(&self, py: Python<'py>) -> PyResult<(Vec<PyEvent<'py>>, bool)> {
        let (events, ended) = self.events.drain();
        Ok((events.into_iter().map(|e| event(py, e)).collect(), ended))
    }

    /// Empties `fd` (the loop's reader does, before it looks at the queue).
    fn woken(&self) {
        if let Some(pair) = self.wake.get() {
            let mut buf = [0u8; 64];
            while matches!((&pair.0).read(&mut buf), Ok(n) if n > 0) {}
        }
    }

    /// Waits up to `timeout_s` (GIL released) for an event or the end; whether one came.
    /// For a loop that cannot watch a descriptor.
    fn wait(&self, py: Python<'_>, timeout_s: f64) -> PyResult<bool> {
        let timeout = crate::options::seconds("timeout_s", timeout_s)?;
        let events = self.events.clone();
        Ok(py.detach(move || events.wait(timeout)))
    }

    /// Ends the stream (idempotent): for a run that failed before its guest ran, whose
    /// queue the runtime never ends.
    fn end(&self) {
        self.events.end();
    }

    /// The caller takes its leave: nothing more is queued, and a guest waiting for room
    /// goes on.
    fn detach(&self) {
        self.events.detach();
    }

    /// Events left out of the stream so far.
    #[getter]
    fn dropped(&self) -> u64 {
        self.events.dropped()
    }
}

/// An event as `(kind, payload)`.
fn event<'py>(py: Python<'py>, e: Event) -> PyEvent<'py> {
    match e {
        Event::Stdout(b) => (STDOUT, PyBytes::new(py, &b)),
        Event::Stderr(b) => (STDERR, PyBytes::new(py, &b)),
        Event::Display(d) => (DISPLAY, PyBytes::new(py, d.json())),
        // The runtime's enum is non-exhaustive: an event this extension does not know
        // reaches nobody.
        _ => (u8::MAX, PyBytes::new(py, b"")),
    }
}

/// Waits for `poll` to answer as [`crate::run::wait_for`] does, handing each event of
/// `stream` to `on_event(kind, payload)` on this thread, with the GIL, as it comes (the
/// GIL released while it waits). `on_event` is the package's wrapper, which catches what
/// the callbacks raise; should it raise all the same, an `Exception` is reported as
/// unraisable and any other (a KeyboardInterrupt its code got) is a signal's. On a
/// signal's exception (Ctrl-C), calls `cancel`, stops streaming, waits for the guest to
/// unwind, and raises it.
pub(crate) fn wait<T: Send>(
    py: Python<'_>,
    stream: &EventStream,
    on_event: &Bound<'_, PyAny>,
    cancel: impl FnOnce(),
    poll: impl Fn(Duration) -> Option<T> + Sync,
) -> PyResult<T> {
    let events = &stream.events;
    let deliver = |e: Event| -> PyResult<()> {
        let (kind, payload) = event(py, e);
        if kind == u8::MAX {
            return Ok(());
        }
        match on_event.call1((kind, payload)) {
            Err(err) if err.is_instance_of::<pyo3::exceptions::PyException>(py) => {
                err.write_unraisable(py, Some(on_event));
                Ok(())
            }
            Err(err) => Err(err),
            Ok(_) => py.check_signals(),
        }
    };
    let interrupted = |interrupt: PyErr, cancel: Box<dyn FnOnce() + '_>| -> PyResult<T> {
        cancel();
        events.detach();
        py.detach(|| while poll(SIGNAL_POLL).is_none() {});
        Err(interrupt)
    };
    loop {
        match py.detach(|| events.next(SIGNAL_POLL)) {
            Next::Event(e) => {
                if let Err(interrupt) = deliver(e) {
                    return interrupted(interrupt, Box::new(cancel));
                }
            }
            // The guest is out; its end follows at once.
            Next::Ended => return crate::run::wait_for(py, cancel, poll),
            _ => {
                // Ended without its queue (a failure before the guest ran, or a guest
                // thread that died): what was queued is delivered, then the end.
                if let Some(r) = py.detach(|| poll(Duration::ZERO)) {
                    for e in events.drain().0 {
                        deliver(e)?;
                    }
                    return Ok(r);
                }
                if let Err(interrupt) = py.check_signals() {
                    return interrupted(interrupt, Box::new(cancel));
                }
            }
        }
    }
}
