//! Writing report files safely: into a directory identified once (at start), without following
//! a symbolic link anywhere on its path, under an unpredictable temporary name, private by
//! default, and renamed into place so that a reader never sees half a file.
//!
//! [`ReportDir::open`] walks the reporting path one component at a time with
//! `openat(.., O_DIRECTORY | O_NOFOLLOW)`, creating missing components with `mkdirat`, so a
//! symbolic link planted anywhere on the path (in a world-writable `/tmp`, say) is refused, not
//! followed. A relative path is resolved against the working directory at that moment. What is
//! kept is the directory's identity, (absolute path, device, inode), never a descriptor: the
//! program's descriptor table holds nothing of Ying's between reports (a program that counts or
//! closes its descriptors, or lives at its `RLIMIT_NOFILE`, sees only its own). Each operation
//! (a file written, old sets removed) walks the absolute path again the same way and refuses
//! the directory when it is no longer the one identified at start (replaced by another
//! directory or a symbolic link), so a program that calls `chdir` still gets its reports in the
//! same place and a swapped directory gets none. The descriptors of an operation are
//! close-on-exec and closed before it returns. Every file is created with `openat(dirfd, .., O_CREAT | O_EXCL | O_NOFOLLOW)` under a
//! random temporary name (so no file planted in advance can block it), given its mode (0600
//! unless widened by `YING_REPORT_FILE_MODE`), written, then renamed with `renameat`.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

pub(crate) use crate::config::DEFAULT_FILE_MODE;

/// A reporting directory, identified once by (absolute path, device, inode) and opened again
/// for each operation; see the module documentation.
#[derive(Debug)]
pub struct ReportDir {
    /// The directory as an absolute path (walked for each operation; in messages and the
    /// paths returned).
    path: PathBuf,
    /// Device and inode of the directory when it was identified.
    id: (u64, u64),
    /// Mode of the files written.
    file_mode: u32,
    /// Whether [`ReportDir::write_atomic_with`] may replace a file of the same name (see
    /// [`ReportDir::replacing`]); by default it never does.
    replace: bool,
}

fn with_path(e: io::Error, p: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", p.display()))
}

fn cstr(s: &[u8]) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "contains a NUL byte"))
}

/// `openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)`.
fn open_dir_at(dir: RawFd, name: &CString) -> io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `name` is NUL-terminated; `dir` is an open directory or AT_FDCWD.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Device and inode of an open descriptor.
fn file_id(fd: RawFd) -> io::Result<(u64, u64)> {
    // SAFETY: all-zero is a valid `stat`; fstat fills it or fails without touching memory
    // beyond it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer; a bad `fd` makes fstat fail with EBADF.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.st_dev, st.st_ino))
}

/// Whether `name` in directory `at` is a symbolic link (not followed).
fn is_symlink_at(at: RawFd, name: &CString) -> bool {
    // SAFETY: all-zero is a valid `stat`, which fstatat fills; `name` is NUL-terminated and
    // `at` an open directory or AT_FDCWD.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstatat(at, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0
            && st.st_mode & libc::S_IFMT == libc::S_IFLNK
    }
}

/// Opens `path` as a directory without following a symbolic link in any component, creating
/// missing components when `create`. Relative paths start at the working directory.
fn open_no_follow(path: &Path, create: bool) -> io::Result<OwnedFd> {
    let mut cur: Option<OwnedFd> = None;
    let mut walked = PathBuf::new();
    for comp in path.components() {
        let name: &[u8] = match comp {
            Component::RootDir => b"/",
            Component::CurDir => b".",
            Component::ParentDir => b"..",
            Component::Normal(n) => n.as_encoded_bytes(),
            Component::Prefix(_) => continue,
        };
        walked.push(comp);
        let c = cstr(name).map_err(|e| with_path(e, &walked))?;
        let at = cur.as_ref().map_or(libc::AT_FDCWD, |f| f.as_raw_fd());
        let next = match open_dir_at(at, &c) {
            Err(e) if create && e.raw_os_error() == Some(libc::ENOENT) => {
                // SAFETY: `c` is NUL-terminated; `at` is an open directory or AT_FDCWD.
                let made = unsafe { libc::mkdirat(at, c.as_ptr(), 0o777) };
                let err = io::Error::last_os_error();
                if made != 0 && err.raw_os_error() != Some(libc::EEXIST) {
                    return Err(with_path(err, &walked));
                }
                open_dir_at(at, &c)
            }
            other => other,
        };
        cur = Some(next.map_err(|e| match e.raw_os_error() {
            // O_DIRECTORY | O_NOFOLLOW on a link fails with ENOTDIR (or ELOOP): say which.
            Some(libc::ELOOP | libc::ENOTDIR) if is_symlink_at(at, &c) => io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is a symbolic link (not followed on the reporting path)",
                    walked.display()
                ),
            ),
            Some(libc::ENOTDIR) => io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", walked.display()),
            ),
            _ => with_path(e, &walked),
        })?);
    }
    match cur {
        Some(fd) => Ok(fd),
        None => Err(io::Error::new(io::ErrorKind::InvalidInput, "empty reporting path")),
    }
}

