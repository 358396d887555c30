//! Reads a credential named by a `SecretRef` when a sink is built, so a missing secret stops the
//! consumer at once (logged, its events wait) instead of failing every delivery.
use highwater_crds::SecretRef;

use highwater_store::{Error, Result};

/// The secret's value with surrounding whitespace trimmed (files mounted from Kubernetes Secrets
/// often end with a newline). `field` names the definition's field in errors; the value is never
/// part of an error.
pub fn read(field: &str, secret: &SecretRef) -> Result<String> {
    let raw = match (&secret.env, &secret.file) {
        (Some(var), None) => std::env::var(var).map_err(|e| match e {
            std::env::VarError::NotPresent => {
                Error::config(format!("{field}: environment variable {var} is not set in the dispatcher's environment"))
                    .with_fix(format!("set it, or point {field}.file at a file holding the secret"))
            }
            std::env::VarError::NotUnicode(_) => {
                Error::config(format!("{field}: environment variable {var} is not valid UTF-8"))
            }
        })?,
        (None, Some(path)) => {
            std::fs::read_to_string(path).map_err(Error::io(format!("{field}: reading the secret file {path}")))?
        }
        _ => return Err(Error::config(format!("{field}: set exactly one of env, file"))),
    };
    let value = raw.trim();
    if value.is_empty() {
        return Err(Error::config(format!("{field}: the secret is empty")));
    }
    Ok(value.to_owned())
}
