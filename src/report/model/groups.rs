//! Memory per Tokio task kind and per span: a report's stacks summed by the task whose poll
//! allocated, and by the innermost span entered, each sum with its standard error.
//!
//! **A task's kind is read from its stack**, not asked of the runtime at allocation: every
//! allocation a Tokio task makes happens inside the runtime's poll of that task
//! (`tokio::runtime::task::core::Core::poll`, or a `block_on` for the main future), and the
//! first frame of the program's own inward of the innermost such poll is the task's future:
//! the `async fn` it was spawned with (`svc::handle_connection::{{closure}}`, printed
//! `svc::handle_connection`), the closure given to `spawn_blocking`. So a million short tasks
//! of one `async fn` are one row; the allocation path pays nothing and needs no feature or
//! `tokio_unstable`; a task that moves between worker threads (work stealing) is attributed
//! by what it ran, wherever it ran; and a program under the preload shim gets it too.
//! Memory allocated by one task and kept by another stays with the task that allocated it (a
//! sample records its allocation, not its owners). Stacks with no Tokio poll have no task; a
//! runtime's own allocations (its workers, its timers) are the kind `(tokio runtime)`.
//!
//! **A span's row** is the innermost span entered at allocation (`target::name`, with
//! `profile_spans`); memory that outlives its span stays with it, which is what a leak
//! looks like there.
//!
//! The sums are of the stacks' unrounded estimates, their variances added (the stacks' samples
//! are independent draws), as the report's totals are.

use super::Report;
use super::table::{ALLOC_BYTES, LIVE_BYTES, StackTable};
use crate::callstack::{Frame, is_allocator_entry};

/// Rows the outputs list of a grouping (the text report sums the rest on one line).
pub(crate) const LISTED: usize = 10;

/// The name of stacks whose only Tokio code is the runtime's own.
pub(crate) const RUNTIME_KIND: &str = "(tokio runtime)";

/// One row of a grouping.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Group {
    /// The task kind or the span.
    pub(crate) name: String,
    /// Estimated retained bytes, and their variance.
    pub(crate) retained: f64,
    pub(crate) retained_var: f64,
    /// Estimated allocated bytes, and their variance.
    pub(crate) allocated: f64,
    pub(crate) allocated_var: f64,
    /// Stacks summed.
    pub(crate) stacks: u32,
}

/// Whether `f` is a frame that polls a Tokio task or the runtime's main future: the anchor
/// inward of which a task's own frames start.
fn polls_a_task(f: &str) -> bool {
    f.starts_with("tokio::runtime::task::core::Core") && f.contains("::poll")
        || f.starts_with("tokio::runtime::") && f.contains("::block_on")
}

/// Whether `f` is glue between the runtime's poll and a task's future: the runtime, the
/// standard library, and the wrappers of futures (`Instrumented`, `Pin`, `Box`, `catch_unwind`).
fn is_glue(f: &str) -> bool {
    const PREFIXES: [&str; 14] = [
        "tokio::",
        "<tokio::",
        "core::",
        "<core::",
        "std::",
        "<std::",
        "alloc::",
        "<alloc::",
        "tracing::",
        "<tracing::",
        "futures_util::",
        "<futures_util::",
        "futures_core::",
        "<futures_core::",
    ];
    PREFIXES.iter().any(|p| f.starts_with(p)) || f.starts_with("<F as ")
}

/// `f` without the `::{{closure}}`s an `async fn`'s body and its closures add.
fn without_closures(f: &str) -> &str {
    let mut f = f;
    while let Some(rest) = f.strip_suffix("::{{closure}}") {
        f = rest;
    }
    f
}

/// The task kind of a stack whose frames `frames()` gives, innermost first (see the module
/// docs); None when no Tokio poll is on it. Most stacks have none: a first pass looks for the
/// runtime's poll with one prefix test a frame, and only a stack that has one is read again.
pub(crate) fn task_of<'a, I: Iterator<Item = &'a Frame>>(
    frames: impl Fn() -> I,
) -> Option<&'a str> {
    // The innermost anchor decides: a worker thread's own poll (the runtime runs its workers
    // as blocking tasks) lies further out.
    let anchor = frames().position(|f| polls_a_task(&f.function))?;
    // Innermost first, the last of the program's frames before the anchor is the one just
    // inward of it.
    let inward = frames()
        .take(anchor)
        .filter(|f| !f.is_noise() && !is_allocator_entry(&f.function) && !is_glue(&f.function))
        .last();
    Some(inward.map_or(RUNTIME_KIND, |f| without_closures(&f.function)))
}

/// The task kind of every row of a table, found once per report ([`super::Report::task_of`]).
#[derive(Debug, Default)]
pub(crate) struct TaskKinds {
    /// Each row's index in `names` (`u32::MAX`: none).
    of_row: Vec<u32>,
    names: Vec<String>,
}

impl TaskKinds {
    /// The kinds of `table`'s rows.
    pub(crate) fn of(table: &StackTable) -> Self {
        let mut me = Self::default();
        let mut index: std::collections::HashMap<&str, u32> = Default::default();
        me.of_row = (0..table.len() as u32)
            .map(|row| match task_of(|| table.frames_of(row)) {
                None => u32::MAX,
                Some(name) => *index.entry(name).or_insert_with(|| {
                    me.names.push(name.to_string());
                    me.names.len() as u32 - 1
                }),
            })
            .collect();
        me
    }

