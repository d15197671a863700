//! Programs compiled once per preload image: a fresh run of `-c CODE` that an earlier
//! run from the same image compiled gets the code object with its command line, and
//! loads it (`marshal.loads`) instead of compiling (guest boot's `_run_c`). Compiling
//! is the largest step of a short program's run: about 200,000 of the guest's 550,000
//! instructions for `print(1)`. Only a program run before is asked for (its text's hash
//! is kept, [`MAX_SEEN`] of them): offering the code costs the run that offers it (the
//! code marshalled, one more door call), which a program run once would pay for nothing.
//!
//! **Invariant:** a cached code object is what the image's own CPython made of that
//! exact text, before any of the program ran. The host asks for it only in the spec of a
//! run that found none ([`Lookup::Wanted`]) and takes it only as that run's next door
//! frame after the spec ([`OFFER_FRAME`](crate::control::OFFER_FRAME), control.rs): the guest's runner sends that frame
//! (empty when compiling failed or showed a warning, which a cached run would not show)
//! before it runs the program, so nothing a program does can fill the cache, for its own
//! text or another's. Metered runs neither fill nor use it: fuel counts the same for the
//! same program every time.
//!
//! Bounds: texts up to [`MAX_SOURCE`] bytes, code up to [`MAX_CODE`], and per image
//! [`MAX_ENTRIES`] programs and [`MAX_BYTES`] in all; past them the least recently used
//! goes. A map with a use counter, scanned for the oldest when full, rather than an LRU
//! crate: a few hundred entries, and the scan runs only when a new program is added.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// The longest program text kept, in bytes.
pub(crate) const MAX_SOURCE: usize = 64 << 10;
/// The largest code object kept, marshalled.
pub(crate) const MAX_CODE: usize = 1 << 20;
/// Programs kept per image.
pub(crate) const MAX_ENTRIES: usize = 256;
/// Bytes of marshalled code kept per image.
pub(crate) const MAX_BYTES: usize = 16 << 20;
/// Hashes of program texts run once kept per image; past it, the set starts again.
pub(crate) const MAX_SEEN: usize = 4096;

/// One image's compiled programs, by their text.
#[derive(Debug, Default)]
pub(crate) struct Compiled {
    entries: Mutex<Entries>,
}

/// Programs by their text's hash (one pass over a text per run finds both its code and
/// whether it ran before): its text, its code, and when it was last used.
#[derive(Debug, Default)]
struct Entries {
    map: HashMap<u64, Entry>,
    bytes: usize,
    uses: u64,
    /// The texts run once, by hash.
    seen: std::collections::HashSet<u64>,
}

#[derive(Debug)]
struct Entry {
    source: Arc<str>,
    code: Arc<[u8]>,
    used: u64,
}

/// What a run's spec says of its program's code.
#[derive(Debug)]
pub(crate) enum Lookup {
    /// Not a program the cache serves, or not yet run twice: the guest compiles it and
    /// offers nothing.
    Skip,
    /// Compiled before: the marshalled code object.
    Found(Arc<[u8]>),
    /// Run before, not yet kept: the guest compiles it and offers the code (`Offer`,
    /// control.rs).
    Wanted(Offer),
}

/// A run's program text, whose code the host takes from the run's next frame.
#[derive(Debug)]
pub(crate) struct Offer {
    cache: Arc<Compiled>,
    hash: u64,
    source: Arc<str>,
}

impl Offer {
    /// Keeps the code the guest offered for this run's program; nothing if it offered
    /// none or too much.
    pub(crate) fn take(self, code: &[u8]) {
        if !code.is_empty() && code.len() <= MAX_CODE {
            self.cache.put(self.hash, self.source, code);
        }
    }
}

impl Compiled {
    pub(crate) fn new() -> Arc<Compiled> {
        Arc::new(Compiled::default())
    }

    /// How many programs it keeps.
    pub(crate) fn len(&self) -> usize {
        self.entries.lock().map.len()
    }

