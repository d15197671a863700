//! `run`: one guest, with the GIL released while it runs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use wasi_python_runtime::{
    Artifacts, CallContext, DoorAnswer, Flavour, Grant, Preload, RunConfig, Runtime,
};

use wasi_python_runtime::ToolDoor;
use wasi_python_runtime::schema::{InputSchema, Options};

use crate::{convert, errors, tool_host};

/// One runtime per artifact folder, for the life of the process: the compiled
/// guest is loaded once.
pub(crate) fn runtime_for(dir: &str) -> Result<Runtime, wasi_python_runtime::Error> {
    static RUNTIMES: OnceLock<Mutex<HashMap<PathBuf, Runtime>>> = OnceLock::new();
    let map = RUNTIMES.get_or_init(Default::default);
    let key = PathBuf::from(dir);
    if let Some(rt) = map.lock().get(&key) {
        return Ok(rt.clone());
    }
    let rt = Runtime::new(Artifacts::open(&key)?);
    Ok(map.lock().entry(key).or_insert(rt).clone())
}

/// Checks an artifact folder; returns its protocol version (None: before the tool protocol).
#[pyfunction]
pub(crate) fn check_artifacts(dir: &str) -> PyResult<Option<u32>> {
    let rt = runtime_for(dir).map_err(errors::to_py)?;
    Ok(rt.artifacts().protocol())
}

/// Compiles (or loads from the cache) both engine flavours now. Returns the cache files.
#[pyfunction]
pub(crate) fn precompile(py: Python<'_>, dir: &str) -> PyResult<Vec<PathBuf>> {
    let rt = runtime_for(dir).map_err(errors::to_py)?;
    py.detach(|| {
        [Flavour::Plain, Flavour::Metered]
            .into_iter()
            .map(|f| rt.prepare(f))
            .collect::<Result<Vec<_>, _>>()
    })
    .map_err(errors::to_py)
}

/// Cancels a run from any thread.
#[pyclass(module = "wasi_python._wasi_python", frozen)]
#[derive(Clone, Default)]
pub(crate) struct CancelToken {
    pub(crate) inner: wasi_python_runtime::CancelToken,
}

#[pymethods]
impl CancelToken {
    #[new]
    fn new() -> Self {
        Self::default()
    }
    fn cancel(&self) {
        self.inner.cancel();
    }
    fn is_cancelled(&self) -> bool {
        self.inner.is_cancelled()
    }
}

/// A raw `host=` callable behind the door: bytes in, bytes out; anything else faults.
struct PyDoor(Py<PyAny>);

impl wasi_python_runtime::Door for PyDoor {
    fn call(&self, request: &[u8], _ctx: &CallContext) -> DoorAnswer {
        Python::attach(|py| {
            let arg = PyBytes::new(py, request);
            match self.0.bind(py).call1((arg,)) {
                Ok(out) => match out.cast::<PyBytes>() {
                    Ok(b) => DoorAnswer::Reply(b.as_bytes().to_vec()),
                    Err(_) => DoorAnswer::Fault,
                },
                Err(_) => DoorAnswer::Fault,
            }
        })
    }
}

/// At exit: waits up to `wait_s` for live runs to remove their private folders, then
/// removes those left. Returns how many were left.
#[pyfunction]
pub(crate) fn sweep_private_folders(py: Python<'_>, wait_s: f64) -> usize {
    let wait = Duration::from_secs_f64(wait_s.max(0.0));
    py.detach(|| wasi_python_runtime::sweep_private_folders(wait))
}

/// The file and start keywords of `run` and `Session`, as `(file_write_bytes,
/// max_open_files, workdir, preload)`: the package passes all four, with its defaults
/// filled in. `preload` None is the default set, a list exactly those modules.
#[derive(FromPyObject)]
pub(crate) struct FileLimits(Option<u64>, usize, Option<String>, Option<Vec<String>>);

impl Default for FileLimits {
    fn default() -> Self {
        let l = wasi_python_runtime::Limits::default();
        FileLimits(l.file_write_bytes, l.max_open_files, None, None)
    }
}

impl FileLimits {
    pub(crate) fn apply(self, cfg: RunConfig) -> RunConfig {
        let cfg = cfg.file_write_bytes(self.0).max_open_files(self.1).preload(match self.3 {
            None => Preload::Default,
            Some(m) if m.is_empty() => Preload::Nothing,
            Some(m) => Preload::Modules(m),
        });
        match self.2 {
            Some(w) => cfg.workdir(w),
            None => cfg,
        }
    }
}

