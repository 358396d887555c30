// Peer for the drain benchmark: inserts N River jobs (InsertManyFast, COPY), then times River's
// workers completing them with a no-op worker. River is a job queue: each job is a row that is
// locked, worked and marked completed, so this is the cost users pay when they run post-commit
// work as jobs instead of consumer cursors. Prints one JSON line.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type benchArgs struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

func (benchArgs) Kind() string { return "bench" }

var done atomic.Int64

type benchWorker struct {
	river.WorkerDefaults[benchArgs]
}

func (w *benchWorker) Work(ctx context.Context, job *river.Job[benchArgs]) error {
	done.Add(1)
	return nil
}

func main() {
	url := flag.String("url", "", "PostgreSQL URL")
	n := flag.Int("n", 10000, "jobs")
	workers := flag.Int("workers", 1000, "River MaxWorkers")
	cooldown := flag.Duration("fetch-cooldown", 5*time.Millisecond, "River FetchCooldown")
	flag.Parse()
	if err := run(*url, *n, *workers, *cooldown); err != nil {
		fmt.Fprintln(os.Stderr, "river peer:", err)
		os.Exit(1)
	}
}

func run(url string, n, maxWorkers int, cooldown time.Duration) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &benchWorker{})
	client, err := river.NewClient(driver, &river.Config{
		// River's defaults (100 ms fetch cooldown) cap a queue near MaxWorkers per 100 ms; a
		// short cooldown and many workers let it drain as fast as it can.
		FetchCooldown: cooldown,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:       workers,
	})
	if err != nil {
		return err
	}
	started := time.Now()
	const chunk = 1000
	for sent := 0; sent < n; sent += chunk {
		params := make([]river.InsertManyParams, 0, chunk)
		for i := sent; i < n && i < sent+chunk; i++ {
			params = append(params, river.InsertManyParams{Args: benchArgs{OrderID: "o-1", Amount: 42}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return err
		}
	}
	publishSecs := time.Since(started).Seconds()
	started = time.Now()
	if err := client.Start(ctx); err != nil {
		return err
	}
	for done.Load() < int64(n) {
		time.Sleep(time.Millisecond)
	}
	drainSecs := time.Since(started).Seconds()
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = client.Stop(stopCtx)
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"peer": "river", "events": n,
		"publish_per_s": float64(n) / publishSecs, "drain_per_s": float64(n) / drainSecs,
	})
}
