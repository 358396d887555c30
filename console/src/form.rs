//! A form body (`application/x-www-form-urlencoded`) with repeated keys: the selected dead letters.
use axum::http::StatusCode;

use crate::error::PageError;

pub(crate) struct Form(Vec<(String, String)>);

impl Form {
    /// Refuses a NUL anywhere (PostgreSQL text cannot hold one).
    pub fn parse(body: &[u8]) -> Result<Self, PageError> {
        let pairs: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
        if pairs.iter().any(|(k, v)| k.contains('\0') || v.contains('\0')) {
            return Err(PageError::new(StatusCode::BAD_REQUEST, "a field contains a NUL character; remove it"));
        }
        Ok(Form(pairs))
    }

    /// The first value of `name`, trimmed; `None` when absent or empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.trim()).filter(|v| !v.is_empty())
    }

    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0.iter().filter(move |(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}
