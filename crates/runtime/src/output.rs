//! The guest's standard streams: stdin from bytes the host may set before the program
//! reads them (a guest on standby gets its run's later, standby.rs), and captured
//! stdout/stderr: keep the first N bytes, drop the rest, tell the guest all went well;
//! and [`Events`], the bounded queue a streaming run's output and displays go through to
//! the caller as the guest writes them.
//!
//! **Invariant:** the guest thread never waits on the caller: a push into a full queue
//! waits for room at most [`STREAM_STALL`] in all per run (or turn), never past the run's
//! deadline or cancel, and what does not fit then is left out of the stream (counted),
//! never out of the capture. Only what the capture keeps is streamed, in the order the
//! guest wrote it.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use crate::CallContext;
use wasmtime_wasi::cli::{IsTerminal, StdinStream, StdoutStream};
use wasmtime_wasi::p2::{InputStream, OutputStream, Pollable, StreamError};

/// Standard input: the bytes left to read, shared by every handle the guest makes,
/// then end of file.
#[derive(Clone, Debug, Default)]
pub(crate) struct InputPipe {
    left: Arc<Mutex<Bytes>>,
}

impl InputPipe {
    pub(crate) fn new(bytes: Vec<u8>) -> Self {
        InputPipe { left: Arc::new(Mutex::new(Bytes::from(bytes))) }
    }

    /// What the guest reads from now on.
    pub(crate) fn set(&self, bytes: Vec<u8>) {
        *self.left.lock() = Bytes::from(bytes);
    }

    fn take(&self, size: usize) -> Bytes {
        let mut left = self.left.lock();
        let size = size.min(left.len());
        left.split_to(size)
    }
}

