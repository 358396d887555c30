package highwater

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

const appliedChannel = "highwater_applied"

// waitListening is WaitApplied on a pool: one connection LISTENs on highwater_applied (the
// trigger notify_applied sends the consumer's name whenever one of its cursors moves), so the
// wait returns as soon as the dispatcher committed, without polling the database hard. It still
// re-checks on the backoff schedule, in case a notification is missed.
func waitListening(ctx context.Context, pool *pgxpool.Pool, consumer string, args []any, deadline time.Time) (res WaitResult, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return WaitResult{}, err
	}
	defer func() { giveBack(ctx, conn) }()
	if _, err := conn.Exec(ctx, "LISTEN "+appliedChannel); err != nil {
		return WaitResult{}, err
	}
	delay := firstDelay
	for {
		applied, err := checkApplied(ctx, conn, consumer, args)
		if err != nil || applied {
			return WaitResult{Applied: applied}, err
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return WaitResult{}, nil
		}
		woken, err := awaitNotification(ctx, conn, consumer, min(delay, remaining))
		if err != nil {
			return WaitResult{}, err
		}
		if !woken {
			delay = min(delay*2, maxDelay)
		}
	}
}

// awaitNotification waits up to d for a notification naming consumer. It returns false when d
// ran out, and an error when ctx ended or the connection broke.
func awaitNotification(ctx context.Context, conn *pgxpool.Conn, consumer string, d time.Duration) (bool, error) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		n, err := conn.Conn().WaitForNotification(wctx)
		if err != nil {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			if errors.Is(wctx.Err(), context.DeadlineExceeded) && !conn.Conn().IsClosed() {
				return false, nil
			}
			return false, err
		}
		// Other consumers' cursor moves are not ours: keep waiting out the same interval.
		if n.Channel == appliedChannel && n.Payload == consumer {
			return true, nil
		}
	}
}

// giveBack returns the connection to the pool as it was lent: not listening, and without queued
// notifications that the next borrower would otherwise receive. A connection that broke is
// closed, which makes the pool drop it.
func giveBack(ctx context.Context, conn *pgxpool.Conn) {
	defer conn.Release()
	c := conn.Conn()
	if c.IsClosed() {
		return
	}
	// The caller's context may be what ended the wait: UNLISTEN regardless, briefly.
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(uctx, "UNLISTEN "+appliedChannel); err != nil {
		_ = c.Close(uctx)
		return
	}
	// With a context already done, WaitForNotification hands out queued notifications and
	// returns at once when there are none, without touching the connection.
	done, stop := context.WithCancel(ctx)
	stop()
	for {
		if n, _ := c.WaitForNotification(done); n == nil {
			return
		}
	}
}
