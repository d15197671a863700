//! The package's `Completed`, made here for a run's or a turn's end that has no tool or
//! file record (the commonest): the package's `completed_from_ext`, ten attribute reads
//! of an `Outcome` and a frozen dataclass's `__init__`, cost a run spaced 5 ms apart
//! 30-50 us with cold caches, and a session turn in a loop about 3 us of its 20.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyTuple, PyType};
use wasi_python_runtime::Completed;

use crate::convert::Outcome;

/// The package's `Completed` of `c` when it is registered and `c` has no tool or file
/// record and no display; else the extension's `Outcome`, which the package's `completed_from_ext`
/// turns into one.
pub(crate) fn completed(py: Python<'_>, c: Completed) -> PyResult<Py<PyAny>> {
    match COMPLETED.get(py) {
        Some(maker) if c.tools.is_none() && c.files.is_none() && c.displays.is_empty() && c.bad_displays == 0 => maker.make(py, c),
        _ => Ok(Py::new(py, Outcome::new(py, c)?)?.into_any()),
    }
}

/// The fields of the package's `Completed`, in order; [`set_completed`] checks them.
const FIELDS: [&str; 13] = [
    "exit_code",
    "stdout",
    "stderr",
    "trapped",
    "truncated",
    "fuel_used",
    "duration_s",
    "tools",
    "file_bytes_written",
    "files",
    "network",
    "displays",
    "bad_displays",
];

/// Makes the package's `Completed` (a frozen dataclass with slots) of a run's or a
/// turn's end: `object.__new__` and each field's slot set, as its `__init__` would set them,
/// without running Python.
struct Maker {
    cls: Py<PyAny>,
    new: Py<PyAny>,
    /// Per field of [`FIELDS`], its slot descriptor's `__set__`.
    setters: Vec<Py<PyAny>>,
}

static COMPLETED: PyOnceLock<Maker> = PyOnceLock::new();

/// Registers the package's `Completed` class for [`completed`]; `fields` are its
/// dataclass fields in order, which must be [`FIELDS`] (else ValueError).
#[pyfunction]
pub(crate) fn set_completed(py: Python<'_>, cls: &Bound<'_, PyType>, fields: Vec<String>) -> PyResult<()> {
    if fields != FIELDS {
        return Err(PyValueError::new_err(format!("Completed's fields are {fields:?}, not {FIELDS:?}")));
    }
    let new = py.import("builtins")?.getattr("object")?.getattr("__new__")?.unbind();
    let setters = FIELDS
        .iter()
        .map(|f| Ok(cls.getattr(*f)?.getattr("__set__")?.unbind()))
        .collect::<PyResult<Vec<_>>>()?;
    let _ = COMPLETED.set(py, Maker { cls: cls.clone().into_any().unbind(), new, setters });
    Ok(())
}

impl Maker {
    /// `c`, which has no tool or file record.
    fn make(&self, py: Python<'_>, c: Completed) -> PyResult<Py<PyAny>> {
        let values: [Py<PyAny>; 13] = [
            c.exit_code.into_pyobject(py)?.into_any().unbind(),
            PyBytes::new(py, &c.stdout).into_any().unbind(),
            PyBytes::new(py, &c.stderr).into_any().unbind(),
            c.trapped.as_ref().map(|t| t.as_str()).into_pyobject(py)?.into_any().unbind(),
            PyTuple::new(py, c.truncated.names())?.into_any().unbind(),
            c.fuel_used.into_pyobject(py)?.into_any().unbind(),
            c.duration.as_secs_f64().into_pyobject(py)?.into_any().unbind(),
            py.None(),
            c.file_bytes_written.into_pyobject(py)?.into_any().unbind(),
            py.None(),
            // `network`: the package adds a run's network record itself.
            py.None(),
            PyTuple::empty(py).into_any().unbind(),
            0u64.into_pyobject(py)?.into_any().unbind(),
        ];
        let obj = self.new.call1(py, (self.cls.clone_ref(py),))?;
        for (set, value) in self.setters.iter().zip(values) {
            set.call1(py, (&obj, value))?;
        }
        Ok(obj)
    }
}
