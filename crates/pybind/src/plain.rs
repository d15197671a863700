//! `run_plain`: a `run` call that passed only `argv` and `stdin`, the commonest call,
//! checked and started here rather than in the package's Python.
//!
//! Measured (docs/dev/perf-log/): the package's Python around such a run
//! (the arguments' checks, finding the artifact folder, copying the default settings)
//! took 7 us in a loop but about 140 us of a run spaced 5 ms apart, when each line of
//! Python runs from cold caches. The rules stay the package's: this takes only what
//! they surely accept (a list or tuple of str without NUL, bytes or str stdin, all
//! UTF-8) and answers `None` for anything else, which the package then checks itself
//! and refuses with its own error.

use std::ffi::OsString;

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use wasi_python_runtime::RunConfig;

use crate::options::Options;

/// What a plain call runs with, as the package last found it ([`set_plain`]).
struct Plain {
    /// The variable naming the artifact folder, its value then, and the folder found.
    var: String,
    value: Option<OsString>,
    artifacts: String,
    /// The package's default settings.
    config: RunConfig,
}

static PLAIN: Mutex<Option<Plain>> = Mutex::new(None);

/// Sets what [`run_plain`] runs with: the artifact folder the package found while
/// `$var` was `value`, and the default settings `options` (not used up).
#[pyfunction]
pub(crate) fn set_plain(var: String, value: Option<OsString>, artifacts: String, options: &Options) -> PyResult<()> {
    let config = options.config()?;
    *PLAIN.lock() = Some(Plain { var, value, artifacts, config });
    Ok(())
}

/// Runs `argv` with `stdin` and the default settings, as `_ext.run` would with the
/// package's checks passed; `None`, with nothing run, when the package must check the
/// call itself: arguments outside the plain case, no settings set yet, or an artifact
/// variable that changed since.
///
/// The answer is the package's `Completed` itself (completed.rs).
#[pyfunction]
pub(crate) fn run_plain(py: Python<'_>, argv: &Bound<'_, PyAny>, stdin: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> {
    let Some((artifacts, config, argv, stdin)) = plain_call(argv, stdin) else {
        return Ok(None);
    };
    let end = crate::run::run_config(py, &artifacts, config.argv(argv).stdin(stdin), Default::default(), None)?;
    crate::completed::completed(py, end).map(Some)
}

/// `(artifacts, argv, stdin, options)` for `_ext.run` or `_ext.start`, as the package's
/// `plain_args` makes them, for a call [`run_plain`] would take; `None` for the others.
#[pyfunction]
pub(crate) fn plain_args(argv: &Bound<'_, PyAny>, stdin: &Bound<'_, PyAny>) -> Option<(String, Vec<String>, Vec<u8>, Options)> {
    let (artifacts, config, argv, stdin) = plain_call(argv, stdin)?;
    Some((artifacts, argv, stdin, Options::unused(config)))
}

/// The artifact folder, default settings, arguments and stdin of a plain call.
fn plain_call(argv: &Bound<'_, PyAny>, stdin: &Bound<'_, PyAny>) -> Option<(String, RunConfig, Vec<String>, Vec<u8>)> {
    let (argv, stdin) = (plain_argv(argv)?, plain_stdin(stdin)?);
    let plain = PLAIN.lock();
    let p = plain.as_ref()?;
    // Read with the GIL held, as Python's os.environ writes it (putenv).
    if std::env::var_os(&p.var) != p.value {
        return None;
    }
    Some((p.artifacts.clone(), p.config.clone(), argv, stdin))
}

/// The arguments, if a list or tuple of str that each have a UTF-8 form and no NUL.
fn plain_argv(argv: &Bound<'_, PyAny>) -> Option<Vec<String>> {
    let items = if let Ok(list) = argv.cast::<PyList>() {
        list.iter().collect::<Vec<_>>()
    } else {
        argv.cast::<PyTuple>().ok()?.iter().collect()
    };
    items
        .iter()
        .map(|a| {
            let s = a.cast::<PyString>().ok()?.to_str().ok()?;
            (!s.contains('\0')).then(|| s.to_owned())
        })
        .collect()
}

/// The stdin bytes, if `stdin` is bytes, or str with a UTF-8 form.
fn plain_stdin(stdin: &Bound<'_, PyAny>) -> Option<Vec<u8>> {
    if let Ok(b) = stdin.cast::<PyBytes>() {
        return Some(b.as_bytes().to_vec());
    }
    Some(stdin.cast::<PyString>().ok()?.to_str().ok()?.as_bytes().to_vec())
}
