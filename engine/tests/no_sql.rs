//! The engine runs no SQL of its own (issue 45): every statement is the store's. Cargo holds most
//! of it (the engine does not depend on sqlx, so it cannot name `sqlx::query`); this test keeps
//! it so: it fails when sqlx comes back as a dependency or a statement call appears in engine/src.
use std::{fs, path::Path};

/// What running a statement looks like in Rust, with sqlx or around it.
const STATEMENT_CALLS: [&str; 4] = ["sqlx::query", "query_as", "query_scalar", "raw_sql"];

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in fs::read_dir(dir).expect("engine/src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push((path.display().to_string(), fs::read_to_string(&path).expect("a source file")));
        }
    }
}

#[test]
fn the_engine_does_not_depend_on_sqlx() {
    let manifest = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let deps: Vec<&str> = manifest.lines().filter(|l| l.trim_start().starts_with("sqlx")).collect();
    assert!(
        deps.is_empty(),
        "engine/Cargo.toml depends on sqlx again ({deps:?}): statements belong to highwater-store"
    );
}

#[test]
fn no_engine_source_runs_a_statement() {
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    assert!(files.len() > 20, "found the engine's sources ({} files)", files.len());
    let found: Vec<String> = files
        .iter()
        .flat_map(|(path, text)| {
            text.lines()
                .enumerate()
                .filter(|(_, line)| STATEMENT_CALLS.iter().any(|c| line.contains(c)))
                .map(move |(n, line)| format!("{path}:{}: {}", n + 1, line.trim()))
        })
        .collect();
    assert!(
        found.is_empty(),
        "the engine runs SQL of its own; move these statements into highwater-store behind a typed function:\n{}",
        found.join("\n")
    );
}
