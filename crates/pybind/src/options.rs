//! `Options`: what `run` and `Session` are given, taken by keyword, so that a field
//! added on one side cannot be misread on the other; and the embedder's numbers
//! converted without a panic (`inf`, `nan`, `1e300` are a `ValueError` naming them).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use wasi_python_runtime::budget::Limits as BudgetLimits;
use wasi_python_runtime::{
    DEFAULT_FILE_TIMEOUT, Grant, Limits, Mount, Preload, RunConfig, SessionLimits, ToolDoor,
};

use crate::tool_host::{CompiledTool, PyToolHost};

/// The longest time the embedder may give (the package's `MAX_SECONDS`): about 31
/// years, far from where adding it to a clock reading could overflow.
const MAX_SECONDS: f64 = 1e9;

/// Seconds from the embedder as a `Duration`; a `ValueError` naming `what` for a
/// negative, NaN, infinite or too large value (`Duration::from_secs_f64` panics on the
/// first three, and `Instant + Duration` on the last).
pub(crate) fn seconds(what: &str, s: f64) -> PyResult<Duration> {
    if !(0.0..=MAX_SECONDS).contains(&s) {
        return Err(PyValueError::new_err(format!("{what} must be a number of seconds from 0 to {MAX_SECONDS:e}, not {s}")));
    }
    Ok(Duration::from_secs_f64(s))
}

pub(crate) fn opt_seconds(what: &str, s: Option<f64>) -> PyResult<Option<Duration>> {
    s.map(|s| seconds(what, s)).transpose()
}

/// A mount as the package hands it over: a `MemoryFilesHandle` or a provider adapter.
#[pyclass(module = "wasi_python._wasi_python", frozen)]
pub(crate) struct MountSpec {
    mount: Mount,
}

#[pymethods]
impl MountSpec {
    #[new]
    #[pyo3(signature = (*, provider, guest_path, writable, timeout_s))]
    fn new(provider: &Bound<'_, PyAny>, guest_path: String, writable: bool, timeout_s: f64) -> PyResult<Self> {
        let timeout = seconds("Mount timeout_s", timeout_s)?;
        let provider = crate::files::provider(provider);
        Ok(MountSpec { mount: Mount::new(provider, guest_path, writable).timeout(timeout) })
    }
}

/// A run's or a session's settings, checked by the package and given here by keyword.
/// Used once: the tool door it holds keeps one run's (or session's) record.
#[pyclass(module = "wasi_python._wasi_python", frozen)]
pub(crate) struct Options {
    built: Mutex<Option<RunConfig>>,
    /// No door, tools or mounts, whose state serves one run: [`Options::copy`] may copy.
    copyable: bool,
}

impl Options {
    /// The settings, taken; a second use is a `ValueError` (a door serves one run).
    pub(crate) fn take(&self) -> PyResult<RunConfig> {
        self.built.lock().take().ok_or_else(|| PyValueError::new_err("these Options were used by a run already"))
    }

    /// Options of `config` without a door, tools or mounts, unused.
    pub(crate) fn unused(config: RunConfig) -> Options {
        Options { built: Mutex::new(Some(config)), copyable: true }
    }

    /// A copy of the settings, these Options left unused: as [`Options::copy`].
    pub(crate) fn config(&self) -> PyResult<RunConfig> {
        if !self.copyable {
            return Err(PyValueError::new_err("Options with a door, tools or mounts serve one run and are not copied"));
        }
        self.built.lock().clone().ok_or_else(|| PyValueError::new_err("these Options were used by a run already"))
    }
}

#[pymethods]
impl Options {
    /// New Options with the same settings, unused, for settings without a door, tools or
    /// mounts (the package makes its default settings once and copies them per run).
    /// `ValueError` for others, or for Options already used.
    fn copy(&self) -> PyResult<Options> {
        Ok(Options::unused(self.config()?))
    }

