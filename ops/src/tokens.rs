//! The bearer tokens of the operations' front ends, read one way for all: the dispatcher's ops
//! and SSE endpoints (`highwater_engine::sse::Tokens`) and the console's login.
use std::path::Path;

use highwater_store::{Error, Result};

/// Tokens from an environment variable's value (comma-separated) and/or a file of one per line
/// (blank lines and `#` comments skipped), in that order: the Nth is audited as `…-token-N`.
/// `what` names them in the error (`ops`, `SSE`).
pub fn load_tokens(what: &str, env: Option<&str>, file: Option<&Path>) -> Result<Vec<String>> {
    let mut v: Vec<String> =
        env.unwrap_or("").split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned).collect();
    if let Some(f) = file {
        let text =
            std::fs::read_to_string(f).map_err(Error::io(format!("reading {what} tokens from {}", f.display())))?;
        v.extend(text.lines().map(str::trim).filter(|t| !t.is_empty() && !t.starts_with('#')).map(str::to_owned));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_then_file_without_blanks_or_comments() {
        let dir = std::env::temp_dir().join(format!("hw-tokens-{}", std::process::id()));
        std::fs::write(&dir, "# ops\n c \n\nd\n").unwrap();
        assert_eq!(load_tokens("ops", Some("a, b,,"), Some(&dir)).unwrap(), ["a", "b", "c", "d"]);
        std::fs::remove_file(&dir).unwrap();
        let e = load_tokens("SSE", None, Some(Path::new("/nonexistent/tokens"))).unwrap_err().to_string();
        assert!(e.contains("reading SSE tokens from /nonexistent/tokens"), "{e}");
    }
}
