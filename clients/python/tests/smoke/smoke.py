"""An application's first use of the installed highwater-client (wheel, sdist, or the README's
`pip install` of a clean copy, each in a venv of its own): import it by name, check the typing
marker shipped, append through psycopg, through SQLAlchemy and through SQLAlchemy's AsyncSession
(the README's async route, which needs greenlet: the `sqlalchemy` extra brings it), read the
events back. Run by test.sh with DATABASE_URL set, outside the source tree."""

import asyncio
import importlib.util
import os
import pathlib
import uuid

import psycopg
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import highwater_client as hw
from highwater_client import aio

here = pathlib.Path(hw.__file__).parent
assert "site-packages" in str(here), f"imported from {here}, not from the installed package"
assert (here / "py.typed").is_file(), "py.typed is missing from the installed package"
for name in ("append", "append_position", "token", "wait_applied", "wait_applied_http"):
    assert callable(getattr(hw, name)), name
for name in ("HighwaterError", "UnknownEventType", "InvalidPayload", "VersionConflict", "UnknownConsumer"):
    assert issubclass(getattr(hw, name), Exception), name

# The [opentelemetry] extra is not installed here: the package works without it, adding no trace
# context.
assert importlib.util.find_spec("opentelemetry") is None, "opentelemetry is installed in the smoke venv"

url = os.environ["DATABASE_URL"]
stream_id = f"s-{uuid.uuid4().hex[:8]}"
with psycopg.connect(url) as conn, conn.transaction():
    first = hw.append(conn, hw.NewEvent("smoke", stream_id, "Pinged", {"from": "psycopg"}))
sqlalchemy_url = url.replace("postgres://", "postgresql+psycopg://", 1)
engine = create_engine(sqlalchemy_url)
with Session(engine) as session, session.begin():
    pos = hw.append_position(session, hw.NewEvent("smoke", stream_id, "Pinged", {"from": "sqlalchemy"}))
try:
    with Session(engine) as session, session.begin():
        hw.append(session, hw.NewEvent("smoke", stream_id, "Nope", {}))
    raise AssertionError("an unknown event type was accepted")
except hw.UnknownEventType:
    pass
engine.dispose()


async def append_with_async_session() -> hw.Appended:
    async_engine = create_async_engine(sqlalchemy_url)
    try:
        async with AsyncSession(async_engine) as session, session.begin():
            return await aio.append_position(session, hw.NewEvent("smoke", stream_id, "Pinged", {"from": "asyncio"}))
    finally:
        await async_engine.dispose()


apos = asyncio.run(append_with_async_session())
with psycopg.connect(url) as conn:
    rows = conn.execute(
        "SELECT id, payload, metadata ? 'traceparent' FROM highwater.events WHERE stream_id = %s ORDER BY id",
        (stream_id,),
    ).fetchall()
expected = [(first, {"from": "psycopg"}), (pos.id, {"from": "sqlalchemy"}), (apos.id, {"from": "asyncio"})]
assert rows == [(i, p, False) for i, p in expected], rows
print(f"package smoke: ok (events {first}, {pos.id} and {apos.id}, token {apos.token})")
