-- Gate calibration: a fixed CPU + IO probe, timed client side on each server. A temp table written and
-- read back (larger than the default temp_buffers of 8MB, so local buffers are written out), then a
-- CPU-bound aggregate. Runs as one implicit transaction (simple protocol); the table drops at its end.
CREATE /* pg-regression-radar */ TEMP TABLE gate_probe ON COMMIT DROP AS
    SELECT g AS id, pg_catalog.md5(g::text) AS pad FROM pg_catalog.generate_series(1, 150000) AS g;
SELECT /* pg-regression-radar */ pg_catalog.count(*), pg_catalog.sum(pg_catalog.length(pad)) FROM gate_probe;
SELECT /* pg-regression-radar */ pg_catalog.sum(pg_catalog.sqrt(g::float8))
FROM pg_catalog.generate_series(1, 600000) AS g
