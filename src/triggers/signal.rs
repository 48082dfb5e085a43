//! The dump signal (`YING_DUMP_SIGNAL`): parsing its value, installing the handler, and noticing
//! when the program replaced it.
//!
//! The handler does one thing: it sets [`PENDING`] (a relaxed atomic store, async-signal-safe,
//! no `errno` change). The report thread swaps the flag back at each tick and writes the set.
//! The handler is installed only over the default disposition: a program that already handles
//! (or ignores) the signal keeps it, and Ying says so once. A program that installs its own
//! handler later replaces ours in the kernel; the report thread notices it at its next tick
//! (`sigaction` with no new action only reads the disposition) and says so once, and never
//! installs ours again. A leaf: it uses only `libc`.
//!
//! Under the shim, `libc::sigaction` here is the shim's export (preload/src/signals.rs): the
//! handler runs inside the shim's trampoline like every other, and a query reads back the
//! handler as installed, so the comparison with [`ours`] holds either way.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Set by the handler, taken by the report thread.
static PENDING: AtomicBool = AtomicBool::new(false);
/// The signal whose handler is ours (0: none installed).
static INSTALLED: AtomicI32 = AtomicI32::new(0);

/// Signal names and numbers (Linux, x86-64 and aarch64 agree on these) that may be used.
const NAMES: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("CONT", libc::SIGCONT),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
    ("PWR", libc::SIGPWR),
];

/// Signals that are refused: they cannot be caught (`KILL`, `STOP`), report a fault whose
/// handler must not return (`SEGV`, `BUS`, `FPE`, `ILL`, `TRAP`, `SYS`, `ABRT`), or whose
/// default action matters to the program's parent (`CHLD`).
const REFUSED: &[(&str, i32)] = &[
    ("KILL", libc::SIGKILL),
    ("STOP", libc::SIGSTOP),
    ("SEGV", libc::SIGSEGV),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("SYS", libc::SIGSYS),
    ("ABRT", libc::SIGABRT),
    ("CHLD", libc::SIGCHLD),
];

/// glibc keeps the first two real-time signals (32 and 33) for itself; `SIGRTMIN` is 34.
const RTMIN: i32 = 34;
const RTMAX: i32 = 64;

/// Parses a signal: a name with or without `SIG` (`SIGUSR2`, `usr2`), `RTMIN+n`/`RTMAX-n`, or a
/// number (`12`). Empty text means no signal.
///
/// # Errors
///
/// A short reason for an unknown name, a number out of range, or a signal that cannot serve
/// (`SIGKILL`, `SIGSTOP`, fault signals, `SIGCHLD`, glibc's reserved 32 and 33).
pub(crate) fn parse(s: &str) -> Result<Option<i32>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let n = if s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse::<i32>().map_err(|_| "not a signal number".to_string())?
    } else {
        let up = s.to_ascii_uppercase();
        let name = up.strip_prefix("SIG").unwrap_or(&up);
        if let Some(&(_, n)) = NAMES.iter().chain(REFUSED).find(|(k, _)| *k == name) {
            n
        } else if let Some(rest) = name.strip_prefix("RTMIN") {
            RTMIN + rt_offset(rest, '+')?
        } else if let Some(rest) = name.strip_prefix("RTMAX") {
            RTMAX - rt_offset(rest, '-')?
        } else {
            return Err("not a signal name such as SIGUSR2, USR2 or 12".to_string());
        }
    };
    if let Some((name, _)) = REFUSED.iter().find(|(_, k)| *k == n) {
        return Err(format!("SIG{name} cannot be used"));
    }
    if n == 32 || n == 33 {
        return Err("signals 32 and 33 are reserved by glibc".to_string());
    }
    if !(1..=RTMAX).contains(&n) || !(NAMES.iter().any(|(_, k)| *k == n) || n >= RTMIN) {
        return Err(format!(
            "not a usable signal number (e.g. 10 for SIGUSR1, 12 for SIGUSR2, {RTMIN} to {RTMAX} for real-time signals)"
        ));
    }
    Ok(Some(n))
}

fn rt_offset(rest: &str, sign: char) -> Result<i32, String> {
    if rest.is_empty() {
        return Ok(0);
    }
    let digits = rest.strip_prefix(sign).ok_or("expected RTMIN+n or RTMAX-n")?;
    let n: i32 = digits.parse().map_err(|_| "expected RTMIN+n or RTMAX-n".to_string())?;
    if n > RTMAX - RTMIN {
        return Err(format!("RTMIN+n and RTMAX-n take n from 0 to {}", RTMAX - RTMIN));
    }
    Ok(n)
}

