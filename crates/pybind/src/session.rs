//! `SessionHandle`: a live interpreter across turns (the package's `Session` wraps it).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use wasi_python_runtime::budget::Limits as BudgetLimits;
use wasi_python_runtime::{
    Grant, RunConfig, Session, SessionError, SessionLimits, ToolDoor, Turn,
};

use crate::run::{CancelToken, FileLimits, SIGNAL_POLL, runtime_for};
use crate::{convert, errors, tool_host};

#[pyclass(module = "wasi_python._wasi_python", frozen)]
pub(crate) struct SessionHandle {
    session: Session,
    door: Option<ToolDoor>,
    tool_limits: BudgetLimits,
}

#[pymethods]
impl SessionHandle {
    #[new]
    #[pyo3(signature = (artifacts, env, grants, memory_bytes, metered, idle_s, lifetime_s, shutdown_s, tools=None, dispatcher=None, max_frames=None, max_request_bytes=None, files=FileLimits::default(), mounts=None))]
    #[expect(clippy::too_many_arguments, reason = "mirrors the keyword arguments of wasi_python.Session")]
    fn new(
        py: Python<'_>,
        artifacts: &str,
        env: Vec<(String, String)>,
        grants: Vec<(PathBuf, String, bool)>,
        memory_bytes: u64,
        metered: bool,
        idle_s: Option<f64>,
        lifetime_s: Option<f64>,
        shutdown_s: f64,
        tools: Option<Vec<Py<tool_host::CompiledTool>>>,
        dispatcher: Option<Py<PyAny>>,
        max_frames: Option<u64>,
        max_request_bytes: Option<u64>,
        files: FileLimits,
        mounts: Option<crate::files::Mounts>,
    ) -> PyResult<Self> {
        let rt = runtime_for(artifacts).map_err(errors::to_py)?;
        let mut cfg = RunConfig::new(Vec::<String>::new())
            .memory_bytes(memory_bytes)
            .fuel(metered.then_some(u64::MAX));
        cfg = files.apply(cfg);
        cfg = crate::files::apply(py, cfg, mounts)?;
        for (k, v) in env {
            cfg = cfg.env(k, v);
        }
        for (host_path, guest_path, writable) in grants {
            cfg = cfg.grant(Grant { host_path, guest_path, writable });
        }
        let tool_limits = tool_host::limits(max_frames, max_request_bytes);
        let door = match (tools, dispatcher) {
            (Some(tools), Some(dispatcher)) => {
                let door = ToolDoor::new(
                    tool_host::specs(&tools),
                    Arc::new(tool_host::PyToolHost { dispatcher }),
                    tool_limits,
                )
                .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
                cfg = cfg.door(Arc::new(door.clone()));
                Some(door)
            }
            _ => None,
        };
        let limits = SessionLimits {
            idle: idle_s.map(Duration::from_secs_f64),
            lifetime: lifetime_s.map(Duration::from_secs_f64),
            shutdown: Duration::from_secs_f64(shutdown_s),
        };
        let session = py
            .detach(|| rt.open_session(cfg, limits))
            .map_err(errors::to_py)?;
        Ok(SessionHandle { session, door, tool_limits })
    }

    /// One turn. Answers `("ok", dict)`, or `("ended", reason, message)`, or `("busy", message)`.
    #[pyo3(signature = (code, deadline_s, output_bytes, fuel, cancel=None))]
    fn turn<'py>(
        &self,
        py: Python<'py>,
        code: String,
        deadline_s: Option<f64>,
        output_bytes: usize,
        fuel: Option<u64>,
        cancel: Option<PyRef<'py, CancelToken>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let token = cancel.map(|c| c.inner.clone()).unwrap_or_default();
        let turn = Turn {
            code,
            deadline: deadline_s.map(Duration::from_secs_f64),
            output_bytes,
            fuel,
            cancel: token.clone(),
        };
        let reset = || {
            if let Some(door) = &self.door {
                door.next_turn(self.tool_limits);
            }
        };
        let handle = match self.session.start_turn(turn, reset) {
            Ok(h) => h,
            Err(e) => return refused(py, &e),
        };
        let result = loop {
            if let Some(r) = py.detach(|| handle.wait_timeout(SIGNAL_POLL)) {
                break r;
            }
            if let Err(interrupt) = py.check_signals() {
                token.cancel();
                let _ = py.detach(|| handle.wait());
                return Err(interrupt);
            }
        };
        match result {
            Ok(done) => {
                let d = convert::completed(py, &done)?;
                if let Some(door) = &self.door {
                    d.set_item("tools", convert::record(py, &door.record())?)?;
                }
                PyTuple::new(py, [PyString::new(py, "ok").into_any(), d.into_any()])
            }
            Err(e) => refused(py, &e),
        }
    }

    /// Closes the session (runs the guest's atexit handlers); returns what they printed.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        match py.detach(|| self.session.close()) {
            Some(done) => Ok(Some(convert::completed(py, &done)?)),
            None => Ok(None),
        }
    }

    /// Why the session ended ("closed", "idle", "lifetime", "exit", a trap), or None.
    fn ended(&self) -> Option<String> {
        self.session.ended().map(|e| e.as_str().to_owned())
    }
}

fn refused<'py>(py: Python<'py>, e: &SessionError) -> PyResult<Bound<'py, PyTuple>> {
    match e {
        SessionError::Ended(end) => PyTuple::new(
            py,
            [
                PyString::new(py, "ended").into_any(),
                PyString::new(py, end.as_str()).into_any(),
                PyString::new(py, &end.to_string()).into_any(),
            ],
        ),
        other => PyTuple::new(
            py,
            [PyString::new(py, "busy").into_any(), PyString::new(py, &other.to_string()).into_any()],
        ),
    }
}
