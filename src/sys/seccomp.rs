//! What a seccomp filter installed by the program leaves Ying free to do.
//!
//! A filter is a program the kernel runs at every system call of the threads it covers; it may
//! kill the process (or the thread, or raise `SIGSYS`) for a call the program itself never
//! makes, and the profiler's calls (`openat`, `mmap`, `clone3`, `socket`, ...) are exactly
//! such calls. The preload shim sees a filter being installed (its `prctl` and `syscall`
//! exports, `preload/src/seccomp.rs`), runs the filter for each call of Ying's ([`harmless`],
//! a classic BPF interpreter over `struct seccomp_data` whose arguments are unknown) and, when
//! it may punish one, before the kernel gets the filter, moves the level kept here up:
//!
//! * [`NONE`]: no filter; Ying does what it always does.
//! * [`PROGRAM_THREADS`]: a filter without `SECCOMP_FILTER_FLAG_TSYNC` covers the thread that
//!   installed it and the threads it starts later, not the threads already running: Ying's
//!   own threads (the report thread, the endpoint, the pusher) started before it are not
//!   covered and go on; every program thread is treated as covered (Ying does not track which
//!   thread started which).
//! * [`ALL_THREADS`]: a filter with `TSYNC` (every thread of the process), or strict mode
//!   (the calling thread only, but a process whose last program thread ends with `SYS_exit`
//!   must not be kept alive by Ying's threads): the shim stops Ying's threads before the
//!   filter is installed.
//!
//! A covered thread makes no system call of Ying's from then on ([`restricted_here`]): the
//! messages of [`super::write_stderr`] are dropped, the spin lock spins instead of yielding,
//! the shim starts no thread, takes no sample (so the tables grow no more) and writes no exit
//! report. The level never goes down (filters cannot be removed), and a `fork` child inherits
//! it with the filter.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// No filter installed.
pub const NONE: u8 = 0;
/// A filter covers the program's threads, not Ying's threads already running.
pub const PROGRAM_THREADS: u8 = 1;
/// A filter covers every thread (or Ying's threads were stopped for strict mode).
pub const ALL_THREADS: u8 = 2;

static LEVEL: AtomicU8 = AtomicU8::new(NONE);
/// Whether every filter installed lets a program thread wait for the report thread (see
/// [`exit_by_report_thread`]).
static EXIT_BY_REPORT_THREAD: AtomicBool = AtomicBool::new(false);

/// The calls a program thread makes to have the report thread write the exit report and wait
/// for it: the condition variable's `futex`, `getpid`, the clock's (`clock_gettime` is the
/// vDSO's unless the clock source has none).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub const EXIT_WAIT_CALLS: &[libc::c_long] =
    &[libc::SYS_futex, libc::SYS_getpid, libc::SYS_clock_gettime, libc::SYS_sched_yield];

/// Says whether every filter installed allows [`EXIT_WAIT_CALLS`] (the shim, at each filter).
pub fn set_exit_by_report_thread(ok: bool) {
    EXIT_BY_REPORT_THREAD.store(ok, Ordering::SeqCst);
}

/// Whether the exit report is to be written by the report thread while the exiting thread
/// waits: only at [`PROGRAM_THREADS`] (the report thread is not covered; at [`ALL_THREADS`]
/// it was stopped) and when every filter lets the exiting thread wait.
pub(crate) fn exit_by_report_thread() -> bool {
    level() == PROGRAM_THREADS && EXIT_BY_REPORT_THREAD.load(Ordering::SeqCst)
}

thread_local! {
    /// Whether the calling thread is one of Ying's own (started by `spawn_profiler_thread`).
    static PROFILER_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Raises the level to `level` (never lowers it).
pub fn restrict(level: u8) {
    LEVEL.fetch_max(level, Ordering::SeqCst);
}

/// The level now.
pub fn level() -> u8 {
    LEVEL.load(Ordering::Relaxed)
}

/// Marks the calling thread as one of Ying's own threads (their first instruction).
pub(crate) fn mark_profiler_thread() {
    PROFILER_THREAD.with(|t| t.set(true));
}

/// Whether a filter may cover the calling thread: Ying must make no system call of its own
/// here. One relaxed load when no filter was ever installed.
pub fn restricted_here() -> bool {
    match level() {
        NONE => false,
        PROGRAM_THREADS => !PROFILER_THREAD.with(Cell::get),
        _ => true,
    }
}

/// One classic BPF instruction (`struct sock_filter`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Operation.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Operand.
    pub k: u32,
}

