//! Gathering outcomes into a record.

use crate::Outcome;

/// How many outcomes a record lists unless told otherwise.
pub const DEFAULT_MAX_LISTED: usize = 1000;

/// What happened at the tool door during one run or turn.
///
/// Always `frames == outcomes.len() + unlisted`; `outcomes` holds the first frames in `seq`
/// order; `abandoned` holds every outcome with `abandoned == true`, listed or not, in `seq`
/// order.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ToolRecord {
    /// Every frame counted.
    pub frames: u64,
    /// The first frames' outcomes.
    pub outcomes: Vec<Outcome>,
    /// Frames counted but not listed.
    pub unlisted: u64,
    /// Every call answered while its tool ran on.
    pub abandoned: Vec<Outcome>,
}

/// Collects the outcomes of one run or turn (a session uses a fresh recorder per turn).
#[derive(Clone, Debug)]
pub struct Recorder {
    max_listed: usize,
    record: ToolRecord,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new(DEFAULT_MAX_LISTED)
    }
}

impl Recorder {
    /// An empty record that will list at most `max_listed` outcomes.
    pub fn new(max_listed: usize) -> Self {
        Recorder {
            max_listed,
            record: ToolRecord::default(),
        }
    }

    /// The `seq` the next recorded outcome gets: 1 for the first frame, then one more per
    /// frame recorded. Read it when a frame arrives to give the gate its `seq`; as long as
    /// that frame is the next one recorded, the numbers agree.
    pub fn next_seq(&self) -> u64 {
        self.record.frames.saturating_add(1)
    }

    /// Frames recorded so far.
    pub fn frames(&self) -> u64 {
        self.record.frames
    }

    /// Records one frame's outcome and returns the `seq` it was given, which replaces
    /// whatever `outcome.seq` held.
    pub fn record(&mut self, mut outcome: Outcome) -> u64 {
        let seq = self.next_seq();
        outcome.seq = seq;
        self.record.frames = seq;
        // The latest frame: its place among the abandoned is last.
        if outcome.abandoned {
            self.record.abandoned.push(outcome.clone());
        }
        if self.record.outcomes.len() < self.max_listed {
            self.record.outcomes.push(outcome);
        } else {
            self.record.unlisted = self.record.unlisted.saturating_add(1);
        }
        seq
    }

    /// Counts a frame whose outcome comes later (a call that runs while others arrive) and
    /// returns its `seq`: the record keeps arrival order whatever order outcomes come in.
    /// Until [`fill`](Recorder::fill)ed, the frame is listed as `pending`.
    pub fn reserve(&mut self, pending: Outcome) -> u64 {
        let seq = self.next_seq();
        self.record.frames = seq;
        if self.record.outcomes.len() < self.max_listed {
            self.record.outcomes.push(Outcome { seq, ..pending });
        } else {
            self.record.unlisted = self.record.unlisted.saturating_add(1);
        }
        seq
    }

    /// Sets the outcome of the reserved frame `outcome.seq` (once; an unknown `seq` is
    /// ignored): in its place if it is listed, and among the abandoned, in `seq` order,
    /// if it was abandoned.
    pub fn fill(&mut self, outcome: Outcome) {
        let seq = outcome.seq;
        if seq == 0 || seq > self.record.frames {
            return;
        }
        if outcome.abandoned {
            let at = self.record.abandoned.partition_point(|o| o.seq < seq);
            if self.record.abandoned.get(at).is_none_or(|o| o.seq != seq) {
                self.record.abandoned.insert(at, outcome.clone());
            }
        }
        if let Some(listed) = self.listed_mut(seq) {
            *listed = outcome;
        }
    }

    /// The listed outcome of frame `seq`: listed outcomes are frames 1, 2, 3... in order.
    fn listed_mut(&mut self, seq: u64) -> Option<&mut Outcome> {
        let index = usize::try_from(seq.checked_sub(1)?).ok()?;
        self.record.outcomes.get_mut(index).filter(|o| o.seq == seq)
    }

    /// The answer to the frame recorded last never reached the guest: marks it not
    /// delivered, with `fault` (kept beside any fault it had). Nothing when no frame
    /// was recorded.
    pub fn undelivered(&mut self, fault: &str) {
        self.undelivered_at(self.record.frames, fault);
    }

    /// The answer to frame `seq` never reached the guest: as
    /// [`undelivered`](Recorder::undelivered), for any frame (a started call's answer is
    /// handed over with a later frame's, or not at all).
    pub fn undelivered_at(&mut self, seq: u64, fault: &str) {
        let mark = |o: &mut Outcome| {
            o.delivered = false;
            o.fault = Some(match o.fault.take() {
                Some(f) => format!("{f}; not delivered: {fault}"),
                None => format!("not delivered: {fault}"),
            });
        };
        if let Some(o) = self.listed_mut(seq) {
            mark(o);
        }
        let at = self.record.abandoned.partition_point(|o| o.seq < seq);
        if let Some(o) = self.record.abandoned.get_mut(at).filter(|o| o.seq == seq) {
            mark(o);
        }
    }

    /// A copy of the record so far, for endings where the recorder stays shared.
    pub fn snapshot(&self) -> ToolRecord {
        self.record.clone()
    }

    /// The record, without copying it.
    pub fn finish(self) -> ToolRecord {
        self.record
    }
}
