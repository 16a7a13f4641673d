UPDATE demo_customers SET last_seen = now() WHERE id = %s
