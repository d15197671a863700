//! The budget's verdicts, as tables of steps, plus a property test.

use proptest::prelude::*;
use wasi_python_budget::{Budget, Exceeded, Limits, Resource, Used};

const MIB: u64 = 1024 * 1024;

#[derive(Clone, Copy, Debug)]
enum Op {
    /// `charge_request(len)`.
    Req(u64),
    /// `count` times `charge_request(len)`, every one expected to pass.
    ReqN(u64, u64),
    /// `check_answer(len)`.
    Ans(u64),
    /// `try_start_call()`.
    Start,
    /// `abandon()`.
    Abandon,
    /// `abandoned_finished()`.
    Finished,
    /// `reset_turn(limits)`.
    Reset(Limits),
}
use Op::*;

/// `None` for a step that passes (or returns nothing), else the refused resource.
type Verdict = Option<Resource>;
const OK: Verdict = None;

fn limits(frames: Option<u64>, bytes: Option<u64>, req: u64, ans: u64, abandoned: usize) -> Limits {
    Limits {
        max_frames: frames,
        max_request_bytes: bytes,
        max_request_len: req,
        max_answer_len: ans,
        max_abandoned: abandoned,
    }
}

fn frames(n: Option<u64>) -> Limits {
    Limits {
        max_frames: n,
        ..Limits::default()
    }
}

fn bytes(n: Option<u64>) -> Limits {
    Limits {
        max_request_bytes: n,
        ..Limits::default()
    }
}

fn abandoned(n: usize) -> Limits {
    Limits {
        max_abandoned: n,
        ..Limits::default()
    }
}

/// Runs `steps` on a fresh budget, checks each verdict and the final `used()`.
fn check(name: &str, limits: Limits, steps: &[(Op, Verdict)], want: (u64, u64, usize)) {
    let mut budget = Budget::new(limits);
    for (i, (op, want)) in steps.iter().enumerate() {
        let before = budget.clone();
        let got = match op {
            Req(len) => budget.charge_request(*len),
            ReqN(count, len) => (0..*count).try_for_each(|_| budget.charge_request(*len)),
            Ans(len) => budget.check_answer(*len),
            Start => budget.try_start_call(),
            Abandon => {
                budget.abandon();
                Ok(())
            }
            Finished => {
                budget.abandoned_finished();
                Ok(())
            }
            Reset(limits) => {
                budget.reset_turn(*limits);
                Ok(())
            }
        };
        let got_resource = got.as_ref().err().map(|e| e.resource);
        assert_eq!(got_resource, *want, "{name}: step {i} {op:?}");
        if let Err(e) = got {
            assert_eq!(
                budget, before,
                "{name}: step {i} {op:?}: a refusal must consume nothing"
            );
            check_refusal(&e, budget.limits());
        }
    }
    let (frames, request_bytes, abandoned_now) = want;
    assert_eq!(
        budget.used(),
        Used {
            frames,
            request_bytes,
            abandoned_now
        },
        "{name}: used()"
    );
}

/// What every refusal promises: the limit is the one in force, `used` is past it, and the wire
/// kind follows the resource.
fn check_refusal(e: &Exceeded, limits: &Limits) {
    let (limit, kind) = match e.resource {
        Resource::RequestLen => (Some(limits.max_request_len), "too_large"),
        Resource::AnswerLen => (Some(limits.max_answer_len), "too_large"),
        Resource::Frames => (limits.max_frames, "budget_exceeded"),
        Resource::RequestBytes => (limits.max_request_bytes, "budget_exceeded"),
        Resource::AbandonedThreads => (Some(limits.max_abandoned as u64), "timeout"),
        other => panic!("untested resource {other:?}"),
    };
    assert_eq!(Some(e.limit), limit, "{e:?}: limit");
    assert_eq!(e.wire_kind().as_str(), kind, "{e:?}");
    assert_eq!(e.resource.wire_kind().as_str(), kind, "{e:?}");
    if e.resource == Resource::AbandonedThreads {
        assert!(e.used >= e.limit, "{e:?}: used");
    } else {
        assert!(e.used > e.limit || e.used == u64::MAX, "{e:?}: used");
    }
}

#[test]
fn defaults_are_the_documented_ones() {
    assert_eq!(
        Limits::default(),
        limits(Some(1000), Some(16 * MIB), MIB, 16 * MIB, 4)
    );
    assert_eq!(Budget::default(), Budget::new(Limits::default()));
    assert_eq!(Budget::default().used(), Used::default());
}

#[test]
fn request_length() {
    let d = Limits::default();
    check("empty frame", d, &[(Req(0), OK)], (1, 0, 0));
    check("exactly 1 MiB", d, &[(Req(MIB), OK)], (1, MIB, 0));
    check(
        "1 MiB + 1",
        d,
        &[(Req(MIB + 1), Some(Resource::RequestLen))],
        (0, 0, 0),
    );
    check(
        "u64::MAX",
        d,
        &[(Req(u64::MAX), Some(Resource::RequestLen))],
        (0, 0, 0),
    );
    let zero = Limits {
        max_request_len: 0,
        ..d
    };
    check(
        "zero limit",
        zero,
        &[(Req(1), Some(Resource::RequestLen)), (Req(0), OK)],
        (1, 0, 0),
    );
    let huge = limits(None, None, u64::MAX, 0, 0);
    check(
        "no byte limit saturates",
        huge,
        &[(Req(u64::MAX), OK), (Req(u64::MAX), OK)],
        (2, u64::MAX, 0),
    );
}

