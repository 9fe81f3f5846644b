"""The `memplane` command line: wires the proxy, the memory adapters and the compiler together."""
