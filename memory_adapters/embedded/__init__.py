"""The embedded memory service: the engine over one SQLite file, no server to run (the default)."""
