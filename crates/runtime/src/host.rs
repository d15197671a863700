//! The store's state and the host functions the guest imports beyond WASI:
//! `host.call` (the control channel's frames, control.rs, then the tool door) and our own
//! `poll_oneoff` (sleeps that respect the deadline).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use wasmtime::{AsContextMut, Caller, Linker, Memory, ResourceLimiter, StoreLimits, TypedFunc};
use wasmtime_wasi::p1::WasiP1Ctx;

use crate::door::{Door, DoorAnswer};
use crate::CallContext;
use crate::guest_mem::span;
use wasi_python_files::Errno;

/// Everything a guest's store holds. Each concern is reached through its own field.
pub(crate) struct HostState {
    pub(crate) wasi: WasiP1Ctx,
    pub(crate) limits: GuestLimits,
    pub(crate) stop: CallContext,
    pub(crate) door: Option<Arc<dyn Door>>,
    /// What the guest has written to files and holds open (quota.rs); with `mounts`, the
    /// file layer's state, which file calls reach through its accessor (`add_to_linker`).
    pub(crate) files: crate::files::FileState,
    /// The run's mounts, if it has any (mounts/mod.rs).
    pub(crate) mounts: Option<Box<crate::mounts::MountTable>>,
    /// Set right after instantiation.
    pub(crate) memory: Option<Memory>,
    pub(crate) alloc: Option<TypedFunc<i32, i32>>,
    /// The guest's monotonic clock: `mono_start` nanoseconds at `mono_origin`
    /// ([`GuestClock`], which wasmtime-wasi's clock calls use too).
    pub(crate) mono_origin: Instant,
    pub(crate) mono_start: u64,
    /// The control channel's state while the guest is launched (on standby, or a fresh
    /// run's command line and compiled-program offer): empty for any other store.
    pub(crate) control: crate::control::ControlState,
    /// The displays the guest showed during the call in progress, and where they stream
    /// (display.rs); its display frames reach it through the control channel.
    pub(crate) displays: crate::display::DisplayState,
    /// A preload image's build: what it reads of clocks, entropy and files is fixed
    /// (fixed.rs); `None` for every run and session.
    pub(crate) fixed: Option<Box<crate::fixed::Fixed>>,
}

/// The guest's monotonic clock. A run's starts at [`GUEST_CLOCK_START`]; a snapshot
/// build reads a virtual time from 0 instead, which stops short of it (fixed.rs):
/// monotonic readings a module kept at import, in a snapshot, are then always behind
/// the run's clock, as they would be in a run that imported it itself.
pub(crate) struct GuestClock {
    pub(crate) origin: Instant,
    pub(crate) start: u64,
}

/// Where a run's monotonic clock starts: past any snapshot build's clock (fixed.rs).
pub(crate) const GUEST_CLOCK_START: u64 = 3_600 * 1_000_000_000;

impl wasmtime_wasi::HostMonotonicClock for GuestClock {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        // A loaded snapshot's clock is bounded (`wasi_python_image::MAX_CLOCK_NS`); this
        // saturates anyway, so no start can wrap the clock backwards or panic the host.
        clock_at(self.start, self.origin)
    }
}

/// The guest's monotonic clock: `start` ns at `origin`, saturating.
fn clock_at(start: u64, origin: Instant) -> u64 {
    let elapsed = u64::try_from(Instant::now().duration_since(origin).as_nanos()).unwrap_or(u64::MAX);
    start.saturating_add(elapsed)
}

/// The guest asked for more initial memory than its memory limit: it cannot start.
#[derive(Debug, thiserror::Error)]
#[error("the guest's initial memory ({desired} bytes) exceeds the memory limit")]
pub(crate) struct InitialMemoryTooLarge {
    pub(crate) desired: usize,
}

/// The store's limits ([`StoreLimits`]), except that an initial memory over the limit
/// fails with a typed error ([`InitialMemoryTooLarge`]) rather than wasmtime's text,
/// so the run's outcome is named by kind. A later growth over the limit is refused
/// (`memory.grow` answers -1: CPython raises MemoryError).
pub(crate) struct GuestLimits(pub(crate) StoreLimits);