/// 64 unpredictable bits for a temporary name (the kernel's generator; the clock and a counter
/// if it is unavailable).
pub(crate) fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: `v` is a valid 8-byte buffer; GRND_NONBLOCK never waits.
    let n = unsafe { libc::getrandom((&raw mut v).cast(), 8, libc::GRND_NONBLOCK) };
    if n == 8 {
        return v;
    }
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let s = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (t ^ s.rotate_left(32) ^ std::process::id() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

impl ReportDir {
    /// Opens the directory `path` (created if missing), relative to the working directory now
    /// unless absolute, refusing any symbolic link on the way; files written into it get
    /// `file_mode` (permission bits only).
    pub fn open(path: &Path, file_mode: u32) -> io::Result<Self> {
        if path.as_os_str().is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty reporting path"));
        }
        let abs = if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::env::current_dir().map(|d| d.join(path)).unwrap_or_else(|_| path.to_path_buf())
        };
        // Walked from the absolute path (the same walk every later operation makes).
        let fd = open_no_follow(&abs, true)?;
        let id = file_id(fd.as_raw_fd()).map_err(|e| with_path(e, &abs))?;
        // Closed here: nothing of Ying's stays in the program's descriptor table.
        drop(fd);
        Ok(Self { path: abs, id, file_mode: file_mode & 0o777, replace: false })
    }

    /// The same directory, its writes allowed to replace files of the same name: for a file
    /// its writer owns and rewrites (a path the caller chose, a set's raw files named by
    /// `ying report`). By default a write never replaces a file it did not write.
    pub(crate) fn replacing(mut self) -> Self {
        self.replace = true;
        self
    }

    /// The directory's absolute path (as opened; its components are real directories).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The mode of the files written.
    pub fn file_mode(&self) -> u32 {
        self.file_mode
    }

    /// Whether the calling process may create files in the directory (`faccessat`).
    pub fn writable(&self) -> io::Result<()> {
        let d = self.checked_fd()?;
        // SAFETY: `d` is an open directory; "." names it.
        if unsafe { libc::faccessat(d.as_raw_fd(), c".".as_ptr(), libc::W_OK | libc::X_OK, 0) } != 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The directory opened for one operation (close-on-exec, closed when dropped), walked from
    /// its absolute path without following a symbolic link and checked to be the directory
    /// identified at start. Errors name the path and say what is wrong, on one line.
    fn checked_fd(&self) -> io::Result<OwnedFd> {
        let fd = open_no_follow(&self.path, false)?;
        if file_id(fd.as_raw_fd()).map_err(|e| with_path(e, &self.path))? != self.id {
            return Err(io::Error::other(format!(
                "{} is no longer the directory identified at start (replaced by another); \
                 nothing is written there",
                self.path.display()
            )));
        }
        Ok(fd)
    }

    /// Bytes free to unprivileged writers in the directory's filesystem, and the filesystem's
    /// size (`fstatvfs`).
    pub(crate) fn space(&self) -> io::Result<(u64, u64)> {
        let fd = self.checked_fd()?;
        // SAFETY: an all-zero statvfs is a valid value for fstatvfs to fill; `fd` is open.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(with_path(io::Error::last_os_error(), &self.path));
        }
        Ok((st.f_bavail.saturating_mul(st.f_frsize), st.f_blocks.saturating_mul(st.f_frsize)))
    }

    /// Sets the modification time of the file `name` (one path component) in this directory
    /// to now, without following a symbolic link (the live file's heartbeat).
    pub(crate) fn touch(&self, name: &str) -> io::Result<()> {
        let fd = self.checked_fd()?;
        let c = cstr(name.as_bytes())?;
        // SAFETY: `fd` is an open directory, `c` a NUL-terminated name; a null `times` sets
        // both times to now.
        let rc = unsafe {
            libc::utimensat(fd.as_raw_fd(), c.as_ptr(), std::ptr::null(), libc::AT_SYMLINK_NOFOLLOW)
        };
        if rc != 0 {
            return Err(with_path(io::Error::last_os_error(), &self.path.join(name)));
        }
        Ok(())
    }

    /// Removes the file `name` (one path component) from this directory; a missing file is
    /// not an error.
    pub(crate) fn remove(&self, name: &str) -> io::Result<()> {
        let fd = self.checked_fd()?;
        let c = cstr(name.as_bytes())?;
        // SAFETY: `fd` is an open directory and `c` a NUL-terminated name.
        if unsafe { libc::unlinkat(fd.as_raw_fd(), c.as_ptr(), 0) } != 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::NotFound {
                return Err(with_path(e, &self.path.join(name)));
            }
        }
        Ok(())
    }

    /// Writes `bytes` to the file `name` (one path component) in this directory atomically.
    /// Errors name the path at fault.
    pub fn write_atomic(&self, name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
        self.write_atomic_with(name, |w| w.write_all(bytes))
    }

    /// Writes the file `name` (one path component) in this directory atomically with what
    /// `write` writes to it, through a buffer: the file does not have to be held in memory
    /// first. A file already named so is not replaced (an error saying so) unless the
    /// directory is [`ReportDir::replacing`]: two processes whose names collide, or `ying
    /// report` and the process, never overwrite each other's files. Errors name the path at
    /// fault.
    pub fn write_atomic_with(
        &self,
        name: &str,
        write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<PathBuf> {
        self.write_into(name, self.replace, write)
    }

    /// [`ReportDir::write_atomic_with`] for a file this process owns and rewrites (its live
    /// file, its HTML page): the last version is replaced.
    pub(crate) fn rewrite_atomic_with(
        &self,
        name: &str,
        write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<PathBuf> {
        self.write_into(name, true, write)
    }

    fn write_into(
        &self,
        name: &str,
        replace: bool,
        write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<PathBuf> {
        let target = self.path.join(name);
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            let e = io::Error::new(io::ErrorKind::InvalidInput, "not a file name");
            return Err(with_path(e, &target));
        }
        let dir = self.checked_fd()?;
        let dir = dir.as_raw_fd();
        let target_c = cstr(name.as_bytes())?;
        let (tmp, tmp_c, file) = self.create_temp(dir, name)?;
        let mut out = io::BufWriter::with_capacity(64 << 10, file);
        let res = write(&mut out).and_then(|_| out.flush());
        drop(out);
        let unlink = || {
            // SAFETY: `tmp_c` is NUL-terminated; `dir` is an open directory.
            unsafe { libc::unlinkat(dir, tmp_c.as_ptr(), 0) };
        };
        if let Err(e) = res {
            unlink();
            return Err(with_path(e, &tmp));
        }
        let renamed = if replace {
            // SAFETY: both names are NUL-terminated and relative to the same open directory.
            match unsafe { libc::renameat(dir, tmp_c.as_ptr(), dir, target_c.as_ptr()) } {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            }
        } else {
            rename_no_replace(dir, &tmp_c, &target_c)
        };
        if let Err(e) = renamed {
            unlink();
            let e = match e.raw_os_error() {
                Some(libc::EEXIST) => io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "a file of that name exists (another process's?): not replaced",
                ),
                _ => e,
            };
            return Err(with_path(e, &target));
        }
        Ok(target)
    }

    /// Creates a fresh temporary file for `name` with an unpredictable name and this
    /// directory's file mode (exactly, whatever the umask).
    fn create_temp(&self, dir: RawFd, name: &str) -> io::Result<(PathBuf, CString, File)> {
        let only = ONLY_WRITER.load(Ordering::SeqCst);
        if only != 0 && only != crate::sys::gettid() {
            return Err(io::Error::other(
                "the process is exiting: its exit report is being written",
            ));
        }
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        let mut last = None;
        for _ in 0..16 {
            let tmp_name = format!(".{name}.{:016x}.tmp", random_u64());
            let tmp = self.path.join(&tmp_name);
            let c = cstr(tmp_name.as_bytes())?;
            // SAFETY: `c` is NUL-terminated; `dir` is an open directory; the mode argument is
            // read because O_CREAT is given.
            let fd =
                unsafe { libc::openat(dir, c.as_ptr(), flags, self.file_mode as libc::c_uint) };
            if fd < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EEXIST) {
                    last = Some(with_path(e, &tmp));
                    continue;
                }
                return Err(with_path(e, &tmp));
            }
            // SAFETY: `fd` was just opened and is owned by nobody else.
            let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
            // SAFETY: `fd` is open (owned by `file`).
            if unsafe { libc::fchmod(fd, self.file_mode as libc::mode_t) } != 0 {
                let e = io::Error::last_os_error();
                drop(file);
                // SAFETY: as above.
                unsafe { libc::unlinkat(dir, c.as_ptr(), 0) };
                return Err(with_path(e, &tmp));
            }
            return Ok((tmp, c, file));
        }
        Err(last.unwrap_or_else(|| io::Error::other("no temporary name")))
    }
}

