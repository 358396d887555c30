package highwater_test

// Token + WaitApplied over SQL against real dispatchers delivering to a SQL sink: once the wait
// returns, the read model holds the write.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	highwater "github.com/highwater-dev/highwater/clients/go"
)

type order struct {
	id    string
	token uint64
}

// placeOrder commits one OrderPlaced for a new order, taking the token as an application would:
// Token after the last append, inside the transaction.
func placeOrder(t *testing.T, total int) order {
	t.Helper()
	ctx := context.Background()
	o := order{id: uid("order")}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := highwater.Append(ctx, tx, highwater.Event{
			StreamType: "order", StreamID: o.id, Type: "OrderPlaced",
			Payload: orderPlaced{OrderID: o.id, Total: float64(total)},
		}); err != nil {
			return err
		}
		var err error
		o.token, err = highwater.Token(ctx, tx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// projected is the read model's total for the order, or -1 when it has no row.
func projected(t *testing.T, table, orderID string) int {
	t.Helper()
	var total int
	err := pool.QueryRow(context.Background(), `SELECT total::int FROM `+table+` WHERE order_id = $1`, orderID).Scan(&total)
	if errors.Is(err, pgx.ErrNoRows) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return total
}

func TestWaitAppliedOverSQL(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	dbs := []struct {
		name string
		db   highwater.Querier
	}{
		{"*pgxpool.Pool (LISTEN highwater_applied)", pool},
		{"*sql.DB (polled)", sqlDB},
		{"*pgx.Conn (polled)", conn},
	}
	for _, d := range dbs {
		t.Run(d.name, func(t *testing.T) {
			// Several rounds: a wait that returned early would sooner or later find no row.
			for i := range 5 {
				o := placeOrder(t, 100+i)
				r, err := highwater.WaitApplied(ctx, d.db, "order-projection", o.token, 10*time.Second)
				if err != nil || !r.Applied {
					t.Fatalf("round %d: %+v %v", i, r, err)
				}
				if got := projected(t, "order_totals", o.id); got != 100+i {
					t.Fatalf("round %d: the read model has %d, want %d", i, got, 100+i)
				}
			}
		})
	}
}

func TestWaitHoldsUntilALateDispatcherApplied(t *testing.T) {
	ctx := context.Background()
	o := placeOrder(t, 7)
	started := time.Now()
	type result struct {
		r   highwater.WaitResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := highwater.WaitApplied(ctx, pool, "late-projection", o.token, 30*time.Second)
		done <- result{r, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("no dispatcher runs the group late yet, the wait must hold; it returned %+v", r)
	case <-time.After(500 * time.Millisecond):
	}
	if got := projected(t, "late_totals", o.id); got != -1 {
		t.Fatalf("late_totals has the order before its dispatcher ran")
	}
	late, err := startDispatcher("late")
	if err != nil {
		t.Fatal(err)
	}
	defer late.stop()
	r := <-done
	if r.err != nil || !r.r.Applied {
		t.Fatalf("%+v", r)
	}
	if time.Since(started) < 500*time.Millisecond {
		t.Errorf("returned too early")
	}
	if got := projected(t, "late_totals", o.id); got != 7 {
		t.Errorf("late_totals has %d, want 7", got)
	}
}

func TestWaitTimesOutForAConsumerNoDispatcherRuns(t *testing.T) {
	ctx := context.Background()
	for _, d := range []highwater.Querier{pool, sqlDB} {
		t.Run(typeName(d), func(t *testing.T) {
			o := placeOrder(t, 1)
			started := time.Now()
			r, err := highwater.WaitApplied(ctx, d, "stalled", o.token, 300*time.Millisecond)
			took := time.Since(started)
			if err != nil || r.Applied {
				t.Fatalf("%+v %v, want not applied and no error", r, err)
			}
			if took < 300*time.Millisecond || took > 3*time.Second {
				t.Errorf("returned after %v, timeout 300ms", took)
			}
		})
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *pgxpool.Pool:
		return "pgxpool"
	default:
		return "database-sql"
	}
}

func TestWaitEndsWithItsContext(t *testing.T) {
	o := placeOrder(t, 1)
	for _, d := range []highwater.Querier{pool, sqlDB} {
		t.Run(typeName(d), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			started := time.Now()
			_, err := highwater.WaitApplied(ctx, d, "stalled", o.token, 10*time.Second)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			if took := time.Since(started); took > 2*time.Second {
				t.Errorf("returned %v after the cancel", took)
			}
		})
	}
}

func TestWaitRefusals(t *testing.T) {
	ctx := context.Background()
	o := placeOrder(t, 1)
	t.Run("unknown consumer: HW010", func(t *testing.T) {
		_, err := highwater.WaitApplied(ctx, pool, "no-such-consumer", o.token, time.Second)
		var e *highwater.UnknownConsumer
		if !errors.As(err, &e) || e.Consumer != "no-such-consumer" || e.Err.Code != "HW010" {
			t.Fatalf("got %T %v", err, err)
		}
		assertChain(t, err, highwater.ErrUnknownConsumer, "HW010")
	})
	t.Run("token ahead of the database: HW011", func(t *testing.T) {
		_, err := highwater.WaitApplied(ctx, sqlDB, "order-projection", 999999999999, time.Second)
		var e *highwater.Error
		if !errors.As(err, &e) || e.Code != "HW011" {
			t.Fatalf("got %T %v", err, err)
		}
		assertChain(t, err, highwater.ErrTokenAhead, "HW011")
	})
	t.Run("an instance for a Shared consumer: HW012", func(t *testing.T) {
		_, err := highwater.WaitApplied(ctx, pool, "order-projection", o.token, time.Second, highwater.Instance("pod-1"))
		assertChain(t, err, highwater.ErrBadArgument, "HW012")
	})
}

func TestThePoolGetsItsConnectionBackNotListening(t *testing.T) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // the wait and the check below share the one connection
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	o := placeOrder(t, 3)
	if r, err := highwater.WaitApplied(ctx, one, "order-projection", o.token, 10*time.Second); err != nil || !r.Applied {
		t.Fatalf("%+v %v", r, err)
	}
	// Notifications naming the consumer, sent all through a wait that times out: each wakes it
	// for a check, and those that arrive during a check are queued on the connection. None may
	// be left there for the pool's next borrower.
	stop := make(chan struct{})
	noise := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				noise <- nil
				return
			default:
			}
			if _, err := pool.Exec(ctx, `SELECT pg_notify('highwater_applied', 'stalled')`); err != nil {
				noise <- err
				return
			}
		}
	}()
	r, err := highwater.WaitApplied(ctx, one, "stalled", o.token, 300*time.Millisecond)
	close(stop)
	if err := <-noise; err != nil {
		t.Fatal(err)
	}
	if err != nil || r.Applied {
		t.Fatalf("%+v %v", r, err)
	}
	c, err := one.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_listening_channels()`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d channels listened to after the waits (%v)", n, err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if got, err := c.Conn().WaitForNotification(short); got != nil {
		t.Errorf("the connection came back with a notification queued: %+v (%v)", got, err)
	}
}