impl GuestLimits {
    /// One instance with one memory of at most `memory_bytes` and one table.
    pub(crate) fn new(memory_bytes: u64) -> GuestLimits {
        GuestLimits(
            wasmtime::StoreLimitsBuilder::new()
                .memory_size(usize::try_from(memory_bytes).unwrap_or(usize::MAX))
                .instances(1)
                .memories(1)
                .tables(1)
                .build(),
        )
    }
}

impl ResourceLimiter for GuestLimits {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = self.0.memory_growing(current, desired, maximum)?;
        if !allowed && current == 0 {
            return Err(wasmtime::Error::new(InitialMemoryTooLarge { desired }));
        }
        Ok(allowed)
    }
    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.0.memory_grow_failed(error)
    }
    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.0.table_growing(current, desired, maximum)
    }
    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.0.table_grow_failed(error)
    }
    fn instances(&self) -> usize {
        self.0.instances()
    }
    fn tables(&self) -> usize {
        self.0.tables()
    }
    fn memories(&self) -> usize {
        self.0.memories()
    }
}

pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p1::add_to_linker_sync(linker, |s: &mut HostState| &mut s.wasi)?;
    linker.allow_shadowing(true);
    linker.func_wrap("wasi_snapshot_preview1", "poll_oneoff", poll_oneoff)?;
    // The file layer: what the guest's file calls may reach of the store.
    crate::files::add_to_linker(linker, |s: &mut HostState| crate::files::Files {
        memory: s.memory,
        wasi: &mut s.wasi,
        quota: &mut s.files,
        mounts: s.mounts.as_deref_mut(),
        stop: &s.stop,
        fixed: s.fixed.as_deref_mut(),
    })?;
    // wasmtime-wasi refuses exit statuses of 126 and above (a shell convention);
    // CPython's `os._exit(200)` is a plain exit, so every status ends the run as one.
    linker.func_wrap(
        "wasi_snapshot_preview1",
        "proc_exit",
        |status: i32| -> wasmtime::Result<()> { Err(wasmtime::Error::new(wasmtime_wasi::I32Exit(status))) },
    )?;
    linker.allow_shadowing(false);
    linker.func_wrap("host", "call", door_call)?;
    Ok(())
}

const DOOR_NO_HOST: i32 = -1;
pub(crate) const DOOR_FAULT: i32 = -2;

/// `host.call(ptr, len, out_ptr_ptr, out_len_ptr) -> i32`: one frame, answered by the
/// control channel if it is one of its frames (control.rs), else through the tool door.
fn door_call(
    mut caller: Caller<'_, HostState>,
    ptr: i32,
    len: i32,
    out_ptr_ptr: i32,
    out_len_ptr: i32,
) -> wasmtime::Result<i32> {
    if let Some(answered) = crate::control::answer(&mut caller, ptr, len, out_ptr_ptr, out_len_ptr) {
        return answered;
    }
    let (Some(door), Some(memory), Some(alloc)) = (
        caller.data().door.clone(),
        caller.data().memory,
        caller.data().alloc.clone(),
    ) else {
        return Ok(DOOR_NO_HOST);
    };
    let ctx = caller.data().stop.clone();
    let answer = {
        let data = memory.data(&caller);
        let (Some(req), Some(_), Some(_)) = (
            span(ptr, len as u32 as usize, data.len()),
            span(out_ptr_ptr, 4, data.len()),
            span(out_len_ptr, 4, data.len()),
        ) else {
            return Ok(DOOR_FAULT);
        };
        door.call(&data[req], &ctx)
    };
    // Cancelled or out of time while the door worked (a tool answered "cancelled"): the
    // guest stops at its next epoch check, not at the ticker's next tick, by which time a
    // guest that handles the error may have ended the run by itself.
    if ctx.check().is_some() {
        caller.as_context_mut().set_epoch_deadline(0);
    }
    let bytes = match answer {
        DoorAnswer::Reply(bytes) => bytes,
        DoorAnswer::NoHost => return Ok(DOOR_NO_HOST),
        DoorAnswer::Fault => return Ok(DOOR_FAULT),
        // An answer this runtime does not know (the door's enum is non-exhaustive).
        _ => return Ok(DOOR_FAULT),
    };
    // From here a failure means the guest never gets the reply: the door's record says so.
    match deliver(&mut caller, memory, &alloc, &bytes, out_ptr_ptr, out_len_ptr) {
        Ok(Ok(())) => Ok(0),
        Ok(Err(why)) => {
            door.undelivered(&why);
            Ok(DOOR_FAULT)
        }
        Err(trap) => {
            door.undelivered(&format!("the guest trapped allocating {} bytes for the answer", bytes.len()));
            Err(trap)
        }
    }
}

