"""Local stand-ins used by the tests, the demo and the benchmarks."""
