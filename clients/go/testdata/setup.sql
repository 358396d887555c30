-- The application's own tables (written in the same transactions as the events) and the read
-- models the test consumers build.
CREATE TABLE app_orders (
    id     text PRIMARY KEY,
    total  numeric NOT NULL,
    writer text NOT NULL
);

-- Built by the consumer order-projection (group default, a dispatcher the tests start).
CREATE TABLE order_totals (
    order_id      text PRIMARY KEY,
    total         numeric NOT NULL,
    last_event_id bigint NOT NULL
);

-- Built by the consumer late-projection (group late, whose dispatcher a test starts late).
CREATE TABLE late_totals (
    order_id      text PRIMARY KEY,
    total         numeric NOT NULL
);

-- A role without EXECUTE on highwater.append: its refusal (42501) is no highwater error.
CREATE ROLE no_grants;
GRANT USAGE ON SCHEMA highwater TO no_grants;
