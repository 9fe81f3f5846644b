"""Memory services behind the memplane contract (CONTRACT §3–§9)."""
