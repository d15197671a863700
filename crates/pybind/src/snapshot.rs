//! `SnapshotHandle`: a session's snapshot (the package's `Snapshot` wraps it), saved to
//! bytes or a file and loaded back, the runtime's work done with the GIL released.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use wasi_python_runtime::{Runtime, Snapshot, SnapshotError};

use crate::errors;
use crate::run::runtime_for;

#[pyclass(module = "wasi_python._wasi_python", frozen)]
pub(crate) struct SnapshotHandle {
    pub(crate) snapshot: Snapshot,
    runtime: Runtime,
}

impl SnapshotHandle {
    pub(crate) fn new(snapshot: Snapshot, runtime: Runtime) -> Self {
        SnapshotHandle { snapshot, runtime }
    }
}

#[pymethods]
impl SnapshotHandle {
    /// A saved snapshot's bytes back, checked against the artifacts in `dir`.
    #[staticmethod]
    fn load(py: Python<'_>, dir: &str, data: &[u8]) -> PyResult<SnapshotHandle> {
        let runtime = runtime_for(dir).map_err(errors::to_py)?;
        let snapshot = py.detach(|| runtime.load_snapshot(data)).map_err(to_py)?;
        Ok(SnapshotHandle { snapshot, runtime })
    }

    /// The file's bytes: the pages that differ from the base image, compressed.
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = py.detach(|| self.snapshot.to_bytes(&self.runtime)).map_err(to_py)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// The memory's size in bytes: the least `memory_bytes` that can start from it.
    #[getter]
    fn memory_bytes(&self) -> u64 {
        self.snapshot.memory_bytes()
    }

    /// The modules of the preload image the snapshot's line started from.
    #[getter]
    fn base_modules(&self) -> Vec<String> {
        self.snapshot.base_modules().to_vec()
    }
}

/// A `SnapshotError` with `kind` set (see `SnapshotError::kind`).
pub(crate) fn to_py(e: SnapshotError) -> PyErr {
    match e {
        SnapshotError::Runtime(e) => errors::to_py(e),
        e => errors::with_attr(errors::SnapshotError::new_err(e.to_string()), "kind", e.kind()),
    }
}
