//! The modules of `src/` import each other in one direction only (ARCHITECTURE.md, "Imports go
//! down"): the graph whose nodes are the top-level files and folders of `src/` (`runner/`,
//! `report/`, `config.rs`...) and whose edges are the `crate::` paths in their code (comments
//! and doc links do not count) has no cycle. A cycle is what made the runner, the services,
//! the triggers, the profiles and the report one knot of ten files; this test keeps it undone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Edges allowed although they point up: none.
const ALLOWED: &[(&str, &str)] = &[];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src` without its comments and the contents of its string and character literals, so that
/// only code is left (a `crate::` inside a doc link or an error message is not an import).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'r' && (b[i + 1..].starts_with(b"\"") || b[i + 1..].starts_with(b"#")) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while j < b.len() && b[j] == b'#' {
                hashes += 1;
                j += 1;
            }
            if j < b.len() && b[j] == b'"' {
                let close: Vec<u8> =
                    std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                j += 1;
                while j < b.len() && !b[j..].starts_with(&close) {
                    j += 1;
                }
                i = j + close.len();
                out.push_str("\"\"");
            } else {
                out.push('r');
                i += 1;
            }
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && (b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\')) {
            // A character literal ('x', '\n', '\''); a lifetime has no closing quote.
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("' '");
        } else {
            let c = src[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
    &s[..end]
}

/// The first path segments named after `crate::` in `code`, including each top-level item of
/// a `crate::{a, b::c}` group.
fn crate_paths(code: &str) -> BTreeSet<String> {
    paths_after(code, "crate::")
}

/// The first path segments named after `prefix` (`crate::report::`, `super::`) in `code`,
/// including each top-level item of a `{a, b::c}` group.
fn paths_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices(prefix) {
        if at > 0
            && code[..at]
                .ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$' || c == ':')
        {
            continue; // `$crate::`, `my_crate::`, `super::super::`
        }
        let rest = &code[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = true;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start && depth == 0 => {
                        found.insert(ident_at(&group[k..]).to_string());
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let first = ident_at(rest);
            if first != "super" && first != "self" {
                found.insert(first.to_string());
            }
        }
    }
    found
}

/// The node of a file: its top-level file or folder under `src/`.
fn node_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().to_string();
    first.trim_end_matches(".rs").to_string()
}

/// Names `lib.rs` re-exports at the crate root (`pub use report::snapshot::{Snapshot, ..}`,
/// `pub use runner as utils`), each with the module it comes from.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for line in lib.lines() {
        let Some(path) = line.strip_prefix("pub use ") else { continue };
        let path = path.trim_end_matches(';');
        let module = ident_at(path.trim_start_matches("crate::")).to_string();
        if let Some((_, alias)) = path.split_once(" as ") {
            names.insert(alias.trim().to_string(), module);
        } else if let Some((_, group)) = path.split_once('{') {
            for item in group.trim_end_matches('}').split(',') {
                names.insert(item.trim().to_string(), module.clone());
            }
        } else if let Some(last) = path.rsplit("::").next() {
            names.insert(last.to_string(), module);
        }
    }
    names
}

/// A cycle of `edges` between `nodes` (its first node repeated at its end), found as a back
/// edge of a depth-first search; None when there is none.
fn find_cycle(
    nodes: &BTreeSet<String>,
    edges: &BTreeMap<String, BTreeSet<String>>,
) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|s| s == m).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(m, edges, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    nodes.iter().find_map(|n| {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0 {
            visit(n, edges, &mut state, &mut Vec::new())
        } else {
            None
        }
    })
}

/// Panics with the cycle of `edges` found, if any, each edge with `why` it exists.
fn assert_acyclic(
    nodes: &BTreeSet<String>,
    edges: &BTreeMap<String, BTreeSet<String>>,
    why: &BTreeMap<(String, String), String>,
    place: &str,
) {
    if let Some(cycle) = find_cycle(nodes, edges) {
        let steps: Vec<String> = cycle
            .windows(2)
            .map(|w| format!("  {} -> {}: {}", w[0], w[1], why[&(w[0].clone(), w[1].clone())]))
            .collect();
        panic!("import cycle {place}:\n{}", steps.join("\n"));
    }
}

/// The graph of the top-level modules of the crate whose sources are `src` (its root file
/// `root`, `lib` or `main`, left out: it declares every module), each edge with the file that
/// makes it; panics on a cycle.
fn crate_graph(src: &Path, root: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let lib = std::fs::read_to_string(src.join(format!("{root}.rs"))).unwrap();
    let aliases = root_reexports(&code_only(&lib));
    let nodes: BTreeSet<String> =
        files.iter().map(|f| node_of(src, f)).filter(|n| n != root).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut why: BTreeMap<(String, String), String> = BTreeMap::new();
    for file in &files {
        let from = node_of(src, file);
        if from == root {
            continue; // The root declares every module and re-exports from them.
        }
        let code = code_only(&std::fs::read_to_string(file).unwrap());
        for first in crate_paths(&code) {
            let to = if nodes.contains(&first) {
                first.clone()
            } else if let Some(m) = aliases.get(&first) {
                m.clone()
            } else {
                continue; // `crate::front_end` and other items of the root itself
            };
            if to == from || ALLOWED.contains(&(from.as_str(), to.as_str())) {
                continue;
            }
            why.entry((from.clone(), to.clone()))
                .or_insert_with(|| format!("{} names crate::{first}", file.display()));
            edges.entry(from.clone()).or_default().insert(to);
        }
    }
    assert_acyclic(&nodes, &edges, &why, &format!("between modules of {}", src.display()));
    edges
}

/// The shim (`preload/src/`) and the `ying` command (`cli/src/`) hold to the same rule as the
/// library: their modules import each other in one direction only.
#[test]
fn modules_of_the_shim_and_the_command_import_each_other_without_a_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (dir, file, at_least) in [("preload/src", "lib", 8), ("cli/src", "main", 5)] {
        let src = root.join(dir);
        let edges = crate_graph(&src, file);
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        assert!(files.len() > at_least, "only {} files under {}", files.len(), src.display());
        assert!(!edges.is_empty(), "no import found between the modules of {}", src.display());
    }
}

#[test]
fn modules_of_src_import_each_other_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = crate_graph(&src, "lib");
    // The leaves ARCHITECTURE.md names import nothing of the crate's outside `sys/`, but for
    // `config.rs`'s use of `triggers/signal.rs` (to parse `YING_DUMP_SIGNAL`), itself a leaf
    // file: `triggers/` does not import `config.rs` (the runner converts the configuration);
    // and for `config.rs` naming `engine/`'s sampling and giant-request defaults, declared once
    // there (ARCHITECTURE.md): the engine never imports `config.rs`, so no cycle can form.
    for leaf in ["config", "spans"] {
        let out: Vec<&String> = edges
            .get(leaf)
            .into_iter()
            .flatten()
            .filter(|m| {
                m.as_str() != "sys"
                    && !(leaf == "config" && ["triggers", "engine"].contains(&m.as_str()))
            })
            .collect();
        assert!(out.is_empty(), "{leaf}.rs is a leaf but imports {out:?}");
    }
}

/// Inside every folder of `src/` too, the files and subfolders import each other in one
/// direction only: the nodes are a folder's children (its `mod.rs`, which declares them, is
/// its root, as `lib.rs` is the crate's), the edges the `crate::<folder>::<child>` paths of any
/// file under a child and the `super::<child>` paths of the files directly in the folder.
/// Test modules count: they are code of the file they are in.
#[test]
fn files_of_each_folder_import_each_other_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut folders: BTreeSet<PathBuf> = BTreeSet::new();
    for f in &files {
        let mut d = f.parent().unwrap();
        while d != src {
            folders.insert(d.to_path_buf());
            d = d.parent().unwrap();
        }
    }
    let mut checked = 0;
    for folder in &folders {
        let rel = folder.strip_prefix(&src).unwrap();
        let prefix: String = std::iter::once("crate".to_string())
            .chain(rel.components().map(|c| c.as_os_str().to_string_lossy().to_string()))
            .map(|s| s + "::")
            .collect();
        let inside: Vec<&PathBuf> = files.iter().filter(|f| f.starts_with(folder)).collect();
        let child = |f: &Path| node_of(folder, f);
        let nodes: BTreeSet<String> =
            inside.iter().map(|f| child(f)).filter(|n| n != "mod").collect();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut why: BTreeMap<(String, String), String> = BTreeMap::new();
        for file in &inside {
            let from = child(file);
            if from == "mod" {
                continue;
            }
            let code = code_only(&std::fs::read_to_string(file).unwrap());
            let mut named = paths_after(&code, &prefix);
            if file.parent() == Some(folder.as_path()) {
                named.extend(paths_after(&code, "super::"));
            }
            for to in named {
                if to != from && nodes.contains(&to) {
                    why.entry((from.clone(), to.clone()))
                        .or_insert_with(|| format!("{} names {to}", file.display()));
                    edges.entry(from.clone()).or_default().insert(to);
                }
            }
        }
        assert_acyclic(&nodes, &edges, &why, &format!("inside {}", folder.display()));
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} folders found under {}", src.display());
}

#[test]
fn the_parser_sees_code_and_not_comments() {
    let code = code_only(
        "use crate::{a, b::{c, d}, e as f};\n// crate::g\n/// [`crate::h`]\nlet s = \"crate::i\";\nlet c = '\"'; crate::j::k();\n/* crate::l */ r#\"crate::m\"#;",
    );
    let got: Vec<String> = crate_paths(&code).into_iter().collect();
    assert_eq!(got, ["a", "b", "e", "j"]);
    let code = code_only("use super::{x, y::z};\nsuper::super::w();\ncrate::report::v::f();");
    let got: Vec<String> = paths_after(&code, "super::").into_iter().collect();
    assert_eq!(got, ["x", "y"]);
    let got: Vec<String> = paths_after(&code, "crate::report::").into_iter().collect();
    assert_eq!(got, ["v"]);
}
