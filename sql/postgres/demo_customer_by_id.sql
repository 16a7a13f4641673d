SELECT id, name, region FROM demo_customers WHERE id = %s
