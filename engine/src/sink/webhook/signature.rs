//! Standard Webhooks signing (https://www.standardwebhooks.com/): the secret, where it comes from,
//! and the `webhook-signature` value.
use base64::{Engine, engine::general_purpose::STANDARD};
use highwater_crds::SecretRef;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use highwater_store::{Error, Result};

/// The HMAC-SHA256 key. No `Debug`, no `Display`: the value must never reach a log line or an
/// error message, so nothing can print it by accident.
pub struct SigningKey(Vec<u8>);

impl SigningKey {
    /// Reads the secret when the sink is built, so a missing secret stops the consumer at once
    /// (logged, its events wait) instead of failing every delivery.
    pub fn load(secret: &SecretRef) -> Result<Self> {
        let (origin, raw) = match (&secret.env, &secret.file) {
            (Some(var), None) => {
                let origin = format!("environment variable {var}");
                let value = std::env::var(var).map_err(|e| match e {
                    std::env::VarError::NotPresent => Error::config(format!(
                        "sink.webhook.secret: {origin} is not set in the dispatcher's environment"
                    ))
                    .with_fix("set it, or point secret.file at a file holding the secret"),
                    std::env::VarError::NotUnicode(_) => {
                        Error::config(format!("sink.webhook.secret: {origin} is not valid UTF-8"))
                    }
                })?;
                (origin, value.into_bytes())
            }
            (None, Some(path)) => {
                let value = std::fs::read(path)
                    .map_err(Error::io(format!("sink.webhook.secret: reading the secret file {path}")))?;
                (format!("file {path}"), value)
            }
            _ => return Err(Error::config("sink.webhook.secret: set exactly one of env, file")),
        };
        SigningKey::from_secret(&raw, &origin)
    }

    /// `whsec_` + base64 is the Standard Webhooks form (the key is the decoded bytes); anything
    /// else is used as raw bytes. Surrounding whitespace is dropped: secrets mounted from files
    /// or injected from Kubernetes Secrets often end with a newline the sender never meant.
    pub fn from_secret(secret: &[u8], origin: &str) -> Result<Self> {
        let secret = secret.trim_ascii();
        let key = match secret.strip_prefix(b"whsec_") {
            // The decode error is not shown: it quotes the offending byte of the secret.
            Some(b64) => STANDARD.decode(b64).map_err(|_| {
                Error::config(format!(
                    "sink.webhook.secret: the secret in {origin} starts with whsec_ but the rest is not valid \
                     base64"
                ))
                .with_fix(
                    "use the whsec_ secret exactly as issued, or a secret without the whsec_ prefix \
                     (its bytes are then the key)",
                )
            })?,
            None => secret.to_vec(),
        };
        if key.is_empty() {
            return Err(Error::config(format!("sink.webhook.secret: the secret in {origin} is empty")));
        }
        Ok(SigningKey(key))
    }

    /// `v1,` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")).
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_standard_webhooks_reference_vector() {
        let key = SigningKey::from_secret(b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "test").unwrap();
        assert_eq!(
            key.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, br#"{"test": 2432232314}"#),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn a_secret_without_prefix_is_its_raw_bytes_and_is_trimmed() {
        let a = SigningKey::from_secret(b"  plain-secret\n", "test").unwrap();
        let b = SigningKey::from_secret(format!("whsec_{}", STANDARD.encode("plain-secret")).as_bytes(), "t").unwrap();
        assert_eq!(a.sign("c:1", 1, b"{}"), b.sign("c:1", 1, b"{}"));
    }

    #[test]
    fn bad_secrets_are_refused_without_quoting_them() {
        let Err(e) = SigningKey::from_secret(b"whsec_not*base64!", "environment variable HOOK") else {
            panic!("accepted invalid base64");
        };
        let msg = e.to_string();
        assert!(msg.contains("environment variable HOOK") && msg.contains("not valid base64"), "{msg}");
        assert!(!msg.contains("not*base64"), "the secret leaked: {msg}");
        assert!(SigningKey::from_secret(b" \n", "file x").is_err());
    }

    #[test]
    fn a_missing_variable_is_named() {
        let r = SecretRef { env: Some("HIGHWATER_TEST_SURELY_UNSET_VAR".into()), file: None };
        let Err(e) = SigningKey::load(&r) else { panic!("loaded an unset variable") };
        assert!(e.to_string().contains("environment variable HIGHWATER_TEST_SURELY_UNSET_VAR is not set"), "{e}");
        let r = SecretRef { env: None, file: Some("/nonexistent/highwater/secret".into()) };
        let Err(e) = SigningKey::load(&r) else { panic!("loaded a missing file") };
        assert!(e.to_string().contains("/nonexistent/highwater/secret"), "{e}");
    }
}
