use std::fmt;

use sqlx::{
    Decode, Encode, Postgres, Type,
    encode::IsNull,
    error::BoxDynError,
    postgres::{PgArgumentBuffer, PgHasArrayType, PgTypeInfo, PgValueFormat, PgValueRef, types::Oid},
};

/// A PostgreSQL `xid8`: a 64-bit transaction id (epoch in the high 32 bits), decoded and bound
/// as a number. Positions never travel as text: text sorts `'9999'` after `'10000'`, and
/// `ORDER BY tx_id` next to an output column that casts `tx_id` to text sorts that text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Xid8(pub u64);

/// `xid8` and `xid8[]` are built-in types with fixed OIDs (since PostgreSQL 13).
const XID8_OID: Oid = Oid(5069);
const XID8_ARRAY_OID: Oid = Oid(271);

impl Type<Postgres> for Xid8 {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(XID8_OID)
    }
}

impl PgHasArrayType for Xid8 {
    fn array_type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(XID8_ARRAY_OID)
    }
}

/// The binary wire form of `xid8` (`xid8send`/`xid8recv`) is an unsigned 64-bit big-endian
/// integer.
impl Encode<'_, Postgres> for Xid8 {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        buf.extend(&self.0.to_be_bytes());
        Ok(IsNull::No)
    }
}

impl Decode<'_, Postgres> for Xid8 {
    fn decode(value: PgValueRef<'_>) -> Result<Self, BoxDynError> {
        Ok(Xid8(match value.format() {
            PgValueFormat::Binary => {
                let bytes: [u8; 8] = value.as_bytes()?.try_into().map_err(|_| "xid8 value is not 8 bytes")?;
                u64::from_be_bytes(bytes)
            }
            PgValueFormat::Text => value.as_str()?.parse()?,
        }))
    }
}

impl fmt::Display for Xid8 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// As a string: JSON numbers do not carry 64 bits exactly in every reader.
impl serde::Serialize for Xid8 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

/// A place in the event log: `(tx_id, id)`, the order in which readers below the snapshot fence
/// see events. `Position::ZERO` is before every event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub tx: u64,
    pub id: i64,
}

impl Position {
    pub const ZERO: Position = Position { tx: 0, id: 0 };

    pub fn new(tx: u64, id: i64) -> Self {
        Position { tx, id }
    }

    /// The transaction id, to bind as an `xid8` parameter.
    pub fn xid8(&self) -> Xid8 {
        Xid8(self.tx)
    }

    /// A transaction id typed by a user (a CLI argument, a token): digits only.
    pub fn parse_tx(text: &str) -> Result<u64, crate::Error> {
        text.parse().map_err(|_| crate::Error::config(format!("{text:?} is not a transaction id")))
    }
}

/// A `(xid8, bigint)` pair as a query returns it.
impl From<(Xid8, i64)> for Position {
    fn from((tx, id): (Xid8, i64)) -> Self {
        Position { tx: tx.0, id }
    }
}

/// `{"tx": "733", "id": 16}`: the transaction id as text, as `consumer status` prints `cursor_tx`
/// (an `xid8` may exceed what JSON numbers carry exactly).
impl serde::Serialize for Position {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Position", 2)?;
        st.serialize_field("tx", &self.xid8())?;
        st.serialize_field("id", &self.id)?;
        st.end()
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tx, self.id)
    }
}
