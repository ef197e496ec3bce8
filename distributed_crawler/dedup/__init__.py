"""Seen-URL memory: canonical fingerprints and the Bloom dupefilter."""
