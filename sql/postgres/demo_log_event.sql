INSERT INTO demo_events (kind, payload) VALUES (%s, %s)
