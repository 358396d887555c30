//! The webhook sink: HTTP POST of each event (or each batch) as JSON, with the Standard Webhooks
//! headers. External: at least once, and the pass holds no transaction while a request is out.
use std::{
    error::Error as _,
    io,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use async_trait::async_trait;
use highwater_crds::WebhookSink as WebhookSinkSpec;
use reqwest::{
    StatusCode, Url,
    header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, USER_AGENT},
    redirect,
};

use super::{Backpressure, DeliveryContext, ExternalSink, SinkError, envelope::Envelope, idempotency_key, trace};
use highwater_store::{Error, Event, Result};

mod backpressure;
mod signature;
mod targets;

use signature::SigningKey;
pub use targets::TargetPolicy;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest excerpt of a failed response's body kept in the error (and so in `last_error`).
const EXCERPT_CHARS: usize = 200;
/// Response bytes read at most: enough for the excerpt and to reuse the connection after the
/// usual short answer; a longer body is dropped with its connection.
const READ_CAP: usize = 64 * 1024;

pub struct WebhookSink {
    client: reqwest::Client,
    url: Url,
    batch: bool,
    timeout: Duration,
    key: Option<SigningKey>,
}

/// What the spec alone decides; a mistake here is reported when the sink is built, naming the field.
#[derive(Debug)]
struct Checked {
    url: Url,
    timeout: Duration,
    headers: HeaderMap,
}

fn checked(spec: &WebhookSinkSpec) -> Result<Checked> {
    let url = Url::parse(&spec.url)
        .map_err(|e| Error::config(format!("sink.webhook.url: {:?} is not a URL ({e})", spec.url)))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Error::config(format!("sink.webhook.url: {:?} is not an http:// or https:// URL", spec.url)));
    }
    let timeout = match &spec.timeout {
        None => DEFAULT_TIMEOUT,
        Some(t) => humantime::parse_duration(t)
            .map_err(|e| Error::config(format!("sink.webhook.timeout: {t:?} is not a duration ({e})")))?,
    };
    if timeout.is_zero() {
        return Err(Error::config("sink.webhook.timeout: must be above zero"));
    }
    let mut headers = HeaderMap::new();
    headers.insert(USER_AGENT, HeaderValue::from_static(concat!("highwater/", env!("CARGO_PKG_VERSION"))));
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in &spec.headers {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| Error::config(format!("sink.webhook.headers: {name:?} is not a valid header name")))?;
        if highwater_crds::RESERVED_WEBHOOK_HEADERS.contains(&header.as_str()) {
            return Err(Error::config(format!(
                "sink.webhook.headers: {name:?} is set by the webhook sink itself; remove it"
            )));
        }
        // The value is not quoted: headers often carry tokens.
        let mut value = HeaderValue::from_str(value).map_err(|_| {
            Error::config(format!("sink.webhook.headers: the value of {name:?} is not a valid header value"))
        })?;
        value.set_sensitive(true);
        headers.insert(header, value);
    }
    Ok(Checked { url, timeout, headers })
}

impl WebhookSink {
    pub fn new(spec: &WebhookSinkSpec, policy: &Arc<TargetPolicy>) -> Result<Self> {
        let Checked { url, timeout, headers } = checked(spec)?;
        let key = spec.secret.as_ref().map(SigningKey::load).transpose()?;
        let mut client = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(timeout)
            // A 3xx is a failed attempt (Standard Webhooks): following it would send the signed
            // event somewhere the definition does not name.
            .redirect(redirect::Policy::none());
        if !policy.is_open() {
            let host = url.host_str().unwrap_or_default();
            policy.check_url_host(host).map_err(|e| Error::config(format!("sink.webhook.url: {e}")))?;
            // A proxy would resolve the name itself, out of the policy's sight.
            client = client.dns_resolver(Arc::new(targets::GuardedResolver(policy.clone()))).no_proxy();
        }
        let client =
            client.build().map_err(|e| Error::config(format!("sink.webhook: cannot build the HTTP client: {e}")))?;
        Ok(WebhookSink { client, url, batch: spec.batch, timeout, key })
    }

