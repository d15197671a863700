//! The control channel: the frames our guest package sends the runtime itself, not a tool,
//! over the tool door's import (`host.call`), and what a store holds of them while its
//! guest is launched (docs/protocol.md, "Control frames").
//!
//! Each frame is [`PREFIX`] and a word, which no tool frame (a JSON object) starts with:
//! - [`Control::Entropy`] (`_reseed`, in any guest, at any time): answered with
//!   [`ENTROPY_BYTES`] new random bytes, the states of the guest's two MT19937 generators.
//! - [`Control::Standby`] (a guest on standby's first frame, `serve`): waits for a run
//!   (standby.rs); answered with the run's command line, or [`Answer::Warm`]: warm up and
//!   ask again.
//! - [`Control::Go`] (a fresh run's first frame from a snapshot, `go`, or a primed
//!   instance's): answered with the run's command line (run.rs, `go_spec`).
//! - [`Control::Offer`] (the frame after the command line of a run whose spec asked for its
//!   compiled program, `_compile_offered`): the marshalled code, kept (compiled.rs),
//!   answered [`Answer::Kept`].
//! - [`Control::Display`] (in any guest, at any time: `host.display`): a MIME bundle for
//!   the run's displays (display.rs), answered `kept`, `cut` or `bad`
//!   ([`Answer::Display`]); it meets or ends no expectation.
//!
//! `door_call` (host.rs) asks [`answer`] first; only a frame it leaves reaches the tool
//! door. Entropy and displays are answered in any guest; the others only when the store expects them
//! ([`ControlState`]): the standby's frame as its first, the command line to the first
//! frame after it was set, the offer to the frame after that. Each expectation ends at
//! the first frame that is not entropy, whatever it is: a frame the runtime does not
//! expect (a program asking again) goes to the tool door as any other frame, which
//! answers it as it answers a frame that is not JSON (no host, or a `protocol` error).
//!
//! **Invariant:** [`Control::parse`] compares at most the prefix and one word (a prefix
//! compare, as on every fresh run's path); a control frame the runtime answers never
//! reaches the tool door, a tool or the record; the command line and the offer each go
//! to one frame at most, the one right after they were set.

use wasmtime::{AsContextMut, Caller};

use crate::compiled::Offer;
use crate::guest_mem::span;
use crate::host::{DOOR_FAULT, HostState, deliver};
use crate::standby::{Waited, Waiting};
use crate::stop::TickerGuard;

/// What every control frame starts with: a NUL, which starts no JSON text.
pub(crate) const PREFIX: &[u8] = b"\0wasi-python ";
/// The frame by which the guest asks for the entropy it writes its two random
/// generators' states with (guest boot's `_entropy`). `os.urandom` takes the guest one
/// WASI call per 256 bytes (wasi-libc's `getentropy`): 24 us for these.
pub(crate) const ENTROPY_FRAME: &[u8] = b"\0wasi-python entropy";
/// The frame by which a fresh run's guest asks for its command line (guest boot's `go`).
pub(crate) const GO_FRAME: &[u8] = b"\0wasi-python go";
/// The frame by which a guest on standby waits for its run (guest boot's `serve`).
pub(crate) const STANDBY_FRAME: &[u8] = b"\0wasi-python standby";
/// The start of the frame that offers a run's compiled program: then `marshal.dumps` of
/// the code object (nothing when there is none to offer).
pub(crate) const OFFER_FRAME: &[u8] = b"\0wasi-python compiled ";
/// The answer to [`STANDBY_FRAME`] that asks the guest to warm up and ask again.
pub(crate) const WARM_ANSWER: &[u8] = b"\0wasi-python warm";
/// The answer to an offer the host was waiting for.
pub(crate) const KEPT_ANSWER: &[u8] = b"kept";
pub(crate) use crate::display::DISPLAY_FRAME;
/// Two MT19937 states of 624 words.
pub(crate) const ENTROPY_BYTES: usize = 2 * 624 * 4;

