//! Calls in flight: the guest's `start` and `wait` frames (calls in parallel from one guest).
//!
//! A `start` is checked as a `call` is, then its tool runs on a thread of its own while the
//! guest goes on; a `wait` hands the guest the answers of the calls it names once at least
//! one is in. Between the two, the door holds each started call here, by the start frame's
//! id, until the guest takes its answer:
//!
//! - at most [`MAX_IN_FLIGHT`] calls at once (running, or answered and not yet taken), and
//!   at most [`MAX_HELD_BYTES`] of answers held (an answer past it is `too_large`);
//! - a call ends at its tool's timeout or [`DEADLINE_MARGIN`](crate::DEADLINE_MARGIN) before
//!   the run's deadline (a watching thread abandons it then, or the guest's next frame
//!   does), or at the run's cancel or end: abandoned, counted in the budget until its tool
//!   ends, its own cancel set;
//! - each call is recorded once, in the place its start frame took, when its answer is
//!   settled; the record is taken at the end (`ToolDoor::record`), after every call still
//!   in flight was settled: running ones abandoned, answers never taken marked undelivered.
//!
//! Locks: the calls' lock is taken before the door's state (budget and record), never
//! after; a tool's thread builds its answer before it takes either.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use wasi_python_protocol::{ErrorKind, MAX_ECHO_CHARS, Map, cut_chars, encode_answers, encode_error, encode_ok, encode_started};

use crate::tool_door::{Answer, Checked, Done, Last, cancelled, internal, refuse, timed_out};
use crate::{CallContext, CancelToken, Invocation, Job, ToolDoor, ToolOutput};

/// The most calls a run may have in flight: started, and not yet taken by a `wait`.
/// A `start` past it is answered `budget_exceeded`; the guest's package queues its own.
pub const MAX_IN_FLIGHT: usize = 16;
/// The most bytes of answers a door holds for the guest: an answer that would pass it is
/// answered `too_large` instead (its result is dropped).
pub const MAX_HELD_BYTES: usize = 32 << 20;
/// A wait frame this long or shorter is read before it is charged, and is not charged: it
/// asks for answers already paid for. A longer one is refused.
pub const MAX_WAIT_BYTES: usize = 2048;
/// How often a blocked `wait` looks at the run's cancel.
pub(crate) const POLL: Duration = Duration::from_millis(2);

/// The started calls of one door.
#[derive(Default)]
pub(crate) struct Flight {
    pub(crate) calls: Mutex<Calls>,
    /// Notified when a call is answered or abandoned, or one starts.
    pub(crate) changed: Condvar,
}

#[derive(Default)]
pub(crate) struct Calls {
    /// By the start frame's id: calls not yet taken by the guest.
    pub(crate) by_id: BTreeMap<u64, Entry>,
    /// The running calls' tokens, and their ids.
    pub(crate) running: HashMap<u64, u64>,
    /// Tokens of abandoned calls whose tool still runs: uncounted when it ends.
    pub(crate) abandoned: HashSet<u64>,
    pub(crate) next_token: u64,
    /// Bytes of the answers in `by_id`.
    pub(crate) held: usize,
    /// A thread watches the running calls' ends.
    pub(crate) watching: bool,
}

/// One started call.
pub(crate) struct Entry {
    /// Its frame's number in the record.
    pub(crate) seq: u64,
    pub(crate) token: u64,
    pub(crate) tool: String,
    pub(crate) request_bytes: u64,
    pub(crate) started: Instant,
    /// When it must end: its timeout, or the margin before the run's deadline.
    pub(crate) until: Option<Instant>,
    /// The run's deadline and cancel, as the start saw them.
    pub(crate) ctx: CallContext,
    /// Set when the call ends without its tool: the tool may stop.
    pub(crate) cancel: CancelToken,
    /// Its answer, once settled: the frame the guest gets.
    pub(crate) answer: Option<Vec<u8>>,
    /// The start's acceptance never reached the guest (why).
    pub(crate) lost: Option<String>,
}

