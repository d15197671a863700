//! Sessions: one interpreter kept across turns, like a notebook.
//!
//! The store lives on a session thread of its own (a big native stack, as for runs);
//! each turn is sent there and answered. A session ends when closed, when it rests
//! longer than its idle time, when its lifetime passes, when the guest calls `exit()`
//! or `os._exit()`, or when a turn traps; then every later turn is refused with the
//! reason.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::engine::{self, GUEST_THREAD_STACK};
use crate::guest::{ARGV0, Guest, OpenFiles, SETUP_DEADLINE, guest_env, py_env, py_str, setup_code};
use crate::fork::{Origin, Taker};
use crate::{Artifacts, CancelToken, Completed, Error, RunConfig, Runtime, Snapshot, SnapshotError, Trapped};

/// Why a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionEnd {
    /// [`Session::close`] was called (or the session was dropped).
    Closed,
    /// It rested longer than its idle time.
    Idle,
    /// Its lifetime passed.
    Lifetime,
    /// The guest called `exit()`/`quit()` or `os._exit()`, with this status.
    Exit(i32),
    /// A turn trapped.
    Trapped(Trapped),
}

impl std::fmt::Display for SessionEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionEnd::Closed => f.write_str("the session was closed"),
            SessionEnd::Idle => f.write_str("the session rested longer than its idle time"),
            SessionEnd::Lifetime => f.write_str("the session's lifetime passed"),
            SessionEnd::Exit(code) => write!(f, "the guest exited the session with status {code}"),
            SessionEnd::Trapped(t) => write!(f, "a turn trapped ({t}), which ends the session"),
        }
    }
}

impl SessionEnd {
    /// A short name: "closed", "idle", "lifetime", "exit", or the trap's name.
    pub fn as_str(&self) -> &str {
        match self {
            SessionEnd::Closed => "closed",
            SessionEnd::Idle => "idle",
            SessionEnd::Lifetime => "lifetime",
            SessionEnd::Exit(_) => "exit",
            SessionEnd::Trapped(t) => t.as_str(),
        }
    }
}

/// Why a turn was not run.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    #[error("the session has ended: {0}")]
    Ended(SessionEnd),
    #[error("the session is running a turn in another thread; a session serves one thread at a time")]
    Busy,
}

/// A session's own settings beyond a run's.
#[derive(Debug, Clone)]
pub struct SessionLimits {
    /// Ends the session when no turn comes for this long (default 15 min).
    pub idle: Option<Duration>,
    /// Ends the session this long after it opened (default 1 h).
    pub lifetime: Option<Duration>,
    /// How long closing may run the guest's `atexit` handlers (default 5 s).
    pub shutdown: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            idle: Some(Duration::from_secs(900)),
            lifetime: Some(Duration::from_secs(3600)),
            shutdown: Duration::from_secs(5),
        }
    }
}

/// One turn's limits: each turn gets its own deadline, fuel, output and display caps,
/// and its own stream. `Turn { code, ..Default::default() }` takes the defaults of
/// [`crate::Limits`].
#[derive(Debug, Clone)]
pub struct Turn {
    pub code: String,
    pub deadline: Option<Duration>,
    pub output_bytes: usize,
    pub fuel: Option<u64>,
    pub cancel: CancelToken,
    /// The turn's display cap ([`crate::Limits::display_bytes`]).
    pub display_bytes: usize,
    /// Where the turn's output and displays stream as the guest writes them
    /// ([`crate::RunConfig::events`]).
    pub events: Option<crate::Events>,
}

impl Default for Turn {
    fn default() -> Turn {
        let limits = crate::Limits::default();
        Turn {
            code: String::new(),
            deadline: limits.deadline,
            output_bytes: limits.output_bytes,
            fuel: None,
            cancel: CancelToken::new(),
            display_bytes: limits.display_bytes,
            events: None,
        }
    }
}

/// Why [`Session::claim_and_send`] sent nothing.
enum Refused {
    Busy,
    Ended(SessionEnd),
}

enum Cmd {
    Turn(Turn, SyncSender<Result<Completed, SessionError>>),
    Snapshot(SyncSender<Result<Snapshot, SnapshotError>>),
    /// Closes; the token cancels the shutdown (the guest's `atexit` handlers).
    Close(SyncSender<Option<Completed>>, CancelToken),
}

