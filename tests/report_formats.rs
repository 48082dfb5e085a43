//! Output formats: golden files pin the text report and folded stacks of a fixed snapshot
//! (`YING_BLESS=1` rewrites them); flamegraphs are well-formed XML, also when empty; names
//! with `;` stay one folded frame.

use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use ying_profiler::Peak;
use ying_profiler::callstack::StdCallstack;
use ying_profiler::histogram::MillisHistogram;
use ying_profiler::report::{ReportContext, flamegraph, folded, text};
use ying_profiler::{Frame, Measurement, Snapshot, StackStats, Totals, Variances};

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
        // As if from samples of 64 KiB blocks at a 512 KiB interval (each sample's term
        // `size² (1-p) / p²`, about 3.5e10 bytes²): the text prints `± 1.96 × its square root`.
        variance: Variances {
            allocated_bytes: (alloc / 65536) as f64 * 3.5e10,
            num_allocations: (alloc / 65536) as f64 * 8.0,
            freed_bytes: ((alloc - ret) / 65536) as f64 * 3.5e10,
            num_frees: ((alloc - ret) / 65536) as f64 * 8.0,
            retained_bytes: (ret / 65536) as f64 * 3.5e10,
            retained_count: (ret / 65536) as f64 * 8.0,
            ..Variances::default()
        },
        residency: None,
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
        instance: None,
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
        assert!(!stack.contains("Future>::poll"), "poll glue hidden: {l}");
    }
}

const TOKIO: &str =
    "/home/dev/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tokio-1.48.0/src/runtime/task";
const STD: &str = "/rustc/ded5c06cf21d2b93bffd5d884aa6e96934ee4234/library";
const APP: &str = "/srv/app/src/service.rs";

fn at(ip: usize, function: &str, file: &str, line: u32, inlined: bool) -> Frame {
    Frame {
        ip,
        function: function.into(),
        file: (!file.is_empty()).then(|| file.into()),
        line: (!file.is_empty()).then_some(line),
        inlined,
        module: None,
    }
}

/// A request handler's stack on a Tokio worker: allocation frames in `alloc`, an inlined
/// helper of the program, the handler, then Tokio's and std's frames down to the thread start.
/// `glue_ip` is the address of the `::poll` glue inlined into Tokio's `Core::poll`, `core_line`
/// its line there, `handler_line` the handler's.
fn handler_stack(glue_ip: usize, core_line: u32, handler_line: u32) -> Vec<Frame> {
    vec![
        at(0x10, "alloc::alloc::alloc", &format!("{STD}/alloc/src/alloc.rs"), 95, true),
        at(
            0x10,
            "alloc::raw_vec::RawVecInner<A>::try_allocate_in",
            &format!("{STD}/alloc/src/raw_vec.rs"),
            476,
            true,
        ),
        at(
            0x10,
            "alloc::vec::Vec<T>::with_capacity",
            &format!("{STD}/alloc/src/vec/mod.rs"),
            480,
            true,
        ),
        at(0x10, "service::record_audit", APP, 30, true),
        at(0x10, "service::handle_request::{{closure}}", APP, handler_line, false),
        at(
            glue_ip,
            "<core::pin::Pin<P> as core::future::future::Future>::poll",
            &format!("{STD}/core/src/future/future.rs"),
            124,
            true,
        ),
        at(
            glue_ip,
            "tokio::runtime::task::core::Core<T,S>::poll::{{closure}}",
            &format!("{TOKIO}/core.rs"),
            331,
            true,
        ),
        at(
            glue_ip,
            "tokio::runtime::task::core::Core<T,S>::poll",
            &format!("{TOKIO}/core.rs"),
            core_line,
            false,
        ),
        at(
            0x30,
            "tokio::runtime::task::harness::poll_future",
            &format!("{TOKIO}/harness.rs"),
            473,
            false,
        ),
        at(
            0x40,
            "tokio::runtime::task::harness::Harness<T,S>::poll",
            &format!("{TOKIO}/harness.rs"),
            151,
            false,
        ),
        at(
            0x50,
            "std::sys::pal::unix::thread::Thread::new::thread_start",
            &format!("{STD}/std/src/sys/pal/unix/thread.rs"),
            105,
            false,
        ),
        at(0x60, "start_thread", "", 0, false),
        at(0x70, "__clone3", "", 0, false),
    ]
}

