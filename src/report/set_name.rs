//! The name of a report set, `ying.<exe>.<pid>-<instance>.<seq>.<yyyymmddThhmmssZ>`, written
//! once here and read back here by every reader: the retention of old sets, `ying view`, `ying
//! run`'s summary, `ying top`/`diff` naming a set, the shim's tests.
//!
//! The process part ([`ProcessId`]) is the pid and the process's *instance*, 8 hex digits drawn
//! at random when the process first names a file: pids repeat across pid namespaces (two
//! containers sharing a reporting volume) and across restarts (a crash loop restarts a service
//! under the same pid), and the instance keeps every process's files (sets, live file, page)
//! apart from every other's. Names without an instance (written before instances) are read too.
//!
//! Each file of a set is the set's name, a dot and an extension (`txt`, `pb.gz`, `peak.svg`,
//! ...; see `SET_EXTENSIONS` in `files.rs`). The executable's name may contain dots
//! (`python3.11`), so a name is read from the right: the time stamp is the last part of the
//! form `yyyymmddThhmmssZ`, the sequence number and pid the two parts before it, the rest the
//! executable. Numbers are written without leading zeros, and only such names are read as sets,
//! so that a name and its [`SetName`] are one-to-one.
//!
//! A worker that changed user writes its sets in `uid-<N>` inside the reporting directory
//! ([`uid_dir_name`], read back by [`uid_of_dir`]).

use std::fmt;
use std::str::FromStr;

/// A process as file names carry it: its pid and its instance (see the module docs), written
/// `<pid>-<8 hex digits>`, or `<pid>` alone in names written before instances.
///
/// ```
/// use ying_profiler::report::ProcessId;
/// let p = ProcessId { pid: 1234, instance: Some(0x00c0ffee) };
/// assert_eq!(p.to_string(), "1234-00c0ffee");
/// assert_eq!("1234-00c0ffee".parse::<ProcessId>(), Ok(p));
/// assert_eq!("1234".parse::<ProcessId>(), Ok(ProcessId { pid: 1234, instance: None }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessId {
    /// The process id (in the pid namespace of the process).
    pub pid: u32,
    /// The process's instance; `None` in names written before instances.
    pub instance: Option<u32>,
}

impl fmt::Display for ProcessId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.instance {
            Some(i) => write!(f, "{}-{i:08x}", self.pid),
            None => write!(f, "{}", self.pid),
        }
    }
}

impl FromStr for ProcessId {
    type Err = NotASetName;

    /// `<pid>` or `<pid>-<8 lowercase hex digits>`, the pid without leading zeros.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parse = || {
            let (pid, instance) = match s.split_once('-') {
                Some((pid, i)) => {
                    let hex =
                        i.len() == 8 && i.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
                    (pid, Some(hex.then(|| u32::from_str_radix(i, 16).ok()).flatten()?))
                }
                None => (s, None),
            };
            Some(ProcessId { pid: u32::try_from(canonical_number(pid)?).ok()?, instance })
        };
        parse().ok_or_else(|| NotASetName(s.to_string()))
    }
}

/// The name of one report set, without extension.
///
/// ```
/// use ying_profiler::report::{ProcessId, SetName};
/// let set = SetName::new("python3.11", 1234, 0, "20261202T115021Z").unwrap().of(Some(0xc0ffee));
/// assert_eq!(set.to_string(), "ying.python3.11.1234-00c0ffee.0.20261202T115021Z");
/// assert_eq!(set.file("pb.gz"), "ying.python3.11.1234-00c0ffee.0.20261202T115021Z.pb.gz");
/// let (read, ext) =
///     SetName::parse_file("ying.python3.11.1234-00c0ffee.0.20261202T115021Z.peak.svg").unwrap();
/// assert_eq!((&read, ext), (&set, "peak.svg"));
/// assert_eq!(read.process(), ProcessId { pid: 1234, instance: Some(0xc0ffee) });
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SetName {
    /// The executable's file name as reports carry it (sanitized, see
    /// `sanitize_component` in `files.rs`); never empty.
    pub exe: String,
    /// The process id.
    pub pid: u32,
    /// The process's instance (see [`ProcessId`]); `None` in names written before instances.
    pub instance: Option<u32>,
    /// The set's sequence number in its process (0 for the first).
    pub seq: u64,
    /// When the set was taken, UTC, `yyyymmddThhmmssZ`.
    pub stamp: String,
}