impl Calls {
    /// Calls running now whose end is past, or whose run was cancelled: their ids.
    pub(crate) fn overdue(&self, now: Instant) -> Vec<u64> {
        self.running
            .values()
            .filter(|id| {
                self.by_id
                    .get(id)
                    .is_some_and(|e| e.until.is_some_and(|u| u <= now) || e.ctx.cancel.is_cancelled())
            })
            .copied()
            .collect()
    }

    /// The soonest end among the running calls.
    pub(crate) fn next_end(&self) -> Option<Instant> {
        self.running.values().filter_map(|id| self.by_id.get(id).and_then(|e| e.until)).min()
    }
}

/// Settles a started call when its tool's thread is done with it: with its output, or
/// without one if the tool panicked or its job was dropped unrun.
struct Finisher {
    door: ToolDoor,
    token: u64,
    id: u64,
    name: String,
    done: Option<Done>,
}

impl Drop for Finisher {
    fn drop(&mut self) {
        self.door.finished(self.token, self.id, &self.name, self.done.take());
    }
}

impl ToolDoor {
    /// A `start` frame: checked as a call is (each refusal answered, counted and recorded
    /// as a call's), then its tool started on a thread of its own. `Ok`: the acceptance;
    /// the call is recorded in frame `seq`'s place once its answer is settled.
    pub(crate) fn start(
        &self,
        seq: u64,
        id: u64,
        name: String,
        args: Map,
        request_bytes: u64,
        ctx: &CallContext,
    ) -> Result<Vec<u8>, Answer> {
        let inner = &self.inner;
        {
            let calls = inner.flight.calls.lock();
            let echo = cut_chars(&name, MAX_ECHO_CHARS);
            if calls.by_id.contains_key(&id) {
                let message = format!("call {id} is in flight already: a start's id names its call until a wait takes its answer");
                return Err(refuse(echo, Some(id), ErrorKind::Protocol, &message));
            }
            if calls.by_id.len() >= MAX_IN_FLIGHT {
                let message = format!(
                    "{echo} was not started: {MAX_IN_FLIGHT} calls are in flight, the most a run may have; wait for one first"
                );
                return Err(refuse(echo, Some(id), ErrorKind::BudgetExceeded, &message));
            }
        }
        let Checked { index, now, until } = self.check_call(Some(id), &name, &args, ctx)?;
        let cancel = CancelToken::new();
        let token = {
            let mut calls = inner.flight.calls.lock();
            let token = calls.next_token;
            calls.next_token += 1;
            let pending = Answer { abandoned: false, ..crate::tool_door::cancelled(&name, Some(id)) };
            let (outcome, _) = pending.into_outcome(seq, request_bytes);
            let reserved = inner.state.lock().recorder.reserve(outcome);
            debug_assert_eq!(reserved, seq, "a start is the next frame recorded");
            calls.running.insert(token, id);
            calls.by_id.insert(
                id,
                Entry {
                    seq: reserved,
                    token,
                    tool: name.clone(),
                    request_bytes,
                    started: now,
                    until,
                    ctx: ctx.clone(),
                    cancel: cancel.clone(),
                    answer: None,
                    lost: None,
                },
            );
            token
        };
        let job: Job = {
            let host = inner.host.clone();
            let invocation = Invocation { seq, tool: index, name: name.clone(), args, request_bytes };
            let finisher = Finisher { door: self.clone(), token, id, name, done: None };
            Box::new(move || {
                // Settles the call when dropped, a panic of the tool's included.
                let mut finisher = finisher;
                let output = host.invoke(invocation, &cancel);
                // The result is encoded here, on the tool's thread.
                let frame = match &output {
                    ToolOutput::Ok(v) => encode_ok(Some(id), v),
                    _ => Vec::new(),
                };
                finisher.done = Some(Done { output, frame });
                drop(finisher);
            })
        };
        // A job that cannot be handed to a thread is dropped unrun: its finisher settles
        // the call as one that ended without an answer, which a wait then hands over.
        let _ = self.dispatch(job);
        if until.is_some() {
            self.watch();
        }
        Ok(encode_started(id))
    }

