"""An application's first use of the installed highwater-client (wheel or sdist, in a venv of
its own): import it by name, check the typing marker shipped, append through psycopg and through
SQLAlchemy, read the events back. Run by test.sh with DATABASE_URL set, outside the source tree."""

import os
import pathlib
import uuid

import psycopg
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

import highwater_client as hw
from highwater_client import aio  # noqa: F401  (the async module imports without extra packages)

here = pathlib.Path(hw.__file__).parent
assert "site-packages" in str(here), f"imported from {here}, not from the installed package"
assert (here / "py.typed").is_file(), "py.typed is missing from the installed package"
for name in ("append", "append_position", "token", "wait_applied", "wait_applied_http"):
    assert callable(getattr(hw, name)), name
for name in ("HighwaterError", "UnknownEventType", "InvalidPayload", "VersionConflict", "UnknownConsumer"):
    assert issubclass(getattr(hw, name), Exception), name

url = os.environ["DATABASE_URL"]
stream_id = f"s-{uuid.uuid4().hex[:8]}"
with psycopg.connect(url) as conn, conn.transaction():
    first = hw.append(conn, hw.NewEvent("smoke", stream_id, "Pinged", {"from": "psycopg"}))
engine = create_engine(url.replace("postgres://", "postgresql+psycopg://", 1))
with Session(engine) as session, session.begin():
    pos = hw.append_position(session, hw.NewEvent("smoke", stream_id, "Pinged", {"from": "sqlalchemy"}))
try:
    with Session(engine) as session, session.begin():
        hw.append(session, hw.NewEvent("smoke", stream_id, "Nope", {}))
    raise AssertionError("an unknown event type was accepted")
except hw.UnknownEventType:
    pass
engine.dispose()
with psycopg.connect(url) as conn:
    rows = conn.execute(
        "SELECT id, payload FROM highwater.events WHERE stream_id = %s ORDER BY id", (stream_id,)
    ).fetchall()
assert rows == [(first, {"from": "psycopg"}), (pos.id, {"from": "sqlalchemy"})], rows
print(f"package smoke: ok (events {first} and {pos.id}, token {pos.token})")
