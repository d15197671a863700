//! A preload image build's fixed inputs: what its guest reads of the world (clocks,
//! entropy, file metadata, folder order) made the same on every machine and at every
//! time, so the same artifacts and package build the same image, byte for byte
//! (snapshot.rs). A saved session snapshot names its base image by its SHA-256 (fork.rs):
//! once the cache sweep (cached.rs) or a user removes the image, the rebuilt one must be
//! that image, or the saved file no longer loads.
//!
//! An interpreter's memory keeps more of what it read than its objects show: a clock
//! reading or a file's `stat` lands in a buffer, the buffer is freed, and its bytes stay
//! in the padding of whatever is allocated there next. So the build's guest is given
//! nothing that varies, rather than its objects being reset after:
//! - both clocks read one virtual time ([`VirtualTime`]) that starts at 0 (the wall clock
//!   at [`BUILD_WALL_START`]) and moves on [`BUILD_TICK`] at each reading and by each
//!   sleep's length (a sleep returns at once: `poll_oneoff`, host.rs);
//! - `random_get` and the entropy frame (control.rs) read ChaCha12 streams of fixed keys;
//! - `stat` of a host file has its times at [`BUILD_WALL_START`], one link, and an inode
//!   numbered in the order the build first met the file; a folder lists in name order
//!   (its filesystem's order is the host's: ext4 hashes names with a key of its own).
//!
//! **Invariant:** only a store made with [`Inputs::Fixed`] (a preload image's build) reads
//! any of this; every run and session (from an image or not) reads the host's clocks,
//! `getrandom`, and the files' own metadata, and reseeds `random` and `numpy.random` from
//! the host before its program (guest boot's `restore`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use wasi_python_files::Errno;

use crate::guest_mem::GuestMem;
use crate::host::{GUEST_CLOCK_START, GuestClock};

/// What a guest reads as its clocks and entropy: the host's (every run and session, its
/// monotonic clock from `mono_start`: [`GUEST_CLOCK_START`], or a snapshot's reading), or
/// a preload image build's fixed ones (this module's header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inputs {
    Live { mono_start: u64 },
    Fixed,
}

impl From<u64> for Inputs {
    /// A run's or session's: the host's clocks and entropy, its monotonic clock from `mono_start`.
    fn from(mono_start: u64) -> Inputs {
        Inputs::Live { mono_start }
    }
}

/// Where a build's wall clock starts, and every file time its guest reads:
/// 2026-01-01T00:00:00Z.
pub(crate) const BUILD_WALL_START: Duration = Duration::from_secs(1_767_225_600);
/// How far a build's virtual time moves at each clock reading, in ns.
pub(crate) const BUILD_TICK: u64 = 1_000;

impl Inputs {
    /// Sets the clocks and entropy of the guest `b` builds, whose store is made at
    /// `origin`: its monotonic clock's start (`HostState::mono_start`), and the store's
    /// fixed state, if any.
    pub(crate) fn install(self, b: &mut wasmtime_wasi::WasiCtxBuilder, origin: Instant) -> (u64, Option<Box<Fixed>>) {
        match self {
            Inputs::Live { mono_start } => {
                b.monotonic_clock(GuestClock { origin, start: mono_start });
                (mono_start, None)
            }
            Inputs::Fixed => {
                let time = VirtualTime::default();
                b.monotonic_clock(time.clone());
                b.wall_clock(time.clone());
                b.secure_random(stream("random_get"));
                b.insecure_random(stream("insecure random"));
                b.insecure_random_seed(u128::from_le_bytes(*b"wasi-python seed"));
                let entropy = stream("the entropy frame");
                (0, Some(Box::new(Fixed { time, entropy, inodes: HashMap::new() })))
            }
        }
    }
}

/// A build's ChaCha12 stream for `what`, keyed by the SHA-256 of its name.
fn stream(what: &str) -> chacha20::ChaCha12Rng {
    use rand_core::SeedableRng;
    use sha2::Digest;
    let key = sha2::Sha256::digest(format!("wasi-python preload image build: {what}"));
    chacha20::ChaCha12Rng::from_seed(key.into())
}

/// A build's fixed state ([`Inputs::Fixed`]), held by its store (`HostState::fixed`).
pub(crate) struct Fixed {
    pub(crate) time: VirtualTime,
    entropy: chacha20::ChaCha12Rng,
    /// The inode numbers shown, by wasmtime-wasi's own (a hash of the host's device and
    /// inode): 1, 2, ... in the order the build first met each file.
    inodes: HashMap<u64, u64>,
}

impl Fixed {
    /// Fills `out` from the build's entropy-frame stream.
    pub(crate) fn entropy(&mut self, out: &mut [u8]) {
        use rand_core::Rng;
        self.entropy.fill_bytes(out);
    }

