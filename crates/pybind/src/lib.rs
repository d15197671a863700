//! `wasi_python._wasi_python`: the thin PyO3 layer over `wasi-python-runtime`.
//!
//! Holds no policy: argument checking lives in the Python package
//! (`python/wasi_python`); defaults (exported as `DEFAULTS`), the tool record and
//! sandboxing in the runtime crate. Settings cross by keyword (`Options`), outcomes
//! as classes read by attribute (`Outcome`).

use pyo3::prelude::*;

mod completed;
mod completions;
mod convert;
mod errors;
mod files;
mod frame_stacks;
mod network;
mod notices;
mod options;
mod plain;
mod run;
mod session;
mod snapshot;
mod stream;
mod tool_host;

#[pymodule]
fn _wasi_python(m: &Bound<'_, PyModule>) -> PyResult<()> {
    frame_stacks::from_env(m.py());
    errors::register(m)?;
    m.add_class::<run::CancelToken>()?;
    m.add_class::<completions::Completions>()?;
    m.add_class::<stream::EventStream>()?;
    m.add_class::<session::SessionHandle>()?;
    m.add_class::<snapshot::SnapshotHandle>()?;
    m.add_class::<tool_host::CompiledTool>()?;
    m.add_class::<files::MemoryFilesHandle>()?;
    m.add_class::<options::Options>()?;
    m.add_class::<options::MountSpec>()?;
    m.add_class::<convert::Outcome>()?;
    m.add_class::<convert::ToolRecord>()?;
    m.add_class::<convert::ToolOutcome>()?;
    m.add_function(wrap_pyfunction!(run::run, m)?)?;
    m.add_function(wrap_pyfunction!(plain::run_plain, m)?)?;
    m.add_function(wrap_pyfunction!(plain::set_plain, m)?)?;
    m.add_function(wrap_pyfunction!(plain::plain_args, m)?)?;
    m.add_function(wrap_pyfunction!(completed::set_completed, m)?)?;
    m.add_function(wrap_pyfunction!(run::start, m)?)?;
    m.add_function(wrap_pyfunction!(run::check_artifacts, m)?)?;
    m.add_function(wrap_pyfunction!(run::precompile, m)?)?;
    m.add_function(wrap_pyfunction!(run::cpu_level, m)?)?;
    m.add_function(wrap_pyfunction!(run::cache_origin, m)?)?;
    m.add_function(wrap_pyfunction!(run::default_preload, m)?)?;
    m.add_function(wrap_pyfunction!(run::prepare_preload, m)?)?;
    m.add_function(wrap_pyfunction!(run::check_schema, m)?)?;
    m.add_function(wrap_pyfunction!(tool_host::shutdown_tools, m)?)?;
    m.add_function(wrap_pyfunction!(run::sweep_private_folders, m)?)?;
    m.add_function(wrap_pyfunction!(run::restore_trap_handlers, m)?)?;
    m.add_function(wrap_pyfunction!(notices::notices, m)?)?;
    m.add_function(wrap_pyfunction!(frame_stacks::keep_frame_stacks, m)?)?;
    m.add_function(wrap_pyfunction!(run::guests_on_standby, m)?)?;
    m.add_function(wrap_pyfunction!(run::standby_warmups, m)?)?;
    m.add_function(wrap_pyfunction!(run::primed_runs, m)?)?;
    m.add_function(wrap_pyfunction!(run::primed_waiting, m)?)?;
    m.add_function(wrap_pyfunction!(run::standby_runs, m)?)?;
    m.add_function(wrap_pyfunction!(run::set_launch_policy, m)?)?;
    m.add_function(wrap_pyfunction!(run::launch_policy, m)?)?;
    m.add_function(wrap_pyfunction!(run::compiled_programs, m)?)?;
    m.add_function(wrap_pyfunction!(run::idle_slot_bytes, m)?)?;
    m.add("WASMTIME_VERSION", wasi_python_runtime::WASMTIME_VERSION)?;
    m.add("DEFAULTS", options::defaults(m.py())?)?;
    Ok(())
}
