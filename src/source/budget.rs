//! What a piece of report work may take of the process's memory, decided before it starts.
//!
//! # Why
//!
//! A report set, a live-file version or a profile for the endpoint allocates tens of MiB for a
//! large profile, and Rust's allocations are infallible: one that fails aborts the process.
//! Under a memory limit that fails allocations (`RLIMIT_AS`, `RLIMIT_DATA`, systemd's
//! `LimitDATA=`, `vm.overcommit_memory=2`), that aborted programs that handle `ENOMEM`
//! correctly, and a report taken while the program sat at its limit took the memory the
//! program's own retries were waiting for. So before the work starts, [`grant`]:
//!
//! 1. refuses when the program's allocations failed since the last grant of the same work
//!    (the program is at its limit now: the report waits until its allocations succeed again).
//!    Not at exit, when the program asks nothing more;
//! 2. estimates what the work needs ([`need`]: the README's formula of a report's memory, or
//!    1.5 times what the same work last used, whichever is larger) and refuses when the room
//!    left under the nearest limit is less than twice that (the program keeps at least as much
//!    as the work takes; at exit, once that);
//! 3. maps that much as a reservation (`engine::tables::arena::reserve`) where the profiler's
//!    memory comes from its own heap (the preload shim's): the work's allocations are then cut
//!    from memory the process already has, and what is left is unmapped when the grant is
//!    dropped. Where the profiler's memory is the inner allocator's (the `#[global_allocator]`
//!    front end's), the mapping only proves the room is there and is dropped at once.
//!
//! A refusal is said once per episode per kind of work on stderr, naming the limit, and the
//! work is skipped ([`Skipped`]): the next check tries again. A cgroup's memory limit is not a
//! limit here: it does not fail allocations but kills the process, and the near-limit dump
//! and the live file are there for it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::engine::tables::arena::{self, Reservation};

use super::Skipped;

/// The kinds of work granted memory, each with its own estimate and warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    /// A report set.
    Set = 0,
    /// A version of the live file.
    LiveVersion = 1,
    /// A profile in memory (the endpoint, a push, `profiles`).
    Profile = 2,
}

impl Work {
    fn name(self) -> &'static str {
        match self {
            Work::Set => "report set",
            Work::LiveVersion => "live file",
            Work::Profile => "profile",
        }
    }
}

/// What each kind of work last used of its reservation, bytes.
static LAST_USED: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];
/// The program's allocation failures counted at each kind's last grant or refusal.
static FAILURES_SEEN: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];
/// Whether each kind's last try was refused (its warning was said).
static REFUSED: [AtomicBool; 3] = [const { AtomicBool::new(false) }; 3];
/// Set by a front end whose profiler memory comes from the profiler heap (the shim).
static OWN_HEAP: AtomicBool = AtomicBool::new(false);

/// The part of a report's memory that does not grow with its stacks (symbolization, gzip's
/// state, the flamegraph's 2,000 stacks, the page), with room.
const FIXED: u64 = 16 << 20;
/// Bytes a stack takes in a report, and a frame (the README's `S × (200 + 2F)`), with frames
/// at their most.
const PER_STACK: u64 = 200 + 2 * crate::engine::tables::MAX_FRAMES as u64;

/// The work's memory comes from the profiler heap, which a reservation serves (the shim's
/// start-up says so).
pub(crate) fn use_own_heap() {
    OWN_HEAP.store(true, Ordering::Relaxed);
}

/// Whether the profiler's memory is its own heap's (the shim's), not the program's allocator's.
pub(crate) fn own_heap() -> bool {
    OWN_HEAP.load(Ordering::Relaxed)
}

/// What `work` is expected to need, bytes: the README's formula for the stacks in the tables
/// now, or 1.5 times what the same work last used, whichever is larger.
pub(crate) fn need(work: Work) -> u64 {
    let stacks = crate::engine::tables::stack_entries();
    let formula = match work {
        Work::Set | Work::Profile => stacks.saturating_mul(PER_STACK) + FIXED,
        Work::LiveVersion => stacks.saturating_mul(PER_STACK / 2) + FIXED / 2,
    };
    formula.max(LAST_USED[work as usize].load(Ordering::Relaxed).saturating_mul(3) / 2)
}

/// Memory granted to one piece of work: the reservation it allocates from (the shim), until
/// dropped.
#[derive(Debug)]
pub(crate) struct Grant {
    work: Work,
    reservation: Option<Reservation>,
    len: u64,
}

impl Drop for Grant {
    fn drop(&mut self) {
        if let Some(r) = &self.reservation {
            let used = self.len.saturating_sub(r.left() as u64);
            LAST_USED[self.work as usize].store(used, Ordering::Relaxed);
        }
    }
}

/// Grants `work` its memory, or refuses (see the module documentation); `exiting`: the exit
/// report, which the program's failed allocations do not hold back and which needs the room
/// only once.
pub(crate) fn grant(work: Work, exiting: bool) -> Result<Grant, std::io::Error> {
    match try_grant(work, exiting) {
        Ok(g) => {
            if REFUSED[work as usize].swap(false, Ordering::Relaxed) {
                crate::sys::warn(&format!(
                    "{}s resume: the memory they need is there again",
                    work.name()
                ));
            }
            Ok(g)
        }
        Err(why) => {
            if !REFUSED[work as usize].swap(true, Ordering::Relaxed) {
                crate::sys::warn(&format!(
                    "{} not written: {why}; profiling goes on in memory, and {}s resume when \
                     the memory is there",
                    work.name(),
                    work.name()
                ));
            }
            Err(Skipped::error(why))
        }
    }
}