    /// The inode number shown for wasmtime-wasi's `ino` (0, stdio's, stays 0).
    fn inode(&mut self, ino: u64) -> u64 {
        if ino == 0 {
            return 0;
        }
        let next = self.inodes.len() as u64 + 1;
        *self.inodes.entry(ino).or_insert(next)
    }

    /// Rewrites the `filestat` wasmtime-wasi wrote at `buf` (answered `errno`): the inode
    /// numbered, one link, every time [`BUILD_WALL_START`], a folder's size 4096 (its
    /// filesystem's: tmpfs counts its entries, and 120 is a cached int where 4096 is an
    /// allocation). Device, type and a file's size stay.
    pub(crate) fn filestat(&mut self, mem: &mut GuestMem<'_>, buf: i32, errno: i32) {
        // filestat: dev u64, ino u64, filetype u8 (+7), nlink u64, size u64, atim, mtim, ctim.
        const LEN: usize = 64;
        if errno != 0 {
            return;
        }
        let Ok(stat) = mem.bytes_mut(buf, LEN) else { return };
        let ino = u64::from_le_bytes(stat[8..16].try_into().expect("8 bytes"));
        let stdio = ino == 0;
        let ino = self.inode(ino);
        stat[8..16].copy_from_slice(&ino.to_le_bytes());
        if !stdio {
            let time = BUILD_WALL_START.as_nanos() as u64;
            stat[24..32].copy_from_slice(&1u64.to_le_bytes());
            if stat[16] == FILETYPE_DIRECTORY {
                stat[32..40].copy_from_slice(&4096u64.to_le_bytes());
            }
            for at in [40, 48, 56] {
                stat[at..at + 8].copy_from_slice(&time.to_le_bytes());
            }
        }
    }

