//! Reading the files a configuration names (a firewall's `rules_file`, a DPI pattern
//! file) without letting the configuration reach the rest of the file system.
//!
//! A [`FileScope`] is the directory of the config file plus the directories the
//! operator allow-listed. A name is refused when it has a `..` component; otherwise its
//! path (relative names from the config directory) is resolved with every symlink
//! followed and must lie inside one of the scope's directories, themselves resolved,
//! before it is opened; the path the kernel actually opened (`/proc/self/fd/N`) must
//! lie inside too, which closes the race between the check and the open. The file must
//! be a regular file no larger than the caller's bound; it is opened non-blocking so
//! a FIFO cannot stall the caller. Errors name the file as configured and say what is
//! wrong; they never carry the file's content.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

/// Where configured files may be read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileScope {
    base: PathBuf,
    allowed: Vec<PathBuf>,
}

/// Why a configured file was not read. The message names the file as configured and
/// never quotes what the file holds.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The name climbs out with `..`.
    #[error("`{0}` has a `..` component (files must lie in the config directory or an allowed directory)")]
    ParentDir(String),
    /// The name is empty.
    #[error("the file name is empty")]
    Empty,
    /// The file could not be opened or inspected.
    #[error("`{path}`: cannot read: {source}")]
    Io {
        /// The name as configured.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The opened file lies outside every directory of the scope.
    #[error("`{0}` lies outside the config directory and the allowed directories")]
    Outside(String),
    /// Not a regular file (a directory, device, FIFO or socket).
    #[error("`{0}` is not a regular file")]
    NotFile(String),
    /// Larger than the caller accepts.
    #[error("`{path}` is larger than the {max} bytes accepted")]
    TooLarge {
        /// The name as configured.
        path: String,
        /// The bound.
        max: u64,
    },
    /// Not UTF-8 text.
    #[error("`{path}`: line {line} is not UTF-8 text")]
    NotText {
        /// The name as configured.
        path: String,
        /// 1-based line of the first invalid byte.
        line: usize,
    },
}

impl FileScope {
    /// Files of the config file in `config_dir` (empty means the current directory).
    pub fn new(config_dir: impl Into<PathBuf>) -> Self {
        Self {
            base: config_dir.into(),
            allowed: Vec::new(),
        }
    }

    /// The same scope with more directories files may also come from.
    pub fn with_allowed(mut self, dirs: impl IntoIterator<Item = PathBuf>) -> Self {
        self.allowed.extend(dirs);
        self
    }

    /// The config directory (relative names are taken from it).
    pub fn base(&self) -> &Path {
        &self.base
    }

    fn base_or_cwd(&self) -> &Path {
        if self.base.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &self.base
        }
    }

    /// Opens `name` within the scope and reads it whole as UTF-8 text of at most
    /// `max_bytes` bytes.
    pub fn read_text(&self, name: &Path, max_bytes: u64) -> Result<String, ConfineError> {
        let bytes = self.read(name, max_bytes)?;
        String::from_utf8(bytes).map_err(|e| {
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            ConfineError::NotText {
                path: name.display().to_string(),
                line: 1 + valid.iter().filter(|&&b| b == b'\n').count(),
            }
        })
    }

    /// Opens `name` within the scope and reads it whole (at most `max_bytes` bytes).
    pub fn read(&self, name: &Path, max_bytes: u64) -> Result<Vec<u8>, ConfineError> {
        let shown = || name.display().to_string();
        if name.as_os_str().is_empty() {
            return Err(ConfineError::Empty);
        }
        if name.components().any(|c| c == Component::ParentDir) {
            return Err(ConfineError::ParentDir(shown()));
        }
        let io = |source| ConfineError::Io {
            path: shown(),
            source,
        };
        let path = self.base_or_cwd().join(name);
        let roots = self.roots();
        let inside = |p: &Path| roots.iter().any(|r| p.starts_with(r));
        // Resolve first so that nothing outside is even opened (opening some devices
        // has effects), then check the file actually opened (the path may have
        // changed in between).
        if !inside(&std::fs::canonicalize(&path).map_err(io)?) {
            return Err(ConfineError::Outside(shown()));
        }
        let file = std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(&path)
            .map_err(io)?;
        let opened =
            std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).map_err(io)?;
        if !inside(&opened) {
            return Err(ConfineError::Outside(shown()));
        }
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(ConfineError::NotFile(shown()));
        }
        let too_large = || ConfineError::TooLarge {
            path: shown(),
            max: max_bytes,
        };
        if meta.len() > max_bytes {
            return Err(too_large());
        }
        let mut out = Vec::with_capacity(meta.len() as usize);
        file.take(max_bytes.saturating_add(1))
            .read_to_end(&mut out)
            .map_err(io)?;
        if out.len() as u64 > max_bytes {
            return Err(too_large());
        }
        Ok(out)
    }

    /// The scope's directories with every symlink resolved (those that do not exist
    /// are left out: nothing can be opened inside them).
    fn roots(&self) -> Vec<PathBuf> {
        std::iter::once(self.base_or_cwd())
            .chain(self.allowed.iter().map(PathBuf::as_path))
            .filter_map(|d| std::fs::canonicalize(d).ok())
            .collect()
    }
}

