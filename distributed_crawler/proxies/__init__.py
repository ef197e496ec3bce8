"""The shared proxy pool."""
