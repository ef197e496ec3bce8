"""Heartbeats, alerts, status, dashboard and Prometheus."""
