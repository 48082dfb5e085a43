//! Names of JIT-compiled code, from the perf map a runtime writes for it.
//!
//! Code a just-in-time compiler generates lives in anonymous memory: no loaded module covers
//! its addresses, so neither debug info nor a symbol table can name them, and a stack through
//! JavaScript, Java or Python code would show bare addresses. Runtimes that want profilers to
//! name that code write `/tmp/perf-<pid>.map` (node with `--perf-basic-prof`, a JVM with a
//! perf-map agent, CPython 3.12 and later with `-X perf`): one line per piece of code,
//! `START SIZE name`, START and SIZE in hexadecimal (with or without `0x`), the name being the
//! rest of the line. Code is moved and replaced while the program runs, and the runtime appends
//! a line each time, so the last line covering an address names it.
//!
//! Only addresses no module covers are looked up here, each time a report names them: the
//! file is read once per batch of addresses (`symbolize::resolve_many` in the process,
//! `offline` for a live file read after the process, whose map node leaves behind), and its
//! answers are not cached, since the same address may hold other code later. A missing file is
//! the normal case and says nothing; a line that does not parse is skipped. A map last written
//! before the process started was left by an earlier process with the same pid and is not
//! read (a later process's map cannot be told apart). The file sits in a directory anyone may
//! write to, so it is read only when it is a regular file owned by the reader or by root,
//! opened without following a symbolic link or waiting on a FIFO.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::sync::Arc;

use crate::callstack::Frame;

/// The perf map of process `pid`.
pub(crate) fn path(pid: u32) -> String {
    format!("/tmp/perf-{pid}.map")
}

/// When the calling process started, ms since the epoch (for [`frames`] of its own map).
pub(crate) fn own_start_ms() -> Option<u64> {
    crate::sys::state_and_start("self").and_then(|(_, ticks)| crate::sys::start_ms(ticks))
}

/// The module a frame named from the perf map of `pid` shows: the map itself.
pub(crate) fn pseudo_module(pid: u32) -> Arc<str> {
    format!("[perf-{pid}.map]").into()
}

/// Slack for comparing the map's modification time with the process's start, which is known
/// to the second only.
const START_SLACK_MS: u64 = 2000;

/// The frames of those of `ips` that the perf map of process `pid` names (innermost first,
/// one frame each: the map's name, no file or line), by address. Empty when there is no map,
/// or when the map was last written before the process started (`started_ms`, ms since the
/// epoch, when known): an earlier process with the same pid left it.
pub(crate) fn frames(
    pid: u32,
    started_ms: Option<u64>,
    ips: &[usize],
) -> Vec<(usize, Arc<[Frame]>)> {
    if ips.is_empty() {
        return Vec::new();
    }
    let Some(file) = open(&path(pid)) else { return Vec::new() };
    let modified_ms = file
        .metadata()
        .and_then(|md| md.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as u64);
    if let (Some(started), Some(modified)) = (started_ms, modified_ms) {
        if modified + START_SLACK_MS < started {
            return Vec::new();
        }
    }
    let module = pseudo_module(pid);
    // Return addresses: the call before each one, which may be the function's last bytes.
    let calls: Vec<usize> = ips.iter().map(|ip| ip.wrapping_sub(1)).collect();
    names(BufReader::new(file), &calls)
        .into_iter()
        .map(|(call, name)| {
            let ip = call.wrapping_add(1);
            let frame = Frame {
                ip,
                function: name,
                file: None,
                line: None,
                inlined: false,
                module: Some(module.clone()),
            };
            (ip, Arc::from([frame]))
        })
        .collect()
}

