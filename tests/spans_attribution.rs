//! With `profile_spans`, samples are attributed to the spans entered when they were taken:
//! the same function allocating under two spans gives two stacks with exact figures (R = 1),
//! and spans entered and exited around `.await` on a multi-threaded runtime follow their tasks.
#![cfg(feature = "profile_spans")]

mod common;

use std::hint::black_box;
use tracing_subscriber::prelude::*;
use ying_profiler::{StackStats, YingProfiler, spans::YingSpanLayer};

#[global_allocator]
static A: YingProfiler = YingProfiler::new(1, 64 << 30);

#[inline(never)]
fn marker_shared_decoder(n: usize, size: usize) -> Vec<Box<[u8]>> {
    (0..n).map(|_| black_box(vec![9u8; size].into_boxed_slice())).collect()
}

#[inline(never)]
fn marker_batch(size: usize) -> Box<[u8]> {
    black_box(vec![5u8; size].into_boxed_slice())
}

#[inline(never)]
fn marker_async_alloc(size: usize) -> Box<[u8]> {
    black_box(vec![4u8; size].into_boxed_slice())
}

fn in_span<'a>(stacks: &'a [StackStats], marker: &str, span: &str) -> Vec<&'a StackStats> {
    stacks
        .iter()
        .filter(|s| s.frames.iter().any(|f| f.function.contains(marker)))
        .filter(|s| s.spans.last().is_some_and(|sp| sp.name == span))
        .collect()
}

async fn task_body(rounds: usize, size: usize) -> Vec<Box<[u8]>> {
    let mut kept = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        kept.push(marker_async_alloc(size));
        tokio::task::yield_now().await;
    }
    kept
}

#[test]
fn spans_split_stacks_and_follow_tasks() {
    tracing_subscriber::registry().with(YingSpanLayer).init();

    // Same function, two spans.
    let a = tracing::info_span!("import_orders").in_scope(|| marker_shared_decoder(30, 1000));
    let b = tracing::info_span!("import_users").in_scope(|| marker_shared_decoder(20, 3000));
    let snap = A.snapshot();
    let sa = in_span(&snap.stacks, "marker_shared_decoder", "import_orders");
    let sb = in_span(&snap.stacks, "marker_shared_decoder", "import_users");
    let blocks = |v: &[&StackStats]| {
        v.iter().filter(|s| s.num_allocations >= 20).map(|s| s.retained_bytes).sum::<u64>()
    };
    assert_eq!(blocks(&sa), 30_000, "{sa:#?}");
    assert_eq!(blocks(&sb), 60_000, "{sb:#?}");
    // The page's table tells the two apart by a span column.
    let mut t = ying_profiler::report::timeline::Timeline::new("spans", std::process::id());
    t.add_snapshot(&snap, Default::default(), 0, "ying.spans.0");
    let page = ying_profiler::report::html::render(&[&t], "spans");
    let table = page.split("<table class=\"top\">").nth(1).expect("a top table");
    let table = table.split("</table>").next().unwrap();
    assert!(table.contains("<th>span</th>"), "{table}");
    for span in ["import_orders", "import_users"] {
        assert!(
            table.lines().any(|l| l.contains("marker_shared_decoder")
                && l.ends_with(&format!("::{span}</td></tr>"))),
            "{span}: {table}"
        );
    }
    drop((a, b));

    // More live spans than the layer's per-thread id cache holds, entered out of creation
    // order: evicted entries fall back to the registry, and every sample keeps its own span.
    let spans: Vec<_> = (0..100)
        .map(|i| {
            if i % 3 == 0 {
                tracing::info_span!("batch_even")
            } else {
                tracing::info_span!("batch_odd")
            }
        })
        .collect();
    let mut kept_batches = Vec::new();
    for (i, span) in spans.iter().enumerate().rev() {
        let size = if i % 3 == 0 { 500 } else { 900 };
        kept_batches.push(span.in_scope(|| marker_batch(size)));
    }
    let snap = A.snapshot();
    let batch = |span: &str| {
        in_span(&snap.stacks, "marker_batch", span).iter().map(|s| s.retained_bytes).sum::<u64>()
    };
    assert_eq!(batch("batch_even"), 34 * 500);
    assert_eq!(batch("batch_odd"), 66 * 900);
    drop((kept_batches, spans));

    // Tasks on a multi-threaded runtime, each instrumented with its own span, allocating on
    // both sides of `.await` points and moving between worker threads.
    use tracing::Instrument;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
    let kept = rt.block_on(async {
        let x = tokio::spawn(task_body(40, 700).instrument(tracing::info_span!("tenant_x")));
        let y = tokio::spawn(task_body(25, 1300).instrument(tracing::info_span!("tenant_y")));
        (x.await.unwrap(), y.await.unwrap())
    });
    let snap = A.snapshot();
    let sum = |span: &str, size: u64| {
        in_span(&snap.stacks, "marker_async_alloc", span)
            .iter()
            .map(|s| s.retained_bytes)
            .sum::<u64>()
            .checked_div(size)
    };
    assert_eq!(sum("tenant_x", 700), Some(40));
    assert_eq!(sum("tenant_y", 1300), Some(25));
    // No sample of the marker escaped its task's span.
    let unattributed: u64 = snap
        .stacks
        .iter()
        .filter(|s| s.frames.iter().any(|f| f.function.contains("marker_async_alloc")))
        .filter(|s| s.spans.is_empty())
        .map(|s| s.retained_bytes)
        .sum();
    assert_eq!(unattributed, 0);
    drop(kept);
    drop(rt);

    // The pprof profile carries `span` labels that go tool pprof can filter on.
    let dir = common::fresh_dir("spans");
    let paths = ying_profiler::utils::write_report_now(&A, &Default::default(), &dir).unwrap();
    let out = std::process::Command::new("go")
        .args([
            "tool",
            "pprof",
            "-top",
            "-unit=B",
            "-tagfocus=span=tenant_y",
            "-sample_index=alloc_space",
        ])
        .arg(paths.pprof.unwrap())
        .output()
        .expect("go is required: run scripts/test.sh (installs golang-go)");
    let top = String::from_utf8_lossy(&out.stdout);
    assert!(top.contains("marker_async_alloc"), "{top}");
    // tenant_y allocated its 25 blocks and the Vec of 25 boxes holding them, nothing else.
    let expected = 25 * 1300 + 25 * std::mem::size_of::<Box<[u8]>>();
    assert!(top.contains(&format!("accounting for {expected}B")), "only tenant_y: {top}");
    std::fs::remove_dir_all(&dir).unwrap();

    // Reports carry the span: text above the frames, folded as root frames.
    let folded = ying_profiler::report::folded::render(
        &snap.stacks,
        ying_profiler::Measurement::RetainedBytes,
        false,
    );
    assert!(
        folded.lines().any(|l| l.starts_with("[span spans_attribution::tenant_x]")
            && l.contains("marker_async_alloc")),
        "{folded}"
    );
}
