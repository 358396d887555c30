"""The writer's W3C trace context (issue 48): inside an active OpenTelemetry span, an append
stores the span's context with the event (metadata ``traceparent``/``tracestate``), so that the
dispatcher's spans and every delivery continue the writer's trace (docs/observability.md,
"Tracing"). ``opentelemetry-api`` is optional (the ``[opentelemetry]`` extra): without it, nothing
is added. The API reads the current span from a contextvar, so asyncio tasks see their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    from opentelemetry import trace as _otel_trace
except ImportError:  # the optional extra is not installed: no trace context
    _otel_trace = None  # type: ignore[assignment]


def with_trace_context(metadata: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``metadata`` with the current span's ``traceparent`` (and ``tracestate``) added. Unchanged:
    outside a span (or without ``opentelemetry-api``), when it names its own ``traceparent``, or
    when it is not a mapping (the server refuses it)."""
    if _otel_trace is None:
        return metadata
    sc = _otel_trace.get_current_span().get_span_context()
    if not sc.is_valid:
        return metadata
    if metadata is not None and (not isinstance(metadata, Mapping) or "traceparent" in metadata):
        return metadata
    out = dict(metadata or {})
    out["traceparent"] = f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"
    if sc.trace_state:
        out["tracestate"] = sc.trace_state.to_header()
    return out
