//! Attribution of sampled allocations to `tracing` spans (Cargo feature `profile_spans`).
//!
//! In an async service one stack (say a JSON decoder) serves many kinds of requests; what an
//! operator needs is *which* request kind retains the memory. [`YingSpanLayer`] is a
//! `tracing_subscriber` layer that mirrors, per thread, the stack of entered span ids into a
//! small array kept in a const, destructor-free thread-local, and records each span's
//! `&'static Metadata` under its id in a fixed table of its own when the span is created. A
//! sampled allocation copies the innermost [`SPAN_DEPTH`] ids and looks their metadata up in
//! that table: no allocation, no call into the subscriber from inside the allocator (the cause
//! of 0.3.0's abort at thread exit), and nothing at all on the unsampled path. Entering and
//! exiting a span costs a push and a pop, with no registry lookup (a lookup per enter and exit
//! cost 7 % of an allocation-heavy workload, measured). Spans entered and exited around every
//! `.await` poll (tracing's `Instrumented`) are followed on whichever thread polls the task.
//!
//! The table holds 4096 spans at once (each id probes 4 slots); a span that finds no free slot
//! takes one over, and samples inside the span it displaced lose that level of their path rather
//! than gain a wrong one. Stats are kept per (stack, span path) pair.

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
    static ENTERED: [Cell<u64>; TRACKED] = const { [const { Cell::new(0) }; TRACKED] };
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Id -> metadata address for live spans (`profile_spans` only).
#[cfg(feature = "profile_spans")]
mod table {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};

    /// Slots; a power of two.
    const SLOTS: usize = 4096;
    /// Slots an id may occupy (consecutive, from its hash).
    const PROBES: usize = 4;

    /// One slot under a sequence count (odd while it changes), so a reader never pairs an id
    /// with another span's metadata.
    struct Slot {
        seq: AtomicU64,
        id: AtomicU64,
        meta: AtomicUsize,
    }

    static TABLE: [Slot; SLOTS] = [const {
        Slot { seq: AtomicU64::new(0), id: AtomicU64::new(0), meta: AtomicUsize::new(0) }
    }; SLOTS];

    fn first(id: u64) -> usize {
        (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize
    }

    fn slot(id: u64, probe: usize) -> &'static Slot {
        &TABLE[(first(id) + probe) % SLOTS]
    }

    /// Reads a slot consistently: (id, meta), or None while a writer is changing it.
    fn read(s: &Slot) -> Option<(u64, usize)> {
        let s1 = s.seq.load(Ordering::Acquire);
        if s1 & 1 != 0 {
            return None;
        }
        let id = s.id.load(Ordering::Relaxed);
        let meta = s.meta.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        (s.seq.load(Ordering::Relaxed) == s1).then_some((id, meta))
    }

    /// Writes a slot if `expect_id` is still its id; false if another writer got there first.
    fn write(s: &Slot, expect_id: u64, id: u64, meta: usize) -> bool {
        let s1 = s.seq.load(Ordering::Relaxed);
        if s1 & 1 != 0
            || s.seq.compare_exchange(s1, s1 + 1, Ordering::Acquire, Ordering::Relaxed).is_err()
        {
            return false;
        }
        let ok = s.id.load(Ordering::Relaxed) == expect_id;
        if ok {
            s.id.store(id, Ordering::Relaxed);
            s.meta.store(meta, Ordering::Relaxed);
        }
        s.seq.store(s1 + 2, Ordering::Release);
        ok
    }

    /// Records a new span.
    pub(super) fn insert(id: u64, meta: usize) {
        for p in 0..PROBES {
            if write(slot(id, p), 0, id, meta) {
                return;
            }
        }
        // All taken: displace the first (its span loses this level of attribution).
        let s = slot(id, 0);
        if let Some((old, _)) = read(s) {
            write(s, old, id, meta);
        }
    }

    /// Forgets a closed span.
    pub(super) fn remove(id: u64) {
        for p in 0..PROBES {
            if write(slot(id, p), id, 0, 0) {
                return;
            }
        }
    }

    /// The metadata address recorded for `id`, or 0.
    pub(super) fn get(id: u64) -> usize {
        (0..PROBES).filter_map(|p| read(slot(id, p))).find(|&(i, _)| i == id).map_or(0, |(_, m)| m)
    }
}

