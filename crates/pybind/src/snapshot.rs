//! `SnapshotHandle`: a session's snapshot (the package's `Snapshot` wraps it), saved to
//! bytes or a file and loaded back, the runtime's work done with the GIL released.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use wasi_python_runtime::image::Key;
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
    /// A saved snapshot's bytes back, checked against the artifacts in `dir`; with a
    /// `key`, refused unless signed with it; a delta laid over `base`, the snapshot of
    /// the file it names.
    #[staticmethod]
    #[pyo3(signature = (dir, data, key=None, base=None))]
    fn load(py: Python<'_>, dir: &str, data: &[u8], key: Option<&[u8]>, base: Option<PyRef<'_, SnapshotHandle>>) -> PyResult<SnapshotHandle> {
        let key = key.map(signing_key).transpose()?;
        let runtime = runtime_for(dir).map_err(errors::to_py)?;
        let parent = base.map(|b| b.snapshot.clone());
        let snapshot = py.detach(|| runtime.load_snapshot_over(data, key.as_ref(), parent.as_ref())).map_err(to_py)?;
        Ok(SnapshotHandle { snapshot, runtime })
    }

    /// The file's bytes: the pages that differ from the base image (or, `since`, from
    /// that snapshot's: a delta), compressed; signed with `key` if given.
    #[pyo3(signature = (key=None, since=None))]
    fn to_bytes<'py>(&self, py: Python<'py>, key: Option<&[u8]>, since: Option<PyRef<'_, SnapshotHandle>>) -> PyResult<Bound<'py, PyBytes>> {
        let key = key.map(signing_key).transpose()?;
        let parent = since.map(|b| b.snapshot.clone());
        let bytes = py
            .detach(|| match (&parent, &key) {
                (Some(parent), key) => self.snapshot.to_bytes_since(&self.runtime, parent, key.as_ref()),
                (None, Some(key)) => self.snapshot.to_signed_bytes(&self.runtime, key),
                (None, None) => self.snapshot.to_bytes(&self.runtime),
            })
            .map_err(to_py)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// The 4 KiB pages this snapshot laid over what it was taken (or loaded) against.
    #[getter]
    fn new_pages(&self) -> u64 {
        self.snapshot.new_pages()
    }

    /// The 4 KiB pages its layers hold over the base image.
    #[getter]
    fn layered_pages(&self) -> u64 {
        self.snapshot.layered_pages()
    }

    /// The id of the file it was first saved as or loaded from (hex), or None.
    #[getter]
    fn id(&self) -> Option<String> {
        self.snapshot.id().map(|id| id.iter().map(|b| format!("{b:02x}")).collect())
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

/// A signing key, or a ValueError naming `key` (too short).
fn signing_key(secret: &[u8]) -> PyResult<Key> {
    Key::new(secret).map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("key: {e}")))
}

/// A `SnapshotError` with `kind` set (see `SnapshotError::kind`).
pub(crate) fn to_py(e: SnapshotError) -> PyErr {
    match e {
        SnapshotError::Runtime(e) => errors::to_py(e),
        e => errors::with_attr(errors::SnapshotError::new_err(e.to_string()), "kind", e.kind()),
    }
}
