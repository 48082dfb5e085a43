//! Attribution of sampled allocations to `tracing` spans (Cargo feature `profile_spans`).
//!
//! In an async service one stack (say a JSON decoder) serves many kinds of requests; what an
//! operator needs is *which* request kind retains the memory. [`YingSpanLayer`] is a
//! `tracing_subscriber` layer that mirrors, per thread, the stack of entered spans into a small
//! array of `&'static Metadata` pointers kept in a const, destructor-free thread-local. A sampled
//! allocation copies the innermost [`SPAN_DEPTH`] entries: no allocation, no call into the
//! subscriber from inside the allocator (the cause of 0.3.0's abort at thread exit), and nothing
//! at all on the unsampled path. Spans entered and exited around every `.await` poll (tracing's
//! `Instrumented`) are followed on whichever thread polls the task.
//!
//! Stats are kept per (stack, span path) pair.

use std::cell::Cell;

/// Spans kept per sample (innermost first).
pub const SPAN_DEPTH: usize = 4;
/// Entered spans tracked per thread (deeper nesting keeps the outermost ones).
const TRACKED: usize = 16;

/// A sample's span path: metadata addresses, innermost first, 0 = none.
pub(crate) type SpanPath = [usize; SPAN_DEPTH];

/// One span of a [`crate::StackStats`]'s path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanInfo {
    /// The span's name.
    pub name: &'static str,
    /// The span's target (usually the module path).
    pub target: &'static str,
}

impl std::fmt::Display for SpanInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}::{}", self.target, self.name)
    }
}

thread_local! {
    static ENTERED: [Cell<usize>; TRACKED] = const { [const { Cell::new(0) }; TRACKED] };
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// The calling thread's innermost entered spans.
#[inline]
pub(crate) fn current_path() -> SpanPath {
    let mut out = [0usize; SPAN_DEPTH];
    if cfg!(feature = "profile_spans") {
        let depth = DEPTH.with(Cell::get).min(TRACKED);
        ENTERED.with(|e| {
            for (o, i) in out.iter_mut().zip((0..depth).rev()) {
                *o = e.get(i).map(Cell::get).unwrap_or(0);
            }
        });
    }
    out
}

#[cfg_attr(not(feature = "profile_spans"), allow(dead_code))]
fn push(meta: usize) {
    let depth = DEPTH.with(Cell::get);
    ENTERED.with(|e| {
        if let Some(c) = e.get(depth) {
            c.set(meta);
        }
    });
    DEPTH.with(|d| d.set(depth + 1));
}

#[cfg_attr(not(feature = "profile_spans"), allow(dead_code))]
fn pop(meta: usize) {
    let depth = DEPTH.with(Cell::get);
    if depth == 0 {
        return;
    }
    ENTERED.with(|e| {
        // Usually the innermost; tracing allows out-of-order exits, so find the newest match.
        let top = depth.min(TRACKED);
        if depth > TRACKED {
            return; // Beyond what we track: the tracked part is unchanged.
        }
        if let Some(i) = (0..top).rev().find(|&i| e.get(i).map(Cell::get) == Some(meta)) {
            for j in i..top - 1 {
                if let (Some(a), Some(b)) = (e.get(j), e.get(j + 1)) {
                    a.set(b.get());
                }
            }
        }
    });
    DEPTH.with(|d| d.set(depth - 1));
}

/// Resolves a span path into names, outermost first.
pub(crate) fn resolve(path: &SpanPath) -> Vec<SpanInfo> {
    #[cfg(feature = "profile_spans")]
    {
        path.iter()
            .rev()
            .filter(|&&p| p != 0)
            .map(|&p| {
                // SAFETY: non-zero entries are addresses of `&'static Metadata<'static>` values
                // pushed by `YingSpanLayer`; they live for the whole program.
                let m: &'static tracing::Metadata<'static> =
                    unsafe { &*(p as *const tracing::Metadata<'static>) };
                SpanInfo { name: m.name(), target: m.target() }
            })
            .collect()
    }
    #[cfg(not(feature = "profile_spans"))]
    {
        let _ = path;
        Vec::new()
    }
}

/// A `tracing_subscriber` layer that lets Ying attribute samples to the entered spans.
///
/// ```
/// # #[cfg(feature = "profile_spans")] {
/// use tracing_subscriber::prelude::*;
/// tracing_subscriber::registry().with(ying_profiler::spans::YingSpanLayer).init();
/// # }
/// ```
#[cfg(feature = "profile_spans")]
#[derive(Debug, Clone, Copy, Default)]
pub struct YingSpanLayer;

#[cfg(feature = "profile_spans")]
impl<S> tracing_subscriber::Layer<S> for YingSpanLayer
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_enter(&self, id: &tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if let Some(m) = ctx.metadata(id) {
            push(m as *const tracing::Metadata<'static> as usize);
        }
    }

    fn on_exit(&self, id: &tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if let Some(m) = ctx.metadata(id) {
            pop(m as *const tracing::Metadata<'static> as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_pop_keeps_innermost_first_and_handles_out_of_order_exit() {
        push(10);
        push(20);
        push(30);
        let p = current_path();
        if cfg!(feature = "profile_spans") {
            assert_eq!(p, [30, 20, 10, 0]);
        } else {
            assert_eq!(p, [0; SPAN_DEPTH]);
        }
        pop(20);
        if cfg!(feature = "profile_spans") {
            assert_eq!(current_path(), [30, 10, 0, 0]);
        }
        pop(30);
        pop(10);
        assert_eq!(current_path(), [0; SPAN_DEPTH]);
        pop(99); // Unbalanced exits are ignored.
        assert_eq!(DEPTH.with(Cell::get), 0);
    }
}
