package highwater

import (
	"context"
	"encoding/json"
	"time"
)

// WaitResult is how a wait ended.
type WaitResult struct {
	// Applied is true when the consumer applied everything the token covers (for a SQL sink:
	// committed in its tables), false when the timeout ran out first.
	Applied bool
	// Pending is, on an HTTP timeout, the dispatcher's description of the shards that held the
	// wait (JSON as it sent it); nil otherwise.
	Pending json.RawMessage
}

// WaitOption changes a wait.
type WaitOption func(*waitOptions)

type waitOptions struct {
	instance string
}

// Instance waits for one instance of a PerInstance consumer only. Without it a wait is for the
// Shared consumer's shard, or for every instance of a PerInstance consumer.
func Instance(id string) WaitOption {
	return func(o *waitOptions) { o.instance = id }
}

func collect(opts []WaitOption) waitOptions {
	var o waitOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

const appliedSQL = `SELECT highwater.applied($1::text, $2::text::xid8, $3::text)`

// The backoff between two checks when no notification wakes the wait (and the safety net when
// one should have): short first, since the dispatcher usually applies within milliseconds.
const (
	firstDelay = 10 * time.Millisecond
	maxDelay   = 250 * time.Millisecond
)

func appliedArgs(consumer string, token uint64, o waitOptions) []any {
	var instance any
	if o.instance != "" {
		instance = o.instance
	}
	return []any{consumer, FormatToken(token), instance}
}

// sleep waits d, or returns ctx's error if ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
