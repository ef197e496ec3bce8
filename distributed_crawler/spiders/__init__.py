"""Spider base classes fed from Redis."""
