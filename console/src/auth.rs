//! Who may act. Reading needs nothing; an operation needs a console user: a login with one of the
//! ops tokens (the dispatcher's HTTP API's list: `--ops-tokens-file`, `HIGHWATER_OPS_TOKENS`) that
//! sets an HttpOnly, SameSite=Strict cookie, or a user header set by an authenticating proxy
//! (`--trusted-user-header`, only from `--trusted-proxy` addresses). Every POST carries a CSRF
//! token bound to the browser's cookie ([`Who::csrf`]); without one that matches it is refused.
use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::Mutex,
};

use axum::{
    body::Bytes,
    extract::{ConnectInfo, Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Redirect, Response},
};
use highwater_store::{Error, Result};
use hmac::{Hmac, KeyInit, Mac};
use ipnet::IpNet;
use maud::html;
use sha2::Sha256;

use crate::{Console, error::PageError, form::Form, page};

const COOKIE: &str = "hw_console";

/// How requests authenticate for operations.
#[derive(Clone, Default)]
pub struct Auth {
    /// Tokens a login form accepts; the Nth is audited as `console:ops-token-N`.
    pub ops_tokens: Vec<String>,
    /// The header an authenticating proxy sets to the user's name (`X-Forwarded-User`).
    pub trusted_user_header: Option<String>,
    /// The addresses that header is believed from.
    pub trusted_proxies: Vec<IpNet>,
}

/// Never prints the tokens.
impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("ops_tokens", &self.ops_tokens.len())
            .field("trusted_user_header", &self.trusted_user_header)
            .field("trusted_proxies", &self.trusted_proxies)
            .finish()
    }
}

impl Auth {
    /// Refuses a header without the proxies it may come from, and proxies without a header.
    pub fn check(&self) -> Result<()> {
        match (&self.trusted_user_header, self.trusted_proxies.is_empty()) {
            (Some(h), true) => Err(Error::config(format!(
                "--trusted-user-header {h} without --trusted-proxy: anyone could set that header"
            ))
            .with_fix("name the proxy's addresses: --trusted-proxy 10.0.0.5/32 (repeat for several)")),
            (None, false) => Err(Error::config("--trusted-proxy without --trusted-user-header")
                .with_fix("name the header the proxy sets: --trusted-user-header X-Forwarded-User")),
            (Some(h), false) if axum::http::HeaderName::try_from(h.as_str()).is_err() => {
                Err(Error::config(format!("--trusted-user-header {h:?} is not a header name"))
                    .with_fix("e.g. --trusted-user-header X-Forwarded-User"))
            }
            _ => Ok(()),
        }
    }

    /// Why nobody can act, when nobody can.
    pub fn read_only_reason(&self) -> Option<&'static str> {
        (self.ops_tokens.is_empty() && self.trusted_user_header.is_none()).then_some(
            "no ops tokens (--ops-tokens-file, HIGHWATER_OPS_TOKENS) and no --trusted-user-header are configured",
        )
    }
}

/// The logged-in browsers (by cookie) of this process, and the key of its CSRF tokens. Both are
/// lost at restart: a user logs in again.
pub(crate) struct Sessions {
    auth: Auth,
    key: Vec<u8>,
    users: Mutex<HashMap<String, String>>,
}

impl Sessions {
    pub fn new(auth: Auth) -> Self {
        let key = [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()].iter().flat_map(|u| *u.as_bytes()).collect();
        Sessions { auth, key, users: Mutex::new(HashMap::new()) }
    }

    fn csrf(&self, sid: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes keys of any length");
        mac.update(sid.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }
}

/// The request's browser and user, put in every request by [`identify`].
#[derive(Clone, Debug)]
pub(crate) struct Who {
    pub csrf: String,
    sid: String,
    /// The audit's "who": `console:ops-token-N` or `console:<proxy user>`; `None`: read-only.
    pub user: Option<String>,
    pub read_only: Option<&'static str>,
    pub login: bool,
}

impl Who {
    /// The user, or the refusal of an operation without one (401).
    pub fn require_user(&self) -> Result<&str, PageError> {
        self.user.as_deref().ok_or_else(|| {
            let fix = match self.read_only {
                Some(why) => format!("this console is read-only: {why}"),
                None if self.login => "log in with an ops token (Log in, top right)".to_owned(),
                None => "reach the console through its authenticating proxy".to_owned(),
            };
            PageError::new(StatusCode::UNAUTHORIZED, format!("an operation needs a console user; {fix}"))
        })
    }

