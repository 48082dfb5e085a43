//! Which files a reader of a reporting directory trusts. A directory other users can write
//! (mode 1777, or a volume shared between containers) may hold files another user planted: a
//! forged live file would show a death that never happened, a forged set a process that never
//! ran. Readers (`ying view`, `ying report`, `ying leaks`) leave such files out with one line
//! each; writers never write over them (`files.rs`).

use std::io;
use std::path::Path;

/// The owner of the file at `path` when a reader should not trust it: a file owned by neither
/// the reader's user, root, the owner of the directory it is in, nor (in a `uid-<N>`
/// subdirectory, where the shim puts the sets of a worker that changed user) user N. In a
/// directory other users can write (mode 1777), such a file was planted: readers leave it out
/// with one line instead of taking it for a set, a death or a profile. None when it may be
/// read (or cannot be looked at: the read then fails on its own).
pub(crate) fn untrusted_owner(path: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::symlink_metadata(path).ok()?.uid();
    if crate::sys::trusted_owner(uid) {
        return None;
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if std::fs::metadata(dir).is_ok_and(|m| m.uid() == uid) {
        return None;
    }
    let sub = dir.file_name().and_then(|n| n.to_str()).and_then(super::set_name::uid_of_dir);
    (sub != Some(uid)).then_some(uid)
}

/// The error of a reader that met a file of [`untrusted_owner`] `uid`.
pub(crate) fn untrusted_error(path: &Path, uid: u32) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{}: owned by user {uid}, neither you, root, nor the directory's owner: not read \
             (planted in a shared directory?)",
            path.display()
        ),
    )
}