    /// One request; the error is what the shard's `last_error` will say, with what the receiver
    /// asked for besides (a pause, or to stop).
    async fn post(
        &self,
        id: &str,
        body: Vec<u8>,
        trace: Option<trace::Outgoing>,
    ) -> Result<(), (String, Option<Backpressure>)> {
        let timestamp = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let mut req =
            self.client.post(self.url.clone()).header("webhook-id", id).header("webhook-timestamp", timestamp);
        if let Some(key) = &self.key {
            req = req.header("webhook-signature", key.sign(id, timestamp, &body));
        }
        if let Some(trace) = trace {
            req = req.header("traceparent", trace.traceparent);
            if let Some(state) = trace.tracestate {
                req = req.header("tracestate", state);
            }
        }
        let resp = req
            .body(body)
            .send()
            .await
            .map_err(|e| (transport_error(e, self.timeout, self.url.scheme() == "https"), None))?;
        let status = resp.status();
        if status.is_success() {
            read_prefix(resp).await;
            return Ok(());
        }
        let asked = backpressure::asked(status, resp.headers(), SystemTime::now());
        let body = read_prefix(resp).await;
        Err((backpressure::describe(status_error(status, &body), asked), asked))
    }
}

#[async_trait]
impl ExternalSink for WebhookSink {
    fn kind(&self) -> &'static str {
        "webhook"
    }

    async fn deliver(&self, ctx: &mut DeliveryContext<'_>, events: &[Event]) -> Result<(), SinkError> {
        let encode = |e: serde_json::Error| SinkError::at(0, format!("webhook: encoding: {e}"));
        if self.batch {
            let (Some(first), Some(last)) = (events.first(), events.last()) else { return Ok(()) };
            let id = format!("{}:{}-{}", ctx.consumer, first.id, last.id);
            let all: Vec<Envelope> = events.iter().map(|ev| Envelope::new(ctx, ev)).collect();
            let body = serde_json::to_vec(&all).map_err(encode)?;
            // The receiver acknowledges the array as a whole, so a failure fails every event in it.
            return self
                .post(&id, body, ctx.outgoing(0, first, &id))
                .await
                .map_err(|(message, asked)| SinkError { backpressure: asked, ..SinkError::at(0, message) });
        }
        for (index, ev) in events.iter().enumerate() {
            let id = idempotency_key(ctx.consumer, ev.id);
            let body = serde_json::to_vec(&Envelope::new(ctx, ev)).map_err(encode)?;
            let trace = ctx.outgoing(index, ev, &id);
            self.post(&id, body, trace)
                .await
                .map_err(|(message, asked)| SinkError { backpressure: asked, ..SinkError::at(index, message) })?;
        }
        Ok(())
    }
}

/// The start of the response body. Read errors are ignored: the status has already decided.
async fn read_prefix(mut resp: reqwest::Response) -> Vec<u8> {
    let mut buf = Vec::new();
    while buf.len() < READ_CAP {
        match resp.chunk().await {
            Ok(Some(chunk)) => buf.extend_from_slice(&chunk),
            _ => break,
        }
    }
    buf
}

fn status_error(status: StatusCode, body: &[u8]) -> String {
    let hint = if status.is_redirection() {
        " (redirects are not followed: point sink.webhook.url at the final URL)"
    } else {
        ""
    };
    let text = excerpt(body);
    if text.is_empty() {
        format!("webhook: HTTP {status}{hint}, empty body")
    } else {
        format!("webhook: HTTP {status}{hint}: {text}")
    }
}

