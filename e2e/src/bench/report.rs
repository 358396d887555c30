//! The table every scenario adds rows to, printed as Markdown so it pastes into
//! docs/bench/history.md as it is.
use std::fmt::Write;

#[derive(Clone, Debug)]
pub struct Row {
    pub scenario: String,
    pub subject: String,
    pub metric: String,
    pub value: String,
    pub note: String,
}

#[derive(Default, Debug)]
pub struct Report {
    pub rows: Vec<Row>,
    pub header: Vec<(String, String)>,
}

impl Report {
    pub fn add(&mut self, scenario: &str, subject: &str, metric: &str, value: impl ToString, note: impl ToString) {
        let row = Row {
            scenario: scenario.into(),
            subject: subject.into(),
            metric: metric.into(),
            value: value.to_string(),
            note: note.to_string(),
        };
        eprintln!("  {} | {} | {} = {} {}", row.scenario, row.subject, row.metric, row.value, row.note);
        self.rows.push(row);
    }

    /// The value of the first row with this scenario, subject and metric.
    pub fn value(&self, scenario: &str, subject: &str, metric: &str) -> Option<&str> {
        self.rows
            .iter()
            .find(|r| r.scenario == scenario && r.subject == subject && r.metric == metric)
            .map(|r| r.value.as_str())
    }

    pub fn markdown(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.header {
            let _ = writeln!(s, "- {k}: {v}");
        }
        s.push('\n');
        s.push_str("| scenario | subject | metric | value | note |\n|---|---|---|---:|---|\n");
        for r in &self.rows {
            let _ = writeln!(s, "| {} | {} | {} | {} | {} |", r.scenario, r.subject, r.metric, r.value, r.note);
        }
        s
    }
}

/// Events per second with thousands separators, e.g. `48,210`.
pub fn per_s(n: f64) -> String {
    let whole = n.round() as i64;
    let digits = whole.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `a / b` as `2.31×`, or `n/a`.
pub fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 { format!("{:.2}×", a / b) } else { "n/a".into() }
}