/// The modules a run preloads when `preload=` is not given, for these artifacts.
#[pyfunction]
pub(crate) fn default_preload(dir: &str) -> PyResult<Vec<String>> {
    let rt = runtime_for(dir).map_err(errors::to_py)?;
    Ok(wasi_python_runtime::default_preload(rt.artifacts()))
}

/// Builds (or finds in the cache) the snapshot preloading `modules` now. Returns its file.
#[pyfunction]
pub(crate) fn prepare_preload(py: Python<'_>, dir: &str, modules: Vec<String>) -> PyResult<PathBuf> {
    let rt = runtime_for(dir).map_err(errors::to_py)?;
    py.detach(|| rt.prepare_preload(&modules)).map_err(errors::to_py)
}

/// How often a waiting `run` looks at Python's signals (Ctrl-C).
pub(crate) const SIGNAL_POLL: Duration = Duration::from_millis(10);

/// Checks a tool's input schema against the protocol's subset; ValueError says why not.
#[pyfunction]
pub(crate) fn check_schema(schema_json: &str, validates_input: bool) -> PyResult<()> {
    let schema = convert::json_arg(schema_json, "the input schema")?;
    InputSchema::compile(&schema, Options { validates_input })
        .map(|_| ())
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("input schema: {e}")))
}

#[pyfunction]
#[pyo3(signature = (artifacts, argv, stdin, env, grants, memory_bytes, deadline_s, output_bytes, fuel, cancel, host, tools=None, dispatcher=None, max_frames=None, max_request_bytes=None, files=FileLimits::default(), mounts=None))]
#[expect(clippy::too_many_arguments, reason = "mirrors the keyword arguments of wasi_python.run")]
pub(crate) fn run<'py>(
    py: Python<'py>,
    artifacts: &str,
    argv: Vec<String>,
    stdin: Vec<u8>,
    env: Vec<(String, String)>,
    grants: Vec<(PathBuf, String, bool)>,
    memory_bytes: u64,
    deadline_s: Option<f64>,
    output_bytes: usize,
    fuel: Option<u64>,
    cancel: Option<PyRef<'py, CancelToken>>,
    host: Option<Py<PyAny>>,
    tools: Option<Vec<Py<tool_host::CompiledTool>>>,
    dispatcher: Option<Py<PyAny>>,
    max_frames: Option<u64>,
    max_request_bytes: Option<u64>,
    files: FileLimits,
    mounts: Option<crate::files::Mounts>,
) -> PyResult<Bound<'py, PyDict>> {
    let rt = runtime_for(artifacts).map_err(errors::to_py)?;
    let token = cancel.map(|c| c.inner.clone()).unwrap_or_default();
    let mut cfg = RunConfig::new(argv)
        .stdin(stdin)
        .memory_bytes(memory_bytes)
        .deadline(deadline_s.map(Duration::from_secs_f64))
        .output_bytes(output_bytes)
        .fuel(fuel)
        .cancel(token.clone());
    cfg = files.apply(cfg);
    cfg = crate::files::apply(py, cfg, mounts)?;
    for (k, v) in env {
        cfg = cfg.env(k, v);
    }
    for (host_path, guest_path, writable) in grants {
        cfg = cfg.grant(Grant {
            host_path,
            guest_path,
            writable,
        });
    }
    if let Some(h) = host {
        cfg = cfg.door(Arc::new(PyDoor(h)));
    }
    let door = match (tools, dispatcher) {
        (Some(tools), Some(dispatcher)) => {
            let door = ToolDoor::new(
                tool_host::specs(&tools),
                Arc::new(tool_host::PyToolHost { dispatcher }),
                tool_host::limits(max_frames, max_request_bytes),
            )
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
            cfg = cfg.door(Arc::new(door.clone()));
            Some(door)
        }
        _ => None,
    };
    let handle = py.detach(|| rt.start(cfg)).map_err(errors::to_py)?;
    let result = loop {
        if let Some(r) = py.detach(|| handle.wait_timeout(SIGNAL_POLL)) {
            break r;
        }
        if let Err(interrupt) = py.check_signals() {
            // Ctrl-C: stop the guest, wait for it to unwind, then raise.
            token.cancel();
            let _ = py.detach(|| handle.wait());
            return Err(interrupt);
        }
    };
    let done = result.map_err(errors::to_py)?;
    let d = convert::completed(py, &done)?;
    if let Some(door) = door {
        d.set_item("tools", convert::record(py, &door.record())?)?;
    }
    Ok(d)
}