#[test]
fn frame_budget() {
    use Resource::Frames as F;
    check(
        "default 1000",
        Limits::default(),
        &[(ReqN(1000, 10), OK), (Req(0), Some(F))],
        (1000, 10_000, 0),
    );
    check(
        "exactly at limit",
        frames(Some(2)),
        &[(Req(1), OK), (Req(1), OK)],
        (2, 2, 0),
    );
    check(
        "one past",
        frames(Some(2)),
        &[(ReqN(2, 1), OK), (Req(1), Some(F)), (Req(1), Some(F))],
        (2, 2, 0),
    );
    check("zero", frames(Some(0)), &[(Req(0), Some(F))], (0, 0, 0));
    check(
        "unlimited",
        frames(None),
        &[(ReqN(5000, 1), OK)],
        (5000, 5000, 0),
    );
    // A frame too long and past the frame budget is refused for its length.
    let both = limits(Some(0), None, 5, 0, 0);
    check(
        "length first",
        both,
        &[(Req(6), Some(Resource::RequestLen)), (Req(5), Some(F))],
        (0, 0, 0),
    );
}

#[test]
fn request_byte_budget() {
    use Resource::RequestBytes as B;
    check(
        "exactly at limit",
        bytes(Some(10)),
        &[(Req(4), OK), (Req(6), OK), (Req(0), OK)],
        (3, 10, 0),
    );
    check(
        "one past",
        bytes(Some(10)),
        &[(Req(4), OK), (Req(7), Some(B))],
        (1, 4, 0),
    );
    // A refused frame is not read, so a smaller one after it may still pass.
    check(
        "refused consumes nothing",
        bytes(Some(10)),
        &[(Req(8), OK), (Req(5), Some(B)), (Req(2), OK)],
        (2, 10, 0),
    );
    check(
        "zero",
        bytes(Some(0)),
        &[(Req(0), OK), (Req(1), Some(B))],
        (1, 0, 0),
    );
    check(
        "unlimited",
        bytes(None),
        &[(ReqN(40, MIB), OK)],
        (40, 40 * MIB, 0),
    );
    check(
        "default 16 MiB",
        Limits::default(),
        &[(ReqN(16, MIB), OK), (Req(1), Some(B)), (Req(0), OK)],
        (17, 16 * MIB, 0),
    );
    let max = limits(None, Some(u64::MAX), u64::MAX, 0, 0);
    check(
        "overflow is refused",
        max,
        &[(Req(u64::MAX), OK), (Req(1), Some(B)), (Req(0), OK)],
        (2, u64::MAX, 0),
    );
    // Frames are checked before bytes.
    let both = limits(Some(1), Some(1), 10, 0, 0);
    check(
        "frames first",
        both,
        &[(Req(1), OK), (Req(5), Some(Resource::Frames))],
        (1, 1, 0),
    );
}

#[test]
fn answer_length() {
    use Resource::AnswerLen as A;
    let d = Limits::default();
    check(
        "exactly 16 MiB",
        d,
        &[(Ans(16 * MIB), OK), (Ans(0), OK)],
        (0, 0, 0),
    );
    check("16 MiB + 1", d, &[(Ans(16 * MIB + 1), Some(A))], (0, 0, 0));
    let zero = Limits {
        max_answer_len: 0,
        ..d
    };
    check("zero", zero, &[(Ans(0), OK), (Ans(1), Some(A))], (0, 0, 0));
    // An answer is checked, never counted, even when the frame budget is spent.
    check(
        "frames spent",
        frames(Some(0)),
        &[(Ans(100), OK)],
        (0, 0, 0),
    );
}

#[test]
fn abandoned_threads() {
    use Resource::AbandonedThreads as T;
    let four = [(Start, OK), (Abandon, OK)].repeat(4);
    check(
        "default 4",
        Limits::default(),
        &[&four[..], &[(Start, Some(T))]].concat(),
        (0, 0, 4),
    );
    check(
        "one ends, one may start",
        abandoned(2),
        &[
            (Start, OK),
            (Abandon, OK),
            (Start, OK),
            (Abandon, OK),
            (Start, Some(T)),
            (Finished, OK),
            (Start, OK),
        ],
        (0, 0, 1),
    );
    check(
        "a call that ends is not counted",
        abandoned(1),
        &[(Start, OK), (Start, OK)],
        (0, 0, 0),
    );
    check(
        "zero refuses every call",
        abandoned(0),
        &[(Start, Some(T))],
        (0, 0, 0),
    );
    check(
        "finished at zero",
        abandoned(1),
        &[(Finished, OK), (Start, OK)],
        (0, 0, 0),
    );
    // Frames are a separate account.
    check(
        "frames unaffected",
        abandoned(1),
        &[(Start, OK), (Abandon, OK), (Req(3), OK)],
        (1, 3, 1),
    );
}