/// What a session gave back as it rested between turns ([`Session::rest_stats`]): a
/// diagnostic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RestStats {
    /// How often it rested: no command came for [`wasi_python_sched::threads::REST`]
    /// after a turn (or after it opened).
    pub rests: u64,
    /// The 4 KiB pages of the guest's memory it gave back: written by the guest, but
    /// holding again what the memory was mapped from (rest.rs).
    pub guest_pages: u64,
    /// The bytes of its thread's stack, resident below where the thread rests, given back.
    pub stack_bytes: u64,
}

/// [`RestStats`], counted by the session thread.
#[derive(Debug, Default)]
struct Rested {
    /// Never rests (the launch policy's `rest` off).
    off: bool,
    rests: AtomicU64,
    guest_pages: AtomicU64,
    stack_bytes: AtomicU64,
}

/// A live interpreter. Used from one thread at a time: a second concurrent turn is
/// refused with [`SessionError::Busy`].
#[derive(Debug)]
pub struct Session {
    tx: Mutex<Option<SyncSender<Cmd>>>,
    busy: Arc<AtomicBool>,
    /// Whether the session thread is spinning for the next command ([`ASLEEP`],
    /// [`ALONE`] or [`BESIDE`]). When it spins on a CPU of its own, a turn's caller spins
    /// for the answer without yielding...
    listening: Arc<AtomicU8>,
    /// ...unless the session's turns start threads of their own (tools, a door, mounts:
    /// each call runs on a new thread), which may be put on the caller's CPU.
    calls_out: bool,
    /// The session thread, woken on the caller's CPU when it sleeps (sched's wake.rs).
    thread: Arc<wasi_python_sched::wake::Pullable>,
    /// The launch policy's `turn_spin`.
    turn_spin: Duration,
    ended: Arc<Mutex<Option<SessionEnd>>>,
    /// The fork generation it opened in (forks.rs): in a forked child its thread does
    /// not exist, and the session is closed there.
    born: u64,
    /// What it gave back as it rested.
    rested: Arc<Rested>,
}

/// A turn in progress. The session is busy until its result is taken or it is dropped.
#[derive(Debug)]
pub struct TurnHandle {
    rx: Mutex<Receiver<Result<Completed, SessionError>>>,
    busy: Arc<AtomicBool>,
    /// Whether a wait has spun already: only the first one does.
    spun: AtomicBool,
    /// How long the first wait spins before it sleeps (the launch policy's `turn_spin`).
    spin: Duration,
    /// Whether its spin yields: unless the session thread was running when the turn
    /// was sent, it was woken, maybe onto this thread's CPU ([`wasi_python_sched::wait`]).
    yielding: bool,
}

/// The session thread waits for a command without spinning (or works).
const ASLEEP: u8 = 0;
/// It spins for the next command on a CPU of its own.
const ALONE: u8 = 1;
/// It spins on the CPU of the last turn's caller.
const BESIDE: u8 = 2;

impl TurnHandle {
    pub fn wait(self) -> Result<Completed, SessionError> {
        let rx = self.rx.lock();
        let r = wasi_python_sched::wait::try_recv_spinning(&rx, self.spin, self.yielding).or_else(|_| rx.recv());
        r.unwrap_or(Err(SessionError::Ended(SessionEnd::Closed)))
    }
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<Completed, SessionError>> {
        let rx = self.rx.lock();
        // Most turns answer within a few hundred microseconds: catch those without a
        // sleep and wake-up.
        let spin = if self.spun.swap(true, Ordering::Relaxed) { Duration::ZERO } else { self.spin.min(timeout) };
        let r = match wasi_python_sched::wait::try_recv_spinning(&rx, spin, self.yielding).or_else(|_| rx.recv_timeout(timeout)) {
            Ok(r) => Some(r),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(Err(SessionError::Ended(SessionEnd::Closed))),
        };
        if r.is_some() {
            self.busy.store(false, Ordering::SeqCst);
        }
        r
    }
}

impl Drop for TurnHandle {
    fn drop(&mut self) {
        self.busy.store(false, Ordering::SeqCst);
    }
}

/// The hidden first turn of a session from a snapshot, whose build already ran
/// [`setup_code`]: the run's environment and working folder replace the build's.
fn restore_code(env: &[(String, String)], workdir: &str, reseed: bool) -> String {
    format!(
        "__import__('_wasi_python_boot').restore({}, {}, {})\n__import__('_reactor')._turns = 0\n",
        py_env(env),
        py_str(workdir),
        if reseed { "True" } else { "False" }
    )
}

