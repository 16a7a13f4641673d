-- Gate scenarios: the memory reading's cursor over one row-returning measured statement; the statement
-- text follows on the next line. While the portal is open after FETCH ALL, the executor's sort and hash
-- memory is still allocated, so pg_backend_memory_contexts read then includes it.
DECLARE /* pg-regression-radar */ gate_memory NO SCROLL CURSOR FOR
