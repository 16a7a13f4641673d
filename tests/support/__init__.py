"""Helpers the tests share (no test lives here)."""