/// At most `EXCERPT_CHARS` characters on one line, so `last_error` stays readable in a table.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let flat: String = text.trim().chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if flat.chars().count() <= EXCERPT_CHARS {
        return flat;
    }
    let mut cut: String = flat.chars().take(EXCERPT_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// Names the failure first ("timed out", "connection refused", …), then reqwest's chain of
/// causes. The URL is stripped: webhook URLs often embed a token.
fn transport_error(e: reqwest::Error, timeout: Duration, https: bool) -> String {
    let e = e.without_url();
    let mut source = e.source();
    while let Some(s) = source {
        if let Some(refused) = s.downcast_ref::<targets::Refused>() {
            return format!("webhook: {refused}");
        }
        source = s.source();
    }
    let io_kind = io_kind(&e);
    let what = if e.is_timeout() || io_kind == Some(io::ErrorKind::TimedOut) {
        format!("timed out after {}", humantime::format_duration(timeout))
    } else {
        match io_kind {
            Some(io::ErrorKind::ConnectionRefused) => "connection refused".into(),
            Some(io::ErrorKind::ConnectionReset) => "connection reset".into(),
            Some(io::ErrorKind::ConnectionAborted) => "connection aborted".into(),
            _ if e.is_dns() => "host name not resolved".into(),
            // Past DNS and TCP, what fails while connecting to an https URL is the handshake;
            // rustls errors come as themselves or wrapped in InvalidData.
            None | Some(io::ErrorKind::InvalidData | io::ErrorKind::Other) if e.is_connect() && https => {
                "TLS failure".into()
            }
            _ if e.is_connect() => "cannot connect".into(),
            _ => "request failed".into(),
        }
    };
    let mut chain = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        chain.push_str(": ");
        chain.push_str(&s.to_string());
        source = s.source();
    }
    format!("webhook: {what} ({chain})")
}

/// The most specific I/O error kind among the causes. Layers re-wrap I/O errors as `Other`, and
/// an `io::Error`'s `source()` skips the error it wraps, so look inside with `get_ref`.
fn io_kind(e: &reqwest::Error) -> Option<io::ErrorKind> {
    let mut found = None;
    let mut source = e.source();
    while let Some(s) = source {
        let mut io = s.downcast_ref::<io::Error>();
        while let Some(err) = io {
            if found.is_none() || err.kind() != io::ErrorKind::Other {
                found = Some(err.kind());
            }
            io = err.get_ref().and_then(|inner| inner.downcast_ref::<io::Error>());
        }
        source = s.source();
    }
    found
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tokio::{io::AsyncWriteExt, net::TcpListener};

    use super::*;

    fn spec(url: &str) -> WebhookSinkSpec {
        WebhookSinkSpec { url: url.into(), batch: false, timeout: None, secret: None, headers: BTreeMap::new() }
    }

    #[test]
    fn excerpts_are_short_and_on_one_line() {
        assert_eq!(excerpt(b"  down\nfor maintenance \r\n"), "down for maintenance");
        let long = excerpt("é".repeat(500).as_bytes());
        assert_eq!(long.chars().count(), EXCERPT_CHARS);
        assert!(long.ends_with('…'));
        assert_eq!(
            status_error(StatusCode::SERVICE_UNAVAILABLE, b"busy"),
            "webhook: HTTP 503 Service Unavailable: busy"
        );
        assert!(status_error(StatusCode::FOUND, b"").contains("redirects are not followed"));
    }

    #[test]
    fn reserved_and_invalid_headers_are_refused() {
        let mut s = spec("http://127.0.0.1:9/hook");
        s.headers.insert("Webhook-Signature".into(), "v1,forged".into());
        assert!(checked(&s).unwrap_err().to_string().contains("set by the webhook sink itself"));
        let mut s = spec("http://127.0.0.1:9/hook");
        s.headers.insert("authorization".into(), "Bearer abc\ndef".into());
        let e = checked(&s).unwrap_err().to_string();
        assert!(e.contains("not a valid header value") && !e.contains("abc"), "{e}");
        let mut s = spec("http://127.0.0.1:9/hook");
        s.timeout = Some("0s".into());
        assert!(checked(&s).is_err());
        assert!(checked(&spec("http:// nope")).is_err());
        assert!(checked(&spec("http://127.0.0.1:9/hook")).is_ok());
    }

    /// A server that answers a TLS ClientHello with plain HTTP: the handshake fails.
    #[tokio::test]
    async fn a_tls_failure_is_named() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let _ = sock.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").await;
            }
        });
        let sink = WebhookSink::new(&spec(&format!("https://127.0.0.1:{port}/hook")), &Arc::default()).unwrap();
        let (err, _) = sink.post("c:1", b"{}".to_vec(), None).await.unwrap_err();
        assert!(err.starts_with("webhook: TLS failure"), "{err}");
        assert!(!err.contains("127.0.0.1"), "the URL is not repeated: {err}");
    }
}
