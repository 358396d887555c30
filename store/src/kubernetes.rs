//! The statements the operator needs: consumers declared by `EventConsumer` resources (their
//! `source` is `kubernetes:<namespace>/<name>`) and the per-pod shards it manages. The operator
//! writes no SQL of its own.
use highwater_crds::Delivery;
use sqlx::PgPool;

use crate::{Result, definitions::KUBERNETES_SOURCE};

/// The `source` of the definition that the resource `namespace/name` declares.
pub fn source(namespace: &str, name: &str) -> String {
    format!("{KUBERNETES_SOURCE}{namespace}/{name}")
}

/// The resource `(namespace, name)` a `source` names, if it is one of [`source`]'s.
pub fn parse_source(source: &str) -> Option<(&str, &str)> {
    source.strip_prefix(KUBERNETES_SOURCE)?.split_once('/')
}

/// Who declared consumer `name` (its `source`), if it exists.
pub async fn consumer_source(pool: &PgPool, name: &str) -> Result<Option<String>> {
    Ok(sqlx::query_scalar("SELECT source FROM highwater.consumers WHERE name = $1")
        .bind(name)
        .fetch_optional(pool)
        .await?)
}

/// A consumer declared by an `EventConsumer` resource.
#[derive(Clone, Debug, PartialEq)]
pub struct KubernetesConsumer {
    pub name: String,
    /// The namespace of the declaring resource.
    pub namespace: String,
    pub group: String,
    pub delivery: Delivery,
}

/// Every consumer declared by a resource, of `namespace` only if given.
pub async fn kubernetes_consumers(pool: &PgPool, namespace: Option<&str>) -> Result<Vec<KubernetesConsumer>> {
    let rows: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT name, source, consumer_group, delivery FROM highwater.consumers WHERE starts_with(source, $1)",
    )
    .bind(KUBERNETES_SOURCE)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(name, source, group, delivery)| {
            let (ns, _) = parse_source(&source)?;
            let delivery =
                if delivery == Delivery::PerInstance.as_str() { Delivery::PerInstance } else { Delivery::Shared };
            Some(KubernetesConsumer { namespace: ns.to_owned(), name, group, delivery })
        })
        .filter(|c| namespace.is_none_or(|ns| c.namespace == ns))
        .collect())
}

/// Deletes the shards of `consumer` that the operator registered for a pod (they carry its uid)
/// unless the pod is in `live` (`(name, uid)` pairs); never the shared cursor. Returns the
/// `(instance_id, pod_uid)` of the deleted shards.
pub async fn delete_pod_shards_except(
    pool: &PgPool,
    consumer: &str,
    live: &[(String, String)],
) -> Result<Vec<(String, String)>> {
    let (names, uids): (Vec<&str>, Vec<&str>) = live.iter().map(|(n, u)| (n.as_str(), u.as_str())).unzip();
    Ok(sqlx::query_as(
        "DELETE FROM highwater.consumer_shards
          WHERE consumer = $1 AND pod_uid IS NOT NULL AND NOT highwater.is_shared_shard(instance_id)
            AND NOT ((instance_id, pod_uid) IN (SELECT * FROM unnest($2::text[], $3::text[])))
         RETURNING instance_id, pod_uid",
    )
    .bind(consumer)
    .bind(names)
    .bind(uids)
    .fetch_all(pool)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_round_trip() {
        assert_eq!(source("shop", "orders"), "kubernetes:shop/orders");
        assert_eq!(parse_source("kubernetes:shop/orders"), Some(("shop", "orders")));
        assert_eq!(parse_source("file:orders.yaml"), None);
    }
}
