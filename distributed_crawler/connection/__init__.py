"""Redis clients for every topology, outage handling, untrusted data."""
