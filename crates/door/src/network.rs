//! The network through the host: the guest has no sockets, so its requests come through
//! the door as frames the embedder's [`NetworkHost`] answers (docs/network.md).
//!
//! A request frame is [`HTTP_PREFIX`], a JSON head, a NUL, then the body's raw bytes; an
//! answer is a JSON head, a NUL, then the body. The head's fields are the guest package's
//! (`guest/host/http.py`) and the handler's (`wasi_python.network`) business; this
//! module reads none of them. It only makes the answers of its own refusals and ends
//! (`{"error": kind, "message": text}`): no network, a frame over the host's cap, too
//! many earlier requests still running, the deadline, the cancel, a handler that failed.
//!
//! [`NetworkDoor`] wraps the run's other door (tools, a raw door, or none): a frame with
//! the prefix goes to the network, any other to that door, so no request reaches a tool,
//! the tool record or its budget. Without a [`NetworkHost`] every request is refused.
//!
//! **Invariant:** the handler runs on a thread of its own, waited for until
//! [`CallContext::end_of_call`] or the cancel, never longer; a request left running then is
//! abandoned and counted until it ends, and no new one starts while [`MAX_ABANDONED`] run.

use std::sync::{Arc, OnceLock};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::{Abandonment, Bound, CallContext, CancelToken, Door, DoorAnswer, Spawn, StdThreads, Unanswered};

/// What every network request frame starts with: a NUL, which starts no JSON text.
pub const HTTP_PREFIX: &[u8] = b"\0wasi-python http ";

/// Requests abandoned at their deadline or cancel that may still run, process-wide;
/// past it new requests are refused until some end.
pub const MAX_ABANDONED: usize = 8;

/// How long after the handler's own end the door still waits for its answer, so a
/// handler that stops exactly on time is heard (within the deadline).
const ANSWER_GRACE: Duration = Duration::from_millis(10);

static ABANDONED: AtomicUsize = AtomicUsize::new(0);

/// The embedder's network: it makes the guest's requests. Trusted, but the bytes it is
/// given are the guest's and hostile; it enforces its own allow-list and limits.
pub trait NetworkHost: Send + Sync + 'static {
    /// Answers one request (the frame after [`HTTP_PREFIX`]): the answer's bytes, a JSON
    /// head, a NUL, the body. It must end by `until` (the run's deadline less
    /// [`crate::DEADLINE_MARGIN`]; `None`: no deadline) and should stop early once `cancel`
    /// is cancelled; after `until` the door answers the guest without it.
    fn request(&self, request: Vec<u8>, until: Option<Instant>, cancel: &CancelToken) -> Vec<u8>;

    /// The largest request frame handed to [`request`](NetworkHost::request); a larger one
    /// is refused without a copy.
    fn max_request_bytes(&self) -> usize {
        16 << 20
    }

    /// Runs a request thread's whole life (see [`crate::ToolHost::enter_thread`]).
    fn enter_thread(&self, body: Box<dyn FnOnce() + Send + '_>) {
        body()
    }
}

/// The door of a run that may send network requests: requests to `network` (or refused
/// without one), every other frame to `inner`.
pub struct NetworkDoor {
    network: Option<Arc<dyn NetworkHost>>,
    inner: Option<Arc<dyn Door>>,
    /// Whether the last frame was a request, for [`Door::undelivered`].
    last_was_request: AtomicBool,
    /// What starts the request threads: set once ([`NetworkDoor::spawn_with`]), else std
    /// threads.
    spawn: OnceLock<Arc<dyn Spawn>>,
}

impl NetworkDoor {
    pub fn new(network: Option<Arc<dyn NetworkHost>>, inner: Option<Arc<dyn Door>>) -> NetworkDoor {
        NetworkDoor { network, inner, last_was_request: AtomicBool::new(false), spawn: OnceLock::new() }
    }

