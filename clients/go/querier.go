package highwater

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PgxQuerier is the pgx side of Querier: pgx.Tx, *pgx.Conn, *pgxpool.Pool, *pgxpool.Conn and
// *pgxpool.Tx all have this method.
type PgxQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SQLQuerier is the database/sql side of Querier: *sql.Tx, *sql.DB and *sql.Conn all have this
// method. Open the database with the pgx stdlib driver (github.com/jackc/pgx/v5/stdlib, driver
// name "pgx"): the typed errors are read from its *pgconn.PgError.
type SQLQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Querier is what the event is written in: a PgxQuerier or a SQLQuerier, normally the
// application's open transaction. Go has no interface meaning "one of two method sets", so the
// kind is checked when called: any other value returns an error wrapping ErrUnsupportedQuerier.
// A pool or *sql.DB also works; each statement then commits on its own.
type Querier any

// ErrUnsupportedQuerier is returned when a Querier is neither a PgxQuerier nor a SQLQuerier.
var ErrUnsupportedQuerier = errors.New("highwater: expected a pgx transaction, connection or pool, or a database/sql *sql.Tx, *sql.DB or *sql.Conn")

// queryRow runs one statement that returns one row and scans it into dest. It adds nothing
// around the statement (no BEGIN, no savepoint): it runs inside the caller's transaction as is.
func queryRow(ctx context.Context, q Querier, query string, args []any, dest ...any) error {
	switch q := q.(type) {
	case PgxQuerier:
		return q.QueryRow(ctx, query, args...).Scan(dest...)
	case SQLQuerier:
		return q.QueryRowContext(ctx, query, args...).Scan(dest...)
	default:
		return fmt.Errorf("%w, got %T", ErrUnsupportedQuerier, q)
	}
}
