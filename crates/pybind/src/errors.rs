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

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ArtifactsMissing", m.py().get_type::<ArtifactsMissing>())
}

/// The orphan rule forbids `From<Error> for PyErr`; this free function maps kinds.
pub(crate) fn to_py(e: Error) -> PyErr {
    match &e {
        Error::ArtifactsMissing { .. } | Error::ArtifactsInvalid { .. } => {
            ArtifactsMissing::new_err(e.to_string())
        }
        Error::Grant { .. } | Error::InvalidConfig { .. } => PyValueError::new_err(e.to_string()),
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}
