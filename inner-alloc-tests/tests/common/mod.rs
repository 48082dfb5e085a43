//! One deterministic workload and its exact expectations, shared by the three test binaries
//! (`System`, mimalloc, jemalloc inside `YingProfiler`). The interval is one byte, so every
//! allocation is a sample of weight one and every figure is exact; sizes are the program's
//! `Layout`s, so the expectations are the same constants whatever allocator is inside.

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;

use ying_profiler::report::ReportOptions;
use ying_profiler::{StackStats, YingProfiler};

/// Requests of this many bytes or more are refused (the giant guard).
pub const GIANT_LIMIT: u64 = 1 << 30;

/// Keeps 200 boxes of 1000 bytes (the largest retainer: the top stack).
#[inline(never)]
fn marker_keep(out: &mut Vec<Box<[u8]>>) {
    for _ in 0..200 {
        out.push(black_box(vec![7u8; 1000].into_boxed_slice()));
    }
}

/// Allocates and frees 50 blocks of 3000 bytes.
#[inline(never)]
fn marker_churn() {
    for _ in 0..50 {
        black_box(vec![1u8; 3000]);
    }
}

/// 30 blocks of 2000 zeroed bytes (`vec![0; n]` allocates through `alloc_zeroed`).
#[inline(never)]
fn marker_zeroed(out: &mut Vec<Vec<u8>>) {
    for _ in 0..30 {
        out.push(black_box(vec![0u8; 2000]));
    }
}

/// One block grown by `realloc` from 16 bytes to hold 100,000.
#[inline(never)]
fn marker_grow() -> Vec<u8> {
    let mut v: Vec<u8> = Vec::with_capacity(16);
    for i in 0..100_000 {
        v.push(i as u8);
    }
    v
}

/// 40 blocks allocated with 4000 bytes and shrunk to 100 by `realloc`.
#[inline(never)]
fn marker_shrink(out: &mut Vec<Vec<u8>>) {
    for _ in 0..40 {
        let mut v: Vec<u8> = Vec::with_capacity(4000);
        v.extend_from_slice(&[5u8; 100]);
        v.shrink_to_fit();
        out.push(black_box(v));
    }
}

/// Page-aligned layouts: the inner allocator's aligned path. 20 allocated, 10 freed.
#[inline(never)]
fn marker_aligned(out: &mut Vec<*mut u8>) {
    let layout = Layout::from_size_align(4096, 4096).unwrap();
    for i in 0..20 {
        // SAFETY: a non-zero layout; the block is checked, and freed with the same layout.
        let p = unsafe { std::alloc::alloc(layout) };
        assert!(!p.is_null() && (p as usize) & 4095 == 0);
        if i % 2 == 0 {
            // SAFETY: `p` was just allocated with `layout`.
            unsafe { std::alloc::dealloc(black_box(p), layout) };
        } else {
            out.push(p);
        }
    }
}

/// Ten boxes of 5000 bytes kept by another thread (set up by its first allocation).
#[inline(never)]
fn marker_thread_keep(out: &mut Vec<Box<[u8]>>) {
    for _ in 0..10 {
        out.push(black_box(vec![3u8; 5000].into_boxed_slice()));
    }
}

/// A request above the giant limit, through the profiler directly.
#[inline(never)]
fn marker_giant<A: GlobalAlloc>(a: &YingProfiler<A>) -> *mut u8 {
    let layout = Layout::from_size_align(2 << 30, 8).unwrap();
    // SAFETY: a non-zero layout; the result is checked for null by the caller.
    black_box(unsafe { a.alloc(layout) })
}

/// A marker's exact figures, summed over every stack that contains it.
#[derive(Debug, Default, PartialEq, Eq)]
struct Figures {
    allocated_bytes: u64,
    num_allocations: u64,
    retained_bytes: u64,
    retained_count: u64,
    freed_bytes: u64,
    num_frees: u64,
}

fn stacks_of<'a>(stacks: &'a [StackStats], name: &str) -> Vec<&'a StackStats> {
    stacks.iter().filter(|s| s.frames.iter().any(|f| f.function.contains(name))).collect()
}

