"""Spiders for fault-injection tests (loaded with -s SPIDER_MODULES=...,tests.spiders)."""