/// The system calls Ying makes, measured with `strace -f` on a profiled program with the
/// exit report, periodic reports, the endpoint and pushes (see the README's Limits), plus
/// their near relatives (`clone` for `clone3`, `renameat2` for `renameat`...). Ying cannot do
/// without these: a filter must allow each of them for Ying to go on as if there were no
/// filter (a failed `mmap` of the profiler's heap aborts, a failed `futex` spins, a faked
/// success is worse).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const MUST_ALLOW: &[libc::c_long] = &[
    libc::SYS_brk,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    libc::SYS_futex,
    libc::SYS_sched_yield,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_clock_gettime,
    libc::SYS_gettid,
    libc::SYS_getpid,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigaction,
    libc::SYS_clone,
    libc::SYS_clone3,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_exit,
    libc::SYS_getrandom,
    libc::SYS_tgkill,
];

/// The calls Ying makes whose failure (an errno from the filter, never 0) it survives with
/// a warning: files, sockets, queries.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const MAY_FAIL: &[libc::c_long] = &[
    libc::SYS_openat,
    libc::SYS_read,
    libc::SYS_pread64,
    libc::SYS_write,
    libc::SYS_writev,
    libc::SYS_close,
    libc::SYS_newfstatat,
    libc::SYS_fstat,
    libc::SYS_statx,
    libc::SYS_lseek,
    libc::SYS_fcntl,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_fchmod,
    libc::SYS_readlinkat,
    libc::SYS_getdents64,
    libc::SYS_unlinkat,
    // The live file's heartbeat (`report/live/`).
    libc::SYS_utimensat,
    // The resident set's parts (`report/model/rss.rs`): a refused `mincore` leaves a part's
    // pages counted by its mapping's length.
    libc::SYS_mincore,
    libc::SYS_mkdirat,
    libc::SYS_getcwd,
    libc::SYS_socket,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_setsockopt,
    libc::SYS_getsockopt,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_accept4,
    libc::SYS_accept,
    libc::SYS_connect,
    libc::SYS_sendto,
    libc::SYS_recvfrom,
    libc::SYS_shutdown,
    libc::SYS_ppoll,
    libc::SYS_ioctl,
    // The shim's own reading of the next filter (a failure makes that filter harmful).
    libc::SYS_process_vm_readv,
    libc::SYS_sched_getaffinity,
    libc::SYS_prlimit64,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    // A descriptor table of Ying's own for its threads (`sys::fds`), and the program's fd 2
    // borrowed for a message: refused, the thread stays in the program's table.
    libc::SYS_close_range,
    libc::SYS_unshare,
    libc::SYS_pidfd_open,
    libc::SYS_pidfd_getfd,
];

#[cfg(target_arch = "x86_64")]
const OLD_CALLS: &[libc::c_long] = &[
    libc::SYS_open,
    libc::SYS_stat,
    libc::SYS_lstat,
    libc::SYS_readlink,
    libc::SYS_rename,
    libc::SYS_unlink,
    libc::SYS_mkdir,
    libc::SYS_poll,
    libc::SYS_access,
    libc::SYS_getrlimit,
];
#[cfg(target_arch = "aarch64")]
const OLD_CALLS: &[libc::c_long] = &[];

/// `AUDIT_ARCH_*` of this target, as `seccomp_data.arch` holds it.
#[cfg(target_arch = "x86_64")]
const ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const ARCH: u32 = 0xc000_00b7;

/// Most paths followed through one filter before giving up (a filter whose branches depend
/// on many arguments): then it is not harmless.
const MAX_STEPS: usize = 200_000;

/// Whether the filter `prog` lets every system call of Ying's through: each call of
/// `MUST_ALLOW` ends in `SECCOMP_RET_ALLOW` or `SECCOMP_RET_LOG` on every path the filter may
/// take (the arguments and instruction pointer are unknown: a jump on them follows both
/// ways), each call of `MAY_FAIL` in those or `SECCOMP_RET_ERRNO` with a non-zero errno.
/// Anything else (kill, trap, trace, user notification, an unknown action, an instruction
/// seccomp does not accept, too many paths) makes it harmful. Filters stack and the
/// strictest action wins, so a stack of harmless filters is harmless.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn harmless(prog: &[Insn]) -> bool {
    let ok = |nr: libc::c_long, may_fail: bool| {
        outcomes(prog, nr as u32).is_some_and(|actions| {
            actions.iter().all(|&a| match a & 0xffff_0000 {
                0x7fff_0000 | 0x7ffc_0000 => true,          // ALLOW, LOG
                0x0005_0000 => may_fail && a & 0xffff != 0, // ERRNO (not 0: a faked success)
                _ => false,
            })
        })
    };
    MUST_ALLOW.iter().chain(OLD_CALLS).all(|&nr| ok(nr, false))
        && MAY_FAIL.iter().all(|&nr| ok(nr, true))
}

