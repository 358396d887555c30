"""Every supported way of holding a transaction, each a real transaction that also writes the
application's own row (app_orders) with the driver's or ORM's own API, then hands over the
object the client is given. Committed when the block ends, rolled back when it raises."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from sqlalchemy import Numeric, String, insert
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from harness import DATABASE_URL


class Base(DeclarativeBase):
    pass


class AppOrder(Base):
    __tablename__ = "app_orders"
    id: Mapped[str] = mapped_column(String, primary_key=True)
    total: Mapped[float] = mapped_column(Numeric)
    writer: Mapped[str] = mapped_column(String)


Adapter = Callable[[Engine, str], AbstractContextManager[Any]]


@contextmanager
def psycopg_connection(engine: Engine, order_id: str) -> Iterator[Any]:
    with psycopg.connect(DATABASE_URL) as conn, conn.transaction():
        conn.execute("INSERT INTO app_orders VALUES (%s, %s, %s)", (order_id, 10, "psycopg"))
        yield conn


@contextmanager
def psycopg_cursor(engine: Engine, order_id: str) -> Iterator[Any]:
    # Autocommit connection, explicit transaction block: the other common psycopg style.
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn, conn.transaction():
        with conn.cursor() as cur:
            cur.execute("INSERT INTO app_orders VALUES (%s, %s, %s)", (order_id, 10, "cursor"))
            yield cur


@contextmanager
def sqlalchemy_session(engine: Engine, order_id: str) -> Iterator[Any]:
    with Session(engine) as session, session.begin():
        session.add(AppOrder(id=order_id, total=10, writer="session"))
        session.flush()
        yield session


@contextmanager
def sqlalchemy_connection(engine: Engine, order_id: str) -> Iterator[Any]:
    with engine.begin() as conn:
        conn.execute(insert(AppOrder).values(id=order_id, total=10, writer="connection"))
        yield conn


ADAPTERS: dict[str, Adapter] = {
    "psycopg Connection": psycopg_connection,
    "psycopg Cursor": psycopg_cursor,
    "SQLAlchemy Session": sqlalchemy_session,
    "SQLAlchemy Connection": sqlalchemy_connection,
}
