"""Coding agents through memplane (issue 37): the person's words found among a client's scaffolding,
the project a turn works in, what a coding turn leaves in memory, and which calls are side calls."""
