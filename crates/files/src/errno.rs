//! The errno table: every error number the runtime answers a guest's file call with, by
//! POSIX name, with WASI preview 1's numbers. Providers refuse with these; the runtime's
//! own checks (quotas, guest pointers, descriptors) answer with these; nothing else in the
//! workspace spells an errno as a number.

/// An error a file call answers with, by POSIX name; the guest sees the same errno.
/// The discriminants are WASI preview 1's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u16)]
pub enum Errno {
    Acces = 2,
    Again = 6,
    Badf = 8,
    Busy = 10,
    Exist = 20,
    /// A pointer or length the guest passed lies outside its memory (the runtime's only).
    Fault = 21,
    Fbig = 22,
    Ilseq = 25,
    Inval = 28,
    Io = 29,
    Isdir = 31,
    Loop = 32,
    Mfile = 33,
    Nametoolong = 37,
    /// The process's share of descriptors for guests is spent (the runtime's only).
    Nfile = 41,
    Noent = 44,
    Nomem = 48,
    Nospc = 51,
    Nosys = 52,
    Notdir = 54,
    Notempty = 55,
    Notsup = 58,
    Perm = 63,
    Rofs = 69,
    Timedout = 73,
    Xdev = 75,
    Notcapable = 76,
}

impl Errno {
    /// Every errno a provider may name, with its POSIX name (upper case, no `E`).
    pub const ALL: &[(Errno, &str)] = &[
        (Errno::Acces, "ACCES"),
        (Errno::Again, "AGAIN"),
        (Errno::Badf, "BADF"),
        (Errno::Busy, "BUSY"),
        (Errno::Exist, "EXIST"),
        (Errno::Fbig, "FBIG"),
        (Errno::Ilseq, "ILSEQ"),
        (Errno::Inval, "INVAL"),
        (Errno::Io, "IO"),
        (Errno::Isdir, "ISDIR"),
        (Errno::Loop, "LOOP"),
        (Errno::Mfile, "MFILE"),
        (Errno::Nametoolong, "NAMETOOLONG"),
        (Errno::Noent, "NOENT"),
        (Errno::Nomem, "NOMEM"),
        (Errno::Nospc, "NOSPC"),
        (Errno::Nosys, "NOSYS"),
        (Errno::Notdir, "NOTDIR"),
        (Errno::Notempty, "NOTEMPTY"),
        (Errno::Notsup, "NOTSUP"),
        (Errno::Perm, "PERM"),
        (Errno::Rofs, "ROFS"),
        (Errno::Timedout, "TIMEDOUT"),
        (Errno::Xdev, "XDEV"),
        (Errno::Notcapable, "NOTCAPABLE"),
    ];

    /// The errnos only the runtime answers with: a provider's refusal never names them
    /// ([`Errno::from_name`] does not know them), so a provider cannot pose as the runtime.
    const RUNTIME_ONLY: &[(Errno, &str)] = &[(Errno::Fault, "FAULT"), (Errno::Nfile, "NFILE")];

    /// The errno named `name` ("ENOENT" or "NOENT", any case) among those a provider may
    /// name; `None` if unknown.
    pub fn from_name(name: &str) -> Option<Errno> {
        let upper = name.trim().to_ascii_uppercase();
        // Linux names ENOTSUP's number EOPNOTSUPP (Python's `errno.errorcode` does too).
        let n = match upper.as_str() {
            "EOPNOTSUPP" | "OPNOTSUPP" => "NOTSUP",
            n => n.strip_prefix('E').filter(|rest| Errno::ALL.iter().any(|(_, x)| x == rest)).unwrap_or(n),
        };
        Errno::ALL.iter().find(|(_, x)| *x == n).map(|(e, _)| *e)
    }

    /// The POSIX name, with its `E`: "ENOENT".
    pub fn name(self) -> String {
        let n = Errno::ALL.iter().chain(Errno::RUNTIME_ONLY).find(|(e, _)| *e == self).map_or("IO", |(_, n)| n);
        format!("E{n}")
    }

    /// WASI preview 1's number for it.
    pub fn wasi(self) -> i32 {
        self as u16 as i32
    }

    /// A call's outcome as the number the guest's import returns: 0, or the errno.
    pub fn code(outcome: Result<(), Errno>) -> i32 {
        outcome.err().map_or(0, Errno::wasi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_with_or_without_their_e_and_in_any_case() {
        for (e, n) in Errno::ALL {
            assert_eq!(Errno::from_name(n), Some(*e), "{n}");
            assert_eq!(Errno::from_name(&format!("E{n}")), Some(*e), "{n}");
            assert_eq!(Errno::from_name(&e.name().to_lowercase()), Some(*e), "{n}");
        }
        // EXDEV is not "E" + "XDEV" misread as "EXDEV" without its E, nor EEXIST as "EXIST".
        assert_eq!(Errno::from_name("EXDEV"), Some(Errno::Xdev));
        assert_eq!(Errno::from_name("EEXIST"), Some(Errno::Exist));
        assert_eq!(Errno::from_name("EOPNOTSUPP"), Some(Errno::Notsup));
        assert_eq!(Errno::from_name("ENOTBLK"), None);
    }

    #[test]
    fn the_runtimes_own_errnos_have_names_a_provider_cannot_use() {
        for (e, n) in Errno::RUNTIME_ONLY {
            assert_eq!(e.name(), format!("E{n}"));
            assert_eq!(Errno::from_name(&e.name()), None, "{n}");
        }
        assert_eq!(Errno::code(Ok(())), 0);
        assert_eq!(Errno::code(Err(Errno::Fault)), 21);
    }
}
