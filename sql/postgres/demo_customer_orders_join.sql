SELECT c.name, count(o.id) FROM demo_customers c JOIN demo_orders o ON o.customer_id = c.id
WHERE c.region = %s AND o.id > %s GROUP BY c.name ORDER BY 2 DESC LIMIT 5