/// Why a name is not a report set's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotASetName(String);

impl fmt::Display for NotASetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a report set's name (ying.<exe>.<pid>-<instance>.<seq>.<time>)",
            self.0
        )
    }
}

impl std::error::Error for NotASetName {}

impl SetName {
    /// A set's name; `None` if `exe` is empty or contains `/`, or `stamp` is not of the form
    /// `yyyymmddThhmmssZ`.
    pub fn new(exe: &str, pid: u32, seq: u64, stamp: &str) -> Option<SetName> {
        (!exe.is_empty() && !exe.contains('/') && is_stamp(stamp)).then(|| SetName {
            exe: exe.to_string(),
            pid,
            instance: None,
            seq,
            stamp: stamp.to_string(),
        })
    }

    /// The same set of the process with `instance`.
    pub fn of(mut self, instance: Option<u32>) -> Self {
        self.instance = instance;
        self
    }

    /// The process the set is of.
    pub fn process(&self) -> ProcessId {
        ProcessId { pid: self.pid, instance: self.instance }
    }

    /// The name of the set's file with extension `ext` (`txt`, `pb.gz`, `peak.svg`, ...).
    pub fn file(&self, ext: &str) -> String {
        format!("{self}.{ext}")
    }

    /// Reads a file name of a set: the set and the extension (everything after the time
    /// stamp, not empty). `None` for any other name, temporary files (`.ying....tmp`) included.
    pub fn parse_file(name: &str) -> Option<(SetName, &str)> {
        let rest = name.strip_prefix("ying.")?;
        // The time stamp is the last part of its form, and a dot follows it; the extension is
        // what follows that dot.
        let mut end = rest.len();
        loop {
            let dot = rest[..end].rfind('.')?;
            if end < rest.len() && is_stamp(&rest[dot + 1..end]) {
                let ext = &rest[end + 1..];
                let stem = &name[..name.len() - rest.len() + end];
                return if ext.is_empty() { None } else { Some((stem.parse().ok()?, ext)) };
            }
            end = dot;
        }
    }
}

impl fmt::Display for SetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ying.{}.{}.{}.{}", self.exe, self.process(), self.seq, self.stamp)
    }
}

impl FromStr for SetName {
    type Err = NotASetName;

    /// Reads a set's name without extension, `ying.<exe>.<pid>-<instance>.<seq>.<time>` (or
    /// `ying.<exe>.<pid>.<seq>.<time>`, from before instances).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parse = || {
            let mut parts = s.strip_prefix("ying.")?.rsplitn(4, '.');
            let stamp = parts.next()?;
            let seq = canonical_number(parts.next()?)?;
            let process: ProcessId = parts.next()?.parse().ok()?;
            Some(SetName::new(parts.next()?, process.pid, seq, stamp)?.of(process.instance))
        };
        parse().ok_or_else(|| NotASetName(s.to_string()))
    }
}

/// Digits only, without leading zeros (but `0`), within `u64`.
fn canonical_number(s: &str) -> Option<u64> {
    let digits = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits && (s == "0" || !s.starts_with('0'))).then(|| s.parse().ok()).flatten()
}

/// `yyyymmddThhmmssZ`.
fn is_stamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 16
        && b[8] == b'T'
        && b[15] == b'Z'
        && b[..8].iter().chain(&b[9..15]).all(u8::is_ascii_digit)
}

/// The subdirectory of the reporting directory where a worker that changed to user `uid`
/// writes its sets: `uid-<uid>`.
pub fn uid_dir_name(uid: u32) -> String {
    format!("uid-{uid}")
}

