//! The dispatcher's instance id: `--instance-id`, then `HIGHWATER_INSTANCE_ID` (the pod name
//! through the downward API), then a random UUID.
use highwater_crds::{SHARED_INSTANCE, is_shared_instance};

use highwater_store::{Error, Result};

pub fn resolve(given: Option<&str>) -> Result<String> {
    match given {
        Some(id) => validate(id).map(|_| id.to_owned()),
        None => Ok(uuid::Uuid::new_v4().to_string()),
    }
}

pub fn validate(id: &str) -> Result<()> {
    if is_shared_instance(id) {
        return Err(Error::config(format!(
            "instance id {id:?} is reserved: {SHARED_INSTANCE:?} and {SHARED_INSTANCE:?}/... name the cursors of \
             shared consumers and their partitions"
        ))
        .with_fix(
            "pass another --instance-id / HIGHWATER_INSTANCE_ID (the pod name on Kubernetes), or \
             leave both unset for a random one",
        ));
    }
    if id.is_empty() || id.len() > 253 || id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::config(format!(
            "instance id {id:?} is invalid: use 1-253 printable characters without spaces"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_is_refused_with_the_fix() {
        let e = resolve(Some("__shared__")).unwrap_err().to_string();
        assert!(e.contains("reserved") && e.contains("--instance-id"), "{e}");
    }

    #[test]
    fn absent_gives_a_uuid() {
        assert_eq!(resolve(None).unwrap().len(), 36);
    }

    #[test]
    fn spaces_are_refused() {
        assert!(resolve(Some("a b")).is_err());
        assert_eq!(resolve(Some("dispatcher-7f9c-x2")).unwrap(), "dispatcher-7f9c-x2");
    }
}
