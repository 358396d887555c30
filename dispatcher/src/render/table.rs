//! The command line's terminal tables (`event-types list`, `consumer status`, `consumer
//! dead-letters`, `top`, `events read`, the redrive and replay plans), laid out by comfy-table
//! instead of hand-written `{:<20}` widths, which broke as soon as a value was wider than its
//! column or a value's `Display` ignored the width (issue 44: `event-types list` printed the
//! COMPATIBILITY column unpadded). Each column is as wide as its widest cell, measured in
//! terminal columns (so multi-byte and wide characters line up); no borders; nothing after the
//! last cell; never wrapped, so that a line stays one row for `grep` and scripts.
use comfy_table::{CellAlignment, ContentArrangement, Table, presets::NOTHING};

/// How a column's cells sit in it: text to the left, numbers to the right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// Two spaces between columns.
const GAP: u16 = 2;

/// The table of `columns` (header, alignment) and `rows`, each line ending in `\n`; `indent`
/// spaces before every line. A cell's line breaks are replaced by spaces: one row, one line.
pub fn render(indent: usize, columns: &[(&str, Align)], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let aligns: Vec<Align> = columns.iter().map(|(_, a)| *a).collect();
    layout(indent, Some(columns.iter().map(|(h, _)| *h).collect()), &aligns, rows)
}

/// [`render`] without a header line: for lists whose cells carry their own labels
/// (`event 7  OrderPlaced  instance d0`).
pub fn render_rows(indent: usize, aligns: &[Align], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    layout(indent, None, aligns, rows)
}

fn layout(
    indent: usize,
    header: Option<Vec<&str>>,
    aligns: &[Align],
    rows: impl IntoIterator<Item = Vec<String>>,
) -> String {
    let mut table = Table::new();
    table.load_style(NOTHING).set_content_arrangement(ContentArrangement::Disabled);
    let headed = header.is_some();
    if let Some(h) = header {
        table.set_header(h);
    }
    for row in rows {
        table.add_row(row.into_iter().map(|c| c.replace(['\n', '\r'], " ")).collect::<Vec<_>>());
    }
    if !headed && table.row_count() == 0 {
        return String::new();
    }
    let last = aligns.len().saturating_sub(1);
    for (i, (column, align)) in table.column_iter_mut().zip(aligns).enumerate() {
        column.set_padding((0, if i == last { 0 } else { GAP }));
        column.set_cell_alignment(match align {
            Align::Left => CellAlignment::Left,
            Align::Right => CellAlignment::Right,
        });
    }
    let pad = " ".repeat(indent);
    table.lines().map(|l| format!("{pad}{}\n", l.trim_end())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_whatever_the_widths_and_characters() {
        let out = render(
            0,
            &[("NAME", Align::Left), ("N", Align::Right), ("MODE", Align::Left), ("NOTE", Align::Left)],
            [
                vec!["a".into(), "1".into(), "backward".into(), "".into()],
                vec!["ünïcödé-wider-than-the-header".into(), "12345".into(), "full_transitive".into(), "x\ny".into()],
            ],
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        let col = |l: &str, word: &str| l.find(word).map(|b| l[..b].chars().count());
        // Left-aligned columns start together; the right-aligned one ends together.
        assert_eq!(col(lines[0], "MODE"), col(lines[1], "backward"), "{out}");
        assert_eq!(col(lines[1], "backward"), col(lines[2], "full_transitive"), "{out}");
        assert_eq!(col(lines[0], "NOTE"), col(lines[2], "x y"), "{out}");
        assert_eq!(col(lines[1], "1").map(|c| c + 1), col(lines[2], "12345").map(|c| c + 5), "{out}");
        assert!(out.lines().all(|l| l == l.trim_end()), "nothing after the last cell: {out:?}");
        assert!(lines[0].starts_with("NAME") && lines[1].starts_with("a "), "{out}");
    }
}