/// A control frame, as the guest sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Control<'a> {
    /// [`ENTROPY_FRAME`].
    Entropy,
    /// [`GO_FRAME`].
    Go,
    /// [`STANDBY_FRAME`].
    Standby,
    /// [`OFFER_FRAME`] and the marshalled code that follows it (maybe none).
    Offer(&'a [u8]),
    /// [`DISPLAY_FRAME`] and the display's JSON that follows it (display.rs).
    Display(&'a [u8]),
}

impl<'a> Control<'a> {
    /// The control frame `frame` is, if it is one: [`PREFIX`] and exactly its word (an
    /// offer: its word, then anything). Reads at most the prefix and the longest word.
    pub(crate) fn parse(frame: &'a [u8]) -> Option<Control<'a>> {
        if !frame.starts_with(PREFIX) {
            return None;
        }
        // Slices compare their lengths first.
        if frame == ENTROPY_FRAME {
            Some(Control::Entropy)
        } else if frame == GO_FRAME {
            Some(Control::Go)
        } else if frame == STANDBY_FRAME {
            Some(Control::Standby)
        } else if let Some(code) = frame.strip_prefix(OFFER_FRAME) {
            Some(Control::Offer(code))
        } else {
            frame.strip_prefix(DISPLAY_FRAME).map(Control::Display)
        }
    }
}

/// The runtime's answer to a control frame.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// To [`Control::Go`] or [`Control::Standby`]: the run's command line (run.rs, `go_spec`).
    Spec(Vec<u8>),
    /// To [`Control::Standby`]: no run yet; warm up and ask again ([`WARM_ANSWER`]).
    Warm,
    /// To [`Control::Entropy`]: [`ENTROPY_BYTES`] from [`entropy`].
    Entropy(Box<[u8; ENTROPY_BYTES]>),
    /// To an awaited [`Control::Offer`] ([`KEPT_ANSWER`]).
    Kept,
    /// To [`Control::Display`]: `kept`, `cut` or `bad`.
    Display(crate::display::Verdict),
}

impl Answer {
    /// The answer's bytes on the wire.
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Answer::Spec(spec) => spec,
            Answer::Warm => WARM_ANSWER,
            Answer::Entropy(bytes) => &bytes[..],
            Answer::Kept => KEPT_ANSWER,
            Answer::Display(verdict) => verdict.bytes(),
        }
    }

    /// New entropy; `None` if the OS gives no seed (the guest then takes `os.urandom`'s).
    fn entropy() -> Option<Answer> {
        let mut bytes = Box::new([0u8; ENTROPY_BYTES]);
        entropy(&mut bytes[..]).ok()?;
        Some(Answer::Entropy(bytes))
    }
}

/// What a store holds of the control channel while its guest is launched: the frame it
/// expects next, and the epoch ticker of a run a guest on standby took (its guest thread
/// did not start one: the standby waited without). Empty for any other store.
#[derive(Default)]
pub(crate) struct ControlState {
    expect: Expect,
    ticking: Option<TickerGuard>,
}

/// The control frame a store waits for.
#[derive(Default)]
enum Expect {
    #[default]
    Nothing,
    /// A guest on standby: its first frame waits for its run (standby.rs).
    Standby(Box<Waiting>),
    /// A fresh run's command line, for its first frame if that asks for it; then the
    /// offer of its compiled program, if its spec asked for it.
    Go(Vec<u8>, Option<Offer>),
    /// A run whose spec asked for its compiled program: its next frame, if that offers it.
    Offer(Offer),
}

impl ControlState {
    /// A guest on standby, waiting for its run: its first frame must be [`STANDBY_FRAME`].
    pub(crate) fn standby(waiting: Box<Waiting>) -> ControlState {
        ControlState { expect: Expect::Standby(waiting), ticking: None }
    }

    /// A fresh run from a snapshot: its first frame gets `spec` if it asks for it
    /// ([`GO_FRAME`]), the frame after it gives the program's code to `offer`.
    pub(crate) fn go(spec: Vec<u8>, offer: Option<Offer>) -> ControlState {
        ControlState { expect: Expect::Go(spec, offer), ticking: None }
    }

    /// Whether a guest on standby still waits for its first frame's answer: one that
    /// ended so never waited for a run.
    pub(crate) fn on_standby(&self) -> bool {
        matches!(self.expect, Expect::Standby(_))
    }

