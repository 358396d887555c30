//! SQL constants for the statements that must travel as one simple query (several statements in
//! one round trip, which the extended protocol's bind parameters cannot do).

/// `s` as a string constant, whatever `standard_conforming_strings` says: an escape string, its
/// backslashes and quotes doubled.
pub fn text(s: &str) -> String {
    format!("E'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

/// `s` as a string constant, or `NULL`.
pub fn text_or_null(s: Option<&str>) -> String {
    s.map_or_else(|| "NULL".to_owned(), text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_and_backslashes_are_doubled() {
        assert_eq!(text("orders"), "E'orders'");
        assert_eq!(text(r"it's a \ path"), r"E'it''s a \\ path'");
        assert_eq!(text_or_null(None), "NULL");
        assert_eq!(text_or_null(Some("")), "E''");
    }
}
