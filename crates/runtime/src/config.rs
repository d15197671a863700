//! What one run is given: its command line, input, environment, grants and limits.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::budget::Limits as BudgetLimits;
use crate::door::network::{NetworkDoor, NetworkHost};
use crate::{CancelToken, Door, Error, ToolDoor};

/// The guest's private writable working folder (and HOME), unless `workdir` names a
/// grant or mount.
pub(crate) const WORKDIR: &str = "/work";

/// The guest's smallest memory: its module declares 640 pages (40 MiB).
pub const MIN_MEMORY_BYTES: u64 = 40 << 20;

/// A host folder offered to the guest at `guest_path`, read-only unless `writable`.
///
/// The guest cannot leave the folder: `..`, absolute paths and symlinks that point
/// outside it are refused by the WASI layer (capability-based `openat`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub host_path: PathBuf,
    pub guest_path: String,
    pub writable: bool,
}

impl Grant {
    pub fn read_only(host_path: impl Into<PathBuf>, guest_path: impl Into<String>) -> Self {
        Grant {
            host_path: host_path.into(),
            guest_path: guest_path.into(),
            writable: false,
        }
    }
    pub fn writable(host_path: impl Into<PathBuf>, guest_path: impl Into<String>) -> Self {
        Grant {
            writable: true,
            ..Self::read_only(host_path, guest_path)
        }
    }

    /// Checks the grant and returns the canonical host folder.
    pub(crate) fn check(&self) -> Result<PathBuf, Error> {
        let fail = |reason: &str| Error::Grant {
            host_path: self.host_path.clone(),
            guest_path: self.guest_path.clone(),
            reason: reason.to_owned(),
        };
        let g = &self.guest_path;
        if !g.starts_with('/') {
            return Err(fail("the guest path must be absolute"));
        }
        if g.len() > 1
            && (g.ends_with('/')
                || g[1..]
                    .split('/')
                    .any(|c| c.is_empty() || c == "." || c == ".."))
        {
            return Err(fail("the guest path must be normalised (no '.', '..', '//' or trailing '/')"));
        }
        if g.contains('\0') {
            return Err(fail("the guest path contains a NUL byte"));
        }
        if g == "/tmp" || g == "/usr/local/lib" || g.starts_with("/usr/local/lib/") {
            return Err(fail("the runtime mounts its own folder there"));
        }
        let host = self
            .host_path
            .canonicalize()
            .map_err(|e| fail(&format!("the host folder cannot be opened: {e}")))?;
        if !host.is_dir() {
            return Err(fail("the host path is not a folder"));
        }
        Ok(host)
    }
}

/// The limits of one run. Every limit has a default; see [`Limits::default`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The guest's linear memory cap (default 1 GiB). Past it, allocation fails inside
    /// the guest (`MemoryError`); the run is not trapped.
    pub memory_bytes: u64,
    /// Wall-clock time (default 60 s); `None` means none. Sleeping guests end on time too.
    pub deadline: Option<Duration>,
    /// Bytes kept per output stream (default 16 MiB); the rest is dropped and the
    /// stream is marked truncated.
    pub output_bytes: usize,
    /// Fuel (roughly one unit per wasm instruction); `None` (default) means unmetered.
    pub fuel: Option<u64>,
    /// Bytes the guest may write to files, in `/tmp`, its working folder, writable
    /// grants and writable mounts together (default 256 MiB; `None` means none). Past
    /// it, file writes fail with ENOSPC and the run goes on; on host files a run
    /// overshoots by at most one write, on mounts not at all (a write that would pass
    /// the quota is refused whole). For a session, the total of all its turns.
    pub file_write_bytes: Option<u64>,
    /// Descriptors the guest may hold open at once, beside stdio and its folders
    /// (default 1,024). Past it, opening fails with EMFILE. All the guests of a process
    /// together hold at most three quarters of its RLIMIT_NOFILE (ENFILE past that).
    pub max_open_files: usize,
    /// Provider calls a run (or a session turn) may make on its mounts (default 10,000;
    /// `None` means none). Past it the guest's file calls on mounts fail with EIO, the run
    /// goes on, and `Completed::files` counts the refused calls.
    pub max_file_calls: Option<u64>,
    /// Bytes of displays a run (or a session turn) keeps (default 16 MiB): each display
    /// frame's JSON counts; one that would pass the cap is cut, as is every later one,
    /// and `Completed::truncated` says so (display.rs).
    pub display_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 1 << 30,
            deadline: Some(Duration::from_secs(60)),
            output_bytes: 16 << 20,
            fuel: None,
            file_write_bytes: Some(crate::files::DEFAULT_FILE_WRITE_BYTES),
            max_open_files: crate::files::DEFAULT_MAX_OPEN_FILES,
            max_file_calls: Some(crate::mounts::DEFAULT_MAX_FILE_CALLS),
            display_bytes: crate::display::DEFAULT_DISPLAY_BYTES,
        }
    }
}