#[test]
fn reset_turn() {
    let one = frames(Some(1));
    check(
        "frames and bytes start again",
        one,
        &[
            (Req(3), OK),
            (Req(0), Some(Resource::Frames)),
            (Reset(one), OK),
            (Req(2), OK),
        ],
        (1, 2, 0),
    );
    check(
        "abandoned threads stay counted",
        abandoned(2),
        &[
            (Start, OK),
            (Abandon, OK),
            (Req(5), OK),
            (Reset(abandoned(2)), OK),
        ],
        (0, 0, 1),
    );
    check(
        "new limits apply, abandoned count over a lowered limit",
        abandoned(4),
        &[
            (Start, OK),
            (Abandon, OK),
            (Start, OK),
            (Abandon, OK),
            (Reset(limits(Some(0), Some(0), 0, 0, 1)), OK),
            (Start, Some(Resource::AbandonedThreads)),
            (Req(0), Some(Resource::Frames)),
            (Finished, OK),
            (Start, Some(Resource::AbandonedThreads)),
            (Finished, OK),
            (Start, OK),
        ],
        (0, 0, 0),
    );
}

#[derive(Clone, Debug)]
enum Step {
    Req(u64),
    Ans(u64),
    /// A call that, if it may start, is abandoned or not.
    Call {
        abandon: bool,
    },
    Finished,
    Reset(Limits),
}

fn arb_limits() -> impl Strategy<Value = Limits> {
    (
        proptest::option::of(0u64..6),
        proptest::option::of(0u64..40),
        0u64..12,
        0u64..12,
        0usize..4,
    )
        .prop_map(|(f, b, r, a, t)| limits(f, b, r, a, t))
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u64..16).prop_map(Step::Req),
        1 => (0u64..16).prop_map(Step::Ans),
        2 => any::<bool>().prop_map(|abandon| Step::Call { abandon }),
        1 => Just(Step::Finished),
        1 => arb_limits().prop_map(Step::Reset),
    ]
}

proptest! {
    /// Driven the way the runtime drives it, the budget never lets its counts pass its limits,
    /// refuses exactly when a limit would be passed, and a refusal consumes nothing.
    #[test]
    fn used_never_exceeds_limits(start in arb_limits(), steps in proptest::collection::vec(arb_step(), 0..60)) {
        let mut budget = Budget::new(start);
        for step in steps {
            let before = budget.clone();
            let was = budget.used();
            let l = *budget.limits();
            match step {
                Step::Req(len) => {
                    let too_long = len > l.max_request_len;
                    let spent = l.max_frames.is_some_and(|m| was.frames >= m);
                    let over = l.max_request_bytes.is_some_and(|m| was.request_bytes + len > m);
                    match budget.charge_request(len) {
                        Ok(()) => {
                            prop_assert!(!too_long && !spent && !over);
                            prop_assert_eq!(budget.used().frames, was.frames + 1);
                            prop_assert_eq!(budget.used().request_bytes, was.request_bytes + len);
                        }
                        Err(e) => {
                            let want = if too_long { Resource::RequestLen } else if spent { Resource::Frames } else { Resource::RequestBytes };
                            prop_assert!(too_long || spent || over);
                            prop_assert_eq!(e.resource, want);
                            prop_assert_eq!(&budget, &before);
                            check_refusal(&e, &l);
                        }
                    }
                }
                Step::Ans(len) => {
                    let verdict = budget.check_answer(len);
                    prop_assert_eq!(verdict.is_err(), len > l.max_answer_len);
                    prop_assert_eq!(&budget, &before);
                }
                Step::Call { abandon } => match budget.try_start_call() {
                    Ok(()) => {
                        prop_assert!(was.abandoned_now < l.max_abandoned);
                        if abandon {
                            budget.abandon();
                            prop_assert!(budget.used().abandoned_now <= l.max_abandoned);
                        }
                    }
                    Err(e) => {
                        prop_assert_eq!(e.resource, Resource::AbandonedThreads);
                        prop_assert!(was.abandoned_now >= l.max_abandoned);
                        check_refusal(&e, &l);
                    }
                },
                Step::Finished => {
                    budget.abandoned_finished();
                    prop_assert_eq!(budget.used().abandoned_now, was.abandoned_now.saturating_sub(1));
                }
                Step::Reset(limits) => {
                    budget.reset_turn(limits);
                    prop_assert_eq!(budget.used(), Used { frames: 0, request_bytes: 0, abandoned_now: was.abandoned_now });
                    prop_assert_eq!(budget.limits(), &limits);
                }
            }
            let used = budget.used();
            let l = budget.limits();
            prop_assert!(l.max_frames.is_none_or(|m| used.frames <= m));
            prop_assert!(l.max_request_bytes.is_none_or(|m| used.request_bytes <= m));
        }
    }
}
