//! `run`: one guest, with the GIL released while it runs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use wasi_python_runtime::schema::{InputSchema, Options as SchemaOptions};
use wasi_python_runtime::{Artifacts, CallContext, DoorAnswer, Flavour, LaunchPolicy, Preload, RunConfig, Runtime};

use crate::completions::Completions;
use crate::convert::Outcome;
use crate::options::Options;
use crate::stream::EventStream;
use crate::{convert, errors};

static RUNTIMES: OnceLock<Mutex<HashMap<PathBuf, Runtime>>> = OnceLock::new();

/// One runtime per artifact folder, for the life of the process: the compiled
/// guest is loaded once. Its notices go to Python's `logging` and `notices()` (notices.rs).
pub(crate) fn runtime_for(dir: &str) -> Result<Runtime, wasi_python_runtime::Error> {
    let map = RUNTIMES.get_or_init(Default::default);
    let key = PathBuf::from(dir);
    if let Some(rt) = map.lock().get(&key) {
        return Ok(rt.clone());
    }
    let policy = POLICY.lock().clone().unwrap_or_default();
    let rt = Runtime::builder(Artifacts::open(&key)?).notices(crate::notices::forward).launch_policy(policy).build();
    Ok(map.lock().entry(key).or_insert(rt).clone())
}

/// The launch policy of the runtimes this process makes from now on (`None`: the
/// runtime's default, which reads the environment).
static POLICY: Mutex<Option<LaunchPolicy>> = Mutex::new(None);

/// Sets how the package's runtimes schedule runs (launch.rs): only before the first run,
/// since a runtime keeps the policy it was made with. Fields not given keep their default.
/// Returns the policy as a dict.
#[pyfunction]
#[pyo3(signature = (*, standby=None, primed=None, pin_caller=None, wake_on_caller_cpu=None, idle_threads=None, standby_idle_s=None, warm_every_s=None, primed_for_s=None, thread_idle_s=None, idle_memory=None, standby_after=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn set_launch_policy<'py>(
    py: Python<'py>,
    standby: Option<bool>,
    primed: Option<bool>,
    pin_caller: Option<bool>,
    wake_on_caller_cpu: Option<bool>,
    idle_threads: Option<usize>,
    standby_idle_s: Option<f64>,
    warm_every_s: Option<f64>,
    primed_for_s: Option<f64>,
    thread_idle_s: Option<f64>,
    idle_memory: Option<u64>,
    standby_after: Option<usize>,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    use crate::options::seconds;
    let mut p = POLICY.lock().clone().unwrap_or_default();
    let set = |field: &mut Duration, name: &str, v: Option<f64>| -> PyResult<()> {
        if let Some(v) = v {
            *field = seconds(name, v)?;
        }
        Ok(())
    };
    set(&mut p.standby_idle, "standby_idle_s", standby_idle_s)?;
    set(&mut p.primed_for, "primed_for_s", primed_for_s)?;
    set(&mut p.thread_idle, "thread_idle_s", thread_idle_s)?;
    if let Some(w) = warm_every_s {
        p.warm_every = (w > 0.0).then(|| seconds("warm_every_s", w)).transpose()?;
    }
    p.standby = standby.unwrap_or(p.standby);
    p.primed = primed.unwrap_or(p.primed);
    p.pin_caller = pin_caller.unwrap_or(p.pin_caller);
    p.wake_on_caller_cpu = wake_on_caller_cpu.unwrap_or(p.wake_on_caller_cpu);
    p.idle_threads = idle_threads.unwrap_or(p.idle_threads);
    p.idle_memory = idle_memory.unwrap_or(p.idle_memory);
    p.standby_after = standby_after.unwrap_or(p.standby_after);
    // Values are checked first: a bad one is a ValueError whenever it comes.
    if RUNTIMES.get().is_some_and(|m| !m.lock().is_empty()) {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "the launch policy is set before the first run: this process has a runtime already",
        ));
    }
    *POLICY.lock() = Some(p.clone());
    policy_dict(py, &p)
}

