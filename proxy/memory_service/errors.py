"""What a call to a memory service can end in, besides its answer: one error family, so callers
catch one thing and say it their way (a recall reads it as "no memories", retain as "try again")."""

from __future__ import annotations


class MemoryServiceError(Exception):
    """The memory service did not do what was asked; the message is for a person.

    `status` is the HTTP status (None: no answer), `detail` the service's own error message (its
    `{"error": {"message": …}}`, else the start of its answer), `unreachable` says nothing answered
    (`timed_out`: not in time), `reason` is the short cause for logs (`status 503`, `ClientOSError`)."""

    def __init__(self, message: str, *, status: int | None = None, detail: str | None = None,
                 unreachable: bool = False, timed_out: bool = False, service_message: str | None = None,
                 reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail
        self.unreachable = unreachable
        self.timed_out = timed_out
        self.service_message = service_message  # only what the service said in its JSON error
        self.reason = reason or (f"status {status}" if status is not None else message)


class RetryableRetainError(MemoryServiceError):
    """A 5xx, 429 or transport failure: worth another try (after `retry_after` seconds when the
    service said so in a Retry-After header)."""

    def __init__(self, message: str, retry_after: float | None = None, **kw) -> None:
        super().__init__(message, reason=message, **kw)
        self.retry_after = retry_after


class BatchUnsupported(MemoryServiceError):
    """The service has no batch endpoint after all (404/405): send those retains one by one."""
