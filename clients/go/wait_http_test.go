package highwater_test

// Dispatcher.WaitApplied against a real dispatcher's GET /v1/consumers/NAME/applied.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	highwater "github.com/highwater-dev/highwater/clients/go"
)

func TestWaitAppliedOverHTTP(t *testing.T) {
	ctx := context.Background()
	d := highwater.Dispatcher{BaseURL: defaultDispatcher.url, AuthToken: authToken}

	t.Run("200: applied, and the read model holds the write", func(t *testing.T) {
		for i := range 3 {
			o := placeOrder(t, 200+i)
			r, err := d.WaitApplied(ctx, "order-projection", o.token, 10*time.Second)
			if err != nil || !r.Applied {
				t.Fatalf("%+v %v", r, err)
			}
			if got := projected(t, "order_totals", o.id); got != 200+i {
				t.Fatalf("the read model has %d, want %d", got, 200+i)
			}
		}
	})

	t.Run("408: not applied within the timeout, with the pending shards", func(t *testing.T) {
		o := placeOrder(t, 1)
		started := time.Now()
		r, err := d.WaitApplied(ctx, "stalled", o.token, 300*time.Millisecond)
		if err != nil || r.Applied {
			t.Fatalf("%+v %v", r, err)
		}
		// The dispatcher names the shard that held the wait, e.g. "__shared__: idle at 0/0".
		if !strings.Contains(string(r.Pending), "__shared__") {
			t.Errorf("pending %s", r.Pending)
		}
		if time.Since(started) < 300*time.Millisecond {
			t.Errorf("returned before its timeout")
		}
	})

	o := placeOrder(t, 1)
	t.Run("401: a wrong bearer token", func(t *testing.T) {
		wrong := d
		wrong.AuthToken = "wrong"
		_, err := wrong.WaitApplied(ctx, "order-projection", o.token, time.Second)
		var e *highwater.Error
		if !errors.As(err, &e) || e.Status != 401 || !strings.Contains(e.Message, "bearer token") {
			t.Fatalf("got %T %v", err, err)
		}
	})

	t.Run("404: an unknown consumer", func(t *testing.T) {
		_, err := d.WaitApplied(ctx, "no-such-consumer", o.token, time.Second)
		var e *highwater.UnknownConsumer
		if !errors.As(err, &e) || e.Consumer != "no-such-consumer" || e.Err.Status != 404 {
			t.Fatalf("got %T %v", err, err)
		}
		if !errors.Is(err, highwater.ErrUnknownConsumer) {
			t.Errorf("errors.Is(err, ErrUnknownConsumer) is false for the 404")
		}
	})

	t.Run("400: a token ahead of the database", func(t *testing.T) {
		_, err := d.WaitApplied(ctx, "order-projection", 999999999999, time.Second)
		var e *highwater.Error
		if !errors.As(err, &e) || e.Status != 400 || !strings.Contains(e.Message, "ahead of this database") {
			t.Fatalf("got %T %v", err, err)
		}
	})

	t.Run("400: a timeout above the dispatcher's 5 minutes", func(t *testing.T) {
		_, err := d.WaitApplied(ctx, "order-projection", o.token, 6*time.Minute)
		var e *highwater.Error
		if !errors.As(err, &e) || e.Status != 400 {
			t.Fatalf("got %T %v", err, err)
		}
	})

	t.Run("the context ends the request", func(t *testing.T) {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := d.WaitApplied(short, "stalled", o.token, 10*time.Second)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want context.DeadlineExceeded", err)
		}
	})
}
