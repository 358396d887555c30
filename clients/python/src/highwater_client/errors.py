"""Typed errors for the SQLSTATEs the highwater SQL functions raise (migrations/definitions/*.sql,
docs/events.md): HW001 unknown event type, HW002 invalid payload, HW003 expected version
mismatch, HW010 unknown consumer, HW011 token ahead of the database, HW012 bad argument, HW030 a
value over its size limit.

Mapped exactly as the TypeScript client (clients/typescript/src/errors.ts) maps them, so both
clients parse the server's messages the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypedDict, Unpack


class HighwaterError(Exception):
    """Base class of every error this package raises for a highwater refusal.

    ``code`` is the SQLSTATE (``HW001``...) when the error came from SQL, ``hint`` the server's
    fix, ``status`` the HTTP status when it came from the dispatcher. The driver's (or ORM's)
    original exception is ``__cause__``.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        hint: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.hint = hint
        self.status = status


class Details(TypedDict, total=False):
    """The keyword arguments every HighwaterError takes."""

    code: str | None
    hint: str | None
    status: int | None


class UnknownEventType(HighwaterError):
    """HW001: the event type is not registered (``highwater event-types register NAME``)."""

    def __init__(self, event_type: str, message: str, **kw: Unpack[Details]) -> None:
        super().__init__(message, **kw)
        self.event_type = event_type


class InvalidPayload(HighwaterError):
    """HW002: the payload fails the event type's JSON Schema (``path`` names where, e.g.
    ``$.total``, ``reason`` what), or the event is otherwise invalid (empty stream type or id,
    NULL payload, metadata not an object: then ``path`` and ``reason`` are None)."""

    def __init__(
        self,
        event_type: str,
        path: str | None,
        reason: str | None,
        message: str,
        **kw: Unpack[Details],
    ) -> None:
        super().__init__(message, **kw)
        self.event_type = event_type
        self.path = path
        self.reason = reason


class VersionConflict(HighwaterError):
    """HW003: the stream is not at the expected version (another writer appended first)."""

    def __init__(
        self,
        stream_type: str,
        stream_id: str,
        expected_version: int | None,
        actual_version: int | None,
        message: str,
        **kw: Unpack[Details],
    ) -> None:
        super().__init__(message, **kw)
        self.stream_type = stream_type
        self.stream_id = stream_id
        self.expected_version = expected_version
        self.actual_version = actual_version


class LimitExceeded(HighwaterError):
    """HW030: the event type, stream type, stream id or payload is over its size limit
    (docs/events.md "Limits"; sizes in bytes of UTF-8). The message names the field, its size and
    the limit, ``hint`` the fix (e.g. a shorter id). Nothing was stored.

    ``field`` is ``"event type"``, ``"stream type"``, ``"stream id"`` or ``"payload"``; ``size``
    and ``limit`` are bytes (200, 1024, or 67108864 for the payload). None if the server's message
    did not name them."""

    def __init__(
        self,
        field: str | None,
        size: int | None,
        limit: int | None,
        message: str,
        **kw: Unpack[Details],
    ) -> None:
        super().__init__(message, **kw)
        self.field = field
        self.size = size
        self.limit = limit


class UnknownConsumer(HighwaterError):
    """HW010 (SQL) or 404 (HTTP): no consumer of that name."""

    def __init__(self, consumer: str, message: str, **kw: Unpack[Details]) -> None:
        super().__init__(message, **kw)
        self.consumer = consumer


@dataclass(frozen=True)
class ServerError:
    code: str
    message: str
    hint: str | None


_SQLSTATE = re.compile(r"^[0-9A-Z]{5}$")


def server_error(exc: BaseException) -> ServerError | None:
    """The PostgreSQL error inside what the driver or ORM raised: psycopg's error itself, or the
    ``orig`` of SQLAlchemy's DBAPIError; also followed through ``__cause__``."""
    seen: set[int] = set()
    queue: list[object] = [exc]
    while queue:
        e = queue.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        code = getattr(e, "sqlstate", None)
        if isinstance(code, str) and _SQLSTATE.match(code):
            diag = getattr(e, "diag", None)
            primary = getattr(diag, "message_primary", None)
            message = primary if isinstance(primary, str) else str(e).split("\n", 1)[0]
            hint = getattr(diag, "message_hint", None)
            return ServerError(code, message, hint if isinstance(hint, str) else None)
        queue.append(getattr(e, "orig", None))
        queue.append(getattr(e, "__cause__", None))
    return None


@dataclass(frozen=True)
class AppendContext:
    stream_type: str
    stream_id: str
    event_type: str
    expected_version: int | None


_QUOTED = re.compile(r'"(.*)"')
# "payload of event type "T" fails its JSON Schema: <path>: <reason>"
_SCHEMA = re.compile(r"fails its JSON Schema: (\$.*?): (.*)$", re.S)
# "stream S/I is at version A, expected E" or "stream S/I already has version V (it is at version A)"
_VERSION = re.compile(r"is at version (\d+)(?:, expected \d+|\))$")
# "stream id "I…" of stream type "S" is 1025 bytes long; the limit is 1024 bytes (UTF-8)",
# "payload of event type "T" is N bytes (as jsonb); the limit is 67108864 bytes (64 MiB)": the
# field leads, the sizes end it (read from the end: the quoted value may hold anything).
_LIMIT_FIELD = re.compile(r"^(event type|stream type|stream id|payload) ")
_LIMIT_SIZES = re.compile(r"is (\d+) bytes(?: long| \(as jsonb\)); the limit is (\d+) bytes(?: \([^()]*\))?$")


def map_error(
    exc: BaseException, ctx: AppendContext | None = None, consumer: str | None = None
) -> BaseException:
    """The typed error for a highwater refusal; anything else is returned unchanged."""
    d = server_error(exc)
    if d is None or not d.code.startswith("HW"):
        return exc
    msg, kw = d.message, Details(code=d.code, hint=d.hint)
    quoted = _QUOTED.search(msg)
    if d.code == "HW001":
        name = ctx.event_type if ctx else (quoted.group(1) if quoted else "")
        return UnknownEventType(name, msg, **kw)
    if d.code == "HW002":
        m = _SCHEMA.search(msg)
        path, reason = (m.group(1), m.group(2)) if m else (None, None)
        return InvalidPayload(ctx.event_type if ctx else "", path, reason, msg, **kw)
    if d.code == "HW003":
        m = _VERSION.search(msg)
        return VersionConflict(
            ctx.stream_type if ctx else "",
            ctx.stream_id if ctx else "",
            ctx.expected_version if ctx else None,
            int(m.group(1)) if m else None,
            msg,
            **kw,
        )
    if d.code == "HW030":
        field = _LIMIT_FIELD.search(msg)
        sizes = _LIMIT_SIZES.search(msg)
        return LimitExceeded(
            field.group(1) if field else None,
            int(sizes.group(1)) if sizes else None,
            int(sizes.group(2)) if sizes else None,
            msg,
            **kw,
        )
    if d.code == "HW010":
        return UnknownConsumer(consumer or (quoted.group(1) if quoted else ""), msg, **kw)
    return HighwaterError(msg, **kw)
