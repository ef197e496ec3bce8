"""Downloader middlewares: robots.txt, retries, proxies, politeness."""
