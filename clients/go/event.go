package highwater

import (
	"context"
	"encoding/json"
	"fmt"
)

// Event is one event to append. Only StreamType, StreamID, Type and Payload are required.
type Event struct {
	// StreamType is the aggregate's type, e.g. "order".
	StreamType string
	// StreamID is the aggregate's id, e.g. "42".
	StreamID string
	// Type is a registered event type, e.g. "OrderPlaced".
	Type string
	// Payload is encoded with encoding/json (a json.RawMessage is sent as is) and checked by the
	// server against the type's JSON Schema. A nil Payload is sent as SQL NULL, which the server
	// refuses (InvalidPayload): use struct{}{} or json.RawMessage("{}") for an event without data.
	Payload any
	// Metadata, when not nil, must encode to a JSON object. The server adds correlation_id (and
	// causation_id inside a SQL sink) when absent.
	Metadata any
	// TenantID "" means the system tenant, or the setting highwater.tenant_id when set.
	TenantID string
	// ExpectedVersion, when set, is the version the stream must be at (0: no versioned event yet);
	// the event then gets ExpectedVersion+1, and a mismatch returns *VersionConflict. See
	// ExpectVersion.
	ExpectedVersion *int64
}

// ExpectVersion returns a pointer to v, for Event.ExpectedVersion.
func ExpectVersion(v int64) *int64 { return &v }

// Appended is where an appended event stands.
type Appended struct {
	// ID is the event's id.
	ID int64
	// TxID is the event's transaction id as stamped (its position is (TxID, ID)).
	TxID uint64
	// Token is the writing transaction's token so far: it covers this event and every earlier
	// one of the transaction.
	Token uint64
}

// appendArgs are the seven arguments of highwater.append and highwater.append_position. JSON goes
// as text (cast to jsonb in SQL) so that both drivers send the same thing whatever Go type the
// payload has.
//
// With an OpenTelemetry span in ctx, the metadata gets its trace context (withTraceContext).
func appendArgs(ctx context.Context, e Event) ([]any, error) {
	var payload any
	if e.Payload != nil {
		b, err := json.Marshal(e.Payload)
		if err != nil {
			return nil, fmt.Errorf("highwater: encoding the payload of %s: %w", e.Type, err)
		}
		payload = string(b)
	}
	var metadata any
	if e.Metadata != nil {
		b, err := json.Marshal(e.Metadata)
		if err != nil {
			return nil, fmt.Errorf("highwater: encoding the metadata of %s: %w", e.Type, err)
		}
		// A nil map or pointer inside the interface means "no metadata", as a nil Metadata does.
		if string(b) != "null" {
			metadata = string(b)
		}
	}
	metadata, err := withTraceContext(ctx, metadata)
	if err != nil {
		return nil, err
	}
	var tenant any
	if e.TenantID != "" {
		tenant = e.TenantID
	}
	var expected any
	if e.ExpectedVersion != nil {
		expected = *e.ExpectedVersion
	}
	return []any{e.StreamType, e.StreamID, e.Type, payload, metadata, tenant, expected}, nil
}