/// Writes `bytes` into memory from the guest's allocator and their place and length at
/// `out_ptr_ptr` and `out_len_ptr`. `Ok(Err(why))`: the guest never got them; `Err`:
/// the guest trapped in its allocator.
pub(crate) fn deliver(
    caller: &mut Caller<'_, HostState>,
    memory: Memory,
    alloc: &TypedFunc<i32, i32>,
    bytes: &[u8],
    out_ptr_ptr: i32,
    out_len_ptr: i32,
) -> wasmtime::Result<Result<(), String>> {
    let Ok(n) = i32::try_from(bytes.len()) else {
        return Ok(Err(format!("a {}-byte answer is over 2 GiB", bytes.len())));
    };
    // The guest frees `*out_ptr` after every call, so it must come from its own allocator.
    let p = alloc.call(&mut *caller, n)?;
    if p == 0 {
        return Ok(Err(format!("the guest had no memory for a {n}-byte answer")));
    }
    let data = memory.data_mut(&mut *caller);
    let (Some(dst), Some(o1), Some(o2)) = (
        span(p, bytes.len(), data.len()),
        span(out_ptr_ptr, 4, data.len()),
        span(out_len_ptr, 4, data.len()),
    ) else {
        return Ok(Err(format!("the guest's allocator gave {p:#x}, outside its memory, for the answer")));
    };
    data[dst].copy_from_slice(bytes);
    data[o1].copy_from_slice(&(p as u32).to_le_bytes());
    data[o2].copy_from_slice(&(n as u32).to_le_bytes());
    Ok(Ok(()))
}

// The WASI errno values used here, from the one table.
const ERRNO_SUCCESS: i32 = 0;
const ERRNO_BADF: u16 = Errno::Badf as u16;
const ERRNO_FAULT: i32 = Errno::Fault as i32;
const ERRNO_INVAL: i32 = Errno::Inval as i32;
const ERRNO_NOMEM: i32 = Errno::Nomem as i32;

const SUB_SIZE: usize = 48;
const EVENT_SIZE: usize = 32;
const MAX_SUBS: u32 = 4096;
const SLICE: Duration = Duration::from_millis(5);

