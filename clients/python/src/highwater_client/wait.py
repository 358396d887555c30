"""Read-your-writes over SQL: ``highwater.applied(consumer, token, instance)`` until it is true or
the timeout runs out. With a connection of its own (a URL) or an autocommit psycopg connection,
the wait LISTENs on ``highwater_applied`` (the trigger notify_applied sends the consumer's name
whenever one of its cursors moves) and re-checks on each notification, polling as a safety net;
otherwise it polls with a backoff from 10 ms to 250 ms.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .errors import map_error
from .events import Token
from .executor import Params, kind_of, psycopg_sql, run

APPLIED = (
    "SELECT highwater.applied(CAST(:consumer AS text), CAST(CAST(:token AS text) AS xid8), "
    "CAST(:instance AS text))"
)
CHANNEL = "highwater_applied"
FIRST_DELAY = 0.010
MAX_DELAY = 0.250


@dataclass(frozen=True)
class WaitResult:
    applied: bool
    """True: the consumer applied everything the token covers. False: the timeout ran out."""
    pending: Any = None
    """On an HTTP timeout: the shards that held the wait, as the dispatcher reports them."""

    def __bool__(self) -> bool:
        return self.applied


def wait_params(consumer: str, token: Token, instance: str | None) -> Params:
    return {"consumer": consumer, "token": str(token), "instance": instance}


def next_delay(delay: float) -> float:
    return min(delay * 2, MAX_DELAY)


def _mapped(e: Exception, consumer: str) -> BaseException:
    return map_error(e, None, consumer)


def wait_applied(
    db: Any,
    consumer: str,
    token: Token,
    *,
    timeout: float = 5.0,
    instance: str | None = None,
) -> WaitResult:
    """Waits until `consumer` applied everything `token` covers (for a SQL sink: committed in its
    tables), or `timeout` seconds ran out.

    `db` must see committed data: a connection URL / conninfo string (best: a psycopg connection
    of its own that LISTENs), a psycopg Connection not inside a transaction (LISTENs when it is
    in autocommit mode), or a SQLAlchemy Engine or Connection not inside a transaction (polled).
    `instance` only for PerInstance consumers (leave it out to wait for all instances).
    Raises UnknownConsumer (HW010) and HighwaterError (HW011 token ahead of the database, HW012
    bad argument); returns ``WaitResult(applied=False)`` on timeout.
    """
    deadline = time.monotonic() + timeout
    values = wait_params(consumer, token, instance)
    with _checker(db, consumer, values) as (check, pause):
        delay = FIRST_DELAY
        while True:
            try:
                applied = check()
            except Exception as e:
                mapped = _mapped(e, consumer)
                if mapped is e:
                    raise
                raise mapped from e
            if applied:
                return WaitResult(True)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return WaitResult(False)
            pause(min(delay, remaining))
            delay = next_delay(delay)


Check = Callable[[], bool]
Pause = Callable[[float], None]


@contextmanager
def _checker(db: Any, consumer: str, values: Params) -> Iterator[tuple[Check, Pause]]:
    """The check and the pause between checks for `db`; releases what it took at exit."""
    if isinstance(db, str):
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            with _listening(conn, consumer, values) as pair:
                yield pair
        return
    kind = kind_of(db)
    if kind == "psycopg":
        if not hasattr(db, "notifies"):
            raise TypeError("highwater_client: wait_applied takes a psycopg Connection, not a cursor")
        _require_idle_psycopg(db)
        if db.autocommit:
            with _listening(db, consumer, values) as pair:
                yield pair
        else:
            # Each check in a transaction of its own, so the connection is left idle as found.
            def check_in_tx() -> bool:
                with db.transaction():
                    return bool(db.execute(psycopg_sql(APPLIED), values).fetchone()[0])

            yield check_in_tx, time.sleep
        return
    if kind == "sqlalchemy-engine":
        with db.connect() as conn:
            yield _sqlalchemy_check(conn, values), time.sleep
        return
    if kind == "sqlalchemy" and hasattr(db, "in_transaction") and hasattr(db, "begin"):
        if db.in_transaction():
            raise ValueError(
                "highwater_client: wait_applied needs a connection outside a transaction "
                "(a transaction's snapshot may never see the consumer's progress)"
            )
        yield _sqlalchemy_check(db, values), time.sleep
        return
    raise TypeError(
        "highwater_client: wait_applied takes a URL, a psycopg Connection, or a SQLAlchemy "
        f"Engine or Connection, got {type(db).__name__}"
    )


def _require_idle_psycopg(conn: Any) -> None:
    from psycopg.pq import TransactionStatus

    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise ValueError(
            "highwater_client: wait_applied needs a connection outside a transaction "
            "(commit the write first; a transaction's snapshot may never see the consumer's "
            "progress)"
        )


def _sqlalchemy_check(conn: Any, values: Params) -> Check:
    def check() -> bool:
        try:
            return bool(run(conn, APPLIED, values)[0])
        finally:
            # End the transaction SQLAlchemy began for the check: the next sees newer commits.
            conn.rollback()

    return check


@contextmanager
def _listening(conn: Any, consumer: str, values: Params) -> Iterator[tuple[Check, Pause]]:
    conn.execute(f"LISTEN {CHANNEL}")
    sql = psycopg_sql(APPLIED)

    def check() -> bool:
        return bool(conn.execute(sql, values).fetchone()[0])

    def pause(seconds: float) -> None:
        # Returns at the first notification for this consumer (other consumers' are skipped), or
        # after `seconds`: the poll that nets anything a notification would not tell.
        for n in conn.notifies(timeout=seconds):
            if n.channel == CHANNEL and n.payload == consumer:
                return

    try:
        yield check, pause
    finally:
        # A broken connection cannot UNLISTEN (and needs not): the original error goes on.
        if not conn.closed and not conn.broken:
            conn.execute(f"UNLISTEN {CHANNEL}")
