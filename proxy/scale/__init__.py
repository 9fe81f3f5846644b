"""More than one proxy (`--ledger redis`): shared ledger, limits, explanations and turn blocks on Redis."""
