//! The memory limit of the process's cgroup, the process's resident set size, and the two
//! automatic triggers that use them: the dump near the limit and the dump at new highs.
//!
//! # Which limit
//!
//! The limit is the smallest `memory.max` (cgroup v2) or `memory.limit_in_bytes` (cgroup v1) of
//! the process's cgroup and of its ancestors up to the hierarchy's mount point, found through
//! `/proc/self/cgroup` and `/proc/self/mountinfo`; `max` (v2) and values of 2^62 or more (v1's
//! "unlimited") mean no limit. When the memory controller is mounted as v1 (a hybrid host), the
//! v1 hierarchy is the one that limits, so it is read first. `YING_MEMORY_LIMIT_BYTES` replaces
//! the cgroup's limit (for tests, and for limits that are not a cgroup's). The limit is read
//! when the report thread starts and every [`LIMIT_REREAD`] after (a few `open`/`read` calls on
//! cgroupfs; the limit of a container rarely changes).
//!
//! # Which measure: RSS
//!
//! The kernel charges a cgroup for the pages its processes have resident (plus page cache and
//! kernel memory), not for the bytes a program asked `malloc` for: fragmentation, allocator
//! free lists, thread stacks and mappings all count toward the OOM kill while the retained
//! total misses them, and a large block that was allocated but never touched counts in the
//! retained total but not toward the kill. So the near-limit trigger compares the process's
//! resident set size (`/proc/self/statm`, one small read per tick) with the limit. The new-high
//! trigger, which is about the program's own memory, compares the exact retained total.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often the cgroup limit is read again.
pub(crate) const LIMIT_REREAD: Duration = Duration::from_secs(60);

/// v1's "no limit" is `PAGE_COUNTER_MAX` pages rounded, about 2^63: anything this large is none.
const V1_UNLIMITED: u64 = 1 << 62;

/// The smallest memory limit of the cgroup hierarchy the process is in, in bytes.
/// `None` too while fewer than [`crate::sys::FD_HEADROOM`] descriptors are free (read again
/// after [`LIMIT_REREAD`]).
pub(crate) fn cgroup_limit() -> Option<u64> {
    if !crate::sys::fd_headroom() {
        return None;
    }
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    limit_from(&cgroups, &mountinfo, |p| std::fs::read_to_string(p).ok())
}

/// [`cgroup_limit`] from the two files' text, reading limit files with `read`.
fn limit_from(
    cgroups: &str,
    mountinfo: &str,
    read: impl Fn(&Path) -> Option<String>,
) -> Option<u64> {
    let mut v1_path = None;
    let mut v2_path = None;
    for line in cgroups.lines() {
        let mut it = line.splitn(3, ':');
        let (Some(_id), Some(ctrl), Some(path)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if ctrl.is_empty() {
            v2_path = Some(path);
        } else if ctrl.split(',').any(|c| c == "memory") {
            v1_path = Some(path);
        }
    }
    let mut v1_mount = None;
    let mut v2_mount = None;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let f: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if f.len() < 5 || r.len() < 3 {
            continue;
        }
        let (root, point) = (f[3], f[4]);
        match r[0] {
            "cgroup2" => v2_mount = Some((root, point)),
            "cgroup" if r[2].split(',').any(|o| o == "memory") => v1_mount = Some((root, point)),
            _ => {}
        }
    }
    if let (Some(path), Some(mount)) = (v1_path, v1_mount) {
        let l = smallest(path, mount, "memory.limit_in_bytes", &read);
        return l.filter(|&l| l < V1_UNLIMITED);
    }
    if let (Some(path), Some(mount)) = (v2_path, v2_mount) {
        return smallest(path, mount, "memory.max", &read);
    }
    None
}

/// The smallest limit in `file` from the cgroup at `path` up to the mount's top.
fn smallest(
    path: &str,
    (root, point): (&str, &str),
    file: &str,
    read: &impl Fn(&Path) -> Option<String>,
) -> Option<u64> {
    // A cgroup namespace or a bind mount shows the cgroup relative to the mount's root.
    let rel = path.strip_prefix(root).unwrap_or(path).trim_start_matches('/');
    let top = PathBuf::from(point);
    let mut dir = top.join(rel);
    let mut best: Option<u64> = None;
    loop {
        if let Some(text) = read(&dir.join(file)) {
            let t = text.trim();
            if t != "max"
                && let Ok(n) = t.parse::<u64>()
            {
                best = Some(best.map_or(n, |b| b.min(n)));
            }
        }
        if dir == top || !dir.pop() || !dir.starts_with(&top) {
            break;
        }
    }
    best
}

