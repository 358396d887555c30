//! An error as a page: its status and its message, escaped like everything else.
use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use maud::html;

#[derive(Debug)]
pub(crate) struct PageError {
    status: StatusCode,
    message: String,
}

impl PageError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        PageError { status, message: message.into() }
    }
}

/// The operations' statuses (404 unknown consumer, 409 refused, 400 invalid, 503 database), as
/// the dispatcher's HTTP API maps them.
impl From<highwater_ops::Error> for PageError {
    fn from(e: highwater_ops::Error) -> Self {
        PageError::new(e.status(), e.to_string())
    }
}

impl From<highwater_store::Error> for PageError {
    fn from(e: highwater_store::Error) -> Self {
        highwater_ops::Error::from(e).into()
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let body = html! {
            h1 { "Error " (self.status.as_u16()) }
            pre.error role="alert" { (self.message) }
            p { a href="/" { "Back to the overview" } }
        };
        (self.status, crate::page::bare("Error", body)).into_response()
    }
}
