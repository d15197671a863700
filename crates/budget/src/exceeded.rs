//! The refusal a budget gives, and the message the guest reads.

use std::fmt;

use wasi_python_protocol::ErrorKind;

/// What a refused request would have exceeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Resource {
    /// One request frame is longer than `max_request_len`.
    RequestLen,
    /// The run's frames (`max_frames`) are spent.
    Frames,
    /// The frame would pass the run's request bytes (`max_request_bytes`).
    RequestBytes,
    /// One encoded answer is longer than `max_answer_len`.
    AnswerLen,
    /// `max_abandoned` abandoned tool threads are still running.
    AbandonedThreads,
}

impl Resource {
    /// The error kind the guest is answered with: `too_large` for a single request or answer
    /// that is too long, `budget_exceeded` for the run's frames and request bytes, and
    /// `timeout` while too many abandoned tool threads run.
    pub fn wire_kind(&self) -> ErrorKind {
        match self {
            Resource::RequestLen | Resource::AnswerLen => ErrorKind::TooLarge,
            Resource::Frames | Resource::RequestBytes => ErrorKind::BudgetExceeded,
            Resource::AbandonedThreads => ErrorKind::Timeout,
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resource::RequestLen => "request length",
            Resource::Frames => "frames",
            Resource::RequestBytes => "request bytes",
            Resource::AnswerLen => "answer length",
            Resource::AbandonedThreads => "abandoned tool threads",
        })
    }
}

/// A refusal: `resource` would pass `limit`.
///
/// `used` is what the refused request would have brought the resource to, so it is always
/// greater than `limit`: the request's or answer's own length for
/// [`RequestLen`](Resource::RequestLen) and [`AnswerLen`](Resource::AnswerLen), the frames or
/// request bytes with this frame counted for [`Frames`](Resource::Frames) and
/// [`RequestBytes`](Resource::RequestBytes). The exception is
/// [`AbandonedThreads`](Resource::AbandonedThreads), where `used` is the number still running,
/// at least `limit`. Counts saturate at `u64::MAX`.
///
/// Its `Display` is the message meant for the guest, e.g. "the run's tool budget of 1000
/// frames is spent".
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe(*.resource, *.limit, *.used))]
#[non_exhaustive]
pub struct Exceeded {
    pub resource: Resource,
    pub limit: u64,
    pub used: u64,
}

impl Exceeded {
    pub(crate) fn new(resource: Resource, limit: u64, used: u64) -> Self {
        Exceeded {
            resource,
            limit,
            used,
        }
    }

    /// The error kind the guest is answered with; see [`Resource::wire_kind`].
    pub fn wire_kind(&self) -> ErrorKind {
        self.resource.wire_kind()
    }
}

fn describe(resource: Resource, limit: u64, used: u64) -> String {
    match resource {
        Resource::RequestLen => {
            format!("request of {used} bytes is over the {} limit", bytes(limit))
        }
        Resource::AnswerLen => {
            format!("answer of {used} bytes is over the {} limit", bytes(limit))
        }
        Resource::Frames => {
            format!(
                "the run's tool budget of {limit} {} is spent",
                plural(limit, "frame")
            )
        }
        Resource::RequestBytes => {
            format!("the run's budget of {limit} request bytes would be passed")
        }
        Resource::AbandonedThreads => format!(
            "{used} abandoned tool {} still running (the limit is {limit})",
            if used == 1 { "call is" } else { "calls are" }
        ),
    }
}

fn plural(n: u64, word: &str) -> String {
    if n == 1 {
        word.to_owned()
    } else {
        format!("{word}s")
    }
}

/// A byte count in the largest binary unit that divides it exactly: "1 MiB", "64 KiB",
/// "1000 bytes".
fn bytes(n: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = KIB * KIB;
    match n {
        0 => "0 bytes".to_owned(),
        n if n % MIB == 0 => format!("{} MiB", n / MIB),
        n if n % KIB == 0 => format!("{} KiB", n / KIB),
        n => format!("{n} {}", plural(n, "byte")),
    }
}

#[cfg(test)]
mod tests {
    use super::Resource::*;

    // The guest reads these messages, so their text is behaviour.
    #[test]
    fn messages_name_the_limit() {
        for (resource, limit, used, want) in [
            (
                Frames,
                1000,
                1001,
                "the run's tool budget of 1000 frames is spent",
            ),
            (Frames, 1, 2, "the run's tool budget of 1 frame is spent"),
            (
                RequestLen,
                1 << 20,
                2_000_000,
                "request of 2000000 bytes is over the 1 MiB limit",
            ),
            (
                AnswerLen,
                16 << 20,
                20_000_000,
                "answer of 20000000 bytes is over the 16 MiB limit",
            ),
            (
                RequestBytes,
                16 << 20,
                16_777_300,
                "the run's budget of 16777216 request bytes would be passed",
            ),
            (
                AbandonedThreads,
                4,
                4,
                "4 abandoned tool calls are still running (the limit is 4)",
            ),
            (
                AbandonedThreads,
                1,
                1,
                "1 abandoned tool call is still running (the limit is 1)",
            ),
        ] {
            let got = super::Exceeded::new(resource, limit, used).to_string();
            assert_eq!(got, want, "{resource:?}");
        }
    }

    #[test]
    fn bytes_picks_the_largest_exact_unit() {
        for (n, want) in [
            (0, "0 bytes"),
            (1, "1 byte"),
            (1000, "1000 bytes"),
            (1024, "1 KiB"),
            (1536, "1536 bytes"),
            (64 * 1024, "64 KiB"),
            (1024 * 1024, "1 MiB"),
            (16 * 1024 * 1024, "16 MiB"),
            (1024 * 1024 + 1024, "1025 KiB"),
        ] {
            assert_eq!(super::bytes(n), want, "bytes({n})");
        }
    }
}
