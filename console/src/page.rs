//! The page around every view, and the headers of every answer: a Content-Security-Policy that
//! allows only this origin's scripts and styles (no inline script, no eval), no framing, no
//! sniffing, no caching of pages that show payloads.
use axum::{
    extract::Request,
    http::{HeaderValue, header},
    middleware::Next,
    response::{Html, Response},
};
use maud::{DOCTYPE, Markup, html};

use crate::auth::Who;

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub(crate) async fn security_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    resp
}

fn head(title: &str) -> Markup {
    html! {
        meta charset="utf-8";
        meta name="viewport" content="width=device-width, initial-scale=1";
        // htmx's own inline indicator style and eval are off: the CSP allows neither.
        meta name="htmx-config" content=r#"{"includeIndicatorStyles":false,"allowEval":false,"allowScriptTags":false}"#;
        title { (title) " · highwater console" }
        link rel="stylesheet" href="/assets/console.css";
        script src="/assets/htmx.min.js" defer {}
    }
}

/// A page with the navigation and who is acting.
pub(crate) fn render(title: &str, who: &Who, body: Markup) -> Html<String> {
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                head { (head(title)) }
                body {
                    header {
                        nav aria-label="Main" {
                            a.brand href="/" { "highwater" }
                            a href="/" { "Overview" }
                            a href="/dead-letters" { "Dead letters" }
                            a href="/streams" { "Streams" }
                            a href="/event-types" { "Event types" }
                        }
                        div.who {
                            @if let Some(u) = &who.user {
                                span { "Acting as " strong { (u) } }
                                @if who.login {
                                    form.inline method="post" action="/logout" {
                                        input type="hidden" name="csrf" value=(who.csrf);
                                        button type="submit" { "Log out" }
                                    }
                                }
                            } @else if who.read_only.is_some() {
                                span.badge { "Read-only" }
                            } @else if who.login {
                                a href="/login" { "Log in" }
                            } @else {
                                span.badge { "Read-only (not through the proxy)" }
                            }
                        }
                    }
                    @if let Some(why) = who.read_only {
                        p.notice role="status" { "This console is read-only: " (why) "." }
                    }
                    main { (body) }
                }
            }
        }
        .into_string(),
    )
}

/// A page without the user's part (errors).
pub(crate) fn bare(title: &str, body: Markup) -> Html<String> {
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                head { (head(title)) }
                body { main { (body) } }
            }
        }
        .into_string(),
    )
}

/// `12.3 s`, `4 min`, `2.1 h` for a duration in seconds.
pub(crate) fn seconds(s: f64) -> String {
    if s < 60.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}
