//! The runtime's notices in Python: each one kept (the last [`KEPT`], for `notices()`)
//! and logged to the `logging` logger `wasi_python`, with the GIL taken only then.
//!
//! A notice is made on the thread doing the work (a compile, a preload build), which the
//! extension's calls always leave with the GIL released (ARCHITECTURE.md, "Who holds the
//! GIL"), so taking it here waits for no one who waits for us. Logged at WARNING (a
//! compile of minutes, a damaged shipped file, a default preload dropped): with no
//! logging configured, Python's last-resort handler prints it on stderr.

use std::collections::VecDeque;

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use wasi_python_runtime::{Notice, NoticeKind};

/// At most this many notices are kept; the oldest go first.
const KEPT: usize = 64;

static NOTICES: Mutex<VecDeque<(&'static str, String)>> = Mutex::new(VecDeque::new());

/// The sink of the package's runtimes: keeps `notice`, then logs it.
pub(crate) fn forward(notice: &Notice) {
    {
        let mut kept = NOTICES.lock();
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back((notice.kind.as_str(), notice.message.clone()));
    }
    if crate::tool_host::SHUTTING_DOWN.load(std::sync::atomic::Ordering::SeqCst) {
        // The interpreter is going: no thread may attach to it now.
        eprintln!("wasi_python: {}", notice.message);
        return;
    }
    Python::attach(|py| {
        if let Err(e) = log(py, notice) {
            e.write_unraisable(py, None);
        }
    });
}

/// `logging.getLogger("wasi_python").log(level, "%s", message, extra={"notice_kind": kind})`.
fn log(py: Python<'_>, notice: &Notice) -> PyResult<()> {
    let logging = py.import("logging")?;
    let level = match notice.kind {
        NoticeKind::Compiling | NoticeKind::ShippedUnusable | NoticeKind::PreloadSkipped => logging.getattr("WARNING")?,
        _ => logging.getattr("INFO")?,
    };
    let logger = logging.call_method1("getLogger", ("wasi_python",))?;
    let extra = PyDict::new(py);
    extra.set_item("notice_kind", notice.kind.as_str())?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("extra", extra)?;
    logger.call_method("log", (level, "%s", &notice.message), Some(&kwargs))?;
    Ok(())
}

/// The notices of this process so far, oldest first (the last 64), as `(kind, message)`.
/// Keeps the GIL: the list's lock is held only for a push or this copy.
#[pyfunction]
pub(crate) fn notices() -> Vec<(&'static str, String)> {
    NOTICES.lock().iter().cloned().collect()
}
