package highwater_test

// Each typed error raised by the real server, through each kind of transaction, and the errors
// that are not highwater's coming back as the driver returned them.

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	highwater "github.com/highwater-dev/highwater/clients/go"
)

func TestUnknownEventType(t *testing.T) {
	ctx := context.Background()
	for _, a := range adapters(t) {
		t.Run(a.name, func(t *testing.T) {
			id := uid("order")
			err := a.transaction(ctx, id, func(tx highwater.Querier) error {
				_, err := highwater.Append(ctx, tx, highwater.Event{StreamType: "order", StreamID: id, Type: "NoSuchType", Payload: struct{}{}})
				return err
			})
			var e *highwater.UnknownEventType
			if !errors.As(err, &e) {
				t.Fatalf("got %T %v, want *UnknownEventType", err, err)
			}
			if e.EventType != "NoSuchType" || e.Err.Code != "HW001" || e.Err.Message != `unknown event type "NoSuchType"` {
				t.Errorf("got %+v %+v", e, e.Err)
			}
			if !strings.Contains(e.Err.Hint, "event-types register NoSuchType") {
				t.Errorf("hint %q", e.Err.Hint)
			}
			assertChain(t, err, highwater.ErrUnknownEventType, "HW001")
			if rows := eventsOf(t, id); len(rows) != 0 || appRow(t, id) != -1 {
				t.Errorf("something was stored")
			}
		})
	}
}

// assertChain checks what errors.Is and errors.As find in a typed error: its sentinel (and no
// other), the *Error, and the driver's *pgconn.PgError underneath.
func assertChain(t *testing.T, err error, sentinel *highwater.Error, code string) {
	t.Helper()
	for _, s := range []*highwater.Error{highwater.ErrUnknownEventType, highwater.ErrInvalidPayload, highwater.ErrVersionConflict, highwater.ErrUnknownConsumer, highwater.ErrTokenAhead, highwater.ErrBadArgument, highwater.ErrLimitExceeded} {
		if got := errors.Is(err, s); got != (s == sentinel) {
			t.Errorf("errors.Is(err, %s sentinel) = %v", s.Code, got)
		}
	}
	var hw *highwater.Error
	if !errors.As(err, &hw) || hw.Code != code {
		t.Errorf("errors.As *Error: %v", hw)
	}
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != code {
		t.Errorf("errors.As *pgconn.PgError: %v", pg)
	}
}

func TestInvalidPayloadNamesThePath(t *testing.T) {
	ctx := context.Background()
	for _, a := range adapters(t) {
		t.Run(a.name, func(t *testing.T) {
			id := uid("order")
			err := a.transaction(ctx, id, func(tx highwater.Querier) error {
				_, err := highwater.AppendPosition(ctx, tx, highwater.Event{
					StreamType: "order", StreamID: id, Type: "OrderPlaced",
					Payload: map[string]any{"order_id": id, "total": 5, "items": []any{"ok", 7}},
				})
				return err
			})
			var e *highwater.InvalidPayload
			if !errors.As(err, &e) {
				t.Fatalf("got %T %v, want *InvalidPayload", err, err)
			}
			if e.EventType != "OrderPlaced" || e.Path != "$.items[1]" || e.Reason != `expected type "string", got number` {
				t.Errorf("got type %q path %q reason %q", e.EventType, e.Path, e.Reason)
			}
			want := `payload of event type "OrderPlaced" fails its JSON Schema: $.items[1]: expected type "string", got number`
			if e.Err.Message != want {
				t.Errorf("message %q", e.Err.Message)
			}
			assertChain(t, err, highwater.ErrInvalidPayload, "HW002")
		})
	}
}

