"""The writer's trace context (issue 48): with opentelemetry-api installed and the SDK's real
tracer, an append inside the current span stores the span's W3C context with the event, through
every supported way of holding a transaction and through asyncio. (Without the package nothing is
added: tests/smoke/smoke.py, whose venvs do not install it, checks that.)"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from sqlalchemy.engine import Engine

from adapters import ADAPTERS, Adapter
from conftest import events_of
from harness import DATABASE_URL, uid
from highwater_client import NewEvent, aio, append, append_position

tracer = TracerProvider().get_tracer("orders")
unsampled = TracerProvider(sampler=ALWAYS_OFF).get_tracer("orders")
OWN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def propagated() -> dict[str, str]:
    """What OpenTelemetry's own W3C propagator writes for the current span: what the event must
    hold (the SDK may set flags beyond "sampled", e.g. 03 with Trace Context level 2's "random")."""
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    assert "traceparent" in carrier, "no current span"
    return carrier


def sampled_flag(tp: str) -> bool:
    return int(tp.rsplit("-", 1)[1], 16) & 1 == 1


@pytest.mark.parametrize("adapter", ADAPTERS.values(), ids=ADAPTERS.keys())
def test_an_append_inside_a_span_stores_its_trace_context(adapter: Adapter, engine: Engine, check: Any) -> None:
    oid = uid("order")
    with tracer.start_as_current_span("POST /orders"):
        expected = propagated()["traceparent"]
        with adapter(engine, oid) as tx:
            # Metadata of its own is kept beside the trace context.
            append(tx, NewEvent("order", oid, "Tagged", ["a"], metadata={"source": "web"}))
            append_position(tx, NewEvent("order", oid, "Tagged", ["b"]))
            # The caller's own traceparent wins.
            append(tx, NewEvent("order", oid, "Tagged", ["c"], metadata={"traceparent": OWN}))
    # Outside the span: nothing added.
    with adapter(engine, oid + "-after") as tx:
        append(tx, NewEvent("order", oid, "Tagged", ["d"]))

    m = [e["metadata"] for e in events_of(check, oid)]
    assert len(m) == 4
    assert sampled_flag(expected)
    assert m[0]["traceparent"] == expected and m[0]["source"] == "web"
    assert m[1]["traceparent"] == expected
    assert "tracestate" not in m[1]
    assert m[2]["traceparent"] == OWN
    assert "traceparent" not in m[3], m[3]


def test_tracestate_and_an_unsampled_span_go_with_the_event(engine: Engine, check: Any) -> None:
    oid = uid("order")
    with tracer.start_as_current_span("POST /orders") as span:
        sc = span.get_span_context()
    with_state = SpanContext(sc.trace_id, sc.span_id, True, sc.trace_flags, TraceState([("congo", "t61rcWkgMzE")]))
    with psycopg.connect(DATABASE_URL) as conn:
        with trace.use_span(NonRecordingSpan(with_state)), conn.transaction():
            first = propagated()
            append(conn, NewEvent("order", oid, "Tagged", ["a"]))
        with unsampled.start_as_current_span("GET /health"), conn.transaction():
            second = propagated()
            append(conn, NewEvent("order", oid, "Tagged", ["b"]))
    m = [e["metadata"] for e in events_of(check, oid)]
    assert m[0]["traceparent"] == first["traceparent"]
    assert m[0]["tracestate"] == first["tracestate"] == "congo=t61rcWkgMzE"
    # The writer's "not sampled" goes with the event: the dispatcher does not sample it either.
    assert m[1]["traceparent"] == second["traceparent"]
    assert not sampled_flag(second["traceparent"])
    assert "tracestate" not in m[1]


def test_asyncio_tasks_carry_their_own_span(check: Any) -> None:
    oid = uid("order")

    async def write(name: str) -> str:
        with tracer.start_as_current_span(name):
            async with await psycopg.AsyncConnection.connect(DATABASE_URL) as conn, conn.transaction():
                await asyncio.sleep(0.01)  # the other task runs meanwhile, in its own span
                await aio.append(conn, NewEvent("order", oid, "Tagged", [name]))
            return propagated()["traceparent"]

    async def main() -> list[str]:
        return list(await asyncio.gather(write("a"), write("b")))

    expected = dict(zip(["a", "b"], asyncio.run(main())))
    assert expected["a"] != expected["b"]
    got = {e["payload"][0]: e["metadata"]["traceparent"] for e in events_of(check, oid)}
    assert got == expected