/// Everything one run is given. Built deny-by-default:
///
/// - no grants: the guest sees only the stdlib (read-only), matplotlib's data
///   (read-only), and a private writable `/tmp` and working folder `/work` that are
///   deleted after the run;
/// - environment: only `TMPDIR=/tmp`, `HOME=` the working folder (`/work`, or
///   [`RunConfig::workdir`]), `PYTHONTZPATH=` plus what [`RunConfig::env`] adds;
/// - stdin empty; stdout and stderr captured, capped by [`Limits::output_bytes`];
/// - no network (the guest has no sockets; its requests through the host are refused
///   without [`RunConfig::network`]), no door (`_host.call` answers "no host");
/// - the limits of [`Limits::default`].
#[derive(Clone)]
pub struct RunConfig {
    pub(crate) argv: Vec<String>,
    pub(crate) stdin: Vec<u8>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) grants: Vec<Grant>,
    pub(crate) limits: Limits,
    pub(crate) cancel: CancelToken,
    /// The door the guest's frames reach: `own_door` behind a [`NetworkDoor`], which takes
    /// the network requests, whenever either is set.
    pub(crate) door: Option<Arc<dyn Door>>,
    /// The embedder's door (a raw door, or the tool door), without the network's.
    own_door: Option<Arc<dyn Door>>,
    /// Makes the guest's network requests (docs/network.md); `None`: each is refused.
    network: Option<Arc<dyn NetworkHost>>,
    /// `door` as what it is, so the runtime can lend it its call threads.
    pub(crate) network_door: Option<Arc<NetworkDoor>>,
    pub(crate) workdir: Option<String>,
    pub(crate) preload: Preload,
    pub(crate) mounts: Vec<crate::mounts::Mount>,
    /// The tool door and each session turn's budget, when the run offers tools.
    pub(crate) tools: Option<(ToolDoor, BudgetLimits)>,
    /// A session's snapshot to start from instead of `preload` (crates/runtime/src/fork.rs).
    pub(crate) snapshot: Option<crate::Snapshot>,
    /// A session from a snapshot keeps its random generators' state (default: re-seeded).
    pub(crate) keep_random: bool,
    /// Where a streaming run's output and displays go as the guest writes them.
    pub(crate) events: Option<crate::Events>,
}

/// Which modules the guest has imported before the program starts
/// (crates/runtime/src/snapshot.rs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Preload {
    /// None: the guest starts from the artifact's own bootstrap snapshot.
    #[default]
    Nothing,
    /// [`crate::default_preload`]'s modules, when their snapshot builds and fits the
    /// memory limit; otherwise the run quietly starts as with [`Preload::Nothing`].
    Default,
    /// Exactly these modules; a module that does not import, or a snapshot larger than
    /// the memory limit, is an error before the run.
    Modules(Vec<String>),
}

