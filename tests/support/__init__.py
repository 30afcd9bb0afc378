"""Fixtures' helpers: the services the suite starts, the whole stack, models."""
