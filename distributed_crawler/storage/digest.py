"""The content digest that decides whether a page changed (docs/recrawl.md).

A digest of the extracted text with whitespace normalised, never of the markup: a new ad slot,
a rotated CSRF token or re-indented HTML must not count as a change. Imports nothing of ours:
storage (the `content_hash` column) and the recrawl middlewares both use it, so the stored `content_hash` and the
schedule's change detection always agree.
"""

from __future__ import annotations

import hashlib

DIGEST_BYTES = 8  # 16 hex characters: collisions stay negligible below billions of URLs


def normalise_text(text: str) -> str:
    """Runs of whitespace -> one space, stripped."""
    return " ".join(text.split())


def content_digest(text: str) -> str:
    """Hex digest of `text` with whitespace normalised."""
    data = normalise_text(text).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).hexdigest()


def body_digest(body: bytes) -> str:
    """Digest of a response body that yielded no item with a `text` field (feeds, JSON, ...)."""
    return hashlib.blake2b(body, digest_size=DIGEST_BYTES).hexdigest()
