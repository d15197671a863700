//! The guest's linear memory as host functions read and write it. Every pointer and
//! length is the guest's: each is checked against the memory before use, and one that
//! does not fit is [`Errno::Fault`]. Nothing is copied unless the caller copies it.

use std::ops::Range;

use wasi_python_files::Errno;

/// The most iovecs one call may pass (IOV_MAX).
const IOV_MAX: usize = 1024;

/// `ptr..ptr + len` inside a memory of `mem_len` bytes, if it fits there.
pub(crate) fn span(ptr: i32, len: usize, mem_len: usize) -> Option<Range<usize>> {
    let start = ptr as u32 as usize;
    let end = start.checked_add(len)?;
    (end <= mem_len).then_some(start..end)
}

/// The guest's memory during one host call.
pub(crate) struct GuestMem<'a>(&'a mut [u8]);

impl<'a> GuestMem<'a> {
    pub(crate) fn new(bytes: &'a mut [u8]) -> GuestMem<'a> {
        GuestMem(bytes)
    }

    /// The guest's bytes at `ptr..ptr + len`, in place.
    pub(crate) fn bytes(&self, ptr: i32, len: usize) -> Result<&[u8], Errno> {
        let r = span(ptr, len, self.0.len()).ok_or(Errno::Fault)?;
        Ok(&self.0[r])
    }

    /// The guest's bytes at `ptr..ptr + len`, to write in place.
    pub(crate) fn bytes_mut(&mut self, ptr: i32, len: usize) -> Result<&mut [u8], Errno> {
        let r = span(ptr, len, self.0.len()).ok_or(Errno::Fault)?;
        Ok(&mut self.0[r])
    }

    pub(crate) fn read_u32(&self, ptr: i32) -> Result<u32, Errno> {
        Ok(u32::from_le_bytes(self.bytes(ptr, 4)?.try_into().expect("four bytes")))
    }

    /// Copies `src` to `ptr`; nothing is written unless all of it fits.
    pub(crate) fn write(&mut self, ptr: i32, src: &[u8]) -> Result<(), Errno> {
        self.bytes_mut(ptr, src.len())?.copy_from_slice(src);
        Ok(())
    }

    pub(crate) fn write_u32(&mut self, ptr: i32, v: u32) -> Result<(), Errno> {
        self.write(ptr, &v.to_le_bytes())
    }

    pub(crate) fn write_u64(&mut self, ptr: i32, v: u64) -> Result<(), Errno> {
        self.write(ptr, &v.to_le_bytes())
    }

    /// The (pointer, length) pairs of an iovec array of `n` entries at `ptr`. The
    /// buffers they point at are checked where they are used.
    pub(crate) fn iovecs(&self, ptr: i32, n: i32) -> Result<Vec<(u32, u32)>, Errno> {
        let n = n as u32 as usize;
        if n > IOV_MAX {
            return Err(Errno::Fault);
        }
        let word = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("four bytes"));
        let raw = self.bytes(ptr, n * 8)?;
        Ok(raw.chunks_exact(8).map(|c| (word(&c[0..4]), word(&c[4..8]))).collect())
    }

    /// The guest buffers an iovec array names, in place, for reading; EFAULT if any is
    /// outside the memory.
    pub(crate) fn gather(&self, iovs: &[(u32, u32)]) -> Result<Vec<&[u8]>, Errno> {
        iovs.iter().map(|&(ptr, len)| self.bytes(ptr as i32, len as usize)).collect()
    }

    /// Copies `src` into the buffers an iovec array names, in order, until it is all
    /// copied; the count copied. Each buffer reached must lie wholly in the memory, else
    /// EFAULT (what the earlier buffers received stays).
    pub(crate) fn scatter(&mut self, iovs: &[(u32, u32)], src: &[u8]) -> Result<usize, Errno> {
        let mut at = 0;
        for &(ptr, len) in iovs {
            let dst = self.bytes_mut(ptr as i32, len as usize)?;
            let k = dst.len().min(src.len() - at);
            dst[..k].copy_from_slice(&src[at..at + k]);
            at += k;
            if at == src.len() {
                break;
            }
        }
        Ok(at)
    }

    /// The memory as wasmtime-wasi's ABI functions take it.
    pub(crate) fn wiggle(&mut self) -> wiggle::GuestMemory<'_> {
        wiggle::GuestMemory::Unshared(&mut *self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_must_fit_whatever_the_pointer() {
        assert_eq!(span(0, 4, 4), Some(0..4));
        assert_eq!(span(4, 0, 4), Some(4..4));
        assert_eq!(span(1, 4, 4), None);
        assert_eq!(span(-1, 1, 4), None, "a negative i32 is a high address");
        assert_eq!(span(-1, usize::MAX, usize::MAX), None, "no overflow");
    }

    #[test]
    fn reads_and_writes_are_checked() {
        let mut buf = [0u8; 16];
        let mut m = GuestMem::new(&mut buf);
        m.write_u32(0, 0x0403_0201).unwrap();
        m.write_u64(8, u64::MAX).unwrap();
        assert_eq!(m.read_u32(0), Ok(0x0403_0201));
        assert_eq!(m.read_u32(13), Err(Errno::Fault));
        assert_eq!(m.write_u64(9, 1), Err(Errno::Fault));
        assert_eq!(m.bytes(8, 8), Ok(&[0xff; 8][..]), "a refused write changes nothing");
        assert_eq!(m.bytes(-4, 4), Err(Errno::Fault));
    }

    #[test]
    fn iovecs_are_read_checked_and_bounded() {
        let mut buf = [0u8; 64];
        let mut m = GuestMem::new(&mut buf);
        // Two iovecs at 0: (32, 4) and (40, 100).
        for (i, w) in [32u32, 4, 40, 100].into_iter().enumerate() {
            m.write_u32(i as i32 * 4, w).unwrap();
        }
        assert_eq!(m.iovecs(0, 2), Ok(vec![(32, 4), (40, 100)]));
        assert_eq!(m.iovecs(60, 1), Err(Errno::Fault));
        assert_eq!(m.iovecs(0, 1025), Err(Errno::Fault));
        assert_eq!(m.iovecs(0, -1), Err(Errno::Fault));
        // The second buffer runs past the end: gathering fails, scattering fails only if
        // it is reached.
        let iovs = m.iovecs(0, 2).unwrap();
        assert_eq!(m.gather(&iovs).map(|v| v.len()), Err(Errno::Fault));
        assert_eq!(m.scatter(&iovs, b"abc"), Ok(3));
        assert_eq!(m.bytes(32, 3), Ok(&b"abc"[..]));
        assert_eq!(m.scatter(&iovs, b"ABCDEF"), Err(Errno::Fault));
        assert_eq!(m.bytes(32, 4), Ok(&b"ABCD"[..]), "the first buffer was filled");
        assert_eq!(m.scatter(&iovs, b""), Ok(0));
        assert_eq!(m.scatter(&[(62, 4)], b""), Err(Errno::Fault), "a bad buffer is refused even at the end of a file");
        assert_eq!(m.scatter(&[(32, 2), (50, 2)], b"wxyz"), Ok(4));
        assert_eq!((m.bytes(32, 2), m.bytes(50, 2)), (Ok(&b"wx"[..]), Ok(&b"yz"[..])));
    }
}
