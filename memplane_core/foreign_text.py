"""Which parts of a request or an answer put text in the model's context that nobody in the
conversation typed — a tool's output, a fetched page, a file, a search result — read by what a part
*is* in its wire format, never by which client sent it. A memory the model writes while such text is
in play may be a hostile page's words, so it is `tainted` (docs/provenance.md, "Taint by shape").

The shapes, as the providers define them:

* OpenAI Chat Completions (API reference, `messages`): `tool` messages and the legacy `function`
  messages answer the model's calls; a `file` content part attaches a file; a search model's answer
  cites the pages it read (`annotations` of type `url_citation`).
* OpenAI Responses (openai-python `types/responses/response_input_item_param.py`): every `*_output`
  item answers a call the client ran (`function_call_output`, `custom_tool_call_output`,
  `computer_call_output`, `local_shell_call_output`, `shell_call_output`, `apply_patch_call_output`,
  …); the calls the provider runs itself carry their results (`web_search_call`, `file_search_call`
  `results`, `mcp_call` `output`, `code_interpreter_call` `outputs`); an `input_file` part attaches a file.
* Anthropic Messages (anthropic-sdk-python `types/content_block_param.py`, beta `mcp_tool_result`):
  `tool_result` answers the client's tools and every `*_tool_result` the provider's (web search, web
  fetch, code execution, bash, text editor, tool search, the MCP connector), in the user's turn or the
  assistant's; `document`, `search_result` and `container_upload` attach text, a file or a page.

Not foreign: the person's text parts, images and audio they attach (their own), system and developer
messages (the operator's), and the model's own `thinking`, `reasoning` and calls.
"""

from __future__ import annotations

from typing import Any

TOOL_ROLES = frozenset({"tool", "function"})
ATTACHED = frozenset({"document", "search_result", "container_upload", "file", "input_file"})
HOSTED_CALLS = frozenset({"web_search_call", "file_search_call", "mcp_call", "code_interpreter_call"})


def foreign_part(part: Any) -> bool:
    """One content block or part: a tool's result (any `…tool_result`) or an attachment."""
    kind = part.get("type") if isinstance(part, dict) else None
    return isinstance(kind, str) and (kind.endswith("tool_result") or kind in ATTACHED)


def foreign_item(item: Any) -> bool:
    """One message or input/output item: a tool's message, a call's output, a provider-run call with
    its results, or a message holding a foreign part."""
    if not isinstance(item, dict):
        return False
    kind, role = item.get("type"), item.get("role")
    # a role or type of another JSON type (a list, an object) is no such item, and cannot be hashed
    if (isinstance(role, str) and role in TOOL_ROLES) or (isinstance(kind, str) and (kind.endswith("_output") or kind in HOSTED_CALLS)):
        return True
    content = item.get("content")
    return isinstance(content, list) and any(foreign_part(p) for p in content)


def carries_foreign_text(body: Any) -> bool:
    """The request's conversation (`messages`, or Responses `input`) holds foreign text."""
    if not isinstance(body, dict):
        return False
    items = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    return isinstance(items, list) and any(foreign_item(m) for m in items)


def answer_carries_foreign_text(doc: Any) -> bool:
    """A provider's answer holds the results of tools it ran itself (Anthropic `content` blocks,
    Responses `output` items) or cites the web pages it searched (a Chat search model's
    `url_citation` annotations): the model read them before it wrote the rest of the answer."""
    if not isinstance(doc, dict):
        return False
    if isinstance(doc.get("choices"), list):
        return any(_cites_pages(choice) for choice in doc["choices"])
    blocks = doc.get("content") if isinstance(doc.get("content"), list) else doc.get("output")
    return isinstance(blocks, list) and any(foreign_part(b) or foreign_item(b) for b in blocks)


def _cites_pages(choice: Any) -> bool:
    message = choice.get("message") if isinstance(choice, dict) else None
    notes = message.get("annotations") if isinstance(message, dict) else None
    return isinstance(notes, list) and any(isinstance(n, dict) and n.get("type") == "url_citation" for n in notes)
