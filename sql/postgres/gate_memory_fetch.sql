-- Gate scenarios: run the memory reading's cursor to its end.
FETCH /* pg-regression-radar */ ALL FROM gate_memory
