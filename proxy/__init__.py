"""memplane: a memory proxy for LLM agents."""

__version__ = "0.1.0"
