//! Conversions between the runtime's types and Python objects.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use wasi_python_runtime::Completed;

/// The fields of `Completed` as a dict; the Python package builds its dataclass.
pub(crate) fn completed<'py>(py: Python<'py>, c: &Completed) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("exit_code", c.exit_code)?;
    d.set_item("stdout", PyBytes::new(py, &c.stdout))?;
    d.set_item("stderr", PyBytes::new(py, &c.stderr))?;
    d.set_item("trapped", c.trapped.as_ref().map(|t| t.as_str().to_owned()))?;
    let mut truncated = Vec::new();
    if c.truncated.stdout {
        truncated.push("stdout");
    }
    if c.truncated.stderr {
        truncated.push("stderr");
    }
    d.set_item("truncated", truncated)?;
    d.set_item("fuel_used", c.fuel_used)?;
    d.set_item("duration_s", c.duration.as_secs_f64())?;
    Ok(d)
}
