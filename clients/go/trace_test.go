package highwater_test

// The writer's trace context (issue 48): an append inside an OpenTelemetry span stores the span's
// W3C trace context with the event, through every kind of transaction the package accepts.

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	highwater "github.com/highwater-dev/highwater/clients/go"
)

func spanContext(t *testing.T) (context.Context, string) {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, err := trace.ParseTraceState("congo=t61rcWkgMzE")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
	return trace.ContextWithSpanContext(context.Background(), sc), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
}

func TestAppendInsideASpanStoresItsTraceContext(t *testing.T) {
	traced, traceparent := spanContext(t)
	for _, a := range adapters(t) {
		t.Run(a.name, func(t *testing.T) {
			id := uid("order")
			err := a.transaction(traced, id, func(tx highwater.Querier) error {
				// Metadata of its own is kept beside the trace context.
				if _, err := highwater.Append(traced, tx, highwater.Event{
					StreamType: "order", StreamID: id, Type: "OrderPlaced",
					Payload: orderPlaced{OrderID: id, Total: 1}, Metadata: map[string]any{"source": "web"},
				}); err != nil {
					return err
				}
				// No metadata at all.
				if _, err := highwater.AppendPosition(traced, tx, highwater.Event{
					StreamType: "order", StreamID: id, Type: "Tagged", Payload: []string{"x"},
				}); err != nil {
					return err
				}
				// A traceparent of the caller's own wins.
				own := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
				if _, err := highwater.Append(traced, tx, highwater.Event{
					StreamType: "order", StreamID: id, Type: "Tagged", Payload: []string{"y"},
					Metadata: map[string]any{"traceparent": own},
				}); err != nil {
					return err
				}
				// Outside a span: nothing added.
				_, err := highwater.Append(context.Background(), tx, highwater.Event{
					StreamType: "order", StreamID: id, Type: "Tagged", Payload: []string{"z"},
				})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			evs := eventsOf(t, id)
			if len(evs) != 4 {
				t.Fatalf("%d events, want 4", len(evs))
			}
			for i, want := range []string{traceparent, traceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", ""} {
				got, _ := evs[i].Metadata["traceparent"].(string)
				if got != want {
					t.Errorf("event %d: traceparent %q, want %q (metadata %v)", i, got, want, evs[i].Metadata)
				}
			}
			if evs[0].Metadata["tracestate"] != "congo=t61rcWkgMzE" || evs[0].Metadata["source"] != "web" {
				t.Errorf("metadata %v", evs[0].Metadata)
			}
			if _, ok := evs[2].Metadata["tracestate"]; ok {
				t.Errorf("the span's tracestate went with another traceparent: %v", evs[2].Metadata)
			}
		})
	}
}