/// The calling thread's innermost entered spans, as metadata addresses.
#[inline]
pub(crate) fn current_path() -> SpanPath {
    #[allow(unused_mut)]
    let mut out = [0usize; SPAN_DEPTH];
    #[cfg(feature = "profile_spans")]
    {
        let depth = DEPTH.with(Cell::get).min(TRACKED);
        ENTERED.with(|e| {
            let ids = (0..depth).rev().filter_map(|i| e.get(i).map(Cell::get));
            let metas = ids.map(table::get).filter(|&m| m != 0);
            for (o, m) in out.iter_mut().zip(metas) {
                *o = m;
            }
        });
    }
    out
}

#[cfg_attr(not(feature = "profile_spans"), allow(dead_code))]
fn push(id: u64) {
    let depth = DEPTH.with(Cell::get);
    ENTERED.with(|e| {
        if let Some(c) = e.get(depth) {
            c.set(id);
        }
    });
    DEPTH.with(|d| d.set(depth + 1));
}

#[cfg_attr(not(feature = "profile_spans"), allow(dead_code))]
fn pop(id: u64) {
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
        if let Some(i) = (0..top).rev().find(|&i| e.get(i).map(Cell::get) == Some(id)) {
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
        table::insert(
            id.into_u64(),
            attrs.metadata() as *const tracing::Metadata<'static> as usize,
        );
    }

    fn on_enter(&self, id: &tracing::span::Id, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        push(id.into_u64());
    }

    fn on_exit(&self, id: &tracing::span::Id, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        pop(id.into_u64());
    }

    fn on_close(&self, id: tracing::span::Id, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        table::remove(id.into_u64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_pop_keeps_innermost_first_and_handles_out_of_order_exit() {
        // Ids as the layer would see them, and the metadata addresses recorded for them.
        #[cfg(feature = "profile_spans")]
        for id in [10u64, 20, 30] {
            table::insert(id, id as usize * 100);
        }
        push(10);
        push(20);
        push(30);
        let p = current_path();
        if cfg!(feature = "profile_spans") {
            assert_eq!(p, [3000, 2000, 1000, 0]);
        } else {
            assert_eq!(p, [0; SPAN_DEPTH]);
        }
        pop(20);
        if cfg!(feature = "profile_spans") {
            assert_eq!(current_path(), [3000, 1000, 0, 0]);
        }
        pop(30);
        pop(10);
        assert_eq!(current_path(), [0; SPAN_DEPTH]);
        pop(99); // Unbalanced exits are ignored.
        assert_eq!(DEPTH.with(Cell::get), 0);
    }

    #[cfg(feature = "profile_spans")]
    #[test]
    fn table_keeps_live_spans_and_never_pairs_an_id_with_another_span() {
        let ids: Vec<u64> = (1..=3000u64).map(|i| i * 7919 + (1 << 40)).collect();
        for &id in &ids {
            table::insert(id, id as usize ^ 0x5a5a);
        }
        // Far fewer live spans than slots: nearly all are found, and never wrongly.
        let found = ids.iter().filter(|&&id| table::get(id) != 0).count();
        assert!(found > 2900, "{found} of 3000 live spans found");
        for &id in &ids {
            let m = table::get(id);
            assert!(m == 0 || m == id as usize ^ 0x5a5a, "id {id} paired with {m:#x}");
        }
        for &id in &ids {
            table::remove(id);
        }
        assert!(ids.iter().all(|&id| table::get(id) == 0), "closed spans are forgotten");
    }
}
