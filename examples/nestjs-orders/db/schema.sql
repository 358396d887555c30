-- The example's own tables (highwater's schema comes from `highwater migrate`).

-- The write model: the TypeORM entity Order (src/orders/order.entity.ts). POST /orders inserts a
-- row here and appends OrderPlaced in the same transaction.
CREATE TABLE IF NOT EXISTS orders (
    id          uuid PRIMARY KEY,
    customer_id text NOT NULL,
    lines       jsonb NOT NULL,
    total_cents integer NOT NULL CHECK (total_cents >= 0),
    status      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS orders_customer_id ON orders (customer_id);

-- The read model: built only by the consumer of consumers/order-summary.yaml (run by `highwater
-- dispatch`), read by GET /orders/:id/summary. applied_at shows how far it trails the write.
CREATE TABLE IF NOT EXISTS order_summary (
    order_id      text PRIMARY KEY,
    customer_id   text NOT NULL,
    item_count    integer NOT NULL,
    total_cents   integer NOT NULL,
    status        text NOT NULL,
    placed_at     timestamptz NOT NULL,
    last_event_id bigint NOT NULL,
    applied_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
