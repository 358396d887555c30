-- The read model that examples/order-projection.yaml maintains.
CREATE TABLE IF NOT EXISTS order_totals (
    order_id      text PRIMARY KEY,
    total         numeric NOT NULL,
    status        text NOT NULL,
    last_event_id bigint NOT NULL
);
