"""Tests with no server, no network, no Dagster run, no browser and no object store: `make test-unit`."""