impl Preload {
    /// The embedder's `preload=` as most APIs take it: `None` is [`Preload::Default`],
    /// an empty list [`Preload::Nothing`], else exactly those modules.
    pub fn from_option(names: Option<Vec<String>>) -> Preload {
        match names {
            None => Preload::Default,
            Some(m) if m.is_empty() => Preload::Nothing,
            Some(m) => Preload::Modules(m),
        }
    }

    /// The modules asked for, sorted and without repeats; a name must be a dotted
    /// Python identifier (ASCII).
    pub(crate) fn modules(names: &[String]) -> Result<Vec<String>, Error> {
        let ident = |w: &str| {
            let mut c = w.chars();
            c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
                && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
        };
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            if n.len() > 200 || !n.split('.').all(ident) {
                return Err(Error::InvalidConfig {
                    param: "preload",
                    reason: format!("{n:?} is not a module name"),
                });
            }
            out.push(n.clone());
        }
        out.sort();
        out.dedup();
        Ok(out)
    }
}

impl std::fmt::Debug for RunConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunConfig")
            .field("argv", &self.argv)
            .field("stdin_len", &self.stdin.len())
            .field("env", &self.env)
            .field("grants", &self.grants)
            .field("limits", &self.limits)
            .field("door", &self.door.is_some())
            .field("network", &self.network.is_some())
            .field("workdir", &self.workdir)
            .field("preload", &self.preload)
            .field("snapshot", &self.snapshot)
            .field("events", &self.events.is_some())
            .finish()
    }
}