    /// `fd_readdir(buf, buf_len, cookie, bufused)` of a host folder, listed in name order
    /// ("." and ".." first) with inodes numbered: the whole listing is read through
    /// wasmtime-wasi's own call (`call(mem, cookie)`, into the guest's buffer), sorted,
    /// and written from `cookie` on as wasmtime-wasi writes it. A buffer too small for
    /// one entry gets wasmtime-wasi's own answer (the guest asks again with a larger one).
    pub(crate) fn readdir(
        &mut self,
        mem: &mut GuestMem<'_>,
        (buf, buf_len, cookie, bufused): (i32, i32, i64, i32),
        mut call: impl FnMut(&mut GuestMem<'_>, i64) -> wasmtime::Result<i32>,
    ) -> wasmtime::Result<i32> {
        let len = buf_len as u32 as usize;
        let mut entries = Vec::new();
        let mut next = 0i64;
        loop {
            let errno = call(mem, next)?;
            if errno != 0 {
                return Ok(errno);
            }
            let (Ok(used), Ok(_)) = (mem.read_u32(bufused), mem.bytes(buf, len)) else {
                return Ok(Errno::Fault.wasi());
            };
            let used = (used as usize).min(len);
            let before = entries.len();
            let bytes = mem.bytes(buf, used).expect("within the buffer");
            let mut at = 0;
            while let Some(header) = bytes.get(at..at + DIRENT) {
                let d_next = u64::from_le_bytes(header[0..8].try_into().expect("8 bytes"));
                let ino = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
                let namlen = u32::from_le_bytes(header[16..20].try_into().expect("4 bytes")) as usize;
                let Some(name) = bytes.get(at + DIRENT..at + DIRENT + namlen) else { break };
                entries.push((name.to_vec(), header[20], ino));
                next = i64::try_from(d_next).unwrap_or(i64::MAX);
                at += DIRENT + namlen;
            }
            if used < len {
                break;
            }
            if entries.len() == before {
                // Not one whole entry fits: wasmtime-wasi's answer, as it is.
                return call(mem, cookie);
            }
        }
        // "." and ".." come first, as wasmtime-wasi lists them; the rest by name.
        let dots = entries.iter().take(2).filter(|e| e.0 == b"." || e.0 == b"..").count();
        entries[dots..].sort();
        let mut out = Vec::with_capacity(len.min(64 * 1024));
        let skip = usize::try_from(cookie).unwrap_or(usize::MAX);
        for (index, (name, kind, ino)) in entries.iter().enumerate().skip(skip) {
            let mut header = [0u8; DIRENT];
            header[0..8].copy_from_slice(&(index as u64 + 1).to_le_bytes());
            header[8..16].copy_from_slice(&self.inode(*ino).to_le_bytes());
            header[16..20].copy_from_slice(&(name.len() as u32).to_le_bytes());
            header[20] = *kind;
            for part in [&header[..], name] {
                let room = len - out.len();
                out.extend_from_slice(&part[..part.len().min(room)]);
            }
            if out.len() == len {
                break;
            }
        }
        match mem.write(buf, &out).and_then(|()| mem.write_u32(bufused, out.len() as u32)) {
            Ok(()) => Ok(0),
            Err(e) => Ok(e.wasi()),
        }
    }
}

/// Preview 1's `filetype::directory`.
const FILETYPE_DIRECTORY: u8 = 3;

/// A preview 1 `dirent`'s header: `d_next: u64`, `d_ino: u64`, `d_namlen: u32`,
/// `d_type: u8` and 3 bytes of padding; the name follows.
const DIRENT: usize = 24;

/// A build's virtual time in ns, shared by its two clocks and `poll_oneoff`. It stops
/// short of [`GUEST_CLOCK_START`], so readings a build leaves in an image stay behind any
/// run's clock (10 minutes of build could only pass an hour by reading the clock 3.6
/// billion times, which the build's deadline stops first).
#[derive(Clone, Default)]
pub(crate) struct VirtualTime(Arc<AtomicU64>);

impl VirtualTime {
    /// Moves the time on by `ns` and reads it.
    pub(crate) fn advance(&self, ns: u64) -> u64 {
        let step = |t: u64| t.saturating_add(ns).min(GUEST_CLOCK_START - 1);
        let before = self.0.fetch_update(Relaxed, Relaxed, |t| Some(step(t))).unwrap_or_else(|t| t);
        step(before)
    }
}

impl wasmtime_wasi::HostMonotonicClock for VirtualTime {
    fn resolution(&self) -> u64 {
        BUILD_TICK
    }
    fn now(&self) -> u64 {
        self.advance(BUILD_TICK)
    }
}

impl wasmtime_wasi::HostWallClock for VirtualTime {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(BUILD_TICK)
    }
    fn now(&self) -> Duration {
        BUILD_WALL_START + Duration::from_nanos(self.advance(BUILD_TICK))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed() -> Box<Fixed> {
        let mut b = wasmtime_wasi::WasiCtxBuilder::new();
        Inputs::Fixed.install(&mut b, Instant::now()).1.expect("a build's state")
    }

    /// Two builds read the same time and entropy: the same readings in the same order.
    #[test]
    fn a_build_reads_the_same_time_and_entropy_every_time() {
        let (a, b) = (fixed(), fixed());
        let reads = |f: &Fixed| (0..3).map(|_| f.time.advance(BUILD_TICK)).collect::<Vec<_>>();
        assert_eq!(reads(&a), [1_000, 2_000, 3_000]);
        assert_eq!(reads(&b), [1_000, 2_000, 3_000]);
        a.time.advance(5_000_000);
        assert_eq!(a.time.advance(0), 5_003_000, "a sleep moves the time on by its length");
        let (mut a, mut b) = (fixed(), fixed());
        let (mut x, mut y) = ([0u8; 64], [0u8; 64]);
        a.entropy(&mut x);
        b.entropy(&mut y);
        assert_eq!(x, y);
        assert_ne!(x, [0u8; 64]);
        a.entropy(&mut y);
        assert_ne!(x, y, "the stream goes on");
    }

    /// The virtual time never reaches a run's clock start, whatever a build does.
    #[test]
    fn the_virtual_time_stays_behind_every_run() {
        let f = fixed();
        f.time.advance(u64::MAX);
        assert_eq!(f.time.advance(BUILD_TICK), GUEST_CLOCK_START - 1);
        assert_eq!(f.time.advance(u64::MAX), GUEST_CLOCK_START - 1);
    }

    /// A file's times, links and inode are the build's, whatever the host's were; the
    /// same file keeps its number; type and size stay.
    #[test]
    fn a_stat_shows_fixed_times_links_and_numbered_inodes() {
        let mut f = fixed();
        let stat = |ino: u64, nlink: u64, t: u64| {
            let mut s = vec![0u8; 64];
            s[0..8].copy_from_slice(&1u64.to_le_bytes());
            s[8..16].copy_from_slice(&ino.to_le_bytes());
            s[16] = 4;
            s[24..32].copy_from_slice(&nlink.to_le_bytes());
            s[32..40].copy_from_slice(&1234u64.to_le_bytes());
            for at in [40, 48, 56] {
                s[at..at + 8].copy_from_slice(&t.to_le_bytes());
            }
            s
        };
        let shown = |f: &mut Fixed, mut s: Vec<u8>| {
            f.filestat(&mut GuestMem::new(&mut s), 0, 0);
            s
        };
        let a = shown(&mut f, stat(0xdead_beef_0000_0001, 3, 1_796_540_005_036_873_841));
        let b = shown(&mut f, stat(0x1234, 1, 42));
        let mut folder = stat(0x99, 2, 5);
        folder[16] = FILETYPE_DIRECTORY;
        folder[32..40].copy_from_slice(&120u64.to_le_bytes());
        let folder = shown(&mut f, folder);
        let a_again = shown(&mut f, stat(0xdead_beef_0000_0001, 1, 7));
        let mut g = fixed();
        // Another machine: other inodes and times, met in the same order.
        let a_there = shown(&mut g, stat(77, 1, 9));
        assert_eq!(a, a_again);
        assert_eq!(a, a_there);
        assert_eq!(a, stat(1, 1, BUILD_WALL_START.as_nanos() as u64));
        assert_eq!(b, stat(2, 1, BUILD_WALL_START.as_nanos() as u64));
        let mut want = stat(3, 1, BUILD_WALL_START.as_nanos() as u64);
        want[16] = FILETYPE_DIRECTORY;
        want[32..40].copy_from_slice(&4096u64.to_le_bytes());
        assert_eq!(folder, want, "a folder's size is the build's");
        let mut failed = stat(5, 3, 9);
        f.filestat(&mut GuestMem::new(&mut failed), 0, Errno::Badf.wasi());
        assert_eq!(failed, stat(5, 3, 9), "a failed call's buffer is left alone");
    }

    /// wasmtime-wasi's encoding of `entries` from `cookie` into `buf_len` bytes (as
    /// crates/files' dirent tests transliterate it), for the fake call below.
    fn encode(entries: &[(&str, u8, u64)], cookie: usize, buf_len: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, (name, kind, ino)) in entries.iter().enumerate().skip(cookie) {
            let mut h = [0u8; DIRENT];
            h[0..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
            h[8..16].copy_from_slice(&ino.to_le_bytes());
            h[16..20].copy_from_slice(&(name.len() as u32).to_le_bytes());
            h[20] = *kind;
            for part in [&h[..], name.as_bytes()] {
                let room = buf_len - out.len();
                out.extend_from_slice(&part[..part.len().min(room)]);
            }
            if out.len() == buf_len {
                break;
            }
        }
        out
    }

    /// Reads a whole folder through `readdir` with a buffer of `buf_len`, as wasi-libc
    /// does: from the cookie after the last whole entry until a call leaves room.
    fn list(f: &mut Fixed, host: &[(&str, u8, u64)], buf_len: usize) -> Vec<(String, u64)> {
        let mut memory = vec![0u8; buf_len + 8];
        let (buf, bufused) = (8, 0);
        let mut listed = Vec::new();
        let mut cookie = 0i64;
        for _ in 0..100 {
            let mut mem = GuestMem::new(&mut memory);
            let call = |mem: &mut GuestMem<'_>, c: i64| {
                let bytes = encode(host, c as usize, buf_len);
                mem.write(buf, &bytes).unwrap();
                mem.write_u32(bufused, bytes.len() as u32).unwrap();
                Ok(0)
            };
            assert_eq!(f.readdir(&mut mem, (buf, buf_len as i32, cookie, bufused), call).unwrap(), 0);
            let used = mem.read_u32(bufused).unwrap() as usize;
            let bytes = mem.bytes(buf, used).unwrap().to_vec();
            let mut at = 0;
            while at + DIRENT <= bytes.len() {
                let namlen = u32::from_le_bytes(bytes[at + 16..at + 20].try_into().unwrap()) as usize;
                let Some(name) = bytes.get(at + DIRENT..at + DIRENT + namlen) else { break };
                listed.push((String::from_utf8(name.to_vec()).unwrap(), u64::from_le_bytes(bytes[at + 8..at + 16].try_into().unwrap())));
                cookie = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as i64;
                at += DIRENT + namlen;
            }
            if used < buf_len {
                return listed;
            }
        }
        panic!("the listing never ended");
    }

    /// A folder lists in name order with numbered inodes, whatever order and inodes the
    /// host's filesystem gives, and whatever the guest's buffer size.
    #[test]
    fn a_folder_lists_in_name_order_whatever_the_host_order() {
        let here = [(".", 3, 50), ("..", 3, 60), ("b.py", 4, 10), ("a.ttf", 4, 20), ("zz", 3, 30), ("m", 7, 40)];
        let there = [(".", 3, 5), ("..", 3, 6), ("zz", 3, 3), ("m", 7, 4), ("a.ttf", 4, 2), ("b.py", 4, 1)];
        let want = ["." , "..", "a.ttf", "b.py", "m", "zz"];
        for buf_len in [30, 40, 64, 4096] {
            let (a, b) = (list(&mut fixed(), &here, buf_len), list(&mut fixed(), &there, buf_len));
            assert_eq!(a.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(), want, "buffer {buf_len}");
            assert_eq!(a, b, "buffer {buf_len}");
        }
    }
}
