SELECT count(*), sum(amount) FROM demo_orders WHERE customer_id = %s
