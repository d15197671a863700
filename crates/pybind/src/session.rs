//! `SessionHandle`: a live interpreter across turns (the package's `Session` wraps it).

use pyo3::prelude::*;
use wasi_python_runtime::{DEFAULT_DISPLAY_BYTES, Session, SessionError, SessionLimits, Turn};

use crate::convert::Outcome;
use crate::errors::{self, SessionBusy, SessionEnded};
use crate::options::{Options, opt_seconds, seconds};
use crate::run::{CancelToken, runtime_for, wait_for};
use crate::snapshot::SnapshotHandle;
use crate::stream::EventStream;

#[pyclass(module = "wasi_python._wasi_python", frozen)]
pub(crate) struct SessionHandle {
    session: Session,
    runtime: wasi_python_runtime::Runtime,
}

#[pymethods]
impl SessionHandle {
    /// Opens a session with `options` (used once); its `fuel` makes the turns metered.
    #[new]
    #[pyo3(signature = (artifacts, options, *, idle_s, lifetime_s, shutdown_s))]
    fn new(py: Python<'_>, artifacts: &str, options: &Options, idle_s: Option<f64>, lifetime_s: Option<f64>, shutdown_s: f64) -> PyResult<Self> {
        let rt = runtime_for(artifacts).map_err(errors::to_py)?;
        let limits = SessionLimits {
            idle: opt_seconds("idle_s", idle_s)?,
            lifetime: opt_seconds("lifetime_s", lifetime_s)?,
            shutdown: seconds("shutdown_s", shutdown_s)?,
        };
        let cfg = options.take()?;
        let session = py.detach(|| rt.open_session(cfg, limits)).map_err(errors::to_py)?;
        Ok(SessionHandle { session, runtime: rt })
    }

    /// One turn; raises `SessionEnded` (with `reason`) or `SessionBusy` when refused.
    /// `stream` and `on_event` as `run`'s.
    #[pyo3(signature = (code, *, deadline_s, output_bytes, fuel, cancel=None, display_bytes=DEFAULT_DISPLAY_BYTES, stream=None, on_event=None))]
    #[allow(clippy::too_many_arguments)]
    fn turn(
        &self,
        py: Python<'_>,
        code: String,
        deadline_s: Option<f64>,
        output_bytes: usize,
        fuel: Option<u64>,
        cancel: Option<PyRef<'_, CancelToken>>,
        display_bytes: usize,
        stream: Option<PyRef<'_, EventStream>>,
        on_event: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let token = cancel.map(|c| c.inner.clone()).unwrap_or_default();
        let turn = Turn {
            code,
            deadline: opt_seconds("deadline_s", deadline_s)?,
            output_bytes,
            fuel,
            cancel: token.clone(),
            display_bytes,
            events: stream.as_ref().map(|s| s.events.clone()),
        };
        // Detached: the send waits for the session thread, which may need the GIL (a
        // provider's write-back as the session ends).
        let handle = py.detach(|| self.session.start_turn(turn)).map_err(refused)?;
        let poll = |timeout| handle.wait_timeout(timeout);
        let result = match stream.as_deref().zip(on_event.as_ref()) {
            Some((stream, on_event)) => crate::stream::wait(py, stream, on_event, || token.cancel(), poll),
            None => wait_for(py, || token.cancel(), poll),
        }?;
        crate::completed::completed(py, result.map_err(refused)?)
    }

    /// Closes the session (runs the guest's atexit handlers); returns what they printed.
    /// Ctrl-C cancels the shutdown, waits for the session to end, and raises.
    fn close(&self, py: Python<'_>) -> PyResult<Option<Outcome>> {
        let closing = self.session.start_close();
        let done = wait_for(py, || closing.cancel(), |timeout| closing.wait_timeout(timeout))?;
        done.map(|done| Outcome::new(py, done)).transpose()
    }

    /// The interpreter between turns; raises `SnapshotError` (with `kind`) when refused.
    fn snapshot(&self, py: Python<'_>) -> PyResult<SnapshotHandle> {
        let snap = py.detach(|| self.session.snapshot()).map_err(crate::snapshot::to_py)?;
        Ok(SnapshotHandle::new(snap, self.runtime.clone()))
    }

    /// Why the session ended ("closed", "idle", "lifetime", "exit", a trap), or None.
    fn ended(&self) -> Option<String> {
        self.session.ended().map(|e| e.as_str().to_owned())
    }
}

fn refused(e: SessionError) -> PyErr {
    match &e {
        SessionError::Ended(end) => errors::with_attr(SessionEnded::new_err(end.to_string()), "reason", end.as_str()),
        _ => SessionBusy::new_err(e.to_string()),
    }
}
