-- The "bad deploy": a migration that drops the index the hottest query depends on.
DROP INDEX IF EXISTS demo_orders_customer_id_idx
