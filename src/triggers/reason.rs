//! The reason of the report set being written now, when a trigger asked for it: set by the
//! report thread around the write, read by the text report for its `reason:` header line. A
//! leaf (only `std`), so that `report/` may read it. Report sets are written one at a time in
//! the process, so one slot serves.

use std::sync::Mutex;

/// Why the report set being written now was written (sets are written one at a time).
static REASON: Mutex<Option<String>> = Mutex::new(None);

/// Runs `f` (which writes one report set) with `reason` as the set's reason.
pub(crate) fn with_reason<T>(reason: Option<&str>, f: impl FnOnce() -> T) -> T {
    let Some(r) = reason else { return f() };
    *REASON.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(r.to_string());
    let out = f();
    let old = REASON.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    drop(old);
    out
}

/// The reason of the report set being written, if a trigger asked for it.
pub(crate) fn current() -> Option<String> {
    REASON.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}
