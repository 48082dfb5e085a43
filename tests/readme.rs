//! The README's `YING_*` table is generated from the configuration table, the single source of
//! truth (`YING_BLESS=1 cargo test --test readme` rewrites it).

use ying_profiler::config::Config;

#[test]
fn readme_variable_table_matches_config() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
    let readme = std::fs::read_to_string(path).unwrap();
    let (start, end) = ("<!-- ying-variables:start -->\n", "<!-- ying-variables:end -->");
    let a = readme.find(start).expect("start marker") + start.len();
    let b = readme.find(end).expect("end marker");
    let table = Config::markdown_table();
    if std::env::var_os("YING_BLESS").is_some() {
        let new = format!("{}{}{}", &readme[..a], table, &readme[b..]);
        std::fs::write(path, new).unwrap();
        return;
    }
    assert_eq!(
        &readme[a..b],
        table,
        "README's YING_* table is stale: YING_BLESS=1 cargo test --test readme"
    );
}
