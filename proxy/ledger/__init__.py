"""The durable per-agent ledger: JSONL files (one proxy) or Redis Streams (`--ledger redis`)."""
