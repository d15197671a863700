//! How a guest ended, named by kind: [`Completed`], [`Trapped`], and the mapping
//! from what wasmtime returns (an exit status, our stop, a trap) to them.

use std::time::Duration;

use wasmtime::Trap;
use wasmtime_wasi::I32Exit;

use crate::host::InitialMemoryTooLarge;
use crate::door::Stop;

/// How a run ended when it did not end by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Trapped {
    /// The wall-clock deadline passed.
    Deadline,
    /// The fuel cap was spent.
    OutOfFuel,
    /// The run's [`CancelToken`](crate::CancelToken) was cancelled.
    Cancelled,
    /// The guest exhausted its wasm stack (runaway recursion).
    StackOverflow,
    /// The guest could not get its initial memory within the memory limit.
    Memory,
    /// The guest aborted (`os.abort()`, a C `abort()`).
    Unreachable,
    /// The guest touched memory outside its own (a bad door answer, a guest bug).
    MemoryOutOfBounds,
    /// Any other trap, by wasmtime's trap code, lower-cased.
    Other(String),
}

impl Trapped {
    pub fn as_str(&self) -> &str {
        match self {
            Trapped::Deadline => "deadline",
            Trapped::OutOfFuel => "out of fuel",
            Trapped::Cancelled => "cancelled",
            Trapped::StackOverflow => "stack overflow",
            Trapped::Memory => "memory",
            Trapped::Unreachable => "unreachable",
            Trapped::MemoryOutOfBounds => "memory out of bounds",
            Trapped::Other(s) => s,
        }
    }
}

impl std::fmt::Display for Trapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What was cut: the captured streams that dropped bytes past the output cap, the
/// displays cut past the display cap, and events left out of a streaming run's stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Truncated {
    pub stdout: bool,
    pub stderr: bool,
    /// Displays were cut at [`crate::Limits::display_bytes`] (or past
    /// [`crate::MAX_DISPLAYS`]): `Completed::displays` holds the ones before.
    pub displays: bool,
    /// A streaming run left events out of its stream (its caller took too long:
    /// output.rs, `STREAM_STALL`); the `Completed` holds them all the same.
    pub stream: bool,
}

impl Truncated {
    /// What was cut, by name: `stdout`, `stderr`, `displays`, `stream`, in that order.
    pub fn names(&self) -> Vec<&'static str> {
        [(self.stdout, "stdout"), (self.stderr, "stderr"), (self.displays, "displays"), (self.stream, "stream")]
            .into_iter()
            .filter_map(|(t, name)| t.then_some(name))
            .collect()
    }
}

/// The outcome of a run. Every guest behaviour ends here: an exit, an exception,
/// a trap, an exhausted limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    /// The exit status (0..=255), or `None` when the run trapped.
    pub exit_code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub trapped: Option<Trapped>,
    pub truncated: Truncated,
    /// Fuel spent, when the run was metered.
    pub fuel_used: Option<u64>,
    /// Bytes the guest wrote to files (`/tmp`, its working folder, writable grants), the
    /// growth of files it extended included; what [`crate::Limits::file_write_bytes`] caps.
    pub file_bytes_written: u64,
    /// What the run's mounts did; `None` without mounts.
    pub files: Option<crate::mounts::FileRecord>,
    /// What the run's tool door answered; `None` without tools.
    pub tools: Option<wasi_python_record::ToolRecord>,
    pub duration: Duration,
    /// The displays the guest showed and the run kept, in order (display.rs).
    pub displays: Vec<crate::Display>,
    /// Display frames that were not a display (answered `bad`, not kept).
    pub bad_displays: u64,
}

/// What a POSIX parent would read from `exit(code)`: the status modulo 256, so
/// `os._exit(-1)` is 255, never a negative code (which Python reads as "killed by a signal").
pub(crate) fn exit_status(code: i32) -> i32 {
    code.rem_euclid(256)
}

/// Names an error out of the guest by kind: an exit status, or a trap.
pub(crate) fn classify(e: &wasmtime::Error) -> (Option<i32>, Option<Trapped>) {
    if let Some(exit) = e.downcast_ref::<I32Exit>() {
        return (Some(exit_status(exit.0)), None);
    }
    if let Some(stop) = e.downcast_ref::<Stop>() {
        return (
            None,
            Some(match stop {
                Stop::Deadline => Trapped::Deadline,
                Stop::Cancelled => Trapped::Cancelled,
            }),
        );
    }
    if let Some(trap) = e.downcast_ref::<Trap>() {
        let t = match trap {
            Trap::OutOfFuel => Trapped::OutOfFuel,
            Trap::Interrupt => Trapped::Deadline,
            Trap::StackOverflow => Trapped::StackOverflow,
            Trap::UnreachableCodeReached => Trapped::Unreachable,
            Trap::MemoryOutOfBounds => Trapped::MemoryOutOfBounds,
            other => Trapped::Other(trap_name(other)),
        };
        return (None, Some(t));
    }
    if e.downcast_ref::<InitialMemoryTooLarge>().is_some() {
        return (None, Some(Trapped::Memory));
    }
    let text = format!("{:#}", e.root_cause());
    let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("unknown");
    (None, Some(Trapped::Other(line.to_owned())))
}

/// `Trap::IntegerDivisionByZero` -> "integer division by zero".
fn trap_name(t: &Trap) -> String {
    let debug = format!("{t:?}");
    let mut out = String::new();
    for (i, ch) in debug.chars().enumerate() {
        if ch.is_uppercase() && i > 0 {
            out.push(' ');
        }
        out.extend(ch.to_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use wasmtime::{ResourceLimiter, StoreLimitsBuilder};

    use super::*;
    use crate::host::GuestLimits;

    fn limits(bytes: usize) -> GuestLimits {
        GuestLimits(StoreLimitsBuilder::new().memory_size(bytes).build())
    }

    #[test]
    fn truncated_streams_are_named_stdout_first() {
        let names = |stdout, stderr| Truncated { stdout, stderr, ..Default::default() }.names();
        assert_eq!(names(false, false), Vec::<&str>::new());
        assert_eq!(names(false, true), ["stderr"]);
        assert_eq!(names(true, true), ["stdout", "stderr"]);
        let all = Truncated { stdout: true, stderr: true, displays: true, stream: true };
        assert_eq!(all.names(), ["stdout", "stderr", "displays", "stream"]);
    }

    #[test]
    fn an_initial_memory_over_the_limit_is_the_memory_outcome() {
        let e = limits(40 << 20).memory_growing(0, 41 << 20, None).unwrap_err();
        assert_eq!(classify(&e), (None, Some(Trapped::Memory)));
    }

    #[test]
    fn a_later_growth_over_the_limit_is_refused_not_failed() {
        let mut l = limits(40 << 20);
        assert!(l.memory_growing(0, 40 << 20, None).unwrap());
        assert!(!l.memory_growing(40 << 20, 41 << 20, None).unwrap());
    }
}
