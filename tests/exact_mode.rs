//! With a sampling interval of one byte every allocation is a sample of weight one, so every
//! per-stack figure must equal the truth exactly. One test per file: the allocator is global.

use std::hint::black_box;
use ying_profiler::{StackStats, YingProfiler};

#[global_allocator]
static A: YingProfiler = YingProfiler::new(1, 64 << 30);

#[inline(never)]
fn marker_keep_1000(n: usize) -> Vec<Box<[u8]>> {
    (0..n).map(|_| black_box(vec![7u8; 1000].into_boxed_slice())).collect()
}

#[inline(never)]
fn marker_churn_3000(n: usize) {
    for _ in 0..n {
        black_box(vec![1u8; 3000]);
    }
}

/// `vec![0; n]` allocates through `alloc_zeroed`.
#[inline(never)]
fn marker_zeroed_2000(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|_| black_box(vec![0u8; 2000])).collect()
}

#[inline(never)]
fn marker_grow(n: usize) -> Vec<u8> {
    let mut v: Vec<u8> = Vec::with_capacity(16);
    for i in 0..n {
        v.push(i as u8);
    }
    v
}

/// Each block is allocated with 4000 bytes and shrunk to 100 (`shrink_to_fit` reallocates).
#[inline(never)]
fn marker_shrink(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|_| {
            let mut v: Vec<u8> = Vec::with_capacity(4000);
            v.extend_from_slice(&[5u8; 100]);
            v.shrink_to_fit();
            black_box(v)
        })
        .collect()
}

fn find<'a>(stacks: &'a [StackStats], name: &str) -> Vec<&'a StackStats> {
    stacks.iter().filter(|s| s.frames.iter().any(|f| f.function.contains(name))).collect()
}

#[test]
fn exact_per_stack_bytes_and_counts() {
    let kept = marker_keep_1000(100);
    marker_churn_3000(50);
    let grown = marker_grow(100_000);
    let zeroed = marker_zeroed_2000(30);
    let shrunk = marker_shrink(40);
    let snap = A.snapshot();

    let keep = find(&snap.stacks, "marker_keep_1000");
    // The 1000-byte boxes, plus the Vec that holds the 100 pointers.
    let boxes: Vec<_> = keep.iter().filter(|s| s.num_allocations == 100).collect();
    assert_eq!(boxes.len(), 1, "stacks: {keep:#?}");
    assert_eq!(boxes[0].allocated_bytes, 100_000);
    assert_eq!(boxes[0].retained_bytes, 100_000);
    assert_eq!(boxes[0].retained_count, 100);
    assert_eq!(boxes[0].num_frees, 0);

    let churn = find(&snap.stacks, "marker_churn_3000");
    let total_alloc: u64 = churn.iter().map(|s| s.allocated_bytes).sum();
    let total_ret: u64 = churn.iter().map(|s| s.retained_bytes).sum();
    let frees: u64 = churn.iter().map(|s| s.num_frees).sum();
    assert_eq!(total_alloc, 150_000);
    assert_eq!(total_ret, 0);
    assert_eq!(frees, 50);

    let zero = find(&snap.stacks, "marker_zeroed_2000");
    let blocks: Vec<_> = zero.iter().filter(|s| s.num_allocations == 30).collect();
    assert_eq!(blocks.len(), 1, "stacks: {zero:#?}");
    assert_eq!(blocks[0].retained_bytes, 60_000);
    assert!(zeroed.iter().all(|v| v.iter().all(|&b| b == 0)));

    // A realloc chain is one long-lived allocation at its first stack.
    let grow = find(&snap.stacks, "marker_grow");
    let live: Vec<_> = grow.iter().filter(|s| s.retained_count > 0).collect();
    assert_eq!(live.len(), 1, "{grow:#?}");
    assert_eq!(live[0].retained_bytes as usize, grown.capacity());
    assert_eq!(live[0].retained_count, 1);
    assert_eq!(live[0].num_allocations, 1);

    // A shrink is freed bytes of a block that stays one allocation: allocated is retained plus
    // freed.
    let shrink = find(&snap.stacks, "marker_shrink");
    let blocks: Vec<_> = shrink.iter().filter(|s| s.num_allocations == 40).collect();
    assert_eq!(blocks.len(), 1, "stacks: {shrink:#?}");
    assert_eq!(blocks[0].allocated_bytes, 40 * 4000);
    assert_eq!(blocks[0].retained_bytes, 40 * 100);
    assert_eq!(blocks[0].freed_bytes, 40 * 3900);
    assert_eq!((blocks[0].retained_count, blocks[0].num_frees), (40, 0));
    assert!(shrunk.iter().all(|v| v.capacity() == 100 && v.iter().all(|&b| b == 5)));

    // Summed over every stack, the estimates are the exact totals, and so are the pprof values.
    let t = &snap.totals;
    assert_eq!(snap.estimated_totals(), (t.allocated_bytes, t.retained_bytes()), "{t:?}");
    let pprof = ying_profiler::report::heap_profile::build(&snap, "");
    let col = |i: usize| pprof.sample.iter().map(|s| s.value[i] as u64).sum::<u64>();
    let sum = |f: fn(&StackStats) -> u64| snap.stacks.iter().map(f).sum::<u64>();
    assert_eq!(
        [col(0), col(1), col(2), col(3)],
        [
            sum(|s| s.num_allocations),
            t.allocated_bytes,
            sum(|s| s.retained_count),
            t.retained_bytes()
        ]
    );

    // Capture trims the profiler's own frames by address, up to the front end's slow-path entry
    // points: none of the frames above them survive in the raw stacks (reports would hide them
    // anyway, so this looks at the frames as captured).
    for s in &snap.stacks {
        for f in &s.frames {
            for own in [
                "ying_profiler::engine::hooks::",
                "ying_profiler::engine::capture",
                "ying_profiler::stack::unwind",
            ] {
                assert!(!f.function.contains(own), "untrimmed profiler frame {f} in {s:#?}");
            }
            assert!(!f.function.contains("alloc_slow"), "untrimmed entry frame {f} in {s:#?}");
            assert!(!f.function.contains("realloc_slow"), "untrimmed entry frame {f} in {s:#?}");
        }
    }
    // Profiler frames never appear in stacks.
    for s in &snap.stacks {
        for f in s.display_frames(true) {
            assert!(!f.function.contains("ying_profiler::"), "profiler frame leaked: {f}");
        }
    }
    drop(kept);
    drop(grown);
    drop(zeroed);
    drop(shrunk);
}