/// Whether the filter `prog` allows (`SECCOMP_RET_ALLOW` or `SECCOMP_RET_LOG`) system call
/// `nr` whatever its arguments.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn allows(prog: &[Insn], nr: libc::c_long) -> bool {
    outcomes(prog, nr as u32).is_some_and(|actions| {
        actions.iter().all(|&a| matches!(a & 0xffff_0000, 0x7fff_0000 | 0x7ffc_0000))
    })
}

/// Without a list of this target's calls, no filter is harmless.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn harmless(_prog: &[Insn]) -> bool {
    false
}

/// Every value `prog` may return for system call `nr` of this architecture, or `None` when
/// that cannot be said (see [`harmless`]).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn outcomes(prog: &[Insn], nr: u32) -> Option<Vec<u32>> {
    // Values: `None` is unknown (an argument, the instruction pointer, or computed from one).
    #[derive(Clone)]
    struct State {
        pc: usize,
        a: Option<u32>,
        x: Option<u32>,
        mem: [Option<u32>; 16],
    }
    let mut out = Vec::new();
    let mut todo = vec![State { pc: 0, a: Some(0), x: Some(0), mem: [None; 16] }];
    let mut steps = 0usize;
    while let Some(mut s) = todo.pop() {
        loop {
            steps += 1;
            if steps > MAX_STEPS {
                return None;
            }
            let i = *prog.get(s.pc)?;
            s.pc += 1;
            let k = i.k;
            let class = i.code & 0x07;
            let src_x = i.code & 0x08 != 0;
            match class {
                // BPF_LD
                0x00 => {
                    s.a = match i.code {
                        0x20 => load(k, nr)?,            // W ABS
                        0x80 => Some(64),                // W LEN
                        0x00 => Some(k),                 // W IMM
                        0x60 => *s.mem.get(k as usize)?, // W MEM
                        _ => return None,
                    }
                }
                // BPF_LDX
                0x01 => {
                    s.x = match i.code {
                        0x81 => Some(64),                // W LEN
                        0x01 => Some(k),                 // W IMM
                        0x61 => *s.mem.get(k as usize)?, // W MEM
                        _ => return None,
                    }
                }
                0x02 => *s.mem.get_mut(k as usize)? = s.a, // BPF_ST
                0x03 => *s.mem.get_mut(k as usize)? = s.x, // BPF_STX
                // BPF_ALU
                0x04 => {
                    let op = i.code & 0xf0;
                    let b = if src_x { s.x } else { Some(k) };
                    s.a = match op {
                        0x80 => s.a.map(u32::wrapping_neg), // NEG
                        _ => match (s.a, b) {
                            (Some(a), Some(b)) => Some(match op {
                                0x00 => a.wrapping_add(b),
                                0x10 => a.wrapping_sub(b),
                                0x20 => a.wrapping_mul(b),
                                0x30 => a.checked_div(b)?, // a division by zero: rejected
                                0x40 => a | b,
                                0x50 => a & b,
                                0x60 => a.checked_shl(b).unwrap_or(0),
                                0x70 => a.checked_shr(b).unwrap_or(0),
                                0xa0 => a ^ b,
                                _ => return None,
                            }),
                            _ if matches!(op, 0x00..=0x70 | 0xa0) => None,
                            _ => return None,
                        },
                    }
                }
                // BPF_JMP
                0x05 => {
                    let op = i.code & 0xf0;
                    if op == 0x00 {
                        s.pc = s.pc.checked_add(k as usize)?; // JA
                        continue;
                    }
                    let b = if src_x { s.x } else { Some(k) };
                    let taken = match (s.a, b) {
                        (Some(a), Some(b)) => Some(match op {
                            0x10 => a == b,
                            0x20 => a > b,
                            0x30 => a >= b,
                            0x40 => a & b != 0,
                            _ => return None,
                        }),
                        _ if matches!(op, 0x10..=0x40) => None,
                        _ => return None,
                    };
                    let (t, f) = (s.pc + i.jt as usize, s.pc + i.jf as usize);
                    match taken {
                        Some(true) => s.pc = t,
                        Some(false) => s.pc = f,
                        None => {
                            let mut other = s.clone();
                            other.pc = f;
                            todo.push(other);
                            s.pc = t;
                        }
                    }
                }
                // BPF_RET
                0x06 => {
                    match i.code {
                        0x06 => out.push(k),    // RET K
                        0x16 => out.push(s.a?), // RET A
                        _ => return None,
                    }
                    break;
                }
                // BPF_MISC
                _ => match i.code {
                    0x07 => s.x = s.a, // TAX
                    0x87 => s.a = s.x, // TXA
                    _ => return None,
                },
            }
        }
    }
    Some(out)
}

