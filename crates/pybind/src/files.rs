//! Mounts from Python: providers written in Python (through the package's adapter,
//! `wasi_python._files`), and the built-in `MemoryFiles` in Rust.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use wasi_python_runtime::{Change, Errno, FileError, FileKind, FileProvider, FileRecord, MemoryFiles, Stat};

use crate::tool_host::{SHUTTING_DOWN, enter_python, fault_of};

/// A `MemoryFiles` for one run: the user's dict's bytes, shared without a copy.
#[pyclass(module = "wasi_python._wasi_python", frozen)]
pub(crate) struct MemoryFilesHandle {
    inner: Arc<MemoryFiles>,
}

#[pymethods]
impl MemoryFilesHandle {
    /// `files`: {path: bytes}; `observer(op, path, data, to)` is called after each change
    /// the guest makes ("write", "remove", "mkdir", "rmdir", "rename").
    #[new]
    #[pyo3(signature = (files, writable, observer=None))]
    fn new(files: &Bound<'_, PyDict>, writable: bool, observer: Option<Py<PyAny>>) -> PyResult<Self> {
        let mut entries = Vec::with_capacity(files.len());
        for (k, v) in files.iter() {
            let path: String = k.extract()?;
            let data: PyBackedBytes = v.extract()?;
            entries.push((path, Bytes::from_owner(data)));
        }
        let mut m = MemoryFiles::new(entries, writable).map_err(pyo3::exceptions::PyValueError::new_err)?;
        if let Some(observer) = observer {
            m = m.with_observer(Box::new(move |change: &Change| {
                if SHUTTING_DOWN.load(Ordering::SeqCst) {
                    return;
                }
                Python::attach(|py| {
                    let none = py.None();
                    let args = match change {
                        Change::Write(p, data) => ("write", p.as_str(), PyBytes::new(py, data).into_any().unbind(), none),
                        Change::Remove(p) => ("remove", p.as_str(), py.None(), none),
                        Change::Mkdir(p) => ("mkdir", p.as_str(), py.None(), none),
                        Change::Rmdir(p) => ("rmdir", p.as_str(), py.None(), none),
                        Change::Rename(a, b) => ("rename", a.as_str(), py.None(), b.into_pyobject(py).map(|s| s.into_any().unbind()).unwrap_or(none)),
                    };
                    // The observer is the package's own dict update; a failure there is its bug.
                    let _ = observer.call1(py, args);
                });
            }));
        }
        Ok(MemoryFilesHandle { inner: Arc::new(m) })
    }
}

/// A provider written in Python: `adapter.call(op, path, arg)` answers
/// `("ok", value)`, `("errno", "ENOENT")` or `("fault", "Type: first line")`.
struct PyProvider {
    adapter: Py<PyAny>,
}

fn kind_of(s: &str) -> Option<FileKind> {
    match s {
        "file" => Some(FileKind::File),
        "dir" => Some(FileKind::Dir),
        _ => None,
    }
}

impl PyProvider {
    fn call<T>(&self, op: &str, path: &str, arg: Option<Bytes>, to: Option<&str>, value: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>) -> Result<T, FileError> {
        if SHUTTING_DOWN.load(Ordering::SeqCst) {
            return Err(FileError::Fault("the host's interpreter is shutting down".into()));
        }
        Python::attach(|py| {
            let r = (|| -> PyResult<Result<T, FileError>> {
                let arg: Py<PyAny> = match (arg, to) {
                    (Some(b), _) => PyBytes::new(py, &b).into_any().unbind(),
                    (None, Some(t)) => t.into_pyobject(py)?.into_any().unbind(),
                    (None, None) => py.None(),
                };
                let out = self.adapter.call_method1(py, pyo3::intern!(py, "call"), (op, path, arg))?;
                let out = out.bind(py).cast::<PyTuple>()?.clone();
                let status: String = out.get_item(0)?.extract()?;
                let payload = out.get_item(1)?;
                Ok(match status.as_str() {
                    "ok" => match value(&payload) {
                        Ok(v) => Ok(v),
                        Err(e) => Err(FileError::Fault(format!("{op} answered badly: {}", fault_of(py, &e)))),
                    },
                    "errno" => {
                        let name: String = payload.extract()?;
                        match Errno::from_name(&name) {
                            Some(e) => Err(FileError::Errno(e)),
                            None => Err(FileError::Fault(format!("{op} refused with {name}, which the guest has no name for"))),
                        }
                    }
                    _ => Err(FileError::Fault(payload.extract::<String>().unwrap_or_else(|_| "unknown failure".into()))),
                })
            })();
            r.unwrap_or_else(|e| Err(FileError::Fault(fault_of(py, &e))))
        })
    }
}

