//! Finding and checking the guest artifact set laid out by `cargo xtask dist`.

use std::path::{Path, PathBuf};

use crate::Error;

/// The command that lays out (or repairs) an artifact set.
pub const DIST_COMMAND: &str = "cargo xtask dist";
/// The environment variable that points at an artifact set.
pub const ARTIFACTS_ENV: &str = "WASI_PYTHON_ARTIFACTS";
/// The first line of our MANIFEST; a set without it is not ours.
pub const MANIFEST_MAGIC: &str = "wasi-python-artifacts 1";

/// A checked artifact set: the guest module, the stdlib zip and matplotlib's data.
///
/// Its MANIFEST (written by `cargo xtask dist`) names each file and the module's
/// SHA-256, which keys the compiled-code cache without hashing 100 MB per process.
#[derive(Debug, Clone)]
pub struct Artifacts {
    dir: PathBuf,
    module: PathBuf,
    module_sha256: String,
    stdlib_sha256: String,
    stdlib_dir: PathBuf,
    stdlib_name: String,
    mpl_data: Option<PathBuf>,
    guest_path: Option<String>,
    python: String,
    protocol: Option<u32>,
    compiled_dirs: Vec<PathBuf>,
}

impl Artifacts {
    /// Opens the set in `WASI_PYTHON_ARTIFACTS`.
    pub fn from_env() -> Result<Self, Error> {
        match std::env::var_os(ARTIFACTS_ENV) {
            Some(dir) => Self::open(PathBuf::from(dir)),
            None => Err(Error::ArtifactsMissing {
                dir: PathBuf::from(format!("${ARTIFACTS_ENV}")),
                missing: format!("the folder itself (${ARTIFACTS_ENV} is not set)"),
                fix: DIST_COMMAND,
            }),
        }
    }

    /// Opens and checks the set in `dir`: every file the MANIFEST names must exist.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, Error> {
        let dir: PathBuf = dir.into();
        let missing = |what: &str| Error::ArtifactsMissing {
            dir: dir.clone(),
            missing: what.to_owned(),
            fix: DIST_COMMAND,
        };
        let invalid = |reason: String| Error::ArtifactsInvalid {
            dir: dir.clone(),
            reason,
        };
        if !dir.is_dir() {
            return Err(missing("the folder itself"));
        }
        let manifest = std::fs::read_to_string(dir.join("MANIFEST"))
            .map_err(|_| missing("MANIFEST"))?;
        let mut lines = manifest.lines();
        if lines.next() != Some(MANIFEST_MAGIC) {
            return Err(invalid(format!(
                "MANIFEST does not start with {MANIFEST_MAGIC:?}: not a set laid out by `{DIST_COMMAND}`"
            )));
        }
        let (mut module, mut sha, mut stdlib, mut mpl, mut python, mut protocol, mut guest) =
            (None, None, None, None, None, None, None);
        let mut stdlib_sha = None;
        // Folders of shipped compiled code: `compiled` in the set, and those the MANIFEST
        // names (the wheel's companion package, beside this one). Missing ones are skipped.
        let mut compiled_dirs = vec![dir.join("compiled")];
        for line in lines {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some("module"), Some(file), Some(hash)) => {
                    module = Some(file.to_owned());
                    sha = Some(hash.to_owned());
                }
                (Some("stdlib"), Some(file), hash) => {
                    stdlib = Some(file.to_owned());
                    stdlib_sha = hash.map(str::to_owned);
                }
                (Some("mpl-data"), Some(d), _) => mpl = Some(d.to_owned()),
                (Some("guest"), Some(d), _) => guest = Some(d.to_owned()),
                (Some("compiled"), Some(d), _) => compiled_dirs.push(dir.join(d)),
                (Some("python"), Some(v), _) => python = Some(v.to_owned()),
                (Some("protocol"), Some(v), _) => {
                    protocol = Some(v.parse().map_err(|_| {
                        invalid(format!("MANIFEST: protocol {v:?} is not a number"))
                    })?)
                }
                _ => {}
            }
        }
        let module = module.ok_or_else(|| invalid("MANIFEST names no module".into()))?;
        let stdlib = stdlib.ok_or_else(|| invalid("MANIFEST names no stdlib zip".into()))?;
        let python = python.ok_or_else(|| invalid("MANIFEST names no python version".into()))?;
        let module_path = dir.join(&module);
        if !module_path.is_file() {
            return Err(missing(&module));
        }
        let stdlib_path = dir.join(&stdlib);
        if !stdlib_path.is_file() {
            return Err(missing(&stdlib));
        }
        let mpl_data = match mpl {
            Some(d) if dir.join(&d).is_dir() => Some(dir.join(d)),
            Some(d) => return Err(missing(&d)),
            None => None,
        };
        let stdlib_name = stdlib_path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| invalid("the stdlib zip has no file name".into()))?
            .to_owned();
        let stdlib_dir = stdlib_path
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| invalid("the stdlib zip has no folder".into()))?;
        // Our guest package sits beside the stdlib zip, so the guest reaches it under
        // /usr/local/lib; the runtime puts it first on sys.path.
        let guest_path = match guest {
            Some(g) => {
                let rel = dir
                    .join(&g)
                    .strip_prefix(&stdlib_dir)
                    .map(|r| r.to_string_lossy().into_owned())
                    .map_err(|_| invalid(format!("the guest package {g:?} is not beside the stdlib zip")))?;
                if !dir.join(&g).join("host").is_dir() {
                    return Err(missing(&format!("{g}/host")));
                }
                Some(format!("/usr/local/lib/{rel}"))
            }
            None => None,
        };
        Ok(Artifacts {
            guest_path,
            module_sha256: sha.unwrap_or_default(),
            stdlib_sha256: stdlib_sha.unwrap_or_default(),
            module: module_path,
            stdlib_dir,
            stdlib_name,
            mpl_data,
            python,
            protocol,
            compiled_dirs: compiled_dirs.into_iter().filter(|d| d.is_dir()).collect(),
            dir,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The guest module (the pre-initialised snapshot).
    pub fn module(&self) -> &Path {
        &self.module
    }
    pub fn module_sha256(&self) -> &str {
        &self.module_sha256
    }
    /// The stdlib zip's SHA-256 as the manifest gives it (empty if it gives none).
    pub fn stdlib_sha256(&self) -> &str {
        &self.stdlib_sha256
    }

    /// Our guest package's folder on the host.
    pub(crate) fn guest_dir(&self) -> Option<PathBuf> {
        let rel = self.guest_path.as_deref()?.strip_prefix("/usr/local/lib/")?;
        Some(self.stdlib_dir.join(rel))
    }

    /// The folders of shipped compiled code (each with a `COMPILED` list) that exist.
    pub fn compiled_dirs(&self) -> &[PathBuf] {
        &self.compiled_dirs
    }

    /// The guest's Python version, e.g. `3.15.0`.
    pub fn python_version(&self) -> &str {
        &self.python
    }
    /// The tool-protocol version the set's guest `host` package speaks, if any.
    pub fn protocol(&self) -> Option<u32> {
        self.protocol
    }
    pub(crate) fn stdlib_dir(&self) -> &Path {
        &self.stdlib_dir
    }
    pub(crate) fn stdlib_name(&self) -> &str {
        &self.stdlib_name
    }
    /// Where the guest finds our `host` package, if the set carries it.
    pub(crate) fn guest_path(&self) -> Option<&str> {
        self.guest_path.as_deref()
    }
    pub(crate) fn mpl_data(&self) -> Option<&Path> {
        self.mpl_data.as_deref()
    }
}
