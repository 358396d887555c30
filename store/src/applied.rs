//! Read-your-writes in the store: the position token of a writing transaction, appending with
//! the event's position, and whether a consumer has applied everything up to a token
//! (`migrations/20261201000010_read_your_writes.sql`, docs/read-your-writes.md).
use std::{fmt, str::FromStr};

use highwater_crds::Delivery;
use sqlx::{PgConnection, PgPool, postgres::PgDatabaseError};

use super::events::append_query;
use crate::{Error, NewEvent, Position, Result, Xid8};

/// A read-your-writes token: a transaction id (`xid8`) covering every event whose `tx_id` is at
/// most this one. Written and parsed as its decimal digits (e.g. `7421`), short enough for an
/// HTTP header or a query parameter, and the same text SQL gets from `highwater.token()::text`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(pub Xid8);

impl Token {
    pub fn xid8(self) -> Xid8 {
        self.0
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for Token {
    type Err = Error;
    /// Digits only, 1 to 20 of them, at most `u64::MAX`, not 0 (no transaction has id 0).
    fn from_str(text: &str) -> Result<Token> {
        let t = text.trim();
        let ok = !t.is_empty() && t.len() <= 20 && t.bytes().all(|b| b.is_ascii_digit());
        match t.parse::<u64>() {
            Ok(v) if ok && v > 0 => Ok(Token(Xid8(v))),
            _ => Err(Error::config(format!("{text:?} is not a highwater token (a transaction id in decimal digits)"))
                .with_fix(
                    "pass the token your write returned: highwater.token() or the token column of \
                     highwater.append_position() in SQL, events::token / events::append_position in Rust",
                )),
        }
    }
}

impl serde::Serialize for Token {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What [`append_position`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Appended {
    /// The event's place in delivery order; `position.id` is the event id.
    pub position: Position,
    /// The transaction's token so far: covers this event and every earlier one of the
    /// transaction. Take [`token`] again after later appends, or keep the last one returned.
    pub token: Token,
}

/// [`crate::append`] that also returns the event's position and the transaction's token (through
/// `highwater.append_position`, the same checks as `highwater.append`).
pub async fn append_position(conn: &mut PgConnection, event: &NewEvent) -> Result<Appended> {
    let (id, tx, token): (i64, Xid8, Xid8) =
        append_query("SELECT id, tx_id, token FROM highwater.append_position($1, $2, $3, $4, $5, $6, $7)", event)
            .fetch_one(conn)
            .await
            .map_err(Error::from_append)?;
    Ok(Appended { position: Position::from((tx, id)), token: Token(token) })
}

/// The token of the transaction open on `conn`: covers every event it appended so far (raised
/// stream-order `tx_id`s included). Without an append in it, covers every transaction committed
/// before the call. Assigns no transaction id.
pub async fn token(conn: &mut PgConnection) -> Result<Token> {
    Ok(Token(sqlx::query_scalar("SELECT highwater.token()").fetch_one(conn).await?))
}

/// Maps the SQLSTATEs of `highwater.applied` to refusals with their fix.
fn from_applied(e: sqlx::Error) -> Error {
    if let Some(pg) = e.as_database_error().and_then(|d| d.try_downcast_ref::<PgDatabaseError>())
        && matches!(pg.code(), "HW010" | "HW011" | "HW012")
    {
        let r = Error::refused(pg.message().to_owned());
        return match pg.hint() {
            Some(h) => r.with_fix(h.to_owned()),
            None => r,
        };
    }
    Error::Database(e)
}

/// `highwater.applied(consumer, token, instance)`: has `consumer` applied every event it selects
/// of the transactions `token` covers, on the shared shard or (PerInstance) on `instance`, or on
/// every instance when `None`? One statement; refuses an unknown consumer, a token ahead of the
/// database, an instance given for a Shared consumer.
pub async fn applied<'c, E>(executor: E, consumer: &str, token: Token, instance: Option<&str>) -> Result<bool>
where
    E: sqlx::PgExecutor<'c>,
{
    sqlx::query_scalar("SELECT highwater.applied($1, $2, $3)")
        .bind(consumer)
        .bind(token.xid8())
        .bind(instance)
        .fetch_one(executor)
        .await
        .map_err(from_applied)
}

/// One consumer's (and instance selector's) applied bound, as [`bounds`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound {
    pub consumer: String,
    pub instance: Option<String>,
    /// Tokens below it are applied; `None`: no such consumer.
    pub below: Option<Xid8>,
    /// Whether the consumer is Shared (an instance given for it is refused).
    pub shared: bool,
}

/// `(consumer, instance, bound, next transaction id, shared)` as [`bounds`] reads them.
type BoundRow = (String, Option<String>, Option<Xid8>, Xid8, bool);

/// The applied bounds of many `(consumer, instance)` keys in one statement and one snapshot, with
/// the database's next transaction id: what a waiter hub runs once per wake-up, whatever the
/// number of waiters.
pub async fn bounds(pool: &PgPool, keys: &[(String, Option<String>)]) -> Result<(Vec<Bound>, Xid8)> {
    let (consumers, instances): (Vec<&str>, Vec<Option<&str>>) =
        keys.iter().map(|(c, i)| (c.as_str(), i.as_deref())).unzip();
    let rows: Vec<BoundRow> = sqlx::query_as(
        "SELECT k.consumer, k.instance, highwater.applied_bound(k.consumer, k.instance),
                pg_snapshot_xmax(pg_current_snapshot()), coalesce(c.delivery = $3, false)
           FROM unnest($1::text[], $2::text[]) AS k(consumer, instance)
           LEFT JOIN highwater.consumers c ON c.name = k.consumer",
    )
    .bind(consumers)
    .bind(instances)
    .bind(Delivery::Shared)
    .fetch_all(pool)
    .await?;
    let next = rows.first().map_or(Xid8(0), |r| r.3);
    let bounds =
        rows.into_iter().map(|(consumer, instance, below, _, shared)| Bound { consumer, instance, below, shared });
    Ok((bounds.collect(), next))
}

/// Why a consumer has not applied a token yet, for the timeout message: each shard that matters
/// with its status and cursor, or that it has none.
pub async fn explain_pending(pool: &PgPool, consumer: &str, instance: Option<&str>) -> Result<String> {
    let rows: Vec<(String, String, Xid8, i64, Option<String>)> = sqlx::query_as(
        "SELECT s.instance_id, s.status, s.cursor_tx, s.cursor_id, s.last_error
           FROM highwater.consumer_shards s JOIN highwater.consumers c ON c.name = s.consumer
          WHERE s.consumer = $1
            AND CASE WHEN c.delivery = $3 THEN highwater.is_shared_shard(s.instance_id)
                     ELSE $2::text IS NULL OR s.instance_id = $2 END
          ORDER BY s.instance_id",
    )
    .bind(consumer)
    .bind(instance)
    .bind(Delivery::Shared)
    .fetch_all(pool)
    .await?;
    if rows.is_empty() {
        return Ok(match instance {
            Some(i) => format!("consumer {consumer} has no shard for instance {i} (not started there yet)"),
            None => format!("consumer {consumer} has no shard yet: no dispatcher of its group has started"),
        });
    }
    let parts: Vec<String> = rows
        .into_iter()
        .map(|(i, status, tx, id, err)| {
            let err = err.map(|e| format!(", last error: {e}")).unwrap_or_default();
            format!("{i}: {status} at {}{err}", Position::from((tx, id)))
        })
        .collect();
    Ok(parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_decimal_transaction_ids() {
        assert_eq!("7421".parse::<Token>().unwrap(), Token(Xid8(7421)));
        assert_eq!(" 18446744073709551615 ".parse::<Token>().unwrap(), Token(Xid8(u64::MAX)));
        assert_eq!(Token(Xid8(7421)).to_string(), "7421");
        for bad in ["", "0", "-1", "12a", "1e3", "0x10", "18446744073709551616", "12/34", "+5"] {
            let e = bad.parse::<Token>().unwrap_err().to_string();
            assert!(e.contains("is not a highwater token") && e.contains("fix:"), "{bad}: {e}");
        }
    }
}
