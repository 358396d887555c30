//! The console's static files, in the binary: it works offline, no CDN. htmx is the npm package
//! `htmx.org` at the version console/browser/package.json pins (its lock file has the integrity;
//! console/browser/test.sh checks this copy against it). Licence: Zero-Clause BSD.
use axum::{
    extract::Path,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};

const HTMX: &[u8] = include_bytes!("../assets/htmx.min.js");
const CSS: &[u8] = include_bytes!("../assets/console.css");

pub(crate) async fn serve(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "htmx.min.js" => (HTMX, "text/javascript; charset=utf-8"),
        "console.css" => (CSS, "text/css; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such file\n").into_response(),
    };
    ([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "public, max-age=3600")], body).into_response()
}
