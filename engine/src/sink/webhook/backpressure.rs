//! What a receiver asks for with its status code (docs/sinks.md, "Backpressure"): `429 Too Many
//! Requests` and `503 Service Unavailable` with `Retry-After` pause the consumer for the time
//! asked; `410 Gone` disables it (the Standard Webhooks spec's recommendations).
use std::time::{Duration, SystemTime};

use reqwest::{
    StatusCode,
    header::{HeaderMap, RETRY_AFTER},
};

use crate::sink::Backpressure;

/// The receiver's request, if any. A `429`/`503` without a `Retry-After` that parses (integer
/// seconds, or an HTTP date) asks for nothing: an ordinary failed attempt, retried with backoff.
/// A date in the past asks for no pause, as does `Retry-After: 0`: also an ordinary attempt.
pub fn asked(status: StatusCode, headers: &HeaderMap, now: SystemTime) -> Option<Backpressure> {
    if status == StatusCode::GONE {
        return Some(Backpressure::Gone);
    }
    if status != StatusCode::TOO_MANY_REQUESTS && status != StatusCode::SERVICE_UNAVAILABLE {
        return None;
    }
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let pause = match value.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => httpdate::parse_http_date(value).ok()?.duration_since(now).ok()?,
    };
    (!pause.is_zero()).then_some(Backpressure::Pause(pause))
}

/// The recorded error, with what the receiver asked for.
pub fn describe(error: String, asked: Option<Backpressure>) -> String {
    match asked {
        None => error,
        Some(Backpressure::Pause(d)) => format!(
            "{error} (the receiver asked to pause for {}: Retry-After)",
            humantime::format_duration(Duration::from_secs(d.as_secs().max(1)))
        ),
        Some(Backpressure::Gone) => format!(
            "{error} (410 Gone: the receiver says the endpoint is gone for good; the consumer is disabled: \
             fix sink.webhook.url, then `highwater consumer enable`)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(retry_after: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, retry_after.parse().unwrap());
        h
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let now = httpdate::parse_http_date("Sun, 06 Dec 2026 10:00:00 GMT").unwrap();
        let pause = |s, v| asked(s, &headers(v), now);
        assert_eq!(pause(StatusCode::TOO_MANY_REQUESTS, "3"), Some(Backpressure::Pause(Duration::from_secs(3))));
        assert_eq!(
            pause(StatusCode::SERVICE_UNAVAILABLE, "Sun, 06 Dec 2026 10:01:30 GMT"),
            Some(Backpressure::Pause(Duration::from_secs(90)))
        );
        // In the past, zero, or not a value: nothing asked, an ordinary failed attempt.
        assert_eq!(pause(StatusCode::TOO_MANY_REQUESTS, "Sun, 06 Dec 2026 09:00:00 GMT"), None);
        assert_eq!(pause(StatusCode::TOO_MANY_REQUESTS, "0"), None);
        assert_eq!(pause(StatusCode::TOO_MANY_REQUESTS, "soon"), None);
        assert_eq!(asked(StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new(), now), None);
        // Only 429 and 503 pause.
        assert_eq!(pause(StatusCode::INTERNAL_SERVER_ERROR, "3"), None);
        assert_eq!(asked(StatusCode::GONE, &HeaderMap::new(), now), Some(Backpressure::Gone));
    }
}
