//! The exception tree and the mapping from the runtime's errors.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use wasi_python_runtime::Error;

create_exception!(
    wasi_python,
    ArtifactsMissing,
    PyException,
    "The guest artifacts are missing or unusable; the message names the command that fixes it."
);

create_exception!(
    wasi_python,
    PreloadError,
    PyRuntimeError,
    "The snapshot with the modules of `preload=` could not be built; `module` names the module \
     that does not import (None when something else failed)."
);

create_exception!(
    wasi_python,
    SessionEnded,
    PyRuntimeError,
    "The session has ended; `reason` says why: \"closed\", \"idle\", \"lifetime\", \"exit\", or \
     the trap that ended it (\"deadline\", \"out of fuel\", \"cancelled\", ...)."
);

create_exception!(
    wasi_python,
    SessionBusy,
    PyRuntimeError,
    "A turn is already running in another thread: a session serves one at a time."
);

create_exception!(
    wasi_python,
    SnapshotError,
    PyRuntimeError,
    "A session snapshot could not be taken, saved or loaded; `kind` names the cause: \"setup\" \
     (prepare's setup failed), \"busy\", \
     \"ended\", \"open_files\", \"magic\", \"version\", \"truncated\", \"malformed\", \
     \"too_large\", \"checksum\", \"compression\", \"other_guest\", \"other_wasmtime\", \
     \"other_engine\", \"other_package\", \"other_base\", \"io\"."
);

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("ArtifactsMissing", py.get_type::<ArtifactsMissing>())?;
    m.add("PreloadError", py.get_type::<PreloadError>())?;
    m.add("SessionEnded", py.get_type::<SessionEnded>())?;
    m.add("SessionBusy", py.get_type::<SessionBusy>())?;
    m.add("SnapshotError", py.get_type::<SnapshotError>())
}

/// `err` with the attribute `name` set on its value.
pub(crate) fn with_attr<T>(err: PyErr, name: &str, value: T) -> PyErr
where
    T: for<'py> IntoPyObject<'py>,
{
    Python::attach(|py| {
        let _ = err.value(py).setattr(name, value);
    });
    err
}

/// The orphan rule forbids `From<Error> for PyErr`; this free function maps kinds.
pub(crate) fn to_py(e: Error) -> PyErr {
    match &e {
        Error::ArtifactsMissing { .. } | Error::ArtifactsInvalid { .. } => {
            ArtifactsMissing::new_err(e.to_string())
        }
        Error::Grant { .. } | Error::InvalidConfig { .. } => PyValueError::new_err(e.to_string()),
        Error::Preload { .. } | Error::Snapshot { .. } => {
            let module = match &e {
                Error::Preload { module, .. } => Some(module.clone()),
                _ => None,
            };
            with_attr(PreloadError::new_err(e.to_string()), "module", module)
        }
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}
