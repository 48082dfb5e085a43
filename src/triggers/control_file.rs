//! The control files in the reporting directory:
//!
//! - `dump.<pid>` asks process `<pid>` for one report set; that process removes the file
//!   (removing it is how the process claims it: a set is written only when the removal
//!   succeeded, so one touch is one set even if the file is touched again meanwhile).
//! - `dump` asks every process that writes into the directory for one report set each. It is
//!   left in place, because no process can know when all the others have seen it: each
//!   process writes a set when the file's modification time is newer than the newest it
//!   handled, and newer than the time the process set up its report thread (so a `dump` left
//!   from an earlier run is ignored). `touch` it again for another round.
//!
//! Both are looked at every tick (100 ms) with one `lstat` each, without following a symbolic
//! link; only regular files owned by the process's user or root count (in a directory other
//! users can write, another user's `dump` asks for nothing), and their content is ignored.

use std::path::PathBuf;
use std::time::SystemTime;

/// The state of one process's look at its control files.
#[derive(Debug)]
pub(crate) struct ControlFiles {
    shared: PathBuf,
    own: PathBuf,
    /// The newest `dump` handled (or the start).
    seen: SystemTime,
}

impl ControlFiles {
    /// The control files of `dir` for process `pid`; a `dump` older than `since` is ignored.
    pub(crate) fn new(dir: &std::path::Path, pid: u32, since: SystemTime) -> Self {
        Self { shared: dir.join("dump"), own: dir.join(format!("dump.{pid}")), seen: since }
    }

    /// One tick: the reason for a dump if a control file asks for one.
    pub(crate) fn tick(&mut self) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        // A file another user planted (a shared directory) asks for nothing.
        let ours =
            |m: &std::fs::Metadata| m.file_type().is_file() && crate::sys::trusted_owner(m.uid());
        let own = std::fs::symlink_metadata(&self.own).is_ok_and(|m| ours(&m))
            && std::fs::remove_file(&self.own).is_ok();
        let shared = match std::fs::symlink_metadata(&self.shared) {
            Ok(m) if ours(&m) => match m.modified() {
                Ok(t) if t > self.seen => {
                    self.seen = t;
                    true
                }
                _ => false,
            },
            _ => false,
        };
        match (own, shared) {
            (true, _) => Some(format!("control file {}", self.own.display())),
            (false, true) => Some(format!("control file {}", self.shared.display())),
            (false, false) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn own_file_is_claimed_and_shared_file_once_per_touch() {
        let dir = std::env::temp_dir().join(format!("ying-control-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let past = SystemTime::now() - Duration::from_secs(3600);
        let mut c = ControlFiles::new(&dir, 77, past);
        assert_eq!(c.tick(), None);
        std::fs::write(dir.join("dump.77"), b"").unwrap();
        assert!(c.tick().unwrap().ends_with("dump.77"));
        assert!(!dir.join("dump.77").exists());
        assert_eq!(c.tick(), None);
        std::fs::write(dir.join("dump"), b"").unwrap();
        assert!(c.tick().unwrap().ends_with("dump"));
        assert_eq!(c.tick(), None, "one set per touch");
        assert!(dir.join("dump").exists(), "left for the other processes");
        // A file older than the start is ignored.
        let mut late = ControlFiles::new(&dir, 78, SystemTime::now() + Duration::from_secs(60));
        assert_eq!(late.tick(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
