//! Stacks: walking the calling program's stack, for the engine's sampled path.
//!
//! Code here runs inside `malloc` (a sample), on any thread, and under the same rules as
//! [`crate::engine`]: no allocation on the host's heap, no I/O, nothing that may block or be a
//! cancellation point, a bounded stack. It may use [`crate::sys`] and glibc's lock-free
//! `_dl_find_object`; it knows nothing of the engine, the symbols or the reports. The engine
//! calls it from [`crate::engine::capture`] (the walk), [`crate::engine::giant`] (`module+offset`
//! of a refused request's frames, [`unwind::object_of`]) and its fork handlers.

pub(crate) mod unwind;
