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

/// Entries of the per-thread span-metadata cache (a power of two).
#[cfg_attr(not(feature = "profile_spans"), allow(dead_code))]
const CACHED: usize = 32;

thread_local! {
    static ENTERED: [Cell<usize>; TRACKED] = const { [const { Cell::new(0) }; TRACKED] };
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    /// Span ids created on this thread and their metadata addresses, direct-mapped by id.
    static CACHE: [Cell<(u64, usize)>; CACHED] = const { [const { Cell::new((0, 0)) }; CACHED] };
}

/// Remembers that span `id`, created on this thread, has metadata `meta`.
#[inline]
#[cfg_attr(not(feature = "profile_spans"), allow(dead_code))]
fn cache_insert(id: u64, meta: usize) {
    CACHE.with(|c| c[id as usize % CACHED].set((id, meta)));
}

/// The metadata address cached for span `id`, if this thread created it and its entry is
/// still there.
#[inline]
#[cfg_attr(not(feature = "profile_spans"), allow(dead_code))]
fn cache_get(id: u64) -> Option<usize> {
    let (cached, meta) = CACHE.with(|c| c[id as usize % CACHED].get());
    (cached == id && meta != 0).then_some(meta)
}

/// Forgets span `id` (closed) if this thread has it cached.
#[inline]
#[cfg_attr(not(feature = "profile_spans"), allow(dead_code))]
fn cache_remove(id: u64) {
    CACHE.with(|c| {
        let e = &c[id as usize % CACHED];
        if e.get().0 == id {
            e.set((0, 0));
        }
    });
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

#[inline]
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

#[inline]
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
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        cache_insert(id.into_u64(), meta_addr(attrs.metadata()));
    }

    fn on_enter(&self, id: &tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if let Some(m) = metadata_of(id, &ctx) {
            push(m);
        }
    }

    fn on_exit(&self, id: &tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if let Some(m) = metadata_of(id, &ctx) {
            pop(m);
        }
    }

    fn on_close(&self, id: tracing::span::Id, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        cache_remove(id.into_u64());
    }
}

#[cfg(feature = "profile_spans")]
fn meta_addr(m: &'static tracing::Metadata<'static>) -> usize {
    m as *const tracing::Metadata<'static> as usize
}

/// The metadata address of span `id`: from this thread's cache when this thread created the
/// span (the usual case, and free), else looked up in the subscriber's registry (a slab lookup
/// with two atomic reference-count updates, measured at 8 % of the benchmark workload's time
/// when done on every enter and exit).
///
/// A cache entry is exact for `tracing_subscriber`'s `Registry`: its ids name the creating
/// thread's shard and carry a generation, so an id seen again on this thread was re-created
/// by this thread, whose `on_new_span` overwrote the entry first. A subscriber that hands a
/// closed span's id to a span created on another thread could make a sample carry the closed
/// span's name until this thread reuses the entry.
#[cfg(feature = "profile_spans")]
fn metadata_of<S>(
    id: &tracing::span::Id,
    ctx: &tracing_subscriber::layer::Context<'_, S>,
) -> Option<usize>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    cache_get(id.into_u64()).or_else(|| ctx.metadata(id).map(meta_addr))
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

    #[test]
    fn id_cache_matches_whole_ids_and_forgets_closed_spans() {
        cache_insert(7, 100);
        assert_eq!(cache_get(7), Some(100));
        // Same entry, different id: a miss, never another span's metadata.
        assert_eq!(cache_get(7 + CACHED as u64), None);
        cache_insert(7 + CACHED as u64, 200);
        assert_eq!(cache_get(7), None);
        assert_eq!(cache_get(7 + CACHED as u64), Some(200));
        cache_remove(7); // Not the cached id: the entry stays.
        assert_eq!(cache_get(7 + CACHED as u64), Some(200));
        cache_remove(7 + CACHED as u64);
        assert_eq!(cache_get(7 + CACHED as u64), None);
    }
}
