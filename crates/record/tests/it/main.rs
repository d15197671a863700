//! The recorder's counting and listing, as a table, plus a property test.

use proptest::prelude::*;
use wasi_python_protocol::ErrorKind;
use wasi_python_record::{DEFAULT_MAX_LISTED, Op, Outcome, OutcomeKind, Recorder, ToolRecord};

/// An outcome of `kind`; `abandoned` for a call left running. `seq` is garbage on purpose: the
/// recorder assigns it.
fn frame(kind: OutcomeKind, abandoned: bool) -> Outcome {
    let ok = kind.is_ok();
    Outcome {
        seq: 999,
        op: Op::Call,
        tool: Some("f".to_owned()),
        outcome: kind,
        message: (!ok).then(|| format!("{kind} message")),
        request_bytes: 40,
        response_bytes: 30,
        fault: None,
        abandoned,
        delivered: true,
    }
}

const OK: (OutcomeKind, bool) = (OutcomeKind::Ok, false);
const TIMEOUT: (OutcomeKind, bool) = (OutcomeKind::Error(ErrorKind::Timeout), false);
/// A call answered `timeout` while its tool runs on.
const GONE: (OutcomeKind, bool) = (OutcomeKind::Error(ErrorKind::Timeout), true);

/// Records `frames` with `max_listed`, then checks the counts and which seqs are listed and
/// kept as abandoned.
fn check(
    name: &str,
    max_listed: usize,
    frames: &[(OutcomeKind, bool)],
    want: (u64, &[u64], u64, &[u64]),
) {
    let mut recorder = Recorder::new(max_listed);
    for (i, &(kind, abandoned)) in frames.iter().enumerate() {
        let next = recorder.next_seq();
        assert_eq!(next, i as u64 + 1, "{name}: next_seq before frame {i}");
        assert_eq!(
            recorder.record(frame(kind, abandoned)),
            next,
            "{name}: seq of frame {i}"
        );
        assert_eq!(recorder.frames(), next, "{name}: frames after frame {i}");
    }
    let snapshot = recorder.snapshot();
    let record = recorder.finish();
    assert_eq!(snapshot, record, "{name}: snapshot");
    let seqs = |list: &[Outcome]| list.iter().map(|o| o.seq).collect::<Vec<_>>();
    let (count, listed, unlisted, abandoned) = want;
    assert_eq!(record.frames, count, "{name}: frames");
    assert_eq!(seqs(&record.outcomes), listed, "{name}: listed");
    assert_eq!(record.unlisted, unlisted, "{name}: unlisted");
    assert_eq!(seqs(&record.abandoned), abandoned, "{name}: abandoned");
    for o in record.outcomes.iter().chain(&record.abandoned) {
        let given = frames[o.seq as usize - 1];
        assert_eq!((o.outcome, o.abandoned), given, "{name}: seq {}", o.seq);
    }
}

#[test]
fn listing_and_counting() {
    check("nothing", 3, &[], (0, &[], 0, &[]));
    check("under the cap", 3, &[OK, TIMEOUT], (2, &[1, 2], 0, &[]));
    check("exactly the cap", 3, &[OK, OK, OK], (3, &[1, 2, 3], 0, &[]));
    check(
        "past the cap",
        3,
        &[OK, OK, OK, OK, TIMEOUT],
        (5, &[1, 2, 3], 2, &[]),
    );
    check("cap of zero", 0, &[OK, OK], (2, &[], 2, &[]));
    check(
        "abandoned and listed",
        3,
        &[OK, GONE],
        (2, &[1, 2], 0, &[2]),
    );
    check(
        "abandoned past the cap are kept",
        2,
        &[GONE, OK, OK, GONE, OK, GONE],
        (6, &[1, 2], 4, &[1, 4, 6]),
    );
    check(
        "abandoned with a cap of zero",
        0,
        &[GONE, OK, GONE],
        (3, &[], 3, &[1, 3]),
    );
}

#[test]
fn the_default_lists_1000() {
    assert_eq!(DEFAULT_MAX_LISTED, 1000);
    let mut recorder = Recorder::default();
    for _ in 0..1001 {
        recorder.record(frame(OutcomeKind::Ok, false));
    }
    let record = recorder.finish();
    assert_eq!(
        (record.frames, record.outcomes.len(), record.unlisted),
        (1001, 1000, 1)
    );
}

