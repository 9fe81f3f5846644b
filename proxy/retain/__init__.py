"""At-least-once retain delivery: ledger entries to the memory service, in order, after restarts."""