fn try_grant(work: Work, exiting: bool) -> Result<Grant, String> {
    let limit = nearest_limit();
    let failures = crate::engine::hooks::alloc_failures();
    let seen = FAILURES_SEEN[work as usize].swap(failures, Ordering::Relaxed);
    if failures != seen && !exiting {
        let n = failures - seen;
        let which = limit.as_ref().map_or("a memory limit".to_string(), |l| l.name.clone());
        return Err(format!(
            "the program's allocations failed {n} time{} since the last {} (it is at {which}), \
             and Ying takes none of its last memory",
            if n == 1 { "" } else { "s" },
            work.name()
        ));
    }
    let need = need(work);
    if let Some(limit) = limit {
        let wanted = if exiting { need } else { need.saturating_mul(2) };
        if limit.room < wanted {
            let also = if exiting { "" } else { ", and as much again left to the program" };
            return Err(format!(
                "{} leaves {} free, and a {} needs about {}{also}",
                limit.name,
                crate::report::human_bytes(limit.room),
                work.name(),
                crate::report::human_bytes(need),
            ));
        }
    }
    let Some(reservation) = arena::reserve(need as usize) else {
        let e = std::io::Error::last_os_error();
        return Err(format!(
            "{} of memory for a {} could not be mapped ({e})",
            crate::report::human_bytes(need),
            work.name()
        ));
    };
    // Where the work's memory is not the profiler heap's, the mapping only showed that the
    // room is there.
    let reservation = OWN_HEAP.load(Ordering::Relaxed).then_some(reservation);
    Ok(Grant { work, reservation, len: need })
}

/// The limit nearest to being reached, with the room it leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Limit {
    /// What it is, for messages: `RLIMIT_AS (2.0 GiB)`.
    name: String,
    room: u64,
}

/// Whether the system runs with strict overcommit (`vm.overcommit_memory=2`), read once a
/// process (a system setting that rarely changes; a `fork` child inherits the answer).
fn strict_overcommit() -> bool {
    static STRICT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *STRICT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/vm/overcommit_memory").is_ok_and(|s| s.trim() == "2")
    })
}

/// The soft limit of `resource`, when it has one.
fn soft_limit(resource: libc::__rlimit_resource_t) -> Option<u64> {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `rl` is a valid out-pointer.
    (unsafe { libc::getrlimit(resource, &mut rl) } == 0 && rl.rlim_cur != libc::RLIM_INFINITY)
        .then_some(rl.rlim_cur)
}

/// `field` of a `/proc` file's text (`Name:   123 kB`), bytes.
fn kib(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()
        .map(|k| k << 10)
}

/// The nearest of the process's memory limits that fail allocations: `RLIMIT_AS` against the
/// address space in use, `RLIMIT_DATA` against the private writable memory (`VmData`), and
/// under strict overcommit (`vm.overcommit_memory=2`) the system's commit limit against what
/// is committed. `None` when none applies. Reads `/proc` only for a limit that is set (a short
/// process's exit report reads no more than it must).
fn nearest_limit() -> Option<Limit> {
    let mut limits = Vec::new();
    let rlimits = [
        (soft_limit(libc::RLIMIT_AS), "RLIMIT_AS", "VmSize"),
        (soft_limit(libc::RLIMIT_DATA), "RLIMIT_DATA", "VmData"),
    ];
    if rlimits.iter().any(|(l, _, _)| l.is_some()) {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        for (limit, name, field) in rlimits {
            if let (Some(limit), Some(used)) = (limit, kib(&status, field)) {
                limits.push(Limit {
                    name: format!("{name} ({})", crate::report::human_bytes(limit)),
                    room: limit.saturating_sub(used),
                });
            }
        }
    }
    if strict_overcommit() {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        if let (Some(limit), Some(committed)) =
            (kib(&meminfo, "CommitLimit"), kib(&meminfo, "Committed_AS"))
        {
            limits.push(Limit {
                name: format!(
                    "the commit limit of strict overcommit ({})",
                    crate::report::human_bytes(limit)
                ),
                room: limit.saturating_sub(committed),
            });
        }
    }
    limits.into_iter().min_by_key(|l| l.room)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_follows_what_the_work_last_used() {
        let before = need(Work::LiveVersion);
        assert!(before >= FIXED / 2);
        LAST_USED[Work::LiveVersion as usize].store(before * 4, Ordering::Relaxed);
        assert_eq!(need(Work::LiveVersion), before * 6);
        LAST_USED[Work::LiveVersion as usize].store(0, Ordering::Relaxed);
        assert_eq!(need(Work::LiveVersion), before);
    }

    #[test]
    fn a_limit_names_itself_and_its_room() {
        // This test process has no limit unless the machine sets one; when it has, the room
        // is below the limit.
        if let Some(l) = nearest_limit() {
            assert!(l.name.contains("RLIMIT") || l.name.contains("commit"), "{l:?}");
        }
    }
}
