//! The limits of one run or turn, and their defaults.

const MIB: u64 = 1024 * 1024;

/// Frames a run (or turn) may send, its discovery `list` frame included.
pub const DEFAULT_MAX_FRAMES: u64 = 1000;
/// Request bytes a run (or turn) may have read, over all its frames: 16 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: u64 = 16 * MIB;
/// The longest single request frame: 1 MiB. A longer one is refused from its length alone.
pub const DEFAULT_MAX_REQUEST_LEN: u64 = MIB;
/// The longest single encoded answer: 16 MiB. A longer one is refused as too large.
pub const DEFAULT_MAX_ANSWER_LEN: u64 = 16 * MIB;
/// Tool threads that may still run after their call was answered.
pub const DEFAULT_MAX_ABANDONED: usize = 4;

/// The limits a [`Budget`](crate::Budget) enforces. [`Limits::default`] gives the documented
/// defaults; build others with `Limits { max_frames: None, ..Limits::default() }`.
///
/// Every limit is inclusive: an amount equal to it passes. A zero limit is allowed and refuses
/// everything it counts (a zero `max_request_len` still lets empty frames through).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Frames per run or turn ([`DEFAULT_MAX_FRAMES`]); `None` means no limit.
    pub max_frames: Option<u64>,
    /// Request bytes per run or turn ([`DEFAULT_MAX_REQUEST_BYTES`]); `None` means no limit.
    pub max_request_bytes: Option<u64>,
    /// Bytes of one request frame ([`DEFAULT_MAX_REQUEST_LEN`]).
    pub max_request_len: u64,
    /// Bytes of one encoded answer ([`DEFAULT_MAX_ANSWER_LEN`]).
    pub max_answer_len: u64,
    /// Abandoned tool threads that may run at once ([`DEFAULT_MAX_ABANDONED`]). While this
    /// many run, every new call is refused; so 0 refuses every call.
    pub max_abandoned: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frames: Some(DEFAULT_MAX_FRAMES),
            max_request_bytes: Some(DEFAULT_MAX_REQUEST_BYTES),
            max_request_len: DEFAULT_MAX_REQUEST_LEN,
            max_answer_len: DEFAULT_MAX_ANSWER_LEN,
            max_abandoned: DEFAULT_MAX_ABANDONED,
        }
    }
}