/// The name of signal `n` for messages, e.g. `SIGUSR2` or `SIGRTMIN+3`.
pub(crate) fn name(n: i32) -> String {
    match NAMES.iter().chain(REFUSED).find(|(_, k)| *k == n) {
        Some((name, _)) => format!("SIG{name}"),
        None if n >= RTMIN => format!("SIGRTMIN+{}", n - RTMIN),
        None => format!("signal {n}"),
    }
}

extern "C" fn on_signal(_: libc::c_int) {
    PENDING.store(true, Ordering::Relaxed);
}

/// The handler address as `sigaction` reports it.
fn ours() -> libc::sighandler_t {
    on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t
}

/// The current disposition of `sig` (read only).
fn current(sig: i32) -> Option<libc::sighandler_t> {
    // SAFETY: an all-zero sigaction is a valid out-value.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only reads the disposition into `old`.
    let rc = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
    (rc == 0).then_some(old.sa_sigaction)
}

/// Installs the handler for `sig` if the program has not set a disposition of its own.
///
/// # Errors
///
/// What prevented it, as a sentence for a warning line.
pub(crate) fn install(sig: i32) -> Result<(), String> {
    let nm = name(sig);
    if INSTALLED.load(Ordering::SeqCst) == sig {
        return Ok(());
    }
    match current(sig) {
        Some(h) if h == libc::SIG_DFL => {}
        Some(h) if h == ours() => {
            INSTALLED.store(sig, Ordering::SeqCst);
            return Ok(());
        }
        Some(_) => {
            return Err(format!(
                "the program already handles {nm}: it keeps its handler, and {nm} writes no report"
            ));
        }
        None => return Err(format!("{nm} cannot be handled")),
    }
    // SAFETY: an all-zero sigaction is valid; the fields are filled below.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = ours();
    // Restart the program's interrupted system calls rather than fail them with EINTR.
    act.sa_flags = libc::SA_RESTART;
    // SAFETY: `act.sa_mask` is a valid sigset_t to empty.
    unsafe { libc::sigemptyset(&mut act.sa_mask) };
    // SAFETY: `act` is a complete sigaction whose handler only stores to an atomic.
    if unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) } != 0 {
        return Err(format!("{nm}: {}", std::io::Error::last_os_error()));
    }
    INSTALLED.store(sig, Ordering::SeqCst);
    Ok(())
}

/// What a tick found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tick {
    /// Nothing arrived.
    Quiet,
    /// The signal arrived since the last tick.
    Arrived,
    /// The program replaced our handler (once): the trigger is off from now on.
    Replaced,
}

/// The report thread's look at the signal trigger, each tick.
pub(crate) fn tick(sig: i32) -> Tick {
    if INSTALLED.load(Ordering::SeqCst) != sig {
        return Tick::Quiet;
    }
    let arrived = PENDING.swap(false, Ordering::Relaxed);
    if current(sig).is_some_and(|h| h != ours()) {
        INSTALLED.store(0, Ordering::SeqCst);
        // A signal that reached our handler before the program's took over is still served.
        return if arrived { Tick::Arrived } else { Tick::Replaced };
    }
    if arrived { Tick::Arrived } else { Tick::Quiet }
}

/// Whether our handler is installed for `sig` (and was not seen replaced).
pub(crate) fn armed(sig: i32) -> bool {
    INSTALLED.load(Ordering::SeqCst) == sig
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_refusals() {
        assert_eq!(parse("SIGUSR2"), Ok(Some(libc::SIGUSR2)));
        assert_eq!(parse("usr2"), Ok(Some(libc::SIGUSR2)));
        assert_eq!(parse(" 12 "), Ok(Some(12)));
        assert_eq!(parse("SIGRTMIN+2"), Ok(Some(36)));
        assert_eq!(parse("RTMAX"), Ok(Some(64)));
        assert_eq!(parse(""), Ok(None));
        assert!(parse("SIGKILL").unwrap_err().contains("cannot be used"));
        assert!(parse("9").unwrap_err().contains("SIGKILL"));
        assert!(parse("SEGV").is_err());
        assert!(parse("32").unwrap_err().contains("reserved"));
        assert!(parse("65").is_err());
        assert!(parse("0").is_err());
        assert!(parse("USR3").unwrap_err().contains("SIGUSR2"));
        assert!(parse("RTMIN+31").is_err());
        assert_eq!(name(libc::SIGUSR2), "SIGUSR2");
        assert_eq!(name(35), "SIGRTMIN+1");
    }
}