/// The map at `path`, if it is a regular file owned by the reader or by root.
fn open(path: &str) -> Option<std::fs::File> {
    // A report opens descriptors only while the program keeps a few free (ARCHITECTURE.md).
    if !crate::sys::fd_headroom() {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let md = file.metadata().ok()?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    (md.is_file() && (md.uid() == me || md.uid() == 0)).then_some(file)
}

/// The longest line read (a name is rarely longer than a few hundred bytes).
const MAX_LINE: u64 = 1 << 16;

/// The name of each of `ips` that some line of `map` covers (the last such line's), by
/// address; lines that do not parse are skipped.
fn names(mut map: impl BufRead, ips: &[usize]) -> Vec<(usize, Arc<str>)> {
    let mut sorted = ips.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut found: Vec<Option<Arc<str>>> = vec![None; sorted.len()];
    let mut line = Vec::new();
    // Within a line longer than `MAX_LINE` (its end is skipped with it).
    let mut long = false;
    loop {
        line.clear();
        match map.by_ref().take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let ended = line.ends_with(b"\n");
        let skip = std::mem::replace(&mut long, !ended);
        if skip || !ended && line.len() as u64 == MAX_LINE {
            continue;
        }
        let Some((start, size, name)) = parse(&line) else { continue };
        let end = start.saturating_add(size);
        let first = sorted.partition_point(|&ip| ip < start);
        let mut name_once: Option<Arc<str>> = None;
        for (ip, slot) in sorted[first..].iter().zip(&mut found[first..]) {
            if *ip >= end {
                break;
            }
            let n = name_once.get_or_insert_with(|| name.into());
            *slot = Some(n.clone());
        }
    }
    sorted.into_iter().zip(found).filter_map(|(ip, n)| Some((ip, n?))).collect()
}

/// One line: `START SIZE name` (hexadecimal numbers, `0x` optional, a name that is not empty).
fn parse(line: &[u8]) -> Option<(usize, usize, &str)> {
    let line = std::str::from_utf8(line).ok()?.trim_end_matches(['\n', '\r']);
    let (start, rest) = line.trim_start().split_once(' ')?;
    let (size, name) = rest.trim_start().split_once(' ')?;
    let hex = |s: &str| {
        let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
        usize::from_str_radix(digits, 16).ok()
    };
    let name = name.trim();
    let size = hex(size)?;
    (size > 0 && !name.is_empty()).then_some((hex(start)?, size, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(map: &str, ips: &[usize]) -> Vec<(usize, String)> {
        names(map.as_bytes(), ips).into_iter().map(|(ip, n)| (ip, n.to_string())).collect()
    }

    #[test]
    fn the_last_line_covering_an_address_names_it() {
        let map = "\
            7f0000001000 100 LazyCompile:*holdBuffers /tmp/prog.js:3:21\n\
            0x7f0000002000 0x40 Builtin:JSEntry\n\
            7f0000001080 20 py::work:/tmp/prog.py\n\
            not a line\n\
            7f0000003000 zz bad size\n\
            7f0000003000 10\n\
            7f0000004000 0 empty\n\
            7f0000003000 10   spaced  name  \r\n";
        let ips = [
            0x7f00_0000_1000, // first line
            0x7f00_0000_1090, // moved: the third line covers it now
            0x7f00_0000_10ff, // first line's last byte
            0x7f00_0000_1100, // just past it
            0x7f00_0000_2010,
            0x7f00_0000_3000,
            0x7f00_0000_4000,
            0x7f00_0000_1000, // twice
        ];
        assert_eq!(
            named(map, &ips),
            [
                (0x7f00_0000_1000, "LazyCompile:*holdBuffers /tmp/prog.js:3:21".to_string()),
                (0x7f00_0000_1090, "py::work:/tmp/prog.py".to_string()),
                (0x7f00_0000_10ff, "LazyCompile:*holdBuffers /tmp/prog.js:3:21".to_string()),
                (0x7f00_0000_2010, "Builtin:JSEntry".to_string()),
                (0x7f00_0000_3000, "spaced  name".to_string()),
            ]
        );
    }

    #[test]
    fn an_overlong_line_is_skipped_whole_and_the_last_needs_no_newline() {
        // The overlong line's tail (past the first `MAX_LINE` bytes) would parse as a line of
        // its own if it were read as one.
        let head = "5000 10 ";
        let long = format!("{head}{}6000 10 tail\n", "x".repeat(MAX_LINE as usize - head.len()));
        let map = format!("{long}7000 10 after\n8000 10 unterminated");
        assert_eq!(
            named(&map, &[0x5000, 0x6000, 0x7000, 0x8000]),
            [(0x7000, "after".to_string()), (0x8000, "unterminated".to_string())]
        );
    }

    #[test]
    fn a_missing_or_foreign_map_names_nothing() {
        // No process has pid 0, so no map either.
        assert!(frames(0, None, &[0x1000]).is_empty());
        // Not a regular file.
        assert!(open("/dev/null").is_none());
        assert!(open("/tmp").is_none());
    }

    #[test]
    fn frames_name_the_map_as_their_module() {
        // A map written now for a pid no process has (above the kernel's maximum).
        let pid = 0x7fff_fff0;
        let p = path(pid);
        std::fs::write(&p, "10000 100 LazyCompile:*work a.js:1:1\n").unwrap();
        // Return addresses: the byte before each is looked up (the call), so the end of the
        // code (0x10100) is still in it and its start (0x10000) is not.
        let ips = [0x10010, 0x10100, 0x10000, 0x20000];
        let got = frames(pid, own_start_ms(), &ips);
        // Left by an earlier process with that pid: written before the process started.
        let later = own_start_ms().map(|s| s + 60_000);
        let stale = frames(pid, later, &ips);
        std::fs::remove_file(&p).unwrap();
        assert!(stale.is_empty(), "{stale:?}");
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [0x10010, 0x10100], "{got:?}");
        let (ip, f) = &got[0];
        assert_eq!(*ip, 0x10010);
        assert_eq!(
            **f,
            [Frame {
                ip: 0x10010,
                function: "LazyCompile:*work a.js:1:1".into(),
                file: None,
                line: None,
                inlined: false,
                module: Some(format!("[perf-{pid}.map]").into()),
            }]
        );
    }
}
