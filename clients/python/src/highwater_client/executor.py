"""Runs one statement on whatever the application holds: a psycopg 3 connection or cursor, or a
SQLAlchemy 2.x session or connection (sync or async). Nothing is added around it (no BEGIN, no
savepoint, no commit): the statement runs inside the caller's transaction, as written.

The drivers are recognised by the module their classes come from, so that neither psycopg nor
SQLAlchemy is imported by this package unless the application already uses it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal, Union

if TYPE_CHECKING:
    # Only for type checkers: at run time neither driver is imported here.
    import psycopg
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
    from sqlalchemy.orm import Session, scoped_session

    Executor = Union[
        psycopg.Connection[Any], psycopg.Cursor[Any], Session, scoped_session[Any], Connection, Engine
    ]
    AsyncExecutor = Union[
        psycopg.AsyncConnection[Any], psycopg.AsyncCursor[Any], AsyncSession, AsyncConnection,
        AsyncEngine,
    ]
else:
    Executor = Any
    AsyncExecutor = Any

Kind = Literal["psycopg", "sqlalchemy", "sqlalchemy-engine"]

Params = dict[str, Any]
Row = tuple[Any, ...]

# Statements are written with SQLAlchemy's `:name` parameters; psycopg wants `%(name)s`. (The SQL
# uses CAST(... AS t), never `:name::t`, which SQLAlchemy's parser would misread.)
_NAMED = re.compile(r"(?<![:\w]):(\w+)")


def psycopg_sql(sql: str) -> str:
    return _NAMED.sub(r"%(\1)s", sql)


def kind_of(tx: object) -> Kind:
    """Which driver `tx` belongs to (subclasses of the drivers' classes included)."""
    for cls in type(tx).__mro__:
        root = cls.__module__.split(".", 1)[0]
        if root == "psycopg" and hasattr(tx, "execute"):
            return "psycopg"
        if root == "sqlalchemy":
            # Session, scoped_session, Connection and their async forms execute; an Engine
            # (sync or async) does not: it is used through a connection of its own.
            return "sqlalchemy" if hasattr(tx, "execute") else "sqlalchemy-engine"
    raise TypeError(
        "highwater_client: expected a psycopg Connection/Cursor (or AsyncConnection/AsyncCursor) "
        f"or a SQLAlchemy Session/Connection/Engine (or their async forms), got {type(tx).__name__}"
    )


def _text(sql: str) -> Any:
    from sqlalchemy import text

    return text(sql)


def _as_tuple(row: Any) -> Row:
    # The connection may have any row factory: tuple, namedtuple or dict rows.
    return tuple(row.values()) if isinstance(row, dict) else tuple(row)


def run(tx: Executor, sql: str, params: Params) -> Row:
    """The first row of `sql` run on `tx` (synchronous drivers)."""
    t: Any = tx  # dispatched on kind_of at run time, which a type checker cannot follow
    kind = kind_of(t)
    if kind == "psycopg":
        # Connection.execute returns a new cursor, Cursor.execute the cursor itself.
        return _as_tuple(t.execute(psycopg_sql(sql), params).fetchone())
    if kind == "sqlalchemy":
        return tuple(t.execute(_text(sql), params).one())
    # An Engine: the statement commits on its own, as a pool does in the TypeScript client.
    with t.begin() as conn:
        return tuple(conn.execute(_text(sql), params).one())


async def run_async(tx: AsyncExecutor, sql: str, params: Params) -> Row:
    """The first row of `sql` run on `tx` (psycopg AsyncConnection/AsyncCursor, SQLAlchemy
    AsyncSession/AsyncConnection/AsyncEngine)."""
    t: Any = tx  # dispatched on kind_of at run time, which a type checker cannot follow
    kind = kind_of(t)
    if kind == "psycopg":
        cur = await t.execute(psycopg_sql(sql), params)
        return _as_tuple(await cur.fetchone())
    if kind == "sqlalchemy":
        return tuple((await t.execute(_text(sql), params)).one())
    async with t.begin() as conn:
        return tuple((await conn.execute(_text(sql), params)).one())
