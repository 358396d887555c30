use std::fmt;

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

    /// `xid8` travels as text: sqlx has no `xid8` codec, and text keeps all 64 bits.
    pub fn tx_text(&self) -> String {
        self.tx.to_string()
    }

    pub fn parse_tx(text: &str) -> Result<u64, crate::Error> {
        text.parse().map_err(|_| crate::Error::Config(format!("{text:?} is not a transaction id")))
    }
}

/// `{"tx": "733", "id": 16}`: the transaction id as text, as `consumer status` prints `cursor_tx`
/// (an `xid8` may exceed what JSON numbers carry exactly).
impl serde::Serialize for Position {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Position", 2)?;
        st.serialize_field("tx", &self.tx_text())?;
        st.serialize_field("id", &self.id)?;
        st.end()
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tx, self.id)
    }
}
