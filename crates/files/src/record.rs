//! The record of a run's mounts (`Completed::files`): provider calls by method, and what
//! failed, listed up to [`RECORD_LIMIT`] and counted beyond.

use std::collections::BTreeMap;

/// The record keeps this many faults and refused writes, and counts the rest.
pub const RECORD_LIMIT: usize = 1_000;

/// One provider call that failed by a fault (not a refusal), or a write that did not land.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFault {
    /// The provider method: "stat", "list", "read", "write", "mkdir", "remove", "rmdir", "rename".
    pub method: String,
    /// The mount's guest path joined with the path inside it.
    pub path: String,
    /// What went wrong: the provider's exception (type and first line), "timed out",
    /// "cancelled", or an errno name for a refused write.
    pub error: String,
}

/// What a run's mounts did: the provider calls by method, and what failed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileRecord {
    /// Provider calls made, by method.
    pub calls: BTreeMap<String, u64>,
    /// All provider calls made.
    pub total: u64,
    /// Calls refused because `max_file_calls` was spent (the guest got EIO).
    pub refused_calls: u64,
    /// The first [`RECORD_LIMIT`] faults: exceptions, timeouts.
    pub faults: Vec<FileFault>,
    pub faults_total: u64,
    /// The first [`RECORD_LIMIT`] writes (whole files handed to `write`, folder changes
    /// included) that the provider refused or failed.
    pub refused_writes: Vec<FileFault>,
    pub refused_writes_total: u64,
    /// Whole files handed to `write` that landed, and their bytes.
    pub files_written: u64,
    pub bytes_written: u64,
    /// The first [`RECORD_LIMIT`] files (guest paths) whose changes the write-back at the
    /// run's end did not deliver: refused, failed, timed out, or not tried before its
    /// grace ran out. Their content is lost; nothing else names it.
    pub undelivered: Vec<String>,
    pub undelivered_total: u64,
}

impl FileRecord {
    /// Records a fault: listed while fewer than [`RECORD_LIMIT`] are, counted always.
    pub fn fault(&mut self, f: FileFault) {
        self.faults_total += 1;
        if self.faults.len() < RECORD_LIMIT {
            self.faults.push(f);
        }
    }

    /// Records a refused write: listed while fewer than [`RECORD_LIMIT`] are, counted always.
    pub fn refused_write(&mut self, f: FileFault) {
        self.refused_writes_total += 1;
        if self.refused_writes.len() < RECORD_LIMIT {
            self.refused_writes.push(f);
        }
    }

    /// Records a file the write-back at the run's end did not deliver.
    pub fn undelivered_file(&mut self, path: String) {
        self.undelivered_total += 1;
        if self.undelivered.len() < RECORD_LIMIT {
            self.undelivered.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_stop_at_the_limit_and_totals_go_on() {
        let mut r = FileRecord::default();
        let f = |i: usize| FileFault { method: "write".into(), path: format!("/m/{i}"), error: "EIO".into() };
        for i in 0..RECORD_LIMIT + 5 {
            r.fault(f(i));
            r.refused_write(f(i));
            r.undelivered_file(f(i).path);
        }
        assert_eq!((r.undelivered.len(), r.undelivered_total), (RECORD_LIMIT, RECORD_LIMIT as u64 + 5));
        assert_eq!((r.faults.len(), r.faults_total), (RECORD_LIMIT, RECORD_LIMIT as u64 + 5));
        assert_eq!((r.refused_writes.len(), r.refused_writes_total), (RECORD_LIMIT, RECORD_LIMIT as u64 + 5));
        assert_eq!(r.faults[RECORD_LIMIT - 1], f(RECORD_LIMIT - 1));
    }
}
