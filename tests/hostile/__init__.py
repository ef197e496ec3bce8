"""A local site built to hurt crawlers, on loopback, for the safety tests (docs/security.md).

One module per family of vectors; each serves from a server bound to 127.0.0.1 (or a second
loopback address standing in for an internal service) on a free port and is stopped by its test.
"""
