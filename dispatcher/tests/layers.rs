//! The `highwater` crate's last in-crate layer rule (docs/architecture.md): the developer tools
//! name nothing of the CLI. Read from the sources, so a new import that breaks the rule fails
//! here. The store (`highwater-store`, store/) and the engine (`highwater-engine`, engine/) are
//! crates of their own that do not depend on this one: Cargo refuses their upward imports (a
//! dependency cycle), so they need no rule here. This file goes when the tools leave the crate.
//! It also holds that no crate above the store runs a statement (a text scan: a crate that uses
//! sqlx for its pool types could still call `sqlx::query`).
use std::path::{Path, PathBuf};

/// Modules (as re-exported at the crate root) that each layer must not name.
const RULES: &[(&str, &[&str])] = &[("devtools", &["cli"])];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The crate-root modules a file names: `crate::x` paths and the items of `use crate::{..}`.
fn named_modules(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find("};").unwrap_or(group.len());
            let mut depth = 0;
            let mut item = String::new();
            for c in group[..end].chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => names.push(std::mem::take(&mut item)),
                    _ => item.push(c),
                }
            }
            names.push(item);
        } else {
            names.push(rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
        }
    }
    names.into_iter().map(|n| n.trim().split("::").next().unwrap_or_default().to_owned()).collect()
}

#[test]
fn layers_depend_only_downwards() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for (layer, forbidden) in RULES {
        let mut files = Vec::new();
        rust_files(&src.join(layer), &mut files);
        assert!(!files.is_empty(), "no sources under src/{layer}");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for name in named_modules(&text) {
                if forbidden.contains(&name.as_str()) {
                    broken.push(format!("{} names crate::{name}", file.strip_prefix(&src).unwrap().display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "imports against the layering:\n{}", broken.join("\n"));
}

#[test]
fn the_reader_finds_grouped_and_plain_imports() {
    let names = named_modules("use crate::{Error, shards::{self, Status}, cli};\nlet x = crate::sse::Hub::sink;");
    assert_eq!(names, ["Error", "shards", "cli", "sse"]);
}

/// What running a statement looks like in Rust, with sqlx or around it.
const STATEMENT_CALLS: [&str; 4] = ["sqlx::query", "query_as", "query_scalar", "raw_sql"];

/// The store owns every statement (issue 45): no crate above it runs one of its own. The engine's
/// own test (`engine/tests/no_sql.rs`) also keeps sqlx out of its dependencies.
#[test]
fn no_crate_above_the_store_runs_a_statement() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for krate in ["ops", "console", "engine", "dispatcher", "operator"] {
        let mut files = Vec::new();
        rust_files(&root.join(krate).join("src"), &mut files);
        assert!(!files.is_empty(), "no sources under {krate}/src");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for (n, line) in text.lines().enumerate() {
                if STATEMENT_CALLS.iter().any(|c| line.contains(c)) {
                    found.push(format!(
                        "{}:{}: {}",
                        file.strip_prefix(&root).unwrap_or(&file).display(),
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "statements outside highwater-store; give each a typed function there:\n{}",
        found.join("\n")
    );
}
