//! What a resting session gives back (session.rs): the pages of its guest's memory that
//! the guest wrote but that hold again what the memory was mapped from.
//!
//! A guest's memory is mapped copy-on-write from what it started from (a preload image,
//! or a session snapshot's layers: delta.rs): the first write to a page gives the guest
//! a private copy, which stays resident for the session's life. Most of the pages a
//! turn writes are written back as they were (CPython's reference counts, raised and
//! lowered again; caches reset), so a fork of a snapshot holds two or three times more
//! private pages than pages that differ from its snapshot (docs/snapshots.md). A page
//! that holds what its file holds can be dropped (`madvise(MADV_DONTNEED)` of a private
//! file mapping): it reads the file's page again, shared with every other fork, and a
//! later write copies it again.
//!
//! **Invariant:** a page is given back only when its bytes equal, at that moment, the
//! bytes of the page the memory maps there (read from the very files the memory is
//! mapped from (delta.rs, `Layout::reader`), a snapshot's layers or a preload image's file as
//! snapshot.rs's `Image` holds it open, never a file opened again by its name), so the
//! guest's memory reads the same before and after, and, once the session has
//! snapshotted, those its last snapshot holds there (its next snapshot takes an unnamed
//! page from it); only between turns, on the session's thread.
//!
//! A pooled slot stays correct: a page given back is the image's again (neither written
//! nor the slot's own), which the pool's reset leaves or copies back from the image
//! (third_party/README.md, the first patch); the short reset copies back the regions the
//! slot owned, which may include it (a copy of the image's bytes over the image's
//! bytes), and a later write to it faults, which sends the reset the full way.
#![allow(unsafe_code, reason = "madvise(MADV_DONTNEED) of pages of the guest's own memory")]

use std::ops::Range;

use wasi_python_image::PAGE;

use crate::delta::Layout;

/// Drops this process's private copy of each page of `memory` among `written` whose
/// bytes equal `origin`'s page there (what the memory is mapped from), and `also`'s
/// if given (the session's last snapshot, which its next takes an unnamed page from);
/// returns how many pages were given back. `memory` is the guest's whole memory, mapped
/// copy-on-write from `origin`'s files (zeros past their end), and no guest code runs
/// meanwhile.
pub(crate) fn give_back_same(memory: &[u8], written: &[Range<u32>], origin: &Layout, also: Option<&Layout>) -> u64 {
    let base = memory.as_ptr() as usize;
    if !base.is_multiple_of(PAGE) || !memory.len().is_multiple_of(PAGE) {
        return 0;
    }
    let pages = (memory.len() / PAGE) as u32;
    let drop_run = |r: &Range<u32>| -> u64 {
        // SAFETY: the pages of `r` lie within `memory` (checked against `pages` below),
        // page-aligned; each holds the same bytes as the page of the file mapped there,
        // which it reads again after the call: the memory `memory` borrows reads the
        // same before and after, and nothing writes it meanwhile (no guest code runs).
        let rc = unsafe { libc::madvise((base + r.start as usize * PAGE) as *mut libc::c_void, r.len() * PAGE, libc::MADV_DONTNEED) };
        if rc == 0 { r.len() as u64 } else { 0 }
    };
    let mut given = 0;
    let mut run: Option<Range<u32>> = None;
    let (mut origin, mut also) = (origin.reader(), also.map(Layout::reader));
    // A page that cannot be read is kept.
    let same = |page: &[u8], r: &mut crate::delta::Reader<'_>, n: u32, until: u32| r.page(n, until).is_ok_and(|p| p == page);
    for (n, until) in written.iter().flat_map(|r| r.clone().map(move |n| (n, r.end))).filter(|&(n, _)| n < pages) {
        let at = n as usize * PAGE;
        let page = &memory[at..at + PAGE];
        if !same(page, &mut origin, n, until) || also.as_mut().is_some_and(|a| !same(page, a, n, until)) {
            continue;
        }
        match &mut run {
            Some(r) if r.end == n => r.end = n + 1,
            _ => {
                if let Some(r) = run.replace(n..n + 1) {
                    given += drop_run(&r);
                }
            }
        }
    }
    if let Some(r) = run {
        given += drop_run(&r);
    }
    given
}
