"""Query fingerprints: kept importable; the identity rules (fingerprints and series) live in
``jobs.detect.identity``."""

from jobs.detect.identity import (
    FINGERPRINT_SOURCES,
    attach_fingerprints,
    fingerprint_text,
    fingerprint_texts,
    queryid_fingerprint,
)

__all__ = [
    "FINGERPRINT_SOURCES",
    "attach_fingerprints",
    "fingerprint_text",
    "fingerprint_texts",
    "queryid_fingerprint",
]