    /// The run's guest call has ended: the ticker its standby's run started stops.
    pub(crate) fn run_ended(&mut self) {
        self.ticking = None;
    }

    /// What to do with `frame` (`None`: it is outside the guest's memory), and the
    /// expectation it meets or ends.
    fn step(&mut self, frame: Option<&[u8]>) -> Step {
        let control = frame.and_then(Control::parse);
        if control == Some(Control::Entropy) {
            return Answer::entropy().map_or(Step::Fault, Step::Answer);
        }
        match std::mem::take(&mut self.expect) {
            Expect::Nothing => Step::Door,
            Expect::Standby(waiting) if control == Some(Control::Standby) => Step::Standby(waiting),
            // Kept, so the guest thread finds it never waited.
            Expect::Standby(waiting) => {
                self.expect = Expect::Standby(waiting);
                Step::NotStandby
            }
            Expect::Go(spec, offer) if control == Some(Control::Go) => {
                self.expect = offer.map_or(Expect::Nothing, Expect::Offer);
                Step::Answer(Answer::Spec(spec))
            }
            // Not asked for: this frame is the offer's, if any.
            Expect::Go(_, offer) => offer.map_or(Step::Door, |offer| offered(offer, frame, control)),
            Expect::Offer(offer) => offered(offer, frame, control),
        }
    }
}

/// The frame after a spec that asked for the program's code: kept if it offers it.
fn offered(offer: Offer, frame: Option<&[u8]>, control: Option<Control<'_>>) -> Step {
    match (frame, control) {
        (None, _) => Step::Fault,
        (_, Some(Control::Offer(code))) => {
            offer.take(code);
            Step::Answer(Answer::Kept)
        }
        _ => Step::Door,
    }
}

/// What the control channel does with one frame.
enum Step {
    /// Not the control channel's: the tool door's.
    Door,
    /// Answered (a fault if the guest does not get it).
    Answer(Answer),
    /// A fault, with no answer.
    Fault,
    /// The standby's frame: wait for a run.
    Standby(Box<Waiting>),
    /// A guest on standby sent another frame first: it ends.
    NotStandby,
}

/// Answers the frame at `ptr..ptr+len` if it is the control channel's: 0, or a fault when
/// the guest did not get the answer; `Err` ends the guest (a guest on standby's wrong
/// frame, or any that trapped in its allocator). `None`: the tool door's.
pub(crate) fn answer(
    caller: &mut Caller<'_, HostState>,
    ptr: i32,
    len: i32,
    out_ptr_ptr: i32,
    out_len_ptr: i32,
) -> Option<wasmtime::Result<i32>> {
    let step = match caller.data().memory {
        Some(memory) => {
            let (data, state) = memory.data_and_store_mut(&mut *caller);
            let frame = span(ptr, len as u32 as usize, data.len()).map(|req| &data[req]);
            match frame.and_then(|f| f.strip_prefix(DISPLAY_FRAME)) {
                // Any time, whatever the store expects: kept for the run, never the door's.
                Some(body) => Step::Answer(Answer::Display(state.displays.offer(body))),
                None => match state.fixed.as_deref_mut() {
                    // A preload image's build draws its fixed stream, never the host's
                    // entropy (fixed.rs), so the image is the same bytes anywhere.
                    Some(fixed) if frame == Some(ENTROPY_FRAME) => {
                        let mut bytes = Box::new([0u8; ENTROPY_BYTES]);
                        fixed.entropy(&mut bytes[..]);
                        Step::Answer(Answer::Entropy(bytes))
                    }
                    _ => state.control.step(frame),
                },
            }
        }
        None => caller.data_mut().control.step(None),
    };
    match step {
        Step::Door => None,
        Step::Answer(answer) => Some(reply(caller, answer.bytes(), out_ptr_ptr, out_len_ptr)),
        Step::Fault => Some(Ok(DOOR_FAULT)),
        Step::Standby(waiting) => Some(standby(caller, waiting, out_ptr_ptr, out_len_ptr)),
        Step::NotStandby => {
            Some(Err(wasmtime::format_err!("a guest on standby sent another frame first, or one outside its memory")))
        }
    }
}

