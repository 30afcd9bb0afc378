"""The embedded development stack: the servers ``make run``, the tests and the
benchmarks start on this machine."""
