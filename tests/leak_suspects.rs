//! Leak suspects on the example service (examples/ying_example.rs, the Rust front end at its
//! default 512 KiB sample interval): its simulated leak (`leak_loop`, 12 MiB kept per check
//! interval) is the only suspect; its bounded cache and audit log (`handle_request`,
//! `cache_worker`), which fill and then churn, are not. Read two ways: the sets' manifests
//! (`report::leaks::sets`, behind `ying leaks`) and the process's own HTML page's panel (its
//! timeline).

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use ying_profiler::report::leaks::sets;

const LEAK_FN: &str = "leak_loop";

#[test]
fn the_example_leak_is_the_only_suspect_and_the_cache_is_not() {
    let exe = common::build_example();
    let dir = common::scratch("leak-suspects");
    let child = Command::new(&exe)
        .env("YING_EXAMPLE_INTERVAL_SECS", "2")
        .env("YING_EXAMPLE_RUNTIME_SECS", "13")
        .env("YING_EXAMPLE_REPORTING_PATH", &dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the example starts");
    let out = common::wait_or_kill(child, Duration::from_secs(300), "the example");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let manifests = sets::manifests(std::slice::from_ref(&dir)).expect("the directory is read");
    assert!(manifests.len() >= 4, "a set per check: {manifests:?}");
    let (processes, warnings) = sets::read(&manifests);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(processes.len(), 1);
    let a = &processes[0].analysis;
    let text = ying_profiler::report::leaks::text("ying_example", a);
    eprintln!("{text}");
    assert!(!a.suspects.is_empty(), "the leak is a suspect:\n{text}");
    for s in &a.suspects {
        // The leaked buffers may come through two stacks (see tests/example_service.rs): every
        // suspect is the leak's.
        assert!(s.frames.iter().any(|f| f.contains(LEAK_FN)), "not the leak:\n{text}");
        assert!(s.z > a.threshold && s.bytes_per_hour > 0.0, "{s:?}");
    }
    // The cache was tested (it is among the listed stacks at every set), and is no suspect.
    assert!(a.tested >= 2, "{text}");
    for cache in ["handle_request", "cache_worker", "record_audit"] {
        assert!(!text.contains(cache), "{cache} is no suspect:\n{text}");
    }

    // The process's own page: the same verdict from its timeline.
    let page = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "html"))
        .expect("the process's page");
    let html = std::fs::read_to_string(page).unwrap();
    // Its plain table of top stacks gives each sampled figure its 95 % interval.
    let top = html.split("<table class=\"top\">").nth(1).expect("the top stacks' table");
    let top = top.split("</table>").next().unwrap();
    assert!(top.contains(" ± "), "no interval in the top table:\n{top}");
    let panel = html.split("<h3>Leak suspects</h3>").nth(1).expect("the panel");
    let panel = panel.split("<h3>").next().unwrap();
    let rows: Vec<&str> = panel.split("<tr class=\"suspect\">").skip(1).collect();
    assert!(!rows.is_empty(), "{panel}");
    assert!(rows.iter().all(|r| r.contains(LEAK_FN)), "{panel}");
    assert!(!panel.contains("handle_request") && !panel.contains("cache_worker"), "{panel}");

    // The last set's text ends with the same test on the timeline: the leak alone.
    let last_txt = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .max()
        .expect("a text report");
    let txt = std::fs::read_to_string(&last_txt).unwrap();
    let section = txt.split("LEAK SUSPECTS of ").nth(1).expect("the text's section");
    assert!(section.contains("  #1 ") && section.contains(LEAK_FN), "{section}");
    assert!(!section.contains("handle_request") && !section.contains("cache_worker"), "{section}");
}