/// Delivers `bytes`: 0, or a fault when the guest did not get them; `Err` if it trapped
/// in its allocator.
fn reply(caller: &mut Caller<'_, HostState>, bytes: &[u8], out_ptr_ptr: i32, out_len_ptr: i32) -> wasmtime::Result<i32> {
    let (Some(memory), Some(alloc)) = (caller.data().memory, caller.data().alloc.clone()) else {
        return Ok(DOOR_FAULT);
    };
    match deliver(caller, memory, &alloc, bytes, out_ptr_ptr, out_len_ptr)? {
        Ok(()) => Ok(0),
        Err(_) => Ok(DOOR_FAULT),
    }
}

/// A guest on standby's first frame: waits for its run (standby.rs) and answers with the
/// run's command line, or asks it to warm up. Anything amiss ends the guest.
fn standby(caller: &mut Caller<'_, HostState>, waiting: Box<Waiting>, out_ptr_ptr: i32, out_len_ptr: i32) -> wasmtime::Result<i32> {
    let (Some(memory), Some(alloc)) = (caller.data().memory, caller.data().alloc.clone()) else {
        caller.data_mut().control.expect = Expect::Standby(waiting);
        return Err(wasmtime::format_err!("a guest on standby without memory or allocator"));
    };
    let memory_now = memory.data_size(&*caller) as u64;
    let engine = caller.engine().clone();
    let answer = match crate::standby::wait_for_run(caller.data_mut(), waiting, memory_now, &engine)? {
        Waited::Warm(waiting) => {
            caller.data_mut().control.expect = Expect::Standby(waiting);
            Answer::Warm
        }
        Waited::Run { spec, offer, ticking } => {
            let control = &mut caller.data_mut().control;
            control.expect = offer.map_or(Expect::Nothing, Expect::Offer);
            control.ticking = Some(ticking);
            caller.as_context_mut().set_epoch_deadline(1);
            Answer::Spec(spec)
        }
    };
    match deliver(caller, memory, &alloc, answer.bytes(), out_ptr_ptr, out_len_ptr)? {
        Ok(()) => Ok(0),
        Err(why) => Err(wasmtime::format_err!("the standby's answer (a run's command line, or warm up) did not reach the guest: {why}")),
    }
}

