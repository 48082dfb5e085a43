//! JIT-compiled code in native stacks: node running a JavaScript function that keeps 64 MiB of
//! buffers. With `--perf-basic-prof` node writes `/tmp/perf-<pid>.map`, and the exit report's
//! stack that retains the most names the JavaScript function (the unwinder follows the frame
//! pointers of code no object covers, `symbols/perf_map.rs` names it); without the map the
//! same stack shows bare addresses in its place.

use std::time::Duration;

use preload_tests::{Comparison, QUIET, Run, TestDir, compare, require_tool};

/// `holdBuffers` allocates and keeps 64 buffers of 1 MiB; `process.exit` ends the program
/// with them still held, so they are retained in the exit report (a normal end would let node
/// free them first).
const PROGRAM: &str = r#"'use strict';
const kept = [];
function holdBuffers(n) {
  for (let i = 0; i < n; i++) {
    const b = Buffer.alloc(1 << 20);
    b[0] = i & 0xff;
    kept.push(b);
  }
  return kept.length;
}
console.log('held', holdBuffers(64));
process.exit(0);
"#;

/// The frame lines of the exit report's first entry (the stack that retains the most).
fn top_stack(c: &Comparison) -> Vec<String> {
    let text = c.main_report().text();
    let mut lines = text.lines().skip_while(|l| !l.starts_with("#1 retained"));
    c.check(lines.next().is_some(), "the report lists no entry");
    lines
        .skip_while(|l| l.trim() != "frames:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
        .collect()
}

/// Runs the program with and without the shim (`flags` before the script), removes the perf
/// maps both runs left, and returns the comparison after the common checks.
fn run_node(node: &std::path::Path, dir: &TestDir, name: &str, flags: &[&str]) -> Comparison {
    let script = dir.join(&format!("{name}.js"));
    std::fs::write(&script, PROGRAM).unwrap();
    let run =
        Run::new(node).args(flags).arg(&script).timeout(Duration::from_secs(120)).cwd(dir.path());
    let c = compare(&run, QUIET, &dir.reports(name));
    for pid in [c.without.pid, c.with.pid] {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    c.check(c.with.success(), "node failed under the shim");
    c.check(c.with.stdout_str() == "held 64\n", "unexpected output");
    c.assert_no_ying_lines();
    c
}

#[test]
fn javascript_functions_are_named_from_nodes_perf_map() {
    let Some(node) = require_tool("node") else { return };
    let dir = TestDir::new("jit-frames");

    let named = run_node(
        &node,
        &dir,
        "perf-map",
        &["--perf-basic-prof", "--interpreted-frames-native-stack"],
    );
    let top = top_stack(&named);
    let js = top.iter().position(|f| f.contains("holdBuffers") && f.contains("perf-map.js"));
    named.check(js.is_some(), format!("no holdBuffers frame in the top stack: {top:#?}"));
    // The walk goes on through JavaScript frames to node's C++ entry and `main`'s callers.
    let below = &top[js.unwrap_or(0)..];
    named.check(
        below.iter().any(|f| f.starts_with("node::Start(")),
        format!("the stack ends inside JIT code: {top:#?}"),
    );

    let plain = run_node(&node, &dir, "no-map", &["--interpreted-frames-native-stack"]);
    let top = top_stack(&plain);
    plain.check(
        !top.iter().any(|f| f.contains("holdBuffers")),
        format!("holdBuffers named without a perf map: {top:#?}"),
    );
    // The same JIT frames are there, as addresses of no module.
    plain.check(
        top.iter().any(|f| f.starts_with("0x"))
            && top.iter().any(|f| f.starts_with("node::Start(")),
        format!("the JIT frames are missing without a perf map: {top:#?}"),
    );
}
