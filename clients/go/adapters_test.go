package highwater_test

// The transactions the tests append in, one of each kind the package accepts, each also writing
// the application's own row; and readers of what was stored.

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	highwater "github.com/highwater-dev/highwater/clients/go"
)

// adapter runs one transaction of its kind: the application's row (id, total 10), then work;
// committed when work returns nil, rolled back otherwise (work's error is returned as is).
type adapter struct {
	name        string
	transaction func(ctx context.Context, orderID string, work func(tx highwater.Querier) error) error
}

const insertAppOrder = `INSERT INTO app_orders (id, total, writer) VALUES ($1, $2, $3)`

func adapters(t *testing.T) []adapter {
	return []adapter{
		{"pgxpool transaction (pgx.Tx)", func(ctx context.Context, id string, work func(highwater.Querier) error) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			return finishPgx(ctx, tx, id, "pgxpool", work)
		}},
		{"pgx.Conn transaction (pgx.Tx)", func(ctx context.Context, id string, work func(highwater.Querier) error) error {
			conn, err := pgx.Connect(ctx, databaseURL)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			tx, err := conn.Begin(ctx)
			if err != nil {
				return err
			}
			return finishPgx(ctx, tx, id, "pgx.Conn", work)
		}},
		{"database/sql transaction (*sql.Tx, pgx stdlib)", func(ctx context.Context, id string, work func(highwater.Querier) error) error {
			tx, err := sqlDB.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, insertAppOrder, id, 10, "database/sql"); err != nil {
				_ = tx.Rollback()
				return err
			}
			if err := work(tx); err != nil {
				if rb := tx.Rollback(); rb != nil {
					t.Errorf("rollback: %v", rb)
				}
				return err
			}
			return tx.Commit()
		}},
	}
}

func finishPgx(ctx context.Context, tx pgx.Tx, id, writer string, work func(highwater.Querier) error) error {
	if _, err := tx.Exec(ctx, insertAppOrder, id, 10, writer); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if err := work(tx); err != nil {
		if rb := tx.Rollback(ctx); rb != nil {
			return errors.Join(err, rb)
		}
		return err
	}
	return tx.Commit(ctx)
}

type storedEvent struct {
	ID            int64
	TxID          uint64
	StreamType    string
	StreamVersion *int64
	EventType     string
	TenantID      *string
	Payload       json.RawMessage
	Metadata      map[string]any
}

func eventsOf(t *testing.T, streamID string) []storedEvent {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT id, tx_id::text::bigint, stream_type, stream_version, event_type, tenant_id, payload, metadata
		   FROM highwater.events WHERE stream_id = $1 ORDER BY id`, streamID)
	if err != nil {
		t.Fatal(err)
	}
	var out []storedEvent
	for rows.Next() {
		var e storedEvent
		var txID int64
		var payload []byte
		if err := rows.Scan(&e.ID, &txID, &e.StreamType, &e.StreamVersion, &e.EventType, &e.TenantID, &payload, &e.Metadata); err != nil {
			t.Fatal(err)
		}
		e.TxID, e.Payload = uint64(txID), payload
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// appRow is the application's row's total, or -1 when there is none.
func appRow(t *testing.T, id string) int {
	t.Helper()
	var total int
	err := pool.QueryRow(context.Background(), `SELECT total::int FROM app_orders WHERE id = $1`, id).Scan(&total)
	if errors.Is(err, pgx.ErrNoRows) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return total
}

func jsonEqual(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Errorf("payload %s, want %s", gb, wb)
	}
}

type orderPlaced struct {
	OrderID string   `json:"order_id"`
	Total   float64  `json:"total"`
	Items   []string `json:"items,omitempty"`
}
