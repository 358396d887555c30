// The README's example run as an application would run it. test.sh writes README.md's "Example"
// block, as written, beside this file (example.go, after a package clause) in a module that
// requires the client through the README's install commands (its replace directive), then runs
// this program against the test cluster while a dispatcher runs: a write that commits must come
// back applied, and a write the database refuses must come back as its error, not be overwritten
// by the wait's.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// The table the README's example updates.
	orderID := fmt.Sprintf("readme-%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, state text NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO orders (id, state) VALUES ($1, 'new')`, orderID); err != nil {
		log.Fatal(err)
	}

	applied, err := placeOrder(ctx, pool, orderID)
	if err != nil || !applied {
		log.Fatalf("README example: placeOrder returned applied %v, error %v; want applied true, no error", applied, err)
	}
	var state string
	if err := pool.QueryRow(ctx, `SELECT state FROM orders WHERE id = $1`, orderID).Scan(&state); err != nil {
		log.Fatal(err)
	}
	if state != "placed" {
		log.Fatalf("README example: order %s is %q after placeOrder, want placed", orderID, state)
	}

	// The same call on connections whose transactions are read-only: the UPDATE is refused
	// (SQLSTATE 25006), nothing is written, and placeOrder must say so.
	roCfg := cfg.Copy()
	roCfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	ro, err := pgxpool.NewWithConfig(ctx, roCfg)
	if err != nil {
		log.Fatal(err)
	}
	defer ro.Close()
	applied, err = placeOrder(ctx, ro, orderID)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		log.Fatalf("README example: placeOrder with a write the database refuses returned applied %v, error %v; want the write's error (SQLSTATE 25006): a failed write went unnoticed", applied, err)
	}
	fmt.Printf("README example: order %s applied; a refused write returned its error (SQLSTATE %s)\n", orderID, pgErr.Code)
}
