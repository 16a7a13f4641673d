-- The demo's schema: customers and orders with an index the "deploy" drops, and an append-only event log.
-- Run with client-side parameter binding (psycopg ClientCursor): %% is a literal modulo operator.
DROP TABLE IF EXISTS demo_events, demo_orders, demo_customers;
CREATE TABLE demo_customers (id int PRIMARY KEY, name text NOT NULL, region int NOT NULL, last_seen timestamptz);
CREATE TABLE demo_orders (id bigserial PRIMARY KEY, customer_id int NOT NULL, amount numeric(12, 2) NOT NULL,
                          created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE demo_events (id bigserial PRIMARY KEY, kind int NOT NULL, payload text);
INSERT INTO demo_customers SELECT g, 'customer ' || g, g %% 17, NULL FROM generate_series(1, %(customers)s) g;
INSERT INTO demo_orders (customer_id, amount)
  SELECT ((g::bigint * 7919) %% %(customers)s + 1)::int, (g %% 997) / 10.0 FROM generate_series(1, %(orders)s) g;
CREATE INDEX demo_orders_customer_id_idx ON demo_orders (customer_id);
ANALYZE demo_customers, demo_orders;
