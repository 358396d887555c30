package highwater

import (
	"context"
	"encoding/json"
	"fmt"

	"go.opentelemetry.io/otel/trace"
)

// withTraceContext adds the W3C trace context of ctx's span (OpenTelemetry's API, whatever SDK the
// application set up) to an event's metadata as traceparent and tracestate, so that
// highwater.append stores the writer's trace with the event and the dispatcher continues it
// (docs/observability.md, "Tracing"). metadata is the encoded JSON object or nil. Metadata that
// names its own traceparent, or that is not an object (the server refuses it), is left as it is;
// without a valid span context nothing changes and nothing is decoded.
func withTraceContext(ctx context.Context, metadata any) (any, error) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return metadata, nil
	}
	fields := map[string]json.RawMessage{}
	if s, ok := metadata.(string); ok {
		if err := json.Unmarshal([]byte(s), &fields); err != nil || fields == nil {
			return metadata, nil
		}
		if _, own := fields["traceparent"]; own {
			return metadata, nil
		}
	}
	put := func(key, value string) {
		b, _ := json.Marshal(value)
		fields[key] = b
	}
	put("traceparent", fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags()))
	if ts := sc.TraceState(); ts.Len() > 0 {
		put("tracestate", ts.String())
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("highwater: adding the trace context to the metadata: %w", err)
	}
	return string(b), nil
}