    /// The kind of row `row`, if it has one.
    pub(crate) fn of_row(&self, row: u32) -> Option<&str> {
        let i = *self.of_row.get(row as usize)?;
        self.names.get(i as usize).map(String::as_str)
    }
}

/// Sums rows into groups by `key` (None: the row is in no group), largest retained first,
/// then largest allocated.
fn group_by(table: &StackTable, key: impl Fn(u32) -> Option<String>) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = Default::default();
    for row in 0..table.len() as u32 {
        let Some(name) = key(row) else { continue };
        let fig = &table.row(row).fig;
        let i = *index.entry(name.clone()).or_insert_with(|| {
            groups.push(Group {
                name,
                retained: 0.0,
                retained_var: 0.0,
                allocated: 0.0,
                allocated_var: 0.0,
                stacks: 0,
            });
            groups.len() - 1
        });
        let g = &mut groups[i];
        g.retained += fig.est[LIVE_BYTES];
        g.retained_var += fig.var[LIVE_BYTES].max(0.0);
        g.allocated += fig.est[ALLOC_BYTES];
        g.allocated_var += fig.var[ALLOC_BYTES].max(0.0);
        g.stacks += 1;
    }
    groups.sort_by(|a, b| {
        b.retained.total_cmp(&a.retained).then(b.allocated.total_cmp(&a.allocated))
    });
    groups
}

/// The report's memory per task kind (empty when no stack has a Tokio poll).
pub(crate) fn by_task(r: &Report) -> Vec<Group> {
    group_by(&r.table, |row| r.task_of(row).map(str::to_string))
}

/// The report's memory per innermost span (empty when no stack has a span).
pub(crate) fn by_span(r: &Report) -> Vec<Group> {
    let table = &r.table;
    group_by(table, |row| table.spans_of(row).last().map(|sp| sp.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(names: &[&str]) -> Vec<Frame> {
        names
            .iter()
            .map(|n| Frame {
                ip: 1,
                function: (*n).into(),
                file: None,
                line: None,
                inlined: false,
                module: None,
            })
            .collect()
    }

    /// Stacks as a Tokio service's look (innermost first), names from a real one.
    #[test]
    fn the_task_is_the_future_inward_of_the_innermost_poll() {
        let worker_task = frames(&[
            "ying_example::Cache::insert",
            "ying_example::handle_request::{{closure}}::{{closure}}",
            "<tracing::instrument::Instrumented<T> as core::future::future::Future>::poll",
            "ying_example::cache_worker::{{closure}}",
            "tokio::runtime::task::core::Core::poll::{{closure}}",
            "tokio::loom::std::unsafe_cell::UnsafeCell::with_mut",
            "tokio::runtime::task::core::Core::poll",
            "tokio::runtime::task::harness::Harness::poll",
            "tokio::runtime::scheduler::multi_thread::worker::run",
            "<tokio::runtime::blocking::task::BlockingTask<T> as core::future::future::Future>::poll",
            "tokio::runtime::task::core::Core::poll",
            "std::thread::lifecycle::spawn_unchecked::{{closure}}",
            "start_thread",
        ]);
        assert_eq!(task_of(|| worker_task.iter()), Some("ying_example::cache_worker"));
        let runtime_own = frames(&[
            "tokio::runtime::scheduler::multi_thread::worker::run",
            "tokio::runtime::scheduler::multi_thread::worker::Launch::launch::{{closure}}",
            "<tokio::runtime::blocking::task::BlockingTask<T> as core::future::future::Future>::poll",
            "tokio::runtime::task::core::Core::poll",
            "start_thread",
        ]);
        assert_eq!(task_of(|| runtime_own.iter()), Some(RUNTIME_KIND));
        // The allocator's frames are no task's: the runtime's own allocation in a task's poll.
        let in_poll = frames(&[
            "__rustc::__rust_alloc",
            "malloc",
            "tokio::runtime::task::harness::Harness::poll_inner",
            "tokio::runtime::task::core::Core::poll",
        ]);
        assert_eq!(task_of(|| in_poll.iter()), Some(RUNTIME_KIND));
        let blocking = frames(&[
            "svc::load_file",
            "svc::main::{{closure}}::{{closure}}",
            "<tokio::runtime::blocking::task::BlockingTask<T> as core::future::future::Future>::poll",
            "tokio::runtime::task::core::Core::poll",
        ]);
        assert_eq!(task_of(|| blocking.iter()), Some("svc::main"));
        let main = frames(&[
            "svc::setup",
            "svc::main::{{closure}}",
            "tokio::runtime::park::CachedParkThread::block_on",
            "tokio::runtime::runtime::Runtime::block_on",
            "svc::main",
            "main",
        ]);
        assert_eq!(task_of(|| main.iter()), Some("svc::main"));
        let plain = frames(&["compute", "main"]);
        assert_eq!(task_of(|| plain.iter()), None, "no Tokio, no task");
    }

    #[test]
    fn closures_come_off_and_glue_is_skipped() {
        assert_eq!(without_closures("a::b::{{closure}}::{{closure}}"), "a::b");
        assert_eq!(without_closures("a::b"), "a::b");
        assert!(is_glue("<core::pin::Pin<P> as core::future::future::Future>::poll"));
        assert!(!is_glue("svc::handler::{{closure}}"));
    }
}