    /// The code for `source`, or whether to ask the guest for it.
    pub(crate) fn lookup(self: &Arc<Self>, source: &str) -> Lookup {
        if source.len() > MAX_SOURCE {
            return Lookup::Skip;
        }
        let hash = {
            use std::hash::{BuildHasher, BuildHasherDefault};
            BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(source)
        };
        let mut entries = self.entries.lock();
        entries.uses += 1;
        let uses = entries.uses;
        if let Some(entry) = entries.map.get_mut(&hash) {
            // Another text with the same hash is not served (nor kept).
            if &*entry.source != source {
                return Lookup::Skip;
            }
            entry.used = uses;
            return Lookup::Found(entry.code.clone());
        }
        if entries.seen.len() >= MAX_SEEN {
            entries.seen.clear();
        }
        if entries.seen.insert(hash) {
            return Lookup::Skip;
        }
        Lookup::Wanted(Offer { cache: self.clone(), hash, source: source.into() })
    }

    fn put(&self, hash: u64, source: Arc<str>, code: &[u8]) {
        let mut entries = self.entries.lock();
        if entries.map.contains_key(&hash) {
            return;
        }
        while entries.map.len() >= MAX_ENTRIES || entries.bytes + code.len() > MAX_BYTES {
            let Some(oldest) = entries.map.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| *k) else {
                break;
            };
            if let Some(gone) = entries.map.remove(&oldest) {
                entries.bytes -= gone.code.len();
            }
        }
        entries.uses += 1;
        let used = entries.uses;
        entries.bytes += code.len();
        entries.map.insert(hash, Entry { source, code: code.into(), used });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(c: &Arc<Compiled>, source: &str, code: &[u8]) {
        c.lookup(source); // run once
        match c.lookup(source) {
            Lookup::Wanted(offer) => offer.take(code),
            other => panic!("{source}: {other:?}"),
        }
    }

    #[test]
    fn a_program_run_twice_is_asked_for_and_found_after() {
        let c = Compiled::new();
        assert!(matches!(c.lookup("print(1)"), Lookup::Skip), "run once: not asked for");
        match c.lookup("print(1)") {
            Lookup::Wanted(offer) => offer.take(b"code"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(c.lookup("print(1)"), Lookup::Found(code) if &*code == b"code"));
        assert!(matches!(c.lookup("print(2)"), Lookup::Skip));
    }

    #[test]
    fn a_text_whose_hash_another_holds_is_neither_served_nor_kept() {
        let c = Compiled::new();
        let Lookup::Skip = c.lookup("a") else { panic!("run once") };
        let Lookup::Wanted(offer) = c.lookup("a") else { panic!("run twice") };
        // As if "b" had hashed as "a" does and been kept first.
        c.put(offer.hash, "b".into(), b"code of b");
        assert!(matches!(c.lookup("a"), Lookup::Skip));
        offer.take(b"code of a");
        assert!(matches!(c.lookup("a"), Lookup::Skip), "the first text keeps the place");
    }

    #[test]
    fn nothing_or_too_much_offered_keeps_nothing_and_long_texts_are_skipped() {
        let c = Compiled::new();
        offered(&c, "a", b"");
        offered(&c, "b", &vec![0; MAX_CODE + 1]);
        assert!(matches!(c.lookup("a"), Lookup::Wanted(_)));
        assert!(matches!(c.lookup("b"), Lookup::Wanted(_)));
        assert!(matches!(c.lookup(&"x".repeat(MAX_SOURCE + 1)), Lookup::Skip));
    }

    #[test]
    fn past_its_bounds_the_least_recently_used_goes() {
        let c = Compiled::new();
        for i in 0..MAX_ENTRIES {
            offered(&c, &format!("p{i}"), b"c");
        }
        // p0 used again: p1 is now the oldest.
        assert!(matches!(c.lookup("p0"), Lookup::Found(_)));
        offered(&c, "new", b"c");
        assert_eq!(c.entries.lock().map.len(), MAX_ENTRIES);
        assert!(matches!(c.lookup("p0"), Lookup::Found(_)));
        assert!(matches!(c.lookup("p1"), Lookup::Wanted(_)));
        // By bytes: one large program pushes out as many as it needs.
        offered(&c, "large", &vec![0; MAX_CODE]);
        let big = MAX_BYTES / MAX_CODE;
        for i in 0..big {
            offered(&c, &format!("large{i}"), &vec![0; MAX_CODE]);
        }
        let entries = c.entries.lock();
        assert!(entries.bytes <= MAX_BYTES);
        assert_eq!(entries.bytes, entries.map.values().map(|e| e.code.len()).sum::<usize>());
    }
}
