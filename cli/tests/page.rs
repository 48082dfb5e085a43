//! The page opens on the dump that matters, on a real program under the shim
//! (cli/tests/data/hump.c: its memory rises to a hump mid-run and is freed before the end, as
//! sqlite3's does): `ying view`'s page and the process's own page open their plain table and
//! their dump picker on the largest dump, not the near-empty last one, and say so; the chart's
//! two series named by one frame are told apart by their callers; a dump with nothing retained
//! gets a line, not an empty table. Read in headless Chromium (`--dump-dom`).
//!
//! Needs the shim (as the preload tests find it) and Debian's `chromium` (`scripts/test.sh`
//! installs it).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{data, success, ying};
use preload_tests::{Run, TestDir, report_sets};

/// The DOM Chromium leaves after running the script of `page` (`#fragment` after it, if any).
fn dom_of(page: &Path, fragment: &str, work: &Path) -> String {
    let out = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--dump-dom"])
        .arg(format!("--user-data-dir={}", work.join("chromium-profile").display()))
        .arg(format!("file://{}{fragment}", page.display()))
        .stderr(Stdio::null())
        .output()
        .expect("chromium is required: run scripts/test.sh (installs Debian's chromium)");
    assert!(out.status.success(), "chromium failed on {}", page.display());
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(dom.contains("data-rendered=\"yes\""), "the script ran to its end:\n{dom}");
    dom
}

/// The `data-name`s of the chart's series.
fn series(dom: &str) -> Vec<String> {
    dom.split("class=\"series\"")
        .skip(1)
        .filter_map(|s| s.split("data-name=\"").nth(1)?.split('"').next().map(str::to_string))
        .collect()
}

#[test]
fn a_page_opens_on_the_hump_not_on_the_empty_end() {
    let dir = TestDir::new("page-hump");
    let exe = dir.join("hump");
    Run::new("cc")
        .args(&["-g", "-O1", "-o"])
        .arg(&exe)
        .arg(data("hump.c"))
        .run()
        .assert_success("cc hump.c");
    let reports = dir.join("reports");
    let o = common::every_second(&exe, &reports).run();
    o.assert_success("hump.c under the shim");
    let sets = report_sets(&reports);
    assert!(sets.len() >= 4, "a set a second: {sets:?}");
    let last = sets.last().unwrap();
    // The first of the sets that retained the most (exact).
    let retained: Vec<u64> = sets.iter().map(|s| s.manifest().totals.retained_bytes).collect();
    let most = retained.iter().copied().max().unwrap_or(0);
    let largest = &sets[retained.iter().position(|&r| r == most).unwrap()];
    assert!(most >= 40 << 20, "the hump is in the sets: {retained:?}");
    assert!(largest.seq != last.seq, "the hump is before the end: {sets:?}");

    let own: PathBuf = std::fs::read_dir(&reports)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "html"))
        .expect("the process's page");
    let view = PathBuf::from(
        success(ying().arg("view").arg(&reports).run(), "ying view").stdout_str().trim(),
    );
    for page in [&own, &view] {
        let html = std::fs::read_to_string(page).unwrap();
        // The plain table: at the largest dump, said, and not empty.
        let heading = html
            .split("<h3>Top stacks by retained bytes at dump ")
            .nth(1)
            .and_then(|h| h.split("</h3>").next())
            .unwrap_or_else(|| panic!("no top table heading in {}", page.display()));
        assert!(heading.starts_with(&format!("{} ", largest.seq)), "{heading}");
        assert!(heading.contains(&format!("the last one, dump {}", last.seq)), "{heading}");
        let table = html.split("<table class=\"top\">").nth(1).expect("a top table");
        let table = table.split("</table>").next().unwrap();
        assert!(table.contains("store_block"), "{table}");

        let dom = dom_of(page, "", dir.path());
        // The dump picker opens on the largest dump.
        let index = sets.iter().position(|s| s.seq == largest.seq).unwrap();
        assert!(
            dom.contains(&format!("class=\"dump-view\" data-dump=\"{index}\"")),
            "the picker opens on dump {} (index {index}) in {}",
            largest.seq,
            page.display()
        );
        // Two series named store_block, told apart by their callers.
        let names = series(&dom);
        for caller in ["load_a", "load_b"] {
            assert!(
                names.iter().any(|n| n.starts_with("store_block") && n.ends_with(caller)),
                "{caller}: {names:?}"
            );
        }
        let store: Vec<&String> = names.iter().filter(|n| n.starts_with("store_block")).collect();
        assert!(store.len() == 2 && store[0] != store[1], "{names:?}");
    }

    // The last dump picked through the URL: nothing retained there is said in a line.
    let index = sets.len() - 1;
    let dom = dom_of(&view, &format!("#dump={index}"), dir.path());
    assert!(dom.contains(&format!("class=\"dump-view\" data-dump=\"{index}\"")), "{dom}");
    assert!(dom.contains("class=\"top-empty\""), "the empty dump says why");
}
