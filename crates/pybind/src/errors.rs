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

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ArtifactsMissing", m.py().get_type::<ArtifactsMissing>())?;
    m.add("PreloadError", m.py().get_type::<PreloadError>())
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
            let err = PreloadError::new_err(e.to_string());
            Python::attach(|py| {
                let _ = err.value(py).setattr("module", module);
            });
            err
        }
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}