/// Fills `out` from ChaCha12 keyed by 32 bytes the OS gives anew for each call
/// (`getrandom`): a CSPRNG's output, with nothing kept between calls (so nothing a fork
/// could share). Only random bytes leave.
pub(crate) fn entropy(out: &mut [u8]) -> rustix::io::Result<()> {
    use rand_core::{Rng, SeedableRng};
    let mut seed = [0u8; 32];
    let mut filled = 0;
    while filled < seed.len() {
        match rustix::rand::getrandom(&mut seed[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    chacha20::ChaCha12Rng::from_seed(seed).fill_bytes(out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::compiled::{Compiled, Lookup};

    #[test]
    fn every_control_frame_parses_as_itself() {
        assert_eq!(Control::parse(ENTROPY_FRAME), Some(Control::Entropy));
        assert_eq!(Control::parse(GO_FRAME), Some(Control::Go));
        assert_eq!(Control::parse(STANDBY_FRAME), Some(Control::Standby));
        assert_eq!(Control::parse(OFFER_FRAME), Some(Control::Offer(b"")));
        let mut offer = OFFER_FRAME.to_vec();
        offer.extend_from_slice(b"\xe3code\0");
        assert_eq!(Control::parse(&offer), Some(Control::Offer(b"\xe3code\0")));
        // As the guest package spells them (guest/_wasi_python_boot.py).
        assert_eq!(Control::parse(b"\0wasi-python go"), Some(Control::Go));
        assert_eq!(Control::parse(b"\0wasi-python compiled x"), Some(Control::Offer(b"x")));
        assert_eq!(Control::parse(DISPLAY_FRAME), Some(Control::Display(b"")));
        assert_eq!(Control::parse(b"\0wasi-python display {\"data\":{}}"), Some(Control::Display(b"{\"data\":{}}")));
    }

    #[test]
    fn near_misses_empty_frames_and_answers_are_not_control_frames() {
        for frame in [
            &b""[..],
            b"\0",
            b"\0wasi-python",
            PREFIX,
            b"wasi-python go",
            b" \0wasi-python go",
            b"\0wasi-python go ",
            b"\0wasi-python go\0",
            b"\0wasi-python goo",
            b"\0wasi-python Go",
            b"\0wasi-python  go",
            b"\0wasi_python go",
            b"\0wasi-python entrop",
            b"\0wasi-python entropyy",
            b"\0wasi-python standby\n",
            b"\0wasi-python compiled",
            b"\0wasi-python compiledx",
            b"\0wasi-python warm",
            b"kept",
            b"\0wasi-python display",
            b"\0wasi-python displays {}",
            b"\0wasi-python Display {}",
        ] {
            assert_eq!(Control::parse(frame), None, "{frame:?}");
        }
    }

    #[test]
    fn tool_frames_even_those_that_start_like_one_are_not_control_frames() {
        for frame in [
            &br#"{"v":1,"id":1,"op":"list"}"#[..],
            br#"{"v":1,"id":2,"op":"call","tool":"go","args":{}}"#,
            b"\0wasi-python go{\"v\":1,\"id\":1,\"op\":\"list\"}",
            b"\0wasi-python entropy{\"v\":1}",
            b"\0wasi-python standby {}",
        ] {
            assert_eq!(Control::parse(frame), None, "{frame:?}");
        }
    }

    #[test]
    fn answers_are_their_bytes_on_the_wire() {
        assert_eq!(Answer::Warm.bytes(), b"\0wasi-python warm");
        assert_eq!(Answer::Kept.bytes(), b"kept");
        use crate::display::Verdict;
        assert_eq!(Answer::Display(Verdict::Kept).bytes(), b"kept");
        assert_eq!(Answer::Display(Verdict::Cut).bytes(), b"cut");
        assert_eq!(Answer::Display(Verdict::Bad).bytes(), b"bad");
        assert_eq!(Answer::Spec(b"0\0/work".to_vec()).bytes(), b"0\0/work");
        let Some(Answer::Entropy(a)) = Answer::entropy() else { panic!("no entropy") };
        let Some(Answer::Entropy(b)) = Answer::entropy() else { panic!("no entropy") };
        assert_eq!(a.len(), ENTROPY_BYTES);
        assert_ne!(a, b);
    }

    #[test]
    fn entropy_fills_every_byte_anew_each_call() {
        let (mut a, mut b) = ([0u8; ENTROPY_BYTES], [0u8; ENTROPY_BYTES]);
        entropy(&mut a).unwrap();
        entropy(&mut b).unwrap();
        assert_ne!(a, b);
        // No run of 64 zero bytes anywhere: every block of the stream was written.
        assert!(a.chunks(64).all(|c| c.iter().any(|&x| x != 0)));
    }

    /// An offer for a program run twice, and the cache it fills.
    fn wanted() -> (Arc<Compiled>, Offer) {
        let compiled = Compiled::new();
        compiled.lookup("print(1)");
        let Lookup::Wanted(offer) = compiled.lookup("print(1)") else { panic!("run twice: asked for") };
        (compiled, offer)
    }

    fn offer_frame(code: &[u8]) -> Vec<u8> {
        [OFFER_FRAME, code].concat()
    }

    fn is_spec(step: Step, spec: &[u8]) -> bool {
        matches!(step, Step::Answer(Answer::Spec(s)) if s == spec)
    }

    #[test]
    fn a_store_that_expects_nothing_leaves_all_but_entropy_to_the_door() {
        let mut state = ControlState::default();
        for frame in [GO_FRAME, STANDBY_FRAME, OFFER_FRAME, br#"{"v":1,"id":1,"op":"list"}"#, b""] {
            assert!(matches!(state.step(Some(frame)), Step::Door), "{frame:?}");
        }
        assert!(matches!(state.step(None), Step::Door));
        assert!(matches!(state.step(Some(ENTROPY_FRAME)), Step::Answer(Answer::Entropy(_))));
    }

    #[test]
    fn the_command_line_goes_to_the_first_frame_if_it_asks_and_the_offer_to_the_next() {
        let (compiled, offer) = wanted();
        let mut state = ControlState::go(b"spec".to_vec(), Some(offer));
        // Entropy first takes nothing of what the run expects.
        assert!(matches!(state.step(Some(ENTROPY_FRAME)), Step::Answer(Answer::Entropy(_))));
        assert!(is_spec(state.step(Some(GO_FRAME)), b"spec"));
        assert!(matches!(state.step(Some(&offer_frame(b"code"))), Step::Answer(Answer::Kept)));
        assert_eq!(compiled.len(), 1, "kept");
        // Asked again, each goes to the door.
        assert!(matches!(state.step(Some(GO_FRAME)), Step::Door));
        assert!(matches!(state.step(Some(&offer_frame(b"other"))), Step::Door));
        assert!(matches!(compiled.lookup("print(1)"), Lookup::Found(code) if &*code == b"code"));
    }

    #[test]
    fn a_first_frame_that_does_not_ask_ends_the_command_line_and_is_the_offer_s() {
        // Another frame first: the command line is never given, that frame goes to the
        // door, and so does the offer after it.
        let (compiled, offer) = wanted();
        let mut state = ControlState::go(b"spec".to_vec(), Some(offer));
        assert!(matches!(state.step(Some(b"{}")), Step::Door));
        assert!(matches!(state.step(Some(GO_FRAME)), Step::Door));
        assert!(matches!(state.step(Some(&offer_frame(b"code"))), Step::Door));
        assert_eq!(compiled.len(), 0);
        // An offer first, instead of asking: taken as the offer, the command line gone.
        let (compiled, offer) = wanted();
        let mut state = ControlState::go(b"spec".to_vec(), Some(offer));
        assert!(matches!(state.step(Some(&offer_frame(b"code"))), Step::Answer(Answer::Kept)));
        assert!(matches!(state.step(Some(GO_FRAME)), Step::Door));
        assert_eq!(compiled.len(), 1);
        // Without an offer: only the command line, once.
        let mut state = ControlState::go(b"spec".to_vec(), None);
        assert!(is_spec(state.step(Some(GO_FRAME)), b"spec"));
        assert!(matches!(state.step(Some(&offer_frame(b"code"))), Step::Door));
    }

    #[test]
    fn an_offer_s_frame_outside_memory_is_a_fault_and_ends_it() {
        let (compiled, offer) = wanted();
        let mut state = ControlState::go(b"spec".to_vec(), Some(offer));
        assert!(is_spec(state.step(Some(GO_FRAME)), b"spec"));
        assert!(matches!(state.step(None), Step::Fault));
        assert!(matches!(state.step(Some(&offer_frame(b"code"))), Step::Door));
        assert_eq!(compiled.len(), 0);
    }

    #[test]
    fn a_guest_on_standby_must_send_the_standby_frame_first_and_is_kept_if_not() {
        use crate::output::{CappedPipe, InputPipe};
        let launcher = crate::launch::Launcher::new(crate::LaunchPolicy::default());
        let ready = crate::standby::Ready::new(&launcher, None, &Compiled::new());
        let waiting = || {
            Box::new(Waiting::new(
                ready.clone(),
                InputPipe::new(Vec::new()),
                CappedPipe::new(0),
                CappedPipe::new(0),
                Arc::new(parking_lot::Mutex::new(None)),
            ))
        };
        for frame in [Some(GO_FRAME), Some(&offer_frame(b"")[..]), Some(b"{}"), None] {
            let mut state = ControlState::standby(waiting());
            assert!(matches!(state.step(frame), Step::NotStandby), "{frame:?}");
            assert!(state.on_standby(), "{frame:?}: the guest thread finds it never waited");
        }
        let mut state = ControlState::standby(waiting());
        assert!(matches!(state.step(Some(ENTROPY_FRAME)), Step::Answer(Answer::Entropy(_))));
        assert!(matches!(state.step(Some(STANDBY_FRAME)), Step::Standby(_)));
        assert!(!state.on_standby(), "waiting for its run: the answer says what comes next");
    }
}