/// The launch policy the package's runtimes are made with, as a dict.
#[pyfunction]
pub(crate) fn launch_policy(py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyDict>> {
    policy_dict(py, &POLICY.lock().clone().unwrap_or_default())
}

fn policy_dict<'py>(py: Python<'py>, p: &LaunchPolicy) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let d = pyo3::types::PyDict::new(py);
    d.set_item("standby", p.standby)?;
    d.set_item("primed", p.primed)?;
    d.set_item("pin_caller", p.pin_caller)?;
    d.set_item("wake_on_caller_cpu", p.wake_on_caller_cpu)?;
    d.set_item("idle_threads", p.idle_threads)?;
    d.set_item("standby_idle_s", p.standby_idle.as_secs_f64())?;
    d.set_item("warm_every_s", p.warm_every.map(|w| w.as_secs_f64()))?;
    d.set_item("primed_for_s", p.primed_for.as_secs_f64())?;
    d.set_item("thread_idle_s", p.thread_idle.as_secs_f64())?;
    d.set_item("idle_memory", p.idle_memory)?;
    d.set_item("standby_after", p.standby_after)?;
    Ok(d)
}

/// Checks an artifact folder; returns its protocol version (None: before the tool protocol).
#[pyfunction]
pub(crate) fn check_artifacts(dir: &str) -> PyResult<Option<u32>> {
    let rt = runtime_for(dir).map_err(errors::to_py)?;
    Ok(rt.artifacts().protocol())
}

/// Compiles (or loads from the cache, or unpacks) the guest's plain flavour now; the
/// fuel-metered one is compiled on first need. Returns the cache file.
#[pyfunction]
pub(crate) fn precompile(py: Python<'_>, dir: &str) -> PyResult<PathBuf> {
    let rt = runtime_for(dir).map_err(errors::to_py)?;
    py.detach(|| rt.prepare(Flavour::Plain)).map_err(errors::to_py)
}

/// The CPU level the runtime of `dir` compiles for: "x86-64-v2" or "native".
#[pyfunction]
pub(crate) fn cpu_level(dir: &str) -> PyResult<&'static str> {
    Ok(runtime_for(dir).map_err(errors::to_py)?.cpu_level().as_str())
}

