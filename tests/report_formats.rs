//! Output formats: golden files pin the text report and folded stacks of a fixed snapshot
//! (`YING_BLESS=1` rewrites them); flamegraphs are well-formed XML, also when empty; names
//! with `;` stay one folded frame.

use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use ying_profiler::__private::snapshot::Peak;
use ying_profiler::callstack::StdCallstack;
use ying_profiler::histogram::MillisHistogram;
use ying_profiler::report::{ReportContext, flamegraph, folded, text};
use ying_profiler::{Frame, Measurement, Snapshot, StackStats, Totals};

fn frame(ip: usize, function: &str, line: u32, inlined: bool) -> Frame {
    Frame {
        ip,
        function: function.into(),
        file: Some("src/service.rs".into()),
        line: Some(line),
        inlined,
        module: None,
    }
}

fn stack(alloc: u64, ret: u64, frames: Vec<Frame>) -> StackStats {
    let mut lifetimes = MillisHistogram::new();
    lifetimes.add_weighted(0.5, 3.0);
    lifetimes.add_weighted(2500.0, 1.0);
    let mut age = MillisHistogram::new();
    if ret > 0 {
        age.add_weighted(90_000.0, ret as f64);
    }
    let ips: Vec<usize> = frames.iter().map(|f| f.ip).collect();
    StackStats {
        allocated_bytes: alloc,
        num_allocations: alloc / 1024,
        freed_bytes: alloc - ret,
        num_frees: (alloc - ret) / 1024,
        retained_bytes: ret,
        retained_count: ret / 1024,
        peak_retained_bytes: 0,
        peak_retained_count: 0,
        samples: 7,
        live_samples: 2,
        frames,
        lifetimes,
        retained_age: age,
        stack: StdCallstack::from_ips(&ips),
        spans: Vec::new(),
    }
}

fn fixture() -> (Snapshot, ReportContext) {
    let leak = stack(
        8 << 20,
        8 << 20,
        vec![
            frame(0x1000, "alloc::vec::from_elem", 10, true),
            frame(0x1000, "service::leak_loop::{{closure}}", 42, true),
            frame(0x1000, "<core::pin::Pin<P> as core::future::future::Future>::poll", 1, true),
            frame(0x1000, "tokio::runtime::task::harness::poll_future", 2, false),
            frame(0x2000, "service::main", 7, false),
        ],
    );
    let churn = stack(
        64 << 20,
        1 << 20,
        vec![
            frame(0x3000, "service::cache::insert<[u8; 32]>", 99, false),
            frame(0x4000, "service::handle_request::{{closure}}", 12, false),
        ],
    );
    let mut churn = churn;
    churn.peak_retained_bytes = 24 << 20;
    churn.peak_retained_count = 24 << 10;
    let mut leak = leak;
    leak.peak_retained_bytes = 8 << 20;
    leak.peak_retained_count = 8 << 10;
    let snap = Snapshot {
        taken_at: UNIX_EPOCH + Duration::from_secs(1_796_214_611),
        totals: Totals {
            allocated_bytes: 80 << 20,
            freed_bytes: 70 << 20,
            profiler_bytes: 3 << 20,
            profiler_peak_bytes: 5 << 20,
        },
        sample_interval: 524_288,
        unit: ying_profiler::ByteUnit::Chunk,
        stacks: vec![churn, leak],
        live_samples: 4,
        dropped_samples: 0,
        address_conflicts: 0,
        giant_refused: 1,
        giant_refusals: Vec::new(),
        symbol_cache_entries: 4,
        peak: Some(Peak {
            since_start: Some(Duration::from_millis(2_500)),
            at: UNIX_EPOCH + Duration::from_secs(1_796_214_551),
            estimated_bytes: 32 << 20,
            exact_bytes: Some(31 << 20),
            high_water_bytes: 33 << 20,
            captures: 41,
        }),
    };
    let ctx = ReportContext {
        pid: 4242,
        exe: "/srv/bin/service".to_string(),
        rss_kib: Some(20480),
        anon_rss_kib: Some(16384),
    };
    (snap, ctx)
}

fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name);
    if std::env::var_os("YING_BLESS").is_some() || !path.exists() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap();
    assert_eq!(actual, expected, "{} differs (YING_BLESS=1 rewrites it)", path.display());
}

#[test]
fn text_report_is_pinned() {
    let (snap, ctx) = fixture();
    golden(
        "report_retained.txt",
        &text::render(&snap, &ctx, Measurement::RetainedBytes, 10, false),
    );
    golden(
        "report_allocated_expanded.txt",
        &text::render(&snap, &ctx, Measurement::AllocatedBytes, 10, true),
    );
}

#[test]
fn folded_stacks_are_pinned_and_escaped() {
    let (snap, _) = fixture();
    let f = folded::render(&snap.stacks, Measurement::RetainedBytes, false);
    golden("retained.folded", &f);
    // `[u8; 32]` must not split into two frames.
    assert!(f.contains("service::cache::insert<[u8: 32]>"), "{f}");
    for l in f.lines() {
        let (stack, value) = l.rsplit_once(' ').unwrap();
        assert!(value.parse::<u64>().is_ok());
        assert!(!stack.contains("::poll"), "poll glue hidden: {l}");
    }
}

fn assert_well_formed_xml(svg: &[u8]) {
    let path =
        std::env::temp_dir().join(format!("ying-svg-{}-{}.svg", std::process::id(), svg.len()));
    std::fs::write(&path, svg).unwrap();
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])"])
        .arg(&path)
        .output()
        .expect("python3 runs");
    std::fs::remove_file(&path).unwrap();
    assert!(out.status.success(), "not well-formed XML: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn flamegraphs_are_well_formed_and_titled() {
    let (snap, _) = fixture();
    let f = folded::render(&snap.stacks, Measurement::AllocatedBytes, false);
    let svg =
        flamegraph::render_svg(&f, Measurement::AllocatedBytes, " of service (pid 4242)").unwrap();
    let s = String::from_utf8_lossy(&svg);
    assert!(s.contains("Ying: allocated bytes of service (pid 4242)"));
    assert!(s.contains("bytes"), "tooltips count bytes");
    assert!(s.contains("service::handle_request"));
    assert_well_formed_xml(&svg);
    let empty = flamegraph::render_svg("", Measurement::RetainedBytes, " of x & <y>").unwrap();
    assert!(String::from_utf8_lossy(&empty).contains("no samples"));
    assert_well_formed_xml(&empty);
}