impl Runtime {
    /// Opens a session. `config`'s argv and stdin are not used; its limits are the
    /// defaults of each turn's, its grants, env, door and memory hold for the session.
    /// Metered (fuel) sessions need `config.limits.fuel` set to something at opening.
    pub fn open_session(&self, config: RunConfig, limits: SessionLimits) -> Result<Session, Error> {
        let grants = self.grants(&config)?;
        self.launcher().lend_call_threads(&config);
        let (prepared, origin) = self.flavour_for(&config)?;
        let artifacts = self.artifacts().clone();
        let taker = Taker::new(self.clone(), origin);
        let (tx, rx) = mpsc::sync_channel::<Cmd>(0);
        let ended = Arc::new(Mutex::new(None));
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<(), Error>>(1);
        let ended2 = ended.clone();
        let listening = Arc::new(AtomicU8::new(ASLEEP));
        let calls_out = config.door.is_some() || config.tools.is_some() || !config.mounts.is_empty();
        let listening2 = listening.clone();
        let thread = Arc::new(wasi_python_sched::wake::Pullable::default());
        let thread2 = thread.clone();
        let policy = self.launcher().policy.clone();
        let turn_spin = policy.turn_spin;
        let rested = Arc::new(Rested { off: !policy.rest, ..Rested::default() });
        let rested2 = rested.clone();
        std::thread::Builder::new()
            .name("wasi-python-session".into())
            .stack_size(GUEST_THREAD_STACK)
            .spawn(move || {
                thread2.register();
                let mut live = match Live::open(&prepared, &artifacts, &config, &grants, taker, rested2) {
                    Ok(l) => {
                        let _ = ready_tx.send(Ok(()));
                        l
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let end = live.serve(&rx, &limits, &ended2, &listening2, &thread2, &policy);
                ended2.lock().get_or_insert(end);
                // The guest's open mount files reach their providers (Live's drop) before
                // the channel closes: a `close()` waiting on it returns after them.
                drop(live);
                drop(rx);
            })
            .map_err(|e| Error::io("spawning the session thread", e))?;
        ready_rx
            .recv()
            .unwrap_or_else(|_| Err(Error::Internal("the session thread died".into())))?;
        Ok(Session {
            tx: Mutex::new(Some(tx)),
            busy: Arc::new(AtomicBool::new(false)),
            listening,
            calls_out,
            thread,
            turn_spin,
            ended,
            born: wasi_python_sched::forks::generation(),
            rested,
        })
    }
}

impl Session {
    /// Why the session ended, or `None` while it lives.
    pub fn ended(&self) -> Option<SessionEnd> {
        if self.forked() {
            return Some(SessionEnd::Closed);
        }
        self.ended.lock().clone()
    }

    /// What the session gave back as it rested between turns: the guest's pages that
    /// hold again what its memory was mapped from (a session snapshot or a preload
    /// image; none without a preload, whose memory is the artifact's own), and its
    /// thread's stack below where it rests. It rests once no command came for [`wasi_python_sched::threads::REST`]
    /// after a turn (or its opening), until the next turn.
    pub fn rest_stats(&self) -> RestStats {
        RestStats {
            rests: self.rested.rests.load(Ordering::Relaxed),
            guest_pages: self.rested.guest_pages.load(Ordering::Relaxed),
            stack_bytes: self.rested.stack_bytes.load(Ordering::Relaxed),
        }
    }

    /// Whether this is a forked child of the process that opened the session.
    fn forked(&self) -> bool {
        wasi_python_sched::forks::generation() != self.born
    }

    /// Starts a turn; refused if the session ended or another turn is running. The
    /// turn gets its own tool budget and record (the door's, reset as it starts).
    pub fn start_turn(&self, turn: Turn) -> Result<TurnHandle, SessionError> {
        // (Should the session thread stop listening between this look and the send, the
        // caller spins without yielding beside a woken thread: a rare, slower turn.)
        let listening = self.listening.load(Ordering::Acquire);
        let yielding = self.calls_out || listening != ALONE;
        // Asleep (or about to be), it is woken on this thread's CPU, which waits next.
        let rrx = self.claim_and_send(|r| Cmd::Turn(turn, r), listening == ASLEEP).map_err(|refused| match refused {
            Refused::Busy => SessionError::Busy,
            Refused::Ended(end) => SessionError::Ended(end),
        })?;
        Ok(TurnHandle { rx: Mutex::new(rrx), busy: self.busy.clone(), spun: AtomicBool::new(false), spin: self.turn_spin, yielding })
    }

    /// Claims the session (one command at a time) and sends the command `make` builds
    /// around a reply channel. On success the session stays claimed: whoever receives
    /// the reply releases it. `pull`: the session thread sleeps, and is woken on this
    /// thread's CPU (sched's wake.rs), once the session is claimed (never while it runs another
    /// caller's turn).
    fn claim_and_send<R>(&self, make: impl FnOnce(SyncSender<R>) -> Cmd, pull: bool) -> Result<mpsc::Receiver<R>, Refused> {
        if self.forked() {
            return Err(Refused::Ended(SessionEnd::Closed));
        }
        // The end is written before the turn that caused it is answered: refuse at once,
        // rather than wait for the session thread to finish ending (the write-back of
        // open mount files may take the GIL its caller holds).
        if let Some(end) = self.ended.lock().clone() {
            return Err(Refused::Ended(end));
        }
        if self.busy.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst).is_err() {
            return Err(Refused::Busy);
        }
        let release = || self.busy.store(false, Ordering::SeqCst);
        let tx = self.tx.lock().clone();
        let Some(tx) = tx else {
            release();
            return Err(Refused::Ended(self.ended().unwrap_or(SessionEnd::Closed)));
        };
        let (rtx, rrx) = mpsc::sync_channel(1);
        self.thread.sending(pull);
        if tx.send(make(rtx)).is_err() {
            // The session thread has ended (idle, lifetime, a trap, exit).
            *self.tx.lock() = None;
            release();
            return Err(Refused::Ended(self.wait_ended()));
        }
        Ok(rrx)
    }

    /// Runs one turn to its end.
    pub fn turn(&self, turn: Turn) -> Result<Completed, SessionError> {
        self.start_turn(turn)?.wait()
    }

    /// The end's reason, once the session thread has written it.
    fn wait_ended(&self) -> SessionEnd {
        for _ in 0..200 {
            if let Some(e) = self.ended() {
                return e;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        SessionEnd::Closed
    }

    /// The interpreter as it rests between turns: its memory (every module, object and
    /// variable, including whatever `env` secrets it holds), the memory's size and its
    /// clock. Refused during a turn ([`SnapshotError::Busy`]), after the session ended,
    /// and while the guest holds files open ([`SnapshotError::OpenFiles`]). The session
    /// goes on. Start sessions and runs from it with [`RunConfig::snapshot`].
    pub fn snapshot(&self) -> Result<Snapshot, SnapshotError> {
        let rrx = self.claim_and_send(Cmd::Snapshot, false).map_err(|refused| match refused {
            Refused::Busy => SnapshotError::Busy,
            Refused::Ended(end) => SnapshotError::Ended(end),
        })?;
        let r = rrx.recv().unwrap_or_else(|_| Err(SnapshotError::Ended(SessionEnd::Closed)));
        self.busy.store(false, Ordering::SeqCst);
        r
    }

    /// Ends the session, running the guest's `atexit` handlers under the shutdown
    /// deadline. Returns what shutdown printed, if the guest was alive to run it.
    pub fn close(&self) -> Option<Completed> {
        let closing = self.start_close();
        loop {
            if let Some(done) = closing.wait_timeout(Duration::from_secs(3600)) {
                return done;
            }
        }
    }

    /// Starts closing the session and returns at once; [`Closing::wait_timeout`] waits
    /// for the end in slices (so a caller can look at its signals between them) and
    /// [`Closing::cancel`] cuts the shutdown short.
    pub fn start_close(&self) -> Closing {
        let tx = if self.forked() { None } else { self.tx.lock().take() };
        let (rtx, rrx) = mpsc::sync_channel(1);
        let cancel = CancelToken::new();
        let state = match tx {
            Some(tx) => CloseState::Sending(tx, Some(Cmd::Close(rtx, cancel.clone()))),
            None => CloseState::Done,
        };
        Closing { state: Mutex::new(state), reply: Mutex::new(rrx), cancel }
    }
}

/// A session being closed ([`Session::start_close`]).
pub struct Closing {
    state: Mutex<CloseState>,
    reply: Mutex<Receiver<Option<Completed>>>,
    cancel: CancelToken,
}

enum CloseState {
    /// The close command has yet to reach the session thread (busy with a turn of
    /// another thread, or spinning between turns).
    Sending(SyncSender<Cmd>, Option<Cmd>),
    /// The session thread has it: its answer comes on `reply`.
    Sent,
    /// Nothing to wait for (closed before, ended, forked, or cancelled before sent).
    Done,
}

impl std::fmt::Debug for Closing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Closing").field("cancelled", &self.cancel.is_cancelled()).finish_non_exhaustive()
    }
}

impl Closing {
    /// Waits up to `timeout` for the session to end: `Some(printed)` once it has
    /// (`printed` is what shutdown printed, if the guest was alive to run it), `None`
    /// when the time passed first.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Option<Completed>> {
        let until = Instant::now() + timeout;
        let mut state = self.state.lock();
        while let CloseState::Sending(tx, cmd) = &mut *state {
            if self.cancel.is_cancelled() {
                // Cancelled before the session thread took the command: dropping the
                // sender ends it after its current turn, without shutdown.
                *state = CloseState::Done;
                break;
            }
            let Some(c) = cmd.take() else {
                *state = CloseState::Done;
                break;
            };
            match tx.try_send(c) {
                Ok(()) => *state = CloseState::Sent,
                Err(mpsc::TrySendError::Disconnected(_)) => *state = CloseState::Done,
                Err(mpsc::TrySendError::Full(back)) => {
                    *cmd = Some(back);
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    std::thread::sleep(left.min(Duration::from_millis(1)));
                }
            }
        }
        match *state {
            CloseState::Sent => match self.reply.lock().recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(done) => {
                    *state = CloseState::Done;
                    Some(done)
                }
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => {
                    *state = CloseState::Done;
                    Some(None)
                }
            },
            _ => Some(None),
        }
    }

    /// Cuts the shutdown short: the guest's `atexit` handlers are cancelled, open mount
    /// files get their grace after the cancel, and the session ends.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Dropping the sender ends the session thread without running shutdown.
        self.tx.lock().take();
    }
}

