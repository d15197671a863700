//! The guest's standard streams: stdin from bytes the host may set before the program
//! reads them (a guest on standby gets its run's later, standby.rs), and captured
//! stdout/stderr: keep the first N bytes, drop the rest, tell the guest all went well.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use parking_lot::Mutex;
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
}

impl CappedPipe {
    pub(crate) fn new(cap: usize) -> Self {
        CappedPipe {
            inner: Arc::new(Inner {
                cap: AtomicUsize::new(cap),
                buf: Mutex::new(Vec::new()),
                truncated: AtomicBool::new(false),
            }),
        }
    }

    fn push(&self, bytes: &[u8]) {
        let mut buf = self.inner.buf.lock();
        let room = self.inner.cap.load(Ordering::Relaxed).saturating_sub(buf.len());
        if bytes.len() > room {
            self.inner.truncated.store(true, Ordering::Relaxed);
        }
        buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
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
