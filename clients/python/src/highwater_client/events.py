"""append, append_position and token: one statement each, on the caller's connection and inside
the caller's transaction. Validation, ordering and refusals are the server's (highwater.append);
this module only builds the call and reads its row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import AppendContext, map_error
from .executor import Executor, Params, Row, run
from .trace import with_trace_context

Token = str
"""A position token: a transaction id (xid8) in decimal digits, e.g. ``"7421"``. It covers every
event whose ``tx_id`` is at most the token. A string, as the HTTP header and the TypeScript
client carry it."""


@dataclass(frozen=True)
class NewEvent:
    stream_type: str
    """The aggregate's type, e.g. ``"order"``."""
    stream_id: str
    """The aggregate's id, e.g. ``"42"``."""
    type: str
    """A registered event type, e.g. ``"OrderPlaced"``."""
    payload: Any
    """Any JSON-serialisable value; checked by the server against the type's JSON Schema."""
    metadata: Mapping[str, Any] | None = None
    """A JSON object; the server adds ``correlation_id`` (and ``causation_id`` in a SQL sink).
    Inside an OpenTelemetry span, the span's ``traceparent``/``tracestate`` are added unless it has
    its own ``traceparent`` (with the ``[opentelemetry]`` extra installed)."""
    tenant_id: str | None = None
    """None (the default) is the system tenant, or the ``highwater.tenant_id`` setting."""
    expected_version: int | None = None
    """Optimistic concurrency: the version the stream must be at (0: no versioned event yet).
    The event then gets ``expected_version + 1``; a mismatch raises VersionConflict."""


@dataclass(frozen=True)
class Appended:
    id: int
    """The event's id."""
    tx_id: int
    """The event's transaction id as stamped (its position is ``(tx_id, id)``)."""
    token: Token
    """The writing transaction's token so far: covers this event and every earlier one of it."""


# JSON goes as text cast to jsonb, so that no driver adapts a list into a PostgreSQL array.
_ARGS = (
    "CAST(:stream_type AS text), CAST(:stream_id AS text), CAST(:event_type AS text), "
    "CAST(CAST(:payload AS text) AS jsonb), CAST(CAST(:metadata AS text) AS jsonb), "
    "CAST(:tenant_id AS text), CAST(:expected_version AS bigint)"
)
APPEND = f"SELECT highwater.append({_ARGS})"
APPEND_POSITION = (
    "SELECT p.id, CAST(p.tx_id AS text), CAST(p.token AS text) "
    f"FROM highwater.append_position({_ARGS}) p"
)
TOKEN = "SELECT CAST(highwater.token() AS text)"


def params(e: NewEvent) -> Params:
    # Inside an OpenTelemetry span: its trace context goes with the event (trace.py).
    metadata = with_trace_context(e.metadata)
    return {
        "stream_type": e.stream_type,
        "stream_id": e.stream_id,
        "event_type": e.type,
        # None stays NULL so that the server refuses it (HW002) as for any writer.
        "payload": None if e.payload is None else json.dumps(e.payload),
        "metadata": None if metadata is None else json.dumps(dict(metadata)),
        "tenant_id": e.tenant_id,
        "expected_version": e.expected_version,
    }


def context(e: NewEvent) -> AppendContext:
    return AppendContext(e.stream_type, e.stream_id, e.type, e.expected_version)


def appended(row: Row) -> Appended:
    return Appended(id=int(row[0]), tx_id=int(row[1]), token=str(row[2]))


def _run(tx: Executor, sql: str, values: Params, ctx: AppendContext | None) -> Row:
    try:
        return run(tx, sql, values)
    except Exception as e:
        mapped = map_error(e, ctx)
        if mapped is e:
            raise
        raise mapped from e


def append(tx: Executor, event: NewEvent) -> int:
    """Appends one event inside the transaction `tx` is in and returns its id. Nothing is stored
    unless that transaction commits. Raises UnknownEventType, InvalidPayload, VersionConflict
    (or HighwaterError) for the server's refusals; any other error as the driver raised it."""
    return int(_run(tx, APPEND, params(event), context(event))[0])


def append_position(tx: Executor, event: NewEvent) -> Appended:
    """append that also returns the event's position and the transaction's token so far
    (``highwater.append_position``; the application's role needs EXECUTE on it)."""
    return appended(_run(tx, APPEND_POSITION, params(event), context(event)))


def token(tx: Executor) -> Token:
    """The token of the transaction `tx` is in (``highwater.token()``): take it after the last
    append. Outside a writing transaction it covers every transaction committed before the call."""
    return str(_run(tx, TOKEN, {}, None)[0])
