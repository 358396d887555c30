//! The HTTP answer of an error (feature `http`, which the engine's handlers enable): the status
//! by variant, the body `{"error": "<problem>\n  fix: <fix>"}` as docs/openapi.json documents it.
use axum::{
    Json,
    http::StatusCode,
    response::{IntoResponse, Response},
};

use crate::Error;

impl Error {
    /// 404 unknown consumer, 409 refused, 400 invalid input, 503 the database.
    pub fn status(&self) -> StatusCode {
        match self {
            Error::NotFound { .. } => StatusCode::NOT_FOUND,
            Error::Refused { .. } => StatusCode::CONFLICT,
            Error::Invalid { .. } => StatusCode::BAD_REQUEST,
            Error::Unavailable { .. } | Error::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        (self.status(), Json(serde_json::json!({"error": self.to_string()}))).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_variant_has_its_status_and_the_error_body() {
        let cases = [
            (Error::from(highwater_store::Error::no_consumer("nope")), 404),
            (Error::refused("nothing matches", "list them"), 409),
            (Error::invalid("bad body", "send JSON"), 400),
            (Error::Unavailable { problem: "no answer".into(), fix: None }, 503),
            (Error::Store(highwater_store::Error::Internal("bug".into())), 503),
        ];
        for (e, status) in cases {
            let text = e.to_string();
            let r = e.into_response();
            assert_eq!(r.status().as_u16(), status, "{text}");
            let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v, serde_json::json!({"error": text}));
        }
    }
}
