// A small application using the highwater Go client as any other module would (go.mod's replace
// points at this checkout): it writes an order and its OrderPlaced event in one transaction, then
// waits until the consumer order-projection has applied it. test.sh builds and runs it as a smoke
// test of the module from outside.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	highwater "github.com/highwater-dev/highwater/clients/go"
)

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	orderID := fmt.Sprintf("example-%d", time.Now().UnixNano())
	var token uint64
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO app_orders (id, total, writer) VALUES ($1, 99.5, 'example')`, orderID); err != nil {
			return err
		}
		if _, err := highwater.Append(ctx, tx, highwater.Event{
			StreamType: "order", StreamID: orderID, Type: "OrderPlaced",
			Payload: map[string]any{"order_id": orderID, "total": 99.5},
		}); err != nil {
			return err
		}
		token, err = highwater.Token(ctx, tx)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	r, err := highwater.WaitApplied(ctx, pool, "order-projection", token, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("order %s: token %d, applied %v\n", orderID, token, r.Applied)
	if !r.Applied {
		os.Exit(2)
	}
}