func TestVersionConflict(t *testing.T) {
	ctx := context.Background()
	for _, a := range adapters(t) {
		t.Run(a.name, func(t *testing.T) {
			id := uid("order")
			ping := highwater.Event{StreamType: "order", StreamID: id, Type: "Pinged", Payload: struct{}{}, ExpectedVersion: highwater.ExpectVersion(0)}
			if err := a.transaction(ctx, id, func(tx highwater.Querier) error {
				_, err := highwater.Append(ctx, tx, ping)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			err := a.transaction(ctx, uid("other"), func(tx highwater.Querier) error {
				_, err := highwater.Append(ctx, tx, ping)
				return err
			})
			var e *highwater.VersionConflict
			if !errors.As(err, &e) {
				t.Fatalf("got %T %v, want *VersionConflict", err, err)
			}
			if e.StreamType != "order" || e.StreamID != id || e.ExpectedVersion != 0 || e.ActualVersion != 1 {
				t.Errorf("got %+v", e)
			}
			if want := "stream order/" + id + " is at version 1, expected 0"; e.Err.Message != want {
				t.Errorf("message %q, want %q", e.Err.Message, want)
			}
			assertChain(t, err, highwater.ErrVersionConflict, "HW003")
			if n := len(eventsOf(t, id)); n != 1 {
				t.Errorf("%d events, want 1", n)
			}
		})
	}
}

func TestStreamIDOverTheLimit(t *testing.T) {
	ctx := context.Background()
	for _, a := range adapters(t) {
		t.Run(a.name, func(t *testing.T) {
			id := uid("order")
			over := id + strings.Repeat("y", 1025-len(id))
			atLimit := id + strings.Repeat("x", 1024-len(id))
			err := a.transaction(ctx, id, func(tx highwater.Querier) error {
				_, err := highwater.Append(ctx, tx, highwater.Event{StreamType: "order", StreamID: over, Type: "Pinged", Payload: struct{}{}})
				return err
			})
			var e *highwater.LimitExceeded
			if !errors.As(err, &e) {
				t.Fatalf("got %T %v, want *LimitExceeded", err, err)
			}
			if e.Field != "stream id" || e.Size != 1025 || e.Limit != 1024 || e.Err.Code != "HW030" {
				t.Errorf("got %+v %+v", e, e.Err)
			}
			want := `stream id "` + over[:40] + `…" of stream type "order" is 1025 bytes long; the limit is 1024 bytes (UTF-8)`
			if e.Err.Message != want {
				t.Errorf("message %q, want %q", e.Err.Message, want)
			}
			if !strings.Contains(e.Err.Hint, "use a shorter id") {
				t.Errorf("hint %q", e.Err.Hint)
			}
			assertChain(t, err, highwater.ErrLimitExceeded, "HW030")
			if rows := eventsOf(t, over); len(rows) != 0 || appRow(t, id) != -1 {
				t.Errorf("something was stored")
			}
			if err := a.transaction(ctx, id, func(tx highwater.Querier) error {
				_, err := highwater.Append(ctx, tx, highwater.Event{StreamType: "order", StreamID: atLimit, Type: "Pinged", Payload: struct{}{}})
				return err
			}); err != nil {
				t.Fatalf("a stream id of 1024 bytes: %v", err)
			}
			if n := len(eventsOf(t, atLimit)); n != 1 {
				t.Errorf("%d events at the limit, want 1", n)
			}
		})
	}
}

// Two transactions append the same version: the second waits on the stream's head row and,
// once the first commits, is refused with the server's other HW003 message.
func TestVersionConflictWithAConcurrentWriter(t *testing.T) {
	ctx := context.Background()
	id := uid("order")
	ev := highwater.Event{StreamType: "order", StreamID: id, Type: "Pinged", Payload: struct{}{}, ExpectedVersion: highwater.ExpectVersion(0)}
	first, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	if _, err := highwater.Append(ctx, first, ev); err != nil {
		t.Fatal(err)
	}
	second, err := sqlDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Rollback()
	done := make(chan error, 1)
	go func() {
		_, err := highwater.Append(ctx, second, ev)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the second append returned before the first committed: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-done
	var e *highwater.VersionConflict
	if !errors.As(err, &e) {
		t.Fatalf("got %T %v, want *VersionConflict", err, err)
	}
	if e.ActualVersion != 1 || e.ExpectedVersion != 0 || e.StreamID != id {
		t.Errorf("got %+v: %v", e, err)
	}
}

func TestRefusalsWithoutASchemaPath(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		ev      highwater.Event
		message string
	}{
		{"empty stream id", highwater.Event{StreamType: "order", Type: "Pinged", Payload: struct{}{}}, "stream type and stream id must not be empty"},
		{"nil payload (SQL NULL)", highwater.Event{StreamType: "order", StreamID: "1", Type: "Pinged"}, `payload of event type "Pinged" is NULL`},
		{"metadata not an object", highwater.Event{StreamType: "order", StreamID: "1", Type: "Pinged", Payload: struct{}{}, Metadata: []int{1}}, "metadata must be a JSON object, got array"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			_, err = highwater.Append(ctx, tx, c.ev)
			var e *highwater.InvalidPayload
			if !errors.As(err, &e) {
				t.Fatalf("got %T %v, want *InvalidPayload", err, err)
			}
			if e.Path != "" || e.Reason != "" || e.Err.Message != c.message {
				t.Errorf("path %q reason %q message %q", e.Path, e.Reason, e.Err.Message)
			}
		})
	}
}

// Errors that are not highwater refusals come back exactly as the driver returned them.
func TestOtherErrorsAreTheDrivers(t *testing.T) {
	ctx := context.Background()
	ev := highwater.Event{StreamType: "order", StreamID: uid("o"), Type: "Pinged", Payload: struct{}{}}
	t.Run("permission denied (42501), pgx", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE no_grants"); err != nil {
			t.Fatal(err)
		}
		_, err = highwater.Append(ctx, tx, ev)
		assertDriverError(t, err, "42501")
	})
	t.Run("permission denied (42501), database/sql", func(t *testing.T) {
		tx, err := sqlDB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "SET LOCAL ROLE no_grants"); err != nil {
			t.Fatal(err)
		}
		_, err = highwater.Append(ctx, tx, ev)
		assertDriverError(t, err, "42501")
	})
	t.Run("a finished transaction", func(t *testing.T) {
		tx, err := sqlDB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if _, err := highwater.Append(ctx, tx, ev); !errors.Is(err, sql.ErrTxDone) {
			t.Errorf("got %v, want sql.ErrTxDone", err)
		}
	})
	t.Run("not a transaction", func(t *testing.T) {
		if _, err := highwater.Append(ctx, "postgres://…", ev); !errors.Is(err, highwater.ErrUnsupportedQuerier) {
			t.Errorf("got %v", err)
		}
		var nilTx pgx.Tx
		if _, err := highwater.Token(ctx, nilTx); !errors.Is(err, highwater.ErrUnsupportedQuerier) {
			t.Errorf("got %v", err)
		}
	})
}

func assertDriverError(t *testing.T, err error, code string) {
	t.Helper()
	var hw *highwater.Error
	if errors.As(err, &hw) {
		t.Fatalf("a %s error became a highwater error: %v", code, err)
	}
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != code {
		t.Fatalf("got %T %v, want the driver's %s", err, err, code)
	}
}