    #[new]
    #[pyo3(signature = (
        *, env, grants, memory_bytes, deadline_s, output_bytes, fuel, file_write_bytes,
        max_open_files, workdir, preload, mounts, max_file_calls, tools, dispatcher,
        max_tool_calls, max_tool_request_bytes, host, snapshot, keep_random, network=None,
        display_bytes=wasi_python_runtime::DEFAULT_DISPLAY_BYTES
    ))]
    #[expect(clippy::too_many_arguments, reason = "keyword-only: the settings of wasi_python.run, by name")]
    fn new(
        env: Vec<(String, String)>,
        grants: Vec<GrantArg>,
        memory_bytes: u64,
        deadline_s: Option<f64>,
        output_bytes: usize,
        fuel: Option<u64>,
        file_write_bytes: Option<u64>,
        max_open_files: usize,
        workdir: Option<String>,
        preload: Option<Vec<String>>,
        mounts: Vec<Py<MountSpec>>,
        max_file_calls: Option<u64>,
        tools: Option<Vec<Py<CompiledTool>>>,
        dispatcher: Option<Py<PyAny>>,
        max_tool_calls: Option<u64>,
        max_tool_request_bytes: Option<u64>,
        host: Option<Py<PyAny>>,
        snapshot: Option<Py<crate::snapshot::SnapshotHandle>>,
        keep_random: bool,
        network: Option<Bound<'_, PyAny>>,
        display_bytes: usize,
    ) -> PyResult<Self> {
        let limits = Limits {
            memory_bytes,
            deadline: opt_seconds("deadline_s", deadline_s)?,
            output_bytes,
            fuel,
            file_write_bytes,
            max_open_files,
            max_file_calls,
            display_bytes,
        };
        let copyable = host.is_none() && tools.is_none() && mounts.is_empty() && network.is_none();
        let mut cfg = RunConfig::new(Vec::<String>::new()).limits(limits).preload(Preload::from_option(preload));
        if let Some(w) = workdir {
            cfg = cfg.workdir(w);
        }
        for (k, v) in env {
            cfg = cfg.env(k, v);
        }
        for g in grants {
            cfg = cfg.grant(Grant { host_path: g.host_path, guest_path: g.guest_path, writable: g.writable });
        }
        for m in mounts {
            cfg = cfg.mount(m.get().mount.clone());
        }
        if let Some(s) = snapshot {
            cfg = cfg.snapshot(s.get().snapshot.clone());
        }
        cfg = cfg.keep_random(keep_random);
        if let Some(h) = host {
            cfg = cfg.door(Arc::new(crate::run::PyDoor(h)));
        }
        if let (Some(tools), Some(dispatcher)) = (tools, dispatcher) {
            let per_turn = BudgetLimits { max_frames: max_tool_calls, max_request_bytes: max_tool_request_bytes, ..BudgetLimits::default() };
            let specs = tools.iter().map(|t| t.get().spec.clone());
            let door = ToolDoor::new(specs, Arc::new(PyToolHost { dispatcher }), per_turn)
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
            cfg = cfg.tools(door, per_turn);
        }
        if let Some(handler) = network {
            cfg = cfg.network(Arc::new(crate::network::PyNetworkHost::new(&handler)?));
        }
        Ok(Options { built: Mutex::new(Some(cfg)), copyable })
    }
}

/// A `wasi_python.Grant`, read by attribute name.
#[derive(FromPyObject)]
pub(crate) struct GrantArg {
    #[pyo3(attribute("host_path"), from_py_with = fs_path)]
    host_path: PathBuf,
    #[pyo3(attribute("guest_path"))]
    guest_path: String,
    #[pyo3(attribute("writable"))]
    writable: bool,
}

fn fs_path(obj: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    let os = obj.py().import(pyo3::intern!(obj.py(), "os"))?;
    os.call_method1(pyo3::intern!(obj.py(), "fspath"), (obj,))?.extract()
}

/// The defaults of every limit, from the runtime: the one place they live. The
/// package's signatures read them from here (a test ties the two).
pub(crate) fn defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let l = Limits::default();
    let s = SessionLimits::default();
    let b = BudgetLimits::default();
    let d = PyDict::new(py);
    d.set_item("memory_bytes", l.memory_bytes)?;
    d.set_item("deadline_s", l.deadline.map(|t| t.as_secs_f64()))?;
    d.set_item("output_bytes", l.output_bytes)?;
    d.set_item("fuel", l.fuel)?;
    d.set_item("file_write_bytes", l.file_write_bytes)?;
    d.set_item("max_open_files", l.max_open_files)?;
    d.set_item("max_file_calls", l.max_file_calls)?;
    d.set_item("display_bytes", l.display_bytes)?;
    d.set_item("max_tool_calls", b.max_frames)?;
    d.set_item("max_tool_request_bytes", b.max_request_bytes)?;
    d.set_item("idle_s", s.idle.map(|t| t.as_secs_f64()))?;
    d.set_item("lifetime_s", s.lifetime.map(|t| t.as_secs_f64()))?;
    d.set_item("shutdown_s", s.shutdown.as_secs_f64())?;
    d.set_item("mount_timeout_s", DEFAULT_FILE_TIMEOUT.as_secs_f64())?;
    Ok(d)
}