#[test]
fn an_outcome_is_kept_as_given_but_for_its_seq() {
    let given = Outcome {
        seq: 0,
        op: Op::Unknown,
        tool: None,
        outcome: OutcomeKind::Error(ErrorKind::Protocol),
        message: Some("the frame is not JSON".to_owned()),
        request_bytes: 7,
        response_bytes: 90,
        fault: Some("KeyError: 'x'".to_owned()),
        abandoned: true,
        delivered: true,
    };
    let mut recorder = Recorder::new(1);
    recorder.record(given.clone());
    let record = recorder.finish();
    let want = Outcome { seq: 1, ..given };
    assert_eq!(record.outcomes, std::slice::from_ref(&want));
    assert_eq!(record.abandoned, [want]);
}

#[test]
fn a_snapshot_does_not_stop_recording() {
    let mut recorder = Recorder::new(10);
    recorder.record(frame(OutcomeKind::Ok, false));
    let early = recorder.snapshot();
    recorder.record(frame(OutcomeKind::Error(ErrorKind::Denied), false));
    assert_eq!(early.frames, 1);
    assert_eq!(recorder.finish().frames, 2);
}

#[test]
fn names() {
    // The names Python reads as `o.outcome`: pinned here, whoever owns them.
    use ErrorKind::*;
    use OutcomeKind::Error;
    for (kind, name) in [
        (OutcomeKind::Ok, "ok"),
        (Error(Protocol), "protocol"),
        (Error(UnknownTool), "unknown_tool"),
        (Error(InvalidArguments), "invalid_arguments"),
        (Error(Denied), "denied"),
        (Error(ToolError), "tool_error"),
        (Error(Timeout), "timeout"),
        (Error(Cancelled), "cancelled"),
        (Error(TooLarge), "too_large"),
        (Error(BudgetExceeded), "budget_exceeded"),
    ] {
        assert_eq!(kind.as_str(), name);
        assert_eq!(kind.to_string(), name);
        assert_eq!(OutcomeKind::from_wire(name), Some(kind), "{name}");
    }
    for name in ["", "OK", "batch", "tool error", "unknown"] {
        assert_eq!(OutcomeKind::from_wire(name), None, "{name:?}");
    }
    for (op, name) in [
        (Op::List, "list"),
        (Op::Call, "call"),
        (Op::Unknown, "unknown"),
    ] {
        assert_eq!((op.as_str(), op.to_string()), (name, name.to_owned()));
    }
}

fn arb_kind() -> impl Strategy<Value = OutcomeKind> {
    prop_oneof![
        Just(OutcomeKind::Ok),
        proptest::sample::select(ErrorKind::ALL.to_vec()).prop_map(OutcomeKind::Error),
    ]
}

proptest! {
    /// Whatever is recorded: frames == listed + unlisted, the listing is the first frames,
    /// `abandoned` is exactly the abandoned outcomes, and seqs run 1, 2, 3…
    #[test]
    fn record_invariants(
        max_listed in 0usize..8,
        frames in proptest::collection::vec((any::<u64>(), arb_kind(), any::<bool>()), 0..40),
    ) {
        let mut recorder = Recorder::new(max_listed);
        let mut all = Vec::new();
        for (seq, kind, abandoned) in frames {
            let mut o = frame(kind, abandoned);
            o.seq = seq;
            let given = recorder.record(o.clone());
            all.push(Outcome { seq: given, ..o });
        }
        let record = recorder.finish();
        prop_assert_eq!(record.frames, record.outcomes.len() as u64 + record.unlisted);
        prop_assert_eq!(record.frames, all.len() as u64);
        prop_assert_eq!(&record.outcomes[..], &all[..all.len().min(max_listed)]);
        let abandoned: Vec<_> = all.iter().filter(|o| o.abandoned).cloned().collect();
        prop_assert_eq!(&record.abandoned, &abandoned);
        for (i, o) in all.iter().enumerate() {
            prop_assert_eq!(o.seq, i as u64 + 1);
        }
    }
}