/// The session thread's state.
struct Live {
    guest: Guest,
    /// Dropped after `guest` (fields drop in order): the pool slot outlives the store.
    _slot: engine::Slot,
    opened: Instant,
    /// Closing calls our guest package's `finish` instead of the `shutdown` export.
    finish: bool,
    /// What the guest started from, and the runtime: what a snapshot of it needs.
    taker: Taker,
    /// What it gave back as it rested ([`Session::rest_stats`]).
    rested: Arc<Rested>,
}

/// Closing with our guest package: what finalisation does that a program can observe,
/// without CPython's teardown (hundreds of ms with pandas loaded).
const FINISH: &str = "__import__('_wasi_python_boot').finish()";

impl Live {
    fn open(
        flavoured: &engine::Flavoured,
        artifacts: &Artifacts,
        config: &RunConfig,
        grants: &[(PathBuf, String, bool)],
        taker: Taker,
        rested: Arc<Rested>,
    ) -> Result<Live, Error> {
        let (prepared, slot) = flavoured.pick()?;
        let clock = taker.origin.clock_start();
        let mut guest = Guest::new(prepared, &flavoured.standby.launcher, artifacts, config, grants, &[ARGV0.to_owned()], clock)?;
        guest.instantiate(prepared).map_err(|e| Error::Module(format!("opening the session: {e:#}")))?;
        if let Origin::Snapshot(s) = &taker.origin
            && let Some((pages, patch)) = s.patch()
        {
            guest.patch(pages, patch).map_err(|e| Error::Module(format!("opening the session from a snapshot: {e:#}")))?;
        }
        let code = if taker.origin.restored() {
            // A session snapshot's random state is kept if asked; a preload image's never.
            let session = matches!(taker.origin, Origin::Snapshot(_));
            restore_code(&guest_env(config), config.workdir_path(), !(config.keep_random && session))
        } else {
            setup_code(artifacts.guest_path(), config.workdir_path())
        };
        let mut live = Live { guest, _slot: slot, opened: Instant::now(), finish: artifacts.guest_path().is_some(), taker, rested };
        let setup = Turn {
            code,
            deadline: Some(SETUP_DEADLINE),
            output_bytes: 1 << 16,
            fuel: None,
            cancel: CancelToken::new(),
            display_bytes: config.limits.display_bytes,
            events: None,
        };
        let (done, _) = live.run_turn(&setup);
        if done.exit_code != Some(0) {
            return Err(Error::Internal(format!(
                "the session's setup turn failed: {:?} {}",
                done.trapped,
                String::from_utf8_lossy(&done.stderr)
            )));
        }
        Ok(live)
    }

