"""token + wait_applied over SQL (highwater.applied) and wait_applied_http against real
dispatchers delivering to a SQL sink: once the wait returns applied, the read model holds the
write; for a consumer no dispatcher runs, the wait times out."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import Engine

from harness import AUTH_TOKEN, DATABASE_URL, Dispatcher, dispatcher, uid
from highwater_client import (
    HighwaterError,
    NewEvent,
    UnknownConsumer,
    WaitResult,
    append,
    token,
    wait_applied,
    wait_applied_http,
)


def place_order(total: int) -> tuple[str, str]:
    """Commits one OrderPlaced for a new order; its id and the transaction's token."""
    oid = uid("order")
    with psycopg.connect(DATABASE_URL) as conn, conn.transaction():
        append(conn, NewEvent("order", oid, "OrderPlaced", {"order_id": oid, "total": total}))
        t = token(conn)
    return oid, t


def projected(table: str, oid: str) -> int | None:
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        row = conn.execute(f"SELECT total::int FROM {table} WHERE order_id = %s", (oid,)).fetchone()
    return None if row is None else int(row[0])


@contextmanager
def url(engine: Engine) -> Iterator[Any]:
    yield DATABASE_URL


@contextmanager
def autocommit_connection(engine: Engine) -> Iterator[Any]:
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        yield conn
        # The connection is given back as found: no channel left listening.
        assert conn.execute("SELECT count(*) FROM pg_listening_channels()").fetchone() == (0,)


@contextmanager
def connection(engine: Engine) -> Iterator[Any]:
    with psycopg.connect(DATABASE_URL) as conn:
        yield conn
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


@contextmanager
def sqlalchemy_engine(engine: Engine) -> Iterator[Any]:
    yield engine


@contextmanager
def sqlalchemy_connection(engine: Engine) -> Iterator[Any]:
    with engine.connect() as conn:
        yield conn
        assert not conn.in_transaction()


SOURCES: dict[str, Callable[[Engine], Any]] = {
    "URL (LISTEN)": url,
    "psycopg autocommit Connection (LISTEN)": autocommit_connection,
    "psycopg Connection (polled)": connection,
    "SQLAlchemy Engine (polled)": sqlalchemy_engine,
    "SQLAlchemy Connection (polled)": sqlalchemy_connection,
}
by_source = pytest.mark.parametrize("source", SOURCES.values(), ids=SOURCES.keys())


@by_source
def test_applied_once_the_projection_holds_the_write(
    source: Callable[[Engine], Any], engine: Engine, default_dispatcher: Dispatcher
) -> None:
    with source(engine) as db:
        # Several rounds: a wait that returned early would sooner or later find no row.
        for i in range(3):
            oid, t = place_order(100 + i)
            assert wait_applied(db, "order-projection", t, timeout=10) == WaitResult(True)
            assert projected("order_totals", oid) == 100 + i


@by_source
def test_times_out_for_a_consumer_no_dispatcher_runs(source: Callable[[Engine], Any], engine: Engine) -> None:
    _, t = place_order(1)
    with source(engine) as db:
        started = time.monotonic()
        r = wait_applied(db, "stalled", t, timeout=0.3)
        took = time.monotonic() - started
    assert r == WaitResult(False) and not r
    assert 0.3 <= took < 3, f"returned after {took:.3f} s"


def test_holds_until_a_dispatcher_started_later_applied_the_write() -> None:
    oid, t = place_order(7)
    result: list[WaitResult] = []
    waiter = threading.Thread(target=lambda: result.append(wait_applied(DATABASE_URL, "late-projection", t, timeout=30)))
    waiter.start()
    time.sleep(0.5)
    assert waiter.is_alive(), "no dispatcher runs the group `late` yet: the wait must hold"
    assert projected("late_totals", oid) is None
    with dispatcher("late"):
        waiter.join(30)
        assert result == [WaitResult(True)]
        assert projected("late_totals", oid) == 7


def test_an_unknown_consumer_is_unknown_consumer() -> None:
    _, t = place_order(1)
    with pytest.raises(UnknownConsumer) as err:
        wait_applied(DATABASE_URL, "no-such-consumer", t, timeout=1)
    assert (err.value.code, err.value.consumer) == ("HW010", "no-such-consumer")


def test_a_token_ahead_of_the_database_is_hw011(engine: Engine) -> None:
    with pytest.raises(HighwaterError) as err:
        wait_applied(engine, "order-projection", "999999999999", timeout=1)
    assert err.value.code == "HW011"
    assert "ahead of this database" in err.value.message


def test_a_connection_inside_a_transaction_is_refused() -> None:
    _, t = place_order(1)
    with psycopg.connect(DATABASE_URL) as conn:
        conn.execute("SELECT 1")  # psycopg began a transaction
        with pytest.raises(ValueError, match="outside a transaction"):
            wait_applied(conn, "order-projection", t)


class TestHttp:
    """GET /v1/consumers/NAME/applied on the dispatcher."""

    def test_200_applied_and_the_projection_holds_the_write(self, default_dispatcher: Dispatcher) -> None:
        for i in range(3):
            oid, t = place_order(200 + i)
            r = wait_applied_http(default_dispatcher.url, "order-projection", t, auth_token=AUTH_TOKEN, timeout=10)
            assert r == WaitResult(True)
            assert projected("order_totals", oid) == 200 + i

    def test_408_not_applied_within_the_timeout_names_the_pending_shards(self, default_dispatcher: Dispatcher) -> None:
        _, t = place_order(1)
        started = time.monotonic()
        r = wait_applied_http(default_dispatcher.url, "stalled", t, auth_token=AUTH_TOKEN, timeout=0.3)
        assert not r.applied
        # The dispatcher names the shard holding the wait, e.g. "__shared__: idle at 0/0".
        assert "__shared__" in str(r.pending)
        assert time.monotonic() - started >= 0.3

    def test_401_a_wrong_bearer_token(self, default_dispatcher: Dispatcher) -> None:
        _, t = place_order(1)
        with pytest.raises(HighwaterError, match="bearer token") as err:
            wait_applied_http(default_dispatcher.url, "order-projection", t, auth_token="wrong")
        assert err.value.status == 401

    def test_404_an_unknown_consumer(self, default_dispatcher: Dispatcher) -> None:
        _, t = place_order(1)
        with pytest.raises(UnknownConsumer) as err:
            wait_applied_http(default_dispatcher.url, "no-such-consumer", t, auth_token=AUTH_TOKEN)
        assert (err.value.status, err.value.consumer) == (404, "no-such-consumer")

    def test_400_a_malformed_token(self, default_dispatcher: Dispatcher) -> None:
        with pytest.raises(HighwaterError, match="not a highwater token") as err:
            wait_applied_http(default_dispatcher.url, "order-projection", "abc", auth_token=AUTH_TOKEN)
        assert err.value.status == 400