    /// From now on, request threads are started by `spawn` (a new thread per request, as
    /// the tool door's: [`crate::ToolDoor::spawn_with`]). False when a spawner was given
    /// already (that one stays).
    pub fn spawn_with(&self, spawn: Arc<dyn Spawn>) -> bool {
        self.spawn.set(spawn).is_ok()
    }

    fn request(&self, request: &[u8], ctx: &CallContext) -> Vec<u8> {
        let Some(network) = &self.network else {
            return answer("refused", "this run has no network: its embedder passed no network=");
        };
        let cap = network.max_request_bytes();
        if request.len() > cap {
            return answer("refused", &format!("the request is {} bytes, over the host's cap of {cap}", request.len()));
        }
        match ctx.check() {
            Some(crate::Stop::Cancelled) => return answer("cancelled", "the run was cancelled"),
            Some(crate::Stop::Deadline) => return answer("timeout", "the run's deadline passed"),
            None => {}
        }
        if ABANDONED.load(Ordering::Acquire) >= MAX_ABANDONED {
            return answer("refused", "too many earlier requests are still running on the host");
        }
        let until = ctx.end_of_call(Instant::now(), None);
        let wait_until = match (until, ctx.deadline) {
            (Some(u), Some(d)) => Some((u + ANSWER_GRACE).min(d)),
            (u, _) => u,
        };
        let stopped = || ctx.check().is_some();
        let bound = Bound { until: wait_until, stop: &stopped, spin: Duration::ZERO };
        let frame = request.to_vec();
        let cancel = ctx.cancel.clone();
        let host = network.clone();
        let result = bound.call(
            move || host.request(frame, until, &cancel),
            |job| {
                let network = network.clone();
                let spawn = self.spawn.get().map_or(&StdThreads as &dyn Spawn, |s| &**s);
                spawn.spawn(c"wasi-python-net", Box::new(move || network.enter_thread(job)))
            },
            Requests,
        );
        match result {
            Ok(bytes) => bytes,
            Err(Unanswered::TimedOut) => answer("timeout", "the request did not end before the run's deadline"),
            Err(Unanswered::Cancelled) => match ctx.check() {
                Some(crate::Stop::Deadline) => answer("timeout", "the run's deadline passed during the request"),
                _ => answer("cancelled", "the run was cancelled during the request"),
            },
            Err(Unanswered::NotStarted(e)) => answer("error", &format!("the host could not start the request: {e}")),
            Err(_) => answer("error", "the host's network handler failed"),
        }
    }
}

impl std::fmt::Debug for NetworkDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetworkDoor")
            .field("network", &self.network.is_some())
            .field("inner", &self.inner.is_some())
            .finish_non_exhaustive()
    }
}

impl Door for NetworkDoor {
    fn call(&self, frame: &[u8], ctx: &CallContext) -> DoorAnswer {
        match frame.strip_prefix(HTTP_PREFIX) {
            Some(request) => {
                self.last_was_request.store(true, Ordering::Relaxed);
                DoorAnswer::Reply(self.request(request, ctx))
            }
            None => {
                self.last_was_request.store(false, Ordering::Relaxed);
                match &self.inner {
                    Some(door) => door.call(frame, ctx),
                    None => DoorAnswer::NoHost,
                }
            }
        }
    }

    fn undelivered(&self, fault: &str) {
        if !self.last_was_request.load(Ordering::Relaxed)
            && let Some(door) = &self.inner
        {
            door.undelivered(fault);
        }
    }
}

/// Counts requests abandoned while they run, process-wide.
struct Requests;

