-- Built-in gate scenarios (jobs.gate.scenario.builtin_suite; the format is documented in that module).
-- Every statement carries the radar's marker after its first keyword (jobs/query/texts.py), so a
-- radar that also monitors a gate target recognises these statements as its own.
-- The data is deterministic (generate_series arithmetic, no random()): 10,000 customers with exactly
-- 20 orders each (200,000 orders, scattered over the table), and an events table for the write burst.

-- @shared
CREATE /* pg-regression-radar */ TABLE IF NOT EXISTS radar_gate_customers (
    id integer PRIMARY KEY,
    region integer NOT NULL,
    name text NOT NULL
);
CREATE /* pg-regression-radar */ TABLE IF NOT EXISTS radar_gate_orders (
    id integer PRIMARY KEY,
    customer_id integer NOT NULL,
    status text NOT NULL,
    amount numeric(10, 2) NOT NULL,
    created date NOT NULL
);
CREATE /* pg-regression-radar */ TABLE IF NOT EXISTS radar_gate_events (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account integer NOT NULL,
    amount numeric(10, 2) NOT NULL,
    payload text NOT NULL
);
-- Filled only when empty: a second run of @shared on the same database costs two index probes.
INSERT /* pg-regression-radar */ INTO radar_gate_customers (id, region, name)
SELECT g, g % 50, 'customer ' || g
FROM generate_series(1, 10000) AS g
WHERE NOT EXISTS (SELECT FROM radar_gate_customers);
INSERT /* pg-regression-radar */ INTO radar_gate_orders (id, customer_id, status, amount, created)
SELECT g,
       (g::bigint * 7919) % 10000 + 1,
       (ARRAY['new', 'paid', 'shipped', 'returned'])[(g / 10000) % 4 + 1],
       ((g::bigint * 104729) % 100000) / 100.0,
       date '2026-01-01' + g % 365
FROM generate_series(1, 200000) AS g
WHERE NOT EXISTS (SELECT FROM radar_gate_orders);
CREATE /* pg-regression-radar */ INDEX IF NOT EXISTS radar_gate_orders_customer_id
    ON radar_gate_orders (customer_id);
ANALYZE /* pg-regression-radar */ radar_gate_customers, radar_gate_orders, radar_gate_events;

-- @scenario point_lookup
-- One order by its primary key, 20 times per measurement: planning, executor start-up and the client
-- round trip dominate (about 0.1 ms each).
-- @option params = [{ int_range = [1, 200000] }]
-- @option repeat = 20
-- @benchmark
SELECT /* pg-regression-radar */ id, customer_id, status, amount, created
FROM radar_gate_orders
WHERE id = $1;

-- @scenario range_scan
-- 1,000 consecutive primary keys through the index, aggregated on the server (one row back).
-- @option params = [{ int_range = [1, 199000] }]
-- @option repeat = 5
-- @benchmark
SELECT /* pg-regression-radar */ count(*), sum(amount), min(created), max(created)
FROM radar_gate_orders
WHERE id BETWEEN $1 AND $1 + 999;

-- @scenario join
-- 20 customers and their 20 orders each: 400 rows through the customer_id index.
-- @option params = [{ int_range = [1, 9981] }]
-- @option repeat = 3
-- @benchmark
SELECT /* pg-regression-radar */ c.id, c.name, o.id, o.status, o.amount
FROM radar_gate_customers AS c
JOIN radar_gate_orders AS o ON o.customer_id = c.id
WHERE c.id BETWEEN $1 AND $1 + 19
ORDER BY c.id, o.id;

-- @scenario aggregate_sort
-- GROUP BY over all 200,000 orders (10,000 groups) and a full sort of the groups, about 50 ms. Under the
-- default work_mem (4MB) both stay in memory (HashAggregate in one batch, quicksort); under a small one
-- (64kB) the sort spills to temp files (external merge; checked with EXPLAIN (ANALYZE, BUFFERS) on
-- PostgreSQL 18). OFFSET without LIMIT keeps the full sort (no top-N heapsort) while sending only the
-- last 100 groups to the client. Parallel workers are off so the spill does not depend on how many
-- workers a server launches.
-- @option settings = { max_parallel_workers_per_gather = 0 }
-- @benchmark
SELECT /* pg-regression-radar */ customer_id, count(*) AS orders, sum(amount) AS total
FROM radar_gate_orders
GROUP BY customer_id
ORDER BY total DESC, customer_id
OFFSET 9900;

-- @scenario write_burst
-- 2,000 inserted and about 40 updated rows in one transaction: WAL, index maintenance and the commit.
-- The before section empties the table, so every measurement writes into the same state.
-- @option params = [{ int_range = [0, 49] }]
-- @before
TRUNCATE /* pg-regression-radar */ radar_gate_events RESTART IDENTITY;
-- @benchmark
BEGIN /* pg-regression-radar */;
-- @A
INSERT /* pg-regression-radar */ INTO radar_gate_events (account, amount, payload)
SELECT g % 50, (g % 1000) / 10.0, md5(g::text)
FROM generate_series(1, 2000) AS g;
UPDATE /* pg-regression-radar */ radar_gate_events
SET amount = amount + 1
WHERE account = $1;
-- @B
COMMIT /* pg-regression-radar */;
