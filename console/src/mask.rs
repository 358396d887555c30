//! A consumer's spec as the browser may see it: every secret reference (a webhook's signing
//! secret, a broker's password or token), every extra header's value (an `Authorization` header
//! is a credential) and a URL's password or query replaced by [`MASK`]. Applied to the JSON of
//! the whole spec, so a field added later under one of those names is masked too.
use serde_json::Value;

pub(crate) const MASK: &str = "•••• (masked)";

/// Keys whose value is a credential or names where one is kept.
const SECRET_KEYS: [&str; 5] = ["secret", "password", "token", "credentials", "sasl"];

pub(crate) fn mask(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                let key = k.to_ascii_lowercase();
                if SECRET_KEYS.iter().any(|s| key.contains(s)) && !matches!(v, Value::Object(_) if key == "sasl") {
                    *v = Value::String(MASK.into());
                } else if key == "headers" {
                    if let Value::Object(h) = v {
                        h.values_mut().for_each(|x| *x = Value::String(MASK.into()));
                    }
                } else {
                    mask(v);
                }
            }
            // SASL keeps its mechanism and user name visible; its password is masked above.
        }
        Value::Array(a) => a.iter_mut().for_each(mask),
        Value::String(s) => {
            if let Some(m) = mask_url(s) {
                *s = m;
            }
        }
        _ => {}
    }
}

/// `https://user:pw@host/p?key=v` → `https://user:••••@host/p?••••`; `None` when nothing to hide.
fn mask_url(s: &str) -> Option<String> {
    let (scheme, rest) = s.split_once("://")?;
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let mut changed = false;
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => {
            changed = true;
            let user = user.split_once(':').map_or(user, |(u, _)| u);
            format!("{user}:••••@{host}")
        }
        None => authority.to_owned(),
    };
    let path = match path.split_once('?') {
        Some((p, _)) => {
            changed = true;
            format!("{p}?••••")
        }
        None => path.to_owned(),
    };
    changed.then(|| format!("{scheme}://{authority}{path}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn secrets_headers_and_url_credentials_are_masked() {
        let mut v = json!({
            "sink": {"webhook": {"url": "https://u:hunter2@hooks.example/x?sig=abc", "secret": {"env": "HOOK_SECRET"},
                                 "headers": {"Authorization": "Bearer t0ken"}}},
            "other": {"kafka": {"sasl": {"mechanism": "PLAIN", "username": "app", "password": {"file": "/s/pw"}}},
                      "nats": {"token": {"env": "NATS_TOKEN"}, "url": "nats://n:4222"}},
            "eventTypes": ["OrderPlaced"]
        });
        mask(&mut v);
        let text = v.to_string();
        for hidden in ["hunter2", "HOOK_SECRET", "t0ken", "/s/pw", "NATS_TOKEN", "sig=abc"] {
            assert!(!text.contains(hidden), "{hidden} shown: {text}");
        }
        for shown in
            ["hooks.example/x", "https://u:", "PLAIN", "\"app\"", "nats://n:4222", "OrderPlaced", "Authorization"]
        {
            assert!(text.contains(shown), "{shown} hidden: {text}");
        }
    }
}
