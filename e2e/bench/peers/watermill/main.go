// Peer for the drain benchmark: publishes N messages with watermill-sql's publisher, then times
// one consumer group draining them with watermill-sql's subscriber (offsets table per group, the
// same pattern as highwater's cursor). Prints one JSON line.
package main

import (
	"context"
	stdSQL "database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/jackc/pgx/v5/stdlib"
)

func main() {
	url := flag.String("url", "", "PostgreSQL URL")
	n := flag.Int("n", 10000, "messages")
	batch := flag.Int("batch", 100, "subscriber batch size")
	flag.Parse()
	if err := run(*url, *n, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "watermill peer:", err)
		os.Exit(1)
	}
}

func run(url string, n, batch int) error {
	db, err := stdSQL.Open("pgx", url)
	if err != nil {
		return err
	}
	defer db.Close()
	logger := watermill.NopLogger{}
	topic := "bench"
	pub, err := sql.NewPublisher(sql.BeginnerFromStdSQL(db), sql.PublisherConfig{
		SchemaAdapter:        sql.DefaultPostgreSQLSchema{},
		AutoInitializeSchema: true,
	}, logger)
	if err != nil {
		return err
	}
	payload := []byte(`{"order_id":"o-1","amount":42}`)
	started := time.Now()
	const chunk = 1000
	for sent := 0; sent < n; sent += chunk {
		msgs := make([]*message.Message, 0, chunk)
		for i := sent; i < n && i < sent+chunk; i++ {
			msgs = append(msgs, message.NewMessage(watermill.NewUUID(), payload))
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			return err
		}
	}
	publishSecs := time.Since(started).Seconds()

	sub, err := sql.NewSubscriber(sql.BeginnerFromStdSQL(db), sql.SubscriberConfig{
		SchemaAdapter:    sql.DefaultPostgreSQLSchema{SubscribeBatchSize: batch},
		OffsetsAdapter:   sql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
		ConsumerGroup:    "bench",
		PollInterval:     10 * time.Millisecond,
		ResendInterval:   time.Second,
		RetryInterval:    10 * time.Millisecond,
	}, logger)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started = time.Now()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		return err
	}
	for got := 0; got < n; got++ {
		m := <-ch
		m.Ack()
	}
	drainSecs := time.Since(started).Seconds()
	cancel()
	_ = sub.Close()
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"peer": "watermill-sql", "events": n,
		"publish_per_s": float64(n) / publishSecs, "drain_per_s": float64(n) / drainSecs,
	})
}