/// The 32-bit word at offset `k` of `struct seccomp_data` for call `nr`: `Some(None)` for the
/// instruction pointer and the arguments (unknown), `None` for an offset seccomp rejects.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn load(k: u32, nr: u32) -> Option<Option<u32>> {
    match k {
        0 => Some(Some(nr)),
        4 => Some(Some(ARCH)),
        8..=60 if k % 4 == 0 => Some(None),
        _ => None,
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    const fn stmt(code: u16, k: u32) -> Insn {
        Insn { code, jt: 0, jf: 0, k }
    }
    const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
        Insn { code, jt, jf, k }
    }
    const LD_NR: Insn = stmt(0x20, 0);
    const LD_ARCH: Insn = stmt(0x20, 4);
    const LD_ARG0: Insn = stmt(0x20, 16);
    const JEQ: u16 = 0x15;
    const RET: u16 = 0x06;
    const ALLOW: u32 = 0x7fff_0000;
    const KILL: u32 = 0x8000_0000;
    const ERRNO_EPERM: u32 = 0x0005_0001;

    /// Punishes call `nr` with `action`, allows the rest (the test program's filter).
    fn deny(nr: libc::c_long, action: u32) -> Vec<Insn> {
        vec![
            LD_ARCH,
            jump(JEQ, ARCH, 1, 0),
            stmt(RET, ALLOW),
            LD_NR,
            jump(JEQ, nr as u32, 0, 1),
            stmt(RET, action),
            stmt(RET, ALLOW),
        ]
    }

    #[test]
    fn a_call_ying_never_makes_is_harmless() {
        assert!(harmless(&deny(libc::SYS_ptrace, KILL)));
        assert!(harmless(&deny(libc::SYS_execve, 0x0003_0000)));
        assert!(harmless(&[stmt(RET, ALLOW)]));
    }

    #[test]
    fn a_call_ying_makes_is_harmful_unless_it_may_fail() {
        assert!(!harmless(&deny(libc::SYS_openat, KILL)));
        assert!(!harmless(&deny(libc::SYS_mmap, ERRNO_EPERM)));
        assert!(!harmless(&deny(libc::SYS_clone3, 0x0003_0000)));
        assert!(harmless(&deny(libc::SYS_openat, ERRNO_EPERM)));
        assert!(harmless(&deny(libc::SYS_socket, ERRNO_EPERM)));
        // ERRNO 0 fakes a success: never harmless.
        assert!(!harmless(&deny(libc::SYS_socket, 0x0005_0000)));
        // Log and user notification.
        assert!(harmless(&deny(libc::SYS_mmap, 0x7ffc_0000)));
        assert!(!harmless(&deny(libc::SYS_write, 0x7fc0_0000)));
    }

    #[test]
    fn a_jump_on_an_argument_follows_both_ways() {
        // `write` to any descriptor but 1 is killed.
        let prog = [
            LD_NR,
            jump(JEQ, libc::SYS_write as u32, 1, 0),
            stmt(RET, ALLOW),
            LD_ARG0,
            jump(JEQ, 1, 0, 1),
            stmt(RET, ALLOW),
            stmt(RET, KILL),
        ];
        assert!(!harmless(&prog));
        // Through scratch memory and X, still unknown; RET A of an unknown is harmful.
        let prog = [LD_ARG0, stmt(0x02, 3), stmt(0x61, 3), stmt(0x87, 0), stmt(0x16, 0)];
        assert!(!harmless(&prog));
        // Known values compute.
        let prog = [stmt(0x00, 0x7fff), stmt(0x64, 16), stmt(0x16, 0)];
        assert!(harmless(&prog));
    }

    #[test]
    fn malformed_filters_are_harmful() {
        assert!(!harmless(&[]));
        assert!(!harmless(&[LD_NR])); // runs off the end
        assert!(!harmless(&[stmt(0x20, 2), stmt(RET, ALLOW)])); // unaligned load
        assert!(!harmless(&[stmt(0x28, 0), stmt(RET, ALLOW)])); // half-word load
    }

    #[test]
    fn allows_one_call() {
        assert!(allows(&deny(libc::SYS_openat, KILL), libc::SYS_futex));
        assert!(!allows(&deny(libc::SYS_futex, KILL), libc::SYS_futex));
        assert!(!allows(&deny(libc::SYS_futex, ERRNO_EPERM), libc::SYS_futex));
    }
}