/// Three raw stacks of one handler: two that differ only in a hidden glue address and a line
/// inside Tokio's folded frames (one entry), and one at another line of the handler (an entry
/// of its own in the text, the same folded stack).
fn handler_snapshot() -> (Snapshot, ReportContext) {
    let (mut snap, ctx) = fixture();
    let mut a = stack(3 << 20, 1 << 20, handler_stack(0x20, 320, 60));
    a.peak_retained_bytes = 2 << 20;
    a.peak_retained_count = 2 << 10;
    let mut b = stack(2 << 20, 512 << 10, handler_stack(0x21, 322, 60));
    b.peak_retained_bytes = 1 << 20;
    b.peak_retained_count = 1 << 10;
    let c = stack(1 << 20, 256 << 10, handler_stack(0x20, 320, 61));
    snap.stacks = vec![a, b, c];
    (snap, ctx)
}

#[test]
fn stacks_printed_alike_are_one_entry_with_framework_frames_folded() {
    let (snap, ctx) = handler_snapshot();
    let txt = text::render(&snap, &ctx, Measurement::RetainedBytes, 10, false);
    golden("report_handler_merged.txt", &txt);
    // Two entries: lines 60 and 61 of the handler. The first sums its two stacks exactly.
    assert!(txt.contains("stacks:             3 sampled, 2 entries as printed"), "{txt}");
    // Its variances add up: 16 + 8 blocks of 3.5e10 bytes² retained, a 95 % half-width of
    // 1.96 * sqrt(24 * 3.5e10) = 1.7 MiB.
    assert!(
        txt.contains(
            "#1 retained 1.5 MiB ± 1.7 MiB (1572864 bytes, 85.7% of estimated) in 1536 ± 27 allocations"
        ),
        "{txt}"
    );
    assert!(txt.contains("allocated 5.0 MiB ± 3.1 MiB (5242880 bytes"), "{txt}");
    assert!(txt.contains("samples: 14 (4 live)"), "{txt}");
    assert!(txt.contains("peak #1: 3.0 MiB (3145728 bytes"), "{txt}");
    assert!(!txt.contains("#3 "), "{txt}");
    // The inlined helper is named, Tokio's and std's frames are one line, paths are short.
    assert!(txt.contains("service::record_audit (/srv/app/src/service.rs:30) [inlined]"), "{txt}");
    assert!(txt.contains("... 5 frames in tokio, std ...\n"), "{txt}");
    assert!(
        txt.contains("alloc::vec::Vec<T>::with_capacity (alloc/src/vec/mod.rs:480) [inlined]"),
        "{txt}"
    );
    assert!(!txt.contains(".cargo/registry") && !txt.contains("/rustc/"), "{txt}");
    // Folded stacks have no line numbers: all three stacks are one line.
    let f = folded::render(&snap.stacks, Measurement::RetainedBytes, false);
    golden("handler_merged.folded", &f);
    assert_eq!(f.lines().count(), 1, "{f}");
    assert!(f.ends_with(&format!(" {}\n", (1 << 20) + (512 << 10) + (256 << 10))), "{f}");
    // Expanded: every frame, nothing merged but what prints alike (the glue is hidden).
    let expanded = text::render(&snap, &ctx, Measurement::RetainedBytes, 10, true);
    assert!(expanded.contains("3 sampled, 3 entries as printed"), "{expanded}");
    assert!(
        expanded.contains("tokio-1.48.0/src/runtime/task/core.rs:331) [inlined]"),
        "{expanded}"
    );
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