/// Renames `tmp` to `target` in `dir` unless `target` exists (`EEXIST` then):
/// `renameat2(RENAME_NOREPLACE)`, or where the filesystem lacks it (`EINVAL`: some network
/// and FUSE filesystems) a hard link then the temporary name's removal, which fails the same
/// way. The temporary file stays on an error (the caller removes it).
fn rename_no_replace(dir: RawFd, tmp: &CString, target: &CString) -> io::Result<()> {
    // SAFETY: both names are NUL-terminated and relative to the same open directory; the
    // syscall reads them and nothing else.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            dir,
            tmp.as_ptr(),
            dir,
            target.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) {
        return Err(e);
    }
    // SAFETY: as above; linkat does not follow `tmp` (no AT_SYMLINK_FOLLOW).
    if unsafe { libc::linkat(dir, tmp.as_ptr(), dir, target.as_ptr(), 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `tmp` is NUL-terminated; the file stays under `target`.
    unsafe { libc::unlinkat(dir, tmp.as_ptr(), 0) };
    Ok(())
}

/// The thread that alone may still create report files (0: any thread): set by the exit path
/// when it gives up waiting for a dump of another thread, see [`ReportDir::abandon_others`].
static ONLY_WRITER: AtomicU32 = AtomicU32::new(0);

impl ReportDir {
    /// The exit path gave up waiting for a dump of another thread (which `_exit` will cut
    /// off): from now on only the calling thread creates files, and this process's temporary
    /// files already in the directory (`.ying.<exe>.<pid>.*.tmp`, the abandoned dump's) are
    /// removed, so that none is left behind. Returns how many were removed.
    pub fn abandon_others(&self, exe: &str, process: super::ProcessId) -> io::Result<usize> {
        ONLY_WRITER.store(crate::sys::gettid(), Ordering::SeqCst);
        let dir = self.checked_fd().map_err(|e| with_path(e, &self.path))?;
        let dir = dir.as_raw_fd();
        let prefix = format!(".ying.{exe}.{process}.");
        let mut removed = 0;
        for name in Self::names_at(dir).map_err(|e| with_path(e, &self.path))? {
            if name.starts_with(&prefix) && name.ends_with(".tmp") {
                let c = cstr(name.as_bytes())?;
                // SAFETY: `c` is NUL-terminated; `dir` is an open directory (held above).
                if unsafe { libc::unlinkat(dir, c.as_ptr(), 0) } == 0 {
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }

    /// The names of the directory's entries (`.` and `..` left out), read through the open
    /// directory `dir`.
    /// Whether a file whose name starts with `stem` and a dot is in the directory (a set's file
    /// someone else put there first: the set takes another number).
    pub(crate) fn has_set_file(&self, stem: &str) -> bool {
        let Ok(dir) = self.checked_fd() else { return false };
        let prefix = format!("{stem}.");
        Self::names_at(dir.as_raw_fd())
            .is_ok_and(|names| names.iter().any(|n| n.starts_with(&prefix)))
    }

    fn names_at(dir: RawFd) -> io::Result<Vec<String>> {
        Ok(crate::sys::dir::entries_at(dir, c".")?.into_iter().map(|e| e.name).collect())
    }

    /// Removes the oldest report sets of the process `exe` (its file name as it appears in
    /// report names) `process` (pid and instance) so that at most `keep` of its sets remain, every file of each
    /// set removed (see [`set_seq_of`]), and returns how many sets were removed. Only names of
    /// that process's sets are touched: other processes' sets, temporary files and anything
    /// else stay. Works on the directory identified at start (`unlinkat`, which removes a symbolic
    /// link itself, never what it points to). Errors name the first file that could not be
    /// removed; the others are still attempted.
    pub fn remove_old_sets(
        &self,
        exe: &str,
        process: super::ProcessId,
        keep: usize,
    ) -> io::Result<usize> {
        let dir = self.checked_fd()?;
        let dir = dir.as_raw_fd();
        let mut sets: std::collections::BTreeMap<u64, Vec<String>> = Default::default();
        for name in Self::names_at(dir).map_err(|e| with_path(e, &self.path))? {
            if let Some(seq) = set_seq_of(&name, exe, process) {
                sets.entry(seq).or_default().push(name);
            }
        }
        let excess = sets.len().saturating_sub(keep);
        let mut first_err = None;
        for (_, names) in sets.into_iter().take(excess) {
            for name in names {
                let c = cstr(name.as_bytes())?;
                // SAFETY: `c` is NUL-terminated; `dir` is an open directory.
                if unsafe { libc::unlinkat(dir, c.as_ptr(), 0) } != 0 {
                    let e = io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::ENOENT) && first_err.is_none() {
                        first_err = Some(with_path(e, &self.path.join(&name)));
                    }
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(excess),
        }
    }
}

/// How much of one executable's output a reporting directory keeps across its processes
/// (`YING_RETAIN_SETS`, `YING_RETAIN_BYTES`; 0 is no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retention {
    /// Report sets and live files.
    pub(crate) sets: usize,
    /// Their bytes.
    pub(crate) bytes: u64,
}

/// What one retention pass removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retained {
    /// Report sets of ended processes.
    pub(crate) sets: usize,
    /// Live files of dead processes.
    pub(crate) live_files: usize,
    /// Temporary files left by dead processes or crashes.
    pub(crate) temporary: usize,
}

/// A temporary file older than this is taken for a leftover whatever its name says: no write
/// of Ying's lasts that long, and a file being written has its modification time moved by
/// every write.
const TEMP_MAX_AGE_SECS: i64 = 3600;
/// A temporary file of a process that does not exist (here: it may be another pid namespace's,
/// writing now) is a leftover once this old.
const TEMP_DEAD_AGE_SECS: i64 = 60;

/// One thing retention keeps or removes: a report set (every file of it) or a live file, of
/// one process.
#[derive(Debug)]
struct Output {
    process: super::ProcessId,
    /// The newest modification time of its files, seconds.
    mtime: i64,
    bytes: u64,
    names: Vec<String>,
    live: bool,
}

/// Modification time (seconds) and size of `name` in `dir`, not following a link.
fn stat_at(dir: RawFd, name: &str) -> Option<(i64, u64)> {
    let c = cstr(name.as_bytes()).ok()?;
    // SAFETY: an all-zero `stat` is a valid value for fstatat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is an open directory, `c` NUL-terminated, `st` writable.
    (unsafe { libc::fstatat(dir, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } == 0)
        .then_some((st.st_mtime, st.st_size as u64))
}

/// The process a temporary file's name says wrote it: `.<file>.<16 hex digits>.tmp`, where
/// `<file>` is a set's file, a live file or a page (`ying.<exe>.<pid>...`).
fn temp_pid(name: &str) -> Option<u32> {
    let inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (file, random) = inner.rsplit_once('.')?;
    if random.len() != 16 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    if let Some((set, _)) = super::SetName::parse_file(file) {
        return Some(set.pid);
    }
    // `ying.<exe>.<pid>-<instance>.live` or `.html`.
    process_file(file).map(|(_, p, _)| p.pid)
}

/// The process a live file or page is of, and whether it is the live file:
/// `ying.<exe>.<pid>-<instance>.live` or `.html` (or `ying.<exe>.<pid>.live`, from before
/// instances).
fn process_file(name: &str) -> Option<(&str, super::ProcessId, bool)> {
    let (stem, live) = match (name.strip_suffix(".live"), name.strip_suffix(".html")) {
        (Some(s), _) => (s, true),
        (_, Some(s)) => (s, false),
        _ => return None,
    };
    let (exe, process) = stem.strip_prefix("ying.")?.rsplit_once('.')?;
    Some((exe, process.parse().ok()?, live))
}

/// Whether a process with this pid exists (in this pid namespace).
fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Seconds since the epoch, now.
fn now_secs() -> i64 {
    crate::sys::clock::wall()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl ReportDir {
    /// Removes the temporary file `name` of `dir` (this directory, open) when it is a
    /// leftover: older than an hour, or older than a minute and written by a process that does
    /// not exist (`alive` tells). Returns whether it was removed.
    fn remove_if_leftover(
        &self,
        dir: RawFd,
        name: &str,
        now: i64,
        alive: &mut impl FnMut(u32) -> bool,
    ) -> bool {
        let Some((mtime, _)) = stat_at(dir, name) else { return false };
        let age = now - mtime;
        let leftover = age > TEMP_MAX_AGE_SECS
            || (age > TEMP_DEAD_AGE_SECS && temp_pid(name).is_some_and(|p| !alive(p)));
        leftover && self.remove(name).is_ok()
    }

    /// Removes the temporary files that dead processes or crashes left in this directory (see
    /// [`ReportDir::retain`]) and returns how many (`ying view`, which writes in the directory
    /// too, tidies it this way).
    pub fn remove_leftovers(&self) -> io::Result<usize> {
        let dir = self.checked_fd()?;
        let dir = dir.as_raw_fd();
        let now = now_secs();
        let mut removed = 0;
        for name in Self::names_at(dir).map_err(|e| with_path(e, &self.path))? {
            if name.ends_with(".tmp") && self.remove_if_leftover(dir, &name, now, &mut pid_alive) {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Keeps the output of executable `exe` in this directory within `keep` across its
    /// processes: while its report sets and live files together number more than `keep.sets`
    /// or weigh more than `keep.bytes`, the oldest one of an ended process (by its newest
    /// file's modification time) is removed, every file of a set; the page of a process with
    /// nothing left goes too. A process that exists (this one, `me`, among them) keeps all of
    /// its output: its own sets are bounded by its `YING_MAX_REPORT_SETS`. Temporary files
    /// that a dead process or a crash left (of any executable) are removed: those of a
    /// process that does not exist once a minute old, any once an hour old.
    ///
    /// A pid is looked up in this process's pid namespace: another namespace's process
    /// writing in the same directory counts as ended (its oldest sets may be removed, never
    /// its temporary files while it writes them, nor its live file while its heartbeat moves
    /// it). A live file of an ended process that no set was written from since (a heap at
    /// death nobody read yet) is removed last, only when every set and read live file of
    /// ended processes is gone and the output is still over `keep`.
    pub(crate) fn retain(
        &self,
        exe: &str,
        me: super::ProcessId,
        keep: Retention,
    ) -> io::Result<Retained> {
        let dir = self.checked_fd()?;
        let dir = dir.as_raw_fd();
        let names = Self::names_at(dir).map_err(|e| with_path(e, &self.path))?;
        let now = now_secs();
        let alive: std::cell::RefCell<std::collections::HashMap<u32, bool>> = Default::default();
        let pid_alive_at = |pid: u32| {
            *alive.borrow_mut().entry(pid).or_insert_with(|| pid == me.pid || pid_alive(pid))
        };
        // A process with this process's pid but another instance ended before it started (or
        // runs in another pid namespace: counted as ended, as above).
        let alive_at = |p: super::ProcessId| match p.pid == me.pid {
            true => p.instance == me.instance,
            false => pid_alive_at(p.pid),
        };
        let mut done = Retained::default();
        let mut sets: std::collections::BTreeMap<(super::ProcessId, u64), Output> =
            Default::default();
        let mut outputs = Vec::new();
        let mut pages = Vec::new();
        for name in names {
            if name.ends_with(".tmp") {
                if self.remove_if_leftover(dir, &name, now, &mut |p| pid_alive_at(p)) {
                    done.temporary += 1;
                }
                continue;
            }
            if let Some((set, ext)) = super::SetName::parse_file(&name) {
                if set.exe != exe || !SET_EXTENSIONS.contains(&ext) {
                    continue;
                }
                let Some((mtime, bytes)) = stat_at(dir, &name) else { continue };
                let o = sets.entry((set.process(), set.seq)).or_insert_with(|| Output {
                    process: set.process(),
                    mtime,
                    bytes: 0,
                    names: Vec::new(),
                    live: false,
                });
                o.mtime = o.mtime.max(mtime);
                o.bytes += bytes;
                o.names.push(name);
                continue;
            }
            // `ying.<exe>.<process>.live` or `.html` of this executable.
            let Some((of, process, live)) = process_file(&name) else { continue };
            if of != exe {
                continue;
            }
            if !live {
                let Some((_, bytes)) = stat_at(dir, &name) else { continue };
                pages.push((process, name, bytes));
                continue;
            }
            let Some((mtime, bytes)) = stat_at(dir, &name) else { continue };
            outputs.push(Output { process, mtime, bytes, names: vec![name], live: true });
        }
        outputs.extend(sets.into_values());
        // A live file whose process ended and that no set was written from since (its heap at
        // death, not read yet) goes last, after every set and every read live file.
        let unread: Vec<bool> = outputs
            .iter()
            .map(|o| {
                o.live
                    && !outputs
                        .iter()
                        .any(|s| !s.live && s.process == o.process && s.mtime >= o.mtime)
            })
            .collect();
        let mut outputs: Vec<(bool, Output)> = unread.into_iter().zip(outputs).collect();
        // Oldest first; a set and its process's live file of the same second: the set first.
        outputs.sort_by_key(|(unread, o)| (*unread, o.mtime, o.live));
        let outputs: Vec<Output> = outputs.into_iter().map(|(_, o)| o).collect();
        // A page counts with its process's output and goes with the last of it.
        let mut count = outputs.len();
        let mut bytes = outputs.iter().map(|o| o.bytes).sum::<u64>()
            + pages.iter().map(|(_, _, b)| b).sum::<u64>();
        let over = |count: usize, bytes: u64| {
            (keep.sets > 0 && count > keep.sets) || (keep.bytes > 0 && bytes > keep.bytes)
        };
        let mut kept_by: std::collections::HashMap<super::ProcessId, usize> = Default::default();
        for o in &outputs {
            *kept_by.entry(o.process).or_default() += 1;
        }
        for o in &outputs {
            if !over(count, bytes) {
                break;
            }
            // A live file moved within [`LIVE_FRESH`] may be a running process's that this
            // one cannot see (another pid namespace): its heartbeat says it is alive.
            if alive_at(o.process) || (o.live && now - o.mtime < LIVE_FRESH) {
                continue;
            }
            for name in &o.names {
                let _ = self.remove(name);
            }
            count -= 1;
            bytes = bytes.saturating_sub(o.bytes);
            if o.live {
                done.live_files += 1;
            } else {
                done.sets += 1;
            }
            let n = kept_by.entry(o.process).or_default();
            *n = n.saturating_sub(1);
            if *n == 0 {
                if let Some((_, name, b)) = pages.iter().find(|(p, _, _)| *p == o.process) {
                    let _ = self.remove(name);
                    bytes = bytes.saturating_sub(*b);
                }
            }
        }
        // The page of an ended process with no set or live file left (before this pass too).
        for (process, name, _) in &pages {
            if !kept_by.contains_key(process) && !alive_at(*process) {
                let _ = self.remove(name);
            }
        }
        Ok(done)
    }
}

/// A live file modified this recently (seconds) may be a running process's: its versions
/// and its heartbeat (every 5 s) move its modification time while the process lives.
const LIVE_FRESH: i64 = 60;

/// The extensions of a report set's files (see [`crate::report`]).
pub(crate) const SET_EXTENSIONS: [&str; 9] =
    ["txt", "svg", "folded", "pb.gz", "peak.svg", "peak.folded", "peak.pb.gz", "json", "live"];

/// The sequence number of the report set `name` belongs to, when it is a file of a set of the
/// process `exe` (the executable's file name as report names carry it) `process`:
/// `ying.<exe>.<pid>-<instance>.<seq>.<yyyymmddThhmmssZ>.<ext>` with `<ext>` one of
/// [`SET_EXTENSIONS`]. Anything else, a temporary file or a set of another process with the
/// same pid (another instance) included, is `None`.
pub(crate) fn set_seq_of(name: &str, exe: &str, process: super::ProcessId) -> Option<u64> {
    let (set, ext) = super::SetName::parse_file(name)?;
    (set.exe == exe && set.process() == process && SET_EXTENSIONS.contains(&ext)).then_some(set.seq)
}

/// Where [`write_atomic`] writes: an identified [`ReportDir`], or a directory path opened for the one
/// file (created if missing, relative to the working directory now, [`DEFAULT_FILE_MODE`]).
pub(crate) trait ReportTarget {
    /// Writes `bytes` to the file `name` atomically.
    fn write_file(&self, name: &str, bytes: &[u8]) -> io::Result<PathBuf>;
}

impl ReportTarget for ReportDir {
    fn write_file(&self, name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
        self.write_atomic(name, bytes)
    }
}

impl ReportTarget for Path {
    /// A path the caller chose: the file there is replaced.
    fn write_file(&self, name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
        ReportDir::open(self, DEFAULT_FILE_MODE)?.replacing().write_atomic(name, bytes)
    }
}

impl ReportTarget for PathBuf {
    fn write_file(&self, name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
        self.as_path().write_file(name, bytes)
    }
}

/// Writes `bytes` to the file `name` in `dir` atomically (see [`ReportTarget`]).
pub(crate) fn write_atomic<T: ReportTarget + ?Sized>(
    dir: &T,
    name: &str,
    bytes: &[u8],
) -> io::Result<PathBuf> {
    dir.write_file(name, bytes)
}

/// Makes a name safe as one path component: anything but `[A-Za-z0-9._-]` becomes `_`, at most
/// 64 characters, never empty or a dot name.
pub(crate) fn sanitize_component(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .take(64)
        .collect();
    if out.is_empty() || out.chars().all(|c| c == '.') {
        out = "unknown".to_string();
    }
    out
}

#[cfg(test)]
mod tests {
    /// A process as names written before instances carry it.
    fn old(pid: u32) -> crate::report::ProcessId {
        crate::report::ProcessId { pid, instance: None }
    }

    use super::*;

    #[test]
    fn writes_and_replaces_atomically_and_leaves_no_temp() {
        let dir = std::env::temp_dir().join(format!("ying-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = write_atomic(&dir, "a.txt", b"one").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        write_atomic(&dir, "a.txt", b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A reporting directory's writes never replace a file of the same name (a file planted,
    /// or another process's), and leave no temporary file; a replacing one, and a file the
    /// process rewrites, do.
    #[test]
    fn a_write_never_replaces_a_file_it_did_not_write() {
        let dir = std::env::temp_dir().join(format!("ying-noreplace-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let d = ReportDir::open(&dir, DEFAULT_FILE_MODE).unwrap();
        std::fs::write(dir.join("set.txt"), b"another process's").unwrap();
        let e = d.write_atomic("set.txt", b"mine").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(e.to_string().contains("set.txt") && e.to_string().contains("not replaced"), "{e}");
        assert_eq!(std::fs::read(dir.join("set.txt")).unwrap(), b"another process's");
        let p = d.rewrite_atomic_with("set.live", |w| w.write_all(b"v1")).unwrap();
        d.rewrite_atomic_with("set.live", |w| w.write_all(b"v2")).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"v2");
        let d = d.replacing();
        d.write_atomic("set.txt", b"named").unwrap();
        assert_eq!(std::fs::read(dir.join("set.txt")).unwrap(), b"named");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["set.live", "set.txt"], "a temporary file left");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn planted_symlink_is_replaced_not_followed() {
        let dir = std::env::temp_dir().join(format!("ying-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("r.txt")).unwrap();
        write_atomic(&dir, "r.txt", b"report").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(dir.join("r.txt")).unwrap(), b"report");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_link_anywhere_on_the_path_is_refused_and_nothing_is_created_through_it() {
        let dir = std::env::temp_dir().join(format!("ying-midlink-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("real")).unwrap();
        std::os::unix::fs::symlink(dir.join("real"), dir.join("link")).unwrap();
        let e = ReportDir::open(&dir.join("link/sub"), DEFAULT_FILE_MODE).unwrap_err();
        assert!(e.to_string().contains("link is a symbolic link"), "{e}");
        let e = ReportDir::open(&dir.join("link"), DEFAULT_FILE_MODE).unwrap_err();
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        assert_eq!(std::fs::read_dir(dir.join("real")).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn files_get_the_mode_asked_for_and_temporary_names_are_random() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ying-mode-{}", std::process::id()));
        let d = ReportDir::open(&dir.join("a/b"), 0o640).unwrap();
        assert!(d.path().is_absolute());
        let p = d.write_atomic("r.txt", b"x").unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o640);
        let p = write_atomic(dir.as_path(), "s.txt", b"y").unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        assert_ne!(random_u64(), random_u64());
        assert!(d.write_atomic("../escape", b"z").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn set_names_of_this_process_only() {
        let ts = "20261203T181500Z";
        assert_eq!(set_seq_of(&format!("ying.app.42.7.{ts}.txt"), "app", old(42)), Some(7));
        assert_eq!(set_seq_of(&format!("ying.app.42.0.{ts}.peak.pb.gz"), "app", old(42)), Some(0));
        assert_eq!(set_seq_of(&format!("ying.a.b.42.3.{ts}.svg"), "a.b", old(42)), Some(3));
        for other in [
            format!("ying.app.43.7.{ts}.txt"),     // another pid
            format!("ying.app.420.7.{ts}.txt"),    // another pid sharing a prefix
            format!("ying.app2.42.7.{ts}.txt"),    // another executable
            format!("ying.a.b.42.3.{ts}.svg"),     // exe "a", pid "b": not ours
            format!("ying.app.42.7.{ts}.txt.bak"), // not a set's extension
            format!("ying.app.42.07.{ts}.txt"),    // not a sequence number we write
            format!(".ying.app.42.7.{ts}.txt.0123456789abcdef.tmp"),
            format!("ying.app.42.x.{ts}.txt"),
            "ying.app.42.7.2026.txt".to_string(),
            "notes.txt".to_string(),
        ] {
            let exe = if other.starts_with("ying.a.b") { "a" } else { "app" };
            assert_eq!(set_seq_of(&other, exe, old(42)), None, "{other}");
        }
    }

    /// Retention across processes: the oldest output of ended processes goes first (sets and
    /// live files counted alike), running processes keep everything, other executables and
    /// files are untouched; leftover temporary files go by their writer and their age.
    #[test]
    fn retention_removes_the_oldest_output_of_ended_processes() {
        let dir = std::env::temp_dir().join(format!("ying-retain-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let d = ReportDir::open(&dir, DEFAULT_FILE_MODE).unwrap();
        let me = std::process::id();
        // Pids no process has (above any pid_max in use here), and pid 1, which runs.
        let dead: Vec<u32> = (0..4)
            .map(|i| 4_194_100 + i)
            .filter(|p| !Path::new(&format!("/proc/{p}")).exists())
            .collect();
        assert_eq!(dead.len(), 4);
        let t0 = std::time::SystemTime::now() - std::time::Duration::from_secs(5000);
        let at = |secs: u64| t0 + std::time::Duration::from_secs(secs);
        let put = |name: &str, when: std::time::SystemTime| {
            let p = d.write_atomic(name, b"0123456789").unwrap();
            File::options().write(true).open(&p).unwrap().set_modified(when).unwrap();
        };
        let ts = "20261207T101500Z";
        let set = |pid: u32, seq: u64, when| {
            for ext in ["txt", "pb.gz", "json"] {
                put(&format!("ying.app.{pid}.{seq}.{ts}.{ext}"), when);
            }
        };
        // Oldest first: dead[0]'s two sets, dead[1]'s live file, pid 1's set (running),
        // dead[2]'s set, this process's set, dead[3]'s set.
        set(dead[0], 0, at(10));
        set(dead[0], 1, at(20));
        put(&format!("ying.app.{}.html", dead[0]), at(20));
        put(&format!("ying.app.{}.live", dead[1]), at(30));
        set(1, 0, at(40));
        set(dead[2], 0, at(50));
        set(me, 0, at(60));
        set(dead[3], 0, at(70));
        // Another executable's, and not a set's.
        set(dead[0], 5, at(1)); // renamed below to another executable
        for ext in ["txt", "pb.gz", "json"] {
            std::fs::rename(
                dir.join(format!("ying.app.{}.5.{ts}.{ext}", dead[0])),
                dir.join(format!("ying.other.{}.5.{ts}.{ext}", dead[0])),
            )
            .unwrap();
        }
        put("notes.txt", at(0));
        // Temporary files: a dead writer's old and young, a running writer's old and young.
        let tmp = |file: &str, secs_ago: u64| {
            let name = format!(".{file}.0123456789abcdef.tmp");
            put(&name, std::time::SystemTime::now() - std::time::Duration::from_secs(secs_ago));
            name
        };
        let dead_old = tmp(&format!("ying.app.{}.2.{ts}.txt", dead[0]), 120);
        let dead_young = tmp(&format!("ying.zz.{}.live", dead[1]), 5);
        let alive_old = tmp(&format!("ying.app.{me}.html"), 7200);
        let alive_young = tmp(&format!("ying.app.{me}.3.{ts}.svg"), 120);

        // 7 outputs of `app`, keep 3: dead[0]'s two sets, dead[2]'s and dead[3]'s go (pid 1's,
        // running, stays although older than dead[2]'s); dead[1]'s live file, a heap at death
        // nobody read, goes last and is not reached.
        let done = d.retain("app", old(me), Retention { sets: 3, bytes: 0 }).unwrap();
        assert_eq!(done, Retained { sets: 4, live_files: 0, temporary: 2 });
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut expect: Vec<String> = vec!["notes.txt".into(), dead_young, alive_young];
        expect.push(format!("ying.app.{}.live", dead[1]));
        for (pid, seq, exe) in [(1, 0, "app"), (me, 0, "app"), (dead[0], 5, "other")] {
            for ext in ["txt", "pb.gz", "json"] {
                expect.push(format!("ying.{exe}.{pid}.{seq}.{ts}.{ext}"));
            }
        }
        expect.sort();
        assert_eq!(
            left, expect,
            "dead[0]'s page went with its sets, {dead_old} and {alive_old} by age"
        );
        // By bytes: each set is 30 bytes, the live file 10; 60 bytes keep two sets, and only
        // the unread live file may go, now that no set of an ended process is left.
        let done = d.retain("app", old(me), Retention { sets: 0, bytes: 60 }).unwrap();
        assert_eq!((done.sets, done.live_files), (0, 1));
        assert!(dir.join(format!("ying.app.1.0.{ts}.txt")).exists());
        // A live file read (a set of its process written after it) goes before an older set;
        // one moved within a minute (a running process's, perhaps in another pid namespace)
        // never goes.
        put(&format!("ying.app.{}.live", dead[0]), at(100));
        set(dead[0], 7, at(110));
        put(&format!("ying.app.{}.live", dead[1]), at(90));
        put(&format!("ying.app.{}.live", dead[2]), std::time::SystemTime::now());
        let done = d.retain("app", old(me), Retention { sets: 2, bytes: 0 }).unwrap();
        assert_eq!(
            (done.sets, done.live_files),
            (1, 2),
            "dead[0]'s read live file and set, then dead[1]'s, and not dead[2]'s"
        );
        assert!(dir.join(format!("ying.app.{}.live", dead[2])).exists(), "a fresh live file went");
        // No limits: nothing more goes.
        assert_eq!(
            d.retain("app", old(me), Retention { sets: 0, bytes: 0 }).unwrap(),
            Retained::default()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn temporary_names_tell_their_writer() {
        let ts = "20261207T101500Z";
        assert_eq!(
            temp_pid(&format!(".ying.a.b.42.3.{ts}.peak.svg.0123456789abcdef.tmp")),
            Some(42)
        );
        assert_eq!(temp_pid(".ying.python3.11.7.live.0123456789abcdef.tmp"), Some(7));
        assert_eq!(temp_pid(".ying.app.9.html.0123456789abcdef.tmp"), Some(9));
        assert_eq!(temp_pid(".ying.app.9.html.0123.tmp"), None);
        assert_eq!(temp_pid("ying.app.9.html"), None);
        assert_eq!(temp_pid(".notes.txt.0123456789abcdef.tmp"), None);
    }

    #[test]
    fn removes_the_oldest_sets_of_this_process_only() {
        let dir = std::env::temp_dir().join(format!("ying-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let d = ReportDir::open(&dir, DEFAULT_FILE_MODE).unwrap();
        let ts = "20261203T181500Z";
        let mut expect_kept = vec!["notes.txt".to_string(), format!("ying.app.43.0.{ts}.txt")];
        for n in &expect_kept {
            d.write_atomic(n, b"x").unwrap();
        }
        let target = dir.join("notes.txt");
        for seq in 0..6 {
            for ext in SET_EXTENSIONS {
                let name = format!("ying.app.42.{seq}.{ts}.{ext}");
                if (seq, ext) == (1, "svg") {
                    // A link named like a set's file is removed itself; its target stays.
                    std::os::unix::fs::symlink(&target, dir.join(&name)).unwrap();
                } else {
                    d.write_atomic(&name, b"x").unwrap();
                }
                if seq >= 4 {
                    expect_kept.push(name);
                }
            }
        }
        assert_eq!(d.remove_old_sets("app", old(42), 2).unwrap(), 4);
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        expect_kept.sort();
        assert_eq!(names, expect_kept);
        assert_eq!(d.remove_old_sets("app", old(42), 2).unwrap(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_swapped_after_start_is_refused_and_nothing_is_written_in_it() {
        let root = std::env::temp_dir().join(format!("ying-swap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("reports");
        let d = ReportDir::open(&dir, DEFAULT_FILE_MODE).unwrap();
        d.write_atomic("a.txt", b"x").unwrap();
        // Replaced by another directory at the same path.
        std::fs::rename(&dir, root.join("old")).unwrap();
        std::fs::create_dir(&dir).unwrap();
        let e = d.write_atomic("b.txt", b"y").unwrap_err().to_string();
        assert!(e.contains("no longer the directory identified at start"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        assert!(d.writable().is_err());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        // Replaced by a symbolic link to the original: not followed.
        std::fs::remove_dir(&dir).unwrap();
        std::os::unix::fs::symlink(root.join("old"), &dir).unwrap();
        let e = d.write_atomic("c.txt", b"z").unwrap_err().to_string();
        assert!(e.contains("is a symbolic link"), "{e}");
        assert!(!root.join("old/c.txt").exists());
        // Put back: written again.
        std::fs::remove_file(&dir).unwrap();
        std::fs::rename(root.join("old"), &dir).unwrap();
        d.write_atomic("d.txt", b"w").unwrap();
        assert_eq!(d.remove_old_sets("app", old(1), 0).unwrap(), 0);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn no_descriptor_of_the_directory_stays_open() {
        let dir = std::env::temp_dir().join(format!("ying-nofd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let d = ReportDir::open(&dir, DEFAULT_FILE_MODE).unwrap();
        d.write_atomic("a.txt", b"x").unwrap();
        d.remove_old_sets("app", old(1), 0).unwrap();
        // No descriptor of this process points at the directory (other tests' may come and go,
        // but never one of this directory's).
        let held = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .any(|target| target == dir);
        assert!(!held, "a descriptor of {} is still open", dir.display());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sanitizes_hostile_names() {
        assert_eq!(sanitize_component("../../etc/passwd"), ".._.._etc_passwd");
        assert_eq!(sanitize_component("a b;c\n"), "a_b_c_");
        assert_eq!(sanitize_component(".."), "unknown");
        assert_eq!(sanitize_component(""), "unknown");
        assert_eq!(sanitize_component(&"x".repeat(100)).len(), 64);
    }
}
