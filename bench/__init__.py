"""memplane benchmarks: every number is printed next to a baseline measured in the same run."""
