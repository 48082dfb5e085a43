//! [`Error`]: an error that can cross the guard (see the [module documentation](super)).
//!
//! An `io::Error` built under the guard may hold a boxed error in profiler memory; handing it
//! to a program's thread would have that thread free profiler memory. Rebuilding it as
//! `io::Error::new(e.kind(), e.to_string())` crossed safely but dropped its sources. An
//! [`Error`] keeps the kind, the message, the path or variable at fault and every source's
//! message, all owned strings made by whoever copies it, and converts into `io::Error` for the
//! public signatures (its `source()` chain intact).

use std::fmt;
use std::io;

/// An error that can be copied out of profiler memory: kind, message, what is at fault, and
/// its causes, innermost last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: io::ErrorKind,
    message: String,
    at: Option<String>,
    source: Option<Box<Error>>,
    /// Work skipped for a reason already said on stderr ([`Skipped`]): said again by nobody.
    skipped: bool,
}

/// Work skipped for a reason already said on stderr, once per process or per episode (fewer
/// than [`crate::sys::FD_HEADROOM`] descriptors free, the reporting filesystem below its floor,
/// a memory limit too near): the caller says nothing more. Kept across the guard by [`Error`].
#[derive(Debug)]
pub(crate) struct Skipped(pub(crate) String);

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "skipped: {}", self.0)
    }
}

impl std::error::Error for Skipped {}

impl Skipped {
    /// An `io::Error` of work skipped for `why`.
    pub(crate) fn error(why: impl Into<String>) -> io::Error {
        io::Error::other(Skipped(why.into()))
    }

    /// Whether `e` is work skipped (see [`Skipped`]).
    pub(crate) fn is(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|r| r.is::<Skipped>())
    }
}

impl Error {
    /// An error of `kind` saying `message`.
    pub fn new(kind: io::ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), at: None, source: None, skipped: false }
    }

    /// The same error naming the path or variable at fault (said before the message, unless
    /// the message already names it).
    pub fn at(mut self, what: impl Into<String>) -> Self {
        self.at = Some(what.into());
        self
    }

    /// A copy of `e` (kind, message, and the messages of its sources, each as an `Error`).
    pub fn from_io(e: &io::Error) -> Self {
        if let Some(s) = e.get_ref().and_then(|r| r.downcast_ref::<Skipped>()) {
            return Self { skipped: true, ..Self::new(e.kind(), s.0.clone()) };
        }
        let mut out = Self::new(e.kind(), e.to_string());
        let mut causes = Vec::new();
        let mut next = std::error::Error::source(e);
        while let Some(c) = next {
            causes.push(c.to_string());
            next = c.source();
        }
        let mut chain: Option<Box<Error>> = None;
        for msg in causes.into_iter().rev() {
            chain =
                Some(Box::new(Error { source: chain, ..Error::new(io::ErrorKind::Other, msg) }));
        }
        out.source = chain;
        out
    }

    /// The kind of error.
    pub fn kind(&self) -> io::ErrorKind {
        self.kind
    }

    /// The path or variable at fault, if one was named.
    pub fn what(&self) -> Option<&str> {
        self.at.as_deref()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.at {
            Some(at) if !self.message.contains(at.as_str()) => write!(f, "{at}: {}", self.message),
            _ => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as _)
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> Self {
        if e.skipped {
            return Skipped::error(e.message);
        }
        // The message of an error without sources is the whole `io::Error`, as before.
        if e.source.is_none() && e.at.is_none() {
            return io::Error::new(e.kind, e.message);
        }
        io::Error::new(e.kind, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_at_fault_is_named_once() {
        let e = Error::new(io::ErrorKind::NotFound, "no such directory").at("/var/log/ying");
        assert_eq!(e.to_string(), "/var/log/ying: no such directory");
        assert_eq!(e.what(), Some("/var/log/ying"));
        let e = Error::new(io::ErrorKind::NotFound, "/var/log/ying: gone").at("/var/log/ying");
        assert_eq!(e.to_string(), "/var/log/ying: gone");
    }

    #[test]
    fn skipped_work_stays_skipped_across_the_guard() {
        let e = Error::from_io(&Skipped::error("RLIMIT_AS too near"));
        let io: io::Error = e.into();
        assert!(Skipped::is(&io));
        assert_eq!(io.to_string(), "skipped: RLIMIT_AS too near");
        assert!(!Skipped::is(&io::Error::other("skipped: not really")));
    }

    #[test]
    fn a_plain_error_becomes_the_same_io_error() {
        let io: io::Error = Error::new(io::ErrorKind::TimedOut, "too slow").into();
        assert_eq!(io.kind(), io::ErrorKind::TimedOut);
        assert_eq!(io.to_string(), "too slow");
        assert!(std::error::Error::source(&io).is_none());
    }
}
