//! Where reports come from, and how their memory crosses from the profiler to the caller.
//!
//! A [`ProfileSource`] is a front end (the `#[global_allocator]` profiler or the preload shim)
//! seen from the report side: it takes snapshots and runs code under its guard. This module sits
//! below everything that builds reports (the runner, `profiles.rs`, `serve/`), so that each of
//! them can take a source without importing the others.
//!
//! # Why one guard helper
//!
//! Memory allocated while the guard is held is the profiler's: the front end neither samples
//! nor counts it as the program's, and it must be freed as the profiler's too (freed outside
//! the guard, it would be counted as a free of the program's memory, and under the shim, a
//! block the profiler's heap made would go to glibc's `free`). So a value built under the guard
//! cannot simply be returned to a program's thread: it is copied out, the copy allocated as
//! the caller's, and the original dropped under the guard again. [`guarded`] is that
//! choreography, written once: it runs `f` under the guard, gives the caller `copy(&value)`
//! outside the guard, then drops the value under the guard. An error crosses the guard as an
//! [`Error`], whose message and source chain are owned strings that `copy` can clone.
//!
//! Report sets are also written one at a time in the process: [`turn`].

pub(crate) mod budget;
mod error;
pub(crate) mod turn;

pub use error::Error;
pub(crate) use error::Skipped;
pub use turn::DEFAULT_DUMP_TIMEOUT;

use std::io;

/// Where a runner's reports come from: the `#[global_allocator]` profiler or the preload shim.
///
/// Both front ends keep their stacks in the same tables, so report sets are written from those
/// tables directly (a report model, see `src/report/model/`); a source supplies the
/// sample interval and the guard its reports run under.
pub trait ProfileSource: Send + Sync + 'static {
    /// Marks the calling thread as profiler code for the rest of its life. Called first thing on
    /// report threads, before any allocation, so it must not allocate.
    fn enter_profiler_thread(&self);
    /// Runs `f` as profiler code (its allocations are the profiler's own).
    fn run_guarded(&self, f: &mut dyn FnMut());
    /// The mean sampling interval in bytes.
    fn sample_interval(&self) -> u64;
    /// What the source's byte figures count. The default is the requested sizes (the Rust
    /// front end's); the preload shim counts usable sizes.
    fn unit(&self) -> crate::ByteUnit {
        crate::ByteUnit::Requested
    }
    /// Whether a `fork` child that took samples of its own writes the exit report too. The
    /// default is no: only the process that registered the exit report writes it, because a
    /// child may have been forked while another thread held a profiler lock, which nothing
    /// released in the child. A source whose `fork` handlers take and release every profiler
    /// lock around the fork (the preload shim's) may answer yes.
    fn reports_in_fork_children(&self) -> bool {
        false
    }
    /// Whether the front end tells the runner itself when the program's last thread has ended
    /// (the preload shim counts every thread it sees start). The default is no: the runner then
    /// watches the main thread only (see `ProfilerRunner::spawn_thread_for`).
    fn counts_program_threads(&self) -> bool {
        false
    }
}

/// Runs `f` as profiler code and returns `copy` of its value, made outside the guard (the
/// caller's memory); the value itself is then dropped as profiler code. The error is the
/// source's running nothing (a [`ProfileSource::run_guarded`] that did not call `f`). With
/// `copy` `|_| ()`, this is "run `f` as profiler code" and nothing crosses.
pub(crate) fn guarded<T, O>(
    source: &dyn ProfileSource,
    f: impl FnOnce() -> T,
    copy: impl FnOnce(&T) -> O,
) -> Result<O, Error> {
    let mut f = Some(f);
    let mut built: Option<T> = None;
    source.run_guarded(&mut || {
        if let Some(f) = f.take() {
            built = Some(f());
        }
    });
    let out = match &built {
        Some(v) => Ok(copy(v)),
        None => Err(Error::new(io::ErrorKind::Other, "the report source ran nothing")),
    };
    source.run_guarded(&mut || drop(built.take()));
    out
}

/// [`guarded`] for a fallible `f`: the value is copied by `copy`, an error as an [`Error`]
/// (kind, message and source chain, copied as the caller's).
pub(crate) fn guarded_io<T, O>(
    source: &dyn ProfileSource,
    f: impl FnOnce() -> io::Result<T>,
    copy: impl FnOnce(&T) -> O,
) -> Result<O, Error> {
    guarded(source, f, |r| match r {
        Ok(v) => Ok(copy(v)),
        Err(e) => Err(Error::from_io(e)),
    })
    .and_then(|r| r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A source that counts how often it entered its guard, and whether it is in it now.
    struct Counting {
        entered: AtomicUsize,
        depth: AtomicUsize,
        runs: bool,
    }

    impl ProfileSource for Counting {
        fn sample_interval(&self) -> u64 {
            1
        }
        fn enter_profiler_thread(&self) {}
        fn run_guarded(&self, f: &mut dyn FnMut()) {
            self.entered.fetch_add(1, Ordering::SeqCst);
            if self.runs {
                self.depth.fetch_add(1, Ordering::SeqCst);
                f();
                self.depth.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    fn source(runs: bool) -> &'static Counting {
        Box::leak(Box::new(Counting {
            entered: AtomicUsize::new(0),
            depth: AtomicUsize::new(0),
            runs,
        }))
    }

    /// Records whether it was dropped inside the guard.
    struct DropProbe<'a>(&'a Counting, &'a AtomicUsize);

    impl Drop for DropProbe<'_> {
        fn drop(&mut self) {
            self.1.store(self.0.depth.load(Ordering::SeqCst) + 10, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_value_is_built_and_dropped_inside_and_copied_outside() {
        let s = source(true);
        let dropped_at = AtomicUsize::new(0);
        let out = guarded(
            s,
            || {
                assert_eq!(s.depth.load(Ordering::SeqCst), 1, "built under the guard");
                DropProbe(s, &dropped_at)
            },
            |_| s.depth.load(Ordering::SeqCst),
        );
        assert_eq!(out, Ok(0), "copied outside the guard");
        assert_eq!(dropped_at.load(Ordering::SeqCst), 11, "dropped under the guard");
        assert_eq!(s.entered.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_source_that_runs_nothing_is_an_error() {
        let s = source(false);
        let e = guarded(s, || 1, |v| *v).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Other);
        assert_eq!(e.to_string(), "the report source ran nothing");
    }

    #[test]
    fn an_error_crosses_with_its_kind_message_and_sources() {
        let s = source(true);
        #[derive(Debug)]
        struct Inner;
        impl std::fmt::Display for Inner {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("the inner cause")
            }
        }
        impl std::error::Error for Inner {}
        #[derive(Debug)]
        struct Outer(Inner);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("/x/y: could not write")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = guarded_io(
            s,
            || -> io::Result<u8> {
                Err(io::Error::new(io::ErrorKind::PermissionDenied, Outer(Inner)))
            },
            |v| *v,
        )
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert_eq!(e.to_string(), "/x/y: could not write");
        let io: io::Error = e.into();
        assert_eq!(io.kind(), io::ErrorKind::PermissionDenied);
        assert_eq!(io.to_string(), "/x/y: could not write");
        let cause = std::error::Error::source(&io).map(|c| c.to_string());
        assert_eq!(cause.as_deref(), Some("the inner cause"));
    }
}