impl FileProvider for PyProvider {
    fn stat(&self, path: &str) -> Result<Stat, FileError> {
        self.call("stat", path, None, None, |v| {
            let (kind, size, mtime_ns): (String, u64, u64) = v.extract()?;
            let kind = kind_of(&kind).ok_or_else(|| pyo3::exceptions::PyValueError::new_err(format!("kind {kind:?} is not 'file' or 'dir'")))?;
            Ok(Stat { kind, size, mtime_ns })
        })
    }
    fn list(&self, path: &str) -> Result<Vec<(String, FileKind)>, FileError> {
        self.call("list", path, None, None, |v| {
            let items: Vec<(String, String)> = v.extract()?;
            items
                .into_iter()
                .map(|(n, k)| kind_of(&k).map(|k| (n, k)).ok_or_else(|| pyo3::exceptions::PyValueError::new_err(format!("kind {k:?} is not 'file' or 'dir'"))))
                .collect()
        })
    }
    fn read(&self, path: &str) -> Result<Bytes, FileError> {
        self.call("read", path, None, None, |v| Ok(Bytes::from_owner(v.extract::<PyBackedBytes>()?)))
    }
    fn write(&self, path: &str, data: Bytes) -> Result<(), FileError> {
        self.call("write", path, Some(data), None, |_| Ok(()))
    }
    fn mkdir(&self, path: &str) -> Result<(), FileError> {
        self.call("mkdir", path, None, None, |_| Ok(()))
    }
    fn remove(&self, path: &str) -> Result<(), FileError> {
        self.call("remove", path, None, None, |_| Ok(()))
    }
    fn rmdir(&self, path: &str) -> Result<(), FileError> {
        self.call("rmdir", path, None, None, |_| Ok(()))
    }
    fn rename(&self, from: &str, to: &str) -> Result<(), FileError> {
        self.call("rename", from, None, Some(to), |_| Ok(()))
    }
    fn enter_thread(&self, body: Box<dyn FnOnce() + Send + '_>) {
        enter_python(body)
    }
}

/// A mount's provider as the package hands it over: the built-in `MemoryFilesHandle`,
/// served in Rust, or an adapter over a provider written in Python.
pub(crate) fn provider(obj: &Bound<'_, PyAny>) -> Arc<dyn FileProvider> {
    match obj.cast::<MemoryFilesHandle>() {
        Ok(handle) => handle.get().inner.clone(),
        Err(_) => Arc::new(PyProvider { adapter: obj.clone().unbind() }),
    }
}

/// `Completed.files` as a dict; the package builds its dataclass.
pub(crate) fn record<'py>(py: Python<'py>, r: &FileRecord) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let calls = PyDict::new(py);
    for (k, v) in &r.calls {
        calls.set_item(k, v)?;
    }
    d.set_item("calls", calls)?;
    d.set_item("total", r.total)?;
    d.set_item("refused_calls", r.refused_calls)?;
    let faults = |v: &[wasi_python_runtime::FileFault]| -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, v.iter().map(|f| (f.method.as_str(), f.path.as_str(), f.error.as_str())))
    };
    d.set_item("faults", faults(&r.faults)?)?;
    d.set_item("faults_total", r.faults_total)?;
    d.set_item("refused_writes", faults(&r.refused_writes)?)?;
    d.set_item("refused_writes_total", r.refused_writes_total)?;
    d.set_item("files_written", r.files_written)?;
    d.set_item("bytes_written", r.bytes_written)?;
    d.set_item("undelivered", PyList::new(py, &r.undelivered)?)?;
    d.set_item("undelivered_total", r.undelivered_total)?;
    Ok(d)
}