impl From<&Path> for FileScope {
    fn from(config_dir: &Path) -> Self {
        Self::new(config_dir)
    }
}

impl From<PathBuf> for FileScope {
    fn from(config_dir: PathBuf) -> Self {
        Self::new(config_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A fresh directory tree: `conf/` (the config directory) with `ok.txt`,
    /// `extra/` (allow-listed) with `more.txt`, and `secret.txt` beside them.
    struct Tree(PathBuf);

    impl Tree {
        fn new(tag: &str) -> Self {
            let root = std::env::temp_dir().join(format!(
                "nfx-confine-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(root.join("conf/sub")).unwrap();
            std::fs::create_dir_all(root.join("extra")).unwrap();
            std::fs::write(root.join("conf/ok.txt"), "fine\n").unwrap();
            std::fs::write(root.join("conf/sub/deep.txt"), "deep\n").unwrap();
            std::fs::write(root.join("extra/more.txt"), "more\n").unwrap();
            std::fs::write(root.join("secret.txt"), "TOP-SECRET-CONTENT\n").unwrap();
            Self(root)
        }

        fn scope(&self) -> FileScope {
            FileScope::new(self.0.join("conf")).with_allowed([self.0.join("extra")])
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn read(s: &FileScope, name: impl AsRef<Path>) -> Result<String, String> {
        s.read_text(name.as_ref(), 1 << 20)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn reads_inside_the_config_directory_and_allowed_directories() {
        let t = Tree::new("inside");
        let s = t.scope();
        assert_eq!(read(&s, "ok.txt").unwrap(), "fine\n");
        assert_eq!(read(&s, "sub/deep.txt").unwrap(), "deep\n");
        assert_eq!(read(&s, "./ok.txt").unwrap(), "fine\n");
        assert_eq!(read(&s, t.0.join("extra/more.txt")).unwrap(), "more\n");
        assert_eq!(read(&s, t.0.join("conf/ok.txt")).unwrap(), "fine\n");
    }

    #[test]
    fn refuses_escapes_absolute_paths_and_symlinks_out() {
        let t = Tree::new("escape");
        let s = t.scope();
        symlink(t.0.join("secret.txt"), t.0.join("conf/link.txt")).unwrap();
        symlink(t.0.join("conf"), t.0.join("extra/back")).unwrap();
        symlink(&t.0, t.0.join("conf/up")).unwrap();
        let cases = [
            ("../secret.txt", "has a `..` component"),
            ("sub/../../secret.txt", "has a `..` component"),
            ("link.txt", "lies outside"),
            ("up/secret.txt", "lies outside"),
            ("/etc/passwd", "lies outside"),
        ];
        for (name, want) in cases {
            let e = read(&s, name).unwrap_err();
            assert!(e.contains(want), "{name}: {e}");
            assert!(!e.contains("TOP-SECRET"), "{name}: {e}");
        }
        let e = read(&s, t.0.join("secret.txt")).unwrap_err();
        assert!(
            e.contains("lies outside") && !e.contains("TOP-SECRET"),
            "{e}"
        );
        // A symlink from an allowed directory into another allowed one is fine.
        assert_eq!(read(&s, t.0.join("extra/back/ok.txt")).unwrap(), "fine\n");
    }

    #[test]
    fn refuses_non_files_large_files_and_binary() {
        let t = Tree::new("kinds");
        let s = t.scope();
        assert!(read(&s, "sub").unwrap_err().contains("not a regular file"));
        assert!(read(&s, "missing.txt").unwrap_err().contains("cannot read"));
        assert!(read(&s, "").unwrap_err().contains("empty"));
        std::fs::write(t.0.join("conf/big.txt"), vec![b'x'; 100]).unwrap();
        let e = s.read_text(Path::new("big.txt"), 99).unwrap_err();
        assert!(e.to_string().contains("larger than the 99 bytes"), "{e}");
        assert_eq!(s.read_text(Path::new("big.txt"), 100).unwrap().len(), 100);
        std::fs::write(t.0.join("conf/bin.txt"), b"a\nb\n\xff\xfe").unwrap();
        let e = read(&s, "bin.txt").unwrap_err();
        assert!(e.contains("line 3 is not UTF-8"), "{e}");
        let fifo = t.0.join("conf/fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(read(&s, "fifo").unwrap_err().contains("not a regular file"));
    }

    #[test]
    fn an_empty_config_directory_is_the_current_one() {
        let s = FileScope::new("");
        assert!(read(&s, "Cargo.toml").unwrap().contains("nfx-io"));
        assert!(read(&s, "/etc/passwd")
            .unwrap_err()
            .contains("lies outside"));
    }
}
