"""Locust scenarios, the data generator and the benchmarks."""
