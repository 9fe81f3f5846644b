"""A scripted OpenAI-compatible chat completions endpoint for the curator's tests and bench.

Strict where the real API is strict (https://platform.openai.com/docs/guides/structured-outputs):
a missing bearer token is 401; a body without `model` or `messages`, or a `json_schema`
response_format whose schema is not strict-compatible (every object `additionalProperties:
false`, every property `required`) is 400, in OpenAI's error format. Answers come from a script:
a callable of the request body returning the content string, or an `Unavailable(status)`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass
class Unavailable:
    status: int = 503


def _error(status: int, message: str, param: str | None = None, code: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def _strict_problem(schema: Any, path: str = "schema") -> str | None:
    """Why OpenAI's strict mode would refuse this schema, or None."""
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            if schema.get("additionalProperties") is not False:
                return f"{path}: 'additionalProperties' is required to be supplied and to be false"
            props = schema.get("properties", {})
            if sorted(schema.get("required", [])) != sorted(props):
                return f"{path}: 'required' is required to be supplied and to be an array including every key in properties"
        for k, v in schema.items():
            if (problem := _strict_problem(v, f"{path}.{k}")) is not None:
                return problem
    elif isinstance(schema, list):
        for i, v in enumerate(schema):
            if (problem := _strict_problem(v, f"{path}[{i}]")) is not None:
                return problem
    return None


def fixed_size_answer(body: dict[str, Any], words: int = 30) -> str:
    """An answer of a fixed size that cites the first message: what the cost bench feeds on."""
    name = body["response_format"]["json_schema"]["name"]
    filler = " ".join(["word"] * words)
    if name == "memplane_consolidation":
        return orjson.dumps({"duplicates": [], "superseded": [], "prune": []}).decode()
    return orjson.dumps({"summary": filler, "directives": [],
                         "facts": [{"topic": "filler", "text": filler, "sources": ["m1"], "importance": 0.5}]}).decode()


@dataclass
class FakeCuratorLLM:
    script: Callable[[dict[str, Any]], str | Unavailable] = fixed_size_answer
    requests: list[dict[str, Any]] = field(default_factory=list)
    usage: bool = True  # report token usage like OpenAI does

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        return app

    async def _complete(self, request: web.Request) -> web.Response:
        if not request.headers.get("Authorization", "").startswith("Bearer "):
            return _error(401, "You didn't provide an API key.", code="invalid_api_key")
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _error(400, "We could not parse the JSON body of your request.")
        if not isinstance(body, dict):
            return _error(400, "The request body must be a JSON object.")
        if not isinstance(body.get("model"), str) or not body["model"]:
            return _error(400, "you must provide a model parameter", "model")
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(
                isinstance(m, dict) and m.get("role") in ("system", "developer", "user", "assistant")
                and isinstance(m.get("content"), str) for m in msgs):
            return _error(400, "Invalid 'messages': a non-empty array of messages is required.", "messages")
        rf = body.get("response_format")
        if rf is not None:
            if not isinstance(rf, dict) or rf.get("type") not in ("text", "json_object", "json_schema"):
                return _error(400, "Invalid 'response_format.type'.", "response_format.type")
            if rf["type"] == "json_schema":
                js = rf.get("json_schema")
                if not isinstance(js, dict) or not _NAME.match(str(js.get("name", ""))):
                    return _error(400, "Invalid 'response_format.json_schema.name'.", "response_format.json_schema.name")
                if js.get("strict") and (problem := _strict_problem(js.get("schema"))) is not None:
                    return _error(400, f"Invalid schema for response_format '{js['name']}': {problem}.",
                                  "response_format", "invalid_json_schema")
        self.requests.append(body)
        content = self.script(body)
        if isinstance(content, Unavailable):
            return _error(content.status, "The server is overloaded or not ready yet.")
        prompt_tokens = sum(len(m["content"]) for m in msgs) // 4 + 4 * len(msgs)
        doc: dict[str, Any] = {
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content, "refusal": None}}]}
        if self.usage:
            doc["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": len(content) // 4,
                            "total_tokens": prompt_tokens + len(content) // 4}
        return web.Response(body=orjson.dumps(doc), content_type="application/json")