impl Abandonment for Requests {
    fn abandon(&self) {
        ABANDONED.fetch_add(1, Ordering::AcqRel);
    }
    fn finished(&self) {
        ABANDONED.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Requests abandoned that still run, process-wide.
pub fn abandoned_requests() -> usize {
    ABANDONED.load(Ordering::Acquire)
}

/// The answer of a request that got no response: its head (`error`: the kind the guest
/// raises by, `message`: why) and an empty body.
pub fn answer(kind: &str, message: &str) -> Vec<u8> {
    let mut out = serde_json::to_vec(&serde_json::json!({"error": kind, "message": message})).unwrap_or_default();
    out.push(0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo(Duration);

    impl NetworkHost for Echo {
        fn request(&self, request: Vec<u8>, _until: Option<Instant>, _cancel: &CancelToken) -> Vec<u8> {
            std::thread::sleep(self.0);
            request
        }
        fn max_request_bytes(&self) -> usize {
            64
        }
    }

    fn ctx(deadline: Option<Duration>) -> CallContext {
        CallContext { deadline: deadline.map(|d| Instant::now() + d), cancel: CancelToken::new() }
    }

    fn head(answer: &DoorAnswer) -> serde_json::Value {
        let DoorAnswer::Reply(bytes) = answer else { panic!("{answer:?}") };
        let end = bytes.iter().position(|&b| b == 0).expect("a NUL after the head");
        serde_json::from_slice(&bytes[..end]).expect("a JSON head")
    }

    fn frame(rest: &[u8]) -> Vec<u8> {
        [HTTP_PREFIX, rest].concat()
    }

    #[test]
    fn requests_reach_the_network_and_other_frames_the_inner_door() {
        let inner: Arc<dyn Door> = Arc::new(|f: &[u8], _: &CallContext| DoorAnswer::Reply([b"tool:", f].concat()));
        let door = NetworkDoor::new(Some(Arc::new(Echo(Duration::ZERO))), Some(inner));
        assert_eq!(door.call(&frame(b"{}\0body"), &ctx(None)), DoorAnswer::Reply(b"{}\0body".to_vec()));
        assert_eq!(door.call(b"{\"v\":1}", &ctx(None)), DoorAnswer::Reply(b"tool:{\"v\":1}".to_vec()));
        // A near miss of the prefix is the inner door's.
        assert_eq!(door.call(b"\0wasi-python http", &ctx(None)), DoorAnswer::Reply(b"tool:\0wasi-python http".to_vec()));
    }

    #[test]
    fn without_a_network_requests_are_refused_and_others_find_no_host() {
        let door = NetworkDoor::new(None, None);
        assert_eq!(head(&door.call(&frame(b"{}\0"), &ctx(None)))["error"], "refused");
        assert_eq!(door.call(b"{}", &ctx(None)), DoorAnswer::NoHost);
    }

    #[test]
    fn a_request_over_the_cap_is_refused_without_a_call() {
        let door = NetworkDoor::new(Some(Arc::new(Echo(Duration::from_secs(60)))), None);
        let big = frame(&[b'x'; 65]);
        assert_eq!(head(&door.call(&big, &ctx(None)))["error"], "refused");
    }

    #[test]
    fn a_slow_request_ends_at_the_deadline_and_at_the_cancel() {
        let door = NetworkDoor::new(Some(Arc::new(Echo(Duration::from_millis(300)))), None);
        assert_eq!(head(&door.call(&frame(b"{}\0"), &ctx(Some(Duration::from_millis(50)))))["error"], "timeout");
        let c = ctx(None);
        let cancel = c.cancel.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            cancel.cancel();
        });
        assert_eq!(head(&door.call(&frame(b"{}\0"), &c))["error"], "cancelled");
        t.join().unwrap();
        // Already past: refused before a thread starts.
        assert_eq!(head(&door.call(&frame(b"{}\0"), &c))["error"], "cancelled");
    }

    #[test]
    fn answers_are_a_json_head_a_nul_and_no_body() {
        let a = answer("refused", "a \"quoted\"\nline");
        assert_eq!(*a.last().unwrap(), 0);
        let v: serde_json::Value = serde_json::from_slice(&a[..a.len() - 1]).unwrap();
        assert_eq!(v["message"], "a \"quoted\"\nline");
    }
}
