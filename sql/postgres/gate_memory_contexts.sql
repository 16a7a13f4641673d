-- Gate scenarios: the bytes held by every memory context of this backend (PostgreSQL 14+).
SELECT /* pg-regression-radar */ pg_catalog.sum(total_bytes)::float8 AS total_bytes
FROM pg_catalog.pg_backend_memory_contexts