#[test]
fn an_answer_the_guest_never_got_is_marked_not_delivered() {
    let mut recorder = Recorder::new(10);
    recorder.record(frame(OutcomeKind::Ok, false));
    recorder.record(frame(OutcomeKind::Ok, true));
    recorder.undelivered("the guest had no memory for a 16777216-byte answer");
    let record = recorder.finish();
    // Only the last frame, in both lists it stands in; the first stays delivered.
    assert!(record.outcomes[0].delivered && record.outcomes[0].fault.is_none());
    for o in [&record.outcomes[1], &record.abandoned[0]] {
        assert!(!o.delivered);
        assert_eq!(
            o.fault.as_deref(),
            Some("not delivered: the guest had no memory for a 16777216-byte answer")
        );
    }
    // No frame yet: nothing to mark.
    let mut empty = Recorder::new(10);
    empty.undelivered("x");
    assert_eq!(empty.finish(), ToolRecord::default());
}

/// Every kind the protocol lists is recorded as itself, under its own wire name, and back.
#[test]
fn every_error_kind_round_trips_through_the_record() {
    for kind in ErrorKind::ALL {
        let outcome = OutcomeKind::Error(kind);
        assert_eq!(OutcomeKind::from(kind), outcome, "{kind:?}");
        assert!(!outcome.is_ok(), "{kind:?}");
        assert_eq!(outcome.error_kind(), Some(kind), "{kind:?}");
        assert_eq!(outcome.as_str(), kind.as_str(), "{kind:?}");
        assert_eq!(outcome.to_string(), kind.to_string(), "{kind:?}");
        assert_eq!(
            OutcomeKind::from_wire(kind.as_str()),
            Some(outcome),
            "{kind:?}"
        );
    }
    // `ok` is no error kind's name, so the two never collide.
    assert_eq!(ErrorKind::from_wire("ok"), None);
    assert_eq!(OutcomeKind::from_wire("ok"), Some(OutcomeKind::Ok));
    assert_eq!(OutcomeKind::Ok.error_kind(), None);
    assert!(OutcomeKind::Ok.is_ok());
}

/// Outcomes that come out of order (calls in parallel) are listed in the order their
/// frames came, each once; abandoned ones are kept in `seq` order; a listed pending frame
/// shows what it was reserved as until filled; a frame past the list is counted only.
#[test]
fn reserved_frames_are_filled_in_arrival_order() {
    let mut recorder = Recorder::new(3);
    let pending = frame(OutcomeKind::Error(ErrorKind::Cancelled), false);
    let a = recorder.reserve(pending.clone());
    let b = recorder.reserve(pending.clone());
    let c = recorder.record(frame(OutcomeKind::Ok, false));
    let d = recorder.reserve(pending.clone());
    assert_eq!((a, b, c, d), (1, 2, 3, 4));
    assert_eq!(recorder.snapshot().outcomes[1].outcome, pending.outcome, "pending until filled");
    // b ends first, abandoned; then d (unlisted) abandoned; then a.
    recorder.fill(Outcome { seq: b, ..frame(OutcomeKind::Error(ErrorKind::Timeout), true) });
    recorder.fill(Outcome { seq: d, ..frame(OutcomeKind::Error(ErrorKind::Timeout), true) });
    recorder.fill(Outcome { seq: a, ..frame(OutcomeKind::Error(ErrorKind::Timeout), true) });
    // An unknown seq, and filling twice, change nothing.
    recorder.fill(Outcome { seq: 99, ..frame(OutcomeKind::Ok, true) });
    recorder.fill(Outcome { seq: 0, ..frame(OutcomeKind::Ok, true) });
    recorder.fill(Outcome { seq: a, ..frame(OutcomeKind::Error(ErrorKind::Timeout), true) });
    recorder.undelivered_at(b, "lost");
    let r = recorder.finish();
    assert_eq!((r.frames, r.outcomes.len() as u64, r.unlisted), (4, 3, 1));
    assert_eq!(r.outcomes.iter().map(|o| o.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(r.abandoned.iter().map(|o| o.seq).collect::<Vec<_>>(), [1, 2, 4]);
    assert!(r.outcomes[1].fault.as_deref().is_some_and(|f| f.contains("lost")) && !r.outcomes[1].delivered);
    assert!(!r.abandoned[1].delivered && r.abandoned[0].delivered);
}
