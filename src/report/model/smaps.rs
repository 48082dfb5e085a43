//! The parser of `/proc/<pid>/smaps` for the resident set's breakdown ([`super::rss`]): each
//! mapping's range, permissions, file identity and path, and its `Rss:` field. Nothing else of
//! the file is kept.

/// One mapping of `/proc/self/smaps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapping {
    /// First address.
    pub(crate) start: usize,
    /// One past the last address.
    pub(crate) end: usize,
    /// `rwxp` as printed (`-` for a missing right; `p` private, `s` shared).
    pub(crate) perms: [u8; 4],
    /// The device, as printed (`fd:01`), with the inode: a file's identity.
    pub(crate) dev: String,
    /// The inode (0: anonymous).
    pub(crate) inode: u64,
    /// The path or pseudo-name (`[heap]`, `[stack]`, `[anon:name]`), empty for an anonymous
    /// mapping.
    pub(crate) path: String,
    /// Resident bytes (`Rss:`).
    pub(crate) rss: u64,
}

impl Mapping {
    /// A mapping of no file and no special name (`[anon:name]`, named by `prctl`, is one too).
    pub(crate) fn anonymous(&self) -> bool {
        self.inode == 0 && (self.path.is_empty() || self.path.starts_with("[anon:"))
    }

    /// Neither readable, writable nor executable (a reservation or a guard).
    pub(crate) fn no_access(&self) -> bool {
        self.perms[..3] == *b"---"
    }

    /// Executable.
    pub(crate) fn executable(&self) -> bool {
        self.perms[2] == b'x'
    }

    /// Backed by a file (a path that is not a pseudo-name).
    pub(crate) fn file_backed(&self) -> bool {
        self.inode != 0 || (!self.path.is_empty() && !self.path.starts_with('['))
    }
}

/// The mapping a header line (`start-end perms offset dev inode [path]`) describes, with no
/// resident bytes yet; `None` for any other line.
fn header(line: &str) -> Option<Mapping> {
    let mut rest = line;
    let mut field = || {
        let t = rest.trim_start();
        let end = t.find(' ').unwrap_or(t.len());
        let (f, r) = t.split_at(end);
        rest = r;
        f
    };
    let (range, perms, _offset, dev, inode) = (field(), field(), field(), field(), field());
    let (s, e) = range.split_once('-')?;
    let start = usize::from_str_radix(s, 16).ok()?;
    let end = usize::from_str_radix(e, 16).ok()?;
    let perms: [u8; 4] = perms.as_bytes().try_into().ok()?;
    let inode = inode.parse().ok()?;
    if dev.is_empty() || end < start {
        return None;
    }
    Some(Mapping {
        start,
        end,
        perms,
        dev: dev.to_string(),
        inode,
        path: rest.trim().to_string(),
        rss: 0,
    })
}

/// Every mapping of an smaps text, in its order (by address), with its `Rss:`.
pub(crate) fn parse(text: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    for line in text.lines() {
        if let Some(kb) = line.strip_prefix("Rss:") {
            let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            if let Some(m) = out.last_mut() {
                m.rss = kb * 1024;
            }
        } else if line.split_whitespace().next().is_some_and(|f| !f.ends_with(':'))
            && let Some(m) = header(line)
        {
            out.push(m);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parts of a real `/proc/self/smaps` (Debian 12, x86-64), trimmed of most fields.
    const SAMPLE: &str = "\
55d0c0a00000-55d0c0a02000 r--p 00000000 fd:01 1311  /usr/bin/cat
Size:                  8 kB
KernelPageSize:        4 kB
Rss:                   8 kB
Pss:                   8 kB
VmFlags: rd mr mw me dw sd
55d0c0a02000-55d0c0a07000 r-xp 00002000 fd:01 1311  /usr/bin/cat
Rss:                  20 kB
VmFlags: rd ex mr mw me dw sd
55d0c1a00000-55d0c1a21000 rw-p 00000000 00:00 0                          [heap]
Rss:                   4 kB
7f0a00000000-7f0a00021000 rw-p 00000000 00:00 0 
Rss:                 132 kB
7f0a00021000-7f0a04000000 ---p 00000000 00:00 0 
Rss:                   0 kB
7f0a10000000-7f0a10001000 r--p 00000000 fd:01 99 /opt/my data/file with spaces.bin (deleted)
Rss:                   4 kB
7ffc1a000000-7ffc1a021000 rw-p 00000000 00:00 0                          [stack]
Rss:                  16 kB
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
Rss:                   0 kB
";

    #[test]
    fn parses_ranges_paths_and_rss() {
        let m = parse(SAMPLE);
        assert_eq!(m.len(), 8);
        assert_eq!(m[0].start, 0x55d0c0a00000);
        assert_eq!(m[0].end, 0x55d0c0a02000);
        assert_eq!(&m[0].perms, b"r--p");
        assert_eq!((m[0].dev.as_str(), m[0].inode), ("fd:01", 1311));
        assert_eq!(m[0].path, "/usr/bin/cat");
        assert_eq!(m[0].rss, 8 * 1024);
        assert!(m[1].executable() && m[1].file_backed() && !m[1].anonymous());
        assert_eq!(m[2].path, "[heap]");
        assert!(!m[2].anonymous() && !m[2].file_backed());
        assert!(m[3].anonymous() && m[3].path.is_empty());
        assert_eq!(m[3].rss, 132 * 1024);
        assert!(m[4].no_access() && m[4].anonymous());
        assert_eq!(m[5].path, "/opt/my data/file with spaces.bin (deleted)");
        assert_eq!(m[6].path, "[stack]");
        assert_eq!(m[7].start, 0xffffffffff600000);
        assert_eq!(m.iter().map(|m| m.rss).sum::<u64>(), (8 + 20 + 4 + 132 + 4 + 16) * 1024);
    }

    #[test]
    fn ignores_lines_it_does_not_know() {
        assert!(parse("").is_empty());
        assert!(parse("Rss: 4 kB\nnot a mapping\nVmFlags: rd\n").is_empty());
        let m = parse("1000-2000 rw-p 00000000 00:00 0\nRss: x kB\n");
        assert_eq!((m.len(), m[0].rss), (1, 0));
    }
}
