"""Publishing what the radar found: the weekly report (summary, words, Markdown, HTML), plots, console
tables, notebook helpers, Markdown tables for Dagster, and rows for scripts and people (``output``).
"""