/// The process's resident set size in bytes (`/proc/self/statm`); `None` when unreadable or
/// while fewer than [`crate::sys::FD_HEADROOM`] descriptors are free.
pub(crate) fn rss_bytes() -> Option<u64> {
    use std::io::Read;
    let mut buf = [0u8; 128];
    // Nothing opened while the program is near its descriptor limit (the trigger waits).
    if !crate::sys::fd_headroom() {
        return None;
    }
    let mut f = std::fs::File::open("/proc/self/statm").ok()?;
    let n = f.read(&mut buf).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let pages: u64 = text.split(' ').nth(1)?.trim().parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).unwrap_or(4096))
}

/// The memory limit as reports show it (the header's `memory limit:` line, the manifest's
/// `memory_limit`, the live file): the limit, where it came from, and the near-limit
/// trigger's state. Published by the report thread's trigger, read by any report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LimitState {
    /// The limit, bytes.
    pub(crate) bytes: u64,
    /// Whether it is the cgroup's (else `YING_MEMORY_LIMIT_BYTES`).
    pub(crate) cgroup: bool,
    /// The near-limit trigger's level, percent of the limit (0: off).
    pub(crate) pct: u64,
    /// When the resident set reached that level and has not fallen back below 95 % of it since
    /// (ms since the Unix epoch); None when it is below.
    pub(crate) near_since_ms: Option<u64>,
}

/// [`LimitState`] as published: the limit (0: none), the source and level (`pct << 1 |
/// cgroup`), the time the level was reached (0: below it).
static PUBLISHED: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// The memory limit and the near-limit state the report thread last published; None when the
/// process has no limit, or no report thread.
pub(crate) fn state() -> Option<LimitState> {
    let bytes = PUBLISHED[0].load(Ordering::Relaxed);
    let how = PUBLISHED[1].load(Ordering::Relaxed);
    let since = PUBLISHED[2].load(Ordering::Relaxed);
    (bytes != 0).then_some(LimitState {
        bytes,
        cgroup: how & 1 == 1,
        pct: how >> 1,
        near_since_ms: (since != 0).then_some(since),
    })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_millis().max(1) as u64)
}

/// The near-limit trigger's state.
#[derive(Debug)]
pub(crate) struct NearLimit {
    pct: u64,
    fake: Option<u64>,
    limit: Option<u64>,
    read_at: Instant,
    /// Fired and not yet re-armed.
    fired: bool,
}

impl NearLimit {
    /// Reads the limit now (`fake` replaces the cgroup's); `pct` 0 turns the trigger off.
    pub(crate) fn new(pct: u64, fake: Option<u64>) -> Self {
        let mut s = Self { pct, fake, limit: None, read_at: Instant::now(), fired: false };
        s.read_limit();
        s
    }

    /// Reads the limit (also with the trigger off: reports show it) and publishes it.
    fn read_limit(&mut self) {
        self.limit = self.fake.or_else(cgroup_limit);
        self.read_at = Instant::now();
        PUBLISHED[1].store(self.pct << 1 | u64::from(self.fake.is_none()), Ordering::Relaxed);
        PUBLISHED[0].store(self.limit.unwrap_or(0), Ordering::Relaxed);
        if self.limit.is_none() {
            self.fired = false;
            PUBLISHED[2].store(0, Ordering::Relaxed);
        }
    }

    /// Whether the trigger watches a limit.
    pub(crate) fn armed(&self) -> bool {
        self.pct != 0 && self.limit.is_some()
    }

    /// One tick: the reason for a dump when the RSS first crosses the threshold.
    pub(crate) fn tick(&mut self) -> Option<String> {
        if self.pct == 0 {
            return None;
        }
        if self.fake.is_none() && self.read_at.elapsed() >= LIMIT_REREAD {
            self.read_limit();
        }
        let limit = self.limit?;
        let rss = rss_bytes()?;
        self.judge(limit, rss)
    }