/// The user of a subdirectory named as [`uid_dir_name`] names them; `None` for other names.
pub fn uid_of_dir(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("uid-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Milliseconds since the epoch of a `yyyymmddThhmmssZ` stamp.
pub(crate) fn stamp_ms(s: &str) -> u64 {
    let n = |r: std::ops::Range<usize>| s.get(r).and_then(|x| x.parse::<i64>().ok()).unwrap_or(0);
    let (y, m, d) = (n(0..4), n(4..6), n(6..8));
    let (hh, mm, ss) = (n(9..11), n(11..13), n(13..15));
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    u64::try_from(secs).unwrap_or(0) * 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    const TS: &str = "20261202T115021Z";

    #[test]
    fn names_round_trip() {
        for (exe, pid, seq) in [("app", 42, 7), ("python3.11", 1234, 0), ("a.b.c", 1, u64::MAX)] {
            let set = SetName::new(exe, pid, seq, TS).unwrap();
            let text = set.to_string();
            assert_eq!(text, format!("ying.{exe}.{pid}.{seq}.{TS}"));
            assert_eq!(text.parse::<SetName>(), Ok(set.clone()));
            for ext in crate::report::files::SET_EXTENSIONS {
                let file = set.file(ext);
                assert_eq!(SetName::parse_file(&file), Some((set.clone(), ext)), "{file}");
            }
        }
    }

    #[test]
    fn malformed_names_are_rejected() {
        for bad in [
            "",
            "ying.",
            "ying.app.42.7",
            "ying.app.42.7.2026",
            "ying..42.7.20261202T115021Z",
            "ying.app.42.07.20261202T115021Z",
            "ying.app.042.7.20261202T115021Z",
            "ying.app.+42.7.20261202T115021Z",
            "ying.app.42.x.20261202T115021Z",
            "ying.app.4294967296.7.20261202T115021Z",
            "ying.app.42.7.20261202T11502xZ",
            "ying.app.42.7.20261202X115021Z",
            "ying.app.42.7.20261202T115021Z.txt",
            "yang.app.42.7.20261202T115021Z",
            ".ying.app.42.7.20261202T115021Z",
            // Instances: exactly 8 lowercase hex digits.
            "ying.app.42-abc.7.20261202T115021Z",
            "ying.app.42-0000000G.7.20261202T115021Z",
            "ying.app.42-0000ABCD.7.20261202T115021Z",
            "ying.app.42-000000abc.7.20261202T115021Z",
            "ying.app.-0000abcd.7.20261202T115021Z",
        ] {
            assert!(bad.parse::<SetName>().is_err(), "{bad:?}");
        }
        let good = "ying.app.42-0000abcd.7.20261202T115021Z".parse::<SetName>().unwrap();
        assert_eq!(good.process(), ProcessId { pid: 42, instance: Some(0xabcd) });
        assert_eq!(good.to_string(), "ying.app.42-0000abcd.7.20261202T115021Z", "one to one");
        let e = "ying.x".parse::<SetName>().unwrap_err().to_string();
        assert!(
            e.contains("\"ying.x\"") && e.contains("ying.<exe>.<pid>-<instance>.<seq>.<time>"),
            "{e}"
        );
        assert_eq!(SetName::new("", 1, 1, TS), None);
        assert_eq!(SetName::new("a/b", 1, 1, TS), None);
        assert_eq!(SetName::new("a", 1, 1, "2026"), None);
    }

    #[test]
    fn file_names_are_read_from_the_right() {
        let name = format!("ying.python3.11.1234.0.{TS}.folded");
        let (set, ext) = SetName::parse_file(&name).unwrap();
        assert_eq!((set.exe.as_str(), set.pid, set.seq, ext), ("python3.11", 1234, 0, "folded"));
        // An executable whose name looks like a time stamp.
        let name = format!("ying.{TS}.7.3.{TS}.peak.pb.gz");
        let (set, ext) = SetName::parse_file(&name).unwrap();
        assert_eq!((set.exe.as_str(), set.pid, set.seq, ext), (TS, 7, 3, "peak.pb.gz"));
        for bad in [
            format!("ying.app.42.7.{TS}"),
            format!("ying.app.42.7.{TS}."),
            format!(".ying.app.42.7.{TS}.txt.0123456789abcdef.tmp"),
            format!("ying.app.42.07.{TS}.txt"),
            "ying.app.42.html".to_string(),
            "ying.view.html".to_string(),
            "notes.txt".to_string(),
        ] {
            assert_eq!(SetName::parse_file(&bad), None, "{bad}");
        }
    }

    #[test]
    fn uid_directories() {
        assert_eq!(uid_dir_name(65534), "uid-65534");
        assert_eq!(uid_of_dir(&uid_dir_name(0)), Some(0));
        assert_eq!(uid_of_dir("uid-65534"), Some(65534));
        for bad in ["uid-", "uid-x", "uid--1", "uid-1a", "uid-4294967296", "UID-1", "ying.txt"] {
            assert_eq!(uid_of_dir(bad), None, "{bad}");
        }
    }
}
