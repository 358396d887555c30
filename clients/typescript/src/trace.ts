// The writer's W3C trace context (issue 48): inside an active OpenTelemetry span, an append stores
// the span's context with the event (metadata `traceparent`/`tracestate`), so that the
// dispatcher's spans and every delivery continue the writer's trace (docs/observability.md,
// "Tracing"). `@opentelemetry/api` is an optional peer dependency: when the application has not
// installed it, nothing is added and nothing is loaded.
import { createRequire } from 'node:module';
import type * as Otel from '@opentelemetry/api';

// Loaded synchronously (no top-level await in the package): the API keeps its registrations (the
// context manager, the tracer provider) on globalThis, so this copy sees the application's
// context whichever module format the application loaded it in.
const api: typeof Otel | null = (() => {
  try {
    return createRequire(import.meta.url)('@opentelemetry/api') as typeof Otel;
  } catch {
    return null;
  }
})();

/** `metadata` with the active span's `traceparent` (and `tracestate`) added. Unchanged: outside a
 * span (or without `@opentelemetry/api`), when it names its own `traceparent`, or when it is not
 * a JSON object (the server refuses it). */
export function withTraceContext(
  metadata: Record<string, unknown> | null | undefined,
): Record<string, unknown> | null | undefined {
  if (api === null) return metadata;
  const sc = api.trace.getSpanContext(api.context.active());
  if (sc === undefined || !api.isSpanContextValid(sc)) return metadata;
  if (metadata != null && (typeof metadata !== 'object' || Array.isArray(metadata) || 'traceparent' in metadata)) {
    return metadata;
  }
  const flags = (sc.traceFlags & 0xff).toString(16).padStart(2, '0');
  const out: Record<string, unknown> = { ...metadata, traceparent: `00-${sc.traceId}-${sc.spanId}-${flags}` };
  const state = sc.traceState?.serialize();
  if (state) out.tracestate = state;
  return out;
}