    /// A tool's thread is done with started call `token` (`done`: its output; `None` if
    /// it panicked or never ran). An abandoned call is uncounted; else its answer is held
    /// for the guest and recorded.
    fn finished(&self, token: u64, id: u64, name: &str, done: Option<Done>) {
        let inner = &self.inner;
        // Built before the calls' lock: the answer cap asks the budget.
        let answer = match done {
            Some(Done { output, frame }) => self.conclude(name, Some(id), output, frame),
            None => internal(name, Some(id), "the tool's thread ended without an answer (a panic)".into()),
        };
        let mut calls = inner.flight.calls.lock();
        if calls.abandoned.remove(&token) {
            drop(calls);
            inner.state.lock().budget.abandoned_finished();
            return;
        }
        if calls.running.remove(&token).is_none() {
            return;
        }
        let Calls { by_id, held, .. } = &mut *calls;
        let Some(entry) = by_id.get_mut(&id) else { return };
        let now = Instant::now();
        let mut answer = match entry.until {
            // It ended past its time, before anything gave up on it: it timed out.
            Some(until) if now > until => timed_out(name, Some(id), now - entry.started),
            _ => answer,
        };
        if *held + answer.frame.len() > MAX_HELD_BYTES {
            answer = Answer {
                fault: Some(format!("{} bytes of answers were held for the guest", *held)),
                ..refuse(
                    name,
                    Some(id),
                    ErrorKind::TooLarge,
                    &format!("{name}: its answer does not fit beside the {MAX_HELD_BYTES} bytes of answers held for the guest; wait for calls sooner"),
                )
            };
        }
        *held += answer.frame.len();
        let (outcome, frame) = answer.into_outcome(entry.seq, entry.request_bytes);
        inner.state.lock().recorder.fill(outcome);
        entry.answer = Some(frame);
        drop(calls);
        inner.flight.changed.notify_all();
    }

    /// Gives up on running call `id`: its answer is `timeout` or `cancelled` (`ending`:
    /// the run or turn ends), it is recorded abandoned and counted until its tool ends,
    /// and its own cancel is set.
    fn abandon(&self, calls: &mut Calls, id: u64, now: Instant, ending: bool) {
        let Calls { by_id, running, abandoned, held, .. } = calls;
        let Some(entry) = by_id.get_mut(&id) else { return };
        let name = &entry.tool;
        let answer = if entry.ctx.cancel.is_cancelled() {
            cancelled(name, Some(id))
        } else if entry.until.is_some_and(|u| u <= now) {
            timed_out(name, Some(id), now - entry.started)
        } else if ending {
            refuse(name, Some(id), ErrorKind::Cancelled, &format!("{name} was cancelled: the run ended while it ran"))
        } else {
            return;
        };
        if running.remove(&entry.token).is_none() {
            return;
        }
        abandoned.insert(entry.token);
        entry.cancel.cancel();
        let answer = Answer { abandoned: true, ..answer };
        *held += answer.frame.len();
        let (outcome, frame) = answer.into_outcome(entry.seq, entry.request_bytes);
        {
            let mut st = self.inner.state.lock();
            st.budget.abandon();
            st.recorder.fill(outcome);
        }
        entry.answer = Some(frame);
    }

    /// Gives up on the running calls past their end, or whose run was cancelled.
    pub(crate) fn sweep(&self, calls: &mut Calls) {
        if calls.running.is_empty() {
            return;
        }
        let now = Instant::now();
        let overdue = calls.overdue(now);
        for id in &overdue {
            self.abandon(calls, *id, now, false);
        }
        if !overdue.is_empty() {
            self.inner.flight.changed.notify_all();
        }
    }

