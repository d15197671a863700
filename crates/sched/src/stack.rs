//! A resting thread's stack given back below where it stands.
//!
//! The runtime's guest and session threads run the guest on their native stacks (24 MiB
//! each, for wasm's 8 MiB and the host's frames): a deep turn or run touches megabytes of
//! it, which stay resident for the thread's life, though only the top few kilobytes are
//! used while it waits. [`give_back`], called by such a thread as it rests, drops the
//! pages below its own frame (`madvise(MADV_DONTNEED)`: the next use faults in zero
//! pages, as a new thread's stack does) and says how many were resident.
#![allow(
    unsafe_code,
    reason = "the calling thread's own stack bounds (pthread_getattr_np) and madvise of the \
              part below its frame: each unsafe block says what it relies on"
)]

/// Bytes kept below the caller's frame: room for what it calls meanwhile (the madvise
/// and mincore calls, a signal handler) without a fault.
const KEEP: usize = 64 << 10;
const PAGE: usize = 4096;

/// The calling thread's stack: its lowest usable address and its size (the guard
/// excluded), from pthread. `None` if pthread cannot say.
fn bounds() -> Option<(usize, usize)> {
    // SAFETY: an attribute object initialised by pthread_getattr_np for the calling
    // thread, read by pthread_attr_getstack, then destroyed; nothing else holds it.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let got = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        (got == 0 && !addr.is_null()).then_some((addr as usize, size))
    }
}

/// The pages of `[low, high)` (page-aligned) that are resident.
fn resident(low: usize, high: usize) -> usize {
    let pages = (high - low) / PAGE;
    let mut vec = vec![0u8; pages];
    // SAFETY: `[low, high)` lies within the calling thread's stack mapping (checked by
    // the caller), `vec` has a byte per page of it.
    let rc = unsafe { libc::mincore(low as *mut libc::c_void, high - low, vec.as_mut_ptr()) };
    if rc != 0 {
        return 0;
    }
    vec.iter().filter(|&&b| b & 1 != 0).count()
}

/// Gives back the calling thread's stack pages below its frame (all but [`KEEP`] bytes
/// under it), and returns how many bytes of them were resident. Nothing happens
/// where pthread cannot name the stack, or the frame is not within it (the main
/// thread's stack grows on demand and is left alone).
#[inline(never)]
pub fn give_back() -> usize {
    let Some((low, size)) = bounds() else { return 0 };
    let here = 0u8;
    let frame = std::ptr::addr_of!(here) as usize;
    let high = frame.saturating_sub(KEEP) & !(PAGE - 1);
    let low = low.next_multiple_of(PAGE);
    if frame < low || frame >= low + size || high <= low {
        return 0;
    }
    let had = resident(low, high);
    if had == 0 {
        return 0;
    }
    // SAFETY: `[low, high)` is the part of the calling thread's own stack more than
    // KEEP bytes below this frame: no live frame of this thread is there (the stack grows
    // down from above this frame), and no other thread uses a thread's stack. Dropped
    // anonymous pages read as zeros at the next touch, as an untouched stack does.
    let rc = unsafe { libc::madvise(low as *mut libc::c_void, high - low, libc::MADV_DONTNEED) };
    if rc != 0 {
        return 0;
    }
    had * PAGE
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Touches about `bytes` of the stack below this frame.
    #[inline(never)]
    fn deep(bytes: usize) -> u64 {
        let mut block = [0u8; 16 << 10];
        for (i, b) in block.iter_mut().enumerate() {
            *b = i as u8;
        }
        let below = if bytes > block.len() { deep(bytes - block.len()) } else { 0 };
        std::hint::black_box(&mut block);
        below + u64::from(block[7])
    }

    #[test]
    fn a_thread_gives_back_what_a_deep_call_touched_and_runs_on() {
        let t = std::thread::Builder::new()
            .stack_size(16 << 20)
            .spawn(|| {
                std::hint::black_box(deep(4 << 20));
                let first = give_back();
                // The stack still works: a deep call again, and its pages come back to
                // be given back again.
                std::hint::black_box(deep(2 << 20));
                let second = give_back();
                let third = give_back();
                (first, second, third)
            })
            .unwrap();
        let (first, second, third) = t.join().unwrap();
        assert!(first >= 3 << 20, "gave back {first} bytes after touching 4 MiB");
        assert!(second >= 1 << 20, "gave back {second} bytes after touching 2 MiB");
        assert!(third < 64 << 10, "nothing much left to give: {third}");
    }

    #[test]
    fn the_main_thread_or_an_unknown_stack_gives_nothing_back_by_mistake() {
        // Whatever thread runs a test: the call never fails, and a second call finds
        // at most what the first one's own calls touched since.
        let _ = give_back();
        assert!(give_back() < 64 << 10);
    }
}
