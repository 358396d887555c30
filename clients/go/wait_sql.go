package highwater

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// WaitApplied waits until consumer has applied everything token covers, or timeout runs out
// (then it returns Applied false and no error), calling highwater.applied in the database.
//
// db must see other transactions' commits: a *pgxpool.Pool (best: the wait takes one connection,
// LISTENs on highwater_applied, which the dispatcher's cursor moves notify, and re-checks on each
// notification), or a connection, *sql.DB or *sql.Conn not inside a transaction (checked with a
// backoff from 10 ms to 250 ms). Never pass the transaction that wrote the token: it cannot see
// its own events applied before it commits.
//
// The server's refusals come back as *UnknownConsumer (HW010) and *Error (HW011: a token of
// another database or from before a restore; HW012: bad argument); a context that ends first
// returns its error.
func WaitApplied(ctx context.Context, db Querier, consumer string, token uint64, timeout time.Duration, opts ...WaitOption) (WaitResult, error) {
	deadline := time.Now().Add(timeout)
	args := appliedArgs(consumer, token, collect(opts))
	if pool, ok := db.(*pgxpool.Pool); ok {
		return waitListening(ctx, pool, consumer, args, deadline)
	}
	return waitPolling(ctx, db, consumer, args, deadline)
}

func checkApplied(ctx context.Context, db Querier, consumer string, args []any) (bool, error) {
	var applied bool
	if err := queryRow(ctx, db, appliedSQL, args, &applied); err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, mapError(err, nil, consumer)
	}
	return applied, nil
}

func waitPolling(ctx context.Context, db Querier, consumer string, args []any, deadline time.Time) (WaitResult, error) {
	delay := firstDelay
	for {
		applied, err := checkApplied(ctx, db, consumer, args)
		if err != nil || applied {
			return WaitResult{Applied: applied}, err
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return WaitResult{}, nil
		}
		if err := sleep(ctx, min(delay, remaining)); err != nil {
			return WaitResult{}, err
		}
		delay = min(delay*2, maxDelay)
	}
}