#[wasmtime_wasi::async_trait]
impl InputStream for InputPipe {
    fn read(&mut self, size: usize) -> Result<Bytes, StreamError> {
        if self.left.lock().is_empty() {
            return Err(StreamError::Closed);
        }
        Ok(self.take(size))
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for InputPipe {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncRead for InputPipe {
    fn poll_read(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        buf.put_slice(&self.take(buf.remaining()));
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for InputPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdinStream for InputPipe {
    fn p2_stream(&self) -> Box<dyn InputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncRead + Send + Sync> {
        Box::new(self.clone())
    }
}

/// A capped in-memory sink. Writes past the cap are accepted and dropped, and the
/// stream is marked truncated; the guest never sees an error, so it neither raises
/// nor retries.
#[derive(Clone, Debug)]
pub(crate) struct CappedPipe {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    cap: AtomicUsize,
    buf: Mutex<Vec<u8>>,
    truncated: AtomicBool,
    /// Which stream this is, for its events.
    stream: Stream,
    /// Where what it keeps is streamed, while a streaming run or turn is in progress.
    events: Mutex<Option<Events>>,
}

impl CappedPipe {
    #[cfg(test)]
    pub(crate) fn new(cap: usize) -> Self {
        Self::of(Stream::Stdout, cap)
    }

    /// A pipe for `stream` (its events say which), keeping at most `cap` bytes.
    pub(crate) fn of(stream: Stream, cap: usize) -> Self {
        CappedPipe {
            inner: Arc::new(Inner {
                cap: AtomicUsize::new(cap),
                buf: Mutex::new(Vec::new()),
                truncated: AtomicBool::new(false),
                stream,
                events: Mutex::new(None),
            }),
        }
    }

    fn push(&self, bytes: &[u8]) {
        let kept = {
            let mut buf = self.inner.buf.lock();
            let room = self.inner.cap.load(Ordering::Relaxed).saturating_sub(buf.len());
            if bytes.len() > room {
                self.inner.truncated.store(true, Ordering::Relaxed);
            }
            let kept = &bytes[..bytes.len().min(room)];
            buf.extend_from_slice(kept);
            kept
        };
        if kept.is_empty() {
            return;
        }
        // Cloned out: the push may wait for room, and `take` must not wait on it.
        let events = self.inner.events.lock().clone();
        if let Some(events) = events {
            events.push_output(self.inner.stream, kept);
        }
    }

    /// Streams what it keeps from now on to `events` (`None`: to nobody).
    pub(crate) fn set_events(&self, events: Option<Events>) {
        *self.inner.events.lock() = events;
    }

    /// Sets the cap for what comes next (a session's turn has its own).
    pub(crate) fn set_cap(&self, cap: usize) {
        self.inner.cap.store(cap, Ordering::Relaxed);
    }

    /// Takes what was captured so far, and whether anything was dropped.
    pub(crate) fn take(&self) -> (Vec<u8>, bool) {
        let buf = std::mem::take(&mut *self.inner.buf.lock());
        (buf, self.inner.truncated.swap(false, Ordering::Relaxed))
    }
}

/// How much one write may hand over at once; the guest loops for more.
const WRITE_PERMIT: usize = 1 << 20;

#[wasmtime_wasi::async_trait]
impl OutputStream for CappedPipe {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.push(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }
    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(WRITE_PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CappedPipe {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for CappedPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for CappedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

/// Which captured stream an output event is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// One thing a streaming run's guest wrote, in the order it wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// Bytes the guest wrote to stdout (consecutive writes the caller has not taken yet
    /// come as one).
    Stdout(Vec<u8>),
    /// Bytes the guest wrote to stderr (likewise).
    Stderr(Vec<u8>),
    /// A display the run kept: its frame's JSON object, checked (see [`crate::Display`]).
    Display(crate::Display),
}

impl Event {
    /// What it counts against [`STREAM_QUEUE_BYTES`]: its bytes and a fixed overhead,
    /// so a flood of empty events is bounded too.
    fn size(&self) -> usize {
        EVENT_OVERHEAD
            + match self {
                Event::Stdout(b) | Event::Stderr(b) => b.len(),
                Event::Display(d) => d.json().len(),
            }
    }
}

/// How many bytes of events a streaming run's queue holds before the guest waits for
/// the caller to take some.
pub const STREAM_QUEUE_BYTES: usize = 1 << 20;
/// How long in all a run's (or a turn's) guest may wait for room in its queue; past it,
/// what does not fit is left out of the stream (counted: [`Events::dropped`]).
pub const STREAM_STALL: Duration = Duration::from_secs(1);
/// Each event's overhead in the queue's count.
const EVENT_OVERHEAD: usize = 64;
/// How often a guest waiting for room looks at its cancel.
const STALL_SLICE: Duration = Duration::from_millis(5);

/// The bounded queue of one streaming run's (or turn's) events: the guest thread pushes
/// (its output pipes and its display frames), the caller takes them. Cheap to clone;
/// the clones are one queue.
///
/// The guest never waits on the caller beyond [`STREAM_STALL`] in all, nor past its
/// run's deadline or cancel; the queue holds at most [`STREAM_QUEUE_BYTES`] (one larger
/// event alone). It ends when the run's guest call ends ([`Events::ended`]), before the
/// run's `Completed` is handed over.
#[derive(Clone, Default)]
pub struct Events {
    inner: Arc<EventsInner>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = self.inner.queue.lock();
        f.debug_struct("Events").field("queued", &q.events.len()).field("ended", &q.ended).field("dropped", &q.dropped).finish()
    }
}

#[derive(Default)]
struct EventsInner {
    queue: Mutex<Queue>,
    /// The guest waits here for room.
    room: Condvar,
    /// The caller waits here for an event or the end.
    ready: Condvar,
    /// Called when the queue gets its first event after being empty, and when it ends.
    wake: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
}

#[derive(Default)]
struct Queue {
    events: VecDeque<Event>,
    bytes: usize,
    ended: bool,
    /// The caller took its leave: nothing more is queued.
    detached: bool,
    /// Events left out of the stream.
    dropped: u64,
    /// How long the guest has waited for room.
    stalled: Duration,
    /// The run's deadline and cancel, which end any wait for room.
    stop: Option<CallContext>,
}

/// What [`Events::next`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Next {
    /// The next event.
    Event(Event),
    /// The queue ended, every event taken.
    Ended,
    /// Nothing within the wait.
    Empty,
}

impl Events {
    pub fn new() -> Events {
        Events::default()
    }

    /// The next event, waiting up to `timeout` for one or for the end.
    pub fn next(&self, timeout: Duration) -> Next {
        let mut q = self.inner.queue.lock();
        if q.events.is_empty() && !q.ended && !timeout.is_zero() {
            let until = Instant::now().checked_add(timeout);
            while q.events.is_empty() && !q.ended {
                match until {
                    Some(until) => {
                        if self.inner.ready.wait_until(&mut q, until).timed_out() {
                            break;
                        }
                    }
                    None => self.inner.ready.wait(&mut q),
                }
            }
        }
        match q.events.pop_front() {
            Some(e) => {
                q.bytes -= e.size();
                self.inner.room.notify_all();
                Next::Event(e)
            }
            None if q.ended => Next::Ended,
            None => Next::Empty,
        }
    }

    /// Waits up to `timeout` for an event or the end; whether either is there.
    pub fn wait(&self, timeout: Duration) -> bool {
        let mut q = self.inner.queue.lock();
        if let Some(until) = Instant::now().checked_add(timeout) {
            while q.events.is_empty() && !q.ended {
                if self.inner.ready.wait_until(&mut q, until).timed_out() {
                    break;
                }
            }
        }
        !q.events.is_empty() || q.ended
    }

    /// Every event queued now, and whether the queue has ended (with them taken, the
    /// stream is over).
    pub fn drain(&self) -> (Vec<Event>, bool) {
        let mut q = self.inner.queue.lock();
        let events: Vec<Event> = q.events.drain(..).collect();
        q.bytes = 0;
        self.inner.room.notify_all();
        (events, q.ended)
    }

    /// Whether the queue has ended (events may still wait in it).
    pub fn ended(&self) -> bool {
        self.inner.queue.lock().ended
    }

    /// Ends the queue (the runtime does when the guest call ends; idempotent): nothing is
    /// queued after.
    pub fn end(&self) {
        {
            let mut q = self.inner.queue.lock();
            if q.ended {
                return;
            }
            q.ended = true;
            self.inner.ready.notify_all();
        }
        self.wake();
    }

    /// The caller takes its leave: what is queued is dropped, nothing more is queued, and
    /// a guest waiting for room goes on.
    pub fn detach(&self) {
        let mut q = self.inner.queue.lock();
        q.detached = true;
        q.events.clear();
        q.bytes = 0;
        self.inner.room.notify_all();
    }

    /// How many events were left out of the stream (the queue full past the stall, or
    /// the caller gone); they are in the run's `Completed` all the same.
    pub fn dropped(&self) -> u64 {
        self.inner.queue.lock().dropped
    }

    /// Calls `wake` (on the guest thread, without the queue's lock) each time the queue
    /// gets an event while empty, and when it ends: for a caller that waits elsewhere (an
    /// event loop's descriptor). It must not wait on anything.
    pub fn on_wake(&self, wake: impl Fn() + Send + Sync + 'static) {
        *self.inner.wake.lock() = Some(Arc::new(wake));
    }

    fn wake(&self) {
        let wake = self.inner.wake.lock().clone();
        if let Some(wake) = wake {
            wake();
        }
    }

    /// The run's deadline and cancel from now on (`Guest::arm`).
    pub(crate) fn arm(&self, stop: CallContext) {
        self.inner.queue.lock().stop = Some(stop);
    }

    /// Queues what an output pipe kept, merged into the last event if that is the same
    /// stream's and not taken yet.
    pub(crate) fn push_output(&self, stream: Stream, bytes: &[u8]) {
        let event = match stream {
            Stream::Stdout => Event::Stdout(bytes.to_vec()),
            Stream::Stderr => Event::Stderr(bytes.to_vec()),
        };
        self.push(event);
    }

    /// Queues a display the run kept.
    pub(crate) fn push_display(&self, display: crate::Display) {
        self.push(Event::Display(display));
    }

    fn push(&self, event: Event) {
        let size = event.size();
        let mut q = self.inner.queue.lock();
        let mut stalled_since: Option<Instant> = None;
        loop {
            if q.ended || q.detached {
                q.dropped += 1;
                return;
            }
            if q.events.is_empty() || q.bytes + size <= STREAM_QUEUE_BYTES {
                break;
            }
            // Full: wait for room, within the stall left and the run's stop.
            let now = Instant::now();
            if let Some(since) = stalled_since.replace(now) {
                q.stalled += now - since;
            }
            let left = STREAM_STALL.saturating_sub(q.stalled);
            let stop = q.stop.clone();
            let stopped = stop.as_ref().is_some_and(|s| s.check().is_some());
            if left.is_zero() || stopped {
                q.dropped += 1;
                return;
            }
            let mut slice = left.min(STALL_SLICE);
            if let Some(d) = stop.as_ref().and_then(|s| s.deadline) {
                slice = slice.min(d.saturating_duration_since(now));
            }
            self.inner.room.wait_for(&mut q, slice);
        }
        if let Some(since) = stalled_since {
            q.stalled += since.elapsed();
        }
        let was_empty = q.events.is_empty();
        match (q.events.back_mut(), event) {
            (Some(Event::Stdout(tail)), Event::Stdout(more)) | (Some(Event::Stderr(tail)), Event::Stderr(more)) => {
                tail.extend_from_slice(&more);
                q.bytes += more.len();
            }
            (_, event) => {
                q.events.push_back(event);
                q.bytes += size;
            }
        }
        self.inner.ready.notify_all();
        drop(q);
        if was_empty {
            self.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CancelToken;

    fn out(b: &[u8]) -> Event {
        Event::Stdout(b.to_vec())
    }

    #[test]
    fn the_pipes_stream_what_they_keep_in_order_merging_a_stream_s_writes() {
        let events = Events::new();
        let (stdout, stderr) = (CappedPipe::of(Stream::Stdout, 8), CappedPipe::of(Stream::Stderr, 8));
        stdout.set_events(Some(events.clone()));
        stderr.set_events(Some(events.clone()));
        stdout.push(b"ab");
        stdout.push(b"cd");
        stderr.push(b"E");
        stdout.push(b"efghij");
        // Past the cap: neither kept nor streamed.
        stdout.push(b"k");
        let (got, ended) = events.drain();
        assert_eq!(got, [out(b"abcd"), Event::Stderr(b"E".to_vec()), out(b"efgh")]);
        assert!(!ended);
        assert_eq!(stdout.take(), (b"abcdefgh".to_vec(), true));
        events.end();
        assert_eq!(events.next(Duration::ZERO), Next::Ended);
        stdout.push(b"");
        assert_eq!(events.dropped(), 0);
    }

    #[test]
    fn next_waits_for_an_event_or_the_end() {
        let events = Events::new();
        assert_eq!(events.next(Duration::from_millis(1)), Next::Empty);
        let pusher = events.clone();
        let t = std::thread::spawn(move || {
            pusher.push_output(Stream::Stdout, b"x");
            pusher.end();
        });
        assert_eq!(events.next(Duration::from_secs(30)), Next::Event(out(b"x")));
        assert_eq!(events.next(Duration::from_secs(30)), Next::Ended);
        t.join().unwrap();
        // Nothing is queued after the end.
        events.push_output(Stream::Stdout, b"y");
        assert_eq!(events.drain(), (vec![], true));
        assert_eq!(events.dropped(), 1);
    }

    #[test]
    fn a_full_queue_waits_for_room_within_the_stall_then_drops_from_the_stream() {
        let events = Events::new();
        events.arm(CallContext { deadline: None, cancel: CancelToken::new() });
        let big = vec![b'x'; STREAM_QUEUE_BYTES / 2];
        // Alternating streams: no merging, so the queue fills.
        events.push_output(Stream::Stdout, &big);
        events.push_output(Stream::Stderr, &big[..STREAM_QUEUE_BYTES / 2 - 2 * EVENT_OVERHEAD]);
        // Nobody takes anything: the push waits out the stall, then leaves it out.
        events.push_output(Stream::Stdout, b"late");
        assert_eq!(events.dropped(), 1);
        // The stall is spent: the next push that does not fit does not wait.
        events.push_output(Stream::Stdout, b"later");
        assert_eq!(events.dropped(), 2);
        // Room again: it fits.
        assert!(matches!(events.next(Duration::ZERO), Next::Event(Event::Stdout(_))));
        events.push_output(Stream::Stdout, b"fits");
        assert_eq!(events.dropped(), 2);
    }

    #[test]
    fn a_full_queue_does_not_hold_the_guest_past_its_cancel_or_its_deadline() {
        for stop in [
            CallContext { deadline: Some(Instant::now()), cancel: CancelToken::new() },
            CallContext { deadline: None, cancel: { let t = CancelToken::new(); t.cancel(); t } },
        ] {
            let events = Events::new();
            events.arm(stop);
            events.push_output(Stream::Stdout, &vec![b'x'; STREAM_QUEUE_BYTES]);
            events.push_output(Stream::Stderr, b"y");
            assert_eq!(events.dropped(), 1);
            // The stall was not spent: the guest did not wait.
            assert!(events.inner.queue.lock().stalled.is_zero());
        }
    }

    #[test]
    fn a_waiting_guest_goes_on_when_the_caller_takes_or_leaves() {
        for leave in [false, true] {
            let events = Events::new();
            events.arm(CallContext { deadline: None, cancel: CancelToken::new() });
            events.push_output(Stream::Stdout, &vec![b'x'; STREAM_QUEUE_BYTES]);
            let pusher = events.clone();
            let t = std::thread::spawn(move || pusher.push_output(Stream::Stderr, b"y"));
            // The caller takes the first event (or leaves), while the guest waits or before.
            if leave {
                events.detach();
            } else {
                assert!(matches!(events.next(Duration::ZERO), Next::Event(Event::Stdout(_))));
            }
            t.join().unwrap();
            if leave {
                assert_eq!((events.drain().0, events.dropped()), (vec![], 1));
            } else {
                assert_eq!((events.drain().0, events.dropped()), (vec![Event::Stderr(b"y".to_vec())], 0));
            }
        }
    }

    #[test]
    fn the_wake_is_called_when_the_queue_gets_an_event_while_empty_and_at_the_end() {
        let events = Events::new();
        let woken = Arc::new(AtomicUsize::new(0));
        let w = woken.clone();
        events.on_wake(move || {
            w.fetch_add(1, Ordering::SeqCst);
        });
        events.push_output(Stream::Stdout, b"a");
        events.push_output(Stream::Stderr, b"b");
        assert_eq!(woken.load(Ordering::SeqCst), 1);
        events.drain();
        events.push_output(Stream::Stdout, b"c");
        events.end();
        events.end();
        assert_eq!(woken.load(Ordering::SeqCst), 3);
    }
}
