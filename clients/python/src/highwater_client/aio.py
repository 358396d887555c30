"""The asyncio forms of the API, for psycopg's AsyncConnection / AsyncCursor and SQLAlchemy's
AsyncSession / AsyncConnection / AsyncEngine. Same statements, same errors, same results as the
synchronous functions (events.py, wait.py, wait_http.py): only the awaiting differs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from . import wait_http as _http
from .errors import AppendContext, map_error
from .events import APPEND, APPEND_POSITION, TOKEN, Appended, NewEvent, Token, appended, context, params
from .executor import AsyncExecutor, Params, Row, kind_of, psycopg_sql, run_async
from .wait import APPLIED, CHANNEL, FIRST_DELAY, WaitResult, next_delay, wait_params

__all__ = ["append", "append_position", "token", "wait_applied", "wait_applied_http"]


async def _run(tx: AsyncExecutor, sql: str, values: Params, ctx: AppendContext | None) -> Row:
    try:
        return await run_async(tx, sql, values)
    except Exception as e:
        mapped = map_error(e, ctx)
        if mapped is e:
            raise
        raise mapped from e


async def append(tx: AsyncExecutor, event: NewEvent) -> int:
    """highwater_client.append for an async connection or session."""
    return int((await _run(tx, APPEND, params(event), context(event)))[0])


async def append_position(tx: AsyncExecutor, event: NewEvent) -> Appended:
    """highwater_client.append_position for an async connection or session."""
    return appended(await _run(tx, APPEND_POSITION, params(event), context(event)))


async def token(tx: AsyncExecutor) -> Token:
    """highwater_client.token for an async connection or session."""
    return str((await _run(tx, TOKEN, {}, None))[0])


Check = Callable[[], Awaitable[bool]]
Pause = Callable[[float], Awaitable[None]]


async def wait_applied(
    db: Any,
    consumer: str,
    token: Token,
    *,
    timeout: float = 5.0,
    instance: str | None = None,
) -> WaitResult:
    """highwater_client.wait_applied with `db` a URL (LISTENs on a connection of its own), a
    psycopg AsyncConnection outside a transaction (LISTENs in autocommit mode), or a SQLAlchemy
    AsyncEngine or AsyncConnection outside a transaction (polled). Cancelling the task stops it."""
    deadline = time.monotonic() + timeout
    values = wait_params(consumer, token, instance)
    async with _checker(db, consumer, values) as (check, pause):
        delay = FIRST_DELAY
        while True:
            try:
                applied = await check()
            except Exception as e:
                mapped = map_error(e, None, consumer)
                if mapped is e:
                    raise
                raise mapped from e
            if applied:
                return WaitResult(True)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return WaitResult(False)
            await pause(min(delay, remaining))
            delay = next_delay(delay)


@asynccontextmanager
async def _checker(db: Any, consumer: str, values: Params) -> AsyncIterator[tuple[Check, Pause]]:
    if isinstance(db, str):
        import psycopg

        async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
            async with _listening(conn, consumer, values) as pair:
                yield pair
        return
    kind = kind_of(db)
    if kind == "psycopg" and hasattr(db, "notifies"):
        from .wait import _require_idle_psycopg

        _require_idle_psycopg(db)
        if db.autocommit:
            async with _listening(db, consumer, values) as pair:
                yield pair
        else:

            async def check_in_tx() -> bool:
                async with db.transaction():
                    cur = await db.execute(psycopg_sql(APPLIED), values)
                    return bool((await cur.fetchone())[0])

            yield check_in_tx, asyncio.sleep
        return
    if kind == "sqlalchemy-engine":
        async with db.connect() as conn:
            yield _sqlalchemy_check(conn, values), asyncio.sleep
        return
    if kind == "sqlalchemy" and hasattr(db, "in_transaction") and hasattr(db, "begin"):
        if db.in_transaction():
            raise ValueError("highwater_client: wait_applied needs a connection outside a transaction")
        yield _sqlalchemy_check(db, values), asyncio.sleep
        return
    raise TypeError(
        "highwater_client.aio: wait_applied takes a URL, a psycopg AsyncConnection, or a "
        f"SQLAlchemy AsyncEngine or AsyncConnection, got {type(db).__name__}"
    )


def _sqlalchemy_check(conn: Any, values: Params) -> Check:
    async def check() -> bool:
        try:
            return bool((await run_async(conn, APPLIED, values))[0])
        finally:
            await conn.rollback()  # the next check sees newer commits

    return check


@asynccontextmanager
async def _listening(conn: Any, consumer: str, values: Params) -> AsyncIterator[tuple[Check, Pause]]:
    await conn.execute(f"LISTEN {CHANNEL}")
    sql = psycopg_sql(APPLIED)

    async def check() -> bool:
        cur = await conn.execute(sql, values)
        return bool((await cur.fetchone())[0])

    async def pause(seconds: float) -> None:
        async for n in conn.notifies(timeout=seconds):
            if n.channel == CHANNEL and n.payload == consumer:
                return

    try:
        yield check, pause
    finally:
        if not conn.closed and not conn.broken:
            await conn.execute(f"UNLISTEN {CHANNEL}")


async def wait_applied_http(
    base_url: str,
    consumer: str,
    token: Token,
    *,
    auth_token: str,
    timeout: float = 5.0,
    instance: str | None = None,
) -> WaitResult:
    """highwater_client.wait_applied_http, run in a worker thread (urllib blocks)."""
    return await asyncio.to_thread(
        _http.wait_applied_http,
        base_url,
        consumer,
        token,
        auth_token=auth_token,
        timeout=timeout,
        instance=instance,
    )