/// Where a cache file came from ("compiled", "built", "unpacked"), or None when it
/// is missing or damaged (its sidecar's length and checksum do not match).
#[pyfunction]
pub(crate) fn cache_origin(py: Python<'_>, path: PathBuf) -> Option<&'static str> {
    py.detach(|| wasi_python_runtime::check_cache_file(&path)).map(|o| o.as_str())
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
pub(crate) struct PyDoor(pub(crate) Py<PyAny>);

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
pub(crate) fn sweep_private_folders(py: Python<'_>, wait_s: f64) -> PyResult<usize> {
    let wait = crate::options::seconds("wait_s", wait_s)?;
    let runtimes: Vec<Runtime> = RUNTIMES.get().map(|m| m.lock().values().cloned().collect()).unwrap_or_default();
    Ok(py.detach(|| {
        // Their guests on standby hold private folders: ended first, they remove them.
        for rt in &runtimes {
            rt.retire();
        }
        wasi_python_runtime::sweep_private_folders(wait)
    }))
}

/// What the launchers of this process's runtimes did for runs from the preload image
/// file `image` (what `prepare_preload` returns), or for all: their sum.
fn launch_stats(py: Python<'_>, image: Option<PathBuf>) -> Vec<wasi_python_runtime::LaunchStats> {
    let runtimes: Vec<Runtime> = RUNTIMES.get().map(|m| m.lock().values().cloned().collect()).unwrap_or_default();
    py.detach(|| runtimes.iter().map(|rt| rt.launch_stats(image.as_deref())).collect())
}

/// How many guests wait on standby in this process, for runs from the preload image
/// file `image`, or for all (a diagnostic).
#[pyfunction]
#[pyo3(signature = (image=None))]
pub(crate) fn guests_on_standby(py: Python<'_>, image: Option<PathBuf>) -> usize {
    launch_stats(py, image).iter().map(|s| s.guests_on_standby).sum()
}

/// How often guests on standby were sent to warm up while they waited, for runs from
/// the preload image file `image`, or for all (a diagnostic).
#[pyfunction]
#[pyo3(signature = (image=None))]
pub(crate) fn standby_warmups(py: Python<'_>, image: Option<PathBuf>) -> usize {
    launch_stats(py, image).iter().map(|s| s.standby_warmups).sum()
}

/// How many runs guests on standby served, for runs from the preload image file
/// `image`, or for all (a diagnostic: a test tells the path a run took by it).
#[pyfunction]
#[pyo3(signature = (image=None))]
pub(crate) fn standby_runs(py: Python<'_>, image: Option<PathBuf>) -> usize {
    launch_stats(py, image).iter().map(|s| s.standby_runs).sum()
}

/// How many runs primed instances served (runs back to back), for runs from the preload
/// image file `image`, or for all (a diagnostic).
#[pyfunction]
#[pyo3(signature = (image=None))]
pub(crate) fn primed_runs(py: Python<'_>, image: Option<PathBuf>) -> usize {
    launch_stats(py, image).iter().map(|s| s.primed_runs).sum()
}

/// How many primed instances wait for a run now, for runs from the preload image file
/// `image`, or for all (a diagnostic: a test makes one before the run it checks).
#[pyfunction]
#[pyo3(signature = (image=None))]
pub(crate) fn primed_waiting(py: Python<'_>, image: Option<PathBuf>) -> usize {
    launch_stats(py, image).iter().map(|s| s.primed_waiting).sum()
}

/// How many bytes the idle pool slots of this process's runtimes keep resident now (a
/// diagnostic: the launch policy's `idle_memory` bounds it once they are idle).
#[pyfunction]
pub(crate) fn idle_slot_bytes(py: Python<'_>) -> u64 {
    launch_stats(py, None).iter().map(|s| s.idle_slot_bytes).sum()
}

/// How many compiled `-c` programs this process keeps for runs from preload images
/// (a diagnostic).
#[pyfunction]
pub(crate) fn compiled_programs(py: Python<'_>) -> usize {
    launch_stats(py, None).iter().map(|s| s.compiled_programs).sum()
}

/// The modules a run preloads when `preload=` is not given, for these artifacts.
#[pyfunction]
pub(crate) fn default_preload(dir: &str) -> PyResult<Vec<String>> {
    let rt = runtime_for(dir).map_err(errors::to_py)?;
    Ok(wasi_python_runtime::default_preload(rt.artifacts()))
}

/// Builds (or finds in the cache) the snapshot `preload=` asks for now (None: the
/// default set; empty: none). Returns its file, or None when there is none to build.
#[pyfunction]
#[pyo3(signature = (dir, preload))]
pub(crate) fn prepare_preload(py: Python<'_>, dir: &str, preload: Option<Vec<String>>) -> PyResult<Option<PathBuf>> {
    let rt = runtime_for(dir).map_err(errors::to_py)?;
    py.detach(|| rt.prepare_preload(&Preload::from_option(preload))).map_err(errors::to_py)
}

/// How often a waiting `run` looks at Python's signals (Ctrl-C).
pub(crate) const SIGNAL_POLL: Duration = Duration::from_millis(10);

/// Checks a tool's input schema against the protocol's subset; ValueError says why not.
#[pyfunction]
pub(crate) fn check_schema(schema_json: &str, validates_input: bool) -> PyResult<()> {
    let schema = convert::json_arg(schema_json, "the input schema")?;
    InputSchema::compile(&schema, SchemaOptions { validates_input })
        .map(|_| ())
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("input schema: {e}")))
}

/// Runs one guest with `options` (used once), waiting with the GIL released and
/// looking at Python's signals every [`SIGNAL_POLL`]: Ctrl-C cancels the run. With
/// `stream`, what the guest writes and shows goes there as it comes; with `on_event`
/// too, each event is handed to `on_event(kind, payload)` on this thread as it comes
/// (stream.rs), else the stream is left to its other reader.
#[pyfunction]
#[pyo3(signature = (artifacts, argv, stdin, options, cancel=None, stream=None, on_event=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    py: Python<'_>,
    artifacts: &str,
    argv: Vec<String>,
    stdin: Vec<u8>,
    options: &Options,
    cancel: Option<PyRef<'_, CancelToken>>,
    stream: Option<PyRef<'_, EventStream>>,
    on_event: Option<Bound<'_, PyAny>>,
) -> PyResult<Outcome> {
    let token = cancel.map(|c| c.inner.clone()).unwrap_or_default();
    let mut cfg = options.take()?.argv(argv).stdin(stdin);
    if let Some(s) = &stream {
        cfg = cfg.events(s.events.clone());
    }
    let reader = stream.as_deref().zip(on_event.as_ref());
    Outcome::new(py, run_config(py, artifacts, cfg, token, reader)?)
}

