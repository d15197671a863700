//! `NetworkHost` over the package's per-run network handler (`wasi_python._network`):
//! each guest request is handed to `handler.request(frame, remaining_s, cancel)` on a
//! call thread of its own, which takes the GIL only there (the guest's thread waits
//! without it, in the door's bound).

use std::sync::atomic::Ordering;
use std::time::Instant;

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;
use wasi_python_runtime::door::network::answer;
use wasi_python_runtime::{CancelToken, NetworkHost};

use crate::run::CancelToken as PyCancelToken;
use crate::tool_host::{SHUTTING_DOWN, enter_python, fault_of};

/// The package's handler of one run's (or session's) requests.
pub(crate) struct PyNetworkHost {
    handler: Py<PyAny>,
    max_request_bytes: usize,
}

impl PyNetworkHost {
    /// `handler.max_request_bytes` is read once, here.
    pub(crate) fn new(handler: &Bound<'_, PyAny>) -> PyResult<PyNetworkHost> {
        let max_request_bytes = handler.getattr(pyo3::intern!(handler.py(), "max_request_bytes"))?.extract()?;
        Ok(PyNetworkHost { handler: handler.clone().unbind(), max_request_bytes })
    }
}

impl NetworkHost for PyNetworkHost {
    fn request(&self, request: Vec<u8>, until: Option<Instant>, cancel: &CancelToken) -> Vec<u8> {
        if SHUTTING_DOWN.load(Ordering::SeqCst) {
            return answer("error", "the host's interpreter is shutting down");
        }
        let remaining = until.map(|u| u.saturating_duration_since(Instant::now()).as_secs_f64());
        Python::attach(|py| {
            let result = (|| -> PyResult<Vec<u8>> {
                let token = Py::new(py, PyCancelToken { inner: cancel.clone() })?;
                let frame = PyBytes::new(py, &request);
                drop(request);
                let out = self.handler.call_method1(py, pyo3::intern!(py, "request"), (frame, remaining, token))?;
                let out: PyBackedBytes = out.extract(py)?;
                Ok(out.to_vec())
            })();
            // The handler answers every failure itself; this is its bug, named by type.
            result.unwrap_or_else(|e| answer("error", &format!("the host's network handler failed: {}", fault_of(py, &e))))
        })
    }

    fn max_request_bytes(&self) -> usize {
        self.max_request_bytes
    }

    fn enter_thread(&self, body: Box<dyn FnOnce() + Send + '_>) {
        enter_python(body)
    }
}
