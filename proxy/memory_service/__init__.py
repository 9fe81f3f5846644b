"""The memory-service client: every call memplane makes to a memory service goes through
`MemoryService` (client.py) — the proxy's recall, retain delivery and backfill, forget, the
inspector, `store_memory`, the CLI's `memory export`/`import` and `compile --describe SERVICE=URL`."""

from .answers import MAX_RECALL_BYTES, RecallOutcome, deadline_ms, recalled_memories
from .client import MemoryService
from .deadlines import RecallDeadlines
from .errors import BatchUnsupported, MemoryServiceError, RetryableRetainError

__all__ = ["MAX_RECALL_BYTES", "BatchUnsupported", "MemoryService", "MemoryServiceError", "RecallDeadlines",
           "RecallOutcome", "RetryableRetainError", "deadline_ms", "recalled_memories"]
