"""Fixtures over real processes: psycopg and SQLAlchemy connections to test.sh's database, and
one dispatcher of the group `default` (it runs order-projection) for the whole session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import Engine

from harness import DATABASE_URL, SQLALCHEMY_URL, Dispatcher, dispatcher


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    eng = create_engine(SQLALCHEMY_URL, pool_size=2)
    yield eng
    eng.dispose()


@pytest.fixture()
def check() -> Iterator[psycopg.Connection[Any]]:
    """A connection of its own (autocommit) that reads what was committed."""
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        yield conn


@pytest.fixture(scope="session")
def default_dispatcher() -> Iterator[Dispatcher]:
    with dispatcher("default") as d:
        yield d


def events_of(conn: psycopg.Connection[Any], stream_id: str) -> list[dict[str, Any]]:
    cur = conn.execute(
        "SELECT id, tx_id::text::bigint AS tx_id, stream_type, stream_version, event_type, "
        "tenant_id, payload, metadata FROM highwater.events WHERE stream_id = %s ORDER BY id",
        (stream_id,),
    )
    names = [c.name for c in cur.description or []]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def app_row(conn: psycopg.Connection[Any], order_id: str) -> tuple[Any, ...] | None:
    return conn.execute(
        "SELECT total::int, writer FROM app_orders WHERE id = %s", (order_id,)
    ).fetchone()
