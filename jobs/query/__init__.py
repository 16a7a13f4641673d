"""The vocabulary every stage shares, with no I/O: query texts, query identity, what a series is."""
