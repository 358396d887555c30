//! What `highwater event-types` prints (issue 44): an invalid schema is refused at the JSON
//! pointer inside it with a fix line, and `event-types list` is a table whose columns line up
//! whatever the widths of its values.
mod common;

use common::*;
use serde_json::{Value, json};

fn cli(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(bin()).args(args).env("DATABASE_URL", url).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

#[tokio::test]
async fn invalid_schemas_are_refused_at_their_json_pointer_with_a_fix() {
    let db = setup(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    for (n, (schema, pointer, fix)) in [
        (json!({"type": "banana"}), "at /type:", "at /type, \"type\" takes one of \"object\""),
        (json!({"required": "a"}), "at /required:", "at /required, \"required\" takes an array of property names"),
        (
            json!({"type": "object", "properties": {"total": {"type": "number", "minimum": "0"}}}),
            "at /properties/total/minimum:",
            "\"minimum\" takes a number",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let file = dir.path().join(format!("bad{n}.json"));
        std::fs::write(&file, schema.to_string()).unwrap();
        let (code, out, err) = cli(&db.url, &["event-types", "register", "Paid", "--schema", file.to_str().unwrap()]);
        assert_eq!(code, 1, "{schema}: {out}{err}");
        let problem = err.lines().find(|l| l.contains("not a valid JSON Schema")).unwrap_or_default();
        assert!(problem.contains(pointer), "{schema}: expected {pointer:?} in {err}");
        let fix_line = err.lines().find(|l| l.trim_start().starts_with("fix:")).unwrap_or_default();
        assert!(fix_line.contains(fix), "{schema}: expected a fix line with {fix:?} in {err}");
    }
    let registered = scalar_i64(&db.pool, "SELECT count(*) FROM highwater.event_types").await;
    assert_eq!(registered, 0, "nothing registered");
}

#[tokio::test]
async fn event_types_list_lines_up_every_column() {
    let db = setup(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("s.json");
    std::fs::write(&schema, json!({"type": "object"}).to_string()).unwrap();
    let schema = schema.to_str().unwrap();
    // Values wider than the old fixed columns (a 60-character name, `full_transitive`), a mode
    // whose Display ignored the width (issue 44: `H18Item    v1      backward -`), a former name.
    let long = format!("Orders.{}", "Placed".repeat(9));
    for args in [
        vec!["event-types", "register", "H18Item"],
        vec!["event-types", "register", &long, "--schema", schema, "--description", "très long"],
        vec!["event-types", "register", "Shipped", "--compatibility", "full_transitive", "--description", "sent"],
        vec!["event-types", "rename", "Shipped", "Dispatched"],
    ] {
        let (code, out, err) = cli(&db.url, &args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
    }
    let (code, list, err) = cli(&db.url, &["event-types", "list"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 5, "a header and one line per type:\n{list}");
    let header = ["TYPE", "LATEST", "COMPATIBILITY", "SCHEMA", "DESCRIPTION"];
    // Where each column starts, in characters, from the header.
    let starts: Vec<usize> = header.iter().map(|h| lines[0].find(h).unwrap()).collect();
    assert!(starts.windows(2).all(|w| w[0] < w[1]), "{list}");
    for line in &lines[1..] {
        let chars: Vec<char> = line.chars().collect();
        for (i, &start) in starts.iter().enumerate().skip(1) {
            // Each cell starts where its header does, after a blank: the cell before it ended.
            // An empty description ends the line before its column.
            if i == header.len() - 1 && chars.len() <= start {
                continue;
            }
            assert!(chars.get(start).is_some_and(|c| !c.is_whitespace()), "column {} of {line:?}:\n{list}", header[i]);
            assert_eq!(chars[start - 1], ' ', "column {} of {line:?}:\n{list}", header[i]);
        }
        assert_eq!(line.trim_end(), *line, "nothing after the last cell");
    }
    let row = |name: &str| lines.iter().find(|l| l.starts_with(&format!("{name} "))).copied().unwrap();
    let words = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(words(row("H18Item")), ["H18Item", "v1", "backward", "-"].map(String::from), "{list}");
    assert_eq!(words(row(&long))[..4], [&long, "v1", "backward", "schema"].map(String::from), "{list}");
    assert!(row(&long).ends_with("très long"), "{list}");
    assert!(
        row("Dispatched").contains("full_transitive") && row("Dispatched").contains("(formerly Shipped) sent"),
        "{list}"
    );
    // The JSON output is unchanged by the table.
    let (_, json_out, _) = cli(&db.url, &["event-types", "list", "-o", "json"]);
    let types: Vec<Value> = serde_json::from_str(&json_out).unwrap();
    assert_eq!(types.len(), 4, "{json_out}");
}
