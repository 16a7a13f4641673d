"""Tests on real parts: embedded PostgreSQL servers, Dagster materializations, a browser, a local S3."""
