"""Documentation tooling (not part of the installed package): the reference pages of the docs site,
generated from the code at every `make docs` build (``docsgen.reference``) by an mkdocs hook
(``docsgen/hooks.py``). It lives outside ``jobs/`` because it imports Dagster for the assets page."""