impl RunConfig {
    /// A run of CPython's command line `argv` (without the program name), such as
    /// `["-c", "print(1)"]`, `["-m", "json.tool"]`, `["/data/script.py"]`, or `[]`
    /// to read the program from stdin.
    pub fn new<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> Self {
        RunConfig {
            argv: argv.into_iter().map(Into::into).collect(),
            stdin: Vec::new(),
            env: Vec::new(),
            grants: Vec::new(),
            limits: Limits::default(),
            cancel: CancelToken::new(),
            door: None,
            own_door: None,
            network: None,
            network_door: None,
            workdir: None,
            preload: Preload::Nothing,
            mounts: Vec::new(),
            tools: None,
            snapshot: None,
            keep_random: false,
            events: None,
        }
    }
    /// Replaces the command line.
    pub fn argv<S: Into<String>>(mut self, argv: impl IntoIterator<Item = S>) -> Self {
        self.argv = argv.into_iter().map(Into::into).collect();
        self
    }
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = bytes.into();
        self
    }
    /// Sets an environment variable; later calls win over earlier ones and over the defaults.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }
    pub fn grant(mut self, grant: Grant) -> Self {
        self.grants.push(grant);
        self
    }
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }
    pub fn memory_bytes(mut self, bytes: u64) -> Self {
        self.limits.memory_bytes = bytes;
        self
    }
    pub fn deadline(mut self, deadline: Option<Duration>) -> Self {
        self.limits.deadline = deadline;
        self
    }
    pub fn output_bytes(mut self, bytes: usize) -> Self {
        self.limits.output_bytes = bytes;
        self
    }
    pub fn display_bytes(mut self, bytes: usize) -> Self {
        self.limits.display_bytes = bytes;
        self
    }
    /// Streams the run: what the guest writes to stdout and stderr (what the output cap
    /// keeps) and the displays it keeps go to `events` as they come, in order, and the
    /// queue ends when the guest does, before the run's end is handed over. A caller that
    /// takes too long makes the guest wait at most [`crate::STREAM_STALL`] in all.
    pub fn events(mut self, events: crate::Events) -> Self {
        self.events = Some(events);
        self
    }
    pub fn fuel(mut self, fuel: Option<u64>) -> Self {
        self.limits.fuel = fuel;
        self
    }
    /// Ends the run with `trapped = "cancelled"` when the token is cancelled.
    pub fn cancel(mut self, token: CancelToken) -> Self {
        self.cancel = token;
        self
    }
    pub fn file_write_bytes(mut self, bytes: Option<u64>) -> Self {
        self.limits.file_write_bytes = bytes;
        self
    }
    pub fn max_open_files(mut self, n: usize) -> Self {
        self.limits.max_open_files = n;
        self
    }
    /// The guest's working folder (and HOME): by default a private writable `/work`,
    /// removed with the run. Naming the guest path of a writable grant here starts the guest in
    /// it instead, so the embedder gets the files back.
    pub fn workdir(mut self, guest_path: impl Into<String>) -> Self {
        self.workdir = Some(guest_path.into());
        self
    }
    pub(crate) fn workdir_path(&self) -> &str {
        self.workdir.as_deref().unwrap_or(WORKDIR)
    }
    /// Serves a guest folder from the embedder's code (see [`crate::Mount`]).
    pub fn mount(mut self, mount: crate::mounts::Mount) -> Self {
        self.mounts.push(mount);
        self
    }
    pub fn max_file_calls(mut self, n: Option<u64>) -> Self {
        self.limits.max_file_calls = n;
        self
    }
    /// Starts the guest with these modules already imported, from a snapshot built on
    /// first need and cached on disk (see [`Preload`]).
    pub fn preload(mut self, preload: Preload) -> Self {
        self.preload = preload;
        self
    }
    /// Starts the guest from a session's [`crate::Snapshot`] (its memory, everything
    /// it imported and defined) instead of from `preload`; this config's limits, env,
    /// grants, mounts and tools are the new guest's. A snapshot larger than
    /// `memory_bytes` is refused before the guest starts.
    pub fn snapshot(mut self, snapshot: crate::Snapshot) -> Self {
        self.snapshot = Some(snapshot);
        self
    }
    /// A session opened from a snapshot keeps the random generators' state (`random`,
    /// `numpy.random`) instead of re-seeding them: forks then draw the same numbers.
    /// Runs always re-seed, as every run does.
    pub fn keep_random(mut self, keep: bool) -> Self {
        self.keep_random = keep;
        self
    }
    /// Answers the guest's `_host.call` frames.
    pub fn door(mut self, door: Arc<dyn Door>) -> Self {
        self.own_door = Some(door);
        self.tools = None;
        self.doors()
    }
    /// Offers tools through `door`: its record becomes [`crate::Completed::tools`], and
    /// each session turn starts with a fresh budget of `per_turn` and a fresh record.
    pub fn tools(mut self, door: ToolDoor, per_turn: BudgetLimits) -> Self {
        self.own_door = Some(Arc::new(door.clone()));
        self.tools = Some((door, per_turn));
        self.doors()
    }
    /// Makes the guest's network requests (the frames `guest/host/http.py` sends, which
    /// never reach the tool door): without one each is refused. See docs/network.md.
    pub fn network(mut self, network: Arc<dyn NetworkHost>) -> Self {
        self.network = Some(network);
        self.doors()
    }
    /// The door the guest's frames reach: the network's in front of the embedder's.
    fn doors(mut self) -> Self {
        self.network_door = (self.network.is_some() || self.own_door.is_some())
            .then(|| Arc::new(NetworkDoor::new(self.network.clone(), self.own_door.clone())));
        self.door = self.network_door.clone().map(|d| d as Arc<dyn Door>);
        self
    }

    /// A mount's guest path: absolute, normalised, not `/`, and overlapping no other
    /// mount, no grant, `/tmp` and the stdlib (one inside the other counts). A mount at
    /// `/work` replaces the private working folder.
    fn check_mounts(&self) -> Result<(), Error> {
        let fail = |g: &str, reason: String| Error::InvalidConfig { param: "mounts", reason: format!("{g:?}: {reason}") };
        let overlap = |a: &str, b: &str| {
            let within = |x: &str, y: &str| x == y || x.starts_with(&format!("{y}/"));
            within(a, b) || within(b, a)
        };
        for (i, m) in self.mounts.iter().enumerate() {
            let g = m.guest_path.as_str();
            if !g.starts_with('/') || g == "/" {
                return Err(fail(g, "a mount's guest path must be absolute and not '/'".into()));
            }
            if g.ends_with('/') || g[1..].split('/').any(|c| c.is_empty() || c == "." || c == "..") || g.contains('\0') {
                return Err(fail(g, "a mount's guest path must be normalised (no '.', '..', '//' or trailing '/')".into()));
            }
            for own in ["/tmp", "/usr/local/lib"] {
                if overlap(g, own) {
                    return Err(fail(g, format!("overlaps {own}, which the runtime mounts itself")));
                }
            }
            if let Some(other) = self.mounts[..i].iter().find(|o| overlap(g, &o.guest_path)) {
                return Err(fail(g, format!("overlaps the mount {:?}", other.guest_path)));
            }
            if let Some(grant) = self.grants.iter().find(|o| overlap(g, &o.guest_path)) {
                return Err(fail(g, format!("overlaps the grant {:?}", grant.guest_path)));
            }
        }
        Ok(())
    }

    /// Checks everything that can be checked before the run. `own` are the runtime's
    /// own files (artifacts, compiled-guest cache): no writable grant may contain them
    /// or lie inside them, or a guest could rewrite what the host later loads.
    pub(crate) fn check(&self, own: &[PathBuf]) -> Result<Vec<(PathBuf, &Grant)>, Error> {
        if self.limits.memory_bytes < MIN_MEMORY_BYTES {
            return Err(Error::InvalidConfig {
                param: "memory_bytes",
                reason: format!(
                    "{} is below the guest's minimum of {MIN_MEMORY_BYTES} bytes (40 MiB)",
                    self.limits.memory_bytes
                ),
            });
        }
        if self.limits.memory_bytes > 4 << 30 {
            return Err(Error::InvalidConfig {
                param: "memory_bytes",
                reason: "a 32-bit guest cannot use more than 4 GiB".into(),
            });
        }
        for (k, v) in &self.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(Error::InvalidConfig {
                    param: "env",
                    reason: format!("{k:?} is not a valid environment variable"),
                });
            }
        }
        if let Some(w) = &self.workdir {
            // The guest writes where it stands: a read-only grant would make `open('out.csv', 'w')` fail.
            if w != WORKDIR
                && !self.grants.iter().any(|g| &g.guest_path == w && g.writable)
                && !self.mounts.iter().any(|m| &m.guest_path == w && m.writable)
            {
                return Err(Error::InvalidConfig {
                    param: "workdir",
                    reason: format!("{w:?} is not the guest path of a writable grant or mount (or {:?})", WORKDIR),
                });
            }
        }
        if let Preload::Modules(m) = &self.preload {
            Preload::modules(m)?;
        }
        if self.argv.iter().any(|a| a.contains('\0')) {
            return Err(Error::InvalidConfig {
                param: "argv",
                reason: "an argument contains a NUL byte".into(),
            });
        }
        self.check_mounts()?;
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::with_capacity(self.grants.len());
        for g in &self.grants {
            let host = g.check()?;
            if g.writable
                && let Some(p) = own.iter().find(|p| host.starts_with(p) || p.starts_with(&host))
            {
                return Err(Error::Grant {
                    host_path: g.host_path.clone(),
                    guest_path: g.guest_path.clone(),
                    reason: format!("a writable grant may not hold the runtime's own files ({})", p.display()),
                });
            }
            if !seen.insert(g.guest_path.as_str()) {
                return Err(Error::Grant {
                    host_path: g.host_path.clone(),
                    guest_path: g.guest_path.clone(),
                    reason: "another grant already takes this guest path".into(),
                });
            }
            out.push((host, g));
        }
        Ok(out)
    }
}
