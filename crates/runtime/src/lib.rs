//! Runs the CPython-for-WASI guest under wasmtime: one sandboxed program per run,
//! with limits, grants of host folders, captured output and a door for tools.
//!
//! This crate is the only one that knows wasmtime. It never runs guest code outside
//! a fresh store, never lets a guest's behaviour become an `Err` (a guest's ending is
//! a [`Completed`]), and grants nothing by default (see [`RunConfig`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use wasi_python_runtime::{Artifacts, RunConfig, Runtime};
//!
//! # fn main() -> Result<(), wasi_python_runtime::Error> {
//! let runtime = Runtime::new(Artifacts::from_env()?);
//! let done = runtime.run(
//!     RunConfig::new(["-c", "print(6 * 7)"]).deadline(Some(Duration::from_secs(5))),
//! )?;
//! assert_eq!(done.exit_code, Some(0));
//! assert_eq!(done.stdout, b"42\n");
//! # Ok(())
//! # }
//! ```

mod artifacts;
mod cached;
mod compiled;
mod config;
mod cross;
mod delta;
mod control;
mod display;
mod engine;
mod error;
mod files;
mod fixed;
mod fork;
mod guest;
mod guest_mem;
mod host;
mod idle_memory;
mod launch;
mod mappings;
mod mounts;
mod notice;
mod outcome;
mod output;
mod quota;
mod rest;
mod run;
mod runtime;
mod session;
mod signals;
mod snapshot;
mod standby;
mod stop;
mod tempdir;

pub use artifacts::{ARTIFACTS_ENV, Artifacts, DIST_COMMAND, MANIFEST_MAGIC};
pub use cross::{cross_cache_name, precompile_for};
pub use config::{Grant, Limits, MIN_MEMORY_BYTES, Preload, RunConfig};
pub use snapshot::{default_preload, preopen_table};
pub use mounts::{
    Change, DEFAULT_FILE_TIMEOUT, DEFAULT_MAX_FILE_CALLS, Errno, FileError, FileFault, FileKind, FileProvider, FileRecord, MemoryFiles,
    Mount, RECORD_LIMIT, Stat, WRITE_BACK_GRACE,
};
pub use cached::{COMPILED_MAGIC, Origin as CacheOrigin, check as check_cache_file};
pub use engine::{CACHE_ENV, CPU_ENV, CpuLevel, Flavour, WASMTIME_VERSION, default_cache_dir};
pub use error::Error;
pub use files::{DEFAULT_FILE_WRITE_BYTES, DEFAULT_MAX_OPEN_FILES, MAX_CREATED_ENTRIES, guest_descriptors_held};
pub use signals::restore_trap_handlers;
pub use tempdir::sweep_private_folders;
pub use launch::{LaunchPolicy, LaunchStats, PIN_CALLER_ENV, REST_ENV, STANDBY_ENV};
pub use outcome::{Completed, Trapped, Truncated};
pub use display::{DEFAULT_DISPLAY_BYTES, Display, MAX_DISPLAYS, MimeKind};
pub use output::{Event, Events, Next, STREAM_QUEUE_BYTES, STREAM_STALL};
pub use run::RunHandle;
pub use runtime::{Runtime, RuntimeBuilder};
pub use notice::{Notice, NoticeKind};
pub use fork::{PACKAGE_VERSION, Snapshot, SnapshotError};
/// The saved-snapshot file format (`crates/image`), re-exported for embedders.
pub use wasi_python_image as image;
pub use session::{Closing, RestStats, Session, SessionEnd, SessionError, SessionLimits, Turn, TurnHandle};
/// The tool door (`crates/door`), re-exported for embedders; its other names (the
/// bounded wait, `Stop`) are under [`door`].
pub use wasi_python_door::{
    CallContext, CancelToken, DEADLINE_MARGIN, Door, DoorAnswer, Invocation, ToolDoor, ToolHost, ToolOutput, ToolSpec,
    ToolSpecError,
};
pub use wasi_python_door as door;
/// The scheduling primitives the runtime's launcher is built from (`crates/sched`).
pub use wasi_python_sched as sched;

pub use wasi_python_door::network::{NetworkDoor, NetworkHost};
/// The pure crates the tool door composes, re-exported for embedders.
pub use wasi_python_budget as budget;
pub use wasi_python_protocol as protocol;
pub use wasi_python_record as record;
pub use wasi_python_schema as schema;