/// `poll_oneoff(in, out, nsubs, nevents_ptr) -> errno`, shadowing wasmtime-wasi's.
///
/// Wasmtime's blocks the thread for a whole sleep, out of reach of the epoch
/// deadline; this one sleeps in short slices and returns early once the run must
/// stop, so the guest traps at its next epoch check instead of sleeping on.
/// File-descriptor subscriptions are answered ready at once (stdin, stdout and
/// stderr in their own direction; any other descriptor gets EBADF).
fn poll_oneoff(
    mut caller: Caller<'_, HostState>,
    in_ptr: i32,
    out_ptr: i32,
    nsubs: i32,
    nevents_ptr: i32,
) -> wasmtime::Result<i32> {
    let nsubs = nsubs as u32;
    if nsubs == 0 {
        return Ok(ERRNO_INVAL);
    }
    if nsubs > MAX_SUBS {
        return Ok(ERRNO_NOMEM);
    }
    let Some(memory) = caller.data().memory else {
        return Ok(ERRNO_FAULT);
    };
    let n = nsubs as usize;
    let subs: Vec<u8> = {
        let data = memory.data(&caller);
        let (Some(inp), Some(_), Some(_)) = (
            span(in_ptr, n * SUB_SIZE, data.len()),
            span(out_ptr, n * EVENT_SIZE, data.len()),
            span(nevents_ptr, 4, data.len()),
        ) else {
            return Ok(ERRNO_FAULT);
        };
        data[inp].to_vec()
    };
    let (mono_origin, mono_start) = (caller.data().mono_origin, caller.data().mono_start);
    // A build's clocks are its virtual time, which a sleep moves on instead of waiting.
    let virtual_time = caller.data().fixed.as_ref().map(|f| f.time.clone());
    let now_mono = || match &virtual_time {
        Some(t) => t.advance(0),
        None => clock_at(mono_start, mono_origin),
    };
    let now_real = || match &virtual_time {
        Some(t) => (crate::fixed::BUILD_WALL_START.as_nanos() as u64).saturating_add(t.advance(0)),
        None => SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    };

    // Each event: (userdata, errno, type).
    let mut events: Vec<(u64, u16, u8)> = Vec::new();
    // Each clock: (userdata, due as an Instant, the wait in ns).
    let mut clocks: Vec<(u64, Instant, u64)> = Vec::new();
    let start = Instant::now();
    for sub in subs.chunks_exact(SUB_SIZE) {
        let userdata = u64::from_le_bytes(sub[0..8].try_into().unwrap());
        let tag = sub[8];
        match tag {
            0 => {
                let clock_id = u32::from_le_bytes(sub[16..20].try_into().unwrap());
                let timeout = u64::from_le_bytes(sub[24..32].try_into().unwrap());
                let flags = u16::from_le_bytes(sub[40..42].try_into().unwrap());
                let abstime = flags & 1 == 1;
                let wait_ns = match (clock_id, abstime) {
                    (0 | 1, false) => timeout,
                    (0, true) => timeout.saturating_sub(now_real()),
                    (1, true) => timeout.saturating_sub(now_mono()),
                    _ => return Ok(ERRNO_INVAL),
                };
                let due = start
                    .checked_add(Duration::from_nanos(wait_ns))
                    .unwrap_or(start + Duration::from_secs(1 << 40));
                clocks.push((userdata, due, wait_ns));
            }
            1 | 2 => {
                let fd = u32::from_le_bytes(sub[16..20].try_into().unwrap());
                let ok = matches!((fd, tag), (0, 1) | (1, 2) | (2, 2));
                events.push((userdata, if ok { 0 } else { ERRNO_BADF }, tag));
            }
            _ => return Ok(ERRNO_INVAL),
        }
    }
    if events.is_empty()
        && let Some(time) = &virtual_time
    {
        // A build's sleep: its virtual time moves on by the shortest wait, now.
        let least = clocks.iter().map(|c| c.2).min().expect("nsubs > 0");
        time.advance(least);
        events.extend(clocks.iter().filter(|c| c.2 <= least).map(|c| (c.0, 0, 0)));
    }
    if events.is_empty() {
        let first_due = clocks.iter().map(|c| c.1).min().expect("nsubs > 0");
        let stop = caller.data().stop.clone();
        loop {
            if stop.check().is_some() {
                // Return early with no event; the next epoch check traps the guest.
                caller.as_context_mut().set_epoch_deadline(0);
                break;
            }
            let now = Instant::now();
            if now >= first_due {
                break;
            }
            stop.cancel.wait_timeout((first_due - now).min(SLICE));
        }
        let now = Instant::now();
        for (userdata, due, _) in clocks {
            if now >= due {
                events.push((userdata, 0, 0));
            }
        }
    }
    let data = memory.data_mut(&mut caller);
    let base = out_ptr as u32 as usize;
    for (i, (userdata, errno, ty)) in events.iter().enumerate() {
        let e = &mut data[base + i * EVENT_SIZE..base + (i + 1) * EVENT_SIZE];
        e.fill(0);
        e[0..8].copy_from_slice(&userdata.to_le_bytes());
        e[8..10].copy_from_slice(&errno.to_le_bytes());
        e[10] = *ty;
    }
    let np = nevents_ptr as u32 as usize;
    data[np..np + 4].copy_from_slice(&(events.len() as u32).to_le_bytes());
    Ok(ERRNO_SUCCESS)
}
