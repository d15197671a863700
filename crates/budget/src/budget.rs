//! The running account of one run or turn.

use crate::{Exceeded, Limits, Resource};

/// The tool door's account for one run, or one session turn.
///
/// Call [`charge_request`](Budget::charge_request) once per frame before reading it,
/// [`check_answer`](Budget::check_answer) once per encoded answer,
/// [`try_start_call`](Budget::try_start_call) before a tool runs, and
/// [`abandon`](Budget::abandon) / [`abandoned_finished`](Budget::abandoned_finished) as tool
/// threads are left running and later end.
///
/// A refused frame consumes nothing: it counts toward neither frames nor request bytes (the
/// record still lists it). The discovery `list` frame is charged like any other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    limits: Limits,
    frames: u64,
    request_bytes: u64,
    abandoned: usize,
}

/// What a [`Budget`] has counted so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Used {
    /// Frames charged this run or turn.
    pub frames: u64,
    /// Request bytes charged this run or turn.
    pub request_bytes: u64,
    /// Abandoned tool threads still running (kept across turns).
    pub abandoned_now: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(Limits::default())
    }
}

impl Budget {
    /// A fresh account: nothing used.
    pub fn new(limits: Limits) -> Self {
        Budget {
            limits,
            frames: 0,
            request_bytes: 0,
            abandoned: 0,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A snapshot of what has been counted.
    pub fn used(&self) -> Used {
        Used {
            frames: self.frames,
            request_bytes: self.request_bytes,
            abandoned_now: self.abandoned,
        }
    }

    /// Charges one request frame of `len` bytes, before it is read.
    ///
    /// Refuses, checking in this order:
    /// 1. `len > max_request_len`: [`Resource::RequestLen`] (`too_large`);
    /// 2. `max_frames` frames already charged: [`Resource::Frames`] (`budget_exceeded`);
    /// 3. the frame would take the request bytes past `max_request_bytes`:
    ///    [`Resource::RequestBytes`] (`budget_exceeded`).
    ///
    /// On success the frame and its bytes are counted; on refusal nothing is.
    pub fn charge_request(&mut self, len: u64) -> Result<(), Exceeded> {
        let limits = &self.limits;
        if len > limits.max_request_len {
            return Err(Exceeded::new(
                Resource::RequestLen,
                limits.max_request_len,
                len,
            ));
        }
        if let Some(max) = limits.max_frames
            && self.frames >= max
        {
            return Err(Exceeded::new(
                Resource::Frames,
                max,
                self.frames.saturating_add(1),
            ));
        }
        let bytes = self.request_bytes.checked_add(len);
        if let Some(max) = limits.max_request_bytes
            && bytes.is_none_or(|bytes| bytes > max)
        {
            let used = bytes.unwrap_or(u64::MAX);
            return Err(Exceeded::new(Resource::RequestBytes, max, used));
        }
        self.frames = self.frames.saturating_add(1);
        self.request_bytes = bytes.unwrap_or(u64::MAX);
        Ok(())
    }

    /// Checks one encoded answer of `len` bytes: over `max_answer_len` it is refused with
    /// [`Resource::AnswerLen`] (`too_large`). Counts nothing.
    pub fn check_answer(&self, len: u64) -> Result<(), Exceeded> {
        let max = self.limits.max_answer_len;
        if len > max {
            return Err(Exceeded::new(Resource::AnswerLen, max, len));
        }
        Ok(())
    }

    /// May a tool call start? Refused with [`Resource::AbandonedThreads`] while
    /// `max_abandoned` abandoned tool threads still run; the runtime then answers the call
    /// `timeout` at once, without running its gate or tool. Counts nothing.
    pub fn try_start_call(&self) -> Result<(), Exceeded> {
        let max = self.limits.max_abandoned;
        if self.abandoned >= max {
            return Err(Exceeded::new(
                Resource::AbandonedThreads,
                to_u64(max),
                to_u64(self.abandoned),
            ));
        }
        Ok(())
    }

    /// A call was answered while its tool runs on: one more abandoned thread.
    ///
    /// Only a call that [`try_start_call`](Budget::try_start_call) let start should be
    /// abandoned; then the count never passes `max_abandoned` (unless
    /// [`reset_turn`](Budget::reset_turn) lowered it).
    pub fn abandon(&mut self) {
        self.abandoned = self.abandoned.saturating_add(1);
    }

    /// An abandoned tool thread has finally ended. Does nothing when none is counted.
    pub fn abandoned_finished(&mut self) {
        self.abandoned = self.abandoned.saturating_sub(1);
    }

    /// Starts a session's next turn under `limits`: frames and request bytes start again
    /// from zero, but the abandoned threads, which may still run across turns, stay counted.
    pub fn reset_turn(&mut self, limits: Limits) {
        self.limits = limits;
        self.frames = 0;
        self.request_bytes = 0;
    }
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}