    /// Serves turns until the session ends. The end is written to `ended` before the
    /// turn that caused it is answered, so the caller sees it at once.
    fn serve(
        &mut self,
        rx: &Receiver<Cmd>,
        limits: &SessionLimits,
        ended: &Mutex<Option<SessionEnd>>,
        listening: &AtomicU8,
        thread: &wasi_python_sched::wake::Pullable,
        policy: &crate::LaunchPolicy,
    ) -> SessionEnd {
        let mut answered = Instant::now();
        let mut spin_for_next = true;
        // Whether the session has rested since its last turn (or its opening's).
        let mut at_rest = false;
        loop {
            let mut wait = limits.idle.unwrap_or(Duration::from_secs(u32::MAX as u64));
            let mut why = SessionEnd::Idle;
            if let Some(life) = limits.lifetime {
                let left = life.saturating_sub(self.opened.elapsed());
                if left <= wait {
                    wait = left;
                    why = SessionEnd::Lifetime;
                }
            }
            // The next turn of a program that runs turns one after another comes within
            // microseconds: catch it without a sleep and wake-up. A turn that came after
            // a pause (an agent's, a person's) was most likely put on its caller's CPU
            // when it woke this thread: spinning then would keep the caller, waiting
            // for its answer, off that CPU (see `wait`), so after such a turn the thread
            // sleeps at once, until turns come one after another again.
            let spun = spin_for_next.then(|| {
                // Beside the last turn's caller (woken on its CPU, sched's wake.rs), the spin
                // yields to it, and its spin to this one.
                let beside = thread.beside_sender();
                listening.store(if beside { BESIDE } else { ALONE }, Ordering::Release);
                let r = wasi_python_sched::wait::try_recv_spinning(rx, policy.next_turn_spin, beside);
                listening.store(ASLEEP, Ordering::Release);
                r
            });
            let next = match spun {
                Some(Ok(cmd)) => Ok(cmd),
                Some(Err(std::sync::mpsc::TryRecvError::Disconnected)) => Err(RecvTimeoutError::Disconnected),
                Some(Err(std::sync::mpsc::TryRecvError::Empty)) | None => self.recv_resting(rx, wait, &mut at_rest),
            };
            thread.woken();
            // A command within the policy's `back_to_back` of the last answer comes back to
            // back: the thread spins for the next one.
            spin_for_next = answered.elapsed() < policy.back_to_back;
            match next {
                Ok(Cmd::Turn(mut turn, reply)) => {
                    if let Some(life) = limits.lifetime {
                        // A turn never outlives the session's lifetime.
                        let left = life.saturating_sub(self.opened.elapsed());
                        turn.deadline = Some(turn.deadline.map_or(left, |d| d.min(left)));
                    }
                    self.guest.begin_turn();
                    at_rest = false;
                    let (done, mut end) = self.run_turn(&turn);
                    // A turn cut short by the session's lifetime ends it for that reason.
                    let lived = limits.lifetime.is_some_and(|l| self.opened.elapsed() >= l);
                    if lived && end == Some(SessionEnd::Trapped(Trapped::Deadline)) {
                        end = Some(SessionEnd::Lifetime);
                    }
                    if let Some(e) = &end {
                        *ended.lock() = Some(e.clone());
                    }
                    let _ = reply.send(Ok(done));
                    answered = Instant::now();
                    if let Some(end) = end {
                        return end;
                    }
                }
                Ok(Cmd::Snapshot(reply)) => {
                    let _ = reply.send(self.snapshot());
                    // What the snapshot leaves to do once answered, before any guest code.
                    if let Some(memory) = self.guest.memory_slice() {
                        self.taker.settle(memory);
                    }
                }
                Ok(Cmd::Close(reply, cancel)) => {
                    let done = self.shutdown(limits.shutdown, &cancel);
                    *ended.lock() = Some(SessionEnd::Closed);
                    let _ = reply.send(Some(done));
                    return SessionEnd::Closed;
                }
                Err(RecvTimeoutError::Timeout) => return why,
                Err(RecvTimeoutError::Disconnected) => return SessionEnd::Closed,
            }
        }
    }

