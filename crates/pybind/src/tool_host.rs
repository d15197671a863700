//! `ToolHost` over the Python package's dispatcher (gate, tool, async loop, contextvars).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};
use wasi_python_runtime::{CancelToken, Invocation, ToolHost, ToolOutput, ToolSpec};

use crate::convert;
use crate::run::CancelToken as PyCancelToken;

/// One tool compiled for the door: its descriptor and its checked input schema.
/// The package makes one per `Tool`, once, and hands the same to every run.
#[pyclass(module = "wasi_python._wasi_python", frozen)]
pub(crate) struct CompiledTool {
    pub(crate) spec: std::sync::Arc<ToolSpec>,
}

#[pymethods]
impl CompiledTool {
    /// (name, descriptor JSON, input schema JSON, validates_input, fixed keywords, timeout_s).
    #[new]
    fn new(
        name: String,
        descriptor: String,
        schema: &str,
        validates_input: bool,
        fixed: Vec<String>,
        timeout_s: Option<f64>,
    ) -> PyResult<Self> {
        let schema = convert::json_arg(schema, "an input schema")?;
        let timeout = crate::options::opt_seconds("timeout_s", timeout_s)?;
        let spec = ToolSpec::new(name, descriptor, &schema, validates_input, fixed, timeout)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        Ok(CompiledTool { spec: std::sync::Arc::new(spec) })
    }
}

/// Calls `dispatcher.invoke(index, seq, name, args, request_bytes, cancel)`, which
/// answers `(status, payload, fault)`; the result is converted to JSON here, on the
/// tool's thread.
pub(crate) struct PyToolHost {
    pub(crate) dispatcher: Py<PyAny>,
}

pub(crate) fn fault_of(py: Python<'_>, e: &PyErr) -> String {
    let ty = e
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
    let msg = e.value(py).str().map(|s| s.to_string()).unwrap_or_default();
    match msg.lines().next() {
        Some(line) if !line.is_empty() => format!("{ty}: {line}"),
        _ => ty,
    }
}

/// Set by the package's atexit hook: from then on no tool thread enters Python, since
/// a thread that takes the GIL while the interpreter finalises is killed mid-frame.
pub(crate) static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);
/// Tool threads holding a Python thread state (waiting spares and running calls).
static IN_PYTHON: AtomicUsize = AtomicUsize::new(0);

/// Called at interpreter exit: stops new tool threads from entering Python and waits
/// (up to `timeout_s`) for those inside, such as abandoned calls, to run to their end.
#[pyfunction]
pub(crate) fn shutdown_tools(py: Python<'_>, timeout_s: f64) -> PyResult<usize> {
    let until = Instant::now() + crate::options::seconds("timeout_s", timeout_s)?;
    SHUTTING_DOWN.store(true, Ordering::SeqCst);
    py.detach(|| {
        while IN_PYTHON.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    Ok(IN_PYTHON.load(Ordering::SeqCst))
}

/// Runs a call's thread (a tool's, a file provider's) with a Python thread state taken
/// once, before the call, waiting with the GIL released; the call then only takes the
/// GIL. Counted in IN_PYTHON, so interpreter exit waits for it.
pub(crate) fn enter_python(body: Box<dyn FnOnce() + Send + '_>) {
    if SHUTTING_DOWN.load(Ordering::SeqCst) {
        return body();
    }
    IN_PYTHON.fetch_add(1, Ordering::SeqCst);
    Python::attach(|py| py.detach(body));
    IN_PYTHON.fetch_sub(1, Ordering::SeqCst);
}

impl ToolHost for PyToolHost {
    /// The thread gets its Python thread state once, before its call arrives, and
    /// waits with the GIL released; the call then only takes the GIL.
    fn enter_thread(&self, body: Box<dyn FnOnce() + Send + '_>) {
        enter_python(body)
    }

    fn invoke(&self, call: Invocation, cancel: &CancelToken) -> ToolOutput {
        if SHUTTING_DOWN.load(Ordering::SeqCst) {
            return ToolOutput::Internal { fault: "the host's interpreter is shutting down".into() };
        }
        Python::attach(|py| {
            let result = (|| -> PyResult<ToolOutput> {
                let args = convert::map_to_dict(py, &call.args)?;
                let token = Py::new(py, PyCancelToken { inner: cancel.clone() })?;
                let out = self.dispatcher.bind(py).call_method1(
                    pyo3::intern!(py, "invoke"),
                    (call.tool, call.seq, &call.name, args, call.request_bytes, token),
                )?;
                let out = out.cast::<PyTuple>()?;
                let status: String = out.get_item(0)?.extract()?;
                let payload = out.get_item(1)?;
                let fault: Option<String> = out.get_item(2)?.extract()?;
                let text = |p: &Bound<'_, PyAny>| -> String {
                    p.cast::<PyString>().map(|s| s.to_string()).unwrap_or_default()
                };
                Ok(match status.as_str() {
                    "ok" => match convert::py_to_value(&payload) {
                        Ok(v) => ToolOutput::Ok(v),
                        Err(why) => ToolOutput::Internal { fault: format!("TypeError: {why}") },
                    },
                    "denied" => ToolOutput::Denied { message: text(&payload), fault },
                    "error" => ToolOutput::Error { message: text(&payload) },
                    "cancelled" => ToolOutput::Cancelled,
                    _ => ToolOutput::Internal { fault: fault.unwrap_or_else(|| "unknown failure".into()) },
                })
            })();
            result.unwrap_or_else(|e| ToolOutput::Internal { fault: fault_of(py, &e) })
        })
    }
}