    /// A `wait` frame: the answers of the calls named in `ids` (in the order the calls
    /// started), once at least one is in, or at `timeout_ms`, the margin before the run's
    /// deadline, or its cancel. An id that names no call in flight is answered `protocol`
    /// at once. At most one answer's worth of bytes are handed over at a time; the rest
    /// wait for the next.
    pub(crate) fn wait(&self, id: Option<u64>, ids: &[u64], timeout_ms: Option<u64>, ctx: &CallContext) -> Vec<u8> {
        let inner = &self.inner;
        let now = Instant::now();
        let end = ctx.end_of_call(now, timeout_ms.map(Duration::from_millis));
        let cap = usize::try_from(inner.state.lock().budget.limits().max_answer_len).unwrap_or(usize::MAX);
        let mut calls = inner.flight.calls.lock();
        loop {
            self.sweep(&mut calls);
            let ready = ids.iter().any(|i| calls.by_id.get(i).is_none_or(|e| e.answer.is_some()));
            let now = Instant::now();
            if ready || ctx.check().is_some() || end.is_some_and(|e| now >= e) {
                break;
            }
            let wake = end.map_or(now + POLL, |e| e.min(now + POLL));
            inner.flight.changed.wait_until(&mut calls, wake);
        }
        let mut answers: Vec<Vec<u8>> = Vec::new();
        let mut in_order: Vec<(u64, u64)> = Vec::new();
        for &i in ids {
            match calls.by_id.get(&i) {
                None => answers.push(encode_error(
                    Some(i),
                    ErrorKind::Protocol,
                    &format!("no call {i} is in flight: a start's answer is taken once, and calls end with their run or turn"),
                )),
                Some(e) if e.answer.is_some() => in_order.push((e.seq, i)),
                Some(_) => {}
            }
        }
        in_order.sort_unstable();
        let mut bytes: usize = answers.iter().map(Vec::len).sum();
        let mut seqs = Vec::with_capacity(in_order.len());
        for (seq, i) in in_order {
            let len = calls.by_id.get(&i).and_then(|e| e.answer.as_ref()).map_or(0, Vec::len);
            if !answers.is_empty() && bytes + len > cap {
                break;
            }
            let Some(Entry { answer: Some(frame), .. }) = calls.by_id.remove(&i) else { continue };
            calls.held -= frame.len();
            bytes += frame.len();
            answers.push(frame);
            seqs.push(seq);
        }
        drop(calls);
        inner.state.lock().last = Last::Answers(seqs);
        encode_answers(id, &answers)
    }

    /// The run or turn ends: calls still running are abandoned, and answers never taken
    /// are marked undelivered; none is in flight after.
    pub(crate) fn end_calls(&self) {
        let inner = &self.inner;
        let mut calls = inner.flight.calls.lock();
        if calls.by_id.is_empty() {
            return;
        }
        let now = Instant::now();
        let running: Vec<u64> = calls.running.values().copied().collect();
        for id in running {
            self.abandon(&mut calls, id, now, true);
        }
        {
            let mut st = inner.state.lock();
            for entry in calls.by_id.values() {
                let why = entry.lost.as_deref().unwrap_or("the guest never waited for it");
                st.recorder.undelivered_at(entry.seq, why);
            }
        }
        calls.by_id.clear();
        calls.held = 0;
        drop(calls);
        inner.flight.changed.notify_all();
    }

    /// Makes sure a thread watches the running calls' ends, so each is abandoned (and its
    /// own cancel set) at its end even while the guest computes.
    fn watch(&self) {
        {
            let mut calls = self.inner.flight.calls.lock();
            if calls.watching {
                // It sleeps until the soonest end it knew: this call's may come sooner.
                drop(calls);
                self.inner.flight.changed.notify_all();
                return;
            }
            calls.watching = true;
        }
        let door = self.clone();
        let job: Job = Box::new(move || door.watching());
        if self.spawner().spawn(c"wasi-python-wait", job).is_err() {
            // The guest's next frame and the run's end settle them instead.
            self.inner.flight.calls.lock().watching = false;
        }
    }

    /// The watching thread: settles calls as they pass their end, until none runs with one.
    fn watching(&self) {
        let mut calls = self.inner.flight.calls.lock();
        loop {
            self.sweep(&mut calls);
            let Some(next) = calls.next_end() else {
                calls.watching = false;
                return;
            };
            self.inner.flight.changed.wait_until(&mut calls, next);
        }
    }
}
