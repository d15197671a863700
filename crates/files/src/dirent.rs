//! The bytes `fd_readdir` writes for a mount's folder, encoded exactly as wasmtime-wasi's
//! own `fd_readdir` encodes a host folder (wasmtime-wasi 48.0.8, src/p1.rs), so that
//! wasi-libc's `readdir` sees the same thing whichever kind of folder it reads.

use crate::provider::FileKind;

/// A preview 1 `dirent`'s size: `d_next: u64`, `d_ino: u64`, `d_namlen: u32`,
/// `d_type: u8` and 3 bytes of padding, little-endian; the name follows it.
const HEADER: usize = 24;

/// One entry of a folder listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub kind: FileKind,
    pub ino: u64,
}

/// The bytes `fd_readdir(buf_len, cookie)` writes for `entries` (the caller includes "." and
/// ".."): entries from index `cookie` on, each header+name, until `buf_len` bytes; the last
/// one cut to fit, as wasmtime-wasi does. The result is at most `buf_len` long.
///
/// An entry's `d_next` is its index + 1, the cookie that resumes after it. A full buffer
/// makes wasi-libc call again, with a larger one if an entry did not fit.
pub fn encode_dirents(entries: &[DirEntry], cookie: u64, buf_len: usize) -> Vec<u8> {
    let skip = usize::try_from(cookie).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    for (index, entry) in entries.iter().enumerate().skip(skip) {
        let name = entry.name.as_bytes();
        let mut header = [0u8; HEADER];
        header[0..8].copy_from_slice(&(index as u64 + 1).to_le_bytes());
        header[8..16].copy_from_slice(&entry.ino.to_le_bytes());
        // Names come from a provider's listing; one of 4 GiB is not a real name.
        header[16..20].copy_from_slice(&u32::try_from(name.len()).unwrap_or(u32::MAX).to_le_bytes());
        header[20] = match entry.kind {
            FileKind::Dir => 3,  // filetype::directory
            FileKind::File => 4, // filetype::regular_file
        };
        for part in [&header[..], name] {
            let room = buf_len - out.len();
            out.extend_from_slice(&part[..part.len().min(room)]);
        }
        if out.len() == buf_len {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, kind: FileKind, ino: u64) -> DirEntry {
        DirEntry { name: name.to_owned(), kind, ino }
    }

    fn listing() -> Vec<DirEntry> {
        vec![
            entry(".", FileKind::Dir, 7),
            entry("..", FileKind::Dir, 7),
            entry("data.csv", FileKind::File, 0x0102_0304_0506_0708),
            entry("sub", FileKind::Dir, 9),
            entry("", FileKind::File, 10),
            entry("é.txt", FileKind::File, 11),
        ]
    }

    /// A transliteration of wasmtime-wasi 48.0.8's `fd_readdir` loop (src/p1.rs), writing
    /// into a Vec instead of guest memory.
    fn wasmtime_copy(entries: &[DirEntry], cookie: u64, buf_len: u32) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut cap = buf_len;
        let mut dirent = [0; 24];
        for (i, e) in entries.iter().enumerate().skip(cookie as usize) {
            let mut path = e.name.clone().into_bytes();
            dirent[0..8].copy_from_slice((i as u64 + 1).to_le_bytes().as_slice());
            dirent[8..16].copy_from_slice(e.ino.to_le_bytes().as_slice());
            dirent[16..20].copy_from_slice((path.len() as u32).to_le_bytes().as_slice());
            let d_type: u8 = if e.kind == FileKind::Dir { 3 } else { 4 };
            dirent[20..21].copy_from_slice(d_type.to_le_bytes().as_slice());
            let entry_len = cap.min(24);
            cap = cap.checked_sub(entry_len).unwrap();
            buf.extend_from_slice(&dirent[..entry_len as usize]);
            if cap == 0 {
                return buf;
            }
            path.truncate(cap as usize);
            cap = cap.checked_sub(path.len() as u32).unwrap();
            buf.extend_from_slice(&path);
            if cap == 0 {
                return buf;
            }
        }
        assert_eq!(buf.len() as u32, buf_len - cap);
        buf
    }

    #[test]
    fn exact_bytes() {
        let entries =
            vec![entry(".", FileKind::Dir, 7), entry("a.txt", FileKind::File, 0x0102_0304_0506_0708)];
        #[rustfmt::skip]
        let want: Vec<u8> = [
            &[1, 0, 0, 0, 0, 0, 0, 0][..], &[7, 0, 0, 0, 0, 0, 0, 0], &[1, 0, 0, 0], &[3, 0, 0, 0], b".",
            &[2, 0, 0, 0, 0, 0, 0, 0], &[8, 7, 6, 5, 4, 3, 2, 1], &[5, 0, 0, 0], &[4, 0, 0, 0], b"a.txt",
        ]
        .concat();
        assert_eq!(encode_dirents(&entries, 0, 1000), want);
        assert_eq!(encode_dirents(&entries, 1, 1000), want[25..]);
        assert_eq!(encode_dirents(&entries, 0, 30), want[..30]);
    }

    #[test]
    fn truncation_matches_wasmtime_and_the_full_encoding() {
        let entries = listing();
        for cookie in 0..=entries.len() as u64 + 1 {
            let full = encode_dirents(&entries, cookie, usize::MAX);
            for buf_len in 0..=200usize {
                let got = encode_dirents(&entries, cookie, buf_len);
                assert!(got.len() <= buf_len);
                assert_eq!(got.len(), buf_len.min(full.len()), "cookie {cookie}, buf_len {buf_len}");
                assert_eq!(got, full[..got.len()]);
                assert_eq!(
                    got,
                    wasmtime_copy(&entries, cookie, buf_len as u32),
                    "cookie {cookie}, buf_len {buf_len}"
                );
            }
        }
    }

    #[test]
    fn cookie_past_the_end_gives_nothing() {
        let entries = listing();
        assert!(encode_dirents(&entries, entries.len() as u64, 200).is_empty());
        assert!(encode_dirents(&entries, entries.len() as u64 + 1, 200).is_empty());
        assert!(encode_dirents(&entries, u64::MAX, 200).is_empty());
        assert!(encode_dirents(&[], 0, 200).is_empty());
    }
}
