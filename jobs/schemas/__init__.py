"""The shapes of every lake table, declared once (``registry.TABLES`` lists them all)."""
