"""append / append_position / token through every supported way of holding a transaction,
against the real highwater.append: commits with the application's write, rollbacks store
nothing, and each refusal of the server comes back as its typed error."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.engine import Engine

from adapters import ADAPTERS, Adapter
from conftest import app_row, events_of
from harness import uid
from highwater_client import (
    HighwaterError,
    InvalidPayload,
    LimitExceeded,
    NewEvent,
    UnknownEventType,
    VersionConflict,
    append,
    append_position,
    token,
)

pytestmark = pytest.mark.parametrize("adapter", ADAPTERS.values(), ids=ADAPTERS.keys())


class BusinessRuleFailed(Exception):
    pass


def test_append_and_append_position_commit_with_the_application_write(
    adapter: Adapter, engine: Engine, check: Any
) -> None:
    oid = uid("order")
    with adapter(engine, oid) as tx:
        first = append(tx, NewEvent(
            "order", oid, "OrderPlaced", {"order_id": oid, "total": 10, "items": ["a", "b"]},
            metadata={"source": "test"}, tenant_id="acme", expected_version=0,
        ))
        # A list payload: JSON, not a PostgreSQL array.
        second = append_position(tx, NewEvent("order", oid, "Tagged", ["x", 1, None], expected_version=1))
        last = token(tx)
        # Not visible to anyone else before the commit.
        assert events_of(check, oid) == []

    e1, e2 = events_of(check, oid)
    assert (e1["id"], e1["event_type"], e1["stream_type"], e1["stream_version"]) == (first, "OrderPlaced", "order", 1)
    assert e1["tenant_id"] == "acme"
    assert e1["payload"] == {"order_id": oid, "total": 10, "items": ["a", "b"]}
    assert e1["metadata"]["source"] == "test"
    assert isinstance(e1["metadata"]["correlation_id"], str)
    assert (e2["id"], e2["tx_id"], e2["stream_version"]) == (second.id, second.tx_id, 2)
    assert e2["tenant_id"] is None
    assert e2["payload"] == ["x", 1, None]
    # The transaction's last token is append_position's, and it covers both events.
    assert last == second.token
    assert all(int(last) >= e["tx_id"] for e in (e1, e2))
    row = app_row(check, oid)  # the application's own row: the same commit
    assert row is not None and row[0] == 10


def test_a_rollback_stores_nothing(adapter: Adapter, engine: Engine, check: Any) -> None:
    oid = uid("order")
    with pytest.raises(BusinessRuleFailed):
        with adapter(engine, oid) as tx:
            append(tx, NewEvent("order", oid, "Pinged", {}))
            append_position(tx, NewEvent("order", oid, "Pinged", {"n": 2}))
            raise BusinessRuleFailed("after the append")
    assert events_of(check, oid) == []
    assert app_row(check, oid) is None


def test_unknown_event_type(adapter: Adapter, engine: Engine, check: Any) -> None:
    oid = uid("order")
    with pytest.raises(UnknownEventType) as err:
        with adapter(engine, oid) as tx:
            append(tx, NewEvent("order", oid, "NoSuchType", {}))
    e = err.value
    assert isinstance(e, HighwaterError)
    assert (e.code, e.event_type) == ("HW001", "NoSuchType")
    assert str(e) == 'unknown event type "NoSuchType"'
    assert "event-types register NoSuchType" in (e.hint or "")
    assert e.__cause__ is not None, "keeps the driver's error as the cause"
    assert events_of(check, oid) == []
    assert app_row(check, oid) is None, "the error rolled the application's write back too"


def test_a_payload_violating_the_schema_names_its_path(adapter: Adapter, engine: Engine) -> None:
    oid = uid("order")
    with pytest.raises(InvalidPayload) as err:
        with adapter(engine, oid) as tx:
            append_position(tx, NewEvent("order", oid, "OrderPlaced", {"order_id": oid, "total": 5, "items": ["ok", 7]}))
    e = err.value
    assert (e.code, e.event_type, e.path) == ("HW002", "OrderPlaced", "$.items[1]")
    assert e.reason == 'expected type "string", got number'
    assert e.message == (
        'payload of event type "OrderPlaced" fails its JSON Schema: $.items[1]: expected type "string", got number'
    )


def test_an_expected_version_mismatch_is_a_version_conflict(adapter: Adapter, engine: Engine, check: Any) -> None:
    oid = uid("order")
    with adapter(engine, oid) as tx:
        append(tx, NewEvent("order", oid, "Pinged", {}, expected_version=0))
    with pytest.raises(VersionConflict) as err:
        with adapter(engine, uid("other")) as tx:
            append(tx, NewEvent("order", oid, "Pinged", {}, expected_version=0))
    e = err.value
    assert (e.code, e.stream_type, e.stream_id, e.expected_version, e.actual_version) == ("HW003", "order", oid, 0, 1)
    assert e.message == f"stream order/{oid} is at version 1, expected 0"
    assert len(events_of(check, oid)) == 1


def test_a_stream_id_over_1024_bytes_is_limit_exceeded(adapter: Adapter, engine: Engine, check: Any) -> None:
    oid = uid("order")
    over, at_limit = oid.ljust(1025, "y"), oid.ljust(1024, "x")
    with pytest.raises(LimitExceeded) as err:
        with adapter(engine, oid) as tx:
            append(tx, NewEvent("order", over, "Pinged", {}))
    e = err.value
    assert isinstance(e, HighwaterError)
    assert (e.code, e.field, e.size, e.limit) == ("HW030", "stream id", 1025, 1024)
    assert e.message == (
        f'stream id "{over[:40]}…" of stream type "order" is 1025 bytes long; the limit is 1024 bytes (UTF-8)'
    )
    assert "use a shorter id" in (e.hint or "")
    assert e.__cause__ is not None, "keeps the driver's error as the cause"
    assert events_of(check, over) == []
    assert app_row(check, oid) is None, "the error rolled the application's write back too"
    with adapter(engine, oid) as tx:
        append(tx, NewEvent("order", at_limit, "Pinged", {}))
    assert len(events_of(check, at_limit)) == 1