fn figures(stacks: &[&StackStats]) -> Figures {
    let mut f = Figures::default();
    for s in stacks {
        f.allocated_bytes += s.allocated_bytes;
        f.num_allocations += s.num_allocations;
        f.retained_bytes += s.retained_bytes;
        f.retained_count += s.retained_count;
        f.freed_bytes += s.freed_bytes;
        f.num_frees += s.num_frees;
    }
    f
}

/// Runs the workload under `a` (the global allocator, interval 1, giant limit [`GIANT_LIMIT`])
/// and checks every figure, the stacks' frames, the seed's API and a report set.
pub fn check<A: GlobalAlloc + Send + Sync + 'static>(a: &'static YingProfiler<A>) {
    assert_eq!(a.sample_interval(), 1);
    assert_eq!(a.settings().max_alloc_bytes(), GIANT_LIMIT);
    let before = YingProfiler::totals();

    // Every container is allocated here, outside the markers, so each marker's stacks hold
    // only the blocks it was written for.
    let mut kept = Vec::with_capacity(200);
    marker_keep(&mut kept);
    marker_churn();
    let mut zeroed = Vec::with_capacity(30);
    marker_zeroed(&mut zeroed);
    let grown = marker_grow();
    let mut shrunk = Vec::with_capacity(40);
    marker_shrink(&mut shrunk);
    let mut aligned = Vec::with_capacity(20);
    marker_aligned(&mut aligned);
    let thread_kept = std::thread::spawn(|| {
        let mut out = Vec::with_capacity(10);
        marker_thread_keep(&mut out);
        out
    })
    .join()
    .unwrap();
    assert!(marker_giant(a).is_null(), "a giant request was not refused");

    // The exact totals: what the markers retain (and their containers, allocated in this
    // function). The test harness's main thread may allocate meanwhile, a little.
    let retained = 200_000 + 60_000 + grown.capacity() as u64 + 4_000 + 10 * 4096 + 50_000;
    let containers = (200 + 10) * 16 + 30 * 24 + 40 * 24 + 20 * 8;
    let now = YingProfiler::total_retained_bytes() as u64 - before.retained_bytes();
    assert!(now >= retained + containers, "{now} < {retained} + {containers}");
    assert!(now < retained + containers + (64 << 10), "{now}: {retained} + {containers}");
    assert!(YingProfiler::profiled_bytes_retained() as u64 >= retained);

    // The seed's API, before any snapshot (a snapshot is the program's memory, and a large
    // one retains more than any marker).
    let top = a.top_k_stacks_by_retained(3);
    assert!(top[0].frames.iter().any(|f| f.function.contains("marker_keep")), "{top:#?}");
    assert_eq!(top[0].retained_bytes, 200_000);
    let by_alloc = a.top_k_stacks_by_allocated(100);
    assert!(by_alloc.iter().any(|s| s.frames.iter().any(|f| f.function.contains("marker_churn"))));
    drop((top, by_alloc));

    let snap = a.snapshot();
    let expect = |name: &str, f: Figures| {
        let stacks = stacks_of(&snap.stacks, name);
        assert_eq!(figures(&stacks), f, "{name}: {stacks:#?}");
    };
    let fig = |allocated_bytes, num_allocations, retained_bytes, retained_count| Figures {
        allocated_bytes,
        num_allocations,
        retained_bytes,
        retained_count,
        freed_bytes: allocated_bytes - retained_bytes,
        num_frees: num_allocations - retained_count,
    };
    expect("marker_keep", fig(200_000, 200, 200_000, 200));
    expect("marker_churn", fig(150_000, 50, 0, 0));
    expect("marker_zeroed", fig(60_000, 30, 60_000, 30));
    assert!(zeroed.iter().all(|v| v.iter().all(|&b| b == 0)));
    // A realloc chain is one allocation: its growth is allocated bytes.
    let cap = grown.capacity() as u64;
    expect("marker_grow", fig(cap, 1, cap, 1));
    // A shrink is freed bytes of a block that stays one allocation.
    expect(
        "marker_shrink",
        Figures { freed_bytes: 40 * 3900, num_frees: 0, ..fig(160_000, 40, 4_000, 40) },
    );
    assert!(shrunk.iter().all(|v| v.capacity() == 100 && v.iter().all(|&b| b == 5)));
    expect("marker_aligned", fig(20 * 4096, 20, 10 * 4096, 10));
    expect("marker_thread_keep", fig(50_000, 10, 50_000, 10));

    // Each marker's stacks as printed (frames from the leaf to the marker), for comparing the
    // binaries' output by hand (`--nocapture`): they are the same with every inner allocator.
    for name in ["marker_keep", "marker_churn", "marker_zeroed", "marker_grow", "marker_shrink"] {
        for s in stacks_of(&snap.stacks, name) {
            let frames: Vec<&str> = s
                .display_frames(false)
                .into_iter()
                .map(|f| &*f.function)
                .take_while(|f| !f.contains(name))
                .collect();
            println!("{name}: {} <- {}", s.num_allocations, frames.join(" <- "));
        }
    }

    // The giant guard: refused, counted, its stack named.
    assert_eq!(snap.giant_refused, 1);
    let refusal = snap.giant_refusals.first().expect("the refusal is kept");
    assert_eq!(refusal.size, 2 << 30);
    assert!(refusal.frames.iter().any(|f| f.function.contains("marker_giant")), "{refusal:?}");

    // Summed over every stack, the estimates are the exact totals.
    let t = &snap.totals;
    assert_eq!(snap.estimated_totals(), (t.allocated_bytes, t.retained_bytes()), "{t:?}");

    // The stacks are the program's: no frame of the profiler or of the inner allocator, and
    // from the leaf to the marker only the standard library's allocation frames.
    for s in &snap.stacks {
        for f in s.display_frames(true) {
            let name = f.function.trim_start_matches('<');
            let own =
                ["ying_profiler::", "mimalloc::", "tikv_jemalloc", "mi_", "_mi_", "je_", "_rjem_"]
                    .iter()
                    .any(|p| name.starts_with(p));
            assert!(!own && !name.contains("alloc_slow"), "frame {f} in {s:#?}");
        }
    }
    for name in ["marker_keep", "marker_zeroed", "marker_grow", "marker_shrink"] {
        for s in stacks_of(&snap.stacks, name) {
            for f in s.display_frames(true).into_iter().take_while(|f| !f.function.contains(name)) {
                // The standard library's sources, as its debug info names them; or one of its
                // precompiled functions, which carry no debug info (a workspace build whose
                // features differ calls liballoc's own `RawVecInner::try_allocate_in`), named
                // by its crate.
                let std_frame = match f.file.as_deref() {
                    Some(p) => p.starts_with("/rustc/"),
                    None => ["alloc::", "core::", "std::"]
                        .iter()
                        .any(|c| f.function.trim_start_matches('<').starts_with(c)),
                };
                assert!(std_frame, "{name}: {f} between the leaf and the marker: {s:#?}");
            }
        }
    }

    // A report set names the top retainer.
    let dir = std::env::temp_dir().join(format!("ying-inner-alloc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let paths = ying_profiler::utils::write_report_now(a, &ReportOptions::default(), &dir).unwrap();
    let text = std::fs::read_to_string(paths.text.as_ref().unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(text.contains("marker_keep"), "{text}");

    // Freed through the same profiler: the totals come back.
    let layout = Layout::from_size_align(4096, 4096).unwrap();
    for p in aligned.drain(..) {
        // SAFETY: allocated by `marker_aligned` with `layout`, freed once.
        unsafe { std::alloc::dealloc(p, layout) };
    }
    drop((kept, zeroed, grown, shrunk, thread_kept));
    let after = a.snapshot();
    for name in ["marker_keep", "marker_zeroed", "marker_grow", "marker_aligned"] {
        let f = figures(&stacks_of(&after.stacks, name));
        assert_eq!((f.retained_bytes, f.retained_count), (0, 0), "{name}: {f:?}");
    }
}