    /// Refuses (403) a form whose CSRF token is not this browser's.
    pub fn require_csrf(&self, form: &Form) -> Result<(), PageError> {
        let given = form.get("csrf").unwrap_or_default();
        if constant_time_eq(given.as_bytes(), self.csrf.as_bytes()) {
            Ok(())
        } else {
            Err(PageError::new(
                StatusCode::FORBIDDEN,
                "the form's CSRF token is missing or not this browser's; reload the page and submit it again",
            ))
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn cookie_sid(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(';'))
        .filter_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .find(|v| v.len() == 32 && v.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_owned)
}

fn set_cookie(sid: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("{COOKIE}={sid}; Path=/; HttpOnly; SameSite=Strict")).expect("hex is a header value")
}

fn new_sid() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The user a trusted proxy names, if the request comes from one.
fn proxy_user(auth: &Auth, peer: Option<IpAddr>, headers: &HeaderMap) -> Option<String> {
    let name = auth.trusted_user_header.as_deref()?;
    let peer = peer?;
    if !auth.trusted_proxies.iter().any(|n| n.contains(&peer)) {
        return None;
    }
    let user = headers.get(name)?.to_str().ok()?.trim();
    (!user.is_empty() && user.len() <= 200 && !user.chars().any(char::is_control)).then(|| format!("console:{user}"))
}

/// Gives every browser a cookie (for its CSRF token), and every request its [`Who`].
pub(crate) async fn identify(State(st): State<Console>, mut req: Request, next: Next) -> Response {
    let given = cookie_sid(req.headers());
    let sid = given.clone().unwrap_or_else(new_sid);
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    let s = &st.auth;
    let user =
        proxy_user(&s.auth, peer, req.headers()).or_else(|| s.users.lock().expect("sessions lock").get(&sid).cloned());
    let who = Who {
        csrf: s.csrf(&sid),
        sid: sid.clone(),
        user,
        read_only: s.auth.read_only_reason(),
        login: !s.auth.ops_tokens.is_empty(),
    };
    req.extensions_mut().insert(who);
    let mut resp = next.run(req).await;
    if given.is_none() && !resp.headers().contains_key(header::SET_COOKIE) {
        resp.headers_mut().insert(header::SET_COOKIE, set_cookie(&sid));
    }
    resp
}

pub(crate) async fn login_page(axum::Extension(who): axum::Extension<Who>) -> Response {
    let body = html! {
        h1 { "Log in" }
        @if !who.login {
            p.notice { "Login with a token is not configured: start the console with --ops-tokens-file or HIGHWATER_OPS_TOKENS." }
        } @else {
            form method="post" action="/login" {
                input type="hidden" name="csrf" value=(who.csrf);
                label for="token" { "Ops token" }
                input #token type="password" name="token" autocomplete="current-password" required;
                button type="submit" { "Log in" }
            }
        }
    };
    page::render("Log in", &who, body).into_response()
}

/// A known ops token logs this browser in under a new cookie (the old one, which a page may have
/// seen before, is not the logged-in one).
pub(crate) async fn login(
    State(st): State<Console>,
    axum::Extension(who): axum::Extension<Who>,
    body: Bytes,
) -> Result<Response, PageError> {
    let form = Form::parse(&body)?;
    who.require_csrf(&form)?;
    let given = form.get("token").unwrap_or_default().trim().to_owned();
    let which = st.auth.auth.ops_tokens.iter().enumerate().fold(None, |found, (i, t)| {
        if constant_time_eq(t.as_bytes(), given.as_bytes()) { found.or(Some(i)) } else { found }
    });
    let Some(i) = which else {
        tracing::warn!("console: a login with an unknown token");
        return Err(PageError::new(StatusCode::UNAUTHORIZED, "that is not one of the ops tokens; nothing changed"));
    };
    let sid = new_sid();
    let user = format!("console:ops-token-{}", i + 1);
    tracing::info!(user, "console: logged in");
    let mut users = st.auth.users.lock().expect("sessions lock");
    users.remove(&who.sid);
    users.insert(sid.clone(), user);
    drop(users);
    let mut resp = Redirect::to("/").into_response();
    resp.headers_mut().insert(header::SET_COOKIE, set_cookie(&sid));
    Ok(resp)
}

pub(crate) async fn logout(
    State(st): State<Console>,
    axum::Extension(who): axum::Extension<Who>,
    body: Bytes,
) -> Result<Response, PageError> {
    let form = Form::parse(&body)?;
    who.require_csrf(&form)?;
    st.auth.users.lock().expect("sessions lock").remove(&who.sid);
    Ok(Redirect::to("/").into_response())
}
