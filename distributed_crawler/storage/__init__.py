"""Idempotent item storage and its pipeline."""