/// Runs `cfg` on the artifacts at `artifacts`, cancelled by `token` (and Ctrl-C), as
/// [`run`]; `reader`: its stream's events go to that callable as they come.
pub(crate) fn run_config(
    py: Python<'_>,
    artifacts: &str,
    cfg: RunConfig,
    token: wasi_python_runtime::CancelToken,
    reader: Option<(&EventStream, &Bound<'_, PyAny>)>,
) -> PyResult<wasi_python_runtime::Completed> {
    let rt = runtime_for(artifacts).map_err(errors::to_py)?;
    let cfg = cfg.cancel(token.clone());
    let handle = py.detach(|| rt.start(cfg)).map_err(errors::to_py)?;
    let poll = |timeout| handle.wait_timeout(timeout);
    match reader {
        Some((stream, on_event)) => crate::stream::wait(py, stream, on_event, || token.cancel(), poll),
        None => wait_for(py, || token.cancel(), poll),
    }?
    .map_err(errors::to_py)
}

/// Starts one guest with `options` (used once) and returns at once: `run_async` awaits it
/// without a thread of its own waiting. When the run ends, its result goes to `on_done`
/// once: a [`Completions`] gets it under `key`, with no Python on the guest thread; any
/// other callable is called as `on_done(ok, value)` on the guest thread with the GIL:
/// `(True, end)` (completed.rs), or `(False, exception)` for a failure inside the runtime. What is
/// wrong before the run starts raises here instead, and nothing is delivered. Whatever
/// `on_done` raises is reported as unraisable.
/// With `stream`, what the guest writes and shows goes there as it comes.
#[pyfunction]
#[pyo3(signature = (artifacts, argv, stdin, options, cancel, on_done, key = 0, stream = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn start(
    py: Python<'_>,
    artifacts: &str,
    argv: Vec<String>,
    stdin: Vec<u8>,
    options: &Options,
    cancel: PyRef<'_, CancelToken>,
    on_done: Bound<'_, PyAny>,
    key: u64,
    stream: Option<PyRef<'_, EventStream>>,
) -> PyResult<()> {
    let rt = runtime_for(artifacts).map_err(errors::to_py)?;
    let mut cfg = options.take()?.argv(argv).stdin(stdin).cancel(cancel.inner.clone());
    if let Some(s) = &stream {
        cfg = cfg.events(s.events.clone());
    }
    if let Ok(completions) = on_done.cast::<Completions>() {
        let inner = completions.get().inner.clone();
        return py.detach(|| rt.start_then(cfg, move |result| inner.deliver(key, result))).map_err(errors::to_py);
    }
    let on_done = on_done.unbind();
    py.detach(|| rt.start_then(cfg, move |result| report(on_done, result))).map_err(errors::to_py)
}

/// Hands a run's end to the Python callback of [`start`].
fn report(on_done: Py<PyAny>, result: Result<wasi_python_runtime::Completed, wasi_python_runtime::Error>) {
    if crate::tool_host::SHUTTING_DOWN.load(std::sync::atomic::Ordering::SeqCst) {
        // The interpreter is going: no thread may attach to it now, nor drop a reference.
        std::mem::forget(on_done);
        return;
    }
    Python::attach(|py| {
        if let Err(e) = on_done.call1(py, crate::completions::end_value(py, result)) {
            e.write_unraisable(py, None);
        }
    });
}

/// Waits for `poll` to answer, with the GIL released, looking at signals between
/// waits: on Ctrl-C (or whatever a signal handler raises), calls `cancel`, waits for
/// the guest to unwind, then raises.
pub(crate) fn wait_for<T: Send>(
    py: Python<'_>,
    cancel: impl FnOnce(),
    poll: impl Fn(Duration) -> Option<T> + Sync,
) -> PyResult<T> {
    loop {
        if let Some(r) = py.detach(|| poll(SIGNAL_POLL)) {
            return Ok(r);
        }
        if let Err(interrupt) = py.check_signals() {
            cancel();
            py.detach(|| while poll(SIGNAL_POLL).is_none() {});
            return Err(interrupt);
        }
    }
}

/// Puts wasmtime's trap handlers back where another library has replaced them since this
/// process's first run (`wasi_python.ray` does after `ray.init()`); the signals put back.
/// Holds the GIL: it takes only the runtime's lock of the handlers, which no thread holds
/// while waiting for anything.
#[pyfunction]
pub(crate) fn restore_trap_handlers() -> Vec<i32> {
    wasi_python_runtime::restore_trap_handlers()
}
