package highwater_test

// Append, AppendPosition and Token inside real transactions of each kind the package accepts:
// the events commit or roll back together with the application's own row.

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	highwater "github.com/highwater-dev/highwater/clients/go"
)

func TestAppendCommitsWithTheApplicationsWrite(t *testing.T) {
	ctx := context.Background()
	for _, a := range adapters(t) {
		t.Run(a.name, func(t *testing.T) {
			id := uid("order")
			var first int64
			var second highwater.Appended
			var last uint64
			err := a.transaction(ctx, id, func(tx highwater.Querier) error {
				var err error
				first, err = highwater.Append(ctx, tx, highwater.Event{
					StreamType: "order", StreamID: id, Type: "OrderPlaced",
					Payload:         orderPlaced{OrderID: id, Total: 10, Items: []string{"a", "b"}},
					Metadata:        map[string]any{"source": a.name},
					TenantID:        "acme",
					ExpectedVersion: highwater.ExpectVersion(0),
				})
				if err != nil {
					return err
				}
				// A JSON array payload, and a RawMessage sent as is.
				second, err = highwater.AppendPosition(ctx, tx, highwater.Event{
					StreamType: "order", StreamID: id, Type: "Tagged",
					Payload: json.RawMessage(`["x", 1, null]`), ExpectedVersion: highwater.ExpectVersion(1),
				})
				if err != nil {
					return err
				}
				last, err = highwater.Token(ctx, tx)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			rows := eventsOf(t, id)
			if len(rows) != 2 {
				t.Fatalf("%d events stored, want 2", len(rows))
			}
			e1, e2 := rows[0], rows[1]
			if e1.ID != first || e1.EventType != "OrderPlaced" || e1.StreamType != "order" {
				t.Errorf("first event %+v, Append returned id %d", e1, first)
			}
			if e1.StreamVersion == nil || *e1.StreamVersion != 1 || e1.TenantID == nil || *e1.TenantID != "acme" {
				t.Errorf("first event: version %v, tenant %v; want 1, acme", e1.StreamVersion, e1.TenantID)
			}
			jsonEqual(t, e1.Payload, `{"order_id": "`+id+`", "total": 10, "items": ["a", "b"]}`)
			if e1.Metadata["source"] != a.name {
				t.Errorf("metadata %v", e1.Metadata)
			}
			if _, ok := e1.Metadata["correlation_id"].(string); !ok {
				t.Errorf("the server adds correlation_id: metadata %v", e1.Metadata)
			}
			if e2.ID != second.ID || e2.TxID != second.TxID || *e2.StreamVersion != 2 || e2.TenantID != nil {
				t.Errorf("second event %+v, AppendPosition returned %+v", e2, second)
			}
			jsonEqual(t, e2.Payload, `["x", 1, null]`)
			// The transaction's last token is the one AppendPosition gave, and covers both events.
			if last != second.Token || last < e1.TxID || last < e2.TxID {
				t.Errorf("token %d (AppendPosition's %d) does not cover tx_ids %d, %d", last, second.Token, e1.TxID, e2.TxID)
			}
			if got := appRow(t, id); got != 10 {
				t.Errorf("application row total %d, want 10: not in the same transaction", got)
			}
		})
	}
}

func TestRollbackStoresNothing(t *testing.T) {
	ctx := context.Background()
	for _, a := range adapters(t) {
		t.Run(a.name, func(t *testing.T) {
			id := uid("order")
			boom := errors.New("business rule failed after the append")
			err := a.transaction(ctx, id, func(tx highwater.Querier) error {
				if _, err := highwater.Append(ctx, tx, highwater.Event{StreamType: "order", StreamID: id, Type: "Pinged", Payload: struct{}{}}); err != nil {
					return err
				}
				if _, err := highwater.AppendPosition(ctx, tx, highwater.Event{StreamType: "order", StreamID: id, Type: "Pinged", Payload: map[string]int{"n": 2}}); err != nil {
					return err
				}
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("transaction returned %v, want the work's error", err)
			}
			if rows := eventsOf(t, id); len(rows) != 0 {
				t.Errorf("%d events stored after rollback", len(rows))
			}
			if got := appRow(t, id); got != -1 {
				t.Errorf("application row stored after rollback")
			}
		})
	}
}

func TestTokenOutsideAWritingTransaction(t *testing.T) {
	ctx := context.Background()
	id := uid("order")
	var written uint64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		a, err := highwater.AppendPosition(ctx, tx, highwater.Event{StreamType: "order", StreamID: id, Type: "Pinged", Payload: struct{}{}})
		written = a.Token
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Without writes, the token covers every transaction committed before the call.
	for _, db := range []highwater.Querier{pool, sqlDB} {
		got, err := highwater.Token(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if got < written {
			t.Errorf("%T: token %d does not cover the committed %d", db, got, written)
		}
	}
}
