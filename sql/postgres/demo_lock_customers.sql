-- The demo's harmless latency bump: writers of demo_customers wait while this lock is held.
LOCK TABLE demo_customers IN EXCLUSIVE MODE
