"""highwater_client.aio with psycopg's AsyncConnection and SQLAlchemy's AsyncSession: the same
statements and errors as the synchronous API, and both waits against the real dispatcher."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from adapters import AppOrder
from conftest import app_row, events_of
from harness import AUTH_TOKEN, DATABASE_URL, SQLALCHEMY_URL, Dispatcher, uid
from highwater_client import InvalidPayload, NewEvent, UnknownEventType, VersionConflict, WaitResult, aio


def test_psycopg_async_connection(check: Any, default_dispatcher: Dispatcher) -> None:
    oid = uid("order")

    async def main() -> tuple[int, str]:
        async with await psycopg.AsyncConnection.connect(DATABASE_URL) as conn:
            async with conn.transaction():
                await conn.execute("INSERT INTO app_orders VALUES (%s, 10, 'aio')", (oid,))
                event_id = await aio.append(conn, NewEvent("order", oid, "OrderPlaced", {"order_id": oid, "total": 10}, expected_version=0))
                t = await aio.token(conn)
            with pytest.raises(VersionConflict):
                async with conn.transaction():
                    await aio.append(conn, NewEvent("order", oid, "Pinged", {}, expected_version=0))
            r = await aio.wait_applied(DATABASE_URL, "order-projection", t, timeout=10)
            assert r == WaitResult(True)
            assert await aio.wait_applied(conn, "stalled", t, timeout=0.2) == WaitResult(False)
        return event_id, t

    event_id, t = asyncio.run(main())
    assert [e["id"] for e in events_of(check, oid)] == [event_id]
    assert app_row(check, oid) == (10, "aio")


def test_sqlalchemy_async_session(check: Any, default_dispatcher: Dispatcher) -> None:
    oid, rolled_back = uid("order"), uid("order")

    async def main() -> None:
        engine = create_async_engine(SQLALCHEMY_URL)
        try:
            async with AsyncSession(engine) as session, session.begin():
                session.add(AppOrder(id=oid, total=10, writer="async-session"))
                await session.flush()
                pos = await aio.append_position(session, NewEvent("order", oid, "OrderPlaced", {"order_id": oid, "total": 10}))
            with pytest.raises(UnknownEventType):
                async with AsyncSession(engine) as session, session.begin():
                    session.add(AppOrder(id=rolled_back, total=10, writer="async-session"))
                    await session.flush()
                    await aio.append(session, NewEvent("order", rolled_back, "NoSuchType", {}))
            with pytest.raises(InvalidPayload) as err:
                async with engine.begin() as conn:
                    await aio.append(conn, NewEvent("order", oid, "OrderPlaced", {"order_id": oid, "total": "ten"}))
            assert err.value.path == "$.total"
            assert await aio.wait_applied(engine, "order-projection", pos.token, timeout=10)
            r = await aio.wait_applied_http(default_dispatcher.url, "order-projection", pos.token, auth_token=AUTH_TOKEN, timeout=10)
            assert r == WaitResult(True)
            r = await aio.wait_applied_http(default_dispatcher.url, "stalled", pos.token, auth_token=AUTH_TOKEN, timeout=0.2)
            assert not r.applied
        finally:
            await engine.dispose()

    asyncio.run(main())
    assert len(events_of(check, oid)) == 1
    assert events_of(check, rolled_back) == [] and app_row(check, rolled_back) is None
