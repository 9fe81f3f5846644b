"""The curator's one way to reach a model: OpenAI chat completions with structured output.

Uses the official `openai` SDK against any OpenAI-compatible base URL (the operator may point it
at memplane's own proxy with an agent token, so the curator's calls are ledgered like any
other). The SDK's own retries are off: a failed extraction is retried later by the curator's
schedule, never by hammering a service that is down. SDK errors are mapped here, in one place.
The SDK is imported when a client is made: the curator is opt-in, and `import openai` costs every
memory service process ~0.9 s of CPU at start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memplane_core.tokens import estimate_tokens


if TYPE_CHECKING:
    import openai


class LLMUnavailable(Exception):
    """The model could not be asked (down, timeout, 5xx, 429, auth): try again later."""


class LLMRefused(Exception):
    """The model answered but gave no usable content (refusal, empty, cut off); `answer` holds
    what it cost, when it said."""

    def __init__(self, message: str, answer: "LLMAnswer | None" = None) -> None:
        super().__init__(message)
        self.answer = answer


@dataclass(frozen=True)
class LLMAnswer:
    content: str
    prompt_tokens: int
    completion_tokens: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class LLMClient:
    def __init__(self, base_url: str, api_key: str | None, model: str, *, timeout_s: float = 60) -> None:
        import openai

        self.model = model
        self._openai = openai
        self._client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "unused", timeout=timeout_s,
                                          max_retries=0)

    async def close(self) -> None:
        await self._client.close()

    async def structured(self, messages: list[dict[str, str]], response_format: dict[str, Any]) -> LLMAnswer:
        """One chat completion asking for `response_format`; the raw JSON text and the tokens it cost."""
        openai = self._openai
        try:
            # no temperature: reasoning models refuse any but the default
            done = await self._client.chat.completions.create(model=self.model, messages=messages,
                                                              response_format=response_format)
        except openai.APIStatusError as exc:
            raise LLMUnavailable(f"HTTP {exc.status_code}: {str(exc)[:200]}") from None
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise LLMUnavailable(f"{type(exc).__name__}: {str(exc)[:200]}") from None
        except openai.OpenAIError as exc:  # a body that is not a completion, among others
            raise LLMRefused(f"{type(exc).__name__}: {str(exc)[:200]}") from None
        usage = getattr(done, "usage", None)
        prompt = getattr(usage, "prompt_tokens", None)
        completion = getattr(usage, "completion_tokens", None)
        choice = done.choices[0] if getattr(done, "choices", None) else None
        message = getattr(choice, "message", None)
        content = getattr(message, "content", None)
        if not isinstance(prompt, int):  # an endpoint that reports no usage is still budgeted
            prompt = sum(estimate_tokens(m["content"]) for m in messages)
        if not isinstance(completion, int):
            completion = estimate_tokens(content or "")
        answer = LLMAnswer(content or "", prompt, completion)
        if not content or getattr(message, "refusal", None) or getattr(choice, "finish_reason", "stop") == "length":
            raise LLMRefused(f"no usable content (finish_reason={getattr(choice, 'finish_reason', None)})",
                             answer)
        return answer
