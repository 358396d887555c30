"""Refusals that are not the schema's or the version's: other HW002 cases map to InvalidPayload
without a path, and errors that are not highwater's are raised exactly as the driver raised them."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import sqlalchemy.exc
from psycopg.rows import dict_row
from sqlalchemy import text
from sqlalchemy.engine import Engine

from conftest import events_of
from harness import DATABASE_URL, uid
from highwater_client import HighwaterError, InvalidPayload, NewEvent, append, append_position, token


def test_permission_denied_is_the_drivers_error_psycopg() -> None:
    with psycopg.connect(DATABASE_URL) as conn:
        conn.execute("SET LOCAL ROLE no_grants")  # no EXECUTE on highwater.append
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as err:
            append(conn, NewEvent("order", uid("o"), "Pinged", {}))
        assert not isinstance(err.value, HighwaterError)
        assert err.value.sqlstate == "42501"
        conn.rollback()


def test_permission_denied_is_the_drivers_error_sqlalchemy(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.execute(text("SET LOCAL ROLE no_grants"))
        with pytest.raises(sqlalchemy.exc.ProgrammingError) as err:
            append(conn, NewEvent("order", uid("o"), "Pinged", {}))
        assert getattr(err.value.orig, "sqlstate", None) == "42501"


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (NewEvent("order", "", "Pinged", {}), "stream type and stream id must not be empty"),
        (NewEvent("order", "x", "Pinged", None), 'payload of event type "Pinged" is NULL'),
    ],
    ids=["empty stream id", "NULL payload"],
)
def test_other_invalid_events_are_invalid_payload_without_a_path(event: NewEvent, message: str) -> None:
    with psycopg.connect(DATABASE_URL) as conn:
        with pytest.raises(InvalidPayload) as err:
            append(conn, event)
        assert (err.value.code, err.value.path, err.value.reason, err.value.message) == ("HW002", None, None, message)
        conn.rollback()


def test_a_savepoint_recovers_the_transaction(check: Any) -> None:
    # The refusal aborts only the savepoint: the outer transaction goes on and commits.
    oid = uid("order")
    with psycopg.connect(DATABASE_URL) as conn, conn.transaction():
        with pytest.raises(InvalidPayload):
            with conn.transaction():
                append(conn, NewEvent("order", oid, "OrderPlaced", {"order_id": oid, "total": -1}))
        append(conn, NewEvent("order", oid, "Pinged", {}))
    assert [e["event_type"] for e in events_of(check, oid)] == ["Pinged"]


def test_any_row_factory_and_an_engine(engine: Engine, check: Any) -> None:
    oid = uid("order")
    with psycopg.connect(DATABASE_URL, row_factory=dict_row) as conn:
        pos = append_position(conn, NewEvent("order", oid, "Pinged", {"via": "dict_row"}))
        assert token(conn) == pos.token
    # An Engine: the append runs in a transaction of its own, committed at once.
    event_id = append(engine, NewEvent("order", oid, "Pinged", {"via": "engine"}))
    assert [e["id"] for e in events_of(check, oid)] == [pos.id, event_id]