    /// The next command within `wait`; should none come within
    /// [`wasi_python_sched::threads::REST`] and the session has not rested since its
    /// last turn, it rests first ([`Live::rest`]), then waits the rest of `wait`.
    fn recv_resting(&mut self, rx: &Receiver<Cmd>, wait: Duration, at_rest: &mut bool) -> Result<Cmd, RecvTimeoutError> {
        if *at_rest || self.rested.off {
            return rx.recv_timeout(wait);
        }
        wasi_python_sched::threads::recv_resting(rx, wait, wasi_python_sched::threads::REST, || {
            self.rest();
            *at_rest = true;
        })
    }

    /// Gives back what the session holds but does not need between turns: the pages
    /// of the guest's memory it wrote that hold again what the memory was mapped from
    /// (fork.rs `Taker::give_back`, rest.rs), and its thread's stack below where it
    /// stands (sched's stack.rs), which a deep turn left resident.
    fn rest(&mut self) {
        let rested = &self.rested;
        if let Some(memory) = self.guest.memory_slice() {
            rested.guest_pages.fetch_add(self.taker.give_back(memory), Ordering::Relaxed);
        }
        rested.stack_bytes.fetch_add(wasi_python_sched::stack::give_back() as u64, Ordering::Relaxed);
        rested.rests.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs one turn; the second value says why the session ended with it, if it did.
    fn run_turn(&mut self, turn: &Turn) -> (Completed, Option<SessionEnd>) {
        let started = Instant::now();
        let deadline = turn.deadline.and_then(|d| started.checked_add(d));
        let mut asked_exit = false;
        self.guest.stream(turn.display_bytes, turn.events.clone());
        let ending = self.guest.call(
            turn.fuel,
            |g| {
                g.arm(deadline, turn.fuel, turn.output_bytes, &turn.cancel)?;
                g.call_turn(&turn.code)
            },
            |v| match v {
                // 256 + s: exit(s) was called; the session asks to end.
                256..512 => {
                    asked_exit = true;
                    Ok(v - 256)
                }
                0..256 => Ok(v),
                _ => Err(Trapped::Other(format!("the guest refused the turn ({v})"))),
            },
        );
        let end = match (&ending.exit_code, &ending.trapped) {
            // exit(s), or os._exit(n) inside a turn: the instance is gone.
            (Some(code), None) if asked_exit || ending.exited => Some(SessionEnd::Exit(*code)),
            (_, Some(t)) => Some(SessionEnd::Trapped(t.clone())),
            _ => None,
        };
        // Each turn reports its own mount calls; files stay staged while open.
        (self.guest.complete(ending, started, OpenFiles::Keep), end)
    }

    /// The guest between turns, as a [`Snapshot`]; refused while it holds files open.
    fn snapshot(&mut self) -> Result<Snapshot, SnapshotError> {
        let count = self.guest.open_files();
        if count != 0 {
            return Err(SnapshotError::OpenFiles { count });
        }
        let clock = self.guest.clock_ns();
        let Some(memory) = self.guest.memory_slice() else {
            return Err(SnapshotError::Runtime(Error::Internal("the guest has no memory".into())));
        };
        self.taker.take(memory, clock)
    }

    fn shutdown(&mut self, within: Duration, cancel: &CancelToken) -> Completed {
        let started = Instant::now();
        let finish = self.finish;
        let ending = self.guest.call(
            None,
            |g| {
                g.arm(started.checked_add(within), None, 1 << 20, cancel)?;
                if finish { g.call_turn(FINISH) } else { g.call_export("shutdown") }
            },
            |v| Ok(if finish && (256..512).contains(&v) { v - 256 } else { v }),
        );
        self.guest.complete(ending, started, OpenFiles::Flush)
    }
}

impl Drop for Live {
    /// However the session ends (idle, lifetime, a trap, exit), what the guest wrote to
    /// its mounts and did not close reaches them.
    fn drop(&mut self) {
        self.guest.flush_mounts();
        // Before the store resets the memory: the reset finds written pages by the bit
        // the snapshot tracker clears (delta.rs, Tracker).
        self.taker.disarm();
    }
}