    /// The decision for a limit and an RSS: fire once when `rss` reaches `pct` % of `limit`,
    /// re-arm when it falls below 95 % of that threshold (so that an RSS wavering around the
    /// threshold does not write a set at every tick).
    fn judge(&mut self, limit: u64, rss: u64) -> Option<String> {
        let threshold = (limit as u128 * self.pct as u128 / 100) as u64;
        if self.fired {
            if (rss as u128) * 100 < threshold as u128 * 95 {
                self.fired = false;
                PUBLISHED[2].store(0, Ordering::Relaxed);
            }
            return None;
        }
        if rss < threshold {
            return None;
        }
        self.fired = true;
        PUBLISHED[2].store(now_ms(), Ordering::Relaxed);
        Some(format!(
            "near memory limit: rss {rss} bytes is {}% of the limit {limit} bytes (threshold {}%)",
            rss as u128 * 100 / limit.max(1) as u128,
            self.pct
        ))
    }
}

/// The new-high trigger's state: a dump each time the exact retained total exceeds the last
/// dumped high (at first: the total at the first tick) by `pct` percent.
#[derive(Debug)]
pub(crate) struct NewPeak {
    pct: u64,
    last: Option<u64>,
}

impl NewPeak {
    /// `pct` 0 turns the trigger off.
    pub(crate) fn new(pct: u64) -> Self {
        Self { pct, last: None }
    }

    /// Whether the trigger is on.
    pub(crate) fn armed(&self) -> bool {
        self.pct > 0
    }

    /// One tick with the retained total now.
    pub(crate) fn judge(&mut self, retained: u64) -> Option<String> {
        if self.pct == 0 {
            return None;
        }
        let Some(last) = self.last else {
            self.last = Some(retained);
            return None;
        };
        let bar = last as u128 * (100 + self.pct as u128) / 100;
        if (retained as u128) <= bar {
            return None;
        }
        self.last = Some(retained);
        Some(format!(
            "new peak: retained {retained} bytes, more than {}% above the last high {last} bytes",
            self.pct
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS_V1: &str = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                             40 31 0:40 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
    const MOUNTS_V2: &str = "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";

    fn files(pairs: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
        let v: Vec<(PathBuf, String)> =
            pairs.iter().map(|(p, t)| (PathBuf::from(p), t.to_string())).collect();
        move |p: &Path| v.iter().find(|(q, _)| q == p).map(|(_, t)| t.clone())
    }

    #[test]
    fn v2_takes_the_smallest_ancestor_and_max_is_none() {
        let cg = "0::/a/b\n";
        let read = files(&[
            ("/sys/fs/cgroup/a/b/memory.max", "max\n"),
            ("/sys/fs/cgroup/a/memory.max", "1048576\n"),
        ]);
        assert_eq!(limit_from(cg, MOUNTS_V2, read), Some(1 << 20));
        let read = files(&[("/sys/fs/cgroup/a/b/memory.max", "max\n")]);
        assert_eq!(limit_from(cg, MOUNTS_V2, read), None);
    }

    #[test]
    fn v1_memory_hierarchy_first_and_unlimited_is_none() {
        let cg = "4:memory:/p/q\n0::/\n";
        let read = files(&[
            ("/sys/fs/cgroup/memory/p/q/memory.limit_in_bytes", "209715200\n"),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"),
        ]);
        assert_eq!(limit_from(cg, MOUNTS_V1, read), Some(200 << 20));
        let read =
            files(&[("/sys/fs/cgroup/memory/p/q/memory.limit_in_bytes", "9223372036854771712")]);
        assert_eq!(limit_from(cg, MOUNTS_V1, read), None);
    }

    #[test]
    fn near_limit_fires_once_and_rearms_below() {
        let mut n = NearLimit {
            pct: 90,
            fake: Some(1000),
            limit: Some(1000),
            read_at: Instant::now(),
            fired: false,
        };
        assert_eq!(n.judge(1000, 899), None);
        assert!(n.judge(1000, 900).unwrap().contains("near memory limit"));
        assert_eq!(n.judge(1000, 990), None);
        assert_eq!(n.judge(1000, 860), None); // Still above 95 % of the threshold (855).
        assert_eq!(n.judge(1000, 950), None);
        assert_eq!(n.judge(1000, 850), None); // Re-armed.
        assert!(n.judge(1000, 901).is_some());
    }

    #[test]
    fn new_peaks_fire_beyond_the_last_dumped_high() {
        let mut p = NewPeak::new(100);
        assert_eq!(p.judge(10), None); // The baseline.
        assert_eq!(p.judge(20), None);
        assert!(p.judge(21).is_some());
        assert_eq!(p.judge(42), None);
        assert_eq!(p.judge(5), None);
        assert!(p.judge(43).is_some());
        assert!(!NewPeak::new(0).armed());
        assert_eq!(NewPeak::new(0).judge(u64::MAX), None);
    }
}
